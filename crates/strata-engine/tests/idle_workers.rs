//! An idle compaction worker backs off (one LIST of `jobs/` per `idle_poll_max_ms` at most
//! once it has been idle a while) and a job published in the same process wakes it at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_back_off_and_wake_on_a_published_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.jobs.poll_ms = 20;
    config.jobs.idle_poll_max_ms = 10_000;
    let (db, metrics) = open_counted(&memory_store(), dir.path(), config).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();

    // Idle for 3 s: waits of 20, 40, 80, ... ms, so a handful of looks instead of 150.
    let before = metrics.requests("list", "jobs");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let looks = metrics.requests("list", "jobs") - before;
    assert!((3..=10).contains(&looks), "{looks} looks in 3 s of idling");

    // The worker now waits about 2.5 s between looks; a job this process publishes wakes it.
    let ids: Vec<i64> = (0..2_000).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
    let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &a, &b)).await.unwrap();
    t.flush().await.unwrap();
    let started = Instant::now();
    t.drain_to_bucket().await.unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1_500),
        "the job waited {took:?} for an idle worker"
    );
    let shard = t.shards().next().unwrap();
    assert!(
        shard
            .manifest()
            .value
            .s3_levels
            .iter()
            .any(|l| l.groups.iter().any(|g| !g.files.is_empty())),
        "the rows moved to the columnar levels"
    );
    db.close().await;
}
