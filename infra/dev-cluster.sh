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
#   STRATA_DEV_ROOT_PREFIX   engine.root_prefix (default: strata)
#   STRATA_DEV_INGEST_NODES  ingest nodes (default 2): ingest-1, ingest-2, ... (their
#                            cluster.node), sharing the shards through leases in the bucket;
#                            cluster.lease_ms 3000 and renew_ms 500, so a killed node's shards
#                            move within ~3 s
#   STRATA_DEV_COMPACTORS    compactor processes (default 2)
#   STRATA_DEV_PORT_BASE     first port (default 18080): ingest-i gets BASE+10(i-1) (HTTP),
#                            BASE+10(i-1)+1 (Flight) and +2 (PostgreSQL); query gets
#                            BASE+100, BASE+101 and BASE+102
# `start` also writes $STRATA_DEV_DIR/endpoints.env for tests to source: INGEST_NODES,
# INGEST_<i>_HTTP and INGEST_<i>_FLIGHT for each node (INGEST_HTTP, INGEST_FLIGHT: ingest-1),
# QUERY_HTTP, QUERY_FLIGHT, BUCKET, ROOT_PREFIX, S3_ENDPOINT; process ids are in
# $STRATA_DEV_DIR/pids/<name>.pid. `stop` stops the processes, deletes what is under the
# root prefix (and the bucket once empty) and the state, and stops LocalStack only if
# `start` started it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$repo/ci/env.sh"

bin="${STRATA_BIN:-$CARGO_TARGET_DIR/debug/strata}"
dir="${STRATA_DEV_DIR:-$STRATA_CACHE/dev-cluster}"
bucket="${STRATA_DEV_BUCKET:-strata-dev}"
ingest_nodes="${STRATA_DEV_INGEST_NODES:-2}"
compactors="${STRATA_DEV_COMPACTORS:-2}"
base="${STRATA_DEV_PORT_BASE:-18080}"
root_prefix="${STRATA_DEV_ROOT_PREFIX:-strata}"
endpoint="$STRATA_TEST_S3_ENDPOINT"
# Ours, not strata's: strata would warn about each STRATA_* variable that names no setting.
unset STRATA_DEV_DIR STRATA_DEV_BUCKET STRATA_DEV_ROOT_PREFIX STRATA_DEV_INGEST_NODES \
  STRATA_DEV_COMPACTORS STRATA_DEV_PORT_BASE
ls_python="$STRATA_CACHE/localstack-venv/bin/python"
python="${PYTHON:-python3.11}"

ready() { curl -fsS --max-time 2 "http://$1/ready" >/dev/null 2>&1; }
# Whether PID is still one of our processes (a recycled pid of a process that exited is not:
# ours run with a config under $dir).
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "--config $dir/config/"; }

render() { # render ROLE OUT VARS_JSON [BOOT_JSON]: the module's template with the fixture's
  # values and ours, then the boot placeholders filled as the node's user data does
  "$python" - "$here" "$1" "$2" "$3" "${4:-}" <<'PY'
import json, pathlib, sys
infra, role, out, ours, boot = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5] or "{}")
sys.path.insert(0, str(infra / "tools"))
import tftpl
variables = json.loads((infra / "tests" / "config-vars.json").read_text())[role][0]
variables.update(ours)
tpl = infra / "terraform" / "modules" / role / "templates" / "strata.toml.tftpl"
pathlib.Path(out).write_text(tftpl.boot(tftpl.render(tpl.read_text(), variables), boot))
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
  [ "$ingest_nodes" -ge 1 ] || { echo "STRATA_DEV_INGEST_NODES must be at least 1" >&2; exit 1; }
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
  # Ingest nodes: the config the ingest module renders, with this machine's ports and the
  # node's name and address where the user data would put the instance id and private IP.
  local ingest_http=() ingest_flight=()
  for i in $(seq 1 "$ingest_nodes"); do
    local hport=$((base + 10 * (i - 1))) fport=$((base + 10 * (i - 1) + 1))
    render ingest "$dir/config/ingest-$i.toml" \
      "{$common, \"data_dir\": \"$dir/data/ingest-$i\", \"http_port\": $hport, \"flight_port\": $fport, \"cache_bytes_max\": 1073741824, \"level_bytes_base\": 268435456, \"levels\": 4, \"cluster_lease_ms\": 3000, \"cluster_renew_ms\": 500}" \
      "{\"instance_id\": \"ingest-$i\", \"private_ip\": \"127.0.0.1\"}"
    launch "ingest-$i" ingest "$dir/config/ingest-$i.toml" --http "127.0.0.1:$hport" --flight "127.0.0.1:$fport" --postgres "127.0.0.1:$((hport + 2))"
    ingest_http+=("127.0.0.1:$hport")
    ingest_flight+=("127.0.0.1:$fport")
  done
  for i in $(seq 1 "$compactors"); do
    render compactor "$dir/config/compactor-$i.toml" "{$common, \"data_dir\": \"$dir/data/compactor-$i\", \"poll_ms\": 500}"
    STRATA_COMPACTOR_NAME="dev-compactor-$i" launch "compactor-$i" compactor "$dir/config/compactor-$i.toml"
  done
  local qhttp="127.0.0.1:$((base + 100))" qflight="127.0.0.1:$((base + 101))"
  render query "$dir/config/query-1.toml" "{$common, \"data_dir\": \"$dir/data/query-1\", \"cache_bytes_max\": 1073741824, \"memory_limit_bytes\": 536870912}"
  launch query-1 query "$dir/config/query-1.toml" --http "$qhttp" --flight "$qflight" --postgres "127.0.0.1:$((base + 102))"

  for addr in "${ingest_http[@]}" "$qhttp"; do
    for _ in $(seq 1 120); do ready "$addr" && break; sleep 0.5; done
    ready "$addr" || { echo "strata at $addr did not become ready; logs in $dir/logs" >&2; status || true; exit 1; }
  done
  sleep 1
  for f in "$dir"/pids/*.pid; do
    ours "$(cat "$f")" || { echo "$(basename "$f" .pid) exited; see $dir/logs" >&2; exit 1; }
  done

  {
    echo "INGEST_NODES=$ingest_nodes"
    echo "INGEST_HTTP=http://${ingest_http[0]}"
    echo "INGEST_FLIGHT=${ingest_flight[0]}"
    for i in $(seq 1 "$ingest_nodes"); do
      echo "INGEST_${i}_HTTP=http://${ingest_http[$((i - 1))]}"
      echo "INGEST_${i}_FLIGHT=${ingest_flight[$((i - 1))]}"
    done
    echo "QUERY_HTTP=http://$qhttp"
    echo "QUERY_FLIGHT=$qflight"
    echo "BUCKET=$bucket"
    echo "ROOT_PREFIX=$root_prefix"
    echo "S3_ENDPOINT=$endpoint"
  } >"$dir/endpoints.env"
  local last="${ingest_http[$((ingest_nodes - 1))]}"
  echo "Strata dev cluster up (state and logs: $dir)"
  echo "  S3 (LocalStack):  $endpoint  bucket $bucket, prefix $root_prefix/"
  for i in $(seq 1 "$ingest_nodes"); do
    printf '  %-17s http://%s  (data API, POST /sql, /metrics)   flight %s\n' \
      "ingest-$i:" "${ingest_http[$((i - 1))]}" "${ingest_flight[$((i - 1))]}"
  done
  cat <<EOF
  compactors:       $compactors (no listener; logs in $dir/logs)
  query:            http://$qhttp  (read-only POST /sql)   flight $qflight
Any ingest node takes any data API request and forwards it to the node owning the table;
a killed node's tables move to another within ~3 s (cluster.lease_ms). Try:
  curl -s http://${ingest_http[0]}/v1/tables -H 'content-type: application/json' \\
    -d '{"name": "t", "columns": [{"name": "id", "type": "int64", "nullable": false}, {"name": "v", "type": "utf8"}], "primary_key": ["id"]}'
  curl -s http://$last/v1/tables/t/rows -H 'content-type: application/x-ndjson' -d '{"id": 1, "v": "a"}'
  curl -s http://${ingest_http[0]}/v1/admin/tables/t | jq .shards[0].lease
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
    if ours "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: exited"; bad=1; fi
  done
  [ -f "$dir/endpoints.env" ] && cat "$dir/endpoints.env"
  return $bad
}

stop() {
  if [ -d "$dir/pids" ]; then
    for f in "$dir"/pids/*.pid; do
      [ -f "$f" ] || continue
      if ours "$(cat "$f")"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
    done
    for f in "$dir"/pids/*.pid; do
      [ -f "$f" ] || continue
      local pid
      pid="$(cat "$f")"
      for _ in $(seq 1 40); do ours "$pid" || break; sleep 0.25; done
      if ours "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
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
