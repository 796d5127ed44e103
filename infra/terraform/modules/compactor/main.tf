# strata compactor: stateless workers that run the S3-level compaction jobs ingest nodes
# publish in the bucket. The group tracks outstanding jobs per worker (the ingest nodes'
# strata_compaction_jobs_outstanding over the group's in-service instances), starts its
# first worker when jobs appear at zero, and goes down to min_workers (0) when nothing is
# outstanding. Workers listen on nothing, so they have no load balancer and no ingress.

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
  # shard per minute, so Sum over a minute is the deployment's backlog. It counts every job
  # a writer has published and not yet settled: waiting ones and the ones running (a worker
  # runs one job at a time), so it is also the number of workers that can be busy.
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

# Scaling. The backlog counts running jobs too, so scaling out while it stays >= 1 would
# keep adding workers for as long as one long job runs (up to max_workers). Instead the
# group tracks jobs per worker: outstanding / in-service workers at target_jobs_per_worker
# (1: one worker per published job, never more than there are jobs to run). Target
# tracking cannot start the first worker (nothing to divide by, and no capacity to scale
# in proportion to), so a separate alarm wakes the group from zero, and the idle alarm
# takes it back to min_workers once nothing is outstanding.

resource "aws_autoscaling_policy" "jobs_per_worker" {
  name                      = "compaction-jobs-per-worker"
  autoscaling_group_name    = module.nodes.autoscaling_group_name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 180

  target_tracking_configuration {
    target_value = var.target_jobs_per_worker

    customized_metric_specification {
      metrics {
        id          = "jobs"
        label       = "Outstanding compaction jobs (waiting and running)"
        return_data = false
        metric_stat {
          metric {
            namespace   = local.backlog_metric.namespace
            metric_name = local.backlog_metric.metric_name
            dimensions {
              name  = "deployment"
              value = local.backlog_metric.dimensions.deployment
            }
            dimensions {
              name  = "role"
              value = local.backlog_metric.dimensions.role
            }
          }
          stat = "Sum"
        }
      }

      metrics {
        id          = "workers"
        label       = "In-service compaction workers"
        return_data = false
        metric_stat {
          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = "GroupInServiceInstances"
            dimensions {
              name  = "AutoScalingGroupName"
              value = module.nodes.autoscaling_group_name
            }
          }
          stat = "Average"
        }
      }

      # No worker in service (booting, or none): per worker is then the whole backlog. No
      # datapoint for the jobs (the ingest nodes publish one per shard every minute, zeros
      # included, so the metrics pipeline is broken) gives no datapoint here: target
      # tracking then does nothing rather than scale the workers in on a blind spot.
      metrics {
        id          = "per_worker"
        label       = "Outstanding compaction jobs per in-service worker"
        expression  = "jobs / IF(workers >= 1, workers, 1)"
        return_data = true
      }
    }
  }

  lifecycle {
    # Cross-variable: a variable's validation may name other variables only from Terraform
    # 1.9, and these modules support 1.6, so the plan checks it here.
    precondition {
      condition     = var.min_workers <= var.max_workers
      error_message = "min_workers (${var.min_workers}) must not exceed max_workers (${var.max_workers})."
    }
  }
}

# From zero: jobs outstanding while the group's desired capacity is 0 adds one worker; the
# target tracking above sizes the group from there. Only while desired capacity is 0, so it
# does not grow a running group, and its cooldown spans the worker's boot (the desired
# capacity metric lags a minute or two behind). No backlog datapoint never wakes the group;
# a missing desired-capacity datapoint counts as 0, so a gap in the group's metrics costs
# at most one extra worker per cooldown (which target tracking removes) instead of never
# starting compaction.
resource "aws_autoscaling_policy" "wake" {
  name                   = "compaction-wake-from-zero"
  autoscaling_group_name = module.nodes.autoscaling_group_name
  policy_type            = "SimpleScaling"
  adjustment_type        = "ChangeInCapacity"
  scaling_adjustment     = 1
  cooldown               = 300
}

resource "aws_cloudwatch_metric_alarm" "wake" {
  alarm_name          = "${var.name}-strata-compaction-wake"
  alarm_description   = "Compaction jobs are outstanding and ${var.name}-strata-compactor has no worker: start one (target tracking on jobs per worker takes over from there)."
  evaluation_periods  = 2
  datapoints_to_alarm = 2
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  actions_enabled     = true
  alarm_actions       = [aws_autoscaling_policy.wake.arn]
  tags                = local.tags

  metric_query {
    id          = "wake"
    label       = "Jobs outstanding with no worker wanted"
    expression  = "IF(FILL(jobs, 0) >= 1 AND FILL(desired, 0) < 1, 1, 0)"
    return_data = true
  }

  metric_query {
    id = "jobs"
    metric {
      namespace   = local.backlog_metric.namespace
      metric_name = local.backlog_metric.metric_name
      dimensions  = local.backlog_metric.dimensions
      period      = 60
      stat        = "Sum"
    }
  }

  metric_query {
    id = "desired"
    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      dimensions  = { AutoScalingGroupName = module.nodes.autoscaling_group_name }
      period      = 60
      stat        = "Maximum"
    }
  }
}

# To min_workers (0) once nothing has been outstanding for scale_in_idle_minutes: no job is
# running then either, so no worker is stopped mid-job. (Target tracking scales in too
# when the backlog shrinks, but proportionally and conservatively.)
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
  # No data (ingest down, agent broken, /metrics refusing the agent) keeps the workers: a
  # stuck backlog costs more than an idle worker. The observability module's compaction
  # backlog alarm fires on the missing data.
  treat_missing_data = "notBreaching"
  actions_enabled    = true
  alarm_actions      = [aws_autoscaling_policy.scale_in.arn]
  tags               = local.tags
}
