"""Analytic SQL at default settings, end to end: a running `strata serve`, a real client.

LASER's 31-column table (`a0 BIGINT` primary key, `a1..a30 INT`) is bulk-loaded over Arrow
Flight SQL with ADBC (`adbc_ingest`), the tree is left to its default background work, a
fresh 2% of the rows is rewritten, and the analytic queries then run over Flight SQL (ADBC)
side by side with DataFusion reading the same rows as one plain Parquet file: each query
runs once per side to warm caches and compare answers, then `--reps` times per side,
alternating; the figures are medians.

Run through `loadtest/analytic.sh`, which installs the pinned client packages, builds and
starts the server with its defaults and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

import adbc_driver_flightsql.dbapi as flight_sql
import datafusion
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = 30
TABLE = "laser"


def http(base: str, method: str, path: str, body: bytes | None = None) -> bytes:
    req = urllib.request.Request(base + path, data=body, method=method)
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()


def rows(lo: int, hi: int, salt: int) -> pa.RecordBatch:
    """Rows with keys lo..hi; column values are a fixed function of (key, column, salt)."""
    key = pa.array(range(lo, hi), pa.int64())
    cols = [key]
    for c in range(1, COLUMNS + 1):
        # A multiplicative hash folded into 0..999_999, different per column and salt.
        mult = 2_654_435_761 + 97 * c + 7_919 * salt
        v = pc.bit_wise_and(pc.multiply(key, pa.scalar(mult, pa.int64())), pa.scalar(0x7FFFFFFF, pa.int64()))
        cols.append(pc.cast(pc.divide(v, pa.scalar(2147, pa.int64())), pa.int32()))
    names = ["a0"] + [f"a{c}" for c in range(1, COLUMNS + 1)]
    return pa.RecordBatch.from_arrays(cols, names=names)


def queries(n: int) -> list[tuple[str, str]]:
    half = n // 2
    lo = n // 4
    hi = lo + n // 20
    s = "+".join(f"a{c}" for c in range(21, 31))
    return [
        ("max over half the keys", f"SELECT MAX(a28), MAX(a29), MAX(a30) FROM {TABLE} WHERE a0 < {half}"),
        ("sum over 5% of the keys", f"SELECT SUM({s}) FROM {TABLE} WHERE a0 >= {lo} AND a0 < {hi}"),
        (
            "group-by a1 % 100",
            f"SELECT a1 % 100 AS g, COUNT(*) AS c, SUM(a2) AS s, MAX(a3) AS m FROM {TABLE} GROUP BY a1 % 100 ORDER BY g",
        ),
        ("count(*)", f"SELECT COUNT(*) FROM {TABLE}"),
    ]


def strata_query(conn, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def plain_query(ctx, sql: str) -> pa.Table:
    return ctx.sql(sql).to_arrow_table()


def same(a: pa.Table, b: pa.Table) -> bool:
    if a.num_rows != b.num_rows:
        return False
    return all(
        a.column(i).cast(pa.float64()).to_pylist() == b.column(i).cast(pa.float64()).to_pylist()
        for i in range(a.num_columns)
    )


def shards(base: str) -> list[dict]:
    return json.loads(http(base, "GET", f"/v1/admin/tables/{TABLE}")).get("shards", [])


def tree(base: str) -> str:
    """Each shard's row levels (SSTs, MB) and columnar levels (files, rows, MB per group)."""
    out = []
    for s in shards(base):
        rows_part = " ".join(f"L{l['level']}:{l['ssts']}/{l['bytes'] / 1e6:.0f}MB" for l in s["nvme_levels"])
        col_part = " ".join(
            f"C{l['level']}:" + ",".join(f"{g['files']}f/{g['rows']}r/{g['bytes'] / 1e6:.0f}MB" for g in l["groups"])
            for l in s["s3_levels"]
        )
        out.append(f"[{rows_part} | {col_part} | jobs {len(s.get('jobs_outstanding') or [])}]")
    return " ".join(out)


def settled(base: str) -> bool:
    """Nothing left in the memtables (flushed once idle, `engine.memtable_settle_ms`), no
    row SST waiting in L0 and no compaction job outstanding, on every shard."""
    ss = shards(base)
    return bool(ss) and all(
        s["last_seq"] <= s["seq_flushed"]
        and s["nvme_levels"][0]["ssts"] == 0
        and not s.get("jobs_outstanding")
        for s in ss
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--batch-rows", type=int, default=8192)
    ap.add_argument("--flight", default="grpc://127.0.0.1:8081")
    ap.add_argument("--http", default="http://127.0.0.1:8080")
    ap.add_argument("--dir", required=True, help="scratch directory for the plain Parquet file")
    ap.add_argument("--settle-s", type=float, default=120.0, help="longest wait for the tree to settle after the load")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--expect", help="write the answers a replacement node must give (replace.py) here")
    args = ap.parse_args()
    n = args.rows

    http(args.http, "POST", "/sql", f"DROP TABLE IF EXISTS {TABLE}".encode())
    cols = ", ".join(f"a{c} INT" for c in range(1, COLUMNS + 1))
    http(args.http, "POST", "/sql", f"CREATE TABLE {TABLE} (a0 BIGINT, {cols}, PRIMARY KEY (a0))".encode())
    conn = flight_sql.connect(args.flight)

    # Load in key order, as a bulk import of a sorted file would arrive.
    t0 = time.perf_counter()
    schema = rows(0, 1, 0).schema
    def batches():
        for lo in range(0, n, args.batch_rows):
            yield rows(lo, min(n, lo + args.batch_rows), 0)
    with conn.cursor() as cur:
        cur.adbc_ingest(TABLE, pa.RecordBatchReader.from_batches(schema, batches()), mode="append")
    conn.commit()
    load_s = time.perf_counter() - t0
    print(f"load: {n} rows in {load_s:.1f} s ({n / load_s:,.0f} rows/s)", flush=True)
    print(f"tree right after the load: {tree(args.http)}", flush=True)

    t0 = time.perf_counter()
    calm = 0
    while time.perf_counter() - t0 < args.settle_s and calm < 2:
        calm = calm + 1 if settled(args.http) else 0
        time.sleep(1.5)
    print(f"settled after {time.perf_counter() - t0:.1f} s (limit {args.settle_s:.0f} s): {tree(args.http)}", flush=True)

    # 2% of the keys rewritten (whole rows, new values), spread over the key space.
    upd = max(1, n // 50)
    step = n // upd
    t0 = time.perf_counter()
    def updates():
        for i in range(0, upd, args.batch_rows):
            keys = [((i + j) * step) % n for j in range(min(args.batch_rows, upd - i))]
            b = rows(0, len(keys), 1)
            arrays = [pa.array(keys, pa.int64())] + [b.column(c) for c in range(1, COLUMNS + 1)]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    with conn.cursor() as cur:
        cur.adbc_ingest(TABLE, pa.RecordBatchReader.from_batches(schema, updates()), mode="append")
    conn.commit()
    print(f"updates: {upd} rows in {time.perf_counter() - t0:.1f} s", flush=True)

    # The plain side: the same rows, read back from Strata once at one snapshot, written as
    # one ZSTD Parquet file with 128K-row row groups, sorted by key.
    t0 = time.perf_counter()
    # Sorted here, not by an ORDER BY: the query service's sort of 10M wide rows runs out
    # of its memory limit (DataFusion does not spill in Strata's query service yet).
    full = strata_query(conn, f"SELECT * FROM {TABLE}").sort_by("a0")
    assert full.num_rows == n, f"read back {full.num_rows} rows, loaded {n}"
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "laser.parquet")
    pq.write_table(full, path, compression="zstd", row_group_size=128 * 1024)
    del full
    print(f"plain Parquet: {os.path.getsize(path) / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s", flush=True)
    cfg = datafusion.SessionConfig().with_target_partitions(2)
    ctx = datafusion.SessionContext(cfg)
    ctx.register_parquet(TABLE, path)

    print(f"\n{n} rows, {args.reps} reps per side, alternating; medians in ms")
    print("| query | Strata (ms) | plain Parquet (ms) | ratio | first Strata run (ms) |")
    print("|---|---|---|---|---|")
    for name, sql in queries(n):
        t0 = time.perf_counter()
        a = strata_query(conn, sql)
        first_ms = (time.perf_counter() - t0) * 1e3
        b = plain_query(ctx, sql)
        if not same(a, b):
            print(f"MISMATCH in {name}:\n{a}\n{b}", file=sys.stderr)
            return 1
        ts, tp = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            strata_query(conn, sql)
            ts.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            plain_query(ctx, sql)
            tp.append((time.perf_counter() - t0) * 1e3)
        ms, mp = statistics.median(ts), statistics.median(tp)
        print(f"| {name} | {ms:.1f} | {mp:.1f} | {ms / mp:.2f}x | {first_ms:.1f} |", flush=True)
    if args.explain:
        for name, sql in queries(n)[:3]:
            plan = strata_query(conn, "EXPLAIN ANALYZE " + sql)
            text = "\n".join(str(v) for v in plan.column(plan.num_columns - 1).to_pylist())
            print(f"\nEXPLAIN ANALYZE ({name}):")
            for line in text.splitlines():
                if "Strata" in line or "rows_" in line:
                    print("  " + line.strip()[:400])
    print(f"\ntree at the end: {tree(args.http)}")
    if args.expect:
        answers = {
            "point": strata_query(conn, f"SELECT * FROM {TABLE} WHERE a0 = {n // 3}").to_pylist(),
            "max": strata_query(conn, queries(n)[0][1]).to_pylist(),
        }
        with open(args.expect, "w") as f:
            json.dump(answers, f)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
