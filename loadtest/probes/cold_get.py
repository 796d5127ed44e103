"""Cold point reads: batches of 300 key-value gets of uniform keys over HTTP on LASER's
table (loadtest/probes/load_laser.py), each batch's server CPU per read, p50 and p99.
usage: cold_get.py PID [BATCHES] [SEED]"""
import random
import statistics
import sys
import time

from rawhttp import Conn, cpu_seconds

pid = int(sys.argv[1])
batches = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 5)
conn = Conn()
for b in range(batches):
    lat = []
    c0 = cpu_seconds(pid)
    for _ in range(300):
        k = rng.randrange(1_000_000)
        req = f"GET /v1/tables/laser/rows/get?key={k} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        t0 = time.perf_counter()
        conn.call(req)
        lat.append((time.perf_counter() - t0) * 1e3)
    c1 = cpu_seconds(pid)
    lat.sort()
    print(f"batch {b}: server CPU {(c1 - c0) / 300 * 1e3:.2f} ms/read, "
          f"p50 {statistics.median(lat):.2f} ms, p99 {lat[296]:.2f} ms")
