//! LASER's shape at the default level layout: the row-oriented part of a shard (memtable,
//! L0, a small L1) stays bounded, and once writes pause the tree settles into its columnar
//! levels without anyone draining it, even when L0 never reached its compaction trigger.
//! Every row stays readable throughout, by scan and by point read (the latter through the
//! decoded-page cache on repeat).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::rows;
use strata_engine::{EngineConfig, ScanOptions, Value};

/// `small_config` scaled down, keeping the default's shape: two row levels, L0 settling.
fn config() -> EngineConfig {
    let mut c = common::small_config();
    let d = EngineConfig::default();
    assert_eq!(d.levels, 2, "the default row levels are L0 and L1");
    assert!(d.l0_settle_ms > 0, "L0 settles by default");
    c.levels = d.levels;
    c.l0_compaction_trigger = d.l0_compaction_trigger;
    c.l0_settle_ms = 300;
    c.memtable_bytes_max = 16 << 10;
    c.level_bytes_base = 32 << 10;
    c
}

async fn scan_all(t: &strata_engine::Table) -> Vec<(i64, Option<String>, Option<i64>)> {
    let opts = ScanOptions {
        limit: usize::MAX,
        ..Default::default()
    };
    common::decode(&t.scan(&opts, None).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_load_settles_into_the_columnar_levels() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let config = config();
    let l1_target = config.level_bytes_base;
    let db = common::open(&store, tmp.path(), config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let n = 6_000i64;
    let names: Vec<String> = (0..n).map(|i| format!("value-{i:08}-{}", i * 13)).collect();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let a: Vec<Option<&str>> = chunk
            .iter()
            .map(|i| Some(names[*i as usize].as_str()))
            .collect();
        let b: Vec<Option<i64>> = chunk.iter().map(|i| Some(*i)).collect();
        t.upsert(rows(chunk, &a, &b)).await.unwrap();
    }
    // Rewrite a few rows and delete some, then leave the shard alone.
    let upd: Vec<i64> = (0..n).step_by(50).collect();
    let a: Vec<Option<&str>> = upd.iter().map(|_| Some("rewritten")).collect();
    let b: Vec<Option<i64>> = upd.iter().map(|i| Some(-i)).collect();
    t.upsert(rows(&upd, &a, &b)).await.unwrap();
    let gone: Vec<i64> = (1..n).step_by(97).collect();
    t.delete(common::keys(&gone)).await.unwrap();
    t.flush().await.unwrap();

    let shard = t.shards().next().unwrap();
    let mut waited = 0;
    loop {
        let s = shard.stats();
        let columnar: u64 = s.s3_bytes.iter().flatten().sum();
        if s.ssts_per_level[0] == 0
            && s.bytes_per_level[1] <= 2 * l1_target
            && s.jobs_outstanding == 0
            && columnar > 0
        {
            let rows_part: u64 = s.bytes_per_level.iter().sum();
            assert!(
                columnar > rows_part,
                "most data is columnar once settled: {columnar} columnar, {rows_part} in rows"
            );
            break;
        }
        assert!(
            waited < 300,
            "the tree did not settle: L0 {} files, L1 {} bytes (target {l1_target}), {} jobs, {columnar} columnar bytes",
            s.ssts_per_level[0],
            s.bytes_per_level[1],
            s.jobs_outstanding,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }

    // Every acknowledged write reads back, by scan and by point read (twice: the second
    // comes from the decoded-page cache).
    let expect = |i: i64| -> Option<(i64, Option<String>, Option<i64>)> {
        if (1..n).step_by(97).any(|g| g == i) {
            None
        } else if i % 50 == 0 {
            Some((i, Some("rewritten".into()), Some(-i)))
        } else {
            Some((i, Some(names[i as usize].clone()), Some(i)))
        }
    };
    let want: Vec<_> = (0..n).filter_map(expect).collect();
    assert_eq!(scan_all(&t).await, want);
    let (_, _, hits_before, _) = db.page_cache_stats();
    for _ in 0..2 {
        for i in (0..n).step_by(37) {
            let got = t.get(&[Value::Int(i)], None, None).await.unwrap();
            let got = got.map(|b| common::decode(&b).pop().unwrap());
            assert_eq!(got, expect(i), "key {i}");
        }
    }
    let (bytes, pages, hits, misses) = db.page_cache_stats();
    assert!(
        misses > 0 && pages > 0 && bytes > 0,
        "lookups into columnar levels decode pages"
    );
    assert!(
        hits > hits_before,
        "repeated lookups are answered from decoded pages ({hits} hits, {misses} misses)"
    );
}

/// A load smaller than a memtable, then nothing: the memtable is flushed once it has been
/// idle for `memtable_settle_ms`, and its rows settle into the columnar levels instead of
/// staying in memory, read row by row by every scan, until more writes come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_memtable_is_flushed_and_settles() {
    assert!(
        EngineConfig::default().memtable_settle_ms > 0,
        "an idle memtable is flushed by default"
    );
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = config();
    config.memtable_bytes_max = 64 << 20;
    config.memtable_settle_ms = 300;
    let db = common::open(&store, tmp.path(), config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let keys: Vec<i64> = (0..2_000).collect();
    let a: Vec<Option<&str>> = keys.iter().map(|_| Some("loaded")).collect();
    let b: Vec<Option<i64>> = keys.iter().map(|i| Some(i * 3)).collect();
    for chunk in 0..4 {
        let part = &keys[chunk * 500..(chunk + 1) * 500];
        t.upsert(rows(part, &a[..500], &b[chunk * 500..(chunk + 1) * 500]))
            .await
            .unwrap();
    }
    let shard = t.shards().next().unwrap();
    assert_eq!(
        shard.stats().flushes,
        0,
        "below the memtable size: no flush yet"
    );
    let mut waited = 0;
    loop {
        let s = shard.stats();
        let columnar: u64 = s.s3_bytes.iter().flatten().sum();
        if s.flushes > 0 && s.ssts_per_level[0] == 0 && columnar > 0 {
            break;
        }
        assert!(
            waited < 300,
            "the idle memtable did not settle: {} flushes, L0 {} files, {columnar} columnar bytes",
            s.flushes,
            s.ssts_per_level[0]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    let want: Vec<_> = keys
        .iter()
        .map(|i| (*i, Some("loaded".to_string()), Some(i * 3)))
        .collect();
    assert_eq!(scan_all(&t).await, want);
    // One flush for the idle memtable, not one per settle period.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(shard.stats().flushes, 1, "an empty memtable is not flushed");
}
