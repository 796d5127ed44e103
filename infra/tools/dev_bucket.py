"""Creates (or empties and deletes) the dev cluster's bucket on LocalStack with the settings
of the storage module (infra/terraform/modules/storage/main.tf) that LocalStack's S3 takes:

- block all public access, BucketOwnerEnforced ownership;
- the bucket policy denying requests without TLS (stored; LocalStack's community edition
  does not enforce bucket policies);
- versioning and the same lifecycle rules (abort incomplete multipart uploads after 1 day,
  noncurrent versions of what Strata deleted after 7 days, orphaned jobs after 14 days: the
  module's defaults);
- default encryption SSE-S3 (AES256) instead of SSE-KMS: ci/localstack.sh starts only S3,
  so there is no KMS to hold a customer key.

Server access logging and the VPC endpoint have no local equivalent.
Runs with the LocalStack venv's python (boto3):
    python dev_bucket.py create|delete ENDPOINT BUCKET ROOT_PREFIX
"""

import json
import sys

import boto3
from botocore.exceptions import ClientError


def client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def create(s3, bucket, root):
    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as e:
        if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_ownership_controls(
        Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    )
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    arn = f"arn:aws:s3:::{bucket}"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "abort-incomplete-multipart-uploads",
                    "Status": "Enabled",
                    "Filter": {},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                },
                {
                    "ID": "expire-objects-strata-deleted",
                    "Status": "Enabled",
                    "Filter": {"Prefix": f"{root}/"},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 7},
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                },
                {
                    "ID": "expire-orphaned-compaction-jobs",
                    "Status": "Enabled",
                    "Filter": {"Prefix": f"{root}/jobs/"},
                    "Expiration": {"Days": 14},
                },
            ]
        },
    )
    applied = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    print(f"bucket {bucket}: public access blocked, TLS-only policy, versioning, SSE-S3, {len(applied)} lifecycle rules")


def delete(s3, bucket):
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        return
    # Versioned: every version and delete marker has to go before the bucket can.
    paginator = s3.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=bucket):
        objects = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        for i in range(0, len(objects), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": objects[i : i + 1000], "Quiet": True})
    s3.delete_bucket(Bucket=bucket)
    print(f"bucket {bucket} deleted")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("create", "delete"):
        print(__doc__, file=sys.stderr)
        return 2
    command, endpoint, bucket, root = sys.argv[1:]
    s3 = client(endpoint)
    if command == "create":
        create(s3, bucket, root)
    else:
        delete(s3, bucket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
