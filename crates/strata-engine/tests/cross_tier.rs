//! NVMe-to-S3 moves keep the NVMe tier near its budget under a bulk load: a cross-tier job
//! takes neighbouring files of the last NVMe level when the level is far over its target,
//! instead of one file per job (each job is a round of publish, lease, Parquet rewrite and
//! commit, so one file per job fell far behind any load and the tier outgrew its budget).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::rows;
use strata_engine::{ScanOptions, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_load_moves_to_s3_in_few_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.levels = 3;
    // The last NVMe level's target: level_bytes_base x multiplier^(levels - 2).
    let last_target =
        config.level_bytes_base * config.level_size_multiplier.pow(config.levels as u32 - 2);
    let db = common::open(&store, tmp.path(), config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let n = 30_000i64;
    let names: Vec<String> = (0..n).map(|i| format!("value-{i:012}-{}", i * 7)).collect();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let a: Vec<Option<&str>> = chunk
            .iter()
            .map(|i| Some(names[*i as usize].as_str()))
            .collect();
        let b: Vec<Option<i64>> = chunk.iter().map(|i| Some(*i)).collect();
        t.upsert(rows(chunk, &a, &b)).await.unwrap();
    }
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    let shard = t.shards().next().unwrap();
    let loaded: u64 = shard.stats().bytes_per_level.iter().sum::<u64>()
        + shard.stats().s3_bytes.iter().flatten().sum::<u64>();
    assert!(
        loaded > 10 * last_target,
        "load {loaded} vs target {last_target}"
    );
    let mut waited = 0;
    loop {
        let s = shard.stats();
        let last = *s.bytes_per_level.last().unwrap();
        if last <= 2 * last_target && s.jobs_outstanding == 0 {
            // Far fewer jobs than files moved (files of sst_bytes_target each).
            let moved_files = (loaded - last) / (8 << 10);
            assert!(
                s.s3_jobs * 4 < moved_files,
                "{} jobs for ~{moved_files} files",
                s.s3_jobs
            );
            break;
        }
        assert!(
            waited < 600,
            "the last NVMe level is still {last} bytes (target {last_target}) after {} jobs",
            s.s3_jobs
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    // Every row is still there, once.
    let all = t
        .scan(
            &ScanOptions {
                start: None,
                end: None,
                limit: 100_000,
                projection: None,
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(all.num_rows(), n as usize);
    let row = t.get(&[Value::Int(4321)], None, None).await.unwrap();
    assert!(row.is_some());
    db.close().await;
}

/// While cross-tier jobs do not drain the last row level (here: no worker runs them),
/// compactions into it stop once it holds four times its target: flushes pile up in L0
/// until the sorted-run limit refuses writes, instead of every compaction rewriting an
/// ever larger level. When jobs run again the level drains and L0 compacts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_row_level_stays_bounded_while_jobs_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.jobs.inprocess_workers = 0;
    config.memtable_bytes_max = 64 << 10;
    let target = config.level_bytes_base; // L1, the last row level at the default 2 levels
    let db = common::open(&store, tmp.path(), config.clone()).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    // Uniform overwrites of 20,000 keys (about 1 MB, 16 times L1's target): every
    // compaction into L1 overlaps all of it.
    let n = 20_000i64;
    let names: Vec<String> = (0..n).map(|i| format!("value-{i:012}")).collect();
    for round in 0..3i64 {
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let a: Vec<Option<&str>> = chunk
                .iter()
                .map(|i| Some(names[*i as usize].as_str()))
                .collect();
            let b: Vec<Option<i64>> = chunk.iter().map(|_| Some(round)).collect();
            t.upsert(rows(chunk, &a, &b)).await.unwrap();
        }
        t.flush().await.unwrap();
        t.compact().await.unwrap();
    }
    let stats = t.shards().next().unwrap().stats();
    // Held at 4x its target; the compaction that crossed it may add one L0 job's bytes
    // (a trigger's worth of memtable flushes; twice that for encoding overhead).
    let one_job = 2 * config.l0_compaction_trigger as u64 * config.memtable_bytes_max as u64;
    assert!(
        stats.bytes_per_level[1] <= 4 * target + one_job,
        "L1 grew to {} bytes (target {target}): {stats:?}",
        stats.bytes_per_level[1]
    );
    assert!(
        stats.ssts_per_level[0] > 1,
        "L0 should hold the backlog: {stats:?}"
    );
    drop(t);
    db.close().await;

    // A worker drains L1 into the columnar levels; L0 compacts again.
    config.jobs.inprocess_workers = 1;
    let db = common::open(&store, tmp.path(), config).await;
    let t = db.table("t").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        t.compact().await.unwrap();
        let s = t.shards().next().unwrap().stats();
        if s.ssts_per_level[0] == 0 && s.bytes_per_level[1] <= 4 * target {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "L0 never drained: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = common::decode(&t.scan(&ScanOptions::default(), None).await.unwrap());
    assert_eq!(got.len(), n as usize);
    assert!(got.iter().all(|r| r.2 == Some(2)), "newest round wins");
    db.close().await;
}
