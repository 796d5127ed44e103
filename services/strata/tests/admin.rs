//! `strata admin` against a running `strata serve`: tables, shards, manifest versions,
//! snapshots, jobs and garbage collection (dry run first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{SMALL_LEVELS, request, request_as, run, start_with};

fn admin(http: &str, args: &[&str]) -> (bool, String, String) {
    let mut a = vec!["admin", "--http", http];
    a.extend_from_slice(args);
    run(&a, &[])
}

fn admin_json(http: &str, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (ok, out, err) = admin(http, &a);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn admin_shows_the_bucket_state_and_collects_garbage() {
    let dir = tempfile::tempdir().unwrap();
    // Small memtables and levels so that flushes, compactions and S3 jobs happen; no
    // background GC and no minimum age, so that old manifest versions are garbage now.
    let mut flags = SMALL_LEVELS.to_vec();
    flags.extend([
        "--set",
        "engine.gc.interval_ms=0",
        "--set",
        "engine.gc.min_age_ms=0",
        "--set",
        "engine.gc.manifest_versions_retained=2",
    ]);
    let server = start_with(dir.path(), &flags);
    let h = server.http.clone();
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables",
        r#"{"name": "t", "columns": [{"name": "id", "type": "int64", "nullable": false},
            {"name": "pad", "type": "string"}], "primary_key": ["id"]}"#,
    );
    assert_eq!(st, 201, "{body}");
    let pad = "y".repeat(100);
    for chunk in (0..4000i64).collect::<Vec<_>>().chunks(400) {
        let rows: String = chunk
            .iter()
            .map(|i| format!("{{\"id\": {i}, \"pad\": \"{pad}\"}}\n"))
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

    let (ok, out, err) = admin(&h, &["tables"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "t");

    // Wait until the in-process worker has moved data to S3.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let shard = loop {
        let v = admin_json(&h, &["shards", "t"]);
        let shard = v["shards"][0].clone();
        let s3_rows: u64 = shard["s3_levels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| l["groups"].as_array().unwrap().clone())
            .map(|g| g["rows"].as_u64().unwrap())
            .sum();
        if s3_rows > 0 {
            break shard;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing reached S3: {shard}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(shard["writer_epoch"], 1);
    assert!(shard["manifest_version"].as_u64().unwrap() > 2, "{shard}");
    let (ok, out, err) = admin(&h, &["shards", "t"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("writer epoch 1") && out.contains("NVMe L0") && out.contains("S3 L1"),
        "{out}"
    );
    assert!(out.contains("backlog:"), "{out}");

    let versions = |h: &str| -> Vec<u64> {
        admin_json(h, &["manifests", "t"])["shards"][0]["manifest_versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["version"].as_u64().unwrap())
            .collect()
    };
    let before = versions(&h);
    assert!(before.len() > 2, "{before:?}");
    let (ok, out, err) = admin(&h, &["manifests", "t"]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .filter(|l| l.trim_start().starts_with('v'))
            .count()
            >= before.len(),
        "{out}"
    );

    let (ok, out, err) = admin(&h, &["snapshots", "t"]);
    assert!(ok, "{err}");
    assert!(out.contains("snapshots in this process"), "{out}");
    let (ok, out, err) = admin(&h, &["jobs"]);
    assert!(ok, "{err}");
    assert!(!out.is_empty());

    // A dry run lists old manifest versions and deletes nothing.
    let plan = admin_json(&h, &["gc", "t", "--dry-run"]);
    assert_eq!(plan["dry_run"], true);
    let doomed = plan["shards"][0]["manifests"].as_array().unwrap().len();
    assert!(doomed > 0, "{plan}");
    let now = versions(&h);
    assert!(
        now.len() >= before.len(),
        "a dry run deleted manifests: {before:?} -> {now:?}"
    );
    let (ok, out, err) = admin(&h, &["gc", "t", "--dry-run"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("would delete") && out.contains("manifests kept"),
        "{out}"
    );
    // The real pass deletes them; reads are unaffected.
    let (ok, out, err) = admin(&h, &["gc", "t"]);
    assert!(ok, "{err}");
    assert!(out.contains("deleted"), "{out}");
    let after = versions(&h);
    assert!(after.len() < now.len(), "{now:?} -> {after:?}");
    let (st, body) = request(
        &h,
        "POST",
        "/sql",
        r#"{"sql": "SELECT count(*) AS n FROM t"}"#,
    );
    assert_eq!((st, body.as_str()), (200, r#"[{"n":4000}]"#));

    // Errors come back as the server's code and message.
    let (ok, _, err) = admin(&h, &["shards", "nope"]);
    assert!(!ok);
    assert!(err.contains("not_found"), "{err}");
}
