variable "name" {
  description = "Deployment name; prefixes every resource name."
  type        = string
  default     = "strata-example"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower case letters, digits and dashes, starting with a letter."
  }
}

variable "region" {
  description = "AWS region of the deployment."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "vpc_id" {
  description = "Existing VPC to deploy into."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "private_subnet_ids" {
  description = "Private subnets (one per availability zone) for every node and the internal load balancers."
  type        = list(string)

  validation {
    condition     = length(var.private_subnet_ids) > 0
    error_message = "private_subnet_ids must not be empty."
  }
}

variable "private_route_table_ids" {
  description = "Route tables of private_subnet_ids (they get the S3 gateway endpoint route)."
  type        = list(string)

  validation {
    condition     = length(var.private_route_table_ids) > 0
    error_message = "private_route_table_ids must not be empty."
  }
}

variable "client_cidr_blocks" {
  description = "Networks of the applications that call Strata."
  type        = list(string)

  validation {
    condition     = length(var.client_cidr_blocks) > 0
    error_message = "client_cidr_blocks must not be empty."
  }
}

variable "artifact_bucket" {
  description = "Bucket holding the strata release binaries."
  type        = string
}

variable "strata_version" {
  description = "Release of strata to run; the binary is s3://<artifact_bucket>/strata/<version>/<arch>/strata."
  type        = string
  default     = "0.1.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+([-+][0-9A-Za-z.-]+)?$", var.strata_version))
    error_message = "strata_version must be a semantic version such as 0.1.0."
  }
}

variable "certificate_arn" {
  description = "ACM certificate for TLS on the load balancers; empty: plain TCP inside the VPC."
  type        = string
  default     = ""
}

variable "auth_keys_parameter_name" {
  description = "SSM SecureString with the API keys file; empty: no keys (the load balancers are internal)."
  type        = string
  default     = ""
}

variable "metrics_key_parameter_name" {
  description = "SSM SecureString with the API key (namespace \"*\") the CloudWatch agent scrapes /metrics with; required with auth_keys_parameter_name (the plan fails without it: /metrics would answer 401 and every alarm go silent)."
  type        = string
  default     = ""
}

variable "parameter_kms_key_arn" {
  description = "Customer-managed KMS key of the two SecureString parameters; empty when they use the AWS managed key aws/ssm."
  type        = string
  default     = ""

  validation {
    condition     = var.parameter_kms_key_arn == "" || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.parameter_kms_key_arn))
    error_message = "parameter_kms_key_arn must be empty or a KMS key ARN."
  }
}
