//! `strata serve` as a user runs it: the real binary on 127.0.0.1, tables created and
//! written through SQL over HTTP, read over HTTP and Arrow Flight SQL, and every
//! acknowledged write still there after the process is killed and started again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, flight_sql, request, request_as, start};

fn sql(s: &Server, q: &str) -> (u16, String) {
    request_as(&s.http, "POST", "/sql", "text/plain", q.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_sql_and_keeps_acknowledged_writes_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    assert_eq!(
        request(&server.http, "GET", "/ready", ""),
        (200, "ready".into())
    );
    assert_eq!(
        request(&server.http, "GET", "/health", ""),
        (200, "ok".into())
    );

    let (status, body) = sql(
        &server,
        "CREATE TABLE kv (k BIGINT, v VARCHAR, n BIGINT, PRIMARY KEY (k))",
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(
        &server,
        "INSERT INTO kv VALUES (1, 'one', 10), (2, 'two', 20), (3, 'three', 30)",
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "UPDATE kv SET n = 21 WHERE k = 2");
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "DELETE FROM kv WHERE k = 3");
    assert_eq!(status, 200, "{body}");
    let want = r#"[{"k":1,"v":"one","n":10},{"k":2,"v":"two","n":21}]"#;
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));
    // The same query again: its plan was kept by its shape.
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv WHERE k < 3 ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv WHERE k < 2 ORDER BY k");
    assert_eq!(
        (status, body.trim()),
        (200, r#"[{"k":1,"v":"one","n":10}]"#)
    );

    // Errors are JSON with a stable code.
    let (status, body) = sql(&server, "SELECT * FROM missing");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"code\""), "{body}");

    // Prometheus metrics: requests per operation, the bucket's requests, the engine's
    // backlog per table.
    let (status, text) = request(&server.http, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    for want in [
        r#"strata_http_requests_total{op="POST /sql",status="200"} 7"#,
        r#"strata_http_requests_total{op="POST /sql",status="404"} 1"#,
        "strata_http_request_seconds_bucket{",
        r#"strata_object_store_requests_total{op="put",prefix="wal"}"#,
        r#"strata_pending_compaction_bytes{table="kv",shard="0"}"#,
        r#"strata_write_stalls_total{table="kv",shard="0"} 0"#,
        // The INSERT, the UPDATE and the DELETE: one write each.
        r#"strata_writes_total{table="kv",shard="0"} 3"#,
        r#"strata_wal_segments_total{table="kv",shard="0"}"#,
        r#"strata_point_reads_total{table="kv",shard="0",source="memtable"}"#,
        r#"strata_point_reads_total{table="kv",shard="0",source="s3"}"#,
        // How the SQL statements were planned: CREATE, INSERT, UPDATE, DELETE and the
        // query of a missing table afresh; the two shapes of SELECT made once each, and
        // `k < 2` answered from the plan `k < 3` made.
        r#"strata_sql_plans_total{plan="fresh"} 5"#,
        r#"strata_sql_plans_total{plan="made"} 2"#,
        r#"strata_sql_plans_total{plan="kept"} 1"#,
        "# EOF",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }

    // Arrow Flight SQL on the same process.
    let text = flight_sql(&server.flight, None, "SELECT sum(n) AS s FROM kv")
        .await
        .unwrap();
    assert!(text.contains("| 31 |"), "{text}");

    // SIGKILL: no shutdown hook runs. Every acknowledged write is in the bucket's WAL.
    drop(server);
    let server = start(dir.path());
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));
    let (status, body) = sql(&server, "INSERT INTO kv VALUES (4, 'four', 40)");
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "SELECT count(*) AS c FROM kv");
    assert_eq!((status, body.trim()), (200, r#"[{"c":3}]"#));
}
