# Sourced by every ci/ script: one cache directory outside the clone for the cargo target
# dir and the LocalStack virtualenv, so CI runs and later sessions reuse them.
export STRATA_CACHE="${STRATA_CACHE:-$HOME/.cache/strata}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$STRATA_CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export LOCALSTACK_PORT="${LOCALSTACK_PORT:-4566}"
export STRATA_TEST_S3_ENDPOINT="${STRATA_TEST_S3_ENDPOINT:-http://127.0.0.1:$LOCALSTACK_PORT}"
export STRATA_TEST_S3_BUCKET="${STRATA_TEST_S3_BUCKET:-strata-test}"
# LocalStack accepts any credentials; the SDK chain reads these from the environment.
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
mkdir -p "$STRATA_CACHE"
