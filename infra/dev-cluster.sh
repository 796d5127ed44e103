#!/usr/bin/env bash
# A Strata cluster on this machine against LocalStack S3, in the shapes the Terraform
# deploys: ingest, compactor and query processes on 127.0.0.1 sharing one bucket, each
# started with the config its Terraform module renders (modules/*/templates/strata.toml.tftpl,
# rendered by tools/tftpl.py), the bucket created with the storage module's policies that
# LocalStack supports (tools/dev_bucket.py).
#
#   infra/dev-cluster.sh start | status | stop
#
# Environment:
#   STRATA_BIN               strata binary (default: $CARGO_TARGET_DIR/debug/strata)
#   STRATA_DEV_DIR           state: configs, data dirs, logs, pid files
#                            (default: $STRATA_CACHE/dev-cluster)
#   STRATA_DEV_BUCKET        bucket (default: strata-dev)
#   STRATA_DEV_INGEST_NODES  ingest processes (default 1; more needs multi-node shard
#                            ownership in strata: today a second ingest fences the first)
#   STRATA_DEV_COMPACTORS    compactor processes (default 2)
#   STRATA_DEV_PORT_BASE     first port (default 18080): ingest i gets BASE+10i (HTTP) and
#                            BASE+10i+1 (Flight); query gets BASE+100 and BASE+101
# `start` also writes $STRATA_DEV_DIR/endpoints.env (INGEST_HTTP, INGEST_FLIGHT, QUERY_HTTP,
# QUERY_FLIGHT, BUCKET, S3_ENDPOINT) for tests to source. `stop` stops the processes, deletes
# the bucket and the state, and stops LocalStack only if `start` started it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$repo/ci/env.sh"

bin="${STRATA_BIN:-$CARGO_TARGET_DIR/debug/strata}"
dir="${STRATA_DEV_DIR:-$STRATA_CACHE/dev-cluster}"
bucket="${STRATA_DEV_BUCKET:-strata-dev}"
ingest_nodes="${STRATA_DEV_INGEST_NODES:-1}"
compactors="${STRATA_DEV_COMPACTORS:-2}"
base="${STRATA_DEV_PORT_BASE:-18080}"
root_prefix="strata"
endpoint="$STRATA_TEST_S3_ENDPOINT"
ls_python="$STRATA_CACHE/localstack-venv/bin/python"
python="${PYTHON:-python3.11}"

ready() { curl -fsS --max-time 2 "http://$1/ready" >/dev/null 2>&1; }

render() { # render ROLE OUT VARS_JSON: the module's template with the fixture's values and ours
  "$python" - "$here" "$1" "$2" "$3" <<'PY'
import json, pathlib, sys
infra, role, out, ours = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
sys.path.insert(0, str(infra / "tools"))
import tftpl
variables = json.loads((infra / "tests" / "config-vars.json").read_text())[role][0]
variables.update(ours)
tpl = infra / "terraform" / "modules" / role / "templates" / "strata.toml.tftpl"
pathlib.Path(out).write_text(tftpl.render(tpl.read_text(), variables))
PY
}

launch() { # launch NAME ROLE CONFIG [ARGS...]
  local name="$1" role="$2" config="$3"
  shift 3
  "$bin" config --role "$role" --config "$config" "$@" >/dev/null
  # The S3 endpoint is the only setting the AWS deployment does not have.
  STRATA_STORE_ENDPOINT="$endpoint" nohup "$bin" "$role" --config "$config" "$@" \
    >"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name.pid"
}

start() {
  if [ -d "$dir/pids" ] && ls "$dir"/pids/*.pid >/dev/null 2>&1; then
    echo "a dev cluster is already running in $dir (infra/dev-cluster.sh stop first)" >&2
    exit 1
  fi
  [ -x "$bin" ] || { echo "no strata binary at $bin (cargo build -p strata, or set STRATA_BIN)" >&2; exit 1; }
  if [ "$ingest_nodes" -gt 1 ]; then
    echo "warning: $ingest_nodes ingest processes need multi-node shard ownership in strata; without it they fence each other" >&2
  fi
  mkdir -p "$dir"/{config,data,logs,pids}
  if ! bash "$repo/ci/localstack.sh" status | grep -q running; then
    touch "$dir/started-localstack"
  fi
  # Its log, not our stdout: the LocalStack it starts in the background would hold that open.
  bash "$repo/ci/localstack.sh" start >"$dir/logs/localstack-start.log" 2>&1 \
    || { cat "$dir/logs/localstack-start.log" >&2; exit 1; }
  tail -1 "$dir/logs/localstack-start.log"
  "$ls_python" "$here/tools/dev_bucket.py" create "$endpoint" "$bucket" "$root_prefix"

  local common
  common="\"bucket\": \"$bucket\", \"region\": \"$AWS_REGION\", \"root_prefix\": \"$root_prefix\", \"auth_keys_file\": \"\", \"log_filter\": \"info\""
  local ingest_http=() ingest_flight=()
  for i in $(seq 0 $((ingest_nodes - 1))); do
    local http="127.0.0.1:$((base + 10 * i))" flight="127.0.0.1:$((base + 10 * i + 1))"
    render ingest "$dir/config/ingest-$i.toml" "{$common, \"data_dir\": \"$dir/data/ingest-$i\", \"cache_bytes_max\": 1073741824, \"level_bytes_base\": 268435456, \"levels\": 4}"
    launch "ingest-$i" ingest "$dir/config/ingest-$i.toml" --http "$http" --flight "$flight"
    ingest_http+=("$http")
    ingest_flight+=("$flight")
  done
  for i in $(seq 0 $((compactors - 1))); do
    render compactor "$dir/config/compactor-$i.toml" "{$common, \"data_dir\": \"$dir/data/compactor-$i\", \"poll_ms\": 500}"
    STRATA_COMPACTOR_NAME="dev-compactor-$i" launch "compactor-$i" compactor "$dir/config/compactor-$i.toml"
  done
  local qhttp="127.0.0.1:$((base + 100))" qflight="127.0.0.1:$((base + 101))"
  render query "$dir/config/query-0.toml" "{$common, \"data_dir\": \"$dir/data/query-0\", \"cache_bytes_max\": 1073741824, \"memory_limit_bytes\": 536870912}"
  launch query-0 query "$dir/config/query-0.toml" --http "$qhttp" --flight "$qflight"

  for addr in "${ingest_http[@]}" "$qhttp"; do
    for _ in $(seq 1 120); do ready "$addr" && break; sleep 0.5; done
    ready "$addr" || { echo "strata at $addr did not become ready; logs in $dir/logs" >&2; status || true; exit 1; }
  done
  sleep 1
  for f in "$dir"/pids/compactor-*.pid; do
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "$(basename "$f" .pid) exited; see $dir/logs" >&2; exit 1; }
  done

  cat >"$dir/endpoints.env" <<EOF
INGEST_HTTP=http://${ingest_http[0]}
INGEST_FLIGHT=${ingest_flight[0]}
QUERY_HTTP=http://$qhttp
QUERY_FLIGHT=$qflight
BUCKET=$bucket
S3_ENDPOINT=$endpoint
EOF
  cat <<EOF
Strata dev cluster up (state and logs: $dir)
  S3 (LocalStack):  $endpoint  bucket $bucket, prefix $root_prefix/
  ingest:           http://${ingest_http[0]}  (data API, POST /sql, /metrics)   flight ${ingest_flight[0]}
  compactors:       $compactors (no listener; logs in $dir/logs)
  query:            http://$qhttp  (read-only POST /sql)   flight $qflight
Try:
  curl -s http://${ingest_http[0]}/sql -d "CREATE TABLE t (id BIGINT, v VARCHAR, PRIMARY KEY (id))"
  curl -s http://${ingest_http[0]}/sql -d "INSERT INTO t VALUES (1, 'a')"
  curl -s http://$qhttp/sql -d "SELECT * FROM t"
  $bin sql --flight $qflight "SELECT count(*) FROM t"
Stop: bash infra/dev-cluster.sh stop
EOF
}

status() {
  if ! ls "$dir"/pids/*.pid >/dev/null 2>&1; then echo "no dev cluster in $dir"; return 1; fi
  local bad=0
  for f in "$dir"/pids/*.pid; do
    local name pid
    name="$(basename "$f" .pid)"
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then echo "$name: running (pid $pid)"; else echo "$name: exited"; bad=1; fi
  done
  [ -f "$dir/endpoints.env" ] && cat "$dir/endpoints.env"
  return $bad
}

stop() {
  if [ -d "$dir/pids" ]; then
    for f in "$dir"/pids/*.pid; do
      [ -f "$f" ] || continue
      kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
    for f in "$dir"/pids/*.pid; do
      [ -f "$f" ] || continue
      local pid
      pid="$(cat "$f")"
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$f"
    done
  fi
  if bash "$repo/ci/localstack.sh" status | grep -q running; then
    "$ls_python" "$here/tools/dev_bucket.py" delete "$endpoint" "$bucket" "$root_prefix" || true
  fi
  if [ -f "$dir/started-localstack" ]; then bash "$repo/ci/localstack.sh" stop >/dev/null 2>&1; fi
  rm -rf "$dir"
  echo "dev cluster stopped"
}

case "${1:-}" in
  start) start ;;
  status) status ;;
  stop) stop ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
