//! A reader holding an old snapshot keeps working while compaction and GC run; GC deletes
//! only what no retained manifest or pinned snapshot needs, and the bucket alone still
//! recovers everything afterwards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use common::*;
use futures::TryStreamExt;
use strata_engine::ScanOptions;

#[tokio::test]
async fn old_snapshot_survives_compaction_and_gc() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.gc.manifest_versions_retained = 1;
    let db = open(&store, dir.path(), config.clone()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..200).collect();
    let v1: Vec<Option<&str>> = ids.iter().map(|_| Some("v1")).collect();
    let nums: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &v1, &nums)).await.unwrap();
    t.flush().await.unwrap();

    let old = t.snapshot();
    // Overwrite everything several times, with flushes and compactions in between.
    for round in 0..4 {
        let v: Vec<Option<&str>> = ids
            .iter()
            .map(|_| Some(if round % 2 == 0 { "v2" } else { "v3" }))
            .collect();
        t.upsert(rows(&ids, &v, &nums)).await.unwrap();
        t.flush().await.unwrap();
        t.compact().await.unwrap();
        let report = t.gc().await.unwrap();
        // The pinned reader still sees v1 everywhere.
        let got = decode(&t.scan(&ScanOptions::default(), Some(&old)).await.unwrap());
        assert_eq!(got.len(), 200);
        assert!(
            got.iter().all(|r| r.1.as_deref() == Some("v1")),
            "round {round}: snapshot changed"
        );
        if round == 3 {
            assert!(
                report.ssts_deleted + report.manifests_deleted + report.wal_segments_deleted > 0,
                "{report:?}"
            );
        }
    }
    let stats = t.shards().next().unwrap().stats();
    assert!(stats.compactions > 0, "{stats:?}");

    // Nothing the current manifest references was deleted: the bucket alone recovers.
    drop(old);
    t.gc().await.unwrap();
    db.close().await;
    let fresh = tempfile::tempdir().unwrap();
    let db2 = open(&store, fresh.path(), config).await;
    let t2 = db2.table("t").await.unwrap();
    let got = decode(&t2.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|r| r.1.as_deref() == Some("v3")));
    // Every SST object left is referenced by the newest manifest (garbage was collected).
    let manifest = t2.shards().next().unwrap().manifest();
    let referenced: std::collections::HashSet<String> = manifest
        .value
        .ssts()
        .map(|s| format!("{}.sst", s.id))
        .collect();
    let objects: Vec<_> = store.list(None).try_collect().await.unwrap();
    let ssts: Vec<String> = objects
        .iter()
        .filter(|m| m.location.as_ref().contains("/sst/"))
        .map(|m| m.location.filename().unwrap().to_string())
        .collect();
    assert!(!ssts.is_empty());
    assert!(
        ssts.iter().all(|s| referenced.contains(s)),
        "unreferenced ssts left: {ssts:?} vs {referenced:?}"
    );
    db2.close().await;
}

/// A dropped table's objects (WAL, SSTs, manifests, Parquet files) are deleted once it has
/// been dropped for `gc.min_age_ms`, and the catalog forgets it once nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_tables_are_collected() {
    use object_store::ObjectStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.gc.interval_ms = 0; // collected by hand below
    config.gc.min_age_ms = 0;
    let db = common::open(&store, dir.path(), config).await;
    db.create_table("gone", common::schema(), &["id"])
        .await
        .unwrap();
    db.create_table("kept", common::schema(), &["id"])
        .await
        .unwrap();
    for name in ["gone", "kept"] {
        let t = db.table(name).await.unwrap();
        let ids: Vec<i64> = (0..200).collect();
        let a: Vec<Option<&str>> = ids.iter().map(|_| Some("x")).collect();
        let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
        t.upsert(common::rows(&ids, &a, &b)).await.unwrap();
        t.drain_to_bucket().await.unwrap();
    }
    let gone = db.describe("gone").await.unwrap().id;
    let count = |id: u64| {
        let store = store.clone();
        let prefix = db.layout().table_dir(id);
        async move {
            let v: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
            v.len()
        }
    };
    assert!(count(gone).await > 0);
    // Each table's shards keep their NVMe tier under the node's directory.
    let local = |id: u64| dir.path().join(format!("tables/{id:020}"));
    let kept_id = db.describe("kept").await.unwrap().id;
    assert!(local(gone).is_dir() && local(kept_id).is_dir());
    db.drop_table("gone").await.unwrap();
    assert!(db.collect_dropped().await.unwrap() > 0);
    assert_eq!(count(gone).await, 0);
    // The dropped table's local directory goes with its objects; the other stays.
    assert!(!local(gone).exists(), "{}", local(gone).display());
    assert!(local(kept_id).is_dir());
    // The next pass finds nothing and forgets the table.
    assert_eq!(db.collect_dropped().await.unwrap(), 0);
    let mut versions: Vec<_> = store
        .list(Some(&db.layout().catalog_dir()))
        .try_collect()
        .await
        .unwrap();
    versions.sort_by(|a, b| a.location.cmp(&b.location));
    let latest = store
        .get(&versions.last().unwrap().location)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let catalog: serde_json::Value = serde_json::from_slice(&latest).unwrap();
    assert_eq!(catalog["dropped"], serde_json::json!([]), "{catalog}");
    // The other table is whole.
    let kept = db.table("kept").await.unwrap();
    let got = kept
        .get(&[strata_engine::Value::Int(7)], None, None)
        .await
        .unwrap();
    assert!(got.is_some());
    assert!(count(db.describe("kept").await.unwrap().id).await > 0);
    db.close().await;
}

/// A query in another process whose clock runs two minutes behind the writer's writes pin
/// expiries that look lapsed to the writer already; the writer keeps the pin and what it
/// protects until it has itself seen the pin unrenewed for a lease (issue 20, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_clock_runs_behind_keeps_its_pin() {
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config = small_config();
    config.gc.manifest_versions_retained = 1;
    let db = open(&store, d1.path(), config.clone()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..100).collect();
    let v1: Vec<Option<&str>> = ids.iter().map(|_| Some("v1")).collect();
    let nums: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &v1, &nums)).await.unwrap();
    t.flush().await.unwrap();

    let behind = std::sync::Arc::new(strata_common::clock::ManualClock::new(
        strata_common::clock::system().now_ms() - 120_000,
    ));
    let reader = strata_engine::Db::open_with_store(
        store.clone(),
        None,
        strata_objstore::ObjectStoreMetrics::default(),
        d2.path().to_path_buf(),
        config.clone(),
        behind,
    )
    .await
    .unwrap();
    let view = reader.view("t", None).await.unwrap();
    let pinned = view.shards[0].manifest_version();

    let v2: Vec<Option<&str>> = ids.iter().map(|_| Some("v2")).collect();
    for _ in 0..2 {
        t.upsert(rows(&ids, &v2, &nums)).await.unwrap();
        t.flush().await.unwrap();
        t.compact().await.unwrap();
    }
    t.gc().await.unwrap();
    let id = db.describe("t").await.unwrap().id;
    let paths = strata_manifest::Layout::new(&config.root_prefix).shard(id, 0);
    let versions: Vec<String> = store
        .list(Some(&paths.manifest_dir()))
        .map_ok(|m| m.location.filename().unwrap().to_string())
        .try_collect()
        .await
        .unwrap();
    let pins: Vec<object_store::ObjectMeta> = store
        .list(Some(&paths.pins_dir()))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(pins.len(), 1, "the reader's pin was deleted as lapsed");
    assert!(
        versions
            .iter()
            .any(|v| v.trim_end_matches(".json").parse::<u64>().ok() == Some(pinned)),
        "pinned version {pinned} collected; left: {versions:?}"
    );
    drop(view);
    reader.close().await;
    db.close().await;
}
