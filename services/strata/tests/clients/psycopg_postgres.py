"""psycopg 3 against `strata serve`'s PostgreSQL port, as a Python user connects:
parameters bound by the server, every column type Strata tables use, row counts, errors
with their SQLSTATE classes, transactions, pandas, and API keys scoping what a connection
sees (tables, information_schema, pg_catalog).

Usage: psycopg_postgres.py HOST PORT ROOT_KEY SALES_READER_KEY
Prints "psycopg: ok" when every check passed.
"""

import datetime
import decimal
import sys
import warnings

import pandas
import psycopg

host, port, root, sales_reader = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


def connect(key, **kw):
    # The user name is not checked; the password is the API key.
    return psycopg.connect(
        host=host, port=port, user="analyst", password=key, dbname="strata", connect_timeout=10, **kw
    )


def fails(expected, cur, sql, params=None):
    try:
        cur.execute(sql, params)
    except expected as e:
        return str(e)
    raise AssertionError(f"{sql}: expected {expected.__name__}")


rows = [
    (1, 3, 9.5, "apple", True, datetime.date(2026, 1, 2), datetime.datetime(2026, 1, 2, 3, 4, 5, 678000)),
    (2, -7, 0.25, "pear", False, datetime.date(1999, 12, 31), datetime.datetime(1999, 12, 31, 23, 59, 59)),
    (3, 0, -1e300, "fig é ✓", None, None, None),
]

with connect(root, autocommit=True) as conn:
    cur = conn.cursor()
    cur.execute(
        "CREATE TABLE sales.orders (id BIGINT, qty INT, price DOUBLE, item VARCHAR, "
        "paid BOOLEAN, day DATE, at TIMESTAMP, PRIMARY KEY (id))"
    )
    cur.execute("CREATE TABLE hr.people (id BIGINT, name VARCHAR, PRIMARY KEY (id))")
    cur.executemany("INSERT INTO sales.orders VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)
    cur.execute("INSERT INTO hr.people VALUES (%s, %s), (%s, %s)", (1, "ada", 2, "grace"))
    assert cur.rowcount == 2, cur.rowcount

    # Every type comes back as it went in, through bound parameters of each type.
    cur.execute("SELECT * FROM sales.orders ORDER BY id")
    got = cur.fetchall()
    assert got == rows, got
    assert [d.name for d in cur.description] == ["id", "qty", "price", "item", "paid", "day", "at"]
    cur.execute(
        "SELECT id FROM sales.orders WHERE item = %s AND price > %s AND day = %s",
        ("apple", 1.0, datetime.date(2026, 1, 2)),
    )
    assert cur.fetchall() == [(1,)]
    # Decimals (sent as numeric) compare with a DOUBLE column, fractions kept.
    cur.execute("SELECT id FROM sales.orders WHERE price > %s ORDER BY id", (decimal.Decimal("0.05"),))
    assert cur.fetchall() == [(1,), (2,)]
    # A parameter the server knows no type for (`%s::BIGINT`) takes the client's.
    cur.execute("SELECT %s::BIGINT + 1, %s::TIMESTAMP", (41, datetime.datetime(2026, 1, 2, 3, 4, 5)))
    assert cur.fetchone() == (42, datetime.datetime(2026, 1, 2, 3, 4, 5))
    # Binary results too.
    bcur = conn.cursor(binary=True)
    bcur.execute("SELECT id, qty, price, item, paid FROM sales.orders WHERE id = %s", (2,))
    assert bcur.fetchone() == (2, -7, 0.25, "pear", False)

    cur.execute("UPDATE sales.orders SET qty = %s WHERE id = %s", (5, 1))
    assert cur.rowcount == 1, cur.rowcount
    cur.execute("DELETE FROM sales.orders WHERE id = %s", (99,))
    assert cur.rowcount == 0, cur.rowcount

    # Errors carry PostgreSQL's SQLSTATE codes (psycopg maps them to classes).
    fails(psycopg.errors.UndefinedTable, cur, "SELECT * FROM sales.nope")
    fails(psycopg.errors.DuplicateTable, cur, "CREATE TABLE hr.people (id BIGINT, PRIMARY KEY (id))")
    fails(psycopg.errors.SyntaxError, cur, "SELEC 1")
    fails(psycopg.errors.UndefinedColumn, cur, "SELECT nope FROM sales.orders")
    # The connection is usable after errors.
    assert conn.execute("SELECT count(*) FROM sales.orders").fetchone() == (3,)
    # Session settings drivers and tools send.
    conn.execute("SET application_name = 'strata-test'")
    assert conn.execute("SHOW application_name").fetchone() == ("strata-test",)
    # current_setting reads what the connection set, else the server's value.
    got = conn.execute("SELECT current_setting('application_name'), current_setting('server_version_num')").fetchone()
    assert got == ("strata-test", "160006"), got
    assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
    assert conn.info.server_version >= 160000, conn.info.server_version
    # What drivers and ORMs read the server's version and settings from.
    (version,) = conn.execute("SELECT pg_catalog.version()").fetchone()
    assert version.startswith("PostgreSQL 16.6 (Strata "), version
    settings = conn.execute(
        "SELECT current_setting('server_version_num'), current_setting('standard_conforming_strings')"
    ).fetchone()
    assert settings == ("160006", "on"), settings
    fails(psycopg.errors.UndefinedObject, cur, "SELECT current_setting('no_such_setting')")
    assert conn.execute("SELECT current_setting('no_such_setting', true)").fetchone() == (None,)

    # Scalar subqueries answer as in PostgreSQL: one value per outer row (correlated too),
    # NULL for no row, and an error for more than one, never a silent NULL or first row.
    cur.execute(
        "SELECT p.id, (SELECT max(o.qty) FROM sales.orders o WHERE o.id = p.id) AS top, "
        "(SELECT o.item FROM sales.orders o WHERE o.id = p.id + 1) AS next FROM hr.people p ORDER BY p.id"
    )
    assert cur.fetchall() == [(1, 5, "pear"), (2, -7, "fig é ✓")], cur
    cur.execute("SELECT (SELECT item FROM sales.orders WHERE id = %s)", (99,))
    assert cur.fetchone() == (None,)
    fails(psycopg.errors.CardinalityViolation, cur, "SELECT (SELECT item FROM sales.orders)")
    (built,) = conn.execute("SELECT json_build_object('id', 1, 'item', 'a\"b', 'none', NULL)").fetchone()
    # As text (Strata has no json type): the text PostgreSQL writes.
    assert built == '{"id" : 1, "item" : "a\\"b", "none" : null}', built

    # A query string with a change followed by more statements (one transaction in
    # PostgreSQL) is refused before any of it runs; one whose change comes last runs.
    # Without parameters psycopg sends the string as one simple query.
    message = fails(
        psycopg.errors.FeatureNotSupported,
        cur,
        "INSERT INTO hr.people VALUES (7, 'x'); INSERT INTO hr.people VALUES (8, 'y')",
    )
    assert "one at a time" in message, message
    assert conn.execute("SELECT count(*) FROM hr.people").fetchone() == (2,)
    cur.execute("SELECT 1; INSERT INTO hr.people VALUES (7, 'x')")
    assert cur.rowcount == 1, cur.rowcount
    cur.execute("DELETE FROM hr.people WHERE id = 7")
    assert cur.rowcount == 1, cur.rowcount

    # pandas over the connection.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas prefers SQLAlchemy; a DB-API connection works
        frame = pandas.read_sql("SELECT id, qty FROM sales.orders ORDER BY id", conn)
    assert list(frame["id"]) == [1, 2, 3], frame

# Without autocommit psycopg opens a transaction: reads run (each at its own snapshot, as
# READ COMMITTED), a write is refused clearly, and ROLLBACK ends the block.
with connect(root) as conn:
    cur = conn.cursor()
    cur.execute("SELECT count(*) FROM sales.orders")
    assert cur.fetchone() == (3,)
    message = fails(psycopg.errors.FeatureNotSupported, cur, "INSERT INTO hr.people VALUES (%s, %s)", (3, "x"))
    assert "autocommit" in message, message
    conn.rollback()
    # EXPLAIN ANALYZE runs its statement: refused the same way, and nothing is written.
    fails(psycopg.errors.FeatureNotSupported, cur, "EXPLAIN ANALYZE INSERT INTO hr.people VALUES (4, 'y')")
    conn.rollback()
    cur.execute("SELECT count(*) FROM hr.people")
    assert cur.fetchone() == (2,)
    conn.commit()
    # Nested blocks (savepoints): an error inside one is rolled back to it and the outer
    # block goes on; a savepoint that was never set is an error of its own.
    with conn.transaction():
        try:
            with conn.transaction():
                conn.execute("SELECT * FROM sales.nope")
        except psycopg.errors.UndefinedTable:
            pass
        assert conn.execute("SELECT count(*) FROM hr.people").fetchone() == (2,)
    cur.execute("SAVEPOINT a")
    fails(psycopg.errors.InvalidSavepointSpecification, cur, "ROLLBACK TO SAVEPOINT b")
    cur.execute("ROLLBACK TO SAVEPOINT a")
    cur.execute("RELEASE SAVEPOINT a")
    fails(psycopg.errors.InvalidSavepointSpecification, cur, "RELEASE SAVEPOINT a")
    conn.rollback()

# Grafana's PostgreSQL data source: the query builder's table list (tables outside the
# search path come back qualified) and column list, as Grafana sends them.
GRAFANA_TABLES = """SELECT
        CASE WHEN
              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              )
          THEN quote_ident(table_name)
          ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
        END AS "table"
        FROM information_schema.tables
        WHERE quote_ident(table_schema) NOT IN ('information_schema',
                                 'pg_catalog',
                                 '_timescaledb_cache',
                                 '_timescaledb_catalog',
                                 '_timescaledb_internal',
                                 '_timescaledb_config',
                                 'timescaledb_information',
                                 'timescaledb_experimental')
        ORDER BY CASE WHEN
              quote_ident(table_schema) IN (
              SELECT
                CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
              FROM
                generate_series(
                  array_lower(string_to_array(current_setting('search_path'),','),1),
                  array_upper(string_to_array(current_setting('search_path'),','),1)
                ) as i,
                string_to_array(current_setting('search_path'),',') s
              ) THEN 0 ELSE 1 END, 1"""
GRAFANA_COLUMNS = (
    'SELECT quote_ident(column_name) AS "column", data_type AS "type" FROM information_schema.columns '
    "WHERE quote_ident(table_schema) = 'sales' AND quote_ident(table_name) = 'orders'"
)
with connect(root, autocommit=True) as conn:
    tables = [r[0] for r in conn.execute(GRAFANA_TABLES).fetchall()]
    assert tables == ["hr.people", "sales.orders"], tables
    # Grafana picks time and numeric columns by their PostgreSQL type names.
    columns = conn.execute(GRAFANA_COLUMNS).fetchall()
    assert columns == [
        ("id", "bigint"),
        ("qty", "integer"),
        ("price", "double precision"),
        ("item", "text"),
        ("paid", "boolean"),
        ("day", "date"),
        ("at", "timestamp without time zone"),
    ], columns
    positions = conn.execute(
        "SELECT column_name, ordinal_position, udt_name, is_nullable FROM information_schema.columns "
        "WHERE table_schema = 'hr' AND table_name = 'people' ORDER BY ordinal_position"
    ).fetchall()
    assert positions == [("id", 1, "int8", "NO"), ("name", 2, "text", "YES")], positions
    keys = conn.execute(
        "SELECT k.table_schema, k.table_name, k.column_name, k.ordinal_position, c.constraint_type "
        "FROM information_schema.key_column_usage k JOIN information_schema.table_constraints c "
        "ON c.constraint_name = k.constraint_name AND c.table_schema = k.table_schema "
        "ORDER BY 1, 2, 4"
    ).fetchall()
    assert keys == [
        ("hr", "people", "id", 1, "PRIMARY KEY"),
        ("sales", "orders", "id", 1, "PRIMARY KEY"),
    ], keys
with connect(sales_reader, autocommit=True) as conn:
    tables = [r[0] for r in conn.execute(GRAFANA_TABLES).fetchall()]
    assert tables == ["sales.orders"], tables

# A key for one namespace sees and reads only that namespace, in tables and catalogs.
with connect(sales_reader, autocommit=True) as conn:
    tables = conn.execute(
        "SELECT table_schema, table_name FROM information_schema.tables "
        "WHERE table_schema NOT IN ('information_schema', 'pg_catalog') ORDER BY 1, 2"
    ).fetchall()
    assert tables == [("sales", "orders")], tables
    classes = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
    ).fetchall()
    assert classes == [("sales", "orders")], classes
    cur = conn.cursor()
    fails(psycopg.errors.UndefinedTable, cur, "SELECT * FROM hr.people")
    assert conn.execute("SELECT table_name FROM information_schema.key_column_usage").fetchall() == [("orders",)]
    keys = conn.execute("SELECT conname, contype, conkey FROM pg_catalog.pg_constraint").fetchall()
    assert keys == [("orders_pkey", "p", [1])], keys
    fails(psycopg.errors.InsufficientPrivilege, cur, "DELETE FROM sales.orders WHERE id = %s", (1,))
    assert conn.execute("SELECT count(*) FROM sales.orders").fetchone() == (3,)

# A wrong key does not connect.
try:
    connect("not-a-key")
    raise AssertionError("a wrong key connected")
except psycopg.OperationalError as e:
    assert "API key" in str(e), e

print("psycopg: ok")
