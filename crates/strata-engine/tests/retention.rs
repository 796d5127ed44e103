//! Retention (HotRAP §3.5): when the last NVMe level moves to S3, the records the hotness
//! tracker calls hot stay on NVMe too. Reads and scans see one version per key, the newest,
//! whether it comes from the retained copy, the S3 copy or a newer write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{decode, rows};
use strata_engine::{ScanOptions, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_records_stay_on_nvme_and_reads_stay_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.hotness.enabled = true;
    config.hotness.nvme_budget_bytes = 1 << 20;
    // The rows stay in the row levels until the drain below moves them (then retention
    // decides what stays): L1's target is above the data.
    config.level_bytes_base = 1 << 20;
    let db = common::open(&store, tmp.path(), config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..300).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("v{i}")).collect();
    let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &a, &b)).await.unwrap();
    t.flush().await.unwrap();
    // Keys 10..20 are read often while on NVMe: the tracker calls them hot.
    for _ in 0..5 {
        for k in 10..20 {
            assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
        }
    }
    let sources = |t: &strata_engine::Table| {
        let s = t.shards().next().unwrap().stats();
        (s.point_reads_nvme, s.point_reads_s3, s.retained_bytes)
    };
    t.drain_to_bucket().await.unwrap();
    let (nvme0, s30, retained) = sources(&t);
    assert!(retained > 0, "nothing retained");
    let stats = t.shards().next().unwrap().stats();
    assert_eq!(stats.ssts_per_level.iter().sum::<usize>(), 1, "{stats:?}");
    assert!(
        stats.s3_files.iter().flatten().sum::<usize>() > 0,
        "{stats:?}"
    );
    // Hot keys are answered by NVMe, cold ones by S3.
    for k in 10..20 {
        assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
    }
    let (nvme1, s31, _) = sources(&t);
    assert_eq!((nvme1 - nvme0, s31 - s30), (10, 0));
    let got = t
        .get(&[Value::Int(200)], None, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decode(&got), vec![(200, Some("v200".into()), Some(200))]);
    assert_eq!(sources(&t).1, s31 + 1);

    // A newer version of a hot key wins over its retained copy.
    t.upsert(rows(&[15], &[Some("new")], &[Some(-15)]))
        .await
        .unwrap();
    let expect = |k: i64| match k {
        15 => (15, Some("new".to_string()), Some(-15)),
        k => (k, Some(format!("v{k}")), Some(k)),
    };
    let check = |label: &'static str| {
        let t = t.clone();
        let db = db.clone();
        async move {
            // The columnar scan of a consistent view (what SQL reads): the retained copies
            // are upper-tier versions over the same versions in the deep S3 level.
            let view = db.view("t", None).await.unwrap();
            let handle = tokio::runtime::Handle::current();
            let scanned = strata_common::exec::blocking(move || {
                let mut out = Vec::new();
                for s in &view.shards {
                    let mut b = s.batches(&[], None, &[0, 1, 2], 64, &handle).unwrap();
                    while let Some(batch) = b.next_batch().unwrap() {
                        out.extend(decode(&batch));
                    }
                }
                out
            })
            .await
            .unwrap();
            let want: Vec<_> = (0..300).map(expect).collect();
            assert_eq!(scanned, want, "{label}: view scan");
            for k in [5, 10, 15, 19, 250] {
                let got = t.get(&[Value::Int(k)], None, None).await.unwrap().unwrap();
                assert_eq!(decode(&got), vec![expect(k)], "{label}: key {k}");
            }
            // Each key once, in order, newest version (the retained copies and the S3 copies
            // are one version).
            let all = t
                .scan(
                    &ScanOptions {
                        start: None,
                        end: None,
                        limit: 10_000,
                        projection: None,
                    },
                    None,
                )
                .await
                .unwrap();
            let want: Vec<_> = (0..300).map(expect).collect();
            assert_eq!(decode(&all), want, "{label}: scan");
        }
    };
    check("after retention").await;
    // Pushing the retained copies (and the newer version) down again, and compacting the
    // S3 levels, changes nothing.
    t.drain_to_bucket().await.unwrap();
    check("after a second drain").await;
    t.compact_column_group(0, 0).await.unwrap();
    check("after S3 compaction").await;
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    check("after NVMe compaction").await;
    db.close().await;
}

/// The ablation switch: with retention off, a drain moves every record to S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_can_be_switched_off() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.hotness.enabled = true;
    config.hotness.retention = false;
    let db = common::open(&store, tmp.path(), config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1, 2], &[Some("a"), Some("b")], &[Some(1), Some(2)]))
        .await
        .unwrap();
    for _ in 0..10 {
        t.get(&[Value::Int(1)], None, None).await.unwrap().unwrap();
    }
    t.drain_to_bucket().await.unwrap();
    let s = t.shards().next().unwrap().stats();
    assert_eq!(s.retained_bytes, 0);
    assert_eq!(s.ssts_per_level.iter().sum::<usize>(), 0, "{s:?}");
    assert!(db.hotness_stats().unwrap().hot_bytes > 0);
    db.close().await;
}
