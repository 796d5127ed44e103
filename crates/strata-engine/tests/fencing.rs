//! Two writers on one shard: opening the second fences the first, whose next WAL or
//! manifest write fails with a "fenced" error; acknowledged data of both survives.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use common::*;
use strata_common::ErrorKind;
use strata_engine::{ScanOptions, Value};

#[tokio::test]
async fn newer_writer_fences_older_and_keeps_both_writers_data() {
    two_writers(memory_store(), small_config()).await;
}

#[tokio::test]
async fn newer_writer_fences_older_on_localstack() {
    let Some(store) = s3_store().await else {
        return;
    };
    let mut config = small_config();
    config.root_prefix = unique_prefix("fencing");
    two_writers(store, config).await;
}

async fn two_writers(store: strata_objstore::StoreRef, config: strata_engine::EngineConfig) {
    let small_config = || config.clone();
    let (d1, d2, d3) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let db1 = open(&store, d1.path(), small_config()).await;
    db1.create_table("t", schema(), &["id"]).await.unwrap();
    let t1 = db1.table("t").await.unwrap();
    t1.upsert(rows(
        &[1, 2],
        &[Some("w1"), Some("w1")],
        &[Some(1), Some(2)],
    ))
    .await
    .unwrap();
    t1.flush().await.unwrap();
    t1.upsert(rows(&[3], &[Some("w1-wal-only")], &[Some(3)]))
        .await
        .unwrap();

    // A second process opens the same table: it bumps the epoch and fences the WAL.
    let db2 = open(&store, d2.path(), small_config()).await;
    let t2 = db2.table("t").await.unwrap();
    let epoch1 = t1.shards().next().unwrap().epoch();
    let epoch2 = t2.shards().next().unwrap().epoch();
    assert!(epoch2 > epoch1);

    // The old writer's next write fails, clearly.
    let err = t1
        .upsert(rows(&[4], &[Some("lost")], &[Some(4)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert!(err.to_string().contains("fenced"), "{err}");
    // ... and so does everything after it, including flushes (manifest writes).
    assert_eq!(
        t1.upsert(rows(&[5], &[None], &[None]))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Fenced
    );
    assert_eq!(t1.flush().await.unwrap_err().kind(), ErrorKind::Fenced);

    // The new writer sees every write the old one acknowledged (from SSTs and the WAL).
    let got = decode(&t2.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    t2.upsert(rows(&[10], &[Some("w2")], &[Some(10)]))
        .await
        .unwrap();
    t2.update(only(&[
        (
            "id",
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![1])),
        ),
        (
            "b",
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![100])),
        ),
    ]))
    .await
    .unwrap();
    db2.close().await;

    // A third writer recovers the acknowledged data of both, and nothing else.
    let db3 = open(&store, d3.path(), small_config()).await;
    let t3 = db3.table("t").await.unwrap();
    let got = decode(&t3.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(
        got,
        vec![
            (1, Some("w1".into()), Some(100)),
            (2, Some("w1".into()), Some(2)),
            (3, Some("w1-wal-only".into()), Some(3)),
            (10, Some("w2".into()), Some(10)),
        ]
    );
    assert!(
        t3.get(&[Value::Int(4)], None, None)
            .await
            .unwrap()
            .is_none()
    );
    db3.close().await;
}

#[tokio::test]
async fn fenced_writer_cannot_commit_a_manifest() {
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db1 = open(&store, d1.path(), small_config()).await;
    db1.create_table("t", schema(), &["id"]).await.unwrap();
    let t1 = db1.table("t").await.unwrap();
    // Acknowledged, still only in the memtable and the WAL.
    t1.upsert(rows(&[1], &[Some("x")], &[None])).await.unwrap();
    let db2 = open(&store, d2.path(), small_config()).await;
    let t2 = db2.table("t").await.unwrap();
    // Flushing makes the old writer upload an SST and try to commit a manifest: the CAS
    // loses against the newer epoch and the flush reports "fenced".
    let err = t1.flush().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let newest = t2.shards().next().unwrap().manifest();
    assert_eq!(
        newest.value.writer_epoch,
        t2.shards().next().unwrap().epoch()
    );
    assert!(
        newest.value.levels.iter().all(|l| l.ssts.is_empty()),
        "the fenced flush left no trace in the manifest"
    );
    // The write the fenced writer acknowledged is served by the new one (from the WAL).
    assert!(
        t2.get(&[Value::Int(1)], None, None)
            .await
            .unwrap()
            .is_some()
    );
}

/// A writer deposed while idle has not noticed (it has not written since): its GC must
/// not run, or it deletes what the new writer has uploaded and not yet committed (GC
/// protects only its own uploads and jobs). The pass reports "fenced"; the new writer's
/// object survives until the new writer's own GC finds it in no manifest.
#[tokio::test]
async fn a_writer_deposed_while_idle_collects_nothing() {
    use object_store::ObjectStoreExt;
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db1 = open(&store, d1.path(), small_config()).await;
    db1.create_table("t", schema(), &["id"]).await.unwrap();
    let t1 = db1.table("t").await.unwrap();
    t1.upsert(rows(&[1], &[Some("x")], &[None])).await.unwrap();
    t1.flush().await.unwrap();
    let db2 = open(&store, d2.path(), small_config()).await;
    let t2 = db2.table("t").await.unwrap();

    // The new writer's upload that no manifest names yet (a flush between its upload and
    // its commit), in the shard's SST directory.
    let ssts: Vec<object_store::ObjectMeta> = futures::TryStreamExt::try_collect(store.list(None))
        .await
        .unwrap();
    let first = ssts
        .iter()
        .map(|m| m.location.to_string())
        .find(|p| p.contains("/sst/") && p.ends_with(".sst"))
        .expect("the first writer's flushed SST");
    let dir = &first[..first.rfind('/').unwrap()];
    let id = strata_manifest::SstId {
        epoch: t2.shards().next().unwrap().epoch(),
        n: 1_000_000,
    };
    let upload = object_store::path::Path::from(format!("{dir}/{id}.sst"));
    store
        .put(&upload, bytes::Bytes::from_static(b"uploading").into())
        .await
        .unwrap();

    let err = t1.gc().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    store
        .head(&upload)
        .await
        .expect("the new writer's upload survives the deposed writer's GC");
    // Knowing it is deposed, the old writer refuses writes.
    let err = t1
        .upsert(rows(&[2], &[Some("late")], &[None]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    // The new writer's own GC collects the object no manifest names.
    assert!(t2.gc().await.unwrap().ssts_deleted >= 1);
    assert!(store.head(&upload).await.is_err());
}

/// A WAL upload that landed but whose response was lost is retried; the retry finds the
/// segment there. That is the writer's own segment, not a newer writer's fence: the write is
/// acknowledged, the shard keeps writing, and the row survives a reopen from the bucket.
#[tokio::test]
async fn a_lost_wal_response_is_not_a_fence() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = open(&store, d1.path(), small_config()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("before")], &[None]))
        .await
        .unwrap();
    let injected = fault.injected();
    fault.lose_next(1);
    t.upsert(rows(&[2], &[Some("lost response")], &[None]))
        .await
        .expect("the segment landed: the write is acknowledged, not refused as fenced");
    assert_eq!(
        fault.injected(),
        injected + 1,
        "the WAL upload lost its response"
    );
    t.upsert(rows(&[3], &[Some("after")], &[None]))
        .await
        .expect("the shard still writes");
    db.close().await;
    let db = open(&store, d2.path(), small_config()).await;
    let t = db.table("t").await.unwrap();
    for k in [1, 2, 3] {
        assert!(
            t.get(&[Value::Int(k)], None, None).await.unwrap().is_some(),
            "row {k} after a reopen from the bucket"
        );
    }
}

/// An ingest node of a cluster fenced by a writer that holds no lease (an operator's
/// process on the same bucket) takes its shard back at its next cluster round instead of
/// refusing writes until restarted; the intruder is fenced in turn; every write either
/// acknowledged is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_the_lease_reopens_a_fenced_shard() {
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node = open(&store, d1.path(), small_config()).await;
    node.join_cluster(strata_engine::ClusterConfig {
        node: "n1".into(),
        http: "127.0.0.1:1".into(),
        flight: "127.0.0.1:2".into(),
        lease_ms: 2_000,
        renew_ms: 100,
    })
    .await
    .unwrap();
    node.create_table("t", schema(), &["id"]).await.unwrap();
    let t = node.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("node")], &[Some(1)]))
        .await
        .unwrap();

    let intruder = open(&store, d2.path(), small_config()).await;
    let ti = intruder.table("t").await.unwrap();
    ti.upsert(rows(&[2], &[Some("intruder")], &[Some(2)]))
        .await
        .unwrap();
    let err = t
        .upsert(rows(&[3], &[Some("refused")], &[Some(3)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");

    // Within a few rounds the node reopens the shard: writes through a fresh handle work.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let t = node.table("t").await.unwrap();
        match t.upsert(rows(&[4], &[Some("back")], &[Some(4)])).await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "the node never took its shard back"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    let err = ti
        .upsert(rows(&[5], &[Some("late")], &[Some(5)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let t = node.table("t").await.unwrap();
    let got = decode(&t.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(
        got,
        vec![
            (1, Some("node".into()), Some(1)),
            (2, Some("intruder".into()), Some(2)),
            (4, Some("back".into()), Some(4)),
        ]
    );
    intruder.close().await;
    node.close().await;
}

/// The newest WAL id in the bucket under `prefix`.
async fn last_wal_id(store: &strata_objstore::StoreRef) -> u64 {
    use futures::TryStreamExt;
    let all: Vec<object_store::ObjectMeta> = store.list(None).try_collect().await.unwrap();
    all.iter()
        .filter(|m| m.location.as_ref().ends_with(".wal"))
        .filter_map(|m| strata_common::ids::parse_id(m.location.as_ref()))
        .max()
        .expect("a WAL segment")
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..500 {
        if done().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Group commits overlap their uploads: a later segment lands while an earlier one is still
/// on its way, yet writes are acknowledged strictly in order, and a reader of the bucket sees
/// only the consecutive run (nothing past the hole) until the earlier one lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_uploads_overlap_and_are_acknowledged_in_order() {
    use object_store::ObjectStoreExt;
    let memory = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (fault, _db, t, first, w) = written_once(&memory, d1.path()).await;

    // Segment w+1 is held before it reaches the store; w+2 goes through.
    let held = format!("{:020}.wal", w + 1);
    fault.hold(&held);
    let t2 = t.clone();
    let second = tokio::spawn(async move { t2.upsert(rows(&[2], &[Some("two")], &[None])).await });
    wait_until("segment w+1 is held", async || fault.held() == 1).await;
    let t3 = t.clone();
    let third = tokio::spawn(async move { t3.upsert(rows(&[3], &[Some("three")], &[None])).await });
    let landed = object_store::path::Path::from(
        last_wal_path(&memory, w)
            .await
            .replace(&held, &format!("{:020}.wal", w + 2)),
    );
    wait_until("segment w+2 lands", async || {
        memory.head(&landed).await.is_ok()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !second.is_finished() && !third.is_finished(),
        "nothing is acknowledged while an earlier segment is in flight"
    );
    // A reader of the bucket stops at the hole.
    let reader = open(&memory, d2.path(), small_config()).await;
    let view = reader.view("t", None).await.unwrap();
    assert_eq!(
        view.shards[0].seq(),
        first,
        "a reader sees only the consecutive run of segments"
    );

    fault.release(&held);
    let (second, third) = (
        second.await.unwrap().unwrap(),
        third.await.unwrap().unwrap(),
    );
    assert!(
        first < second && second < third,
        "{first} < {second} < {third}"
    );
    let view = reader.view("t", None).await.unwrap();
    assert_eq!(view.shards[0].seq(), third);
    for k in 1..=3 {
        assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
    }
}

/// A writer of table `t` through a fault-injecting store over `memory`, with one row
/// written: the injector, the database, the table, the write's sequence number and the WAL
/// id it took.
async fn written_once(
    memory: &strata_objstore::StoreRef,
    dir: &std::path::Path,
) -> (
    std::sync::Arc<strata_objstore::FaultInjectingStore>,
    strata_engine::Db,
    strata_engine::Table,
    u64,
    u64,
) {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory.clone(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let db = open(&store, dir, small_config()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let seq = t.upsert(rows(&[1], &[Some("one")], &[None])).await.unwrap();
    let w = last_wal_id(memory).await;
    (fault, db, t, seq, w)
}

/// The path of WAL segment `id` (the one `last_wal_id` found).
async fn last_wal_path(store: &strata_objstore::StoreRef, id: u64) -> String {
    use futures::TryStreamExt;
    let all: Vec<object_store::ObjectMeta> = store.list(None).try_collect().await.unwrap();
    all.iter()
        .map(|m| m.location.to_string())
        .find(|p| p.ends_with(&format!("{id:020}.wal")))
        .expect("the segment")
}

/// A writer deposed with uploads in flight: a later segment of it landed past a hole (its
/// earlier one still on its way). The new writer fences the hole and the ids after it,
/// replays without the stray segment, and the deposed writer acknowledges neither write;
/// a third writer's replay skips the stray segment too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_writers_uploads_in_flight_are_never_acknowledged() {
    let memory = memory_store();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (fault, _db1, t1, _, w) = written_once(&memory, dirs[0].path()).await;
    let held = format!("{:020}.wal", w + 1);
    fault.hold(&held);
    let a = t1.clone();
    let second =
        tokio::spawn(async move { a.upsert(rows(&[2], &[Some("in flight")], &[None])).await });
    wait_until("segment w+1 is held", async || fault.held() == 1).await;
    let a = t1.clone();
    let third = tokio::spawn(async move { a.upsert(rows(&[3], &[Some("landed")], &[None])).await });
    wait_until("segment w+2 lands", async || {
        last_wal_id(&memory).await == w + 2
    })
    .await;

    // A second writer opens: hole at w+1 fenced, w+2 found taken, fences after it.
    let db2 = open(&memory, dirs[1].path(), small_config()).await;
    let t2 = db2.table("t").await.unwrap();
    t2.upsert(rows(&[4], &[Some("new writer")], &[None]))
        .await
        .unwrap();
    fault.release(&held);
    for (k, w) in [(2, second), (3, third)] {
        let err = w
            .await
            .unwrap()
            .expect_err("a deposed writer acknowledges nothing");
        assert_eq!(err.kind(), ErrorKind::Fenced, "row {k}: {err}");
    }
    let present = async |t: &strata_engine::Table| {
        let mut got = Vec::new();
        for k in 1..=4 {
            got.push(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
        }
        got
    };
    assert_eq!(present(&t2).await, vec![true, false, false, true]);
    db2.close().await;
    let db3 = open(&memory, dirs[2].path(), small_config()).await;
    let t3 = db3.table("t").await.unwrap();
    assert_eq!(
        present(&t3).await,
        vec![true, false, false, true],
        "a later replay skips the deposed writer's stray segment"
    );
}
