#!/usr/bin/env bash
# HotRAP's tiered experiment on this machine (issue 6): YCSB over a local bucket with an
# injected S3 first-byte latency, the NVMe tier sized to ~10% of the data, side by side:
#   tracked  - hotness tracker, retention and promotion on
#   off      - the same engine with tracking off
#   (both start as the load leaves them, as in the paper: the NVMe levels hold the newest
#   ~10% of the records, the rest is in S3; START=drained moves every record to S3 first)
#   nvme     - every record on NVMe (no drain; levels large enough), the upper bound
#   defaults - what `strata serve` runs: every engine setting at its default, the tracker
#              on (the NVMe tier is then L0 + L1's 64 MiB plus the hot records the tracker
#              keeps, under a budget derived from the local disk), not the 10% sizing above
# Usage: loadtest/hotrap.sh [records] [ops] [record_bytes] > summary.md
#        loadtest/hotrap.sh [records] [ops] [record_bytes] shift > summary.md
#   (the second form runs §4.6's shifting hotspot, tracked only, and plots its hit rate
#   over time to $OUT/shift.svg)
# Writes one JSON report per run under $OUT (default /tmp/hotrap).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
RECORDS="${1:-200000}"
OPS="${2:-60000}"
BYTES="${3:-1000}"
LATENCY_MS="${LATENCY_MS:-15}"
CLIENTS="${CLIENTS:-32}"
OUT="${OUT:-/tmp/hotrap}"
BIN="$CARGO_TARGET_DIR/release/strata-loadtest"
mkdir -p "$OUT"
data=$((RECORDS * (BYTES + 24)))
budget=$((data / 10))
# NVMe levels L0 + L1 + L2 of about the budget: L2 = 4 x L1, L1 = budget / 5.
l1=$((budget / 5))
memtable=$((l1 / 4))
tiered=$(printf '{"levels":3,"level_bytes_base":%d,"level_size_multiplier":4,"memtable_bytes_max":%d,"sst_bytes_target":%d,"s3_level_bytes_base":%d,"parquet_file_bytes":%d,"parquet_row_group_rows":1024,"cache_bytes_max":%d,"hotness":{"enabled":%s,"nvme_budget_bytes":%d,"promotion_cache_bytes":%d}}' \
  "$l1" "$memtable" $((memtable / 2)) $((data * 2)) $((8 << 20)) $((budget / 10)) "%s" "$budget" $((budget / 64)))
nvme=$(printf '{"levels":3,"level_bytes_base":%d,"level_size_multiplier":10,"memtable_bytes_max":%d,"s3_level_bytes_base":%d}' \
  $((data * 2)) "$memtable" $((data * 2)))
case "${START:-loaded}" in
  loaded) start=--flush-after-load ;;
  drained) start=--drain-after-load ;;
  *) echo "START is loaded or drained" >&2; exit 2 ;;
esac
run() { # name workload distribution variant ops
  local name="$1" workload="$2" dist="$3" variant="$4" ops="$5" engine extra=()
  case "$variant" in
    tracked) engine=$(printf "$tiered" true); extra=("$start") ;;
    off) engine=$(printf "$tiered" false); extra=("$start") ;;
    nvme) engine="$nvme"; extra=(--flush-after-load) ;;
    defaults) engine='{"hotness":{"enabled":true}}'; extra=("$start") ;;
  esac
  local dir="$OUT/data-$name-$variant"
  rm -rf "$dir"
  "$BIN" --workload "$workload" --distribution "$dist" --records "$RECORDS" --ops "$ops" \
    --record-bytes "$BYTES" --clients "$CLIENTS" --store local --dir "$dir" \
    --store-latency-ms "$LATENCY_MS" --engine-json "$engine" "${extra[@]}" \
    --json "$OUT/$name-$variant.json" > "$OUT/$name-$variant.log" 2>&1
  rm -rf "$dir"
  python3 - "$OUT/$name-$variant.json" "$name" "$variant" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["reads_by_source"]
reads = sum(s.values())
print(f"| {sys.argv[2]} | {sys.argv[3]} | {r['args']['ops']} | {r['throughput_ops_per_sec']:.0f} | {r['throughput_final']:.0f} | "
      f"{100 * r['nvme_hit_rate_final']:.1f}% | {s['memtable'] + s['nvme']} / {s['promotion_cache']} / {s['s3']} |")
PY
}
if [ "${4:-}" = shift ]; then
  stages="uniform,hotspot:0.01,hotspot:0.03,hotspot:0.05,shifted:0.05,shifted:0.04,shifted:0.02"
  dir="$OUT/data-shift"
  rm -rf "$dir"
  "$BIN" --workload c --records "$RECORDS" --ops "$OPS" --record-bytes "$BYTES" \
    --clients "$CLIENTS" --store local --dir "$dir" --store-latency-ms "$LATENCY_MS" \
    --engine-json "$(printf "$tiered" true)" "$start" --stages "$stages" \
    --sample-ms 500 --json "$OUT/shift.json" > "$OUT/shift.log" 2>&1
  rm -rf "$dir"
  python3 loadtest/plot_hits.py "$OUT/shift.svg" "tracked=$OUT/shift.json"
  python3 - "$OUT/shift.json" "$stages" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
stages = sys.argv[2].split(",")
ops = r["args"]["ops"]
s = r["samples"]
print("| stage | NVMe hit rate, first quarter of the stage | last quarter of the stage |")
print("|---|---|---|")
def rate(lo, hi):
    pts = [x for x in s if lo <= x["ops"] <= hi]
    if len(pts) < 2:
        return "-"
    a, b = pts[0]["reads"], pts[-1]["reads"]
    fast = sum(b[k] - a[k] for k in ("memtable", "nvme", "promotion_cache"))
    slow = b["s3"] - a["s3"]
    return f"{100 * fast / max(1, fast + slow):.1f}%"
n = len(stages)
for i, name in enumerate(stages):
    lo, hi = ops * i / n, ops * (i + 1) / n
    q = (hi - lo) / 4
    print(f"| {name} | {rate(lo, lo + q)} | {rate(hi - q, hi)} |")
PY
  exit 0
fi
echo "records $RECORDS x $BYTES B (~$((data >> 20)) MiB), NVMe budget ~$((budget >> 20)) MiB, $OPS ops, $CLIENTS clients, ${LATENCY_MS} ms first-byte latency, start ${START:-loaded}"
echo
echo "| workload | variant | ops | ops/s (run) | ops/s (last tenth) | NVMe hit rate (last tenth) | reads NVMe / promotion cache / S3 |"
echo "|---|---|---|---|---|---|---|"
# SPECS and VARIANTS pick a subset (e.g. SPECS="ro-zipf:c:zipfian" VARIANTS=tracked); a
# spec's optional fourth field is its operation count (default $OPS). OFF_OPS caps the runs
# of the off variant, whose throughput does not change over a run (it has nothing to warm;
# HotRAP's Figure 16 runs RocksDB-fat shorter for the same reason).
for spec in ${SPECS:-ro-hotspot5:c:hotspot ro-zipf:c:zipfian ro-uniform:c:uniform rw-hotspot5:rw:hotspot rw-zipf:rw:zipfian rw-uniform:rw:uniform}; do
  IFS=: read -r name workload dist ops <<<"$spec"
  ops="${ops:-$OPS}"
  for variant in ${VARIANTS:-tracked off nvme}; do
    n="$ops"
    if [ "$variant" = off ] && [ -n "${OFF_OPS:-}" ] && [ "$OFF_OPS" -lt "$ops" ]; then
      n="$OFF_OPS"
    fi
    run "$name" "$workload" "$dist" "$variant" "$n"
  done
done
