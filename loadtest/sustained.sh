#!/usr/bin/env bash
# Sustained writes at default settings (Luo's thesis, ch. 5): the embedded engine over a
# local-directory bucket, remote durability, workload W (100% updates, uniform keys).
#   1. closed loop: CLIENTS writers back to back for OPS writes; its throughput is the
#      capacity;
#   2. open loop: a fresh tree, writes arriving at 95% of that capacity for OPS writes,
#      latency counted from each write's intended start (queueing included).
# Every setting is the engine's default (compaction to the columnar levels runs as it
# would in service). Prints each phase's summary, writes the JSON reports and a plot of
# throughput and sorted runs over time to $OUT (default /tmp/strata-sustained).
#
#   bash loadtest/sustained.sh [records] [ops] [record_bytes]
#   # e.g. 1000000 10000000 1000: 1 GB loaded, then 10 GB written per phase
# STRATA_LOADTEST_BIN=path uses that binary instead of building one. ENGINE_JSON='{...}'
# overrides engine settings in both phases (a tuned run, reported beside the default one).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
RECORDS="${1:-1000000}"
OPS="${2:-2000000}"
BYTES="${3:-1000}"
CLIENTS="${CLIENTS:-64}"
OUT="${OUT:-/tmp/strata-sustained}"
BIN="${STRATA_LOADTEST_BIN:-$CARGO_TARGET_DIR/release/strata-loadtest}"
if [ -z "${STRATA_LOADTEST_BIN:-}" ]; then cargo build --release -p strata-loadtest; fi
mkdir -p "$OUT"

run() { # name mode [extra args]
  local name="$1" mode="$2"
  shift 2
  rm -rf "$OUT/$name-data" && mkdir -p "$OUT/$name-data"
  "$BIN" --workload w --distribution uniform --records "$RECORDS" --ops "$OPS" \
    --record-bytes "$BYTES" --clients "$CLIENTS" --mode "$mode" --dir "$OUT/$name-data" \
    --json "$OUT/$name.json" ${ENGINE_JSON:+--engine-json "$ENGINE_JSON"} "$@" >"$OUT/$name.log" 2>&1
  sed -n '1,/^{/p' "$OUT/$name.log" | sed '$d'
  rm -rf "$OUT/$name-data"
}

echo "== closed loop: $CLIENTS writers, $OPS writes of $BYTES B over $RECORDS keys"
run closed closed
capacity=$(python3 -c "import json; print(json.load(open('$OUT/closed.json'))['throughput_ops_per_sec'])")
rate=$(python3 -c "print(round(0.95 * $capacity))")
echo
echo "== open loop at 95% of capacity: $rate writes/s"
# The in-flight cap is high so a slow phase queues (and is counted) rather than throttling.
CLIENTS=1024 run open open --rate "$rate"
python3 loadtest/plot_sustained.py "$OUT/sustained.svg" "closed loop=$OUT/closed.json" "open loop at 95%=$OUT/open.json"
python3 - "$OUT/closed.json" "$OUT/open.json" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    s = r["samples"]
    rates = [(b["ops"] - a["ops"]) / (b["seconds"] - a["seconds"]) for a, b in zip(s, s[1:]) if b["seconds"] > a["seconds"]]
    runs = [x.get("tree", {}).get("sorted_runs", 0) for x in s]
    allop = next(o for o in r["ops"] if o["op"] == "all")
    gb = r["args"]["ops"] * r["args"]["record_bytes"] / 1e9
    print(f"{path}: {gb:.1f} GB written in {r['run_seconds']:.0f} s, {r['throughput_ops_per_sec']:.0f} writes/s; "
          f"p50 {allop['p50_us']} us p99 {allop['p99_us']} us p99.9 {allop['p999_us']} us max {allop['max_us']} us "
          f"(p99.9/p50 {allop['p999_us'] / max(allop['p50_us'], 1):.1f}); stalls {r['stalls']} longest {r['longest_stall_us'] / 1e3:.0f} ms; "
          f"overload retries {r['overload_retries']}; sorted runs max {max(runs)} end {r['sorted_runs_at_end']}; "
          f"per-second writes min {min(rates) if rates else 0:.0f} median {sorted(rates)[len(rates) // 2] if rates else 0:.0f}")
EOF
echo "plot: $OUT/sustained.svg"
