"""Multi-node end-to-end test, driven against a running dev cluster (infra/dev-cluster.sh
start, 2 ingest nodes, compactors, a query service): run by dev_cluster_failover.sh, which
starts and stops the cluster.

1. Tables are created through ingest-1 until both nodes own some (rendezvous hashing
   spreads them); every node answers for every table (forwarding to the owner).
2. Rows are written in rounds, alternating the entry node, so half the writes are
   forwarded. Halfway, the node owning the first table is killed (SIGKILL); from then on
   every batch goes to the survivor, retried on 503 and connection errors until it is
   acknowledged (the survivor takes the shards over once the lease, 3 s, lapses).
3. `dev-cluster.sh status` reports the killed node exited and everything else running.
4. The survivor owns every table; the killed node's tables changed hands.
5. The query service, reading the bucket, sees every acknowledged row (count and sum).

Standard library only. Prints one line per check and `driver: N passed, M failed`;
exits 1 on any failure.
    python dev_cluster_failover.py DEV_DIR DEV_CLUSTER_SH
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROWS_PER_BATCH = 200
ROUNDS = 10
MAX_TABLES = 20
WRITE_DEADLINE_S = 60.0


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def ok(self, what: str) -> None:
        self.passed += 1
        print(f"  ok    {what}", flush=True)

    def fail(self, what: str, detail: str = "") -> None:
        self.failed += 1
        print(f"  FAIL  {what}", flush=True)
        for line in detail.strip().splitlines()[:20]:
            print(f"        {line}", flush=True)

    def check(self, cond: bool, what: str, detail: str = "") -> bool:
        if cond:
            self.ok(what)
        else:
            self.fail(what, detail)
        return cond


class Unreachable(Exception):
    pass


def request(base: str, method: str, path: str, body: bytes = b"", content_type: str = "application/json", timeout: float = 30.0):
    """(status, body text); Unreachable on a connection error."""
    req = urllib.request.Request(base + path, data=body if method != "GET" else None, method=method)
    if method != "GET":
        req.add_header("content-type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError, OSError) as e:
        raise Unreachable(str(e)) from e


def owner(via: str, table: str):
    try:
        st, body = request(via, "GET", f"/v1/admin/tables/{table}")
    except Unreachable:
        return None
    if st != 200:
        return None
    lease = (json.loads(body).get("shards") or [{}])[0].get("lease") or {}
    return lease.get("owner"), lease.get("generation")


def batch(round_: int) -> bytes:
    return "".join(
        json.dumps({"id": i, "v": i * 3}) + "\n"
        for i in range(round_ * ROWS_PER_BATCH, (round_ + 1) * ROWS_PER_BATCH)
    ).encode()


def ours(pid: int, dev_dir: pathlib.Path) -> bool:
    """pid is a process of this dev cluster (runs a config under DEV_DIR/config)."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return f"--config {dev_dir}/config/" in cmdline


def main() -> int:
    dev_dir = pathlib.Path(sys.argv[1])
    dev_cluster = sys.argv[2]
    checks = Checks()
    env = dict(
        line.split("=", 1)
        for line in (dev_dir / "endpoints.env").read_text().splitlines()
        if "=" in line
    )
    n = int(env.get("INGEST_NODES", "0"))
    if not checks.check(n == 2, f"dev cluster runs 2 ingest nodes (INGEST_NODES={n})"):
        print(f"driver: {checks.passed} passed, {checks.failed} failed")
        return 1
    nodes = {f"ingest-{i}": env[f"INGEST_{i}_HTTP"] for i in (1, 2)}
    query = env["QUERY_HTTP"]
    first = nodes["ingest-1"]
    # Both liveness records are written when the nodes join (before they are ready); give
    # each node a renew round (0.5 s) to list the other.
    time.sleep(1.5)

    # 1. Tables until each node owns some.
    owners: dict[str, str] = {}
    for i in range(MAX_TABLES):
        t = f"t{i}"
        spec = {
            "name": t,
            "columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "v", "type": "int64"}],
            "primary_key": ["id"],
        }
        st, body = request(first, "POST", "/v1/tables", json.dumps(spec).encode())
        if st != 201:
            checks.fail(f"create table {t} through ingest-1", f"{st} {body}")
            break
        deadline = time.monotonic() + 15
        o = None
        while time.monotonic() < deadline:
            o = owner(first, t)
            if o and o[0]:
                break
            time.sleep(0.2)
        if not (o and o[0]):
            checks.fail(f"table {t} gets an owner within 15 s")
            break
        owners[t] = o[0]
        if len(owners) >= 4 and len(set(owners.values())) == 2:
            break
    spread = len(owners) >= 1 and set(owners.values()) == set(nodes)
    checks.check(spread, f"{len(owners)} tables created through ingest-1 spread over both nodes: {owners}")
    if not spread:
        print(f"driver: {checks.passed} passed, {checks.failed} failed")
        return 1

    wrong = []
    for t, o in owners.items():
        for name, addr in nodes.items():
            got = owner(addr, t)
            if not got or got[0] != o:
                wrong.append(f"{t} through {name}: {got} (owner {o})")
    checks.check(not wrong, "every ingest node answers for every table with the same owner (forwarded)", "\n".join(wrong))

    # 2. Load; the owner of t0 is killed halfway.
    victim = owners["t0"]
    survivor = next(nm for nm in nodes if nm != victim)
    pid = int((dev_dir / "pids" / f"{victim}.pid").read_text().strip())
    acked = {t: 0 for t in owners}
    stalled = 0.0
    forwarded = 0
    killed_at = None
    load_ok = True
    for rnd in range(ROUNDS):
        if rnd == ROUNDS // 2:
            if not checks.check(ours(pid, dev_dir), f"{victim} (pid {pid}) is a process of this dev cluster"):
                load_ok = False
                break
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            print(f"        killed {victim} (pid {pid}) after {rnd} rounds; {survivor} takes every write", flush=True)
        body = batch(rnd)
        for ti, t in enumerate(owners):
            # Before the kill, alternate the entry node (half the writes are forwarded).
            entry = list(nodes)[(rnd + ti) % 2] if killed_at is None else survivor
            if entry != owners[t] and killed_at is None:
                forwarded += 1
            started = time.monotonic()
            last = ""
            while True:
                try:
                    st, text = request(nodes[entry], "POST", f"/v1/tables/{t}/rows", body, "application/x-ndjson")
                except Unreachable as e:
                    st, text = None, str(e)
                if st == 200:
                    break
                if st not in (None, 503):
                    checks.fail(f"{t} round {rnd} through {entry}", f"{st} {text}")
                    load_ok = False
                    break
                last = f"{st} {text}"
                if time.monotonic() - started > WRITE_DEADLINE_S:
                    checks.fail(f"{t} round {rnd}: a node takes the write within {WRITE_DEADLINE_S:.0f} s", last)
                    load_ok = False
                    break
                entry = survivor
                time.sleep(0.2)
            if not load_ok:
                break
            stalled = max(stalled, time.monotonic() - started)
            acked[t] = (rnd + 1) * ROWS_PER_BATCH
        if not load_ok:
            break
    if load_ok:
        checks.ok(
            f"{ROUNDS} rounds x {len(owners)} tables x {ROWS_PER_BATCH} rows acknowledged "
            f"({forwarded} batches forwarded before the kill); longest write stall {stalled:.1f} s "
            f"(lease 3 s), load done {time.monotonic() - killed_at:.1f} s after the kill"
        )

    # 3. The dev cluster script sees the killed node.
    processes = len(list((dev_dir / "pids").glob("*.pid")))
    p = subprocess.run(["bash", dev_cluster, "status"], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in p.stdout.splitlines() if ln.endswith((": exited",)) or ": running (pid" in ln]
    exited = [ln.split(":")[0] for ln in lines if ln.endswith(": exited")]
    checks.check(
        exited == [victim] and len(lines) == processes,
        f"dev-cluster.sh status: {victim} exited, the {len(lines) - len(exited)} other processes running",
        p.stdout + p.stderr,
    )

    # 4. The survivor owns every table now; the victim's changed hands.
    moved = []
    for t, o in owners.items():
        got = owner(nodes[survivor], t)
        if not got or got[0] != survivor or (o == victim and (got[1] or 0) < 2):
            moved.append(f"{t}: {got} (was {o})")
    checks.check(
        not moved,
        f"{survivor} owns every table; {victim}'s {sum(o == victim for o in owners.values())} moved (lease generation >= 2)",
        "\n".join(moved),
    )

    # 5. Every acknowledged row, through the query service reading the bucket.
    for t in owners:
        want_n = acked[t]
        want_s = sum(i * 3 for i in range(want_n))
        want = (want_n, want_s if want_n else None)
        deadline = time.monotonic() + 20
        got = None
        while True:
            try:
                st, text = request(query, "POST", "/sql", json.dumps({"sql": f"SELECT count(*) AS n, sum(v) AS s FROM {t}"}).encode())
            except Unreachable as e:
                st, text = None, str(e)
            if st == 200:
                rows = json.loads(text)
                rows = rows if isinstance(rows, list) else rows.get("rows", [])
                got = (rows[0].get("n"), rows[0].get("s")) if rows else None
                if got == want:
                    break
            else:
                got = f"{st} {text}"
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        checks.check(
            got == want,
            f"query service: {t} has every acknowledged row (n={want_n}, sum(v)={want_s})",
            f"got {got}",
        )

    print(f"driver: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
