"""Cold point reads: batches of 300 key-value gets of uniform keys over HTTP on LASER's
table (loadtest/probes/load_laser.py), each batch's server CPU per read, p50 and p99.
usage: cold_get.py PID [BATCHES] [SEED]"""
import random
import sys

from rawhttp import Conn, timed

pid = int(sys.argv[1])
batches = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 5)
conn = Conn()
for b in range(batches):
    keys = [rng.randrange(1_000_000) for _ in range(300)]
    reqs = [f"GET /v1/tables/laser/rows/get?key={k} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            for k in keys]
    p50, p99, cpu = timed(conn, pid, reqs)
    print(f"batch {b}: server CPU {cpu * 1e3:.2f} ms/read, p50 {p50 * 1e3:.2f} ms, "
          f"p99 {p99 * 1e3:.2f} ms")
