# strata compactor: stateless workers that run the S3-level compaction jobs ingest nodes
# publish in the bucket. The group scales on the compaction backlog the ingest nodes report
# (strata_compaction_jobs_outstanding), down to zero workers when nothing is outstanding.
# Workers listen on nothing, so they have no load balancer and no ingress.

data "aws_region" "current" {}

locals {
  tags     = merge(var.tags, { "strata:deployment" = var.name, "strata:role" = "compactor" })
  data_dir = "/mnt/nvme/strata"

  strata_config = templatefile("${path.module}/templates/strata.toml.tftpl", {
    data_dir     = local.data_dir
    bucket       = var.bucket_name
    region       = data.aws_region.current.name
    log_filter   = var.log_filter
    root_prefix  = var.root_prefix
    lease_ms     = var.lease_ms
    heartbeat_ms = var.heartbeat_ms
    poll_ms      = var.poll_ms
  })

  # Published by the ingest nodes' CloudWatch agent (strata-node module): one datapoint per
  # shard per minute, so Sum over a minute is the deployment's backlog.
  backlog_metric = {
    namespace   = var.metric_namespace
    metric_name = "strata_compaction_jobs_outstanding"
    dimensions  = { deployment = var.name, role = "ingest" }
  }
}

module "nodes" {
  source = "../strata-node"

  name                   = var.name
  role                   = "compactor"
  vpc_id                 = var.vpc_id
  subnet_ids             = var.subnet_ids
  instance_type          = var.instance_type
  architecture           = var.architecture
  ami_id                 = var.ami_id
  root_volume_gb         = var.root_volume_gb
  require_instance_store = false
  data_dir               = local.data_dir
  instance_profile_name  = var.instance_profile_name
  strata_config          = local.strata_config
  strata_environment     = var.strata_environment
  strata_artifact_s3_uri = var.strata_artifact_s3_uri
  metrics_port           = 0
  metric_namespace       = var.metric_namespace
  log_group_name         = var.log_group_name

  min_size = var.min_workers
  max_size = var.max_workers
  # A killed worker's job is taken over once its lease lapses, so a rolling replacement
  # only delays jobs by lease_ms.
  instance_refresh_min_healthy_percentage = 0
  health_check_grace_seconds              = 180

  tags = var.tags
}

resource "aws_autoscaling_policy" "scale_out" {
  name                      = "compaction-backlog-scale-out"
  autoscaling_group_name    = module.nodes.autoscaling_group_name
  policy_type               = "StepScaling"
  adjustment_type           = "ChangeInCapacity"
  estimated_instance_warmup = 180

  # Relative to the alarm threshold of 1 outstanding job.
  step_adjustment {
    metric_interval_lower_bound = 0
    metric_interval_upper_bound = 4
    scaling_adjustment          = 1
  }
  step_adjustment {
    metric_interval_lower_bound = 4
    metric_interval_upper_bound = 16
    scaling_adjustment          = 2
  }
  step_adjustment {
    metric_interval_lower_bound = 16
    scaling_adjustment          = 4
  }
}

resource "aws_cloudwatch_metric_alarm" "backlog" {
  alarm_name          = "${var.name}-strata-compaction-backlog-scale-out"
  alarm_description   = "Compaction jobs are outstanding: add compaction workers (scale-out policy of ${var.name}-strata-compactor)."
  namespace           = local.backlog_metric.namespace
  metric_name         = local.backlog_metric.metric_name
  dimensions          = local.backlog_metric.dimensions
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 2
  datapoints_to_alarm = 2
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = [aws_autoscaling_policy.scale_out.arn]
  tags                = local.tags
}

resource "aws_autoscaling_policy" "scale_in" {
  name                   = "compaction-idle-scale-in"
  autoscaling_group_name = module.nodes.autoscaling_group_name
  policy_type            = "SimpleScaling"
  adjustment_type        = "ExactCapacity"
  scaling_adjustment     = var.min_workers
  cooldown               = 300
}

resource "aws_cloudwatch_metric_alarm" "idle" {
  alarm_name          = "${var.name}-strata-compaction-idle-scale-in"
  alarm_description   = "No compaction job outstanding for ${var.scale_in_idle_minutes} minutes: stop the compaction workers down to min_workers."
  namespace           = local.backlog_metric.namespace
  metric_name         = local.backlog_metric.metric_name
  dimensions          = local.backlog_metric.dimensions
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = var.scale_in_idle_minutes
  datapoints_to_alarm = var.scale_in_idle_minutes
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  # No data (ingest down, agent broken) keeps the workers: a stuck backlog costs more than
  # an idle worker. The observability module alarms when no ingest node is healthy.
  treat_missing_data = "notBreaching"
  actions_enabled    = true
  alarm_actions      = [aws_autoscaling_policy.scale_in.arn]
  tags               = local.tags
}
