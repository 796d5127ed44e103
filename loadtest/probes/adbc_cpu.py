"""One ADBC connection, DB-API execute+fetchall as loadtest/htap.sh does; prints client and server CPU per query.
usage: adbc_cpu.py SERVER_PID KIND N   (KIND: q4 | q2a | q2b | q3 | select1)"""
import sys, time, random, resource, statistics
import adbc_driver_flightsql.dbapi as flight_sql
from rawhttp import cpu_seconds
pid, kind, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def scpu():
    return cpu_seconds(pid)
def ccpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
N = 1_000_000; rng = random.Random(1)
def sql():
    if kind == "q4":
        lo = rng.randrange(N - N // 20); return f"SELECT SUM({' + '.join(f'a{c}' for c in range(21, 31))}) FROM laser WHERE a0 >= {lo} AND a0 < {lo + N // 20}"
    if kind == "q3": return f"SELECT MAX(a28), MAX(a29), MAX(a30) FROM laser WHERE a0 < {N // 2}"
    if kind == "q2a": return f"SELECT * FROM laser WHERE a0 = {rng.randrange(3000)}"
    if kind == "q2b": return f"SELECT {', '.join(f'a{c}' for c in range(16, 31))} FROM laser WHERE a0 = {rng.randrange(3000)}"
    return "SELECT 1"
conn = flight_sql.connect("grpc://127.0.0.1:8081", autocommit=True); cur = conn.cursor()
for _ in range(50): cur.execute(sql()); cur.fetchall()
lat = []; s0, c0 = scpu(), ccpu()
for _ in range(n):
    q = sql(); t0 = time.perf_counter(); cur.execute(q); cur.fetchall(); lat.append((time.perf_counter() - t0) * 1e3)
s1, c1 = scpu(), ccpu()
print(f"{kind}: p50 {statistics.median(lat):.2f} ms, server CPU {(s1-s0)/n*1e3:.2f} ms/q, client CPU {(c1-c0)/n*1e3:.2f} ms/q")
cur.close(); conn.close()
