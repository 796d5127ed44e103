variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "kms_key_arn" {
  description = "KMS key encrypting the log groups and the alarm topic (storage module output kms_key_arn; its key policy lets CloudWatch Logs and CloudWatch use it)."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN."
  }
}

variable "log_retention_days" {
  description = "Retention of the strata log groups, in days (a value CloudWatch Logs accepts)."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of the retention periods CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, ..., 365, ..., 3653)."
  }
}

variable "metric_namespace" {
  description = "CloudWatch namespace the nodes' CloudWatch agent publishes the Strata Prometheus metrics to."
  type        = string
  default     = "Strata"

  validation {
    condition     = can(regex("^[A-Za-z0-9./_#:-]{1,255}$", var.metric_namespace)) && !startswith(var.metric_namespace, "AWS/")
    error_message = "metric_namespace must be a custom CloudWatch namespace (not AWS/...)."
  }
}

variable "alarm_action_arns" {
  description = "Extra alarm actions (SNS topics of the on-call tooling) besides the topic this module creates."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.alarm_action_arns : startswith(a, "arn:")])
    error_message = "alarm_action_arns must be ARNs."
  }
}

variable "ingest_load_balancer_arn_suffix" {
  description = "ingest module output load_balancer_arn_suffix."
  type        = string
}

variable "ingest_target_group_arn_suffix" {
  description = "ingest module output target_group_arn_suffixes[\"http\"]."
  type        = string
}

variable "query_load_balancer_arn_suffix" {
  description = "query module output load_balancer_arn_suffix."
  type        = string
}

variable "query_target_group_arn_suffix" {
  description = "query module output target_group_arn_suffixes[\"http\"]."
  type        = string
}

variable "wal_backlog_memtables" {
  description = "Frozen memtables (WAL not yet flushed to an SST) in one shard that raise the WAL backlog alarm; writes stall at engine.memtables_frozen_max (default 4)."
  type        = number
  default     = 3

  validation {
    condition     = var.wal_backlog_memtables >= 1
    error_message = "wal_backlog_memtables must be at least 1."
  }
}

variable "compaction_backlog_bytes" {
  description = "strata_pending_compaction_bytes summed over the deployment above which the compaction backlog alarm fires (after compaction_backlog_minutes)."
  type        = number
  default     = 68719476736

  validation {
    condition     = var.compaction_backlog_bytes > 0
    error_message = "compaction_backlog_bytes must be positive."
  }
}

variable "compaction_backlog_minutes" {
  description = "Minutes the compaction backlog must stay above compaction_backlog_bytes before the alarm fires (workers take minutes to start)."
  type        = number
  default     = 30

  validation {
    condition     = var.compaction_backlog_minutes >= 5 && var.compaction_backlog_minutes <= 1440
    error_message = "compaction_backlog_minutes must be between 5 and 1440."
  }
}

variable "sorted_runs_alarm" {
  description = "Sorted runs in one shard that raise the read-amplification alarm; writes are refused above engine.sorted_runs_max (default 24)."
  type        = number
  default     = 20

  validation {
    condition     = var.sorted_runs_alarm >= 2
    error_message = "sorted_runs_alarm must be at least 2."
  }
}

variable "error_rate_percent" {
  description = "Share of HTTP responses with a 5xx status, in percent, above which the 5xx alarm of a role fires."
  type        = number
  default     = 1

  validation {
    condition     = var.error_rate_percent > 0 && var.error_rate_percent <= 100
    error_message = "error_rate_percent must be in (0, 100]."
  }
}

variable "object_store_errors_per_5min" {
  description = "Failed bucket requests (strata_object_store_errors_total of the ingest and query nodes; compactors serve no metrics) in 5 minutes that raise the S3 errors alarm."
  type        = number
  default     = 50

  validation {
    condition     = var.object_store_errors_per_5min >= 1
    error_message = "object_store_errors_per_5min must be at least 1."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
