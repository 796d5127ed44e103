variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "role" {
  description = "The strata role these nodes run: ingest, compactor or query (the `strata ROLE` subcommand)."
  type        = string

  validation {
    condition     = contains(["ingest", "compactor", "query"], var.role)
    error_message = "role must be ingest, compactor or query."
  }
}

variable "vpc_id" {
  description = "VPC of the nodes."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Private subnets the auto-scaling group launches into (one per availability zone; their route tables carry the S3 gateway endpoint)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must hold at least one subnet id (subnet-...)."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the nodes."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like i4i.xlarge."
  }
}

variable "architecture" {
  description = "CPU architecture of instance_type and of the strata binary: x86_64 or arm64 (selects the Amazon Linux 2023 AMI when ami_id is empty)."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI of the nodes. Empty: the latest Amazon Linux 2023 of the architecture (the user data assumes dnf, systemd and the AWS CLI)."
  type        = string
  default     = ""

  validation {
    condition     = var.ami_id == "" || can(regex("^ami-[0-9a-f]+$", var.ami_id))
    error_message = "ami_id must be empty or an AMI id (ami-...)."
  }
}

variable "root_volume_gb" {
  description = "Size of the encrypted gp3 root volume (OS, logs; the data directory when the type has no instance store)."
  type        = number
  default     = 30

  validation {
    condition     = var.root_volume_gb >= 8 && var.root_volume_gb <= 16384
    error_message = "root_volume_gb must be between 8 and 16384."
  }
}

variable "require_instance_store" {
  description = "Fail the boot when the instance has no NVMe instance-store device (true for ingest: its NVMe tier must not land on EBS by accident)."
  type        = bool
  default     = false
}

variable "data_dir" {
  description = "Strata's data_dir on the node (under the NVMe mount /mnt/nvme). Must equal data_dir in strata_config."
  type        = string
  default     = "/mnt/nvme/strata"

  validation {
    condition     = startswith(var.data_dir, "/mnt/nvme/")
    error_message = "data_dir must be under /mnt/nvme/ (where the user data mounts the instance store)."
  }
}

variable "instance_profile_name" {
  description = "Instance profile of the role (iam module output instance_profile_names[role])."
  type        = string

  validation {
    condition     = length(var.instance_profile_name) > 0
    error_message = "instance_profile_name must not be empty."
  }
}

variable "strata_config" {
  description = "The strata TOML configuration, rendered by the role module from its templates/strata.toml.tftpl (checked against the binary by infra/check.sh). At boot the placeholders {{instance_id}} and {{private_ip}} are replaced with the instance's values (IMDSv2); any other {{...}} fails the boot."
  type        = string

  validation {
    condition     = length(trimspace(var.strata_config)) > 0 && !strcontains(var.strata_config, "END_OF_STRATA_CONFIG")
    error_message = "strata_config must be a non-empty TOML document (and must not contain the heredoc marker END_OF_STRATA_CONFIG)."
  }
}

variable "strata_environment" {
  description = "Extra environment of the systemd unit: STRATA_* settings (docs/configuration.md; they override the file) and RUST_* variables. Unknown STRATA_* names are only warned about by strata, so infra/check.sh checks the names the envs pass."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.strata_environment : can(regex("^(STRATA|RUST)_[A-Z0-9_]+$", k)) && !strcontains(v, "\n")])
    error_message = "strata_environment keys must be STRATA_* or RUST_* variable names and values single lines."
  }
}

variable "strata_artifact_s3_uri" {
  description = "s3://bucket/key of the strata binary (built for architecture) downloaded to /usr/local/bin/strata at boot. Empty: the AMI already has it."
  type        = string
  default     = ""

  validation {
    condition     = var.strata_artifact_s3_uri == "" || can(regex("^s3://[a-z0-9][a-z0-9.-]+/.+$", var.strata_artifact_s3_uri))
    error_message = "strata_artifact_s3_uri must be empty or s3://bucket/key."
  }
}

variable "auth_keys_parameter_name" {
  description = "SSM SecureString parameter holding the API keys file (TOML [[keys]]); written to /etc/strata/keys.toml. Empty: none."
  type        = string
  default     = ""
}

variable "metrics_key_parameter_name" {
  description = "SSM SecureString parameter holding an API key with namespace \"*\" the CloudWatch agent scrapes /metrics with; required (a precondition) when auth_keys_parameter_name is set and metrics_port is not 0. Empty: scrape without a key."
  type        = string
  default     = ""
}

variable "metrics_port" {
  description = "Port of the node's HTTP listener that serves /metrics to the local CloudWatch agent; 0 for roles without one (compactor)."
  type        = number
  default     = 0

  validation {
    condition     = var.metrics_port >= 0 && var.metrics_port <= 65535
    error_message = "metrics_port must be between 0 and 65535."
  }
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the Strata metrics (observability module output metric_namespace)."
  type        = string
  default     = "Strata"
}

variable "log_group_name" {
  description = "CloudWatch log group receiving the strata log of these nodes (observability module output log_group_names[role])."
  type        = string

  validation {
    condition     = startswith(var.log_group_name, "/strata/")
    error_message = "log_group_name must be one of the /strata/<name>/<role> groups the observability module creates (the iam module allows only those)."
  }
}

variable "service_ports" {
  description = "TCP ports of the node reachable from the load balancer security groups (empty for the compactor, which listens on nothing)."
  type        = list(number)
  default     = []

  validation {
    condition     = alltrue([for p in var.service_ports : p > 0 && p < 65536])
    error_message = "service_ports must be TCP ports."
  }
}

variable "ingress_security_group_ids" {
  description = "Security groups (the load balancer's) allowed to reach service_ports."
  type        = list(string)
  default     = []
}

variable "min_size" {
  description = "Smallest number of nodes (0 lets the compactor scale to nothing)."
  type        = number
  default     = 1

  validation {
    condition     = var.min_size >= 0
    error_message = "min_size must not be negative."
  }
}

variable "max_size" {
  description = "Largest number of nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.max_size >= 1
    error_message = "max_size must be at least 1."
  }
}

variable "desired_capacity" {
  description = "Initial number of nodes; null leaves it to the scaling policies (and to min_size at creation)."
  type        = number
  default     = null
}

variable "target_group_arns" {
  description = "Load balancer target groups the nodes register with."
  type        = list(string)
  default     = []
}

variable "health_check_grace_seconds" {
  description = "Seconds after launch before failed health checks replace a node (boot, NVMe format, binary download, WAL replay)."
  type        = number
  default     = 300

  validation {
    condition     = var.health_check_grace_seconds >= 60
    error_message = "health_check_grace_seconds must be at least 60."
  }
}

variable "instance_refresh_min_healthy_percentage" {
  description = "Share of nodes kept in service while an instance refresh (upgrade, config change) replaces them (0 for a group of one node: it is replaced, terminate then launch)."
  type        = number
  default     = 90

  validation {
    condition     = var.instance_refresh_min_healthy_percentage >= 0 && var.instance_refresh_min_healthy_percentage <= 100
    error_message = "instance_refresh_min_healthy_percentage must be between 0 and 100."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
