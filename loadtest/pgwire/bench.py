"""Single-row operations over the PostgreSQL wire protocol: Strata's port beside a real
PostgreSQL, the same psycopg client code for both (one connection, autocommit, parameters
bound by the server, psycopg's default prepare threshold).

Operations: SELECT 1 (the round trip), a point get by primary key, a one-row insert (durable
on both: Strata acknowledges once the WAL segment is in the bucket; PostgreSQL with fsync and
synchronous_commit on). Prints the median, p99 and mean latency of each, side by side, and
the ratios. Run it through loadtest/pgwire.sh, which starts both servers.

With `--http` (the default URL is `strata serve`'s), the same point get and one-row insert
also go through Strata's HTTP data API from this process (one keep-alive connection, JSON),
twice: with the standard library's `http.client` (pure Python: its header parsing alone
costs about as much as the server's whole answer) and with pycurl (libcurl, a C client as
psycopg's libpq is), with the server's own time per request from `/metrics`
(`strata_http_request_seconds`, sum over count for the operation): what the network path
and the client add is the rest. The insert runs twice over HTTP: at the default durability
(`insert_1_row`: acknowledged once the WAL segment is in the bucket) and with
`?durability=local` (`insert_1_row_local`: once synced to the node's disk, PostgreSQL's own
guarantee, uploaded within `engine.wal_local_upload_delay_ms` together with the other local
writes of that interval); both are compared with PostgreSQL's insert.
"""

import argparse
import http.client
import io
import json
import re
import urllib.parse
import random
import statistics
import time

import psycopg
import pycurl


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def store_requests(url):
    """Every object-store request the server at `url` has made (its /metrics)."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^strata_object_store_requests_total\{[^}]*\} (\S+)$", text, re.M)
    )


def run(dsn, rows, n, seed, metrics_url=None):
    """The operations over psycopg; with `metrics_url` (Strata's), also the object-store
    requests each operation made on average."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS kv")
    conn.execute("CREATE TABLE kv (id BIGINT, name VARCHAR, score DOUBLE PRECISION, PRIMARY KEY (id))")
    for lo in range(0, rows, 1000):
        values = ", ".join(f"({i}, 'name-{i}', {i * 0.5})" for i in range(lo, min(rows, lo + 1000)))
        conn.execute(f"INSERT INTO kv VALUES {values}")
    rng = random.Random(seed)
    out = {}

    def timed(name, fn, count):
        for _ in range(20):  # warm-up: connections, prepared statements, caches
            fn()
        r0 = store_requests(metrics_url) if metrics_url else None
        lat = []
        for _ in range(count):
            t0 = time.perf_counter()
            fn()
            lat.append((time.perf_counter() - t0) * 1e3)
        out[name] = {
            "p50_ms": round(statistics.median(lat), 3),
            "p99_ms": round(percentile(lat, 0.99), 3),
            "mean_ms": round(statistics.fmean(lat), 3),
            "ops": count,
        }
        if r0 is not None:
            out[name]["store_requests_per_op"] = round((store_requests(metrics_url) - r0) / count, 4)

    cur = conn.cursor()

    def select_one():
        cur.execute("SELECT 1")
        cur.fetchall()

    def point_get():
        k = rng.randrange(rows)
        cur.execute("SELECT name, score FROM kv WHERE id = %s", (k,))
        got = cur.fetchall()
        assert got == [(f"name-{k}", k * 0.5)], got

    next_id = [rows]

    def insert():
        k = next_id[0]
        next_id[0] += 1
        cur.execute("INSERT INTO kv VALUES (%s, %s, %s)", (k, f"name-{k}", k * 0.5))

    timed("select_1", select_one, n)
    timed("point_get", point_get, n)
    timed("insert_1_row", insert, max(1, n // 3))
    conn.close()
    return out


def server_seconds(conn, op):
    """(sum, count) of strata_http_request_seconds for `op` from /metrics."""
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    text = r.read().decode()
    assert r.status == 200, text[:200]
    def value(kind):
        m = re.search(r'^strata_http_request_seconds_' + kind + r'\{op="' + re.escape(op) + r'"\} (\S+)$', text, re.M)
        return float(m.group(1)) if m else 0.0
    return value("sum"), value("count")


class CurlConnection:
    """One libcurl handle (its connection kept alive between requests), called as
    `call(method, path, body)`: the response body, asserting a 200."""

    def __init__(self, url):
        self.base = url.rstrip("/")
        self.buf = io.BytesIO()
        self.c = pycurl.Curl()
        self.c.setopt(pycurl.WRITEDATA, self.buf)
        self.c.setopt(pycurl.HTTPHEADER, ["Expect:", "Content-Type: application/json"])

    def call(self, method, path, body=None):
        self.buf.seek(0)
        self.buf.truncate()
        self.c.setopt(pycurl.URL, self.base + path)
        if method == "GET":
            self.c.setopt(pycurl.HTTPGET, 1)
        else:
            self.c.setopt(pycurl.POSTFIELDS, body or "")
        self.c.perform()
        data = self.buf.getvalue()
        status = self.c.getinfo(pycurl.RESPONSE_CODE)
        assert status == 200, (status, data[:200])
        return data

    def close(self):
        self.c.close()


class StdlibConnection:
    """One `http.client` keep-alive connection, called as `call(method, path, body)`."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80)

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        assert r.status == 200, (r.status, data[:200])
        return data

    def close(self):
        self.conn.close()


HTTP_CLIENTS = {"http.client": StdlibConnection, "pycurl": CurlConnection}


def run_http(url, rows, n, seed, client="http.client"):
    """The point get and one-row insert over the HTTP data API through `client` (a key of
    HTTP_CLIENTS), on the table the PostgreSQL port's run left (`kv`, `rows` rows and the
    inserts after them)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80)  # /metrics, untimed
    client_conn = HTTP_CLIENTS[client](url)
    call = client_conn.call
    rng = random.Random(seed + 1)
    out = {}

    def timed(name, op, fn, count):
        for _ in range(20):
            fn()
        s0, c0 = server_seconds(conn, op)
        r0 = store_requests(url)
        lat = []
        for _ in range(count):
            t0 = time.perf_counter()
            fn()
            lat.append((time.perf_counter() - t0) * 1e3)
        r1 = store_requests(url)
        s1, c1 = server_seconds(conn, op)
        out[name] = {
            "p50_ms": round(statistics.median(lat), 3),
            "p99_ms": round(percentile(lat, 0.99), 3),
            "mean_ms": round(statistics.fmean(lat), 3),
            "server_mean_ms": round((s1 - s0) / max(1, c1 - c0) * 1e3, 3),
            "store_requests_per_op": round((r1 - r0) / count, 4),
            "ops": count,
        }

    def point_get():
        k = rng.randrange(rows)
        got = json.loads(call("GET", f"/v1/tables/kv/rows/get?key={k}&columns=name,score"))
        assert got == {"name": f"name-{k}", "score": k * 0.5}, got

    # New keys, apart from the other client's run.
    next_id = [rows * 10 + list(HTTP_CLIENTS).index(client) * 1_000_000]

    def insert():
        k = next_id[0]
        next_id[0] += 1
        call("POST", "/v1/tables/kv/rows", json.dumps([{"id": k, "name": f"name-{k}", "score": k * 0.5}]))

    def insert_local():
        # Acknowledged once synced to the node's disk (as PostgreSQL's commit is), uploaded
        # to the bucket with the interval's other local writes (50 ms by default).
        k = next_id[0]
        next_id[0] += 1
        body = json.dumps([{"id": k, "name": f"name-{k}", "score": k * 0.5}])
        call("POST", "/v1/tables/kv/rows?durability=local", body)

    timed("point_get", "GET /v1/tables/{table}/rows/get", point_get, n)
    timed("insert_1_row", "POST /v1/tables/{table}/rows", insert, max(1, n // 3))
    timed("insert_1_row_local", "POST /v1/tables/{table}/rows", insert_local, max(1, n // 3))
    client_conn.close()
    conn.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata-dsn", default="host=127.0.0.1 port=5433 dbname=strata user=bench")
    ap.add_argument("--pg-dsn", default="host=127.0.0.1 port=55432 dbname=postgres user=postgres")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--http", default="http://127.0.0.1:8080", help="Strata's HTTP data API ('' to skip)")
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {
        "strata": run(args.strata_dsn, args.rows, args.ops, args.seed, args.http or None),
        "postgres": run(args.pg_dsn, args.rows, args.ops, args.seed),
    }
    if args.http:
        results["strata_http"] = run_http(args.http, args.rows, args.ops, args.seed, "http.client")
        results["strata_http_curl"] = run_http(args.http, args.rows, args.ops, args.seed + 2, "pycurl")
    print(f"{args.rows} rows, {args.ops} operations each (inserts: a third), one connection")
    print(f"{'operation':<14}{'Strata p50':>12}{'p99':>9}{'PostgreSQL p50':>16}{'p99':>9}{'ratio p50':>11}{'store req/op':>14}")
    for op in results["strata"]:
        s, p = results["strata"][op], results["postgres"][op]
        print(
            f"{op:<14}{s['p50_ms']:>10.3f}ms{s['p99_ms']:>7.3f}ms{p['p50_ms']:>14.3f}ms{p['p99_ms']:>7.3f}ms"
            f"{s['p50_ms'] / p['p50_ms']:>10.2f}x{s.get('store_requests_per_op', float('nan')):>14.4f}"
        )
    if args.http:
        for key, client in (("strata_http", "http.client"), ("strata_http_curl", "pycurl")):
            print(f"HTTP data API through {client} (one keep-alive connection, JSON), beside PostgreSQL over psycopg:")
            print(f"{'operation':<14}{'HTTP p50':>10}{'p99':>9}{'mean':>9}{'server mean':>13}{'PostgreSQL p50':>16}{'p99':>9}{'ratio p50':>11}{'store req/op':>14}")
            for op, h in results[key].items():
                p = results["postgres"][op.removesuffix("_local")]
                print(
                    f"{op:<14}{h['p50_ms']:>8.3f}ms{h['p99_ms']:>7.3f}ms{h['mean_ms']:>7.3f}ms{h['server_mean_ms']:>11.3f}ms"
                    f"{p['p50_ms']:>14.3f}ms{p['p99_ms']:>7.3f}ms{h['p50_ms'] / p['p50_ms']:>10.2f}x{h['store_requests_per_op']:>14.4f}"
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
