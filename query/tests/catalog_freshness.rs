//! SQL on a query service sees the tables of the catalog it caches, and a table another
//! process just created at once (a name the cache lacks is looked up in the bucket).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_finds_a_table_another_process_just_created() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::local_store(&tmp.path().join("bucket"));
    let mut config = common::small_config();
    config.catalog_refresh_ms = 60_000;
    let ingest = common::open(&store, &tmp.path().join("ingest"), config.clone()).await;
    let reader = common::open(&store, &tmp.path().join("reader"), config).await;
    let q = common::service(&reader, false);
    let w = common::service(&ingest, true);
    // The reader's cache holds the empty catalog for a minute.
    assert!(q.collect("SELECT * FROM missing").await.is_err());
    common::sql(
        &w,
        "CREATE TABLE fresh (id BIGINT NOT NULL, v BIGINT, PRIMARY KEY (id))",
    )
    .await;
    common::sql(&w, "INSERT INTO fresh VALUES (1, 10), (2, 20)").await;
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_eq!(
        common::sql(&q, "SELECT sum(v) FROM fresh").await,
        vec![vec!["30".to_string()]]
    );
    ingest.close().await;
}

/// An ingest node restarted over its bucket answers SQL from its tables' writer state, as
/// its data API does: not from a view built from the bucket per query (a manifest read, a
/// WAL listing and a durable pin written and deleted, five requests every query).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_on_a_restarted_ingest_node_makes_no_bucket_requests_per_query() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::local_store(&tmp.path().join("bucket"));
    let mut config = common::small_config();
    config.jobs.inprocess_workers = 0;
    config.catalog_refresh_ms = 60_000;
    let before = common::open(&store, &tmp.path().join("nvme"), config.clone()).await;
    let w = common::service(&before, true);
    common::sql(
        &w,
        "CREATE TABLE t (id BIGINT NOT NULL, v BIGINT, PRIMARY KEY (id))",
    )
    .await;
    common::sql(&w, "INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)").await;
    before.close().await;

    let db = common::open(&store, &tmp.path().join("nvme"), config).await;
    let q = common::service(&db, true);
    let sum = "SELECT sum(v) FROM t WHERE id >= 1";
    assert_eq!(common::sql(&q, sum).await, vec![vec!["60".to_string()]]);
    let start = db.object_store_metrics().totals();
    for _ in 0..30 {
        assert_eq!(common::sql(&q, sum).await, vec![vec!["60".to_string()]]);
    }
    let spent = db.object_store_metrics().totals().since(&start);
    // Background work (an idle flush, GC) may make a few; a view per query made 150.
    assert!(
        spent.total() < 10,
        "30 queries made {} object-store requests: {spent:?}",
        spent.total()
    );
    // The table is open as its writer: the query saw the writer's state.
    assert_eq!(db.open_tables().await.len(), 1);
    db.close().await;
}
