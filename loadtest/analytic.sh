#!/usr/bin/env bash
# Analytic SQL at default settings, end to end (docs/BENCHMARKS.md): builds `strata` (release),
# starts `strata serve` on a fresh local directory with every setting at its default, runs
# loadtest/analytic/bench.py with a real Flight SQL client (ADBC) against it and DataFusion over
# the same rows as plain Parquet, then stops the server.
#
#   bash loadtest/analytic.sh [ROWS] [REPS]        # default 2000000 rows, 7 reps
# Extra arguments after REPS go to bench.py (e.g. --explain). Server settings can be given
# as STRATA_* variables (reported beside the default figures, never instead of them).
# STRATA_BIN=path uses that binary instead of building one. REPLACE=1 then restarts the
# server on the same bucket with an empty local directory (a replacement node) and times
# its first answers (loadtest/analytic/replace.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
rows="${1:-2000000}"
reps="${2:-7}"
shift $(( $# > 2 ? 2 : $# ))
work="${WORK:-/tmp/strata-analytic}"
venv="$STRATA_CACHE/bench-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q -r loadtest/analytic/requirements.txt
bin="${STRATA_BIN:-$CARGO_TARGET_DIR/release/strata}"
if [ -z "${STRATA_BIN:-}" ]; then cargo build --release -p strata --bin strata; fi
rm -rf "$work" && mkdir -p "$work"
"$bin" serve --dir "$work/data" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if curl -sf http://127.0.0.1:8080/ready >/dev/null; then break; fi
  sleep 0.2
done
curl -sf http://127.0.0.1:8080/ready >/dev/null || { echo "server did not start:"; cat "$work/server.log"; exit 1; }
"$venv/bin/python" loadtest/analytic/bench.py --rows "$rows" --reps "$reps" --dir "$work/plain" \
  --expect "$work/expect.json" "$@"
echo "server log: $work/server.log"
if [ "${REPLACE:-0}" = 1 ]; then
  kill "$server"; wait "$server" 2>/dev/null || true
  "$venv/bin/python" loadtest/analytic/replace.py --bin "$bin" --dir "$work/data" --rows "$rows" \
    --expect "$work/expect.json" --log "$work/server-replacement.log"
fi
