#!/usr/bin/env bash
# Multi-node end-to-end test on the dev cluster: `infra/dev-cluster.sh start` with 2 ingest
# nodes and 2 compactors (plus the query service) on LocalStack, then
# dev_cluster_failover.py: tables spread over both nodes, writes through both (forwarded),
# the owner of a table SIGKILLed mid-load, the survivor takes its shards over after the
# 3 s lease, the query service sees every acknowledged row. Then `dev-cluster.sh stop`,
# also on failure or interruption (trap), and a check that no process of it is left.
#
# Its own bucket, root prefix, state directory and ports, so it collides neither with a
# dev cluster someone runs nor with the tests sharing LocalStack. Needs the strata binary
# ($STRATA_BIN, else $CARGO_TARGET_DIR/debug/strata); starts LocalStack if it is not
# running (and stops it again). Prints `failover: N passed, M failed`, and, unless run by
# infra/check.sh (INFRA_CHECK_NESTED=1, which totals it), `test result: ...`.
#   bash infra/tests/dev_cluster_failover.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
infra="$(cd "$here/.." && pwd)"
source "$infra/../ci/env.sh"
python="${PYTHON:-python3.11}"

run_id="$(date +%s)-$$"
export STRATA_DEV_DIR
STRATA_DEV_DIR="$(mktemp -d "${TMPDIR:-/tmp}/strata-failover.XXXXXX")"
export STRATA_DEV_BUCKET="strata-failover-$run_id"
export STRATA_DEV_ROOT_PREFIX="failover-$run_id"
export STRATA_DEV_INGEST_NODES=2
export STRATA_DEV_COMPACTORS=2
# A port base with every port the cluster binds free: ingest-i BASE+10(i-1), +1 and +2
# (HTTP, Flight, PostgreSQL), query BASE+100, +101 and +102; all below Linux's ephemeral
# range (32768 and up), where an outgoing connection may take a port between the check and
# the bind (a PostgreSQL port not checked and taken that way failed a run).
export STRATA_DEV_PORT_BASE
STRATA_DEV_PORT_BASE="$("$python" - "$$" <<'PY'
import socket, sys
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
start = 20000 + (int(sys.argv[1]) % 60) * 200
for k in range(60):
    base = 20000 + (start - 20000 + 200 * k) % 12000
    if all(free(base + d) for d in (0, 1, 2, 10, 11, 12, 100, 101, 102)):
        print(base)
        break
else:
    sys.exit("no free port range")
PY
)"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1"; }

show_logs() {
  for log in "$STRATA_DEV_DIR"/logs/*.log; do
    [ -f "$log" ] || continue
    echo "--- last lines of $(basename "$log")"
    tail -n 15 "$log" | cut -c1-400
  done
}
# Whatever happens (failure, set -e, Ctrl-C, kill): stop the cluster and remove its state.
# Stopping twice is harmless, so this also runs after the stop below.
driver=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$driver" ]; then kill "$driver" 2>/dev/null || true; fi
  if [ -d "$STRATA_DEV_DIR" ]; then
    if [ "$rc" != 0 ]; then show_logs; fi
    bash "$infra/dev-cluster.sh" stop >/dev/null 2>&1 || echo "dev-cluster.sh stop failed" >&2
    rm -rf "$STRATA_DEV_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "dev cluster failover test: bucket $STRATA_DEV_BUCKET, prefix $STRATA_DEV_ROOT_PREFIX/, ports from $STRATA_DEV_PORT_BASE"
if bash "$infra/dev-cluster.sh" start >"$STRATA_DEV_DIR/start.log" 2>&1; then
  ok "dev-cluster.sh start: 2 ingest nodes, 2 compactors, query ($(grep -c '^  ingest-' "$STRATA_DEV_DIR/start.log") ingest endpoints printed)"
  # In the background and waited for, so that a signal reaches the trap at once.
  "$python" -u "$here/dev_cluster_failover.py" "$STRATA_DEV_DIR" "$infra/dev-cluster.sh" \
    >"$STRATA_DEV_DIR/driver.log" 2>&1 &
  driver=$!
  tail -n +1 --pid="$driver" -f "$STRATA_DEV_DIR/driver.log" &
  wait "$driver" || true
  driver=""
  wait
  line="$(grep -E '^driver: [0-9]+ passed, [0-9]+ failed$' "$STRATA_DEV_DIR/driver.log" | tail -1 || true)"
  if [ -n "$line" ]; then
    passed=$((passed + $(echo "$line" | awk '{print $2}')))
    failed=$((failed + $(echo "$line" | awk '{print $4}')))
  else
    fail "dev_cluster_failover.py ended without its summary line"
  fi
else
  cat "$STRATA_DEV_DIR/start.log"
  fail "dev-cluster.sh start"
fi

# Stop here (not only in the trap) to check that it leaves nothing behind.
pids="$(cat "$STRATA_DEV_DIR"/pids/*.pid 2>/dev/null | tr '\n' ' ' || true)"
if [ "$failed" != 0 ]; then show_logs; fi
if bash "$infra/dev-cluster.sh" stop >/dev/null 2>&1; then ok "dev-cluster.sh stop"; else fail "dev-cluster.sh stop"; fi
left=""
for pid in $pids; do
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STRATA_DEV_DIR/config/"; then
    left="$left $pid"
  fi
done
bucket_left="$("$STRATA_CACHE/localstack-venv/bin/python" - "$STRATA_TEST_S3_ENDPOINT" "$STRATA_DEV_BUCKET" <<'PY' 2>&1 || true
import sys, boto3
from botocore.exceptions import ClientError
try:
    boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").head_bucket(Bucket=sys.argv[2])
    print("bucket kept")
except ClientError:
    pass
PY
)"
if [ -z "$left" ] && [ ! -e "$STRATA_DEV_DIR" ] && [ -z "$bucket_left" ]; then
  ok "no dev cluster process, state or bucket left after stop"
else
  fail "no dev cluster process, state or bucket left after stop (processes:${left:- none}; dir $( [ -e "$STRATA_DEV_DIR" ] && echo kept || echo gone); ${bucket_left:-bucket gone})"
  for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$STRATA_DEV_DIR"
fi

echo "failover: $passed passed, $failed failed"
if [ -z "${INFRA_CHECK_NESTED:-}" ]; then
  if [ "$failed" = 0 ]; then
    echo "test result: ok. $passed passed; 0 failed; 0 ignored (infra/tests/dev_cluster_failover.sh)"
  else
    echo "test result: FAILED. $passed passed; $failed failed; 0 ignored (infra/tests/dev_cluster_failover.sh)"
  fi
fi
[ "$failed" = 0 ]
