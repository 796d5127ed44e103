"""Creates (or empties and deletes) the dev cluster's bucket on LocalStack with the settings
of the storage module (infra/terraform/modules/storage/main.tf) that LocalStack's S3 takes:

- block all public access, BucketOwnerEnforced ownership;
- the bucket policy's statements but those in POLICY_NOT_LOCAL (stored; LocalStack's
  community edition does not enforce bucket policies);
- versioning and the same lifecycle rules with the module's default days;
- default encryption SSE-S3 (AES256) instead of SSE-KMS: ci/localstack.sh starts only S3,
  so there is no KMS to hold a customer key.

Server access logging and the VPC endpoint have no local equivalent.

The settings are the data below (PUBLIC_ACCESS_BLOCK, OBJECT_OWNERSHIP, VERSIONING,
lifecycle_rules(), bucket_policy()); infra/tests/check_dev_bucket.py parses the storage
module with python-hcl2 and fails when they differ from it, so the two cannot drift.

`delete` removes every version under ROOT_PREFIX/, then the bucket if nothing else is in it
(so a dev cluster pointed at a shared bucket removes only its own objects).
Runs with the LocalStack venv's python (boto3):
    python dev_bucket.py create|delete ENDPOINT BUCKET ROOT_PREFIX
"""

import json
import sys

# aws_s3_bucket_public_access_block.data, aws_s3_bucket_ownership_controls.data and
# aws_s3_bucket_versioning.data of the storage module.
PUBLIC_ACCESS_BLOCK = {
    "BlockPublicAcls": True,
    "IgnorePublicAcls": True,
    "BlockPublicPolicy": True,
    "RestrictPublicBuckets": True,
}
OBJECT_OWNERSHIP = "BucketOwnerEnforced"
VERSIONING = "Enabled"

# Statements of the module's bucket policy (data.aws_iam_policy_document.data) that the dev
# bucket leaves out, and why. Every other statement is applied as the module writes it.
POLICY_NOT_LOCAL = {
    "DenyOtherEncryptionKeys": "names the module's KMS key; the dev bucket is SSE-S3 (no KMS runs locally)",
}


def lifecycle_rules(root):
    """aws_s3_bucket_lifecycle_configuration.data with the module's default days."""
    return [
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


def bucket_policy(bucket):
    """The module's bucket policy without the statements in POLICY_NOT_LOCAL."""
    arn = f"arn:aws:s3:::{bucket}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
            {
                "Sid": "DenyOldTls",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
                "Condition": {"NumericLessThan": {"s3:TlsVersion": "1.2"}},
            },
        ],
    }


def client(endpoint):
    import boto3  # the LocalStack venv has it; the checks import this module without it

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def create(s3, bucket, root):
    from botocore.exceptions import ClientError

    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as e:
        if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=dict(PUBLIC_ACCESS_BLOCK))
    s3.put_bucket_ownership_controls(
        Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": OBJECT_OWNERSHIP}]}
    )
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": VERSIONING})
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    policy = bucket_policy(bucket)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": lifecycle_rules(root)})
    applied = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    sids = ", ".join(st["Sid"] for st in policy["Statement"])
    print(f"bucket {bucket}: public access blocked, policy ({sids}), versioning, SSE-S3, {len(applied)} lifecycle rules")


def delete(s3, bucket, root):
    from botocore.exceptions import ClientError

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
