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
