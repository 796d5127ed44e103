# A group of Strata nodes of one role: security group, launch template whose user data
# mounts the local NVMe and runs `strata ROLE` under systemd, and the auto-scaling group.
# Shared by the ingest, compactor and query modules.

data "aws_region" "current" {}

data "aws_ssm_parameter" "al2023" {
  count = var.ami_id == "" ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.architecture}"
}

locals {
  tags = merge(var.tags, { "strata:deployment" = var.name, "strata:role" = var.role })
  ami  = var.ami_id != "" ? var.ami_id : nonsensitive(data.aws_ssm_parameter.al2023[0].value)

  # Strata metrics published to CloudWatch (names as served at /metrics: counters carry
  # _total). Aggregated over tables and shards: the dimensions are only the deployment and
  # the role (the 5xx series also the status class), so Sum is the node's total.
  gauges_and_counters = [
    "strata_memtables_frozen",
    "strata_pending_compaction_bytes",
    "strata_compaction_jobs_outstanding",
    "strata_sorted_runs",
    "strata_nvme_bytes",
    "strata_s3_level_bytes",
    "strata_write_stalls_total",
    "strata_writes_overloaded_total",
    "strata_flushes_total",
    "strata_compactions_total",
    "strata_object_store_errors_total",
  ]

  prometheus = var.metrics_port == 0 ? {} : {
    prometheus = {
      prometheus_config_path = "/opt/aws/amazon-cloudwatch-agent/etc/prometheus.yaml"
      log_group_name         = var.log_group_name
      log_stream_name        = "{instance_id}-metrics"
      emf_processor = {
        metric_namespace = var.metric_namespace
        metric_declaration = [
          {
            source_labels    = ["job"]
            label_matcher    = "^strata$"
            dimensions       = [["deployment", "role"]]
            metric_selectors = [for m in local.gauges_and_counters : "^${m}$"]
          },
          {
            source_labels    = ["job"]
            label_matcher    = "^strata$"
            dimensions       = [["deployment", "role", "class"]]
            metric_selectors = ["^strata_http_requests_total$"]
          },
        ]
      }
    }
  }

  agent_config = jsonencode({
    agent = { region = data.aws_region.current.name }
    logs = {
      logs_collected = merge({
        files = {
          collect_list = [{
            file_path       = "/var/log/strata/strata.log"
            log_group_name  = var.log_group_name
            log_stream_name = "{instance_id}"
          }]
        }
      }, local.prometheus)
    }
  })

  # strata_environment twice, for the same variables in two syntaxes: the systemd unit's
  # Environment="K=V" lines (backslash and double quote escaped, % doubled: systemd expands
  # specifiers) and the boot-time `strata config` check, which runs under `env 'K=V' ...`
  # (single quotes closed and reopened around each ') so it checks the config with exactly
  # the overrides the service will run with.
  environment_unit  = { for k, v in var.strata_environment : k => replace(replace(replace(v, "\\", "\\\\"), "\"", "\\\""), "%", "%%") }
  environment_shell = { for k, v in var.strata_environment : k => replace(v, "'", "'\\''") }

  user_data = templatefile("${path.module}/templates/user-data.sh.tftpl", {
    name                   = var.name
    role                   = var.role
    region                 = data.aws_region.current.name
    data_dir               = var.data_dir
    require_instance_store = var.require_instance_store
    artifact_s3_uri        = var.strata_artifact_s3_uri
    auth_keys_parameter    = var.auth_keys_parameter_name
    metrics_key_parameter  = var.metrics_key_parameter_name
    strata_config          = var.strata_config
    environment_unit       = local.environment_unit
    environment_shell      = local.environment_shell
    metrics_port           = var.metrics_port
    metric_namespace       = var.metric_namespace
    agent_config           = local.agent_config
  })
}

resource "aws_security_group" "node" {
  name_prefix = "${var.name}-strata-${var.role}-"
  description = "Strata ${var.role} nodes of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-strata-${var.role}" })

  lifecycle {
    create_before_destroy = true
  }
}

# Keyed by port and the security group's position, not its id: the load balancer's group is
# created in the same apply, and for_each keys must be known at plan time.
resource "aws_vpc_security_group_ingress_rule" "service" {
  for_each = { for pair in setproduct(var.service_ports, range(length(var.ingress_security_group_ids))) : "${pair[0]}-${pair[1]}" => [pair[0], var.ingress_security_group_ids[pair[1]]] }

  security_group_id            = aws_security_group.node.id
  description                  = "strata ${var.role} port ${each.value[0]} from the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = each.value[0]
  to_port                      = each.value[0]
  referenced_security_group_id = each.value[1]
}

# HTTPS only: S3 (through the gateway endpoint), KMS, CloudWatch, SSM and the package
# repositories. Nothing else leaves the node.
resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.node.id
  description       = "HTTPS to AWS APIs (S3 via the gateway endpoint, KMS, CloudWatch, SSM) and package repositories"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_launch_template" "node" {
  name_prefix            = "${var.name}-strata-${var.role}-"
  description            = "Strata ${var.role} of ${var.name}"
  image_id               = local.ami
  instance_type          = var.instance_type
  update_default_version = true
  user_data              = base64encode(local.user_data)
  ebs_optimized          = true

  iam_instance_profile {
    name = var.instance_profile_name
  }

  network_interfaces {
    associate_public_ip_address = false
    security_groups             = [aws_security_group.node.id]
    delete_on_termination       = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-strata-${var.role}" })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tags = local.tags

  lifecycle {
    # With API keys on, strata answers /metrics only to a key for every namespace: without
    # one the CloudWatch agent's scrape gets 401, no metric reaches CloudWatch, and every
    # alarm on them (and the compactor scaling on the ingest backlog) goes silent.
    precondition {
      condition     = var.auth_keys_parameter_name == "" || var.metrics_port == 0 || var.metrics_key_parameter_name != ""
      error_message = "auth_keys_parameter_name is set but metrics_key_parameter_name is empty: with API keys on, the CloudWatch agent needs a namespace \"*\" API key (an SSM SecureString) to scrape /metrics."
    }
  }
}

resource "aws_autoscaling_group" "node" {
  name_prefix               = "${var.name}-strata-${var.role}-"
  vpc_zone_identifier       = var.subnet_ids
  min_size                  = var.min_size
  max_size                  = var.max_size
  desired_capacity          = var.desired_capacity
  target_group_arns         = var.target_group_arns
  health_check_type         = length(var.target_group_arns) > 0 ? "ELB" : "EC2"
  health_check_grace_period = var.health_check_grace_seconds
  default_instance_warmup   = var.health_check_grace_seconds
  # A node stopped by scale-in gets SIGTERM from systemd at shutdown; ingest acknowledges
  # writes only once they are in the WAL in S3, so nothing acknowledged is lost.
  termination_policies = ["OldestLaunchTemplate", "OldestInstance"]
  enabled_metrics      = ["GroupDesiredCapacity", "GroupInServiceInstances", "GroupTotalInstances"]

  launch_template {
    id      = aws_launch_template.node.id
    version = aws_launch_template.node.latest_version
  }

  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = var.instance_refresh_min_healthy_percentage
      instance_warmup        = var.health_check_grace_seconds
      # A release whose nodes fail their boot (e.g. a config the binary rejects) or health
      # check goes back to the previous launch template version.
      auto_rollback = true
    }
  }

  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    # Scaling policies own the capacity once created.
    ignore_changes = [desired_capacity]
  }
}
