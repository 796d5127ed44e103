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
source loadtest/servers.sh
bench_venv
rm -rf "$work" && mkdir -p "$work"
trap stop_servers EXIT
start_strata
start_postgres "$pg_port"

"$venv/bin/python" loadtest/pgwire/bench.py \
  --pg-dsn "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres" "$@"
echo "Strata server log: $work/server.log"
