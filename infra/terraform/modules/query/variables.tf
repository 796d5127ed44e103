variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "vpc_id" {
  description = "VPC of the query nodes and their load balancer."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Private subnets of the nodes and the (internal) network load balancer, one per availability zone."
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
  description = "Instance profile of the query role (iam module output instance_profile_names[\"query\"])."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the query nodes (observability module output log_group_names[\"query\"])."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the Strata metrics (observability module output metric_namespace)."
  type        = string
  default     = "Strata"
}

variable "instance_type" {
  description = "Instance type of the query nodes; local NVMe (m6id, r6id, c7gd) holds the cache of S3-level data and downloaded SSTs."
  type        = string
  default     = "m6id.xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like m6id.xlarge."
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

variable "min_nodes" {
  description = "Smallest number of query nodes."
  type        = number
  default     = 1

  validation {
    condition     = var.min_nodes >= 1
    error_message = "min_nodes must be at least 1 (the load balancer needs a target)."
  }
}

variable "max_nodes" {
  description = "Largest number of query nodes (query nodes are stateless readers: any number may run)."
  type        = number
  default     = 6

  validation {
    condition     = var.max_nodes >= 1 && var.max_nodes <= 200
    error_message = "max_nodes must be between 1 and 200."
  }
}

variable "target_cpu_percent" {
  description = "Average CPU utilisation the group's target tracking policy keeps the query nodes at."
  type        = number
  default     = 60

  validation {
    condition     = var.target_cpu_percent >= 10 && var.target_cpu_percent <= 90
    error_message = "target_cpu_percent must be between 10 and 90."
  }
}

variable "strata_artifact_s3_uri" {
  description = "s3://bucket/key of the strata binary for architecture; empty when the AMI has /usr/local/bin/strata."
  type        = string
  default     = ""
}

variable "auth_keys_parameter_name" {
  description = "SSM SecureString parameter with the API keys file (auth.keys); empty: no keys, every caller may do everything, so keep the load balancer internal and allowed_cidr_blocks narrow."
  type        = string
  default     = ""
}

variable "metrics_key_parameter_name" {
  description = "SSM SecureString parameter with an API key (the bearer token itself, whose sha256 is in the keys file with namespace = \"*\"; one line) that the local CloudWatch agent scrapes /metrics with. Required when auth_keys_parameter_name is set (the plan fails without it): /metrics answers 401 to the agent otherwise and no metric, alarm or compactor scaling works. Its ARN goes to the iam module's metrics_key_parameter_arns."
  type        = string
  default     = ""
}

variable "http_port" {
  description = "HTTP port (POST /sql, /health, /ready, /metrics): http = 0.0.0.0:PORT."
  type        = number
  default     = 8090

  validation {
    condition     = var.http_port > 1023 && var.http_port < 65536
    error_message = "http_port must be an unprivileged port (1024-65535)."
  }
}

variable "flight_port" {
  description = "Arrow Flight SQL port: flight = 0.0.0.0:PORT."
  type        = number
  default     = 8091

  validation {
    condition     = var.flight_port > 1023 && var.flight_port < 65536
    error_message = "flight_port must be an unprivileged port (1024-65535)."
  }
}

variable "postgres_port" {
  description = "PostgreSQL wire protocol port (psql, psycopg, JDBC, BI tools); 0 = off (the nodes do not listen). The load balancer passes it through as plain TCP even with certificate_arn (PostgreSQL clients negotiate TLS inside the protocol, which a TLS listener cannot answer): the API key travels as the password, so keep allowed_cidr_blocks to networks you trust."
  type        = number
  default     = 0

  validation {
    condition     = var.postgres_port == 0 || (var.postgres_port > 1023 && var.postgres_port < 65536)
    error_message = "postgres_port must be 0 (off) or an unprivileged port (1024-65535)."
  }
}

variable "allowed_cidr_blocks" {
  description = "Client networks allowed to reach the load balancer."
  type        = list(string)

  validation {
    condition     = length(var.allowed_cidr_blocks) > 0 && alltrue([for c in var.allowed_cidr_blocks : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "allowed_cidr_blocks must be CIDR blocks, and not 0.0.0.0/0."
  }
}

variable "certificate_arn" {
  description = "ACM certificate for TLS listeners on the load balancer; empty: TCP listeners (TLS end to end needs tls.cert/tls.key on the nodes instead)."
  type        = string
  default     = ""
}

variable "access_logs_bucket" {
  description = "Bucket (storage module output log_bucket_name) receiving the load balancer's access logs."
  type        = string
}

variable "deletion_protection" {
  description = "Protect the load balancer from deletion."
  type        = bool
  default     = true
}

variable "memory_limit_bytes" {
  description = "query.memory_limit_bytes: memory one query's operators may use (nothing spills): size it to the instance memory divided by the concurrent queries expected."
  type        = number
  default     = 2147483648

  validation {
    condition     = var.memory_limit_bytes >= 67108864
    error_message = "memory_limit_bytes must be at least 64 MiB."
  }
}

variable "timeout_ms" {
  description = "query.timeout_ms: a query running longer fails with timeout."
  type        = number
  default     = 300000

  validation {
    condition     = var.timeout_ms >= 1000
    error_message = "timeout_ms must be at least 1000."
  }
}

variable "result_bytes_max" {
  description = "query.result_bytes_max: result bytes POST /sql buffers at most (Flight SQL streams without this limit)."
  type        = number
  default     = 268435456

  validation {
    condition     = var.result_bytes_max >= 1048576
    error_message = "result_bytes_max must be at least 1 MiB."
  }
}

variable "cache_bytes_max" {
  description = "engine.cache_bytes_max: bytes of S3-level data cached on the node's NVMe (the query cache)."
  type        = number
  default     = 68719476736

  validation {
    condition     = var.cache_bytes_max >= 0
    error_message = "cache_bytes_max must not be negative."
  }
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
