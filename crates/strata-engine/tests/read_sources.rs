//! Point reads are counted by the tier that answered them (memtable, NVMe level, S3): the
//! NVMe hit rate of the metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::rows;
use strata_engine::Value;

/// Key 1 in S3, key 2 in an NVMe SST, key 3 in the memtable.
async fn three_tiers(t: &strata_engine::Table) {
    t.upsert(rows(&[1], &[Some("one")], &[Some(1)]))
        .await
        .unwrap();
    t.drain_to_bucket().await.unwrap();
    t.upsert(rows(&[2], &[Some("two")], &[Some(2)]))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.upsert(rows(&[3], &[Some("three")], &[Some(3)]))
        .await
        .unwrap();
}

/// A `Db` on `store` with the table `t` (the common schema, keyed by `id`) created.
async fn open_with_t(
    store: &strata_objstore::StoreRef,
    dir: &std::path::Path,
    config: strata_engine::EngineConfig,
) -> (strata_engine::Db, strata_engine::Table) {
    let db = common::open(store, dir, config).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    (db, t)
}

/// Point reads so far by the tier that answered: (memtable, NVMe, S3).
fn counts(t: &strata_engine::Table) -> (u64, u64, u64) {
    let s = t.shards().next().unwrap().stats();
    (s.point_reads_memtable, s.point_reads_nvme, s.point_reads_s3)
}

/// The hotness tracker's key of a key of `t` (shard 0): table id, shard id, encoded key.
async fn tracker_key(
    db: &strata_engine::Db,
    t: &strata_engine::Table,
) -> impl Fn(i64) -> Vec<u8> + use<> {
    let id = db.describe("t").await.unwrap().id;
    let schema = t.table_schema().clone();
    move |k| {
        let mut out = id.to_be_bytes().to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend(schema.encode_key(&[Value::Int(k)]).unwrap());
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_count_the_tier_that_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let (db, t) = open_with_t(&store, tmp.path(), common::small_config()).await;
    three_tiers(&t).await;
    assert_eq!(counts(&t), (0, 0, 0));
    for (id, want) in [(3, (1, 0, 0)), (2, (1, 1, 0)), (1, (1, 1, 1))] {
        let got = t.get(&[Value::Int(id)], None, None).await.unwrap();
        assert_eq!(got.map(|b| b.num_rows()), Some(1), "key {id}");
        assert_eq!(counts(&t), want, "after reading key {id}");
    }
    // A key that is nowhere had to ask S3 too.
    assert!(t.get(&[Value::Int(9)], None, None).await.unwrap().is_none());
    assert_eq!(counts(&t), (1, 1, 2));
    db.close().await;
}

/// With the hotness tracker on, every point read that finds a row enters it: a key read
/// over and over is hot, one never read is not, and losing the tracker (a restart) loses
/// only warmth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_feed_the_hotness_tracker() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.hotness.enabled = true;
    config.hotness.nvme_budget_bytes = 1 << 20;
    let (db, t) = open_with_t(&store, tmp.path(), config.clone()).await;
    let ids: Vec<i64> = (0..100).collect();
    let names: Vec<Option<&str>> = ids.iter().map(|_| Some("some value")).collect();
    let nums: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
    t.upsert(rows(&ids, &names, &nums)).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    for _ in 0..20 {
        assert!(t.get(&[Value::Int(7)], None, None).await.unwrap().is_some());
    }
    // A miss is not an access.
    assert!(
        t.get(&[Value::Int(1000)], None, None)
            .await
            .unwrap()
            .is_none()
    );
    let s = db.hotness_stats().expect("tracker on");
    assert_eq!(s.records, 1, "{s:?}");
    assert!(s.hot_bytes > 0, "{s:?}");
    let tracker = db.hotness().unwrap();
    let key = tracker_key(&db, &t).await;
    assert!(tracker.is_hot(&key(7)));
    assert!(!tracker.is_hot(&key(8)));
    db.close().await;
    drop(db);
    let db = common::open(&store, tmp.path(), config).await;
    assert_eq!(db.hotness_stats().unwrap().records, 0);
}

/// A point read through a view (what SQL over a single key runs) reports to the shard as
/// `Table::get` does: the tier that answered, and the access to the hotness tracker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_through_a_view_count_and_feed_the_tracker() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.hotness.enabled = true;
    config.hotness.nvme_budget_bytes = 1 << 20;
    let (db, t) = open_with_t(&store, tmp.path(), config).await;
    three_tiers(&t).await;
    assert_eq!(counts(&t), (0, 0, 0));
    for (id, name, want) in [
        (3, "three", (1, 0, 0)),
        (2, "two", (1, 1, 0)),
        (1, "one", (1, 1, 1)),
    ] {
        assert_eq!(
            common::view_point(&db, "t", id).await,
            Some((id, Some(name.to_string()), Some(id))),
            "key {id}"
        );
        assert_eq!(counts(&t), want, "after reading key {id}");
    }
    assert_eq!(common::view_point(&db, "t", 9).await, None);
    assert_eq!(counts(&t), (1, 1, 2), "a key that is nowhere asked S3 too");
    for _ in 0..20 {
        common::view_point(&db, "t", 1).await.unwrap();
    }
    let tracker = db.hotness().unwrap();
    let key = tracker_key(&db, &t).await;
    assert!(tracker.is_hot(&key(1)), "a key read over and over is hot");
    assert!(!tracker.is_hot(&key(9)), "a miss is not an access");
    db.close().await;
}

/// A loop of point reads answered from memory never waits on anything, yet it yields the
/// thread within a bounded number of reads (tokio's cooperative budget, one unit per two
/// reads), so a task queued behind it on the same thread (a flush, a compaction, another
/// client) gets its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_loop_of_reads_from_memory_yields_the_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let (db, t) = open_with_t(&store, tmp.path(), common::small_config()).await;
    t.upsert(rows(&[1], &[Some("one")], &[Some(1)]))
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let other_ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        // Queued on this (the only) worker behind the reader: it runs only when the
        // reader yields.
        tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) });
        for i in 0..10_000 {
            let got = t.get(&[Value::Int(1)], None, None).await.unwrap();
            assert_eq!(got.map(|b| b.num_rows()), Some(1));
            if other_ran.load(std::sync::atomic::Ordering::SeqCst) {
                return Some(i + 1);
            }
        }
        None
    });
    let reads = reader.await.unwrap();
    assert!(
        reads.is_some_and(|n| n <= 512),
        "the other task ran after {reads:?} reads"
    );
    db.close().await;
}

/// A point read of a key that has left the memtable for a row SST reads and decodes the
/// block once; repeats are answered from the process's decoded blocks (no file read),
/// newer writes in the memtable and in newer files still win, and once the row files are
/// retired their blocks still held never answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_point_reads_into_row_ssts_come_from_decoded_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut config = common::small_config();
    config.l0_settle_ms = 0;
    config.memtable_settle_ms = 0;
    config.l0_compaction_trigger = 100;
    let (db, t) = open_with_t(&store, tmp.path(), config).await;
    let keys: Vec<i64> = (0..200).collect();
    let names: Vec<String> = keys.iter().map(|k| format!("name-{k}")).collect();
    let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = keys.iter().map(|k| Some(k * 3)).collect();
    t.upsert(rows(&keys, &a, &b)).await.unwrap();
    t.flush().await.unwrap();
    assert!(t.shards().next().unwrap().stats().ssts_per_level[0] > 0);
    let get = |k: i64| {
        let t = t.clone();
        async move {
            let got = t.get(&[Value::Int(k)], None, None).await.unwrap();
            got.map(|b| common::decode(&b).pop().unwrap())
        }
    };
    let want = |k: i64| Some((k, Some(format!("name-{k}")), Some(k * 3)));
    for k in 0..200 {
        assert_eq!(get(k).await, want(k), "key {k}");
    }
    let (bytes, blocks, _, read) = db.row_block_cache_stats();
    assert!(
        read > 0 && blocks > 0 && bytes > 0,
        "the first reads read blocks"
    );
    for k in 0..200 {
        assert_eq!(get(k).await, want(k), "key {k} again");
    }
    let (_, _, hits, read_again) = db.row_block_cache_stats();
    assert_eq!(read_again, read, "no block read twice");
    assert!(hits >= 200, "{hits} hits");
    assert_eq!(counts(&t).1, 400, "every read answered by the NVMe tier");

    // A newer version in the memtable is read first; once flushed too, the newer file's
    // block is read and the older file's cached block does not answer for the key.
    t.upsert(rows(&[7], &[Some("seven")], &[Some(-7)]))
        .await
        .unwrap();
    assert_eq!(get(7).await, Some((7, Some("seven".into()), Some(-7))));
    t.flush().await.unwrap();
    assert_eq!(get(7).await, Some((7, Some("seven".into()), Some(-7))));
    assert_eq!(get(8).await, want(8));
    t.drain_to_bucket().await.unwrap();
    let stats = t.shards().next().unwrap().stats();
    assert_eq!(
        stats.ssts_per_level.iter().sum::<usize>(),
        0,
        "no row file left"
    );
    let s3_before = counts(&t).2;
    for k in 0..200 {
        let w = if k == 7 {
            Some((7, Some("seven".into()), Some(-7)))
        } else {
            want(k)
        };
        assert_eq!(get(k).await, w, "key {k} after the drain");
    }
    assert_eq!(
        counts(&t).2 - s3_before,
        200,
        "every read went to the columnar levels"
    );
}
