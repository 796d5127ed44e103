//! Promotion (HotRAP §3.3–§3.4): records read from S3 go through the promotion cache to
//! L0 (by flush) or into an NVMe-to-S3 job's retained records (by compaction), and a
//! promoted or retained record never hides a newer version.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{decode, rows};
use strata_engine::{Db, ScanOptions, Table, Value};

fn config() -> strata_engine::EngineConfig {
    let mut c = common::small_config();
    c.hotness.enabled = true;
    c.hotness.nvme_budget_bytes = 1 << 20;
    c.hotness.promotion_cache_bytes = 1 << 10;
    c
}

type Sources = (u64, u64, u64, u64);

fn sources(t: &Table) -> Sources {
    let s = t.shards().next().unwrap().stats();
    (
        s.point_reads_memtable + s.point_reads_nvme,
        s.point_reads_promotion_cache,
        s.point_reads_s3,
        s.promoted_flush_bytes,
    )
}

async fn get(t: &Table, k: i64) -> Option<(i64, Option<String>, Option<i64>)> {
    t.get(&[Value::Int(k)], None, None)
        .await
        .unwrap()
        .map(|b| decode(&b).remove(0))
}

/// Table `t` with keys 0..200 (`a` = "v<k>", `b` = k), all drained to S3.
async fn in_s3(local: &std::path::Path) -> (Db, Table) {
    let db = common::open(&common::memory_store(), local, config()).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..200).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("v{i}")).collect();
    let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &a, &b)).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    (db, t)
}

/// Every row through the engine's scan and through the columnar view scan (what SQL reads).
async fn everything(db: &Db, t: &Table) -> Vec<(i64, Option<String>, Option<i64>)> {
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
    let all = decode(&all);
    assert_eq!(all, scanned, "engine scan and view scan differ");
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_s3_are_promoted_and_newer_versions_win() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, t) = in_s3(tmp.path()).await;
    assert_eq!(
        t.shards()
            .next()
            .unwrap()
            .stats()
            .ssts_per_level
            .iter()
            .sum::<usize>(),
        0
    );

    // First read: S3, then the promotion cache.
    let s0 = sources(&t);
    assert_eq!(get(&t, 5).await, Some((5, Some("v5".into()), Some(5))));
    let s1 = sources(&t);
    assert_eq!((s1.2 - s0.2, s1.1 - s0.1), (1, 0));
    assert_eq!(get(&t, 5).await, Some((5, Some("v5".into()), Some(5))));
    assert_eq!(
        sources(&t).1 - s1.1,
        1,
        "second read from the promotion cache"
    );

    // Reading keys 0..40 over and over makes them hot and fills the cache: promoted to L0.
    for _ in 0..4 {
        for k in 0..40 {
            assert_eq!(get(&t, k).await.unwrap().2, Some(k));
        }
    }
    // Promotion by flush runs in rounds in the background (a cache full again when a round
    // ends is flushed again): wait until one has committed and no round is running (the
    // promoted bytes stay put and the cache is below its size).
    let mut waited = 0;
    let mut last = sources(&t).3;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sources(&t).3;
        let cached = t.shards().next().unwrap().stats().promotion_cache_bytes;
        if now > 0 && now == last && cached < 1 << 10 {
            break;
        }
        assert!(
            waited < 100,
            "no promotion by flush settled: {:?}",
            sources(&t)
        );
        last = now;
        waited += 1;
    }
    let before = sources(&t);
    for k in 0..40 {
        get(&t, k).await.unwrap();
    }
    let after = sources(&t);
    // None of them goes to S3 any more: NVMe (promoted) or the cache (not yet flushed).
    assert_eq!(after.2, before.2, "{before:?} -> {after:?}");
    assert!(
        after.0 - before.0 >= 10,
        "promoted keys read from NVMe: {before:?} -> {after:?}"
    );

    // A newer version of a promoted key wins, everywhere, through every move.
    t.upsert(rows(&[5], &[Some("new")], &[Some(-5)]))
        .await
        .unwrap();
    let want: Vec<_> = (0..200)
        .map(|k| match k {
            5 => (5, Some("new".to_string()), Some(-5)),
            k => (k, Some(format!("v{k}")), Some(k)),
        })
        .collect();
    for step in ["promoted", "drained", "s3-compacted", "nvme-compacted"] {
        match step {
            "drained" => t.drain_to_bucket().await.unwrap(),
            "s3-compacted" => t.compact_column_group(0, 0).await.unwrap(),
            "nvme-compacted" => {
                t.flush().await.unwrap();
                t.compact().await.unwrap()
            }
            _ => {}
        }
        for k in [0, 5, 39, 150] {
            assert_eq!(
                get(&t, k).await,
                Some(want[k as usize].clone()),
                "{step}: key {k}"
            );
        }
        assert_eq!(everything(&db, &t).await, want, "{step}");
    }
    db.close().await;
}

/// A read-only workload flushes no memtable, so L0 grows by promotions alone: they start
/// compactions (L0 stayed at dozens of SSTs in the HotRAP loadtest before), and the
/// promoted records stay readable from NVMe as they move down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotions_alone_start_compactions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut c = config();
    c.hotness.promotion_cache_bytes = 512;
    let db = common::open(&store, tmp.path(), c).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..2000).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("value-{i:08}")).collect();
    let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &a, &b)).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    // Hot keys 0..300, read in rounds: each round fills the small cache many times over.
    for _ in 0..6 {
        for k in 0..300 {
            assert_eq!(get(&t, k).await.unwrap().2, Some(k));
        }
    }
    let shard = t.shards().next().unwrap();
    // Promotion by flush runs in the background: reads answered from memory may finish
    // the rounds before it commits.
    let mut waited = 0;
    while shard.stats().promoted_flush_bytes == 0 {
        assert!(waited < 100, "nothing promoted");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    // On a loaded machine promotion lags the reads: read the hot keys until nearly all are
    // answered without S3, so that the check after compaction counts keys that were on
    // NVMe before it, not keys never promoted.
    let mut rounds = 0;
    loop {
        let before = sources(&t);
        for k in 0..300 {
            assert_eq!(get(&t, k).await.unwrap().2, Some(k));
        }
        let from_s3 = sources(&t).2 - before.2;
        if from_s3 < 30 {
            break;
        }
        assert!(
            rounds < 100,
            "hot keys never promoted: {from_s3} of 300 read from S3 after {rounds} rounds"
        );
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // On a busy machine promotions coalesce into fewer, larger L0 files, which may stay
    // under the trigger: more rounds of reads promote more, until compactions start.
    let trigger = 2;
    let mut waited = 0;
    loop {
        let stats = shard.stats();
        let (l0, deeper) = (
            stats.ssts_per_level[0],
            stats.ssts_per_level[1..].iter().sum::<usize>(),
        );
        if l0 <= trigger && deeper > 0 {
            break;
        }
        assert!(
            waited < 400,
            "after promotions L0 holds {l0} SSTs (trigger {trigger}) and deeper levels \
             {deeper}: promoted records never compacted down"
        );
        if waited % 20 == 19 {
            for k in 0..300 {
                assert_eq!(get(&t, k).await.unwrap().2, Some(k));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let before = sources(&t);
    for k in 0..300 {
        assert_eq!(get(&t, k).await.unwrap().2, Some(k));
    }
    let after = sources(&t);
    assert!(
        after.2 - before.2 < 30,
        "hot keys went back to S3 after compaction: {before:?} -> {after:?}"
    );
    db.close().await;
}

/// Concurrent updates to keys being promoted, drains and compactions running, reads
/// checked: a reader never sees a key go back to an older version, and at the end every
/// key holds its last acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_races_never_resurrect_old_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let db = common::open(&store, tmp.path(), config()).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    const KEYS: i64 = 60;
    let ids: Vec<i64> = (0..KEYS).collect();
    let zeros: Vec<Option<i64>> = ids.iter().map(|_| Some(0)).collect();
    let names: Vec<Option<&str>> = ids.iter().map(|_| Some("w0")).collect();
    t.upsert(rows(&ids, &names, &zeros)).await.unwrap();
    t.drain_to_bucket().await.unwrap();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The writer: version numbers grow per key; the oracle holds the acknowledged ones.
    let oracle = Arc::new(parking_lot::Mutex::new(HashMap::<i64, i64>::new()));
    let writer = {
        let (t, oracle, stop) = (t.clone(), oracle.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let k = (n * 7) % KEYS;
                let name = format!("w{n}");
                t.upsert(rows(&[k], &[Some(name.as_str())], &[Some(n)]))
                    .await
                    .unwrap();
                oracle.lock().insert(k, n);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mover = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                match i % 3 {
                    0 => t.drain_to_bucket().await.unwrap(),
                    1 => t.flush().await.unwrap(),
                    _ => t.compact().await.unwrap(),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut readers = Vec::new();
    for r in 0..2i64 {
        let (t, stop) = (t.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut seen: HashMap<i64, i64> = HashMap::new();
            let mut i = r;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                // Mostly a hot third of the keys, so that they are promoted.
                let k = if i % 4 == 0 { i % KEYS } else { i % (KEYS / 3) };
                let (id, name, v) = get(&t, k).await.expect("every key exists");
                let v = v.unwrap();
                assert_eq!((id, name), (k, Some(format!("w{v}"))), "torn row");
                let last = seen.entry(k).or_insert(0);
                assert!(v >= *last, "key {k} went back from version {last} to {v}");
                *last = v;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    mover.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
    let s = t.shards().next().unwrap().stats();
    eprintln!(
        "promoted by flush {} B, by compaction {} B, retained {} B, aborts {}, reads mem+nvme {} cache {} s3 {}",
        s.promoted_flush_bytes,
        s.promoted_compaction_bytes,
        s.retained_bytes,
        s.promotion_aborts,
        s.point_reads_memtable + s.point_reads_nvme,
        s.point_reads_promotion_cache,
        s.point_reads_s3
    );
    assert!(
        s.promoted_flush_bytes + s.promoted_compaction_bytes > 0,
        "nothing was promoted: {s:?}"
    );
    let oracle = oracle.lock().clone();
    let want: Vec<_> = (0..KEYS)
        .map(|k| {
            let v = oracle.get(&k).copied().unwrap_or(0);
            (k, Some(format!("w{v}")), Some(v))
        })
        .collect();
    for k in 0..KEYS {
        assert_eq!(get(&t, k).await, Some(want[k as usize].clone()), "key {k}");
    }
    assert_eq!(everything(&db, &t).await, want);
    t.drain_to_bucket().await.unwrap();
    assert_eq!(everything(&db, &t).await, want, "after a last drain");
    db.close().await;
}

/// SQL point reads take part in promotion as `Table::get` does: a cold key read from S3
/// enters the promotion cache, the next read is answered by it, and keys read over and
/// over are promoted to L0 by flush; a newer version still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_through_a_view_are_promoted() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, t) = in_s3(tmp.path()).await;

    let s0 = sources(&t);
    assert_eq!(
        common::view_point(&db, "t", 5).await,
        Some((5, Some("v5".into()), Some(5)))
    );
    let s1 = sources(&t);
    assert_eq!((s1.2 - s0.2, s1.1 - s0.1), (1, 0), "first read: S3");
    assert_eq!(
        common::view_point(&db, "t", 5).await,
        Some((5, Some("v5".into()), Some(5)))
    );
    assert_eq!(sources(&t).1 - s1.1, 1, "second read: the promotion cache");

    for _ in 0..4 {
        for k in 0..40 {
            assert_eq!(common::view_point(&db, "t", k).await.unwrap().2, Some(k));
        }
    }
    let mut waited = 0;
    while sources(&t).3 == 0 {
        assert!(waited < 100, "nothing promoted by flush: {:?}", sources(&t));
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    t.upsert(rows(&[7], &[Some("new")], &[Some(-7)]))
        .await
        .unwrap();
    assert_eq!(
        common::view_point(&db, "t", 7).await,
        Some((7, Some("new".into()), Some(-7)))
    );
    assert_eq!(get(&t, 7).await, Some((7, Some("new".into()), Some(-7))));
    let want: Vec<_> = (0..200)
        .map(|k| match k {
            7 => (7, Some("new".to_string()), Some(-7)),
            k => (k, Some(format!("v{k}")), Some(k)),
        })
        .collect();
    assert_eq!(everything(&db, &t).await, want);
    db.close().await;
}
