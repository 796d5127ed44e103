output "bucket_name" {
  description = "The Strata bucket (store.bucket of every role)."
  value       = aws_s3_bucket.data.id
}

output "bucket_arn" {
  description = "ARN of the Strata bucket (input of the iam module)."
  value       = aws_s3_bucket.data.arn
}

output "root_prefix" {
  description = "engine.root_prefix the roles must run with (echo of the input)."
  value       = var.root_prefix
}

output "kms_key_arn" {
  description = "ARN of the customer-managed key encrypting the bucket and the log groups."
  value       = aws_kms_key.bucket.arn
}

output "log_bucket_name" {
  description = "Bucket receiving the S3 server access logs of the Strata bucket."
  value       = aws_s3_bucket.logs.id
}

output "log_bucket_arn" {
  description = "ARN of the access-log bucket."
  value       = aws_s3_bucket.logs.arn
}

output "s3_endpoint_id" {
  description = "ID of the S3 gateway VPC endpoint."
  value       = aws_vpc_endpoint.s3.id
}

output "s3_prefix_list_id" {
  description = "Prefix list of S3 in this region (security groups allow HTTPS egress to it)."
  value       = aws_vpc_endpoint.s3.prefix_list_id
}
