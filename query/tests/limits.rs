//! Each query runs under a memory limit and a timeout; both fail with clear errors.

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use strata_query::{QueryConfig, QueryErrorKind, QueryService};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_and_timeout() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = common::local_store(&tmp.path().join("bucket"));
    let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("g", DataType::Int64, true),
    ]));
    db.create_table("l", schema.as_ref().clone(), &["id"])
        .await
        .expect("create");
    let t = db.table("l").await.expect("table");
    let n = 20_000i64;
    t.upsert(
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
                Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
            ],
        )
        .expect("batch"),
    )
    .await
    .expect("upsert");

    let tight = QueryService::new(
        db.clone(),
        QueryConfig {
            memory_limit_bytes: 64 << 10,
            ..Default::default()
        },
        false,
    );
    let err = tight
        .collect("SELECT g, count(*) FROM l GROUP BY g ORDER BY g")
        .await
        .expect_err("over the memory limit");
    assert_eq!(err.kind, QueryErrorKind::ResourcesExhausted, "{err}");
    assert_eq!(err.http_status(), 413);

    let short = QueryService::new(
        db.clone(),
        QueryConfig {
            timeout_ms: 300,
            ..Default::default()
        },
        false,
    );
    let started = std::time::Instant::now();
    let err = short
        .collect("SELECT count(*) FROM l a, l b WHERE a.g + b.g = -1")
        .await
        .expect_err("past the timeout");
    assert_eq!(err.kind, QueryErrorKind::Timeout, "{err}");
    assert!(err.message.contains("timeout of 300 ms"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // The database still answers.
    assert_eq!(
        common::sql(&common::service(&db, false), "SELECT count(*) FROM l").await,
        vec![vec!["20000".to_string()]]
    );
    db.close().await;
}

/// A user's mistakes in SQL come back with the code of a mistake (`invalid_query`,
/// `not_found`, `already_exists`), never `internal`: bad literals, casts that fail,
/// division by zero, wrong types in a write, unknown tables and columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_mistakes_are_never_internal() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::local_store(&dir.path().join("bucket"));
    let db = common::open(&store, &dir.path().join("nvme"), common::small_config()).await;
    let q = common::service(&db, true);
    q.collect("CREATE TABLE t (k BIGINT, v INT, ts TIMESTAMP, PRIMARY KEY (k))")
        .await
        .unwrap();
    q.collect("INSERT INTO t VALUES (1, 2, TIMESTAMP '2026-01-01 00:00:00')")
        .await
        .unwrap();
    for (sql, kind) in [
        ("SELECT CAST('abc' AS INT)", QueryErrorKind::Invalid),
        ("SELECT TIMESTAMP 'not a time'", QueryErrorKind::Invalid),
        ("SELECT CAST('2026-13-45' AS DATE)", QueryErrorKind::Invalid),
        ("SELECT 1 / 0", QueryErrorKind::Invalid),
        ("SELECT v / 0 FROM t", QueryErrorKind::Invalid),
        ("SELECT CAST(300 AS TINYINT)", QueryErrorKind::Invalid),
        (
            "INSERT INTO t VALUES (2, 'x', NULL)",
            QueryErrorKind::Invalid,
        ),
        (
            "INSERT INTO t VALUES (3, 1, 'yesterday')",
            QueryErrorKind::Invalid,
        ),
        ("INSERT INTO t (v) VALUES (1)", QueryErrorKind::Invalid),
        ("SELECT nope FROM t", QueryErrorKind::Invalid),
        ("SELECT * FROM missing", QueryErrorKind::NotFound),
        (
            "CREATE TABLE t (k BIGINT, PRIMARY KEY (k))",
            QueryErrorKind::AlreadyExists,
        ),
        ("SELEC 1", QueryErrorKind::Invalid),
        (
            "SELECT regexp_like(CAST(k AS VARCHAR), '(') FROM t",
            QueryErrorKind::Invalid,
        ),
    ] {
        let e = q.collect(sql).await.map(|_| ()).expect_err(sql);
        assert_eq!(e.kind, kind, "{sql}: {}", e.message);
    }
}
