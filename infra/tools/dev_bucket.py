"""Creates (or empties and deletes) the dev cluster's bucket on LocalStack with the settings
of the storage module (infra/terraform/modules/storage/main.tf) that LocalStack's S3 takes:

- block all public access, BucketOwnerEnforced ownership;
- the bucket policy denying requests without TLS (stored; LocalStack's community edition
  does not enforce bucket policies);
- versioning and the same lifecycle rules (abort incomplete multipart uploads after 1 day,
  noncurrent versions of what Strata deleted after 7 days, replaced compaction job and
  ingest cluster records after 1 day: the module's defaults);
- default encryption SSE-S3 (AES256) instead of SSE-KMS: ci/localstack.sh starts only S3,
  so there is no KMS to hold a customer key.

Server access logging and the VPC endpoint have no local equivalent.

`delete` removes every version under ROOT_PREFIX/, then the bucket if nothing else is in it
(so a dev cluster pointed at a shared bucket removes only its own objects).
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
                    "ID": "expire-replaced-compaction-job-versions",
                    "Status": "Enabled",
                    "Filter": {"Prefix": f"{root}/jobs/"},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                },
                {
                    "ID": "expire-replaced-cluster-records",
                    "Status": "Enabled",
                    "Filter": {"Prefix": f"{root}/cluster/"},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                },
            ]
        },
    )
    applied = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    print(f"bucket {bucket}: public access blocked, TLS-only policy, versioning, SSE-S3, {len(applied)} lifecycle rules")


def delete(s3, bucket, root):
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        return
    # Versioned: every version and delete marker goes, not just the current objects. The
    # listing is complete before anything is deleted (deleting while paginating skips
    # versions), and repeated until nothing is left.
    paginator = s3.get_paginator("list_object_versions")
    removed = 0
    for _ in range(10):
        objects = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for page in paginator.paginate(Bucket=bucket, Prefix=f"{root}/")
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if not objects:
            break
        for i in range(0, len(objects), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": objects[i : i + 1000], "Quiet": True})
        removed += len(objects)
    left = s3.list_object_versions(Bucket=bucket, MaxKeys=1)
    if left.get("Versions") or left.get("DeleteMarkers"):
        print(f"bucket {bucket}: {removed} object versions under {root}/ deleted; other objects remain, bucket kept")
        return
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
        delete(s3, bucket, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
