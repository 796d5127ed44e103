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
    let server = common::start(dir.path());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/adbc_flight_sql.py"
    );
    let out = Command::new(&python)
        .arg(script)
        .arg(&server.flight)
        .output()
        .expect("run the ADBC client");
    check(out, "the ADBC client", "adbc flight sql: ok");
}

#[test]
fn flight_sql_jdbc_driver() {
    let Some(jar) = client("STRATA_CLIENT_FLIGHT_JDBC") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path());
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
        .args([host, port])
        .output()
        .expect("run java");
    check(out, "the Flight SQL JDBC client", "flight sql jdbc: ok");
}
