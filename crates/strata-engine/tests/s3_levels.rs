//! The S3 levels: LASER's worked examples with the versions spread over the memtable, NVMe
//! levels and column groups of two S3 levels; layout validation; damaged objects.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use common::{strs, wide, wide_batch as batch};

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use object_store::{ObjectStoreExt, PutPayload};
use strata_engine::{ScanOptions, Table, Value};

fn k(v: &[i64]) -> ArrayRef {
    Arc::new(Int64Array::from(v.to_vec()))
}

fn g(groups: &[&[&str]]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|cols| cols.iter().map(|c| c.to_string()).collect())
        .collect()
}

/// S1: {a,b} {c,d}; S2: {a} {b} {c,d}.
fn laser_layout() -> Vec<Vec<Vec<String>>> {
    vec![
        g(&[&["a", "b"], &["c", "d"]]),
        g(&[&["a"], &["b"], &["c", "d"]]),
    ]
}

fn cols(b: &RecordBatch, row: usize) -> Vec<Option<String>> {
    ["a", "b", "c", "d"]
        .iter()
        .map(|n| {
            let a = b
                .column_by_name(n)
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            (!a.is_null(row)).then(|| a.value(row).to_string())
        })
        .collect()
}

fn some(v: &[&str]) -> Vec<Option<String>> {
    v.iter().map(|s| Some(s.to_string())).collect()
}

async fn get(t: &Table, key: i64) -> Option<Vec<Option<String>>> {
    t.get(&[Value::Int(key)], None, None)
        .await
        .unwrap()
        .map(|b| cols(&b, 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laser_merges_across_tiers_and_column_groups() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&common::memory_store(), dir.path(), common::small_config()).await;
    db.create_table_with_layout("laser", wide(), &["k"], laser_layout())
        .await
        .unwrap();
    let t = db.table("laser").await.unwrap();
    // 100: a,b,c,d and 108: a8,b8,c8,d8, moved to S3 level 1, then group {a,b} to level 2.
    t.upsert(batch(&[
        ("k", k(&[100, 108])),
        ("a", strs(&["a", "a8"])),
        ("b", strs(&["b", "b8"])),
        ("c", strs(&["c", "c8"])),
        ("d", strs(&["d", "d8"])),
    ]))
    .await
    .unwrap();
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 0).await.unwrap();
    let stats = t.shards().next().unwrap().stats();
    assert_eq!(stats.s3_files[0], vec![0, 1], "{stats:?}");
    assert_eq!(stats.s3_files[1], vec![1, 1, 0], "{stats:?}");
    assert_eq!(stats.ssts_per_level.iter().sum::<usize>(), 0);

    // 100: -,b',c',- moved to S3 level 1 (a partial row in both groups).
    t.update(batch(&[
        ("k", k(&[100])),
        ("b", strs(&["b'"])),
        ("c", strs(&["c'"])),
    ]))
    .await
    .unwrap();
    t.drain_to_bucket().await.unwrap();
    // 108: A,B newer, in an NVMe SST (Fig. 5: C,D come from a deeper level).
    t.update(batch(&[
        ("k", k(&[108])),
        ("a", strs(&["A8"])),
        ("b", strs(&["B8"])),
    ]))
    .await
    .unwrap();
    t.flush().await.unwrap();

    assert_eq!(get(&t, 100).await.unwrap(), some(&["a", "b'", "c'", "d"]));
    assert_eq!(get(&t, 108).await.unwrap(), some(&["A8", "B8", "c8", "d8"]));
    let scan = t.scan(&ScanOptions::default(), None).await.unwrap();
    assert_eq!(scan.num_rows(), 2);
    assert_eq!(cols(&scan, 0), some(&["a", "b'", "c'", "d"]));
    assert_eq!(
        cols(&scan, 1),
        some(&["A8", "B8", "c8", "d8"]),
        "key 108 takes A,B from the newest level and C,D from a deeper one"
    );
    // A projection reads only the groups it needs and still decides existence.
    let proj = t
        .scan(
            &ScanOptions {
                projection: Some(&["k", "d"]),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(proj.num_rows(), 2);

    // Everything down to the last level: the same answers.
    t.drain_to_bucket().await.unwrap();
    for group in 0..2 {
        t.compact_column_group(0, group).await.unwrap();
    }
    let stats = t.shards().next().unwrap().stats();
    assert_eq!(stats.s3_files[0], vec![0, 0], "{stats:?}");
    assert_eq!(get(&t, 100).await.unwrap(), some(&["a", "b'", "c'", "d"]));
    assert_eq!(get(&t, 108).await.unwrap(), some(&["A8", "B8", "c8", "d8"]));

    // A delete hides every older version; a later partial row starts from NULLs.
    t.delete(batch(&[("k", k(&[100]))])).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    assert!(get(&t, 100).await.is_none());
    t.update(batch(&[("k", k(&[100])), ("d", strs(&["d2"]))]))
        .await
        .unwrap();
    t.drain_to_bucket().await.unwrap();
    let row = get(&t, 100).await.unwrap();
    assert_eq!(row, vec![None, None, None, Some("d2".into())]);
    // The partial row carried no a/b: existence markers keep the row visible to a
    // projection of group {a,b} alone.
    let proj = t
        .scan(
            &ScanOptions {
                projection: Some(&["k", "a"]),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        proj.num_rows(),
        2,
        "row 100 exists (re-created by a partial row)"
    );
    for group in 0..2 {
        t.compact_column_group(0, group).await.unwrap();
    }
    assert_eq!(
        get(&t, 100).await.unwrap(),
        vec![None, None, None, Some("d2".into())]
    );
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laser_partial_update_example() {
    // `100: -,b',c',-` over `100: a,b,c,d` gives `a,b',c',d`, with the base row in S3.
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&common::memory_store(), dir.path(), common::small_config()).await;
    db.create_table_with_layout("t", wide(), &["k"], laser_layout())
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(batch(&[
        ("k", k(&[100])),
        ("a", strs(&["a"])),
        ("b", strs(&["b"])),
        ("c", strs(&["c"])),
        ("d", strs(&["d"])),
    ]))
    .await
    .unwrap();
    t.drain_to_bucket().await.unwrap();
    t.update(batch(&[
        ("k", k(&[100])),
        ("b", strs(&["b'"])),
        ("c", strs(&["c'"])),
    ]))
    .await
    .unwrap();
    assert_eq!(get(&t, 100).await.unwrap(), some(&["a", "b'", "c'", "d"]));
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 1).await.unwrap();
    assert_eq!(get(&t, 100).await.unwrap(), some(&["a", "b'", "c'", "d"]));
    db.close().await;
}

#[tokio::test]
async fn invalid_layouts_are_rejected_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&common::memory_store(), dir.path(), common::small_config()).await;
    let cases: Vec<(Vec<Vec<Vec<String>>>, &str)> = vec![
        (vec![g(&[&["a", "b"], &["c"]])], "column d is in no group"),
        (
            vec![g(&[&["a", "b"], &["b", "c", "d"]])],
            "column b is in more than one group",
        ),
        (vec![g(&[&["a", "b", "c", "d", "k"]])], "key column k"),
        (
            vec![g(&[&["a", "b", "c", "d", "zz"]])],
            "column zz of group 0 is not in the schema",
        ),
        (
            vec![g(&[&["a", "b", "c", "d"], &[]])],
            "column group 1 is empty",
        ),
        (
            vec![
                g(&[&["a", "b"], &["c", "d"]]),
                g(&[&["a", "c"], &["b", "d"]]),
            ],
            "is not inside one group of S3 level 1",
        ),
        (vec![], "at least one S3 level"),
    ];
    for (layout, want) in cases {
        let err = db
            .create_table_with_layout("bad", wide(), &["k"], layout.clone())
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(want),
            "layout {layout:?}: got {err}, want {want:?}"
        );
        assert_eq!(err.kind(), strata_common::ErrorKind::Invalid);
    }
    assert!(
        db.list_tables().await.unwrap().is_empty(),
        "nothing was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_parquet_objects_give_clear_errors() {
    let store = common::memory_store();
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&store, dir.path(), common::small_config()).await;
    db.create_table("t", wide(), &["k"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let keys: Vec<i64> = (0..200).collect();
    let text: Vec<String> = keys.iter().map(|i| format!("v{i}")).collect();
    let text: Vec<&str> = text.iter().map(|s| s.as_str()).collect();
    t.upsert(batch(&[
        ("k", k(&keys)),
        ("a", strs(&text)),
        ("b", strs(&text)),
        ("c", strs(&text)),
        ("d", strs(&text)),
    ]))
    .await
    .unwrap();
    t.drain_to_bucket().await.unwrap();
    let manifest = t.shards().next().unwrap().manifest();
    let file = manifest.value.parquet_files().next().unwrap().clone();
    db.close().await;
    drop(db);

    let paths = strata_manifest::Layout::new("strata").shard(1, 0);
    let path = paths.parquet(&file.name);
    let good = store.get(&path).await.unwrap().bytes().await.unwrap();
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("footer", {
            let mut b = good.to_vec();
            let n = b.len();
            b[n - 3] ^= 0xff; // the PAR1 magic
            b[n - 9] ^= 0x55;
            b
        }),
        ("metadata", {
            let mut b = good.to_vec();
            let n = b.len();
            for x in &mut b[file.tail_offset as usize..n - 8] {
                *x = 0x5a;
            }
            b
        }),
        ("truncated", good[..good.len() / 2].to_vec()),
    ];
    for (what, bytes) in damages {
        store.put(&path, PutPayload::from(bytes)).await.unwrap();
        let fresh = tempfile::tempdir().unwrap();
        let db = common::open(&store, fresh.path(), common::small_config()).await;
        let t = db.table("t").await.unwrap();
        let err = t.get(&[Value::Int(5)], None, None).await.expect_err(what);
        let msg = err.to_string();
        assert!(
            msg.contains(&file.name) && err.kind() == strata_common::ErrorKind::Data
                || err.kind() == strata_common::ErrorKind::Unavailable && msg.contains(&file.name),
            "{what}: {msg}"
        );
        let err = t.scan(&ScanOptions::default(), None).await.expect_err(what);
        assert!(err.to_string().contains(&file.name), "{what}: {err}");
        db.close().await;
    }
    // Restored, everything reads again.
    store.put(&path, PutPayload::from(good)).await.unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let db = common::open(&store, fresh.path(), common::small_config()).await;
    let t = db.table("t").await.unwrap();
    assert_eq!(
        t.scan(&ScanOptions::default(), None)
            .await
            .unwrap()
            .num_rows(),
        200
    );
    let row = t.get(&[Value::Int(5)], None, None).await.unwrap().unwrap();
    assert!(!row.column(1).is_null(0));
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_are_dropped_only_at_the_last_s3_level() {
    let dir = tempfile::tempdir().unwrap();
    let db = common::open(&common::memory_store(), dir.path(), common::small_config()).await;
    db.create_table_with_layout("t", wide(), &["k"], laser_layout())
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(batch(&[
        ("k", k(&[1, 2])),
        ("a", strs(&["a1", "a2"])),
        ("b", strs(&["b1", "b2"])),
        ("c", strs(&["c1", "c2"])),
        ("d", strs(&["d1", "d2"])),
    ]))
    .await
    .unwrap();
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 0).await.unwrap();
    t.compact_column_group(0, 1).await.unwrap();
    t.delete(batch(&[("k", k(&[1]))])).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    let rows_at = |t: &Table, level: usize| -> u64 {
        let m = t.shards().next().unwrap().manifest();
        m.value.s3_levels[level]
            .groups
            .iter()
            .flat_map(|g| g.files.iter())
            .map(|f| f.rows)
            .sum()
    };
    // Level 1 is not the last: the tombstone is kept, once per group.
    assert_eq!(
        rows_at(&t, 0),
        2,
        "the delete, in both groups of S3 level 1"
    );
    assert!(get(&t, 1).await.is_none());
    // At the last level the tombstone and the version it hides both disappear.
    t.compact_column_group(0, 0).await.unwrap();
    t.compact_column_group(0, 1).await.unwrap();
    assert_eq!(rows_at(&t, 0), 0);
    assert_eq!(
        rows_at(&t, 1),
        3,
        "key 2 only, once per group of S3 level 2"
    );
    assert!(get(&t, 1).await.is_none());
    assert_eq!(get(&t, 2).await.unwrap(), some(&["a2", "b2", "c2", "d2"]));
    db.close().await;
}
