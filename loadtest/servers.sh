# Sourced by the benchmark scripts (loadtest/htap.sh, loadtest/pgwire.sh): starts and stops
# `strata serve` at its defaults and a throwaway PostgreSQL server (initdb, every setting at
# its default: fsync and synchronous_commit on), and sets up their Python clients. Needs
# $work; sets $strata_bin and $venv. Call stop_servers on exit.

strata_pid=""
pg_as=()

# bench_venv: the benchmark clients' virtualenv ($venv, kept under $STRATA_CACHE) with
# loadtest/htap/requirements.txt installed (pinned).
bench_venv() {
  venv="$STRATA_CACHE/bench-venv"
  if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
  "$venv/bin/pip" install -q -r loadtest/htap/requirements.txt
}

# start_strata: `strata serve` over $work/data (STRATA_BIN, else a release build), waits
# until /ready answers.
start_strata() {
  strata_bin="${STRATA_BIN:-$CARGO_TARGET_DIR/release/strata}"
  if [ -z "${STRATA_BIN:-}" ]; then cargo build --release -p strata --bin strata; fi
  # Another server on the ports would answer /ready for ours, and the benchmark would
  # measure it (its data, its build) instead.
  if curl -sf http://127.0.0.1:8080/ready >/dev/null 2>&1; then
    echo "a server already answers on 127.0.0.1:8080: stop it first"; exit 1
  fi
  "$strata_bin" serve --dir "$work/data" >"$work/server.log" 2>&1 &
  strata_pid=$!
  for _ in $(seq 1 100); do
    if ! kill -0 "$strata_pid" 2>/dev/null; then break; fi
    if curl -sf http://127.0.0.1:8080/ready >/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "server did not start:"; cat "$work/server.log"; exit 1
}

# start_postgres PORT: a fresh cluster in $work/pg on 127.0.0.1:PORT (as root, run as
# PG_USER, default postgres, created if missing, since initdb refuses to run as root).
start_postgres() {
  mkdir -p "$work/pg"
  if [ "$(id -u)" = 0 ]; then
    local pg_user="${PG_USER:-postgres}"
    id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$pg_user"
    chown "$pg_user" "$work/pg"
    pg_as=(runuser -u "$pg_user" --)
  fi
  "${pg_as[@]}" /usr/local/bin/initdb -D "$work/pg" -U postgres --auth=trust >"$work/initdb.log"
  "${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -l "$work/pg/server.log" -w \
    -o "-p $1 -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null
}

stop_servers() {
  if [ -n "$strata_pid" ]; then kill "$strata_pid" 2>/dev/null || true; wait "$strata_pid" 2>/dev/null || true; fi
  if [ -f "$work/pg/postmaster.pid" ]; then
    "${pg_as[@]}" /usr/local/bin/pg_ctl -D "$work/pg" -m fast -w stop >/dev/null || true
  fi
}
