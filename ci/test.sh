#!/usr/bin/env bash
# The test command (README, .ci/run): installs what it needs, starts LocalStack, then runs
# formatting, lints and every test, LocalStack S3 included.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

started_localstack=0
if ! bash ci/localstack.sh status | grep -q running; then started_localstack=1; fi
bash ci/localstack.sh start
cleanup() { if [ "$started_localstack" = 1 ]; then bash ci/localstack.sh stop; fi; }
trap cleanup EXIT
# With LocalStack up, S3 tests must run, not skip.
export STRATA_REQUIRE_S3=1

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
