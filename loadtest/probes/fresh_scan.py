"""Scans of the newest keys on LASER's table: one ADBC connection (DB-API execute + fetchall,
as loadtest/htap.sh), Q4's SUM over a range of N/20 keys among rows just written.

usage: fresh_scan.py SERVER_PID ROWS NEW [QUERIES]   (bench venv; the table loaded with
load_laser.py ROWS and settled)

Writes NEW rows past the table's keys (ROWS..ROWS+NEW) in 100-row ADBC ingests, as LASER's
Q1 does, then runs QUERIES (default 300) Q4s over ranges of those keys twice right after
the writes (the rows in the memtable), and twice after the memtable has been idle long
enough to be flushed (`engine.memtable_settle_ms`, 10 s by default; the rows in L0).
Prints p50 and the server's CPU per query for each run."""
import os
import random
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "htap"))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
import adbc_driver_flightsql.dbapi as flight_sql  # noqa: E402
import bench  # noqa: E402
from rawhttp import cpu_seconds  # noqa: E402

pid, n, new = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
queries = int(sys.argv[4]) if len(sys.argv) > 4 else 300
conn = flight_sql.connect("grpc://127.0.0.1:8081", autocommit=True)
t = time.perf_counter()
for lo in range(n, n + new, 100):
    with conn.cursor() as c:
        c.adbc_ingest(bench.TABLE, bench.rows(lo, min(lo + 100, n + new), 0), mode="append")
print(f"wrote {new} rows in {time.perf_counter() - t:.1f} s", flush=True)
cur = conn.cursor()
rng = random.Random(5)
width = n // 20
cols = " + ".join(f"a{c}" for c in range(21, 31))


def q4():
    lo = rng.randrange(n, n + max(1, new - width))
    return f"SELECT SUM({cols}) FROM {bench.TABLE} WHERE a0 >= {lo} AND a0 < {lo + width}"


def run(label):
    lat = []
    s0 = cpu_seconds(pid)
    for _ in range(queries):
        sql = q4()
        t0 = time.perf_counter()
        cur.execute(sql)
        cur.fetchall()
        lat.append((time.perf_counter() - t0) * 1e3)
    cpu = (cpu_seconds(pid) - s0) / queries * 1e3
    print(f"{label}: p50 {statistics.median(lat):.2f} ms, server CPU {cpu:.2f} ms/query", flush=True)


run("newest keys in the memtable")
run("again")
time.sleep(15)
run("after the memtable's idle flush")
run("again")
cur.close()
conn.close()
