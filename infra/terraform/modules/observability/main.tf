# Log groups of the three roles and the alarms on the metrics that matter. The metrics are
# Strata's Prometheus metrics (query/src/metrics.rs, crates/strata-objstore/src/
# instrumented.rs), published by the CloudWatch agent on each ingest and query node with the
# dimensions deployment and role (strata-node module); see README.md for the mapping.

locals {
  tags    = merge(var.tags, { "strata:deployment" = var.name })
  roles   = toset(["ingest", "compactor", "query"])
  actions = concat([aws_sns_topic.alarms.arn], var.alarm_action_arns)
  ingest  = { deployment = var.name, role = "ingest" }
}

resource "aws_cloudwatch_log_group" "role" {
  for_each          = local.roles
  name              = "/strata/${var.name}/${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = merge(local.tags, { "strata:role" = each.key })
}

resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-strata-alarms"
  kms_master_key_id = var.kms_key_arn
  tags              = local.tags
}

# --- Write path ------------------------------------------------------------------------

# WAL backlog. Strata has no "WAL bytes not yet flushed" metric; the closest is
# strata_memtables_frozen: memtables whose WAL is in S3 but not yet in an SST. At
# engine.memtables_frozen_max writes wait (a write stall), so this fires one step earlier.
resource "aws_cloudwatch_metric_alarm" "wal_backlog" {
  alarm_name          = "${var.name}-strata-wal-backlog"
  alarm_description   = "A shard has ${var.wal_backlog_memtables}+ frozen memtables waiting for their flush: WAL not yet in SSTs, writes about to stall. Check NVMe throughput and flush errors in the ingest log."
  namespace           = var.metric_namespace
  metric_name         = "strata_memtables_frozen"
  dimensions          = local.ingest
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  threshold           = var.wal_backlog_memtables
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "write_stalls" {
  alarm_name          = "${var.name}-strata-write-stalls"
  alarm_description   = "Writes were refused as overloaded (429 with Retry-After): too many sorted runs or frozen memtables. Compaction or flushes are not keeping up."
  namespace           = var.metric_namespace
  metric_name         = "strata_write_stalls_total"
  dimensions          = local.ingest
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}

# --- Compaction ------------------------------------------------------------------------

# Missing data is breaching here, unlike the other alarms: the ingest nodes publish this
# metric every minute while they run, so a whole window without it means the metrics
# pipeline is broken (CloudWatch agent down, or /metrics answering 401 because API keys are
# on without metrics_key_parameter_name) or no ingest node runs. Either way every other
# metric alarm is silent (they treat missing data as OK) and the compactors no longer scale
# on the backlog, so this alarm is the one that says so. A window of
# compaction_backlog_minutes (30) keeps agent restarts and node replacements quiet.
resource "aws_cloudwatch_metric_alarm" "compaction_backlog" {
  alarm_name          = "${var.name}-strata-compaction-backlog"
  alarm_description   = "Pending compaction bytes stayed above ${var.compaction_backlog_bytes} for ${var.compaction_backlog_minutes} minutes (the compactor group is at max_workers or failing: see its log), or no ingest metrics arrived for as long (CloudWatch agent down, /metrics refusing the agent's key, no ingest node running): then every other metric alarm is blind too."
  namespace           = var.metric_namespace
  metric_name         = "strata_pending_compaction_bytes"
  dimensions          = local.ingest
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = var.compaction_backlog_minutes
  datapoints_to_alarm = var.compaction_backlog_minutes
  threshold           = var.compaction_backlog_bytes
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "breaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "sorted_runs" {
  alarm_name          = "${var.name}-strata-sorted-runs"
  alarm_description   = "A shard has ${var.sorted_runs_alarm}+ sorted runs: reads merge many runs and writes are refused at engine.sorted_runs_max."
  namespace           = var.metric_namespace
  metric_name         = "strata_sorted_runs"
  dimensions          = local.ingest
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 10
  datapoints_to_alarm = 5
  threshold           = var.sorted_runs_alarm
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}

# --- Errors ----------------------------------------------------------------------------

# 5xx share of HTTP responses per role, from strata_http_requests_total by status class.
resource "aws_cloudwatch_metric_alarm" "http_5xx" {
  for_each = toset(["ingest", "query"])

  alarm_name          = "${var.name}-strata-${each.key}-5xx-rate"
  alarm_description   = "More than ${var.error_rate_percent}% of ${each.key} HTTP responses were 5xx over 5 minutes."
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = var.error_rate_percent
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags

  metric_query {
    id          = "rate"
    label       = "5xx percent"
    return_data = true
    expression  = "IF(total > 0, 100 * FILL(e5, 0) / total, 0)"
  }

  metric_query {
    id         = "total"
    expression = "FILL(e2, 0) + FILL(e4, 0) + FILL(e5, 0)"
  }

  dynamic "metric_query" {
    for_each = { e2 = "2xx", e4 = "4xx", e5 = "5xx" }
    content {
      id = metric_query.key
      metric {
        namespace   = var.metric_namespace
        metric_name = "strata_http_requests_total"
        dimensions  = { deployment = var.name, role = each.key, class = metric_query.value }
        period      = 300
        stat        = "Sum"
      }
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "object_store_errors" {
  for_each = toset(["ingest", "query"])

  alarm_name          = "${var.name}-strata-${each.key}-s3-errors"
  alarm_description   = "More than ${var.object_store_errors_per_5min} failed bucket requests from ${each.key} nodes in 5 minutes (throttling, KMS or IAM denials, endpoint trouble)."
  namespace           = var.metric_namespace
  metric_name         = "strata_object_store_errors_total"
  dimensions          = { deployment = var.name, role = each.key }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = var.object_store_errors_per_5min
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}

# --- Availability ----------------------------------------------------------------------

# No healthy target also means no metrics from that role: the alarms above stay quiet
# (missing data), so this one is the signal.
resource "aws_cloudwatch_metric_alarm" "no_healthy_nodes" {
  for_each = {
    ingest = { lb = var.ingest_load_balancer_arn_suffix, tg = var.ingest_target_group_arn_suffix }
    query  = { lb = var.query_load_balancer_arn_suffix, tg = var.query_target_group_arn_suffix }
  }

  alarm_name          = "${var.name}-strata-${each.key}-no-healthy-node"
  alarm_description   = "No ${each.key} node answers /ready behind the load balancer."
  namespace           = "AWS/NetworkELB"
  metric_name         = "HealthyHostCount"
  dimensions          = { LoadBalancer = each.value.lb, TargetGroup = each.value.tg }
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  actions_enabled     = true
  alarm_actions       = local.actions
  ok_actions          = local.actions
  tags                = local.tags
}
