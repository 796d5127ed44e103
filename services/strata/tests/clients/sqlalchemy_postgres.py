"""SQLAlchemy 2 (psycopg 3 dialect) and pandas over it, against `strata serve`'s PostgreSQL
port, as a Python analyst connects: the dialect's start (it reads `version()`, looks types
up with `to_regtype` inside a savepoint), schema and table listing, `has_table`, table
reflection (columns, primary keys, indexes, foreign keys, `MetaData.reflect`), bound
parameters, `pandas.read_sql` and `read_sql_table` on an engine, and `DataFrame.to_sql`
appending rows.

Usage: sqlalchemy_postgres.py HOST PORT ROOT_KEY SALES_READER_KEY
Prints "sqlalchemy: ok" when every check passed.
"""

import datetime
import sys

import pandas
import sqlalchemy as sa

host, port, root, sales_reader = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def engine(key):
    # Each statement is its own transaction in Strata: changes need autocommit.
    return sa.create_engine(
        f"postgresql+psycopg://analyst:{key}@{host}:{port}/strata", isolation_level="AUTOCOMMIT"
    )


root_engine = engine(root)
with root_engine.connect() as conn:
    conn.execute(sa.text("CREATE TABLE sales.ticks (id BIGINT, price DOUBLE, at TIMESTAMP, PRIMARY KEY (id))"))
    conn.execute(sa.text("CREATE TABLE hr.people (id BIGINT, name VARCHAR, PRIMARY KEY (id))"))
    inserted = conn.execute(
        sa.text("INSERT INTO sales.ticks VALUES (:id, :price, :at)"),
        [
            {"id": 1, "price": 9.5, "at": datetime.datetime(2026, 1, 2, 3, 4, 5)},
            {"id": 2, "price": 0.25, "at": None},
        ],
    )
    assert inserted.rowcount in (-1, 2), inserted.rowcount
    # Bound parameters of each kind SQLAlchemy sends.
    got = conn.execute(sa.text("SELECT id FROM sales.ticks WHERE price > :p ORDER BY id"), {"p": 0.5}).all()
    assert got == [(1,)], got
    # The server's version as the dialect read it.
    assert root_engine.dialect.server_version_info[:2] == (16, 6), root_engine.dialect.server_version_info

inspector = sa.inspect(root_engine)
assert inspector.get_schema_names() == ["hr", "public", "sales"], inspector.get_schema_names()
assert inspector.get_table_names(schema="sales") == ["ticks"], inspector.get_table_names(schema="sales")
assert inspector.has_table("ticks", schema="sales")
assert not inspector.has_table("nope", schema="sales")

# Reflection: what `Table(autoload_with=...)`, Alembic and pandas' read_sql_table read.
columns = inspector.get_columns("ticks", schema="sales")
assert [(c["name"], str(c["type"]), c["nullable"]) for c in columns] == [
    ("id", "BIGINT", False),
    ("price", "DOUBLE PRECISION", True),
    ("at", "TIMESTAMP", True),
], columns
assert inspector.get_pk_constraint("ticks", schema="sales") == {
    "constrained_columns": ["id"],
    "name": "ticks_pkey",
    "comment": None,
    "dialect_options": {"postgresql_include": []},
}, inspector.get_pk_constraint("ticks", schema="sales")
assert inspector.get_indexes("ticks", schema="sales") == []
assert inspector.get_foreign_keys("ticks", schema="sales") == []
assert inspector.get_unique_constraints("ticks", schema="sales") == []
assert inspector.get_check_constraints("ticks", schema="sales") == []
with root_engine.connect() as conn:
    conn.execute(sa.text("CREATE TABLE sales.lines (region VARCHAR, day DATE, n INT, PRIMARY KEY (region, day))"))
metadata = sa.MetaData()
metadata.reflect(root_engine, schema="sales")
keys = {t.name: [c.name for c in t.primary_key] for t in metadata.sorted_tables}
assert keys == {"lines": ["region", "day"], "ticks": ["id"]}, keys
assert isinstance(metadata.tables["sales.lines"].c.day.type, sa.Date)

# pandas on an engine: read a query, append a frame (pandas' INSERT casts each value).
frame = pandas.DataFrame(
    {
        "id": [10, 11],
        "price": [1.0, 2.0],
        "at": pandas.to_datetime(["2026-02-01 10:00:00", "2026-02-02 11:30:00"]),
    }
)
frame.to_sql("ticks", root_engine, schema="sales", if_exists="append", index=False)
read = pandas.read_sql("SELECT id, price, at FROM sales.ticks ORDER BY id", root_engine)
assert list(read["id"]) == [1, 2, 10, 11], read
assert list(read["price"]) == [9.5, 0.25, 1.0, 2.0], read
assert read["at"][2] == pandas.Timestamp("2026-02-01 10:00:00"), read
assert pandas.isna(read["at"][1]), read
table = pandas.read_sql_table("ticks", root_engine, schema="sales")
assert list(table.columns) == ["id", "price", "at"], table
assert sorted(table["id"]) == [1, 2, 10, 11], table

# A key for one namespace sees only that namespace, and cannot write.
reader = engine(sales_reader)
assert sa.inspect(reader).get_schema_names() == ["sales"], sa.inspect(reader).get_schema_names()
with reader.connect() as conn:
    assert conn.execute(sa.text("SELECT count(*) FROM sales.ticks")).scalar() == 4
    try:
        conn.execute(sa.text("DELETE FROM sales.ticks WHERE id = :id"), {"id": 1})
    except sa.exc.ProgrammingError as e:
        assert "InsufficientPrivilege" in type(e.orig).__name__, e
    else:
        raise AssertionError("a read key deleted a row")

print("sqlalchemy: ok")
