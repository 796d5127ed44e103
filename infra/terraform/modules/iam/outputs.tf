output "instance_profile_names" {
  description = "Instance profile of each role: map with keys ingest, compactor and query."
  value       = { for r, p in aws_iam_instance_profile.role : r => p.name }
}

output "role_arns" {
  description = "IAM role ARN of each role: map with keys ingest, compactor and query."
  value       = { for r, role in aws_iam_role.role : r => role.arn }
}

output "role_names" {
  description = "IAM role name of each role: map with keys ingest, compactor and query."
  value       = { for r, role in aws_iam_role.role : r => role.name }
}
