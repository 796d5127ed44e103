"""Creates LASER's table on a running `strata serve` (HTTP 8080, Flight SQL 8081), loads
N rows over ADBC as loadtest/htap/bench.py does, and waits for the tree to settle.
usage: load_laser.py N   (run with the benchmark virtualenv: $STRATA_CACHE/bench-venv)"""
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "htap"))
sys.path.insert(0, os.path.join(here, ".."))
import bench  # noqa: E402

args = types.SimpleNamespace(flight="grpc://127.0.0.1:8081", http="http://127.0.0.1:8080",
                             strata_settle_s=120, strata_version="probe")
s = bench.Strata(args)
s.create()
s.load(int(sys.argv[1]), 8192)
print(s.after_load())
