# One instance role per Strata role, each allowed only the bucket prefixes that role touches
# (crates/strata-manifest/src/layout.rs names every object; README.md of this module maps
# each permission to the code that needs it).

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.name
  account   = data.aws_caller_identity.current.account_id
  root      = "${var.bucket_arn}/${var.root_prefix}"
  tags      = merge(var.tags, { "strata:deployment" = var.name })
  roles     = toset(["ingest", "compactor", "query"])

  # Log groups created by the observability module: /strata/<name>/<role>.
  log_group_arn = { for r in local.roles : r => "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/strata/${var.name}/${r}" }
}

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "role" {
  for_each             = local.roles
  name                 = "${var.name}-strata-${each.key}"
  description          = "Strata ${each.key} nodes of ${var.name}"
  assume_role_policy   = data.aws_iam_policy_document.assume_ec2.json
  max_session_duration = 3600
  tags                 = merge(local.tags, { "strata:role" = each.key })
}

resource "aws_iam_instance_profile" "role" {
  for_each = local.roles
  name     = "${var.name}-strata-${each.key}"
  role     = aws_iam_role.role[each.key].name
  tags     = local.tags
}

resource "aws_iam_role_policy_attachment" "ssm" {
  for_each   = var.enable_ssm_session_manager ? local.roles : toset([])
  role       = aws_iam_role.role[each.key].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

# ---------------------------------------------------------------------------------------
# ingest: the shard writer. Reads and writes everything under the root: catalog, manifests,
# WAL, SSTs, Parquet (in-process compaction workers), pins (its own readers), jobs (it
# publishes and settles them), shard leases and its liveness record (cluster/: written with
# If-None-Match/If-Match, the record deleted on a graceful stop), and deletes whatever its GC
# collects.

data "aws_iam_policy_document" "ingest" {
  source_policy_documents = [data.aws_iam_policy_document.node["ingest"].json]

  statement {
    sid       = "ListUnderRoot"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.root_prefix}/", "${var.root_prefix}/*"]
    }
  }

  statement {
    sid = "ReadWriteUnderRoot"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]
    resources = ["${local.root}/*"]
  }

  statement {
    sid       = "BucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}

# ---------------------------------------------------------------------------------------
# compactor: lists and reads jobs, reads the job's inputs (row SSTs, Parquet), writes its
# lease and result, writes (multipart) and, when it lost the race, deletes its Parquet
# outputs. It never touches manifests, the catalog, the WAL or pins.

data "aws_iam_policy_document" "compactor" {
  source_policy_documents = [data.aws_iam_policy_document.node["compactor"].json]

  statement {
    sid       = "ListJobs"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.root_prefix}/jobs/", "${var.root_prefix}/jobs/*"]
    }
  }

  statement {
    sid     = "ReadJobsAndInputs"
    actions = ["s3:GetObject"]
    resources = [
      "${local.root}/jobs/*",
      "${local.root}/tables/*/sst/*",
      "${local.root}/tables/*/parquet/*",
    ]
  }

  statement {
    sid     = "ClaimAndHandBackJobs"
    actions = ["s3:PutObject"]
    resources = [
      "${local.root}/jobs/*.lease",
      "${local.root}/jobs/*.result",
    ]
  }

  statement {
    sid       = "DropLeaseOfSettledJob"
    actions   = ["s3:DeleteObject"]
    resources = ["${local.root}/jobs/*.lease"]
  }

  statement {
    sid = "WriteJobOutputs"
    actions = [
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]
    resources = ["${local.root}/tables/*/parquet/*"]
  }

  statement {
    sid       = "BucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}

# ---------------------------------------------------------------------------------------
# query: reads the catalog and every tier of the tables (manifests, WAL tails, SSTs,
# Parquet), nothing else: never jobs/ (compaction) nor cluster/ (ingest leases; a query
# node is no cluster member). Its only writes are durable snapshot pins
# (crates/strata-engine/src/view.rs): a pin keeps the writer's GC off the manifest version a
# query reads; it is renewed while the query runs and deleted after.

data "aws_iam_policy_document" "query" {
  source_policy_documents = [data.aws_iam_policy_document.node["query"].json]

  statement {
    sid       = "ListCatalogAndTables"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values = [
        "${var.root_prefix}/catalog/",
        "${var.root_prefix}/catalog/*",
        "${var.root_prefix}/tables/",
        "${var.root_prefix}/tables/*",
      ]
    }
  }

  statement {
    sid       = "ReadCatalogAndTables"
    actions   = ["s3:GetObject"]
    resources = ["${local.root}/catalog/*", "${local.root}/tables/*"]
  }

  statement {
    sid       = "SnapshotPins"
    actions   = ["s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.root}/tables/*/pins/*"]
  }

  statement {
    sid       = "BucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}

# ---------------------------------------------------------------------------------------
# What every node needs besides the bucket: its log group, its binary and (ingest, query)
# its API keys. No cloudwatch:PutMetricData: the CloudWatch agent publishes the Prometheus
# metrics as embedded metric format (EMF) log events into the role's log group
# (strata-node module: the agent configuration has no "metrics" section, only
# logs.logs_collected.prometheus with an emf_processor), and CloudWatch Logs extracts the
# metrics from those events: logs:PutLogEvents on the role's own log group is all it takes.

data "aws_iam_policy_document" "node" {
  for_each = local.roles

  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = [local.log_group_arn[each.key], "${local.log_group_arn[each.key]}:log-stream:*"]
  }

  dynamic "statement" {
    for_each = length(var.artifact_object_arns) > 0 ? [1] : []
    content {
      sid       = "ReleaseBinary"
      actions   = ["s3:GetObject"]
      resources = var.artifact_object_arns
    }
  }

  dynamic "statement" {
    for_each = length(var.auth_keys_parameter_arns) > 0 && each.key != "compactor" ? [1] : []
    content {
      sid       = "ApiKeysFile"
      actions   = ["ssm:GetParameter"]
      resources = var.auth_keys_parameter_arns
    }
  }

  # The key the local CloudWatch agent scrapes /metrics with when API keys are on (user data
  # writes it to /etc/strata/metrics.key): without it the scrape gets 401 and no metric,
  # alarm or compactor scaling works.
  dynamic "statement" {
    for_each = length(var.metrics_key_parameter_arns) > 0 && each.key != "compactor" ? [1] : []
    content {
      sid       = "MetricsKey"
      actions   = ["ssm:GetParameter"]
      resources = var.metrics_key_parameter_arns
    }
  }

  # SecureString parameters under a customer-managed key: decrypted by SSM on the node's
  # behalf (get-parameter --with-decryption), so only through SSM.
  dynamic "statement" {
    for_each = length(var.parameter_kms_key_arns) > 0 && each.key != "compactor" ? [1] : []
    content {
      sid       = "DecryptParameters"
      actions   = ["kms:Decrypt"]
      resources = var.parameter_kms_key_arns
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["ssm.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role_policy" "role" {
  for_each = local.roles
  name     = "strata-${each.key}"
  role     = aws_iam_role.role[each.key].id
  policy = {
    ingest    = data.aws_iam_policy_document.ingest.json
    compactor = data.aws_iam_policy_document.compactor.json
    query     = data.aws_iam_policy_document.query.json
  }[each.key]

  lifecycle {
    # With API keys on, /metrics answers 401 without a namespace "*" key: the CloudWatch
    # agent would publish nothing, and every alarm and the compactor scaling go blind.
    precondition {
      condition     = length(var.auth_keys_parameter_arns) == 0 || length(var.metrics_key_parameter_arns) > 0
      error_message = "auth_keys_parameter_arns is set but metrics_key_parameter_arns is empty: the nodes' CloudWatch agent needs a namespace \"*\" API key to scrape /metrics (metrics_key_parameter_name of the ingest and query modules)."
    }
  }
}
