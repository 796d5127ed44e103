variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "vpc_id" {
  description = "VPC of the compaction workers."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Private subnets of the workers, one per availability zone (their route tables carry the S3 gateway endpoint)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must hold at least one subnet id (subnet-...)."
  }
}

variable "bucket_name" {
  description = "The Strata bucket (storage module output bucket_name): store.bucket."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name."
  }
}

variable "root_prefix" {
  description = "engine.root_prefix (storage module output root_prefix); the iam policies allow only this prefix."
  type        = string
  default     = "strata"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", var.root_prefix))
    error_message = "root_prefix must be non-empty path segments without leading or trailing slashes."
  }
}

variable "instance_profile_name" {
  description = "Instance profile of the compactor role (iam module output instance_profile_names[\"compactor\"])."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the compactor nodes (observability module output log_group_names[\"compactor\"])."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the Strata metrics (observability module output metric_namespace)."
  type        = string
  default     = "Strata"
}

variable "instance_type" {
  description = "Instance type of the compaction workers. A type with local NVMe (c6id, m6id, c7gd) keeps the merge scratch space (compactor-scratch/) off EBS; others put it on the root volume."
  type        = string
  default     = "c6id.xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like c6id.xlarge."
  }
}

variable "architecture" {
  description = "CPU architecture of instance_type and of the strata binary: x86_64 or arm64."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI of the nodes; empty: the latest Amazon Linux 2023."
  type        = string
  default     = ""
}

variable "root_volume_gb" {
  description = "Root volume size; holds the merge scratch space when instance_type has no instance store."
  type        = number
  default     = 50

  validation {
    condition     = var.root_volume_gb >= 8 && var.root_volume_gb <= 16384
    error_message = "root_volume_gb must be between 8 and 16384."
  }
}

variable "max_workers" {
  description = "Largest number of compaction workers (one strata compactor process per node)."
  type        = number
  default     = 8

  validation {
    condition     = var.max_workers >= 1 && var.max_workers <= 200
    error_message = "max_workers must be between 1 and 200."
  }
}

variable "min_workers" {
  description = "Smallest number of compaction workers; 0 (the default) stops every worker when no job is outstanding. At most max_workers (the plan fails otherwise)."
  type        = number
  default     = 0

  validation {
    condition     = var.min_workers >= 0
    error_message = "min_workers must not be negative."
  }
}

variable "target_jobs_per_worker" {
  description = "Outstanding compaction jobs (waiting and running) per in-service worker that the group's target tracking keeps: 1 runs every published job at once (a worker runs one job at a time); 2 or more trades compaction latency for fewer workers."
  type        = number
  default     = 1

  validation {
    condition     = var.target_jobs_per_worker >= 1 && var.target_jobs_per_worker <= 16
    error_message = "target_jobs_per_worker must be between 1 and 16."
  }
}

variable "scale_in_idle_minutes" {
  description = "Minutes with no outstanding compaction job before the group scales in to min_workers."
  type        = number
  default     = 15

  validation {
    condition     = var.scale_in_idle_minutes >= 5 && var.scale_in_idle_minutes <= 1440
    error_message = "scale_in_idle_minutes must be between 5 and 1440."
  }
}

variable "lease_ms" {
  description = "engine.jobs.lease_ms: a worker's claim on a job lasts this long without a heartbeat (a killed worker's job is taken over after it)."
  type        = number
  default     = 30000

  validation {
    condition     = var.lease_ms >= 5000
    error_message = "lease_ms must be at least 5000."
  }
}

variable "heartbeat_ms" {
  description = "engine.jobs.heartbeat_ms: how often a worker renews its lease (well under lease_ms)."
  type        = number
  default     = 5000

  validation {
    condition     = var.heartbeat_ms >= 1000
    error_message = "heartbeat_ms must be at least 1000."
  }
}

variable "poll_ms" {
  description = "engine.jobs.poll_ms: the first wait of a worker that found no job (one LIST request per look); each further empty look doubles it, up to engine.jobs.idle_poll_max_ms (20 s)."
  type        = number
  default     = 2000

  validation {
    condition     = var.poll_ms >= 100
    error_message = "poll_ms must be at least 100."
  }
}

variable "strata_artifact_s3_uri" {
  description = "s3://bucket/key of the strata binary for architecture; empty when the AMI has /usr/local/bin/strata."
  type        = string
  default     = ""
}

variable "log_filter" {
  description = "log.filter: tracing filter of the strata log."
  type        = string
  default     = "info"
}

variable "strata_environment" {
  description = "Extra STRATA_* settings (docs/configuration.md) for the systemd unit; they win over the file."
  type        = map(string)
  default     = {}
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
