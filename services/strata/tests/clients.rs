//! Real SQL clients against `strata serve`, as users connect: the ADBC Flight SQL driver
//! from Python (DB-API) and the Arrow Flight SQL JDBC driver from Java (which prepares every
//! statement). The clients come from `ci/clients.sh` (pinned), whose variables the test
//! command exports; without them (a plain `cargo test`) a test says so and passes, unless
//! `STRATA_REQUIRE_CLIENTS=1` (the test command) asks for the clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output};

/// The client named by `var`, when installed.
fn client(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
                "{var} is not set: run `eval \"$(bash ci/clients.sh)\"`"
            );
            eprintln!("skipped: {var} not set (`bash ci/clients.sh` installs the clients)");
            None
        }
    }
}

fn check(out: Output, what: &str, ok: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(ok),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn adbc_flight_sql_driver_from_python() {
    let Some(python) = client("STRATA_CLIENT_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_keys(dir.path());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/adbc_flight_sql.py"
    );
    let out = Command::new(&python)
        .arg(script)
        .args([server.flight.as_str(), ROOT.0, SALES_READER.0])
        .output()
        .expect("run the ADBC client");
    check(out, "the ADBC client", "adbc flight sql: ok");
    // ADBC prepares each statement it sends; its repeated query shapes were answered from
    // kept plans (the literal ranges and the bound ones).
    let bearer = format!("Authorization: Bearer {}", ROOT.0);
    let (status, text) = common::request_with(
        &server.http,
        "GET",
        "/metrics",
        "text/plain",
        b"",
        &[bearer],
    );
    assert_eq!(status, 200, "{text}");
    let kept = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"strata_sql_plans_total{plan="kept"} "#))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(kept >= 5, "kept plans: {kept}\n{text}");
}

#[test]
fn flight_sql_jdbc_driver() {
    let Some(jar) = client("STRATA_CLIENT_FLIGHT_JDBC") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_keys(dir.path());
    let (host, port) = server.flight.rsplit_once(':').unwrap();
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/FlightSqlJdbc.java"
    );
    // Java 17 runs a one-file program from source; Arrow's memory needs java.nio opened.
    let out = Command::new("java")
        .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
        .arg("-cp")
        .arg(&jar)
        .arg(source)
        .args([host, port, ROOT.0, SALES_READER.0])
        .output()
        .expect("run java");
    check(out, "the Flight SQL JDBC client", "flight sql jdbc: ok");
}

/// Keys and their SHA-256 for the PostgreSQL clients: every namespace, and read on `sales`.
const ROOT: (&str, &str) = (
    "root-key-1",
    "5930cf09a36d786f238068cb18b73fce7d57a52ab1b419ea046b29231d3682da",
);
const SALES_READER: (&str, &str) = (
    "sales-reader-key",
    "563e1e9b1b732c74853c6e3b1e04977075fd1c328e7a6df30a24c1d4b2bae194",
);

/// `strata serve` with API keys ([`ROOT`], [`SALES_READER`]).
fn start_with_keys(dir: &std::path::Path) -> common::Server {
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        format!(
            "[[keys]]\nname = \"root\"\nsha256 = \"{}\"\nnamespace = \"*\"\nscope = \"admin\"\n\n\
             [[keys]]\nname = \"sales-reader\"\nsha256 = \"{}\"\nnamespace = \"sales\"\nscope = \"read\"\n",
            ROOT.1, SALES_READER.1
        ),
    )
    .unwrap();
    common::start_with(
        dir.join("data").as_path(),
        &["--auth-keys", keys.to_str().unwrap()],
    )
}

/// Runs the Python client `script` (under `tests/clients/`) against the PostgreSQL port
/// of a `strata serve` with API keys, with host, port, the root key and the sales reader's
/// key as arguments, and checks it printed `ok`.
fn python_over_postgres(script: &str, what: &str, ok: &str) {
    let Some(python) = client("STRATA_CLIENT_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_keys(dir.path());
    let (host, port) = server.postgres.rsplit_once(':').unwrap();
    let script = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&python)
        .arg(script)
        .args([host, port, ROOT.0, SALES_READER.0])
        .output()
        .unwrap_or_else(|e| panic!("run the {what}: {e}"));
    check(out, &format!("the {what}"), ok);
}

#[test]
fn psycopg_over_the_postgres_protocol() {
    python_over_postgres("psycopg_postgres.py", "psycopg client", "psycopg: ok");
}

#[test]
fn sqlalchemy_and_pandas_over_the_postgres_protocol() {
    python_over_postgres(
        "sqlalchemy_postgres.py",
        "SQLAlchemy client",
        "sqlalchemy: ok",
    );
}

/// A connection cap and cancel requests, as psycopg meets them (`query.postgres_connections_max`
/// set low, no API keys).
#[test]
fn psycopg_meets_the_connection_cap_and_cancels_a_statement() {
    let Some(python) = client("STRATA_CLIENT_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(&config, "[query]\npostgres_connections_max = 3\n").unwrap();
    let server = common::start_with(
        dir.path().join("data").as_path(),
        &["--config", config.to_str().unwrap()],
    );
    let (host, port) = server.postgres.rsplit_once(':').unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/psycopg_operations.py"
    );
    let out = Command::new(&python)
        .arg(script)
        .args([host, port, "3"])
        .output()
        .expect("run the psycopg client");
    check(out, "the psycopg client", "psycopg operations: ok");
}

#[test]
fn postgres_jdbc_driver() {
    let Some(jar) = client("STRATA_CLIENT_PG_JDBC") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_keys(dir.path());
    let (host, port) = server.postgres.rsplit_once(':').unwrap();
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/PostgresJdbc.java"
    );
    let out = Command::new("java")
        .arg("-cp")
        .arg(&jar)
        .arg(source)
        .args([host, port, ROOT.0, SALES_READER.0])
        .output()
        .expect("run java");
    check(out, "the PostgreSQL JDBC client", "postgres jdbc: ok");
}

/// `psql` (Debian's client) with `PGPASSWORD` = `key`: its exit status, stdout and stderr.
fn psql(
    server: &common::Server,
    psql: &str,
    key: &str,
    commands: &[&str],
) -> (bool, String, String) {
    let (host, port) = server.postgres.rsplit_once(':').unwrap();
    let mut c = Command::new(psql);
    c.args([
        "-X", "-h", host, "-p", port, "-U", "analyst", "-d", "strata",
    ]);
    for command in commands {
        c.args(["-c", command]);
    }
    let out = c
        .env("PGPASSWORD", key)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn psql_lists_describes_queries_and_reports_errors() {
    let Some(bin) = client("STRATA_CLIENT_PSQL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_keys(dir.path());
    let (ok, out, err) = psql(
        &server,
        &bin,
        ROOT.0,
        &[
            "CREATE TABLE sales.orders (id BIGINT, item VARCHAR, price DOUBLE, PRIMARY KEY (id))",
            "CREATE TABLE hr.people (id BIGINT, name VARCHAR, PRIMARY KEY (id))",
            "INSERT INTO sales.orders VALUES (1, 'apple', 9.5), (2, 'pear', 0.25)",
            "SELECT item FROM sales.orders WHERE id = 2",
        ],
    );
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("CREATE TABLE") && out.contains("INSERT 0 2"),
        "{out}"
    );
    assert!(out.contains(" pear\n(1 row)"), "{out}");

    // \dt lists every namespace's tables; \d describes one, key column not null.
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\dt *.*"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("sales  | orders | table") && out.contains("hr     | people | table"),
        "{out}"
    );
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\d sales.orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("Table \"sales.orders\""), "{out}");
    assert!(
        out.contains("id     | bigint           |           | not null |"),
        "{out}"
    );
    assert!(out.contains("price  | double precision |"), "{out}");
    // The `+` forms, the database and role lists.
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\d+ sales.orders"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("id     | bigint           |           | not null |         | plain"),
        "{out}"
    );
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\dt+ sales.*"]);
    assert!(ok, "{err}");
    assert!(out.contains(" sales  | orders | table |"), "{out}");
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\l", "\\dn", "\\du"]);
    assert!(ok, "{err}");
    assert!(out.contains(" strata "), "{out}");
    assert!(out.contains("List of roles"), "{out}");
    // Functions (none of Strata's own) and namespaces with their access lists (none).
    let (ok, out, err) = psql(&server, &bin, ROOT.0, &["\\df", "\\dn+"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("List of functions") && out.contains("(0 rows)"),
        "{out}"
    );
    assert!(
        out.contains("Access privileges") && out.contains(" sales "),
        "{out}"
    );

    // The sales reader sees only sales.
    let (ok, out, err) = psql(&server, &bin, SALES_READER.0, &["\\dt *.*"]);
    assert!(ok, "{err}");
    assert!(out.contains("orders") && !out.contains("people"), "{out}");

    // Errors: psql exits non-zero and prints the message with its code.
    let (ok, _, err) = psql(&server, &bin, ROOT.0, &["SELECT * FROM sales.nope"]);
    assert!(!ok);
    assert!(err.contains("ERROR:  not_found: table"), "{err}");
    let (ok, _, err) = psql(&server, &bin, SALES_READER.0, &["DELETE FROM sales.orders"]);
    assert!(!ok);
    assert!(err.contains("ERROR:  forbidden:"), "{err}");
    let (ok, _, err) = psql(&server, &bin, "wrong", &["SELECT 1"]);
    assert!(!ok);
    assert!(err.contains("password must be a Strata API key"), "{err}");
}
