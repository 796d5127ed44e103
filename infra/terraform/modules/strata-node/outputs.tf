output "autoscaling_group_name" {
  description = "Name of the auto-scaling group (scaling policies and alarms attach to it)."
  value       = aws_autoscaling_group.node.name
}

output "autoscaling_group_arn" {
  description = "ARN of the auto-scaling group."
  value       = aws_autoscaling_group.node.arn
}

output "security_group_id" {
  description = "Security group of the nodes."
  value       = aws_security_group.node.id
}

output "launch_template_id" {
  description = "Launch template of the nodes (a new version per config or binary change; instance refresh rolls it out)."
  value       = aws_launch_template.node.id
}
