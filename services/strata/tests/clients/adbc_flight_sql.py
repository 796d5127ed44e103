"""What a Python analyst does with Strata over the ADBC Flight SQL driver (DB-API).

Run by services/strata/tests/clients.rs against a fresh `strata serve` with API keys:
    python adbc_flight_sql.py <flight host:port> <key for every namespace> <read key for `sales`>
Exits non-zero, with the failed assertion, when Strata answers differently.
"""

import sys
import warnings

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa

warnings.simplefilter("ignore")  # "Cannot disable autocommit": Strata has no transactions

uri, root, sales_reader = f"grpc://{sys.argv[1]}", sys.argv[2], sys.argv[3]

# User and password (the password is the key): a handshake answered with a bearer token.
conn = flight_sql.connect(uri, db_kwargs={"username": "analyst", "password": root})
cur = conn.cursor()

# DDL and DML sent with execute and never fetched take effect, and report their counts.
cur.execute("CREATE TABLE people (id BIGINT, name VARCHAR, score DOUBLE, PRIMARY KEY (id))")
cur.execute("INSERT INTO people VALUES (1, 'ann', 1.5)")
assert cur.rowcount == 1, cur.rowcount

# Parameters: one row (a prepared statement bound by DoPut), then a batch of rows.
cur.execute("INSERT INTO people VALUES ($1, $2, $3)", parameters=(2, "bob", 2.5))
assert cur.rowcount == 1, cur.rowcount
cur.executemany(
    "INSERT INTO people VALUES ($1, $2, $3)", [(3, "cy", 3.5), (4, "dee", None)]
)
cur.execute("SELECT id, name, score FROM people WHERE id >= $1 ORDER BY id", parameters=(2,))
rows = cur.fetchall()
assert rows == [(2, "bob", 2.5), (3, "cy", 3.5), (4, "dee", None)], rows

# An update's effect and count.
cur.execute("UPDATE people SET score = score * 2 WHERE id <= $1", parameters=(2,))
assert cur.rowcount == 2, cur.rowcount
cur.execute("DELETE FROM people WHERE id = 99")
assert cur.rowcount == 0, cur.rowcount
cur.execute("SELECT sum(score) FROM people")
assert cur.fetchone() == (1.5 * 2 + 2.5 * 2 + 3.5,), "update applied more or less than once"

# Metadata: catalogs, schemas and tables (GetObjects), a table's schema, table types and
# the server's description (GetSqlInfo).
objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
assert [c["catalog_name"] for c in objects] == ["strata"], objects
schemas = {s["db_schema_name"]: s for s in objects[0]["catalog_db_schemas"]}
assert "public" in schemas, schemas
tables = [t["table_name"] for t in schemas["public"]["db_schema_tables"]]
assert tables == ["people"], tables
schema = conn.adbc_get_table_schema("people", db_schema_filter="public")
assert schema.names == ["id", "name", "score"], schema
assert conn.adbc_get_table_types() == ["TABLE"], conn.adbc_get_table_types()
info = conn.adbc_get_info()
assert info.get("vendor_name") == "Strata", info

# Bulk ingest (pyarrow): one Flight message of 50,000 rows, about 5.7 MB, over gRPC's
# usual 4 MiB limit on a received message, appends to the table in one call.
n = 50_000
bulk = pa.table(
    {
        "id": pa.array(range(1000, 1000 + n), pa.int64()),
        "name": pa.array([f"bulk-{i:08}-" + "x" * 87 for i in range(n)], pa.string()),
        "score": pa.array([i * 0.25 for i in range(n)], pa.float64()),
    }
)
assert bulk.nbytes > 4 * 1024 * 1024, bulk.nbytes
assert cur.adbc_ingest("people", bulk, mode="append") in (n, -1)
cur.execute("SELECT count(*), max(id) FROM people WHERE id >= 1000")
assert cur.fetchone() == (n, 1000 + n - 1)

# The same query with other values (its plan kept by its shape after the first), as
# literals and as a bound parameter: each run answers for its own values.
for lo in (1000, 20_000, 49_999, 1000 + n):
    cur.execute(f"SELECT count(*) FROM people WHERE id >= {lo} AND id < {lo + 100}")
    assert cur.fetchone() == (max(0, min(100, 1000 + n - lo)),), lo
for lo in (1000, 30_000, 1000 + n - 10):
    cur.execute("SELECT count(*) FROM people WHERE id >= $1 AND id < $2", parameters=(lo, lo + 50))
    assert cur.fetchone() == (max(0, min(50, 1000 + n - lo)),), lo

# Errors come back with the reason.
try:
    cur.execute("SELECT nope FROM people")
    cur.fetchall()
    raise AssertionError("a bad column was accepted")
except flight_sql.Error as e:
    assert "nope" in str(e), e

cur.close()
conn.close()

# A read key for one namespace (sent as a bearer token): it sees and reads only that
# namespace, in the catalog too, and cannot write.
with flight_sql.connect(uri, db_kwargs={"username": "analyst", "password": root}) as admin:
    with admin.cursor() as c:
        c.execute("CREATE TABLE sales.orders (id BIGINT, qty INT, PRIMARY KEY (id))")
        c.execute("INSERT INTO sales.orders VALUES (1, 5), (2, 7)")
        assert c.rowcount == 2, c.rowcount
reader = flight_sql.connect(
    uri, db_kwargs={"adbc.flight.sql.authorization_header": f"Bearer {sales_reader}"}
)
objects = reader.adbc_get_objects(depth="tables").read_all().to_pylist()
seen = {
    s["db_schema_name"]: [t["table_name"] for t in s["db_schema_tables"]]
    for s in objects[0]["catalog_db_schemas"]
}
assert seen == {"sales": ["orders"]}, seen
with reader.cursor() as c:
    c.execute("SELECT sum(qty) FROM sales.orders")
    assert c.fetchone() == (12,)
    for refused in ["SELECT * FROM people", "INSERT INTO sales.orders VALUES (3, 1)"]:
        try:
            c.execute(refused)
            c.fetchall()
            raise AssertionError(f"{refused}: answered for a read key of sales")
        except flight_sql.Error:
            pass
reader.close()
print("adbc flight sql: ok")
