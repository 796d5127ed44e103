"""What the probes share: a process's CPU seconds from /proc, one keep-alive HTTP/1.1
connection over a raw socket (the least a client can add to a request's time), and a timed
run of requests over it."""
import os
import socket
import statistics
import time

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / _TICK


class Conn:
    """One keep-alive connection to 127.0.0.1:`port`; `call(request_bytes)` returns the
    body of a 200 answer and fails on any other status."""

    def __init__(self, port: int = 8080):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, req: bytes) -> bytes:
        self.s.sendall(req)
        buf = b""
        while True:
            buf += self.s.recv(65536)
            head, sep, body = buf.partition(b"\r\n\r\n")
            if sep:
                break
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(body) < length:
            body += self.s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), buf[:300]
        return body


def timed(conn: Conn, pid: int, requests) -> tuple[float, float, float]:
    """Sends `requests` (bytes, in order) over `conn`, one at a time, each built before its
    clock starts: (p50, p99) of their latencies in seconds and process `pid`'s CPU seconds
    per request over the run."""
    lat = []
    c0 = cpu_seconds(pid)
    for req in requests:
        t0 = time.perf_counter()
        conn.call(req)
        lat.append(time.perf_counter() - t0)
    c1 = cpu_seconds(pid)
    lat.sort()
    return statistics.median(lat), lat[int(0.99 * len(lat))], (c1 - c0) / len(lat)
