# `terraform test` (run by infra/check.sh where terraform and the provider mirror exist):
# plans envs/example against a mocked AWS provider (no credentials, nothing created), and
# checks that the cross-variable preconditions refuse what they must.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{}" }
  }
  mock_data "aws_ssm_parameter" {
    defaults = { value = "ami-0123456789abcdef0" }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-0123-0123-0123456789ab" }
  }
  mock_resource "aws_s3_bucket" {
    defaults = { arn = "arn:aws:s3:::strata-example-bucket" }
  }
}

variables {
  vpc_id                  = "vpc-0123456789abcdef0"
  private_subnet_ids      = ["subnet-0123456789abcdef0"]
  private_route_table_ids = ["rtb-0123456789abcdef0"]
  client_cidr_blocks      = ["10.0.0.0/16"]
  artifact_bucket         = "my-artifacts"
}

run "example_plans" {
  command = plan
}

run "example_plans_with_api_and_metrics_keys" {
  command = plan
  variables {
    auth_keys_parameter_name   = "/strata/keys"
    metrics_key_parameter_name = "/strata/metrics-key"
  }
}

# API keys without the metrics key: /metrics would answer the CloudWatch agent 401.
run "iam_refuses_api_keys_without_metrics_key" {
  command = plan
  module {
    source = "../../modules/iam"
  }
  variables {
    name                     = "strata-test"
    bucket_arn               = "arn:aws:s3:::strata-test-bucket"
    kms_key_arn              = "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-0123-0123-0123456789ab"
    auth_keys_parameter_arns = ["arn:aws:ssm:us-east-1:123456789012:parameter/strata/keys"]
  }
  expect_failures = [aws_iam_role_policy.role]
}

run "node_refuses_api_keys_without_metrics_key" {
  command = plan
  module {
    source = "../../modules/strata-node"
  }
  variables {
    name                     = "strata-test"
    role                     = "query"
    vpc_id                   = "vpc-0123456789abcdef0"
    subnet_ids               = ["subnet-0123456789abcdef0"]
    instance_type            = "m6id.xlarge"
    instance_profile_name    = "strata-test-query"
    strata_config            = "data_dir = \"/mnt/nvme/strata\""
    log_group_name           = "/strata/strata-test/query"
    metrics_port             = 8090
    auth_keys_parameter_name = "/strata/keys"
  }
  expect_failures = [aws_launch_template.node]
}

run "compactor_refuses_min_workers_above_max" {
  command = plan
  module {
    source = "../../modules/compactor"
  }
  variables {
    name                  = "strata-test"
    vpc_id                = "vpc-0123456789abcdef0"
    subnet_ids            = ["subnet-0123456789abcdef0"]
    bucket_name           = "strata-test-bucket"
    instance_profile_name = "strata-test-compactor"
    log_group_name        = "/strata/strata-test/compactor"
    min_workers           = 5
    max_workers           = 2
  }
  expect_failures = [aws_autoscaling_policy.jobs_per_worker]
}
