//! The catalog is cached in the process: once warm, table lookups, writes and reads make no
//! request under `catalog/`; a table created by another process is found at once, one
//! dropped by another process is seen within `catalog_refresh_ms` and its writes here are
//! refused from then on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use strata_common::ErrorKind;
use strata_engine::Db;
use strata_objstore::{FaultInjectingStore, FaultOp, ObjectStoreMetrics};

fn catalog_requests(m: &ObjectStoreMetrics) -> u64 {
    ["get", "head", "list", "put"]
        .iter()
        .map(|op| m.requests(op, "catalog"))
        .sum()
}

#[tokio::test]
async fn warm_lookups_make_no_catalog_requests() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.catalog_refresh_ms = 60_000;
    let (db, metrics) = open_counted(&store, dir.path(), config).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("a")], &[Some(1)]))
        .await
        .unwrap();

    let before = catalog_requests(&metrics);
    for i in 0..100i64 {
        let t = db.table("t").await.unwrap();
        t.upsert(rows(&[i], &[Some("b")], &[Some(i)]))
            .await
            .unwrap();
        assert!(
            t.get(&[strata_engine::Value::Int(i)], None, None)
                .await
                .unwrap()
                .is_some()
        );
        db.describe("t").await.unwrap();
        assert_eq!(db.list_tables().await.unwrap().len(), 1);
        let view = db.view("t", None).await.unwrap();
        assert_eq!(view.entry.name, "t");
    }
    assert_eq!(
        catalog_requests(&metrics),
        before,
        "warm lookups must not read the catalog from the bucket"
    );
}

#[tokio::test]
async fn another_process_creating_and_dropping_is_seen_within_the_refresh_interval() {
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config = small_config();
    config.catalog_refresh_ms = 300;
    let admin = open(&store, d1.path(), config.clone()).await;
    let (node, metrics) = open_counted(&store, d2.path(), config).await;

    // Warm the node's cache with an empty catalog, then create elsewhere: a lookup of the
    // unknown name checks the bucket at once.
    assert!(node.list_tables().await.unwrap().is_empty());
    admin.create_table("t", schema(), &["id"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t = node.table("t").await.unwrap();

    // Within the interval, lookups are answered from memory. (Only checked when the
    // lookups did run within it: on a loaded machine they may not.)
    let warm = catalog_requests(&metrics);
    let started = std::time::Instant::now();
    for _ in 0..20 {
        node.table("t").await.unwrap();
    }
    if started.elapsed() < Duration::from_millis(150) {
        assert_eq!(catalog_requests(&metrics), warm);
    }
    t.upsert(rows(&[1], &[Some("a")], &[Some(1)]))
        .await
        .unwrap();

    // Dropped by another process: seen within the interval, and the node's open table
    // refuses writes from then on (never applied to a dead table).
    admin.drop_table("t").await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let err = node.table("t").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let err = t
        .upsert(rows(&[2], &[Some("late")], &[Some(2)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    // A check that found nothing new costs one HEAD, not a LIST and a GET.
    let lists = metrics.requests("list", "catalog");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(node.list_tables().await.unwrap().is_empty());
    assert_eq!(metrics.requests("list", "catalog"), lists);

    // Created again under the same name: a new table (new id), empty.
    admin.create_table("t", schema(), &["id"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t2 = node.table("t").await.unwrap();
    assert_eq!(
        t2.scan(&Default::default(), None).await.unwrap().num_rows(),
        0,
        "the new table must not see the dropped one's rows"
    );
}

#[tokio::test]
async fn a_failed_check_serves_the_catalog_known() {
    let fault = Arc::new(FaultInjectingStore::new(memory_store(), Default::default()));
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.catalog_refresh_ms = 100;
    let db = Db::open_with_store(
        fault.clone(),
        Some(fault.clone()),
        ObjectStoreMetrics::default(),
        dir.path().to_path_buf(),
        config,
        strata_common::clock::system(),
    )
    .await
    .unwrap();
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("a")], &[Some(1)]))
        .await
        .unwrap();
    // The interval passed: the next lookup checks, and the bucket fails the check.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let before = fault.injected();
    fault.fail_next(FaultOp::Get, 1);
    let t = db.table("t").await.expect("served from the catalog known");
    assert_eq!(fault.injected(), before + 1, "the check reached the bucket");
    assert!(
        t.get(&[strata_engine::Value::Int(1)], None, None)
            .await
            .unwrap()
            .is_some()
    );
}
