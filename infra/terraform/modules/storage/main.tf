# The Strata bucket: the source of truth of every table (docs/deployment.md). Layout under
# "<root_prefix>/" (crates/strata-manifest/src/layout.rs):
#   catalog/<v>.json                               catalog chain          (ingest)
#   tables/<table>/<shard>/manifest/<v>.json       shard manifest chain   (ingest)
#   tables/<table>/<shard>/wal/<id>.wal            WAL segments           (ingest)
#   tables/<table>/<shard>/sst/<id>.sst            row SSTs               (ingest)
#   tables/<table>/<shard>/parquet/<name>.parquet  S3 levels              (compactor, ingest)
#   tables/<table>/<shard>/pins/<reader>.json      snapshot pins          (query, ingest)
#   jobs/<id>.{json,lease,result}                  compaction jobs        (ingest, compactor)
#   cluster/nodes/<node>.json                      ingest liveness        (ingest)
#   cluster/leases/<table>-<shard>.json            shard ownership leases (ingest)

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  account_id  = data.aws_caller_identity.current.account_id
  region      = data.aws_region.current.name
  partition   = data.aws_partition.current.partition
  bucket_name = var.bucket_name != "" ? var.bucket_name : "${var.name}-strata-${local.account_id}-${local.region}"
  log_bucket  = "${substr(local.bucket_name, 0, 57)}-logs"
  tags        = merge(var.tags, { "strata:deployment" = var.name })
}

# ---------------------------------------------------------------------------------------
# Customer-managed key for SSE-KMS (bucket data, log groups).

data "aws_iam_policy_document" "key" {
  # checkov:skip=CKV_AWS_109:In a key policy "*" is this key; the account root statement is what delegates the key to IAM policies (AWS default key policy).
  # checkov:skip=CKV_AWS_111:In a key policy "*" is this key; writes are constrained by the IAM policies of the roles.
  # checkov:skip=CKV_AWS_356:In a key policy "*" is this key, not every resource.
  statement {
    sid       = "AccountAdministersThroughIam"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }

  dynamic "statement" {
    for_each = contains(var.kms_service_principals, "logs") ? [1] : []
    content {
      sid       = "CloudWatchLogsEncryptsStrataLogGroups"
      actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["logs.${local.region}.amazonaws.com"]
      }

      condition {
        test     = "ArnLike"
        variable = "kms:EncryptionContext:aws:logs:arn"
        values   = ["arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:/strata/${var.name}/*"]
      }
    }
  }

  dynamic "statement" {
    for_each = contains(var.kms_service_principals, "sns") ? [1] : []
    content {
      sid       = "CloudWatchAlarmsPublishToEncryptedTopic"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey*"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["cloudwatch.amazonaws.com"]
      }
    }
  }
}

resource "aws_kms_key" "bucket" {
  description             = "Strata ${var.name}: SSE-KMS of the bucket and the log groups"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_deletion_window_days
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = local.tags
}

resource "aws_kms_alias" "bucket" {
  name          = "alias/strata-${var.name}"
  target_key_id = aws_kms_key.bucket.key_id
}

# ---------------------------------------------------------------------------------------
# The bucket.

resource "aws_s3_bucket" "data" {
  # checkov:skip=CKV_AWS_144:Cross-region replication doubles storage cost; the restore window is versioning (deleted_object_retention_days). Operators who need a second region add replication in their root module (docs/deployment.md).
  # checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; Strata discovers objects through its manifests.
  bucket        = local.bucket_name
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_ownership_controls" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "data" {
  bucket                  = aws_s3_bucket.data.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "data" {
  bucket = aws_s3_bucket.data.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.bucket.arn
    }
    # One data key per bucket instead of one KMS request per object: Strata PUTs many
    # small objects (WAL segments, leases), and KMS requests cost as much as S3 PUTs.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_logging" "data" {
  bucket        = aws_s3_bucket.data.id
  target_bucket = aws_s3_bucket.logs.id
  target_prefix = "s3/${local.bucket_name}/"
}

resource "aws_s3_bucket_lifecycle_configuration" "data" {
  bucket = aws_s3_bucket.data.id

  # Parquet files are multipart uploads; a compactor killed mid-upload leaves parts that
  # are no object, so Strata's garbage collector never sees them.
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }

  # Everything Strata's GC deletes (old manifest versions, WAL segments past replay, SSTs
  # and Parquet files no manifest references, lapsed pins, abandoned jobs) becomes a
  # noncurrent version: kept for the restore window, then gone. No rule expires current
  # objects anywhere: under tables/, catalog/, jobs/ and cluster/ they are live data until
  # Strata deletes them.
  rule {
    id     = "expire-objects-strata-deleted"
    status = "Enabled"
    filter {
      prefix = "${var.root_prefix}/"
    }
    noncurrent_version_expiration {
      noncurrent_days = var.deleted_object_retention_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  # Compaction jobs: noncurrent versions only. A running job's lease is rewritten every
  # heartbeat (engine.jobs.heartbeat_ms, 5 s) and a settled job's objects are deleted by
  # its writer: versions no restore needs (a restored writer clears its shards' old jobs
  # when it opens them). Current objects are never expired by age: a job may wait in the
  # queue for as long as the compactors are down or behind, and S3 lifecycle filters by
  # prefix, tags and size, not by suffix, so a rule cannot reach only the .lease and
  # .result objects and spare the .json specs. Jobs whose shard is never opened again (a
  # dropped table's) stay until removed with the table (docs/deployment.md).
  rule {
    id     = "expire-replaced-compaction-job-versions"
    status = "Enabled"
    filter {
      prefix = "${var.root_prefix}/jobs/"
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  # Ingest nodes rewrite their liveness record and every shard lease they hold each
  # cluster.renew_ms (2 s by default): tens of thousands of noncurrent versions per object
  # and day that no restore needs (a restored deployment's nodes write new ones). Current
  # versions are never expired: a lease is live data while its node runs; a stopped node's
  # liveness record is deleted by strata, a killed node's stays stale and is ignored.
  rule {
    id     = "expire-replaced-cluster-records"
    status = "Enabled"
    filter {
      prefix = "${var.root_prefix}/cluster/"
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  depends_on = [aws_s3_bucket_versioning.data]
}

data "aws_iam_policy_document" "data" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.data.arn,
      "${aws_s3_bucket.data.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "DenyOldTls"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.data.arn, "${aws_s3_bucket.data.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }

  # Objects are encrypted with this key by default; refuse a request that asks for another.
  statement {
    sid       = "DenyOtherEncryptionKeys"
    effect    = "Deny"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.data.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "StringNotEqualsIfExists"
      variable = "s3:x-amz-server-side-encryption-aws-kms-key-id"
      values   = [aws_kms_key.bucket.arn]
    }
  }
}

resource "aws_s3_bucket_policy" "data" {
  bucket = aws_s3_bucket.data.id
  policy = data.aws_iam_policy_document.data.json

  depends_on = [aws_s3_bucket_public_access_block.data]
}

# ---------------------------------------------------------------------------------------
# Access-log bucket (S3 server access logging delivers only to SSE-S3 buckets).

resource "aws_s3_bucket" "logs" {
  # checkov:skip=CKV_AWS_144:Access logs are kept for audit in one region; replicating them is the operator's choice.
  # checkov:skip=CKV_AWS_145:S3 server access logging cannot deliver to an SSE-KMS bucket; SSE-S3 (AES256) is used.
  # checkov:skip=CKV2_AWS_62:Nothing consumes access-log events.
  bucket        = local.log_bucket
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_ownership_controls" "logs" {
  bucket = aws_s3_bucket.logs.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "logs" {
  bucket                  = aws_s3_bucket.logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "logs" {
  bucket = aws_s3_bucket.logs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id

  rule {
    id     = "expire-access-logs"
    status = "Enabled"
    filter {}
    expiration {
      days = var.access_log_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.logs]
}

data "aws_iam_policy_document" "logs" {
  statement {
    sid       = "S3ServerAccessLogsDelivery"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.logs.arn}/s3/*"]
    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_s3_bucket.data.arn]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }

  # Access logs of the ingest and query network load balancers (lb/<deployment>-<role>/).
  statement {
    sid       = "LoadBalancerAccessLogsDelivery"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.logs.arn}/lb/*"]
    principals {
      type        = "Service"
      identifiers = ["delivery.logs.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }

  statement {
    sid       = "LoadBalancerAccessLogsAclCheck"
    actions   = ["s3:GetBucketAcl"]
    resources = [aws_s3_bucket.logs.arn]
    principals {
      type        = "Service"
      identifiers = ["delivery.logs.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.logs.arn, "${aws_s3_bucket.logs.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "logs" {
  bucket = aws_s3_bucket.logs.id
  policy = data.aws_iam_policy_document.logs.json

  depends_on = [aws_s3_bucket_public_access_block.logs]
}

# ---------------------------------------------------------------------------------------
# S3 gateway endpoint: bucket traffic stays on the AWS network and pays no NAT processing
# ($0.045/GB in us-east-1), which for a storage service is most of its traffic.

data "aws_iam_policy_document" "endpoint" {
  statement {
    sid = "StrataBucket"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
      "s3:ListBucket",
      "s3:GetBucketLocation",
    ]
    resources = [aws_s3_bucket.data.arn, "${aws_s3_bucket.data.arn}/*"]
    principals {
      type        = "AWS"
      identifiers = ["*"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:PrincipalAccount"
      values   = [local.account_id]
    }
  }

  dynamic "statement" {
    for_each = length(var.endpoint_extra_bucket_arns) > 0 ? [1] : []
    content {
      sid       = "OtherBucketsReadOnly"
      actions   = ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"]
      resources = concat(var.endpoint_extra_bucket_arns, [for a in var.endpoint_extra_bucket_arns : "${a}/*"])
      principals {
        type        = "AWS"
        identifiers = ["*"]
      }
    }
  }
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${local.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.route_table_ids
  policy            = data.aws_iam_policy_document.endpoint.json
  tags              = merge(local.tags, { Name = "${var.name}-strata-s3" })
}
