#!/usr/bin/env bash
# LASER's HTAP workload (Table 3: Q1 inserts, Q5 updates, Q2a/Q2b point reads, Q3/Q4 scans)
# at default settings, Strata beside PostgreSQL and DuckDB: builds `strata` (release), starts
# `strata serve` on a fresh local directory and a throwaway PostgreSQL server (initdb, every
# setting at its default: fsync and synchronous_commit on), runs loadtest/htap/bench.py
# (DuckDB runs inside it over a file), then stops both servers.
#
#   bash loadtest/htap.sh [bench.py arguments]   # e.g. --rows 1000000 --duration-s 60 --json out.json
# --systems strata,postgres,duckdb chooses (only the servers needed are started). Server
# settings of Strata can be given as STRATA_* variables. STRATA_BIN=path uses that binary
# instead of building one; WORK=dir (default /tmp/strata-htap) holds the data of all three;
# PG_PORT (default 55432) is PostgreSQL's port. As root, PostgreSQL runs as the user
# PG_USER (default postgres, created if missing), since initdb refuses to run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
work="${WORK:-/tmp/strata-htap}"
pg_port="${PG_PORT:-55432}"
systems="strata,postgres,duckdb"
prev=""
for a in "$@"; do
  if [ "$prev" = --systems ]; then systems="$a"; fi
  case "$a" in --systems=*) systems="${a#--systems=}" ;; esac
  prev="$a"
done
wants() { [[ ",$systems," == *",$1,"* ]]; }

venv="$STRATA_CACHE/bench-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q -r loadtest/htap/requirements.txt
rm -rf "$work" && mkdir -p "$work"

server=""
pg_as=()
stop() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  if [ -f "$work/pg/postmaster.pid" ]; then
    "${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -m fast -w stop >/dev/null || true
  fi
}
trap stop EXIT

args=()
if wants strata; then
  bin="${STRATA_BIN:-$CARGO_TARGET_DIR/release/strata}"
  if [ -z "${STRATA_BIN:-}" ]; then cargo build --release -p strata --bin strata; fi
  "$bin" serve --dir "$work/data" >"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    if curl -sf http://127.0.0.1:8080/ready >/dev/null; then break; fi
    sleep 0.2
  done
  curl -sf http://127.0.0.1:8080/ready >/dev/null || { echo "server did not start:"; cat "$work/server.log"; exit 1; }
  args+=(--strata-version "$("$bin" --version) ($bin)")
fi

if wants postgres; then
  mkdir -p "$work/pg"
  if [ "$(id -u)" = 0 ]; then
    pg_user="${PG_USER:-postgres}"
    id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$pg_user"
    chown "$pg_user" "$work/pg"
    pg_as=(runuser -u "$pg_user" --)
  fi
  "${pg_as[@]}" /usr/local/bin/initdb -D "$work/pg" -U postgres --auth=trust >"$work/initdb.log"
  "${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -l "$work/pg/server.log" -w \
    -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null
  args+=(--pg-dsn "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres")
fi

"$venv/bin/python" loadtest/htap/bench.py --duckdb "$work/duckdb/laser.duckdb" "${args[@]}" "$@"
if wants strata; then echo "Strata server log: $work/server.log"; fi
