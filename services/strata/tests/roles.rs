//! The roles alone: `strata ingest`, `strata compactor` and `strata query` sharing one
//! bucket directory, and `strata config`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{SMALL_LEVELS, request, request_as, run, start_role};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Parquet objects under `dir`, recursively.
fn parquet_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                parquet_files(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "parquet"))
            }
        })
        .sum()
}

/// A running `strata compactor` (killed when dropped).
struct Compactor(std::process::Child);

impl Drop for Compactor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ingest_compactor_and_query_share_a_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let bucket = tmp.path().join("bucket");
    let store = format!("store.dir={}", bucket.display());
    // Small memtables and NVMe levels, so that data moves to S3 level jobs quickly; only
    // the compactor process runs them (the ingest role has no in-process worker).
    let mut small = vec!["--set", &store];
    small.extend_from_slice(SMALL_LEVELS);
    let ingest = start_role("ingest", &tmp.path().join("ingest"), &small);
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("compactor")
        .arg("--dir")
        .arg(tmp.path().join("compactor"))
        .args(["--set", &store, "--set", "engine.jobs.poll_ms=50"])
        .args(["--set", "engine.jobs.idle_poll_max_ms=500"])
        .args(["--set", "compactor.name=worker-1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let line = BufReader::new(c.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(line, "compactor worker-1 running");
    let _compactor = Compactor(c);
    let query = start_role("query", &tmp.path().join("query"), &["--set", &store]);

    let h = ingest.http.clone();
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables",
        r#"{"name": "t", "columns": [{"name": "id", "type": "int64", "nullable": false},
            {"name": "v", "type": "int64"}, {"name": "pad", "type": "string"}],
            "primary_key": ["id"]}"#,
    );
    assert_eq!(st, 201, "{body}");
    let pad = "x".repeat(100);
    let n = 6000i64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let rows: String = chunk
            .iter()
            .map(|i| format!("{{\"id\": {i}, \"v\": {}, \"pad\": \"{pad}\"}}\n", i * 2))
            .collect();
        let (st, body) = request_as(
            &h,
            "POST",
            "/v1/tables/t/rows",
            "application/x-ndjson",
            rows.as_bytes(),
        );
        assert_eq!(st, 200, "{body}");
    }

    // The compactor, not the ingest node, writes S3 levels.
    let deadline = Instant::now() + Duration::from_secs(90);
    while parquet_files(&bucket) == 0 {
        assert!(
            Instant::now() < deadline,
            "no Parquet object written by the compactor"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The query service reads every acknowledged row from the bucket; it does not write.
    let want = serde_json::json!([{"n": n, "s": n * (n - 1)}]);
    let (st, body) = request(
        &query.http,
        "POST",
        "/sql",
        r#"{"sql": "SELECT count(*) AS n, sum(v) AS s FROM t"}"#,
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body), want);
    let (st, body) = request(
        &query.http,
        "POST",
        "/sql",
        r#"{"sql": "INSERT INTO t VALUES (1, 1, 'no')"}"#,
    );
    assert_eq!(st, 403, "{body}");
    // The query service's PostgreSQL port answers the same: a row for the query, and the
    // write refused as forbidden (42501).
    let mut pg = common::idle_postgres_connection(&query.postgres);
    let (kinds, error) = common::postgres_query(&mut pg, "SELECT count(*) AS n FROM t");
    assert!(error.is_empty(), "{error:?}");
    assert_eq!(kinds, b"TDCZ", "{:?}", String::from_utf8_lossy(&kinds));
    let (_, error) = common::postgres_query(&mut pg, "INSERT INTO t VALUES (1, 1, 'no')");
    assert!(error.contains(&(b'C', "42501".to_string())), "{error:?}");
    // The writer answers the same.
    let (st, body) = request(
        &h,
        "POST",
        "/sql",
        r#"{"sql": "SELECT count(*) AS n, sum(v) AS s FROM t"}"#,
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body), want);
}

#[test]
fn config_command_shows_the_layers_and_refuses_mistakes() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("strata.toml");
    std::fs::write(
        &file,
        "[query]\ntimeout_ms = 1000\n[store]\nkind = \"s3\"\nbucket = \"b\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (ok, out, err) = run(
        &[
            "config",
            "--role",
            "query",
            "--config",
            f,
            "--set",
            "query.batch_rows=77",
        ],
        &[
            ("STRATA_QUERY_TIMEOUT_MS", "2000"),
            ("STRATA_LOG_FORMAT", "json"),
            ("STRATA_BOGUS", "1"),
        ],
    );
    assert!(ok, "{err}");
    let c: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(
        c["http"].as_str(),
        Some("127.0.0.1:8090"),
        "query role default"
    );
    assert_eq!(
        c["query"]["timeout_ms"].as_integer(),
        Some(2000),
        "env over file"
    );
    assert_eq!(c["query"]["batch_rows"].as_integer(), Some(77));
    assert_eq!(c["store"]["kind"].as_str(), Some("s3"));
    assert_eq!(c["log"]["format"].as_str(), Some("json"));
    // The unknown variable is a warning, logged as JSON.
    let warning = err
        .lines()
        .find(|l| l.contains("STRATA_BOGUS"))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert_eq!(json(warning)["level"], "WARN", "{warning}");

    // Mistakes stop the process and say where they are.
    std::fs::write(&file, "[query]\ntimeout = 1000\n").unwrap();
    let (ok, _, err) = run(&["config", "--config", f], &[]);
    assert!(!ok);
    assert!(
        err.contains("strata.toml") && err.contains("timeout"),
        "{err}"
    );
    let (ok, _, err) = run(&["config"], &[("STRATA_ENGINE_LEVELS", "many")]);
    assert!(!ok);
    assert!(err.contains("STRATA_ENGINE_LEVELS"), "{err}");
    let (ok, _, err) = run(&["ingest", "--set", "store.kind=s3"], &[]);
    assert!(!ok);
    assert!(err.contains("store.bucket"), "{err}");
}
