# strata ingest: the shard writers on NVMe instance-store nodes, behind an internal network
# load balancer (HTTP data API and SQL on http_port, Flight SQL and gRPC on flight_port).
# The nodes share the shards through leases in the bucket (<root_prefix>/cluster/): any node
# takes any HTTP request and forwards those for shards another node owns to it, so the load
# balancer spreads over all of them (crates/strata-engine/src/cluster.rs).

data "aws_region" "current" {}

locals {
  tags           = merge(var.tags, { "strata:deployment" = var.name, "strata:role" = "ingest" })
  data_dir       = "/mnt/nvme/strata"
  auth_keys_file = var.auth_keys_parameter_name != "" ? "/etc/strata/keys.toml" : ""
  tls            = var.certificate_arn != ""
  ports          = merge({ http = var.http_port, flight = var.flight_port }, { for k, v in { postgres = var.postgres_port } : k => v if v > 0 })
  postgres       = var.postgres_port > 0 ? "0.0.0.0:${var.postgres_port}" : ""

  strata_config = templatefile("${path.module}/templates/strata.toml.tftpl", {
    data_dir             = local.data_dir
    http_port            = var.http_port
    flight_port          = var.flight_port
    postgres             = local.postgres
    bucket               = var.bucket_name
    region               = data.aws_region.current.name
    auth_keys_file       = local.auth_keys_file
    log_filter           = var.log_filter
    root_prefix          = var.root_prefix
    memtable_bytes_max   = var.memtable_bytes_max
    level_bytes_base     = var.level_bytes_base
    levels               = var.levels
    cache_bytes_max      = var.cache_bytes_max
    sorted_runs_max      = var.sorted_runs_max
    jobs_outstanding_max = var.jobs_outstanding_max
    gc_min_age_ms        = var.gc_min_age_ms
    cluster_lease_ms     = var.cluster_lease_ms
    # Renewed five times per lease: a node survives a few slow S3 round trips (strata
    # requires at most half the lease).
    cluster_renew_ms = floor(var.cluster_lease_ms / 5)
  })
}

resource "aws_security_group" "lb" {
  name_prefix = "${var.name}-strata-ingest-lb-"
  description = "Load balancer of the Strata ingest nodes of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-strata-ingest-lb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each = { for pair in setproduct(keys(local.ports), var.allowed_cidr_blocks) : "${pair[0]}-${pair[1]}" => pair }

  security_group_id = aws_security_group.lb.id
  description       = "strata ingest ${each.value[0]} from clients"
  ip_protocol       = "tcp"
  from_port         = local.ports[each.value[0]]
  to_port           = local.ports[each.value[0]]
  cidr_ipv4         = each.value[1]
}

resource "aws_vpc_security_group_egress_rule" "to_nodes" {
  for_each = local.ports

  security_group_id            = aws_security_group.lb.id
  description                  = "strata ingest ${each.key} to the nodes"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = module.nodes.security_group_id
}

# Node to node: a node forwards an HTTP request for a shard another node owns to that
# node's advertised address (its private IP, cluster.advertise_http).
resource "aws_vpc_security_group_ingress_rule" "peers_http" {
  security_group_id            = module.nodes.security_group_id
  description                  = "strata ingest http forwarded from the other ingest nodes"
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
  referenced_security_group_id = module.nodes.security_group_id
}

resource "aws_vpc_security_group_egress_rule" "peers_http" {
  security_group_id            = module.nodes.security_group_id
  description                  = "strata ingest http forwarded to the other ingest nodes"
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
  referenced_security_group_id = module.nodes.security_group_id
}

# gRPC is redirected, not forwarded: a call for a shard another node owns is answered
# UNAVAILABLE with the owner's address (private IP, cluster.advertise_flight) in the
# strata-owner metadata, and the client calls the owner directly.
resource "aws_vpc_security_group_ingress_rule" "clients_flight_direct" {
  for_each = var.direct_flight_access ? toset(var.allowed_cidr_blocks) : toset([])

  security_group_id = module.nodes.security_group_id
  description       = "strata ingest flight from clients redirected to the owning node"
  ip_protocol       = "tcp"
  from_port         = var.flight_port
  to_port           = var.flight_port
  cidr_ipv4         = each.value
}

resource "aws_lb" "ingest" {
  name                             = "${substr(var.name, 0, 21)}-ingest"
  internal                         = true
  load_balancer_type               = "network"
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.lb.id]
  enable_cross_zone_load_balancing = true
  enable_deletion_protection       = var.deletion_protection
  tags                             = local.tags

  access_logs {
    bucket  = var.access_logs_bucket
    prefix  = "lb/${var.name}-ingest"
    enabled = true
  }
}

resource "aws_lb_target_group" "ingest" {
  for_each = local.ports

  name                 = "${substr(var.name, 0, 18)}-ingest-${substr(each.key, 0, 1)}"
  port                 = each.value
  protocol             = "TCP"
  vpc_id               = var.vpc_id
  target_type          = "instance"
  deregistration_delay = 30
  tags                 = local.tags

  # /ready, not /health: a node replaying its WAL from S3 is alive but not ready.
  health_check {
    protocol            = "HTTP"
    port                = tostring(var.http_port)
    path                = "/ready"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "ingest" {
  for_each = local.ports

  load_balancer_arn = aws_lb.ingest.arn
  port              = each.value
  protocol          = local.tls && each.key != "postgres" ? "TLS" : "TCP"
  certificate_arn   = local.tls && each.key != "postgres" ? var.certificate_arn : null
  ssl_policy        = local.tls && each.key != "postgres" ? "ELBSecurityPolicy-TLS13-1-2-2021-06" : null
  alpn_policy       = local.tls && each.key == "flight" ? "HTTP2Preferred" : null
  tags              = local.tags

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.ingest[each.key].arn
  }
}

module "nodes" {
  source = "../strata-node"

  name                   = var.name
  role                   = "ingest"
  vpc_id                 = var.vpc_id
  subnet_ids             = var.subnet_ids
  instance_type          = var.instance_type
  architecture           = var.architecture
  ami_id                 = var.ami_id
  require_instance_store = true
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
  target_group_arns          = [for tg in aws_lb_target_group.ingest : tg.arn]

  min_size         = var.node_count
  max_size         = var.node_count
  desired_capacity = var.node_count
  # Several nodes: half stay in service; a node the refresh stops releases its leases on
  # SIGTERM, so the others take its shards over at once. One node: nothing can stay in
  # service, it is replaced (terminate, then launch).
  instance_refresh_min_healthy_percentage = var.node_count == 1 ? 0 : 50

  tags = var.tags
}
