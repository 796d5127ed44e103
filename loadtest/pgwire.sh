#!/usr/bin/env bash
# Single-row operations over the PostgreSQL wire protocol (loadtest/pgwire/bench.py):
# `strata serve` at its defaults (release build) beside a throwaway PostgreSQL server (initdb,
# every setting at its default: fsync and synchronous_commit on), the same psycopg client
# against both, one after the other.
#
#   bash loadtest/pgwire.sh [bench.py arguments]   # e.g. --rows 100000 --ops 3000 --json out.json
# STRATA_BIN=path uses that binary instead of building one; WORK=dir (default
# /tmp/strata-pgwire) holds both servers' data; PG_PORT (default 55432). As root, PostgreSQL
# runs as PG_USER (default postgres, created if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
work="${WORK:-/tmp/strata-pgwire}"
pg_port="${PG_PORT:-55432}"
venv="$STRATA_CACHE/bench-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q -r loadtest/htap/requirements.txt
rm -rf "$work" && mkdir -p "$work/pg"

server=""
pg_as=()
stop() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  if [ -f "$work/pg/postmaster.pid" ]; then
    "${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -m fast -w stop >/dev/null || true
  fi
}
trap stop EXIT

bin="${STRATA_BIN:-$CARGO_TARGET_DIR/release/strata}"
if [ -z "${STRATA_BIN:-}" ]; then cargo build --release -p strata --bin strata; fi
"$bin" serve --dir "$work/data" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do
  if curl -sf http://127.0.0.1:8080/ready >/dev/null; then break; fi
  sleep 0.2
done
curl -sf http://127.0.0.1:8080/ready >/dev/null || { echo "server did not start:"; cat "$work/server.log"; exit 1; }

if [ "$(id -u)" = 0 ]; then
  pg_user="${PG_USER:-postgres}"
  id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$pg_user"
  chown "$pg_user" "$work/pg"
  pg_as=(runuser -u "$pg_user" --)
fi
"${pg_as[@]}" /usr/local/bin/initdb -D "$work/pg" -U postgres --auth=trust >"$work/initdb.log"
"${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -l "$work/pg/server.log" -w \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null

"$venv/bin/python" loadtest/pgwire/bench.py \
  --pg-dsn "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres" "$@"
echo "Strata server log: $work/server.log"
