//! TLS (rustls) on every listener of `strata serve` (HTTP, Flight SQL, PostgreSQL), reached with the CLI's clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{run, start_with};

fn strata(args: &[&str]) -> (bool, String, String) {
    run(args, &[])
}

#[test]
fn both_listeners_speak_tls_when_a_certificate_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, signing_key.serialize_pem()).unwrap();
    let (c, k) = (cert_path.to_str().unwrap(), key_path.to_str().unwrap());
    let server = start_with(
        &dir.path().join("data"),
        &[
            "--set",
            &format!("tls.cert={c}"),
            "--set",
            &format!("tls.key={k}"),
        ],
    );
    let port = |addr: &str| addr.rsplit(':').next().unwrap().to_string();
    let https = format!("https://localhost:{}", port(&server.http));
    let flight = format!("https://localhost:{}", port(&server.flight));

    // SQL over Flight SQL on TLS, checked against the CA.
    let (ok, out, err) = strata(&[
        "sql",
        "--flight",
        &flight,
        "--ca-cert",
        c,
        "--format",
        "csv",
        "CREATE TABLE t (id BIGINT, PRIMARY KEY (id))",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("created"), "{out}");
    let (ok, out, err) = strata(&[
        "sql",
        "--flight",
        &flight,
        "--ca-cert",
        c,
        "--format",
        "csv",
        "SELECT 41 + 1 AS answer",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "answer\n42\n");
    // PostgreSQL on TLS: psql checks the certificate against the CA and the host name;
    // a client that will not use TLS is refused.
    let psql = std::env::var("STRATA_CLIENT_PSQL");
    assert!(
        psql.is_ok() || std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
        "STRATA_CLIENT_PSQL is not set: run `eval \"$(bash ci/clients.sh)\"`"
    );
    if let Ok(psql) = psql {
        let port = port(&server.postgres);
        let run_psql = |mode: &str| {
            std::process::Command::new(&psql)
                .args([
                    "-X",
                    "-h",
                    "localhost",
                    "-p",
                    &port,
                    "-U",
                    "any",
                    "-d",
                    "strata",
                ])
                .args(["-c", "SELECT 41 + 1 AS answer"])
                .env("PGSSLMODE", mode)
                .env("PGSSLROOTCERT", c)
                .env("PGCONNECT_TIMEOUT", "10")
                .output()
                .expect("run psql")
        };
        let out = run_psql("verify-full");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("42"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !run_psql("disable").status.success(),
            "plain PostgreSQL was answered"
        );
    }
    // libpq 17 and later (psycopg's, here 18) also open TLS directly, without the
    // SSLRequest round trip (`sslnegotiation=direct`), which needs the server to select the
    // `postgresql` ALPN protocol.
    if let Ok(python) = std::env::var("STRATA_CLIENT_PYTHON") {
        let script = r#"
import sys, psycopg
host, port, ca = sys.argv[1], sys.argv[2], sys.argv[3]
for negotiation in ("postgres", "direct"):
    with psycopg.connect(host=host, port=port, user="any", dbname="strata", sslmode="verify-full",
                         sslrootcert=ca, sslnegotiation=negotiation, connect_timeout=10) as conn:
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,), negotiation
print("psycopg tls: ok")
"#;
        let out = std::process::Command::new(python)
            .args(["-c", script, "localhost", &port(&server.postgres), c])
            .output()
            .expect("run psycopg");
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("psycopg tls: ok"),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        assert!(
            std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
            "STRATA_CLIENT_PYTHON is not set: run `eval \"$(bash ci/clients.sh)\"`"
        );
    }

    // HTTP on TLS (the admin client).
    let (ok, out, err) = strata(&["admin", "--http", &https, "--ca-cert", c, "tables"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "t");

    // Without the CA, or in plain text, the clients fail; nothing answers in clear text.
    let (ok, _, err) = strata(&["admin", "--http", &https, "tables"]);
    assert!(!ok, "an unknown CA was accepted");
    assert!(err.contains("calling"), "{err}");
    let (ok, _, _) = strata(&["admin", "--http", &server.http, "tables"]);
    assert!(!ok, "plain HTTP was answered on the TLS port");
    let (ok, _, _) = strata(&["sql", "--flight", &server.flight, "SELECT 1"]);
    assert!(!ok, "plain gRPC was answered on the TLS port");

    // A key without a certificate, or a file that is no certificate, stops the start.
    let (ok, _, err) = strata(&[
        "serve",
        "--dir",
        dir.path().join("d2").to_str().unwrap(),
        "--set",
        &format!("tls.key={k}"),
    ]);
    assert!(!ok);
    assert!(err.contains("tls.cert and tls.key"), "{err}");
    let (ok, _, err) = strata(&[
        "serve",
        "--dir",
        dir.path().join("d3").to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--flight",
        "127.0.0.1:0",
        "--set",
        &format!("tls.cert={k}"),
        "--set",
        &format!("tls.key={k}"),
    ]);
    assert!(!ok);
    assert!(
        err.contains("TLS certificate") && err.contains("key.pem"),
        "{err}"
    );
}
