//! Crash recovery: a child process writing with `remote` durability is killed with SIGKILL
//! mid-load, its local directory is deleted, and a new process reopening from the bucket
//! alone finds every acknowledged write and nothing that was not written. Runs against the
//! local-directory store and against LocalStack S3.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use strata_engine::{Db, DbConfig, ScanOptions};
use strata_objstore::{ObjectStoreConfig, ObjectStoreMetrics};

const CHILD_ENV: &str = "STRATA_RECOVERY_CHILD";

fn value_of(i: i64) -> String {
    format!("value-{i}-{}", "p".repeat((i % 7) as usize * 10))
}

/// The child: writes rows 0.. one batch at a time, printing `ACK <last id>` after each
/// acknowledgement, until killed.
#[tokio::test]
async fn child_writer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let config: ObjectStoreConfig = serde_json::from_str(&spec).unwrap();
    let local = std::env::var("STRATA_CHILD_LOCAL").unwrap();
    let prefix = std::env::var("STRATA_CHILD_PREFIX").unwrap();
    let mut engine = small_config();
    engine.root_prefix = prefix;
    engine.memtable_bytes_max = 16 << 10;
    let db = Db::open(DbConfig {
        store: config,
        local_dir: local.into(),
        engine,
    })
    .await
    .unwrap();
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let mut id = 0i64;
    loop {
        let ids: Vec<i64> = (id..id + 5).collect();
        let vals: Vec<String> = ids.iter().map(|i| value_of(*i)).collect();
        let a: Vec<Option<&str>> = vals.iter().map(|v| Some(v.as_str())).collect();
        let b: Vec<Option<i64>> = ids.iter().map(|i| Some(i * 2)).collect();
        t.upsert(rows(&ids, &a, &b)).await.unwrap();
        id += 5;
        println!("ACK {}", id - 1);
    }
}

fn run_and_kill(
    config: &ObjectStoreConfig,
    prefix: &str,
    local: &std::path::Path,
    acks_wanted: i64,
) -> i64 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, serde_json::to_string(config).unwrap())
        .env("STRATA_CHILD_LOCAL", local)
        .env("STRATA_CHILD_PREFIX", prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last_ack = -1i64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("ACK ") {
            last_ack = n.trim().parse().unwrap();
            if last_ack >= acks_wanted || std::time::Instant::now() > deadline {
                break;
            }
        }
    }
    // SIGKILL: no clean shutdown, writes in flight.
    child.kill().unwrap();
    child.wait().unwrap();
    last_ack
}

async fn crash_and_recover(config: ObjectStoreConfig, acks_wanted: i64) {
    let prefix = unique_prefix("recovery");
    let local = tempfile::tempdir().unwrap();
    let last_ack = run_and_kill(&config, &prefix, local.path(), acks_wanted);
    assert!(last_ack >= 0, "the child acknowledged nothing");
    std::fs::remove_dir_all(local.path()).unwrap();

    let fresh = tempfile::tempdir().unwrap();
    let mut engine = small_config();
    engine.root_prefix = prefix;
    let metrics = ObjectStoreMetrics::default();
    let (store, _) = strata_objstore::build(&config, &metrics).await.unwrap();
    let db = Db::open_with_store(
        store,
        None,
        metrics,
        fresh.path().into(),
        engine,
        strata_common::clock::system(),
    )
    .await
    .unwrap();
    let t = db.table("t").await.unwrap();
    let got = decode(&t.scan(&ScanOptions::default(), None).await.unwrap());
    // Every acknowledged write is there ...
    assert!(
        got.len() as i64 > last_ack,
        "lost acknowledged writes: {} rows, last ack {last_ack}",
        got.len()
    );
    // ... and every row present was written exactly as written (in-flight batches may or
    // may not have landed, but only whole).
    for (i, (id, a, b)) in got.iter().enumerate() {
        assert_eq!(*id, i as i64, "rows must be a gap-free prefix");
        assert_eq!(a.as_deref(), Some(value_of(*id).as_str()));
        assert_eq!(*b, Some(id * 2));
    }
    assert_eq!(got.len() % 5, 0, "a batch is atomic");
    let stats = t.shards().next().unwrap().stats();
    eprintln!(
        "recovered {} rows (last ack {last_ack}); levels {:?}",
        got.len(),
        stats.ssts_per_level
    );
    db.close().await;
}

#[tokio::test]
async fn sigkill_mid_load_recovers_from_local_dir_bucket() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let bucket = tempfile::tempdir().unwrap();
    crash_and_recover(ObjectStoreConfig::local(bucket.path()), 1500).await;
}

#[tokio::test]
async fn sigkill_mid_load_recovers_from_localstack() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let Some(config) = s3_config() else { return };
    crash_and_recover(config, 400).await;
}

/// A trickle of one-row writes (one WAL segment each) is flushed once the memtable spans
/// `memtable_wal_segments_max` segments, however small it is, so a reopen replays at most
/// that many segments; everything written reads back after the reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_of_writes_is_flushed_by_segment_count() {
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config = small_config();
    config.memtable_bytes_max = 64 << 20;
    config.memtable_wal_segments_max = 50;
    let db = open(&store, d1.path(), config.clone()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    for i in 0..120i64 {
        t.upsert(rows(&[i], &[Some("x")], &[Some(i)]))
            .await
            .unwrap();
    }
    // Flushes run in the background: the second (at 100 segments) may still be under way.
    let shard = t.shards().next().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shard.stats().flushes < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let stats = shard.stats();
    assert!(stats.flushes >= 2, "{stats:?}");
    drop(t);
    drop(db);
    let db = open(&store, d2.path(), config).await;
    let t = db.table("t").await.unwrap();
    let got = decode(&t.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(got.len(), 120);
    db.close().await;
}
