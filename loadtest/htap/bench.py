"""LASER's HTAP workload (Saxena et al., "Real-Time LSM-Trees for HTAP Workloads", Section 7.2,
Table 3) against Strata, PostgreSQL and DuckDB, one system after the other, each at its defaults.

The table is LASER's narrow one: `laser(a0 BIGINT PRIMARY KEY, a1..a30 INT)`, with the values
of loadtest/analytic/bench.py's row generator. For each system:

1. Load: `--rows` N rows, keys 0..N in key order, in bulk and timed (Strata: ADBC
   `adbc_ingest` over Arrow Flight SQL; PostgreSQL: one `COPY`; DuckDB: one `INSERT ... SELECT`
   from an Arrow stream). Then the usual step after a bulk load, timed and reported apart:
   Strata waits (at most `--strata-settle-s`) until its tree has no SST in L0 and no
   compaction job outstanding, PostgreSQL runs `VACUUM ANALYZE`, DuckDB runs `CHECKPOINT`.
2. HTAP mix for `--duration-s` seconds. One writer thread (LASER: one client for Q1 and Q5)
   follows a write schedule generated in advance from `--seed`, the same for every system:
   every `--tick-ms` it inserts the next batch of new keys (N, N+1, ...; Q1, `--insert-rate`
   rows/s in all) and updates one random column of uniformly drawn existing keys (Q5,
   `--update-rate` per second, `UPDATE laser SET aC = v WHERE a0 = k`). A writer that falls
   behind does not sleep until it has caught up; the rates it achieved are reported against
   the targets. Every write is durable when acknowledged: Strata acknowledges after its WAL
   is stored, PostgreSQL and DuckDB commit each statement with their default fsync.
   `--readers` reader threads each loop over Q2a, Q2b, Q3, Q4 in this fixed order (reader r
   starts at the r-th), each reader drawing keys from its own seeded generator:
     Q2a  SELECT * FROM laser WHERE a0 = k                      k at a fraction ~ N(0.98, 0.02)
     Q2b  SELECT a16, ..., a30 FROM laser WHERE a0 = k          k at a fraction ~ N(0.85, 0.02)
     Q3   SELECT MAX(a28), MAX(a29), MAX(a30) FROM laser WHERE a0 < N/2
     Q4   SELECT SUM(a21 + ... + a30) FROM laser WHERE a0 >= lo AND a0 < lo + N/20
   where the fractions are of the keys written so far (LASER's time since insertion: Q2a
   mostly the newest rows, Q2b older ones) and lo is uniform over 0 .. (keys written so far
   - N/20). Each query's latency is timed at the client, results fetched; the figures are
   counts, medians and 99th percentiles per kind (Q1's per batch).
   Unlike LASER's run (500,000 of each Q2 and 12 of each scan, the scans towards the end),
   the readers are closed loops over all four kinds, so the scans weigh as much as the point
   reads and the readers take what CPU the machine has; Q5's keys are uniform over all
   keys written so far (Table 3), not only recent ones.
3. Writes stop; scheduled writes the writer did not get to are done now (untimed), so every
   system ends with the same rows. Then Q3, Q4 (lo = N/4), Q4 over the inserted keys, a sum
   of every column and COUNT(*) run once; the answers must agree across the systems, or the
   run prints MISMATCH and exits 1. The table is dropped before the next system starts.

Strata runs as `strata serve` (Flight SQL and HTTP), PostgreSQL as a server, DuckDB in this
process over a file. Run through `loadtest/htap.sh`, which installs the pinned client
packages, starts Strata and PostgreSQL with their defaults and stops them afterwards.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv

# loadtest/ on the path: loadtest/analytic/bench.py is then the module `analytic.bench`.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from analytic.bench import COLUMNS, TABLE, http, rows, settled, tree  # noqa: E402

SYSTEMS = ("strata", "postgres", "duckdb")
NAMES = {"strata": "Strata", "postgres": "PostgreSQL", "duckdb": "DuckDB"}
READS = ("Q2a", "Q2b", "Q3", "Q4")
KINDS = ("Q1", "Q2a", "Q2b", "Q3", "Q4", "Q5")
Q2_MEAN = {"Q2a": 0.98, "Q2b": 0.85}
Q2_STDDEV = 0.02
VALUE_RANGE = 1_000_000


def create_sql() -> str:
    cols = ", ".join(f"a{c} INT" for c in range(1, COLUMNS + 1))
    return f"CREATE TABLE {TABLE} (a0 BIGINT, {cols}, PRIMARY KEY (a0))"


def q3_sql(n: int) -> str:
    return f"SELECT MAX(a28), MAX(a29), MAX(a30) FROM {TABLE} WHERE a0 < {n // 2}"


def q4_sql(lo: int, hi: int) -> str:
    s = " + ".join(f"a{c}" for c in range(21, 31))
    return f"SELECT SUM({s}) FROM {TABLE} WHERE a0 >= {lo} AND a0 < {hi}"


def q5_sql(key: int, col: int, value: int) -> str:
    return f"UPDATE {TABLE} SET a{col} = {value} WHERE a0 = {key}"


def checks(n: int, end: int) -> list[tuple[str, str]]:
    """The queries whose answers must agree once every scheduled write is in."""
    every = " + ".join(f"a{c}" for c in range(1, COLUMNS + 1))
    return [
        ("Q3", q3_sql(n)),
        ("Q4 over keys N/4 .. N/4 + N/20", q4_sql(n // 4, n // 4 + n // 20)),
        ("Q4 over the inserted keys", q4_sql(n, end)),
        ("sum of every column", f"SELECT SUM({every}) FROM {TABLE}"),
        ("COUNT(*)", f"SELECT COUNT(*) FROM {TABLE}"),
    ]


# --- the write schedule and the read mix -------------------------------------------------


@dataclass
class Tick:
    """One writer step: insert keys lo..hi, then apply (key, column, value) updates."""

    lo: int
    hi: int
    updates: list[tuple[int, int, int]]


def write_schedule(n: int, args) -> list[Tick]:
    rng = random.Random(args.seed)
    tick_s = args.tick_ms / 1e3
    ticks, lo, updates_before = [], n, 0
    for i in range(round(args.duration_s / tick_s)):
        hi = n + round((i + 1) * tick_s * args.insert_rate)
        updates_upto = round((i + 1) * tick_s * args.update_rate)
        updates = [
            (rng.randrange(hi), rng.randint(1, COLUMNS), rng.randrange(VALUE_RANGE))
            for _ in range(updates_upto - updates_before)
        ]
        ticks.append(Tick(lo, hi, updates))
        lo, updates_before = hi, updates_upto
    return ticks


class ReadMix:
    """One reader's queries: Q2a, Q2b, Q3, Q4 round-robin, starting at the reader's index."""

    def __init__(self, n: int, reader: int, seed: int):
        self.n = n
        self.next = reader % len(READS)
        self.rng = random.Random(seed * 1000 + 1 + reader)

    def query(self, written: int) -> tuple[str, str]:
        """The next query, `written` being the number of keys written so far (0..written)."""
        kind = READS[self.next]
        self.next = (self.next + 1) % len(READS)
        if kind in Q2_MEAN:
            p = min(max(self.rng.gauss(Q2_MEAN[kind], Q2_STDDEV), 0.0), 1.0)
            key = min(int(p * written), written - 1)
            cols = "*" if kind == "Q2a" else ", ".join(f"a{c}" for c in range(16, 31))
            return kind, f"SELECT {cols} FROM {TABLE} WHERE a0 = {key}"
        if kind == "Q3":
            return kind, q3_sql(self.n)
        width = self.n // 20
        lo = self.rng.randrange(max(1, written - width))
        return kind, q4_sql(lo, lo + width)


# --- the systems ---------------------------------------------------------------------------


def batches(n: int, batch_rows: int):
    for lo in range(0, n, batch_rows):
        yield rows(lo, min(n, lo + batch_rows), 0)


def schema() -> pa.Schema:
    return rows(0, 1, 0).schema


class StrataSession:
    """One Flight SQL connection (ADBC): its own thread's."""

    def __init__(self, uri: str):
        self.conn = flight_sql.connect(uri, autocommit=True)
        self.cur = self.conn.cursor()

    def insert(self, batch: pa.RecordBatch) -> None:
        # A cursor that ran an ingest keeps its ingest target, so each ingest gets a fresh one.
        with self.conn.cursor() as cur:
            cur.adbc_ingest(TABLE, batch, mode="append")

    def query(self, sql: str) -> list[tuple]:
        self.cur.execute(sql)
        return self.cur.fetchall()

    def update(self, sql: str) -> int:
        return self.query(sql)[0][0]

    def close(self) -> None:
        self.cur.close()
        self.conn.close()


class Strata:
    name = "strata"

    def __init__(self, args):
        self.flight, self.http, self.settle_s = args.flight, args.http, args.strata_settle_s
        self.version = args.strata_version

    def session(self) -> StrataSession:
        return StrataSession(self.flight)

    def create(self) -> None:
        http(self.http, "POST", "/sql", f"DROP TABLE IF EXISTS {TABLE}".encode())
        http(self.http, "POST", "/sql", create_sql().encode())

    def load(self, n: int, batch_rows: int) -> None:
        s = self.session()
        with s.conn.cursor() as cur:
            cur.adbc_ingest(TABLE, pa.RecordBatchReader.from_batches(schema(), batches(n, batch_rows)), mode="append")
        s.close()

    def after_load(self) -> str:
        print(f"  tree right after the load: {tree(self.http)}", flush=True)
        t0, calm = time.perf_counter(), 0
        while time.perf_counter() - t0 < self.settle_s and calm < 2:
            calm = calm + 1 if settled(self.http) else 0
            time.sleep(1.5)
        return f"waited for the tree to settle (limit {self.settle_s:.0f} s): {tree(self.http)}"

    def describe(self) -> str:
        return f"tree: {tree(self.http)}"

    def drop(self) -> None:
        http(self.http, "POST", "/sql", f"DROP TABLE IF EXISTS {TABLE}".encode())


class PostgresSession:
    def __init__(self, dsn: str):
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.cur = self.conn.cursor()

    def insert(self, batch: pa.RecordBatch) -> None:
        with self.cur.copy(f"COPY {TABLE} FROM STDIN (FORMAT csv)") as copy:
            copy.write(csv(batch))

    def query(self, sql: str) -> list[tuple]:
        self.cur.execute(sql)
        return self.cur.fetchall()

    def update(self, sql: str) -> int:
        self.cur.execute(sql)
        return self.cur.rowcount

    def close(self) -> None:
        self.conn.close()


def csv(batch: pa.RecordBatch) -> bytes:
    buf = io.BytesIO()
    pa_csv.write_csv(batch, buf, pa_csv.WriteOptions(include_header=False))
    return buf.getvalue()


class Postgres:
    name = "postgres"

    def __init__(self, args):
        self.dsn = args.pg_dsn
        s = self.session()
        self.version = "PostgreSQL " + s.query("SHOW server_version")[0][0]
        self.settings = {k: s.query(f"SHOW {k}")[0][0] for k in ("fsync", "synchronous_commit", "shared_buffers")}
        s.close()

    def session(self) -> PostgresSession:
        return PostgresSession(self.dsn)

    def create(self) -> None:
        s = self.session()
        s.cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        s.cur.execute(create_sql())
        s.close()

    def load(self, n: int, batch_rows: int) -> None:
        s = self.session()
        with s.cur.copy(f"COPY {TABLE} FROM STDIN (FORMAT csv)") as copy:
            for b in batches(n, batch_rows):
                copy.write(csv(b))
        s.close()

    def after_load(self) -> str:
        s = self.session()
        s.cur.execute(f"VACUUM ANALYZE {TABLE}")
        s.close()
        return "VACUUM ANALYZE"

    def describe(self) -> str:
        s = self.session()
        size = s.query(f"SELECT pg_total_relation_size('{TABLE}')")[0][0]
        s.close()
        return f"table with index: {size / 1e6:.0f} MB; settings {self.settings}"

    def drop(self) -> None:
        s = self.session()
        s.cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        s.close()


class DuckDBSession:
    """One connection (`cursor()`) to the shared in-process database: its own thread's."""

    def __init__(self, db):
        self.con = db.cursor()

    def insert(self, batch: pa.RecordBatch) -> None:
        self.con.register("q1_batch", batch)
        self.con.execute(f"INSERT INTO {TABLE} SELECT * FROM q1_batch")
        self.con.unregister("q1_batch")

    def query(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()

    def update(self, sql: str) -> int:
        return self.query(sql)[0][0]

    def close(self) -> None:
        self.con.close()


class DuckDB:
    name = "duckdb"

    def __init__(self, args):
        self.path = args.duckdb
        for p in (self.path, self.path + ".wal"):
            if os.path.exists(p):
                os.remove(p)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.db = duckdb.connect(self.path)
        self.version = "DuckDB " + duckdb.__version__

    def session(self) -> DuckDBSession:
        return DuckDBSession(self.db)

    def create(self) -> None:
        self.db.execute(f"DROP TABLE IF EXISTS {TABLE}")
        self.db.execute(create_sql())

    def load(self, n: int, batch_rows: int) -> None:
        s = self.session()
        s.con.register("load_stream", pa.RecordBatchReader.from_batches(schema(), batches(n, batch_rows)))
        s.con.execute(f"INSERT INTO {TABLE} SELECT * FROM load_stream")
        s.close()

    def after_load(self) -> str:
        self.db.execute("CHECKPOINT")
        return "CHECKPOINT"

    def describe(self) -> str:
        threads = self.db.execute("SELECT current_setting('threads')").fetchall()[0][0]
        return f"database file: {os.path.getsize(self.path) / 1e6:.0f} MB; threads {threads}"

    def drop(self) -> None:
        self.db.execute(f"DROP TABLE IF EXISTS {TABLE}")
        self.db.close()


# --- one system's run -----------------------------------------------------------------------


@dataclass
class Shared:
    """What the writer and the readers share while the mix runs."""

    written: int
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)


def apply(session, tick: Tick, lat: dict[str, list[float]] | None) -> None:
    """One tick's writes; latencies (ms) into `lat` when given."""
    if tick.hi > tick.lo:
        batch = rows(tick.lo, tick.hi, 0)
        t0 = time.perf_counter()
        session.insert(batch)
        if lat is not None:
            lat["Q1"].append((time.perf_counter() - t0) * 1e3)
    for key, col, value in tick.updates:
        t0 = time.perf_counter()
        changed = session.update(q5_sql(key, col, value))
        if lat is not None:
            lat["Q5"].append((time.perf_counter() - t0) * 1e3)
        if changed != 1:
            raise RuntimeError(f"{q5_sql(key, col, value)} changed {changed} rows, not 1")


def writer(session, ticks: list[Tick], t0: float, args, shared: Shared, lat, done: list[int]) -> None:
    """Runs the schedule until `--duration-s` is over; `done[0]` is the number of ticks done."""
    tick_s = args.tick_ms / 1e3
    end = t0 + args.duration_s
    try:
        for i, tick in enumerate(ticks):
            wait = t0 + i * tick_s - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if time.perf_counter() >= end:
                return
            apply(session, tick, lat)
            shared.written = tick.hi
            done[0] = i + 1
        time.sleep(max(0.0, end - time.perf_counter()))
    except BaseException as e:  # noqa: BLE001  (reported by the main thread)
        shared.errors.append(e)
    finally:
        shared.stop.set()


def reader(session, mix: ReadMix, shared: Shared, lat) -> None:
    try:
        while not shared.stop.is_set():
            kind, sql = mix.query(shared.written)
            t0 = time.perf_counter()
            session.query(sql)
            lat[kind].append((time.perf_counter() - t0) * 1e3)
    except BaseException as e:  # noqa: BLE001  (reported by the main thread)
        shared.errors.append(e)
        shared.stop.set()


def summary(ms: list[float]) -> dict:
    if not ms:
        return {"count": 0, "median_ms": None, "p99_ms": None}
    s = sorted(ms)
    return {
        "count": len(s),
        "median_ms": round(statistics.median(s), 3),
        "p99_ms": round(s[max(0, math.ceil(0.99 * len(s)) - 1)], 3),
    }


def run_system(system, n: int, ticks: list[Tick], args) -> dict:
    name = NAMES[system.name]
    print(f"\n== {name} ({system.version})", flush=True)
    system.create()
    t0 = time.perf_counter()
    system.load(n, args.batch_rows)
    load_s = time.perf_counter() - t0
    print(f"  load: {n} rows in {load_s:.1f} s ({n / load_s:,.0f} rows/s)", flush=True)
    t0 = time.perf_counter()
    after = system.after_load()
    after_s = time.perf_counter() - t0
    print(f"  after the load ({after_s:.1f} s): {after}", flush=True)

    lat = {k: [] for k in KINDS}
    shared = Shared(written=n)
    done = [0]
    wsession = system.session()
    rsessions = [system.session() for _ in range(args.readers)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(wsession, ticks, t0, args, shared, lat, done))]
    threads += [
        threading.Thread(target=reader, args=(s, ReadMix(n, r, args.seed), shared, lat))
        for r, s in enumerate(rsessions)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window_s = time.perf_counter() - t0
    if shared.errors:
        raise shared.errors[0]
    for s in rsessions:
        s.close()

    in_time = done[0]
    rows_in_time = ticks[in_time - 1].hi - n if in_time else 0
    updates_in_time = sum(len(t.updates) for t in ticks[:in_time])
    t0 = time.perf_counter()
    for tick in ticks[in_time:]:
        apply(wsession, tick, None)
    catch_up_s = time.perf_counter() - t0
    wsession.close()
    writes = {
        "ticks_scheduled": len(ticks),
        "ticks_in_time": in_time,
        "insert_rate_target": args.insert_rate,
        "insert_rate_achieved": round(rows_in_time / args.duration_s, 1),
        "update_rate_target": args.update_rate,
        "update_rate_achieved": round(updates_in_time / args.duration_s, 1),
        "fell_behind": in_time < len(ticks),
        "catch_up_s": round(catch_up_s, 3),
    }
    if writes["fell_behind"]:
        print(
            f"  writer fell behind: {len(ticks) - in_time} of {len(ticks)} ticks not done within "
            f"{args.duration_s:.0f} s, done afterwards in {catch_up_s:.1f} s",
            flush=True,
        )

    s = system.session()
    answers = {label: [[None if v is None else int(v) for v in row] for row in s.query(sql)] for label, sql in checks(n, ticks[-1].hi)}
    s.close()
    describe = system.describe()
    print(f"  after the run: {describe}", flush=True)
    if not args.keep_tables:
        system.drop()
    return {
        "version": system.version,
        "load_s": round(load_s, 3),
        "load_rows_per_s": round(n / load_s, 1),
        "after_load": after,
        "after_load_s": round(after_s, 3),
        "mix_window_s": round(window_s, 3),
        "queries": {k: summary(v) for k, v in lat.items()},
        "writes": writes,
        "answers": answers,
        "after_run": describe,
    }


# --- the report -----------------------------------------------------------------------------


def machine() -> dict:
    info = {"nproc": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    return info


def fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def report(results: dict, args, n: int) -> dict:
    names = list(results)
    batch = round(args.insert_rate * args.tick_ms / 1e3)
    print(f"\n{n} rows loaded, then {args.duration_s:.0f} s of the mix: 1 writer "
          f"(Q1 {args.insert_rate:.0f} rows/s as one {batch}-row batch every {args.tick_ms:.0f} ms, "
          f"Q5 {args.update_rate:.0f}/s), {args.readers} readers (Q2a, Q2b, Q3, Q4 round-robin); "
          f"latencies in ms at the client, Q1's per batch")
    print("\n| query | " + " | ".join(f"{NAMES[s]} count | median | p99" for s in names) + " |")
    print("|---|" + "---|---|---|" * len(names))
    for k in KINDS:
        cells = []
        for s in names:
            q = results[s]["queries"][k]
            cells.append(f"{q['count']} | {fmt(q['median_ms'])} | {fmt(q['p99_ms'])}")
        print(f"| {k} | " + " | ".join(cells) + " |")

    print("\n| system | load (s) | load rows/s | after the load (s) | Q1 rows/s (target) | Q5 updates/s (target) | writer |")
    print("|---|---|---|---|---|---|---|")
    for s in names:
        r, w = results[s], results[s]["writes"]
        behind = (f"fell behind: {w['ticks_scheduled'] - w['ticks_in_time']} ticks late, "
                  f"caught up in {w['catch_up_s']:.1f} s") if w["fell_behind"] else "kept up"
        print(f"| {NAMES[s]} | {r['load_s']:.1f} | {r['load_rows_per_s']:,.0f} | {r['after_load_s']:.1f} | "
              f"{w['insert_rate_achieved']:,.0f} ({w['insert_rate_target']:,.0f}) | "
              f"{w['update_rate_achieved']:,.0f} ({w['update_rate_target']:,.0f}) | {behind} |")

    ratios = {}
    if "strata" in results:
        others = [s for s in ("duckdb", "postgres") if s in results]
        for k in KINDS:
            m = results["strata"]["queries"][k]["median_ms"]
            ratios[k] = {
                f"strata/{o}": (round(m / results[o]["queries"][k]["median_ms"], 3)
                                if m and results[o]["queries"][k]["median_ms"] else None)
                for o in others
            }
        if others:
            print("\n| query | " + " | ".join(f"Strata / {NAMES[o]} (medians)" for o in others) + " |")
            print("|---|" + "---|" * len(others))
            for k in KINDS:
                print(f"| {k} | " + " | ".join(fmt(ratios[k][f"strata/{o}"], "x") for o in others) + " |")
    return ratios


def compare(results: dict) -> list[str]:
    """Where the final answers disagree with the first system's."""
    names = list(results)
    first = results[names[0]]["answers"]
    bad = []
    for label, want in first.items():
        for s in names[1:]:
            got = results[s]["answers"][label]
            if got != want:
                bad.append(f"{label}: {NAMES[names[0]]} {want}, {NAMES[s]} {got}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, run in this order")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--insert-rate", type=float, default=10_000.0, help="Q1 rows per second")
    ap.add_argument("--update-rate", type=float, default=100.0, help="Q5 updates per second")
    ap.add_argument("--tick-ms", type=float, default=10.0, help="the writer's step: one insert batch and its updates")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--batch-rows", type=int, default=8192, help="rows per Arrow batch of the load")
    ap.add_argument("--flight", default="grpc://127.0.0.1:8081")
    ap.add_argument("--http", default="http://127.0.0.1:8080")
    ap.add_argument("--strata-settle-s", type=float, default=120.0, help="longest wait for Strata's tree to settle after the load")
    ap.add_argument("--strata-version", default="strata (version not given)")
    ap.add_argument("--pg-dsn", default="host=127.0.0.1 port=55432 user=postgres dbname=postgres")
    ap.add_argument("--duckdb", default="/tmp/strata-htap/duckdb/laser.duckdb", help="DuckDB database file (recreated)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep-tables", action="store_true", help="leave each system's table as the run left it (to probe that state afterwards)")
    args = ap.parse_args()
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown or not chosen:
        ap.error(f"--systems: choose among {', '.join(SYSTEMS)}")
    n = args.rows

    ticks = write_schedule(n, args)
    print(f"write schedule: {len(ticks)} ticks, {ticks[-1].hi - n} new rows, "
          f"{sum(len(t.updates) for t in ticks)} updates (seed {args.seed})", flush=True)
    make = {"strata": Strata, "postgres": Postgres, "duckdb": DuckDB}
    results = {s: run_system(make[s](args), n, ticks, args) for s in chosen}
    ratios = report(results, args, n)
    bad = compare(results)
    if bad:
        print("\nMISMATCH in the final answers:\n  " + "\n  ".join(bad))
    else:
        print(f"\nfinal answers agree across {', '.join(NAMES[s] for s in chosen)}: "
              + "; ".join(f"{k} = {v}" for k, v in results[chosen[0]]["answers"].items()))
    if args.json:
        out = {
            "machine": machine(),
            "config": {k: getattr(args, k) for k in (
                "rows", "duration_s", "insert_rate", "update_rate", "tick_ms", "readers", "seed", "batch_rows")},
            "clients": {
                "pyarrow": pa.__version__,
                "adbc_driver_flightsql": adbc_driver_flightsql.__version__,
                "psycopg": psycopg.__version__,
                "duckdb": duckdb.__version__,
            },
            "systems": results,
            "ratios": ratios,
            "answers_agree": not bad,
            "mismatches": bad,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"figures: {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
