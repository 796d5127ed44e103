"""Raw-socket HTTP keep-alive probe: one-row inserts (or gets) against strata serve.
usage: one_row.py PID N [local|remote|get] [table]"""
import socket, sys, time, json, statistics, os
pid, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
table = sys.argv[4] if len(sys.argv) > 4 else "kv"
tck = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
s = socket.create_connection(("127.0.0.1", 8080)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def call(req):
    s.sendall(req)
    buf = b""
    while True:
        buf += s.recv(65536)
        h, sep, rest = buf.partition(b"\r\n\r\n")
        if sep:
            cl = 0
            for line in h.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.lower() == b"content-length": cl = int(v)
            while len(rest) < cl:
                rest += s.recv(65536)
            assert h.startswith(b"HTTP/1.1 200"), buf[:300]
            return rest
base = int(time.time() * 1000) % 1_000_000_000 * 10
def req(i):
    if mode == "get":
        return f"GET /v1/tables/{table}/rows/get?key={i % 1000}&columns=name,score HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    body = json.dumps([{"id": base + i, "name": f"name-{i}", "score": i * 0.5}]).encode()
    q = "?durability=local" if mode == "local" else ""
    return f"POST /v1/tables/{table}/rows{q} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
for i in range(200): call(req(i))
lat = []; c0 = cpu()
for i in range(200, 200 + n):
    r = req(i); t0 = time.perf_counter(); call(r); lat.append((time.perf_counter() - t0) * 1e6)
c1 = cpu(); lat.sort()
print(f"{mode}: p50 {statistics.median(lat):.0f} us, p99 {lat[int(0.99*n)]:.0f} us, server CPU {(c1-c0)/n*1e6:.0f} us/op")
