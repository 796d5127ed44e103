variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "bucket_name" {
  description = "Name of the Strata bucket (the source of truth of every table). Empty: \"<name>-strata-<account id>-<region>\"."
  type        = string
  default     = ""

  validation {
    condition     = var.bucket_name == "" || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name (3-63 characters: lower case letters, digits, dots and dashes)."
  }
}

variable "root_prefix" {
  description = "Strata's engine.root_prefix: every Strata object lives under \"<root_prefix>/\". Must match the setting the roles run with (the iam and role modules take the same value)."
  type        = string
  default     = "strata"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", var.root_prefix))
    error_message = "root_prefix must be non-empty path segments without leading or trailing slashes."
  }
}

variable "vpc_id" {
  description = "VPC the Strata nodes run in; it gets an S3 gateway endpoint so bucket traffic never crosses a NAT gateway."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "route_table_ids" {
  description = "Route tables of the subnets the Strata nodes run in (the gateway endpoint adds the S3 prefix-list route to each)."
  type        = list(string)

  validation {
    condition     = length(var.route_table_ids) > 0 && alltrue([for id in var.route_table_ids : can(regex("^rtb-[0-9a-f]+$", id))])
    error_message = "route_table_ids must hold at least one route table id (rtb-...)."
  }
}

variable "endpoint_extra_bucket_arns" {
  description = "Other buckets the nodes may reach through the gateway endpoint (its policy allows only these and the Strata bucket): the artifact bucket with the strata binary, the OS package repositories (Amazon Linux 2023 serves them from S3)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.endpoint_extra_bucket_arns : can(regex("^arn:aws[a-z-]*:s3:::[a-z0-9*.-]+$", a))])
    error_message = "endpoint_extra_bucket_arns must be bucket ARNs (arn:aws:s3:::name; * allowed in the name)."
  }
}

variable "kms_deletion_window_days" {
  description = "Waiting period before the bucket's KMS key is deleted after a destroy (the data is unreadable without it)."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_deletion_window_days >= 7 && var.kms_deletion_window_days <= 30
    error_message = "kms_deletion_window_days must be between 7 and 30."
  }
}

variable "kms_service_principals" {
  description = "Regional service principals that may use the key besides the account's IAM principals (CloudWatch Logs encrypts the Strata log groups with it)."
  type        = list(string)
  default     = ["logs"]

  validation {
    condition     = alltrue([for s in var.kms_service_principals : contains(["logs", "sns"], s)])
    error_message = "kms_service_principals may contain \"logs\" and \"sns\"."
  }
}

variable "abort_incomplete_multipart_days" {
  description = "Days after which an unfinished multipart upload (a Parquet file of a crashed compactor) is aborted and its parts deleted."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_days >= 1 && var.abort_incomplete_multipart_days <= 30
    error_message = "abort_incomplete_multipart_days must be between 1 and 30."
  }
}

variable "deleted_object_retention_days" {
  description = "Days a version that Strata's garbage collector deleted (or overwrote) stays restorable before the noncurrent version expires. This is the restore window of the bucket (docs/deployment.md, backup and restore)."
  type        = number
  default     = 7

  validation {
    condition     = var.deleted_object_retention_days >= 1 && var.deleted_object_retention_days <= 365
    error_message = "deleted_object_retention_days must be between 1 and 365."
  }
}

variable "access_log_retention_days" {
  description = "Days the S3 server access logs are kept."
  type        = number
  default     = 365

  validation {
    condition     = var.access_log_retention_days >= 30
    error_message = "access_log_retention_days must be at least 30."
  }
}

variable "force_destroy" {
  description = "Let terraform destroy delete a non-empty bucket. Keep false outside throw-away environments: the bucket is the only copy of the data."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
