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
