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

source loadtest/servers.sh
bench_venv
rm -rf "$work" && mkdir -p "$work"
trap stop_servers EXIT

args=()
if wants strata; then
  start_strata
  args+=(--strata-version "$("$strata_bin" --version) ($strata_bin)")
fi
if wants postgres; then
  start_postgres "$pg_port"
  args+=(--pg-dsn "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres")
fi

"$venv/bin/python" loadtest/htap/bench.py --duckdb "$work/duckdb/laser.duckdb" "${args[@]}" "$@"
if wants strata; then echo "Strata server log: $work/server.log"; fi
