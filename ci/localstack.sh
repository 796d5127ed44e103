#!/usr/bin/env bash
# Installs (pinned, into a venv under $STRATA_CACHE) and starts LocalStack's S3 on
# 127.0.0.1:$LOCALSTACK_PORT, then creates the test bucket.
#   ci/localstack.sh start | stop | status
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
venv="$STRATA_CACHE/localstack-venv"
pidfile="$STRATA_CACHE/localstack.pid"
log="$STRATA_CACHE/localstack.log"
python="${PYTHON:-python3.11}"

healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$LOCALSTACK_PORT/_localstack/health" 2>/dev/null | grep -q '"s3": "\(running\|available\)"'; }

install() {
  if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/localstack-constraints.txt" "$venv/.constraints"; then
    echo "installing LocalStack into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -c "$here/localstack-constraints.txt" \
      'localstack-core[runtime]' cbor2 cryptography service_identity
    cp "$here/localstack-constraints.txt" "$venv/.constraints"
  fi
}

start() {
  if healthy; then echo "LocalStack already running on $LOCALSTACK_PORT"; else
    install
    echo "starting LocalStack (log: $log)"
    (cd "$STRATA_CACHE" && SERVICES=s3 GATEWAY_LISTEN="127.0.0.1:$LOCALSTACK_PORT" \
      LOCALSTACK_VOLUME_DIR="$STRATA_CACHE/localstack-volume" \
      exec nohup "$venv/bin/python" -m localstack.runtime.main >"$log" 2>&1 & echo $! >"$pidfile")
    for _ in $(seq 1 120); do healthy && break; sleep 1; done
    healthy || { echo "LocalStack did not become healthy"; tail -50 "$log"; exit 1; }
  fi
  curl -fsS --max-time 10 -X PUT "http://127.0.0.1:$LOCALSTACK_PORT/$STRATA_TEST_S3_BUCKET" >/dev/null || true
  curl -fsS --max-time 10 -o /dev/null "http://127.0.0.1:$LOCALSTACK_PORT/$STRATA_TEST_S3_BUCKET" \
    || { echo "bucket $STRATA_TEST_S3_BUCKET not reachable"; exit 1; }
  echo "LocalStack S3 ready at $STRATA_TEST_S3_ENDPOINT, bucket $STRATA_TEST_S3_BUCKET"
}

stop() {
  if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) healthy && echo running || echo stopped ;;
  *) echo "usage: $0 start|stop|status"; exit 2 ;;
esac
