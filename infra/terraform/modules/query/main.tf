# strata query: stateless read-only SQL nodes (POST /sql on http_port, Arrow Flight SQL on
# flight_port) behind an internal network load balancer, scaled on CPU. They read every
# tier from the bucket at consistent snapshots; their only writes are snapshot pins.

data "aws_region" "current" {}

locals {
  tags           = merge(var.tags, { "strata:deployment" = var.name, "strata:role" = "query" })
  data_dir       = "/mnt/nvme/strata"
  auth_keys_file = var.auth_keys_parameter_name != "" ? "/etc/strata/keys.toml" : ""
  tls            = var.certificate_arn != ""
  ports          = merge({ http = var.http_port, flight = var.flight_port }, { for k, v in { postgres = var.postgres_port } : k => v if v > 0 })
  postgres       = var.postgres_port > 0 ? "0.0.0.0:${var.postgres_port}" : ""

  strata_config = templatefile("${path.module}/templates/strata.toml.tftpl", {
    data_dir           = local.data_dir
    http_port          = var.http_port
    flight_port        = var.flight_port
    postgres           = local.postgres
    bucket             = var.bucket_name
    region             = data.aws_region.current.name
    auth_keys_file     = local.auth_keys_file
    log_filter         = var.log_filter
    memory_limit_bytes = var.memory_limit_bytes
    timeout_ms         = var.timeout_ms
    result_bytes_max   = var.result_bytes_max
    root_prefix        = var.root_prefix
    cache_bytes_max    = var.cache_bytes_max
  })
}

resource "aws_security_group" "lb" {
  name_prefix = "${var.name}-strata-query-lb-"
  description = "Load balancer of the Strata query nodes of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-strata-query-lb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each = { for pair in setproduct(keys(local.ports), var.allowed_cidr_blocks) : "${pair[0]}-${pair[1]}" => pair }

  security_group_id = aws_security_group.lb.id
  description       = "strata query ${each.value[0]} from clients"
  ip_protocol       = "tcp"
  from_port         = local.ports[each.value[0]]
  to_port           = local.ports[each.value[0]]
  cidr_ipv4         = each.value[1]
}

resource "aws_vpc_security_group_egress_rule" "to_nodes" {
  for_each = local.ports

  security_group_id            = aws_security_group.lb.id
  description                  = "strata query ${each.key} to the nodes"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = module.nodes.security_group_id
}

resource "aws_lb" "query" {
  name                             = "${substr(var.name, 0, 22)}-query"
  internal                         = true
  load_balancer_type               = "network"
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.lb.id]
  enable_cross_zone_load_balancing = true
  enable_deletion_protection       = var.deletion_protection
  tags                             = local.tags

  access_logs {
    bucket  = var.access_logs_bucket
    prefix  = "lb/${var.name}-query"
    enabled = true
  }
}

resource "aws_lb_target_group" "query" {
  for_each = local.ports

  name                 = "${substr(var.name, 0, 19)}-query-${substr(each.key, 0, 1)}"
  port                 = each.value
  protocol             = "TCP"
  vpc_id               = var.vpc_id
  target_type          = "instance"
  deregistration_delay = 60
  tags                 = local.tags

  health_check {
    protocol            = "HTTP"
    port                = tostring(var.http_port)
    path                = "/ready"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "query" {
  for_each = local.ports

  load_balancer_arn = aws_lb.query.arn
  port              = each.value
  protocol          = local.tls && each.key != "postgres" ? "TLS" : "TCP"
  certificate_arn   = local.tls && each.key != "postgres" ? var.certificate_arn : null
  ssl_policy        = local.tls && each.key != "postgres" ? "ELBSecurityPolicy-TLS13-1-2-2021-06" : null
  alpn_policy       = local.tls && each.key == "flight" ? "HTTP2Preferred" : null
  tags              = local.tags

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.query[each.key].arn
  }
}

module "nodes" {
  source = "../strata-node"

  name                   = var.name
  role                   = "query"
  vpc_id                 = var.vpc_id
  subnet_ids             = var.subnet_ids
  instance_type          = var.instance_type
  architecture           = var.architecture
  ami_id                 = var.ami_id
  require_instance_store = false
  data_dir               = local.data_dir
  instance_profile_name  = var.instance_profile_name
  strata_config          = local.strata_config
  strata_environment     = var.strata_environment
  strata_artifact_s3_uri = var.strata_artifact_s3_uri

  auth_keys_parameter_name   = var.auth_keys_parameter_name
  metrics_key_parameter_name = var.metrics_key_parameter_name
  metrics_port               = var.http_port
  metric_namespace           = var.metric_namespace
  log_group_name             = var.log_group_name

  service_ports              = values(local.ports)
  ingress_security_group_ids = [aws_security_group.lb.id]
  target_group_arns          = [for tg in aws_lb_target_group.query : tg.arn]

  min_size                                = var.min_nodes
  max_size                                = var.max_nodes
  instance_refresh_min_healthy_percentage = 50

  tags = var.tags
}

resource "aws_autoscaling_policy" "cpu" {
  name                      = "query-cpu-target"
  autoscaling_group_name    = module.nodes.autoscaling_group_name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = 300

  target_tracking_configuration {
    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
    target_value = var.target_cpu_percent
  }
}
