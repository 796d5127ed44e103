//! Point reads are counted by the tier that answered them (memtable, NVMe level, S3): the
//! NVMe hit rate of the metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::rows;
use strata_engine::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_count_the_tier_that_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let db = common::open(&store, tmp.path(), common::small_config()).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let counts = |t: &strata_engine::Table| {
        let s = t.shards().next().unwrap().stats();
        (s.point_reads_memtable, s.point_reads_nvme, s.point_reads_s3)
    };
    // Key 1 goes to S3, key 2 to an NVMe SST, key 3 stays in the memtable.
    t.upsert(rows(&[1], &[Some("one")], &[Some(1)]))
        .await
        .unwrap();
    t.drain_to_s3().await.unwrap();
    t.upsert(rows(&[2], &[Some("two")], &[Some(2)]))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.upsert(rows(&[3], &[Some("three")], &[Some(3)]))
        .await
        .unwrap();
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
