# An example Strata deployment in an existing VPC: the bucket, one role per Strata role,
# two ingest nodes on i4i NVMe sharing the shards, compaction workers that scale from zero on the backlog,
# query nodes that scale on CPU, and the alarms. `terraform init && terraform apply
# -var-file=example.tfvars` (see README.md).

provider "aws" {
  region = var.region

  default_tags {
    tags = {
      "app"     = "strata"
      "managed" = "terraform"
    }
  }
}

data "aws_caller_identity" "current" {}

locals {
  root_prefix      = "strata"
  artifact_key     = "strata/${var.strata_version}/x86_64/strata"
  artifact_uri     = "s3://${var.artifact_bucket}/${local.artifact_key}"
  artifact_arn     = "arn:aws:s3:::${var.artifact_bucket}/${local.artifact_key}"
  param_arn_prefix = "arn:aws:ssm:${var.region}:${data.aws_caller_identity.current.account_id}:parameter"
  keys_param_arn   = var.auth_keys_parameter_name == "" ? [] : ["${local.param_arn_prefix}/${trimprefix(var.auth_keys_parameter_name, "/")}"]
  metrics_key_arn  = var.metrics_key_parameter_name == "" ? [] : ["${local.param_arn_prefix}/${trimprefix(var.metrics_key_parameter_name, "/")}"]
  metric_namespace = "Strata"
}

module "storage" {
  source = "../../modules/storage"

  name                   = var.name
  root_prefix            = local.root_prefix
  vpc_id                 = var.vpc_id
  route_table_ids        = var.private_route_table_ids
  kms_service_principals = ["logs", "sns"]
  endpoint_extra_bucket_arns = [
    "arn:aws:s3:::${var.artifact_bucket}",
    "arn:aws:s3:::al2023-repos-${var.region}-*",
  ]
}

module "iam" {
  source = "../../modules/iam"

  name                     = var.name
  bucket_arn               = module.storage.bucket_arn
  root_prefix              = module.storage.root_prefix
  kms_key_arn              = module.storage.kms_key_arn
  artifact_object_arns     = [local.artifact_arn]
  auth_keys_parameter_arns = local.keys_param_arn
  # With API keys on, the CloudWatch agent scrapes /metrics with this key (else 401: no
  # metrics, silent alarms, no compactor scaling); the iam module refuses one without the other.
  metrics_key_parameter_arns = local.metrics_key_arn
  parameter_kms_key_arns     = var.parameter_kms_key_arn == "" ? [] : [var.parameter_kms_key_arn]
}

module "ingest" {
  source = "../../modules/ingest"

  name                   = var.name
  vpc_id                 = var.vpc_id
  subnet_ids             = var.private_subnet_ids
  bucket_name            = module.storage.bucket_name
  root_prefix            = module.storage.root_prefix
  instance_profile_name  = module.iam.instance_profile_names["ingest"]
  log_group_name         = module.observability.log_group_names["ingest"]
  metric_namespace       = local.metric_namespace
  instance_type          = "i4i.2xlarge"
  node_count             = 2
  postgres_port          = 5433
  strata_artifact_s3_uri = local.artifact_uri
  allowed_cidr_blocks    = var.client_cidr_blocks
  certificate_arn        = var.certificate_arn
  access_logs_bucket     = module.storage.log_bucket_name

  auth_keys_parameter_name   = var.auth_keys_parameter_name
  metrics_key_parameter_name = var.metrics_key_parameter_name

  # i4i.2xlarge (1,875 GB instance store): the default row levels (L0, a 64 MiB L1) and a
  # 1 TiB cache of the columnar levels; see docs/deployment.md.
  cache_bytes_max = 1099511627776

  strata_environment = {
    STRATA_ENGINE_HISTORY_RETENTION_MS = "900000"
  }
}

module "compactor" {
  source = "../../modules/compactor"

  name                   = var.name
  vpc_id                 = var.vpc_id
  subnet_ids             = var.private_subnet_ids
  bucket_name            = module.storage.bucket_name
  root_prefix            = module.storage.root_prefix
  instance_profile_name  = module.iam.instance_profile_names["compactor"]
  log_group_name         = module.observability.log_group_names["compactor"]
  metric_namespace       = local.metric_namespace
  strata_artifact_s3_uri = local.artifact_uri
  min_workers            = 0
  max_workers            = 8
}

module "query" {
  source = "../../modules/query"

  name                   = var.name
  vpc_id                 = var.vpc_id
  subnet_ids             = var.private_subnet_ids
  bucket_name            = module.storage.bucket_name
  root_prefix            = module.storage.root_prefix
  instance_profile_name  = module.iam.instance_profile_names["query"]
  log_group_name         = module.observability.log_group_names["query"]
  metric_namespace       = local.metric_namespace
  strata_artifact_s3_uri = local.artifact_uri
  allowed_cidr_blocks    = var.client_cidr_blocks
  certificate_arn        = var.certificate_arn
  access_logs_bucket     = module.storage.log_bucket_name
  min_nodes              = 2
  postgres_port          = 5434
  max_nodes              = 6

  auth_keys_parameter_name   = var.auth_keys_parameter_name
  metrics_key_parameter_name = var.metrics_key_parameter_name
}

module "observability" {
  source = "../../modules/observability"

  name             = var.name
  kms_key_arn      = module.storage.kms_key_arn
  metric_namespace = local.metric_namespace

  ingest_load_balancer_arn_suffix = module.ingest.load_balancer_arn_suffix
  ingest_target_group_arn_suffix  = module.ingest.target_group_arn_suffixes["http"]
  query_load_balancer_arn_suffix  = module.query.load_balancer_arn_suffix
  query_target_group_arn_suffix   = module.query.target_group_arn_suffixes["http"]
}
