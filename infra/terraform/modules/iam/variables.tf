variable "name" {
  description = "Deployment name; prefixes every resource name (lower case letters, digits and dashes)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "bucket_arn" {
  description = "ARN of the Strata bucket (storage module output bucket_arn)."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]+$", var.bucket_arn))
    error_message = "bucket_arn must be an S3 bucket ARN (arn:aws:s3:::name)."
  }
}

variable "root_prefix" {
  description = "Strata's engine.root_prefix: every Strata object lives under \"<root_prefix>/\" in the bucket (the storage module's root_prefix output)."
  type        = string
  default     = "strata"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", var.root_prefix))
    error_message = "root_prefix must be non-empty path segments without leading or trailing slashes."
  }
}

variable "kms_key_arn" {
  description = "ARN of the bucket's KMS key (storage module output kms_key_arn); every role reads and writes encrypted objects."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "artifact_object_arns" {
  description = "S3 object ARNs of the strata release binaries the nodes download at boot (the role modules' strata_artifact_s3_uri). Empty when the AMI already contains the binary."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.artifact_object_arns : can(regex("^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]+/.+$", a))])
    error_message = "artifact_object_arns must be S3 object ARNs (arn:aws:s3:::bucket/key)."
  }
}

variable "auth_keys_parameter_arns" {
  description = "SSM parameter ARNs of API keys files (SecureString, the TOML of auth.keys) the ingest and query nodes read at boot. Empty: no API keys (keep the load balancers internal)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.auth_keys_parameter_arns : can(regex("^arn:aws[a-z-]*:ssm:[a-z0-9-]+:[0-9]{12}:parameter/.+$", a))])
    error_message = "auth_keys_parameter_arns must be SSM parameter ARNs."
  }
}

variable "metrics_key_parameter_arns" {
  description = "SSM parameter ARNs of the API key (namespace \"*\") the CloudWatch agent on the ingest and query nodes scrapes /metrics with (the role modules' metrics_key_parameter_name). Required whenever auth_keys_parameter_arns is set: with API keys on, /metrics answers 401 without a key and no metric reaches CloudWatch."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.metrics_key_parameter_arns : can(regex("^arn:aws[a-z-]*:ssm:[a-z0-9-]+:[0-9]{12}:parameter/.+$", a))])
    error_message = "metrics_key_parameter_arns must be SSM parameter ARNs."
  }
}

variable "parameter_kms_key_arns" {
  description = "Customer-managed KMS keys of the SecureString parameters in auth_keys_parameter_arns and metrics_key_parameter_arns: the ingest and query roles get kms:Decrypt on them through SSM only. Empty when the parameters use the AWS managed key aws/ssm (no grant needed)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.parameter_kms_key_arns : can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", a))])
    error_message = "parameter_kms_key_arns must be KMS key ARNs (arn:aws:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "enable_ssm_session_manager" {
  description = "Attach AmazonSSMManagedInstanceCore so operators reach nodes through Session Manager instead of SSH (no inbound port is opened)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
