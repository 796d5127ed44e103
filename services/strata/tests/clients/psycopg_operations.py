"""psycopg 3 against a `strata serve` PostgreSQL port whose connection cap is CAP: the
connection past the cap is refused with SQLSTATE 53300 and a freed slot is taken again;
a running statement is cancelled (a CancelRequest, as psql's Ctrl-C sends) with 57014
and the connection goes on working.

Usage: psycopg_operations.py HOST PORT CAP
Prints "psycopg operations: ok" when every check passed.
"""

import sys
import threading
import time

import psycopg

host, port, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def connect(**kw):
    return psycopg.connect(host=host, port=port, user="u", dbname="strata", connect_timeout=10, **kw)


# The cap: CAP connections open, the next refused, one closed, the next let in.
held = [connect(autocommit=True) for _ in range(cap)]
try:
    connect()
    raise AssertionError(f"connection {cap + 1} was let in past the cap")
except psycopg.OperationalError as e:
    # libpq reports a refused connection by its message (no SQLSTATE on the exception).
    assert "too many clients already" in str(e), e
    assert "query.postgres_connections_max" in str(e), e
held.pop().close()


def connect_when_freed(deadline_s=10.0):
    # The server gives a slot back when it sees the connection end, which comes a moment
    # after close() returns here (PostgreSQL's backends exit the same way), so the freed
    # slot is awaited, within a bound, rather than assumed at once.
    end = time.monotonic() + deadline_s
    while True:
        try:
            return connect(autocommit=True)
        except psycopg.OperationalError as e:
            if "too many clients already" not in str(e) or time.monotonic() > end:
                raise
            time.sleep(0.05)


spare = connect_when_freed()
assert spare.execute("SELECT 1").fetchone() == (1,)
spare.close()
for c in held:
    c.close()

# Cancel: a statement that would run for minutes (a cross join of 40^6 rows), cancelled
# from another thread after it started, fails with 57014 at once; the connection stays.
with connect_when_freed() as conn:
    conn.execute("CREATE TABLE ops.t (id BIGINT, PRIMARY KEY (id))")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO ops.t VALUES (%s)", [(i,) for i in range(40)])
    outcome = {}

    def long_query():
        t0 = time.monotonic()
        try:
            conn.execute(
                "SELECT count(*) FROM ops.t a, ops.t b, ops.t c, ops.t d, ops.t e, ops.t f"
            ).fetchone()
            outcome["error"] = None
        except psycopg.Error as e:
            outcome["error"] = e
        outcome["seconds"] = time.monotonic() - t0

    runner = threading.Thread(target=long_query)
    runner.start()
    time.sleep(1.0)
    conn.cancel_safe(timeout=10)
    runner.join(30)
    assert not runner.is_alive(), "the cancelled statement still runs after 30 s"
    error = outcome["error"]
    assert isinstance(error, psycopg.errors.QueryCanceled), repr(error)
    assert "canceling statement due to user request" in str(error), error
    assert outcome["seconds"] < 20, outcome
    # The same connection answers the next statement, and a cancel with nothing running
    # (after a statement has come and gone) cancels nothing, the next statement included.
    assert conn.execute("SELECT 1").fetchone() == (1,)
    conn.cancel_safe(timeout=10)
    assert conn.execute("SELECT count(*) FROM ops.t").fetchone() == (40,)

# One query string of several statements (the simple protocol, as psql -c sends it): each
# runs and answers before the next, so the first count is read before the insert.
with connect_when_freed() as conn:
    cur = conn.cursor()
    cur.execute("SELECT count(*) FROM ops.t; SELECT 7; INSERT INTO ops.t VALUES (100), (101)")
    assert cur.fetchone() == (40,)
    assert cur.nextset() and cur.fetchone() == (7,)
    assert cur.nextset() and cur.rowcount == 2, cur.rowcount
    assert not cur.nextset()
    assert conn.execute("SELECT count(*) FROM ops.t").fetchone() == (42,)
    # A change followed by statements that could fail is one transaction in PostgreSQL
    # (a failure undoes the change); Strata cannot undo it, so the whole string is
    # refused before any of it runs.
    for string in [
        "INSERT INTO ops.t VALUES (102); SELECT * FROM ops.missing; INSERT INTO ops.t VALUES (103)",
        "SELECT count(*) FROM ops.t; INSERT INTO ops.t VALUES (102); SELECT count(*) FROM ops.t",
    ]:
        try:
            cur.execute(string)
            raise AssertionError(f"{string}: answered")
        except psycopg.errors.FeatureNotSupported as e:
            assert "one at a time" in str(e), e
    assert conn.execute("SELECT count(*) FROM ops.t").fetchone() == (42,)
    # An error stops a string there: what follows does not run.
    try:
        cur.execute("SELECT * FROM ops.missing; INSERT INTO ops.t VALUES (103)")
        raise AssertionError("a missing table answered")
    except psycopg.errors.UndefinedTable:
        pass
    assert conn.execute("SELECT count(*) FROM ops.t").fetchone() == (42,)

print("psycopg operations: ok")
