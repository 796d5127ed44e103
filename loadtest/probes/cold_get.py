"""Cold point reads over HTTP KV get on laser (1M rows): server CPU per read for batches of 300 uniform keys.
usage: cold_get.py PID [BATCHES] [SEED]"""
import socket, sys, time, os, random, statistics
pid = int(sys.argv[1]); nb = int(sys.argv[2]) if len(sys.argv) > 2 else 2
tck = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
s = socket.create_connection(("127.0.0.1", 8080)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def call(req):
    s.sendall(req); buf = b""
    while True:
        buf += s.recv(65536); h, sep, rest = buf.partition(b"\r\n\r\n")
        if sep:
            cl = int([l.split(b":")[1] for l in h.split(b"\r\n")[1:] if l.lower().startswith(b"content-length")][0])
            while len(rest) < cl: rest += s.recv(65536)
            assert h.startswith(b"HTTP/1.1 200"), buf[:300]; return rest
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 5)
for b in range(nb):
    lat = []; c0 = cpu()
    for _ in range(300):
        k = rng.randrange(1_000_000)
        t0 = time.perf_counter(); call(f"GET /v1/tables/laser/rows/get?key={k} HTTP/1.1\r\nHost: x\r\n\r\n".encode()); lat.append((time.perf_counter()-t0)*1e3)
    c1 = cpu(); lat.sort()
    print(f"batch {b}: server CPU {(c1-c0)/300*1e3:.2f} ms/read, p50 {statistics.median(lat):.2f} ms, p99 {lat[296]:.2f} ms")
