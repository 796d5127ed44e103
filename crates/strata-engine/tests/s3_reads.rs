//! Reading through the S3 levels: object-store reads of a cold point lookup, refusal of
//! writes over the sorted-run limit, and scans racing compaction and GC.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::sync::Arc;

use common::*;
use strata_common::clock;
use strata_engine::{Db, ScanOptions, Value};
use strata_objstore::{ObjectStoreConfig, ObjectStoreMetrics};

fn texts(ids: &[i64]) -> Vec<String> {
    ids.iter().map(|i| format!("value-{i:08}")).collect()
}

async fn load(t: &strata_engine::Table, ids: &[i64]) {
    let a = texts(ids);
    let a: Vec<Option<&str>> = a.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(i * 3)).collect();
    t.upsert(rows(ids, &a, &b)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_point_lookup_costs_at_most_two_reads_per_file() {
    let metrics = ObjectStoreMetrics::default();
    let (store, _) = strata_objstore::build(&ObjectStoreConfig::memory(), &metrics)
        .await
        .unwrap();
    let mut config = small_config();
    config.parquet_file_bytes = 4 << 20; // one file
    config.parquet_row_group_rows = 1000;
    config.parquet_page_bytes = 2048;
    config.cache_block_bytes = 16 << 10;
    // No background compaction: only the lookups below read Parquet files.
    config.level_bytes_base = 1 << 40;
    config.l0_settle_ms = 0;
    config.s3_level_bytes_base = 1 << 40;
    let open = |dir: std::path::PathBuf| {
        Db::open_with_store(
            store.clone(),
            None,
            metrics.clone(),
            dir,
            config.clone(),
            clock::system(),
        )
    };
    let d1 = tempfile::tempdir().unwrap();
    let db = open(d1.path().to_path_buf()).await.unwrap();
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..20_000).collect();
    for chunk in ids.chunks(5000) {
        load(&t, chunk).await;
    }
    t.drain_to_bucket().await.unwrap();
    let m = t.shards().next().unwrap().manifest();
    let key = t.table_schema().encode_key(&[Value::Int(12_345)]).unwrap();
    let files: Vec<_> = m
        .value
        .parquet_files()
        .filter(|f| f.key_min <= key && key <= f.key_max)
        .cloned()
        .collect();
    assert_eq!(files.len(), 1, "one file holds the key: {files:?}");
    assert!(
        files[0].size_bytes > 100 << 10,
        "a file of some size: {files:?}"
    );
    db.close().await;
    drop(db);

    // A new process with an empty local directory: every cache is cold.
    let d2 = tempfile::tempdir().unwrap();
    let db = open(d2.path().to_path_buf()).await.unwrap();
    let t = db.table("t").await.unwrap();
    let reads = || metrics.requests("get", "parquet") + metrics.requests("head", "parquet");
    let before = reads();
    let bytes_before = metrics.bytes("get", "parquet");
    let row = t
        .get(&[Value::Int(12_345)], None, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        decode(&row),
        vec![(12_345, Some(texts(&[12_345])[0].clone()), Some(37_035))]
    );
    let cold = reads() - before;
    assert!(cold <= 2, "cold lookup read the file {cold} times");
    let bytes = metrics.bytes("get", "parquet") - bytes_before;
    assert!(
        bytes < files[0].size_bytes / 2,
        "the lookup read {bytes} of {} bytes",
        files[0].size_bytes
    );
    // Warm: the tail and the blocks are on the local directory.
    let before = reads();
    assert!(
        t.get(&[Value::Int(12_345)], None, None)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(reads() - before, 0, "warm lookup reads nothing");
    // A key outside every file's range opens no file.
    let before = reads();
    assert!(
        t.get(&[Value::Int(99_999)], None, None)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(reads() - before, 0);
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_over_the_sorted_run_limit_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.sorted_runs_max = 3;
    config.l0_compaction_trigger = 100; // nothing compacts on its own
    let db = open(&memory_store(), dir.path(), config).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    for i in 0..4 {
        load(&t, &[i]).await;
        t.flush().await.unwrap();
    }
    let shard = t.shards().next().unwrap().clone();
    let seq = shard.last_seq();
    assert_eq!(shard.stats().sorted_runs, 4);
    assert_eq!(shard.stats().ssts_per_level[0], 4, "sorted runs per level");
    let err = t
        .upsert(rows(&[100], &[Some("x")], &[Some(1)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), strata_common::ErrorKind::Overloaded, "{err}");
    assert!(err.kind().is_retryable());
    assert!(err.to_string().contains("4 sorted runs (limit 3)"), "{err}");
    assert_eq!(shard.last_seq(), seq, "a refused write changes nothing");
    assert!(
        t.get(&[Value::Int(100)], None, None)
            .await
            .unwrap()
            .is_none()
    );
    // Reads are never refused.
    assert_eq!(
        t.scan(&ScanOptions::default(), None)
            .await
            .unwrap()
            .num_rows(),
        4
    );

    // Compaction catches up; writes are accepted again and the stall is recorded.
    t.drain_to_bucket().await.unwrap();
    assert!(shard.stats().sorted_runs <= 3);
    t.upsert(rows(&[100], &[Some("x")], &[Some(1)]))
        .await
        .unwrap();
    let stats = shard.stats();
    assert_eq!(stats.stalls, 1, "{stats:?}");
    assert!(stats.stall_us_max > 0 && stats.overloaded >= 1, "{stats:?}");
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_survive_concurrent_compaction_and_gc() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.gc.min_age_ms = 0;
    config.gc.manifest_versions_retained = 1;
    let store = memory_store();
    let db = open(&store, dir.path(), config).await;
    db.create_table_with_layout(
        "t",
        schema(),
        &["id"],
        vec![
            vec![vec!["a".into(), "b".into()]],
            vec![vec!["a".into()], vec!["b".into()]],
        ],
    )
    .await
    .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..3000).collect();
    load(&t, &ids).await;
    t.drain_to_bucket().await.unwrap();
    let want = t.scan(&ScanOptions::default(), None).await.unwrap();
    assert_eq!(want.num_rows(), 3000);
    let want = Arc::new(decode(&want));

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (t, want, stop) = (t.clone(), want.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut scans = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let got = t.scan(&ScanOptions::default(), None).await.unwrap();
                assert_eq!(&decode(&got), want.as_ref());
                scans += 1;
            }
            scans
        }));
    }
    let mut deleted = 0;
    for round in 0..6 {
        // Rewrite the same values so the oracle stays fixed while files churn.
        let part: Vec<i64> = ids.iter().copied().filter(|i| i % 6 == round).collect();
        load(&t, &part).await;
        t.drain_to_bucket().await.unwrap();
        t.compact_column_group(0, 0).await.unwrap();
        let r = t.gc().await.unwrap();
        deleted += r.parquet_deleted;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut scans = 0;
    for r in readers {
        scans += r.await.unwrap();
    }
    assert!(scans > 2, "scans ran during the churn: {scans}");
    assert!(deleted > 0, "GC collected replaced Parquet files");
    assert_eq!(
        decode(&t.scan(&ScanOptions::default(), None).await.unwrap()),
        *want
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_compaction_bytes_report_due_s3_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.jobs.inprocess_workers = 0; // nothing runs the jobs
    config.s3_level_bytes_base = 1024;
    let db = open(&memory_store(), dir.path(), config).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let shard = t.shards().next().unwrap().clone();
    assert_eq!(shard.stats().pending_compaction_bytes, 0);
    let ids: Vec<i64> = (0..2000).collect();
    load(&t, &ids).await;
    t.flush().await.unwrap();
    // Publishing happens in the background; with no worker the job stays outstanding.
    let drain = {
        let t = t.clone();
        tokio::spawn(async move { t.drain_to_bucket().await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let s = shard.stats();
        if s.jobs_outstanding > 0 {
            assert!(s.pending_compaction_bytes > 0, "{s:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no job published: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drain.abort();
    db.close().await;
}

/// A job whose spec disappears from the bucket (removed by hand, or by a lifecycle rule on
/// `jobs/`) is let go after a lease; its inputs are published again, and a worker that
/// starts later finishes the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_spec_vanished_is_published_again() {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let dir = tempfile::tempdir().unwrap();
    let store = memory_store();
    let mut config = small_config();
    config.jobs.inprocess_workers = 0; // nothing runs the jobs yet
    config.jobs.lease_ms = 300;
    let db = open(&store, dir.path(), config.clone()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..500).collect();
    load(&t, &ids).await;
    let drain = {
        let t = t.clone();
        tokio::spawn(async move { t.drain_to_bucket().await })
    };
    // Wait for the published spec, then delete it.
    let jobs_dir = db.layout().jobs_dir();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let spec = loop {
        let listed: Vec<_> = store.list(Some(&jobs_dir)).try_collect().await.unwrap();
        if let Some(m) = listed
            .iter()
            .find(|m| m.location.as_ref().ends_with(".json"))
        {
            break m.location.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no job published");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    store.delete(&spec).await.unwrap();
    // Abandoned after a lease and published again under a new id.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let listed: Vec<_> = store.list(Some(&jobs_dir)).try_collect().await.unwrap();
        if listed
            .iter()
            .any(|m| m.location.as_ref().ends_with(".json") && m.location != spec)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job was not published again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A worker process (another Db on the bucket with a worker) runs it; the drain ends.
    let mut worker_config = config;
    worker_config.jobs.inprocess_workers = 1;
    let worker_dir = tempfile::tempdir().unwrap();
    let worker = open(&store, worker_dir.path(), worker_config).await;
    tokio::time::timeout(std::time::Duration::from_secs(30), drain)
        .await
        .expect("the drain finished")
        .unwrap()
        .unwrap();
    let got = t.get(&[Value::Int(7)], None, None).await.unwrap().unwrap();
    assert_eq!(
        decode(&got),
        vec![(7, Some(texts(&[7])[0].clone()), Some(21))]
    );
    worker.close().await;
    db.close().await;
}

/// A column group moves down the S3 levels on its own, so the parts of one version can
/// sit at different levels: here the newest upsert's `a` part over an older delete stays
/// in level 1 while its `b` part moves to level 2. A point read must not take the delete
/// under `a` for the end of `b`'s history (it returned the row with `b` NULL: found by
/// the fault simulation, seed 781).
#[tokio::test]
async fn a_point_read_gathers_the_parts_of_a_version_across_levels() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&store, dir.path(), small_config()).await;
    // Groups `b` then `a` on both S3 levels.
    db.create_table_with_layout("t", schema(), &["id"], layout(2))
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1, 2], &[Some("x"), Some("o")], &[Some(1), Some(9)]))
        .await
        .unwrap();
    // The first versions down in level 2, so level 1 is not the bottom and keeps deletes.
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 0).await.unwrap();
    t.compact_column_group(0, 1).await.unwrap();
    t.delete(keys(&[1])).await.unwrap();
    // A pinned snapshot keeps the delete beneath the newer upsert through compaction.
    let pinned = t.snapshot();
    t.upsert(rows(&[1], &[Some("y")], &[Some(2)]))
        .await
        .unwrap();
    t.drain_to_bucket().await.unwrap();
    // Group 0 (`b`) of level 1 moves to level 2; group `a` stays.
    t.compact_column_group(0, 0).await.unwrap();
    let got = t.get(&[Value::Int(1)], None, None).await.unwrap().unwrap();
    assert_eq!(decode(&got), vec![(1, Some("y".into()), Some(2))]);
    // The scan agrees, and the snapshot still reads the delete.
    let all = decode(&t.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(
        all,
        vec![
            (1, Some("y".into()), Some(2)),
            (2, Some("o".into()), Some(9))
        ]
    );
    assert!(
        t.get(&[Value::Int(1)], None, Some(&pinned))
            .await
            .unwrap()
            .is_none()
    );
    db.close().await;
}
