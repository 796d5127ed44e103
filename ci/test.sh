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
# Real SQL clients (pinned: ADBC from PyPI, the Flight SQL JDBC driver from Maven
# Central); their tests must run, not skip.
clients="$(bash ci/clients.sh)"
eval "$clients"
export STRATA_REQUIRE_CLIENTS=1

echo "== module graph: no cycle among the engine's modules"
python3 ci/modgraph.py --check crates/strata-engine/src
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
log="$STRATA_CACHE/test-output.log"
cargo test --workspace --locked 2>&1 | tee "$log"
echo "== infra checks (Terraform parse, checkov, settings drift against the strata binary)"
bash infra/check.sh 2>&1 | tee -a "$log"
# One closing line with the totals over every test binary (cargo prints one per binary,
# and the last is often an empty doc-test run).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
