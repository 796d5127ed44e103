#!/usr/bin/env bash
# Point reads side by side: Strata (`strata-loadtest`, every setting at its default) and
# SlateDB (`slatebench`, its defaults), the same records, keys, key choosers, clients and
# latency accounting, each over a local-directory object store, one after the other.
# Usage: loadtest/slatebench.sh [records] [ops] [record_bytes] > table.md
#   CLIENTS="8 64" DISTS="uniform zipfian" pick the runs; OUT (default /tmp/slatebench)
#   keeps each run's output. SlateDB is built here, as its own package with its own lock
#   and target directory (its dependencies never enter Strata's build).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
RECORDS="${1:-1000000}"
OPS="${2:-1000000}"
BYTES="${3:-200}"
OUT="${OUT:-/tmp/slatebench}"
mkdir -p "$OUT"
cargo build --release --locked -p strata-loadtest >&2
CARGO_TARGET_DIR="$STRATA_CACHE/slatebench-target" \
  cargo build --release --locked --manifest-path loadtest/slatebench/Cargo.toml >&2
STRATA="$CARGO_TARGET_DIR/release/strata-loadtest"
SLATE="$STRATA_CACHE/slatebench-target/release/slatebench"
echo "$RECORDS records of $BYTES B, $OPS point reads per run, local-directory object store"
echo
echo "| readers, keys | Strata reads/s | p50 / p99 / p99.9 µs | SlateDB reads/s | p50 / p99 / p99.9 µs | Strata / SlateDB |"
echo "|---|---|---|---|---|---|"
for c in ${CLIENTS:-8 64}; do
  for d in ${DISTS:-uniform zipfian}; do
    "$STRATA" --workload c --distribution "$d" --records "$RECORDS" --ops "$OPS" \
      --record-bytes "$BYTES" --clients "$c" --store local --flush-after-load \
      --json "$OUT/strata-$c-$d.json" > "$OUT/strata-$c-$d.log" 2>&1
    "$SLATE" --distribution "$d" --records "$RECORDS" --ops "$OPS" --record-bytes "$BYTES" \
      --clients "$c" > "$OUT/slatedb-$c-$d.log" 2>&1
    python3 - "$OUT/strata-$c-$d.json" "$OUT/slatedb-$c-$d.log" "$c" "$d" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
read = next(o for o in s["ops"] if o["op"] == "read")
text = open(sys.argv[2]).read()
d = json.loads(text[text.index("{"):])
a, b = s["throughput_ops_per_sec"], d["throughput_ops_per_sec"]
print(f"| {sys.argv[3]}, {sys.argv[4]} | {a:,.0f} | {read['p50_us']} / {read['p99_us']} / {read['p999_us']} "
      f"| {b:,.0f} | {d['p50_us']} / {d['p99_us']} / {d['p999_us']} | {a / b:.2f}x |")
PY
  done
done
