//! LASER §4 through the public API: partial updates merge column by column with older
//! versions wherever those live (memtable, L0, deeper levels); deletes hide everything older.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use common::{strs, wide, wide_batch as batch};

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use strata_engine::{ScanOptions, Value};

#[tokio::test]
async fn laser_partial_update_across_levels() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&common::memory_store(), dir.path(), common::small_config()).await;
    db.create_table("laser", wide(), &["k"]).await.unwrap();
    let t = db.table("laser").await.unwrap();
    let k = |v: &[i64]| -> ArrayRef { Arc::new(Int64Array::from(v.to_vec())) };
    // 100: a,b,c,d — pushed down to L1 by a flush and a compaction.
    t.upsert(batch(&[
        ("k", k(&[100, 108])),
        ("a", strs(&["a", "a8"])),
        ("b", strs(&["b", "b8"])),
        ("c", strs(&["c", "c8"])),
        ("d", strs(&["d", "d8"])),
    ]))
    .await
    .unwrap();
    t.flush().await.unwrap();
    t.upsert(batch(&[
        ("k", k(&[1])),
        ("a", strs(&["x"])),
        ("b", strs(&["x"])),
        ("c", strs(&["x"])),
        ("d", strs(&["x"])),
    ]))
    .await
    .unwrap();
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    let stats = t.shards().next().unwrap().stats();
    assert!(stats.ssts_per_level[1] > 0, "data reached L1: {stats:?}");
    // 100: -,b',c',- in L0; 108: A,B newer in the memtable (Fig. 5: C,D from deeper).
    t.update(batch(&[
        ("k", k(&[100])),
        ("b", strs(&["b'"])),
        ("c", strs(&["c'"])),
    ]))
    .await
    .unwrap();
    t.flush().await.unwrap();
    t.update(batch(&[
        ("k", k(&[108])),
        ("a", strs(&["A8"])),
        ("b", strs(&["B8"])),
    ]))
    .await
    .unwrap();

    let row = t
        .get(&[Value::Int(100)], None, None)
        .await
        .unwrap()
        .unwrap();
    let col = |b: &RecordBatch, n: &str| {
        b.column_by_name(n)
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .value(0)
            .to_string()
    };
    assert_eq!(
        ["a", "b", "c", "d"].map(|c| col(&row, c)),
        ["a", "b'", "c'", "d"]
    );

    let scan = t
        .scan(
            &ScanOptions {
                start: Some(vec![Value::Int(100)]),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(scan.num_rows(), 2);
    let s = scan
        .column_by_name("a")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let d = scan
        .column_by_name("d")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(
        (s.value(1), d.value(1)),
        ("A8", "d8"),
        "key 108 takes A,B from the newest level and C,D from a deeper one"
    );

    // A delete hides older versions; a later partial row starts from NULLs.
    t.delete(batch(&[("k", k(&[100]))])).await.unwrap();
    assert!(
        t.get(&[Value::Int(100)], None, None)
            .await
            .unwrap()
            .is_none()
    );
    t.update(batch(&[("k", k(&[100])), ("d", strs(&["d2"]))]))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    let row = t
        .get(&[Value::Int(100)], None, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        arrow::array::Array::is_null(row.column_by_name("a").unwrap().as_ref(), 0),
        "no resurrection after delete"
    );
    assert_eq!(col(&row, "d"), "d2");
    db.close().await;
}
