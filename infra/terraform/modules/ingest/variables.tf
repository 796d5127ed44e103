variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "vpc_id" {
  description = "VPC of the ingest nodes and their load balancer."
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
  description = "Instance profile of the ingest role (iam module output instance_profile_names[\"ingest\"])."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the ingest nodes (observability module output log_group_names[\"ingest\"])."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the Strata metrics (observability module output metric_namespace)."
  type        = string
  default     = "Strata"
}

variable "instance_type" {
  description = "Instance type with NVMe instance store: the NVMe tier (memtables' flushes, L0..Lk SSTs) lives there. docs/deployment.md sizes it."
  type        = string
  default     = "i4i.xlarge"

  validation {
    condition     = can(regex("^(i3|i3en|i4i|i4g|i7ie|i8g|im4gn|is4gen|c5d|c6id|c6gd|c7gd|m5d|m6id|m6gd|m7gd|r5d|r6id|r6gd|r7gd|x2idn|x2iedn)\\.", var.instance_type))
    error_message = "instance_type must be a type with NVMe instance store (i4i, i3en, i4g, im4gn, is4gen, c6id, m6id, r6id, ...)."
  }
}

variable "architecture" {
  description = "CPU architecture of instance_type and of the strata binary: x86_64 (i4i, i3en) or arm64 (i4g, im4gn, is4gen)."
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

variable "node_count" {
  description = "Number of ingest nodes. Shards spread over them by rendezvous hashing (each table has one shard today, so one table's writes go to one node); a node that dies has its shards taken over after cluster_lease_ms. A node added later takes no shards from running nodes (no rebalancing): only free shards, and those of nodes that stop or die."
  type        = number
  default     = 2

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 64
    error_message = "node_count must be between 1 and 64."
  }
}

variable "cluster_lease_ms" {
  description = "cluster.lease_ms: how long a shard lease and a node's liveness record last without renewal, so about how long the shards of a node that dies (not a graceful stop, which hands them over at once) take to come back on another node. Renewed every cluster_lease_ms / 5 (cluster.renew_ms): each node PUTs its liveness record and every lease it holds that often (docs/deployment.md, Cost)."
  type        = number
  default     = 10000

  validation {
    condition     = var.cluster_lease_ms >= 2000 && var.cluster_lease_ms <= 300000
    error_message = "cluster_lease_ms must be between 2000 and 300000."
  }
}

variable "direct_flight_access" {
  description = "Let allowed_cidr_blocks reach each node's flight_port directly, not only through the load balancer: a gRPC call for a shard another node owns is answered UNAVAILABLE with the owner's private address in the strata-owner metadata, and the client retries there. HTTP needs no direct access (any node forwards)."
  type        = bool
  default     = true
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
  description = "HTTP port (data API, POST /sql, /health, /ready, /metrics): http = 0.0.0.0:PORT."
  type        = number
  default     = 8080

  validation {
    condition     = var.http_port > 1023 && var.http_port < 65536
    error_message = "http_port must be an unprivileged port (1024-65535)."
  }
}

variable "flight_port" {
  description = "Arrow Flight SQL and gRPC data API port: flight = 0.0.0.0:PORT."
  type        = number
  default     = 8081

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

variable "memtable_bytes_max" {
  description = "engine.memtable_bytes_max: active memtable size that triggers a flush."
  type        = number
  default     = 67108864

  validation {
    condition     = var.memtable_bytes_max >= 1048576
    error_message = "memtable_bytes_max must be at least 1 MiB."
  }
}

variable "level_bytes_base" {
  description = "engine.level_bytes_base: target size of the row-oriented L1; data past the last row level moves into the columnar levels (Parquet), which the instance store caches (cache_bytes_max; docs/deployment.md)."
  type        = number
  default     = 67108864

  validation {
    condition     = var.level_bytes_base >= 16777216
    error_message = "level_bytes_base must be at least 16 MiB."
  }
}

variable "levels" {
  description = "engine.levels: row-oriented levels including L0; everything below is columnar (LASER: the format follows the level)."
  type        = number
  default     = 2

  validation {
    condition     = var.levels >= 2 && var.levels <= 7
    error_message = "levels must be between 2 and 7."
  }
}

variable "cache_bytes_max" {
  description = "engine.cache_bytes_max: bytes of S3-level data cached on the NVMe."
  type        = number
  default     = 4294967296

  validation {
    condition     = var.cache_bytes_max >= 0
    error_message = "cache_bytes_max must not be negative."
  }
}

variable "sorted_runs_max" {
  description = "engine.sorted_runs_max: sorted runs above which writes are refused with 429 (the write stall alarm's cause)."
  type        = number
  default     = 24

  validation {
    condition     = var.sorted_runs_max >= 4
    error_message = "sorted_runs_max must be at least 4."
  }
}

variable "jobs_outstanding_max" {
  description = "engine.jobs.outstanding_max: S3 compaction jobs a shard keeps published (the compactor group scales on their sum)."
  type        = number
  default     = 4

  validation {
    condition     = var.jobs_outstanding_max >= 1
    error_message = "jobs_outstanding_max must be at least 1."
  }
}

variable "gc_min_age_ms" {
  description = "engine.gc.min_age_ms: objects younger than this are never garbage collected (a margin for unpinned readers of recent manifests and for clock skew; uncommitted uploads are protected by the writer)."
  type        = number
  default     = 120000

  validation {
    condition     = var.gc_min_age_ms >= 60000
    error_message = "gc_min_age_ms must be at least 1 minute (the margin for clock skew and for a reader between reading a manifest and pinning it)."
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
