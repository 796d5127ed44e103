//! Real SQL clients against `strata serve`: the ADBC Flight SQL driver from Python (DB-API),
//! as an analyst connects. The clients come from `ci/clients.sh` (pinned), which the test
//! command runs and points `STRATA_CLIENT_PYTHON` at; without it (a plain `cargo test`) the
//! test says so and passes, unless `STRATA_REQUIRE_CLIENTS=1` (the test command) asks for
//! the clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

fn python() -> Option<String> {
    match std::env::var("STRATA_CLIENT_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
                "STRATA_CLIENT_PYTHON is not set: run `bash ci/clients.sh` and export its output"
            );
            eprintln!(
                "skipped: STRATA_CLIENT_PYTHON not set (bash ci/clients.sh installs the clients)"
            );
            None
        }
    }
}

#[test]
fn adbc_flight_sql_driver_from_python() {
    let Some(python) = python() else { return };
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
    assert!(
        out.status.success(),
        "ADBC client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("adbc flight sql: ok"));
}
