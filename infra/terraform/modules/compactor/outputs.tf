output "autoscaling_group_name" {
  description = "Auto-scaling group of the compaction workers."
  value       = module.nodes.autoscaling_group_name
}

output "security_group_id" {
  description = "Security group of the workers (egress HTTPS only, no ingress)."
  value       = module.nodes.security_group_id
}

output "scale_out_alarm_name" {
  description = "Alarm that adds workers while compaction jobs are outstanding."
  value       = aws_cloudwatch_metric_alarm.backlog.alarm_name
}

output "strata_config" {
  description = "The rendered strata.toml of the workers."
  value       = local.strata_config
}
