output "log_group_names" {
  description = "Log group of each role: map with keys ingest, compactor and query (/strata/<name>/<role>)."
  value       = { for r, g in aws_cloudwatch_log_group.role : r => g.name }
}

output "metric_namespace" {
  description = "CloudWatch namespace of the Strata metrics (echo of the input, for the role modules)."
  value       = var.metric_namespace
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm notifies (subscribe the on-call tooling to it)."
  value       = aws_sns_topic.alarms.arn
}

output "alarm_names" {
  description = "Names of the alarms this module creates."
  value = concat(
    [
      aws_cloudwatch_metric_alarm.wal_backlog.alarm_name,
      aws_cloudwatch_metric_alarm.write_stalls.alarm_name,
      aws_cloudwatch_metric_alarm.compaction_backlog.alarm_name,
      aws_cloudwatch_metric_alarm.sorted_runs.alarm_name,
    ],
    [for a in aws_cloudwatch_metric_alarm.http_5xx : a.alarm_name],
    [for a in aws_cloudwatch_metric_alarm.object_store_errors : a.alarm_name],
    [for a in aws_cloudwatch_metric_alarm.no_healthy_nodes : a.alarm_name],
  )
}
