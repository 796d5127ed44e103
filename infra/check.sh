#!/usr/bin/env bash
# Validates infra/ without downloading Terraform or providers (nothing can be downloaded
# here): every .tf parses and each module has its files, pins and documented inputs
# (tests/check_terraform.py); `terraform validate` and `terraform test` (plans against a
# mocked provider: the preconditions) where terraform and a local provider mirror are
# installed; checkov passes with only inline, reasoned suppressions; every
# setting the Terraform passes to strata is a real one (tests/check_settings.py, against the
# strata binary: $STRATA_BIN, else $CARGO_TARGET_DIR/debug/strata, which `cargo test` builds);
# the dev cluster's bucket has the storage module's settings (tests/check_dev_bucket.py);
# the multi-node end-to-end test runs on the dev cluster (tests/dev_cluster_failover.sh:
# infra/dev-cluster.sh on LocalStack, 2 ingest nodes, one killed mid-load).
#
# Installs its tools pinned (requirements-*.txt) into venvs under $STRATA_CACHE, again only
# when the pins change. Ends with "test result: ok|FAILED. N passed; M failed" so that
# ci/test.sh counts these checks with the cargo tests; exits non-zero on any failure.
#   bash infra/check.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../ci/env.sh"
python="${PYTHON:-python3.11}"

venv() { # venv DIR REQUIREMENTS
  local dir="$1" req="$2"
  if [ ! -x "$dir/bin/python" ] || ! cmp -s "$req" "$dir/.requirements"; then
    echo "installing $(basename "$req") into $dir"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check --no-deps -r "$req"
    cp "$req" "$dir/.requirements"
  fi
}

hcl_venv="$STRATA_CACHE/infra-venv"
checkov_venv="$STRATA_CACHE/infra-checkov-venv"
venv "$hcl_venv" "$here/requirements-hcl.txt"
venv "$checkov_venv" "$here/requirements-checkov.txt"

passed=0
failed=0
count() { # count LOG: adds the "N passed, M failed" line of a checker to the totals
  local line
  line="$(grep -E '^[a-z]+: [0-9]+ passed, [0-9]+ failed$' "$1" | tail -1 || true)"
  if [ -z "$line" ]; then
    echo "  FAIL  $(basename "$1") checker ended without its summary line"
    failed=$((failed + 1))
    return
  fi
  passed=$((passed + $(echo "$line" | awk '{print $2}')))
  failed=$((failed + $(echo "$line" | awk '{print $4}')))
}
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

echo "== infra: terraform static checks"
"$hcl_venv/bin/python" "$here/tests/check_terraform.py" | tee "$logs/terraform" || true
count "$logs/terraform"

echo "== infra: terraform validate (where terraform and a local provider mirror exist)"
# Nothing is downloaded: the AWS provider comes from a filesystem mirror
# ($INFRA_TF_PLUGIN_MIRROR, default /opt/tf-plugins). envs/example uses every module, so
# validating it type-checks them all. Run on a copy: init writes a lock file and .terraform/.
mirror="${INFRA_TF_PLUGIN_MIRROR:-/opt/tf-plugins}"
if command -v terraform >/dev/null && [ -d "$mirror/registry.terraform.io/hashicorp/aws" ]; then
  mkdir -p "$logs/tf"
  cp -r "$here/terraform" "$logs/tf/tree"
  printf 'provider_installation {\n  filesystem_mirror {\n    path = "%s"\n  }\n}\n' "$mirror" >"$logs/tf/rc"
  if (cd "$logs/tf/tree/envs/example" \
    && export TF_CLI_CONFIG_FILE="$logs/tf/rc" TF_DATA_DIR="$logs/tf/data" TF_IN_AUTOMATION=1 \
    && terraform init -backend=false -input=false -no-color >"$logs/tf/init.log" 2>&1 \
    && terraform validate -no-color >"$logs/tf/validate.log" 2>&1); then
    echo "  ok    terraform validate envs/example (every module; $(terraform version 2>/dev/null | head -1), provider from $mirror)"
    ok=1
  else
    cat "$logs/tf/init.log" "$logs/tf/validate.log" 2>/dev/null | tail -40
    echo "  FAIL  terraform validate envs/example"
    ok=0
  fi
  # terraform test (envs/example/tests/*.tftest.hcl): plans against a mocked AWS provider,
  # so the plan-time checks run too: the example plans, and the cross-variable
  # preconditions refuse what they must (API keys without a metrics key, min > max workers).
  if (cd "$logs/tf/tree/envs/example" \
    && export TF_CLI_CONFIG_FILE="$logs/tf/rc" TF_DATA_DIR="$logs/tf/data" TF_IN_AUTOMATION=1 \
    && terraform test -no-color >"$logs/tf/test.log" 2>&1); then
    grep -E '^  run ' "$logs/tf/test.log" | sed 's/^  run /  ok    terraform test: /'
    runs=$(grep -cE '^  run .*\.\.\. pass$' "$logs/tf/test.log" || true)
    echo "validate: $((ok + runs)) passed, $((1 - ok)) failed" >"$logs/validate"
  else
    tail -40 "$logs/tf/test.log"
    echo "  FAIL  terraform test envs/example (tests/*.tftest.hcl)"
    echo "validate: $ok passed, $((2 - ok)) failed" >"$logs/validate"
  fi
else
  echo "  skipped: no terraform or no provider mirror at $mirror"
  echo "validate: 0 passed, 0 failed" >"$logs/validate"
fi
cat "$logs/validate"
count "$logs/validate"

echo "== infra: checkov"
# Every suppression is an inline `checkov:skip=ID:reason` next to the resource.
"$checkov_venv/bin/checkov" -d "$here/terraform" --framework terraform --quiet --skip-download \
  -o json >"$logs/checkov.json" 2>"$logs/checkov.err" || true
"$hcl_venv/bin/python" "$here/tests/checkov_report.py" "$logs/checkov.json" "$logs/checkov.err" \
  | tee "$logs/checkov" || true
count "$logs/checkov"

echo "== infra: dev bucket = storage module (lifecycle, policy, access block, versioning)"
"$hcl_venv/bin/python" "$here/tests/check_dev_bucket.py" | tee "$logs/devbucket" || true
count "$logs/devbucket"

echo "== infra: settings drift test (Terraform -> strata config)"
"$hcl_venv/bin/python" "$here/tests/check_settings.py" | tee "$logs/settings" || true
if ! grep -qE '^settings: [0-9]+ passed' "$logs/settings"; then echo "settings: 0 passed, 1 failed" >>"$logs/settings"; fi
count "$logs/settings"

echo "== infra: multi-node end-to-end test on the dev cluster (LocalStack)"
INFRA_CHECK_NESTED=1 bash "$here/tests/dev_cluster_failover.sh" 2>&1 | tee "$logs/failover" || true
if ! grep -qE '^failover: [0-9]+ passed' "$logs/failover"; then echo "failover: 0 passed, 1 failed" >>"$logs/failover"; fi
count "$logs/failover"

if [ "$failed" = 0 ]; then
  echo "test result: ok. $passed passed; 0 failed; 0 ignored (infra/check.sh)"
else
  echo "test result: FAILED. $passed passed; $failed failed; 0 ignored (infra/check.sh)"
  exit 1
fi
