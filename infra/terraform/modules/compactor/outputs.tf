output "autoscaling_group_name" {
  description = "Auto-scaling group of the compaction workers."
  value       = module.nodes.autoscaling_group_name
}

output "security_group_id" {
  description = "Security group of the workers (egress HTTPS only, no ingress)."
  value       = module.nodes.security_group_id
}

output "wake_alarm_name" {
  description = "Alarm that starts the first worker when compaction jobs are outstanding and the group is at zero."
  value       = aws_cloudwatch_metric_alarm.wake.alarm_name
}

output "scaling_policy_name" {
  description = "Target-tracking policy keeping outstanding jobs per in-service worker at target_jobs_per_worker."
  value       = aws_autoscaling_policy.jobs_per_worker.name
}

output "strata_config" {
  description = "The rendered strata.toml of the workers."
  value       = local.strata_config
}
