"""A replacement node: `strata serve` restarted on the same bucket with an empty local directory.

Run by `loadtest/analytic.sh` with `REPLACE=1`, after bench.py and after the first server has
stopped: everything under the data directory except the bucket (`<dir>/bucket`) is deleted
(the NVMe tier, caches, the node's local state), as on a new instance that took over the
old one's work. The server is then started again with the same (default) settings and timed
from process start:
- until `/ready` answers;
- until the first point read (`SELECT * FROM laser WHERE a0 = k`) answers over Flight SQL;
- until the first `MAX over half the keys` answers, and then per run of it, until a run is
  within 1.25x of the median of the last five (full speed: the caches the query needs are
  warm again).
Each answer is checked against what the first server gave (passed in by bench.py's output
file), so a replacement that answers fast but wrong fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

import adbc_driver_flightsql.dbapi as flight_sql

TABLE = "laser"


def ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def query(conn, sql: str):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the strata binary")
    ap.add_argument("--dir", required=True, help="the data directory the first server used")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--expect", required=True, help="JSON file with the first server's answers")
    ap.add_argument("--log", required=True)
    ap.add_argument("--flight", default="grpc://127.0.0.1:8081")
    ap.add_argument("--http", default="http://127.0.0.1:8080")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    expect = json.load(open(args.expect))

    kept = 0
    for name in os.listdir(args.dir):
        path = os.path.join(args.dir, name)
        if name == "bucket":
            kept = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
            continue
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    print(f"replacement node: local directory emptied, bucket kept ({kept / 1e6:.0f} MB)", flush=True)

    log = open(args.log, "w")
    t0 = time.perf_counter()
    server = subprocess.Popen([args.bin, "serve", "--dir", args.dir], stdout=log, stderr=subprocess.STDOUT)
    try:
        while not ready(args.http):
            if server.poll() is not None:
                print("server exited; see " + args.log, file=sys.stderr)
                return 1
            time.sleep(0.01)
        t_ready = time.perf_counter() - t0
        conn = flight_sql.connect(args.flight)
        key = args.rows // 3
        got = query(conn, f"SELECT * FROM {TABLE} WHERE a0 = {key}").to_pylist()
        t_point = time.perf_counter() - t0
        if got != expect["point"]:
            print(f"point read differs: {got} != {expect['point']}", file=sys.stderr)
            return 1
        sql = f"SELECT MAX(a28), MAX(a29), MAX(a30) FROM {TABLE} WHERE a0 < {args.rows // 2}"
        runs = []
        for _ in range(args.runs):
            s = time.perf_counter()
            got = query(conn, sql).to_pylist()
            runs.append((time.perf_counter() - s, time.perf_counter() - t0))
            if got != expect["max"]:
                print(f"MAX differs: {got} != {expect['max']}", file=sys.stderr)
                return 1
        conn.close()
        tail = statistics.median(r for r, _ in runs[-5:])
        full = next(at for r, at in runs if r <= 1.25 * tail)
        print(f"ready after {t_ready * 1e3:.0f} ms; first point read answered after {t_point * 1e3:.0f} ms")
        print(
            f"first MAX over half the keys: {runs[0][0] * 1e3:.1f} ms (answered {runs[0][1] * 1e3:.0f} ms after start); "
            f"full speed ({tail * 1e3:.1f} ms, median of the last 5 runs) reached {full * 1e3:.0f} ms after start"
        )
        print("MAX runs (ms): " + " ".join(f"{r * 1e3:.0f}" for r, _ in runs[:10]) + " ...")
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
