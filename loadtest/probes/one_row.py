"""One-row inserts (`local` or `remote` durability) or point gets (`get`) over one raw-socket
keep-alive HTTP connection on the table `kv(id int64, name string, score float64)` (gets
read keys 0..999): p50, p99 and the server's CPU per operation, after 200 warm-up ones.
usage: one_row.py PID N [local|remote|get] [TABLE]"""
import json
import sys
import time

from rawhttp import Conn, timed

pid, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
table = sys.argv[4] if len(sys.argv) > 4 else "kv"
base = int(time.time() * 1000) % 1_000_000_000 * 10  # new keys on every run


def request(i: int) -> bytes:
    if mode == "get":
        return (f"GET /v1/tables/{table}/rows/get?key={i % 1000}&columns=name,score HTTP/1.1\r\n"
                "Host: x\r\n\r\n").encode()
    body = json.dumps([{"id": base + i, "name": f"name-{i}", "score": i * 0.5}]).encode()
    query = "?durability=local" if mode == "local" else ""
    return (f"POST /v1/tables/{table}/rows{query} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


conn = Conn()
for i in range(200):
    conn.call(request(i))
p50, p99, cpu = timed(conn, pid, [request(i) for i in range(200, 200 + n)])
print(f"{mode}: p50 {p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us, server CPU {cpu * 1e6:.0f} us/op")
