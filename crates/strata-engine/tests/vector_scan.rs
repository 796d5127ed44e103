//! The vectorized scan (`ShardView::batches`) returns exactly what the row-at-a-time merge
//! (`ShardView::rows`) returns, for any mix of tiers, partial updates, deletes, history
//! versions, projections, key ranges and read sequence numbers; and clean deep-level data
//! is passed through column-wise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::DataType;
use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use strata_engine::{AsOf, Db, ScanPaths, ShardView, TableView, Value};

#[derive(Debug, Clone)]
enum Op {
    /// Upsert keys `start..start+len`, values derived from `salt`.
    Upsert {
        start: i64,
        len: i64,
        salt: i64,
    },
    /// Partial update of `a` over a key range.
    UpdateA {
        start: i64,
        len: i64,
        salt: i64,
    },
    /// Delete every `step`-th key of a range.
    Delete {
        start: i64,
        len: i64,
        step: i64,
    },
    Flush,
    Drain,
    CompactS3 {
        level: usize,
        group: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0i64..1500, 1i64..600, any::<i64>()).prop_map(|(start, len, salt)| Op::Upsert { start, len, salt }),
        2 => (0i64..1500, 1i64..200, any::<i64>()).prop_map(|(start, len, salt)| Op::UpdateA { start, len, salt }),
        2 => (0i64..1500, 1i64..200, 1i64..7).prop_map(|(start, len, step)| Op::Delete { start, len, step }),
        1 => Just(Op::Flush),
        2 => Just(Op::Drain),
        1 => (0usize..1, 0usize..2).prop_map(|(level, group)| Op::CompactS3 { level, group }),
    ]
}

/// Upper-tier operations of whole rows only (no partial update, no S3 compaction).
fn whole_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (-50i64..1600, 1i64..300, any::<i64>()).prop_map(|(start, len, salt)| Op::Upsert { start, len, salt }),
        3 => (-50i64..1600, 1i64..200, 1i64..7).prop_map(|(start, len, step)| Op::Delete { start, len, step }),
        2 => Just(Op::Flush),
        1 => Just(Op::Drain),
    ]
}

fn collect_rows(
    view: &ShardView,
    schema: &strata_engine::schema::TableSchema,
    projection: &[usize],
    start: &[u8],
    end: Option<&[u8]>,
    handle: &tokio::runtime::Handle,
) -> Vec<(Bytes, Vec<Option<Value>>)> {
    let needed: Vec<usize> = projection
        .iter()
        .filter_map(|c| schema.value_indices.iter().position(|v| v == c))
        .collect();
    let mut it = view.rows(start, end, Some(&needed), handle);
    let mut out = Vec::new();
    while let Some(r) = it.next_row().unwrap() {
        out.push(r);
    }
    out
}

/// Compares both paths over one range and projection; returns the path counts.
fn compare(
    view: &ShardView,
    schema: &strata_engine::schema::TableSchema,
    projection: &[usize],
    range: (Option<i64>, Option<i64>),
    batch_rows: usize,
    handle: &tokio::runtime::Handle,
) -> ScanPaths {
    let key = |k| schema.encode_key(&[Value::Int(k)]).unwrap();
    let start = range.0.map(key).unwrap_or_default();
    let end = range.1.map(key);
    compare_encoded(view, schema, projection, (start, end), batch_rows, handle)
}

/// [`compare`] over a range of encoded keys.
fn compare_encoded(
    view: &ShardView,
    schema: &strata_engine::schema::TableSchema,
    projection: &[usize],
    (start, end): (Vec<u8>, Option<Vec<u8>>),
    batch_rows: usize,
    handle: &tokio::runtime::Handle,
) -> ScanPaths {
    let range = (&start, &end);
    let rows = collect_rows(view, schema, projection, &start, end.as_deref(), handle);
    let mut batches = view
        .batches(&start, end.as_deref(), projection, batch_rows, handle)
        .unwrap();
    let out_schema = batches.schema();
    let mut got: Vec<RecordBatch> = Vec::new();
    while let Some(b) = batches.next_batch().unwrap() {
        assert!(b.num_rows() > 0, "no empty batches");
        assert!(
            b.num_rows() <= batch_rows.max(1),
            "batch of {} rows",
            b.num_rows()
        );
        got.push(b);
    }
    let got = concat_batches(&out_schema, &got).unwrap();
    assert_eq!(
        got.num_rows(),
        rows.len(),
        "row count, range {range:?}, projection {projection:?}"
    );
    if !projection.is_empty() {
        let want = schema.to_batch(&rows, projection).unwrap();
        assert_eq!(got, want, "range {range:?}, projection {projection:?}");
    }
    batches.paths()
}

async fn check_all(db: &Db, seqs: &[u64]) -> ScanPaths {
    let view: TableView = db.view("t", None).await.unwrap();
    let mut total = ScanPaths::default();
    let handle = tokio::runtime::Handle::current();
    let mut views = vec![view];
    for s in seqs {
        // Only called with sequence numbers inside the history kept: each must be readable.
        views.push(db.view("t", Some(AsOf::Seq(*s))).await.unwrap());
    }
    let views = Arc::new(views);
    let t = strata_common::exec::blocking(move || {
        let mut total = ScanPaths::default();
        // Each view twice: as it comes (a wide scan starts building the overlay of the
        // immutable upper tiers in the background; later scans may use it), then with the
        // overlay built, when the view can use one.
        for (v, warm) in views.iter().flat_map(|v| [(v, false), (v, true)]) {
            if warm && !v.shards[0].warm_overlay(&handle) {
                continue;
            }
            let schema = v.schema.clone();
            for projection in [vec![0, 1, 2], vec![2], vec![1, 0], vec![], vec![0]] {
                // Single keys (for a `BIGINT` key: read as point reads), in every tier:
                // updated, deleted, past the deep level's end, never written.
                let single = [0, 5, 52, 501, 521, 600, 1199, 1215, 1599, 5000]
                    .map(|k| (Some(k), Some(k + 1)));
                for range in [
                    (None, None),
                    (Some(100), Some(900)),
                    (Some(777), None),
                    (Some(200), Some(800)),
                ]
                .into_iter()
                .chain(single)
                {
                    for batch_rows in [7, 1000] {
                        let p = compare(
                            &v.shards[0],
                            &schema,
                            &projection,
                            range,
                            batch_rows,
                            &handle,
                        );
                        total.passed += p.passed;
                        total.patched += p.patched;
                        total.merged += p.merged;
                        total.unversioned += p.unversioned;
                        total.overlaid += p.overlaid;
                        total.positioned += p.positioned;
                        total.superseded += p.superseded;
                    }
                }
                // A single encoded key given as `key + 0x00`, the next key in encoded order.
                for k in [5, 521, 1199, 5000] {
                    let start = schema.encode_key(&[Value::Int(k)]).unwrap();
                    let mut end = start.clone();
                    end.push(0);
                    compare_encoded(
                        &v.shards[0],
                        &schema,
                        &projection,
                        (start, Some(end)),
                        7,
                        &handle,
                    );
                }
            }
        }
        total
    });
    let p = t.await.unwrap();
    total.passed += p.passed;
    total.patched += p.patched;
    total.merged += p.merged;
    total.unversioned += p.unversioned;
    total.overlaid += p.overlaid;
    total.positioned += p.positioned;
    total.superseded += p.superseded;
    total
}

fn config(history: bool) -> strata_engine::EngineConfig {
    let mut c = small_config();
    c.memtable_bytes_max = 64 << 10;
    c.parquet_row_group_rows = 200;
    c.parquet_file_bytes = 32 << 10;
    c.level_bytes_base = 1 << 40; // compaction only when the test asks
    c.l0_settle_ms = 0;
    c.s3_level_bytes_base = 1 << 40;
    if history {
        c.history_retention_ms = 3_600_000;
    }
    c
}

/// The test table: key `id` is a `BIGINT` (scans read the typed key column) or, with
/// `narrow`, an `INT` (scans read the encoded `_key`).
fn table_schema(narrow: bool) -> arrow::datatypes::Schema {
    let s = schema();
    if !narrow {
        return s;
    }
    let mut fields: Vec<arrow::datatypes::Field> =
        s.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[0] = fields[0].clone().with_data_type(DataType::Int32);
    arrow::datatypes::Schema::new(fields)
}

/// `batch` with its `id` column cast to the key type of `t`.
fn fit(t: &strata_engine::Table, batch: RecordBatch) -> RecordBatch {
    let key_type = t.schema().field(0).data_type().clone();
    let mut fields: Vec<arrow::datatypes::Field> = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if f.name() == "id" {
            fields.push(f.as_ref().clone().with_data_type(key_type.clone()));
            columns.push(cast(c, &key_type).unwrap());
        } else {
            fields.push(f.as_ref().clone());
            columns.push(c.clone());
        }
    }
    RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns).unwrap()
}

async fn apply(t: &strata_engine::Table, op: &Op, layout_n: usize) {
    match op {
        Op::Upsert { start, len, salt } => {
            let ids: Vec<i64> = (*start..start + len).collect();
            let a: Vec<String> = ids.iter().map(|i| format!("v{}", i ^ salt)).collect();
            let a: Vec<Option<&str>> = a.iter().map(|s| Some(s.as_str())).collect();
            let b: Vec<Option<i64>> = ids
                .iter()
                .map(|i| (i % 5 != 0).then_some(i.wrapping_mul(*salt)))
                .collect();
            t.upsert(fit(t, rows(&ids, &a, &b))).await.unwrap();
        }
        Op::UpdateA { start, len, salt } => {
            let ids: Vec<i64> = (*start..start + len).collect();
            let a: Vec<String> = ids.iter().map(|i| format!("u{}", i ^ salt)).collect();
            t.update(fit(
                t,
                only(&[
                    ("id", Arc::new(Int64Array::from(ids))),
                    ("a", Arc::new(StringArray::from(a))),
                ]),
            ))
            .await
            .unwrap();
        }
        Op::Delete { start, len, step } => {
            let ids: Vec<i64> = (*start..start + len).step_by(*step as usize).collect();
            t.delete(fit(t, keys(&ids))).await.unwrap();
        }
        Op::Flush => t.flush().await.unwrap(),
        Op::Drain => t.drain_to_bucket().await.unwrap(),
        Op::CompactS3 { level, group } => {
            let groups = layout(layout_n)[*level].len();
            t.compact_column_group(*level, group % groups)
                .await
                .unwrap()
        }
    }
}

/// A database over an in-memory bucket with table `t` in layout `layout_n` (the directory
/// holds the NVMe tier).
async fn table_t(
    layout_n: usize,
    history: bool,
    narrow: bool,
) -> (tempfile::TempDir, strata_engine::Db, strata_engine::Table) {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&store, dir.path(), config(history)).await;
    db.create_table_with_layout("t", table_schema(narrow), &["id"], layout(layout_n))
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    (dir, db, t)
}

async fn run(ops: Vec<Op>, layout_n: usize, history: bool, narrow: bool) {
    let (_dir, db, t) = table_t(layout_n, history, narrow).await;
    let mut seqs = Vec::new();
    for op in &ops {
        apply(&t, op, layout_n).await;
        seqs.push(db.view("t", None).await.unwrap().shards[0].seq());
    }
    // The latest state and a few older sequence numbers (readable when history is kept).
    let old: Vec<u64> = seqs.iter().step_by(3).copied().collect();
    check_all(&db, if history { &old } else { &[] }).await;
    db.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("STRATA_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), failure_persistence: None, ..ProptestConfig::default() })]

    /// A clean deep level under random whole-row upserts and deletes in upper tiers: the
    /// overlay is placed in the deep level by position (when no partial row is left).
    #[test]
    fn positioned_batches_match_rows(base in 1i64..1500, ops in proptest::collection::vec(whole_op(), 1..10), layout_n in 0usize..3, narrow in any::<bool>()) {
        let mut all = vec![
            Op::Upsert { start: 0, len: base, salt: 7 },
            Op::Drain,
            Op::CompactS3 { level: 0, group: 0 },
            Op::CompactS3 { level: 0, group: 1 },
        ];
        all.extend(ops);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(all, layout_n, false, narrow));
    }

    #[test]
    fn batches_match_rows(ops in proptest::collection::vec(op(), 1..14), layout_n in 0usize..3, history in any::<bool>(), narrow in any::<bool>()) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(ops, layout_n, history, narrow));
    }
}

/// Clean deep-level data passes through; upper updates are patched in; history versions
/// and deletes in the deep level are left out column-wise, partial rows take the row
/// merge; all agree with `rows`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_path_is_taken_and_agrees() {
    for (layout_n, history, narrow) in [(0, false, false), (1, false, true), (2, true, false)] {
        let (_dir, db, t) = table_t(layout_n, history, narrow).await;
        let ops = [
            Op::Upsert {
                start: 0,
                len: 1200,
                salt: 7,
            },
            Op::Drain,
            Op::CompactS3 { level: 0, group: 0 },
            Op::CompactS3 { level: 0, group: 1 },
        ];
        for op in &ops {
            apply(&t, op, layout_n).await;
        }
        let p = check_all(&db, &[]).await;
        assert!(
            p.passed > 0 && p.patched == 0 && p.merged == 0 && p.overlaid == 0,
            "{p:?}"
        );
        // One put per key, all visible: the version columns are not read.
        assert_eq!(p.unversioned, p.passed, "{p:?}");
        // Updates and deletes above the deep level.
        for op in [
            Op::UpdateA {
                start: 50,
                len: 10,
                salt: 3,
            },
            Op::Delete {
                start: 500,
                len: 40,
                step: 3,
            },
            Op::Upsert {
                start: 1190,
                len: 30,
                salt: 9,
            },
        ] {
            apply(&t, &op, layout_n).await;
        }
        let p = check_all(&db, &[]).await;
        assert!(p.passed > 0 && p.patched > 0, "{p:?}");
        // Nothing immutable above the deep level: rows past its end are merged row by row
        // until the memtables' fold (over an empty overlay) is ready, then spliced from it.
        assert!(
            p.merged > 0 || p.overlaid > 0,
            "rows past the deep level's end: {p:?}"
        );
        // The same in an SST, and newer versions of some of its keys in the memtable:
        // whole rows and deletes come from the overlay, the rest is resolved.
        let mid = db.view("t", None).await.unwrap().shards[0].seq();
        for op in [
            Op::Flush,
            Op::Upsert {
                start: 55,
                len: 3,
                salt: 11,
            },
            Op::Delete {
                start: 520,
                len: 5,
                step: 1,
            },
            Op::UpdateA {
                start: 600,
                len: 5,
                salt: 5,
            },
        ] {
            apply(&t, &op, layout_n).await;
        }
        let older = if history { vec![mid] } else { Vec::new() };
        let p = check_all(&db, &older).await;
        assert!(p.overlaid > 0 && p.patched > 0, "{p:?}");
        // Everything down again: with history kept, the deep level holds several versions
        // of the updated keys and deletes. The latest view selects each key's visible
        // version column-wise; a view as of before the drain still reads the partial rows
        // written then, which take the row merge.
        let before = db.view("t", None).await.unwrap().shards[0].seq();
        for op in [
            Op::Drain,
            Op::CompactS3 { level: 0, group: 0 },
            Op::CompactS3 { level: 0, group: 1 },
        ] {
            apply(&t, &op, layout_n).await;
        }
        let p = check_all(&db, &[before]).await;
        if history {
            assert!(
                p.superseded > 0,
                "history versions left out column-wise: {p:?}"
            );
            assert_eq!(p.unversioned, 0, "history versions need _seq: {p:?}");
            for projection in [&[0, 1, 2][..], &[2][..]] {
                let p = scan_range(&db, projection, (None, None), 1000).await;
                assert_eq!(p.merged, 0, "{p:?}");
                // The updated, rewritten and deleted keys' older rows are left out.
                assert!(p.superseded > 0, "{p:?}");
            }
        }
        assert!(p.passed > 0, "{p:?}");
        db.close().await;
    }
}

/// An overlay of whole rows and deletes (in an SST and an upper S3 level, with nothing in
/// the memtables) is spliced into the deep level by the row positions computed with it,
/// for every range and projection, and agrees with the row path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlay_placed_by_position_agrees() {
    for (layout_n, narrow) in [(0, false), (1, true), (2, false)] {
        // Files of a few hundred rows, so a level holds several.
        let store = memory_store();
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(false);
        c.parquet_file_bytes = 2 << 10;
        let db = open(&store, dir.path(), c).await;
        db.create_table_with_layout("t", table_schema(narrow), &["id"], layout(layout_n))
            .await
            .unwrap();
        let t = db.table("t").await.unwrap();
        for op in [
            Op::Upsert {
                start: 0,
                len: 1200,
                salt: 7,
            },
            Op::Drain,
            Op::CompactS3 { level: 0, group: 0 },
            Op::CompactS3 { level: 0, group: 1 },
            // New keys before, among and past the deep level's, updates and deletes.
            Op::Upsert {
                start: -20,
                len: 15,
                salt: 3,
            },
            Op::Upsert {
                start: 50,
                len: 10,
                salt: 3,
            },
            Op::Delete {
                start: 500,
                len: 40,
                step: 3,
            },
            Op::Upsert {
                start: 1190,
                len: 40,
                salt: 9,
            },
            Op::Flush,
            Op::Drain,
            Op::Upsert {
                start: 199,
                len: 3,
                salt: 5,
            },
            Op::Delete {
                start: 0,
                len: 2,
                step: 1,
            },
            Op::Flush,
        ] {
            apply(&t, &op, layout_n).await;
        }
        let p = check_all(&db, &[]).await;
        // (The first pass of each view may run before the overlay is ready.)
        assert!(p.positioned > 0 && p.overlaid > 0, "{p:?}");
        db.close().await;
    }
}

/// Keys longer than Parquet's 64-byte statistics: a row group's stored `_key` maximum is
/// truncated and rounded up, so it lies above the row group's last key (and here above
/// every key). A scan by position must still place each bound at the right row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_hold_under_truncated_key_statistics() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&store, dir.path(), config(false)).await;
    let schema = arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("id", DataType::Utf8, false),
        arrow::datatypes::Field::new("v", DataType::Int64, true),
    ]);
    db.create_table("t", schema.clone(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let id = |i: i64| format!("{}{i:05}", "k".repeat(70));
    let batch = |ids: std::ops::Range<i64>, salt: i64| {
        let keys: Vec<String> = ids.clone().map(id).collect();
        RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from(ids.map(|i| i * salt).collect::<Vec<_>>())),
            ],
        )
        .unwrap()
    };
    t.upsert(batch(0..1200, 1)).await.unwrap();
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 0).await.unwrap();
    t.upsert(batch(450..460, 7)).await.unwrap();
    t.upsert(batch(1200..1210, 7)).await.unwrap();
    let gone: Vec<String> = (600..610).map(id).collect();
    let keys = RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(vec![schema.field(0).clone()])),
        vec![Arc::new(StringArray::from(gone))],
    )
    .unwrap();
    t.delete(keys).await.unwrap();
    t.flush().await.unwrap();
    let v: TableView = db.view("t", None).await.unwrap();
    let handle = tokio::runtime::Handle::current();
    let p = strata_common::exec::blocking(move || {
        let shard = &v.shards[0];
        assert!(shard.warm_overlay(&handle));
        let key = |i: i64| {
            v.schema
                .encode_key(&[Value::Bytes(id(i).into_bytes())])
                .unwrap()
        };
        let mut total = ScanPaths::default();
        for (a, b) in [
            (None, None),
            (Some(455), Some(905)),
            (Some(500), None),
            (None, Some(777)),
            (Some(605), Some(606)),
            (Some(1199), None),
        ] {
            let range = (a.map(key).unwrap_or_default(), b.map(key));
            for projection in [vec![0, 1], vec![1], vec![]] {
                let p =
                    compare_encoded(shard, &v.schema, &projection, range.clone(), 1000, &handle);
                total.positioned += p.positioned;
                total.overlaid += p.overlaid;
            }
        }
        total
    })
    .await
    .unwrap();
    assert!(p.positioned > 0 && p.overlaid > 0, "{p:?}");
    db.close().await;
}

/// A deep level of keys 0..1200; keys 100..110 updated in an SST; then whole rows over
/// the SST's keys and past them (105..120) and deletes (200..210).
fn fold_ops() -> [Op; 8] {
    [
        Op::Upsert {
            start: 0,
            len: 1200,
            salt: 7,
        },
        Op::Drain,
        Op::CompactS3 { level: 0, group: 0 },
        Op::CompactS3 { level: 0, group: 1 },
        Op::Upsert {
            start: 100,
            len: 10,
            salt: 3,
        },
        Op::Flush,
        Op::Upsert {
            start: 105,
            len: 15,
            salt: 5,
        },
        Op::Delete {
            start: 200,
            len: 10,
            step: 1,
        },
    ]
}

/// A write after [`fold_ops`]: new keys past the memtable's (300..302).
const LATE_WRITE: Op = Op::Upsert {
    start: 300,
    len: 2,
    salt: 1,
};

/// A full scan of `v`'s first shard, checked against the row path (`warm`: the overlay,
/// and the memtables' fold over it, are built first).
async fn full_scan(v: TableView, warm: bool) -> ScanPaths {
    let handle = tokio::runtime::Handle::current();
    strata_common::exec::blocking(move || {
        let shard = &v.shards[0];
        if warm {
            assert!(shard.warm_overlay(&handle));
        }
        compare(shard, &v.schema, &[0, 1, 2], (None, None), 1000, &handle)
    })
    .await
    .unwrap()
}

/// A scan of `range` in a fresh view of `db`'s table `t`, checked against the row path.
async fn scan_range(
    db: &Db,
    projection: &'static [usize],
    range: (Option<i64>, Option<i64>),
    batch_rows: usize,
) -> ScanPaths {
    let v = db.view("t", None).await.unwrap();
    let handle = tokio::runtime::Handle::current();
    strata_common::exec::blocking(move || {
        compare(
            &v.shards[0],
            &v.schema,
            projection,
            range,
            batch_rows,
            &handle,
        )
    })
    .await
    .unwrap()
}

/// A node that reads a shard it does not write (a query service) builds each view's
/// memtable from the WAL tail. Views of the same tail share one cached fold of it, so a
/// fresh view of an unchanged tail reads the deep level by position with nothing left for
/// the row path; a new write makes a new tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_of_one_wal_tail_share_its_fold() {
    let store = memory_store();
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = open(&store, dir1.path(), config(false)).await;
    writer
        .create_table_with_layout("t", table_schema(false), &["id"], layout(0))
        .await
        .unwrap();
    let t = writer.table("t").await.unwrap();
    // The memtable (only the WAL for the reader): whole rows and deletes.
    for op in fold_ops() {
        apply(&t, &op, 0).await;
    }
    let reader = open(&store, dir2.path(), config(false)).await;
    // The tail is decoded and folded into a memtable once, not once per view.
    let (a, b) = (
        reader.view("t", None).await.unwrap(),
        reader.view("t", None).await.unwrap(),
    );
    assert!(a.shards[0].shares_memtable_with(&b.shards[0]));
    drop(b);
    let p = full_scan(reader.view("t", None).await.unwrap(), true).await;
    assert_eq!(
        (p.overlaid, p.patched, p.merged, p.positioned),
        (30, 0, 0, 1200),
        "{p:?}"
    );
    // A new view of the same tail: its fold is already cached.
    let p = full_scan(reader.view("t", None).await.unwrap(), false).await;
    assert_eq!(
        (p.overlaid, p.patched, p.merged, p.positioned),
        (30, 0, 0, 1200),
        "{p:?}"
    );
    // A write after it: a new tail, resolved row by row until a fold of it is ready.
    apply(&t, &LATE_WRITE, 0).await;
    let before = reader.view("t", None).await.unwrap();
    let p = full_scan(reader.view("t", None).await.unwrap(), false).await;
    assert_eq!((p.overlaid, p.patched, p.positioned), (5, 17, 0), "{p:?}");
    let after = reader.view("t", None).await.unwrap();
    assert!(before.shards[0].shares_memtable_with(&after.shards[0]));
    assert!(!a.shards[0].shares_memtable_with(&after.shards[0]));
    drop((a, before, after));
    reader.close().await;
    writer.close().await;
}

/// Memtables every version of which is visible fold into the overlay too (`warm_overlay`,
/// or a wide scan's fold through a sequence number): a scan then takes no key down the row
/// path. A new write changes them, and scans fall back to the row path for the memtables
/// until a fold of the new state is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtables_fold_into_the_overlay() {
    let (_dir, db, t) = table_t(0, false, false).await;
    for op in fold_ops() {
        apply(&t, &op, 0).await;
    }
    let p = full_scan(db.view("t", None).await.unwrap(), true).await;
    // Keys 100..120 and 200..210: every one from the overlay, none resolved row by row.
    assert_eq!((p.overlaid, p.patched, p.merged), (30, 0, 0), "{p:?}");
    // Nothing left for the row path, whole rows and deletes only: the deep level is read
    // by row position.
    assert_eq!(p.positioned, 1200, "{p:?}");
    // A new write: the folded memtable no longer matches; the row path takes its keys.
    apply(&t, &LATE_WRITE, 0).await;
    let p = full_scan(db.view("t", None).await.unwrap(), false).await;
    // The SST's keys 100..105 from the overlay; 105..120 and 300..302 resolved (200..210
    // are deleted there).
    assert_eq!((p.overlaid, p.patched, p.merged), (5, 17, 0), "{p:?}");
    assert_eq!(p.positioned, 0, "memtable keys need the key column: {p:?}");
    // The first wide scan folds the new state in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let p = full_scan(db.view("t", None).await.unwrap(), false).await;
        if p.patched == 0 {
            assert_eq!((p.overlaid, p.merged, p.positioned), (32, 0, 1200), "{p:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never folded: {p:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    db.close().await;
}

/// A load in key order leaves the newest keys in the first columnar level and the oldest in
/// the level below, their key ranges apart. A scan reads both as one run by row position
/// (none of the first level's rows folded into the overlay or merged row by row); a file
/// of the first level that comes to overlap the level below is moved into it once nothing
/// else is due; and a first level laid out differently from the level below is never
/// joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disjoint_columnar_levels_read_as_one_run() {
    for (layout_n, narrow) in [(0, false), (2, true), (1, false)] {
        let same_layout = layout_n != 1;
        // Files of a few hundred rows, so a level holds several.
        let store = memory_store();
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(false);
        c.parquet_file_bytes = 2 << 10;
        let db = open(&store, dir.path(), c).await;
        db.create_table_with_layout("t", table_schema(narrow), &["id"], layout(layout_n))
            .await
            .unwrap();
        let t = db.table("t").await.unwrap();
        for op in [
            Op::Upsert {
                start: 0,
                len: 1200,
                salt: 7,
            },
            Op::Drain,
            Op::CompactS3 { level: 0, group: 0 },
            Op::CompactS3 { level: 0, group: 1 },
            // The newest keys, drained into the first columnar level.
            Op::Upsert {
                start: 1200,
                len: 1200,
                salt: 9,
            },
            Op::Drain,
            // Updates and deletes above, in both levels' key ranges and past them.
            Op::Upsert {
                start: 50,
                len: 10,
                salt: 3,
            },
            Op::Delete {
                start: 1500,
                len: 40,
                step: 3,
            },
            Op::Upsert {
                start: 2390,
                len: 60,
                salt: 5,
            },
            Op::Flush,
        ] {
            apply(&t, &op, layout_n).await;
        }
        let v = db.view("t", None).await.unwrap();
        let levels = &v.shards[0].manifest().value.s3_levels;
        let rows_in = |l: usize| -> u64 { levels[l].groups[0].files.iter().map(|f| f.rows).sum() };
        assert_eq!((rows_in(0), rows_in(1)), (1200, 1200), "layout {layout_n}");
        let p = full_scan(v, true).await;
        if same_layout {
            // 10 + 60 upserts spliced, 14 deep rows dropped under deletes; all 2,400 deep
            // rows (both levels) read by position.
            assert_eq!(
                (p.overlaid, p.patched, p.merged, p.positioned),
                (84, 0, 0, 2400),
                "layout {layout_n}: {p:?}"
            );
        } else {
            // The first level folds into the overlay; only the level below is positioned.
            assert_eq!(
                (p.merged, p.positioned),
                (0, 1200),
                "layout {layout_n}: {p:?}"
            );
        }
        check_all(&db, &[]).await;
        // Rewrites across the levels' boundary leave a file of the first level overlapping
        // the level below, which scans would fold into the overlay. With nothing else due,
        // it is moved down (`s3::straggler`) and the levels read as one run again.
        for op in [
            Op::Upsert {
                start: 1150,
                len: 100,
                salt: 11,
            },
            Op::Drain,
        ] {
            apply(&t, &op, layout_n).await;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let v = loop {
            let v = db.view("t", None).await.unwrap();
            let levels = &v.shards[0].manifest().value.s3_levels;
            let below = &levels[1].groups[0].files;
            let straddling = levels[0].groups[0].files.iter().any(|f| {
                below
                    .iter()
                    .any(|b| b.key_min <= f.key_max && f.key_min <= b.key_max)
            });
            if !straddling {
                break v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "layout {layout_n}: the first level still overlaps the level below"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let levels = &v.shards[0].manifest().value.s3_levels;
        let rows_in = |l: usize| -> u64 { levels[l].groups[0].files.iter().map(|f| f.rows).sum() };
        assert!(rows_in(0) > 0, "layout {layout_n}: the first level emptied");
        let want = if same_layout {
            rows_in(0) + rows_in(1)
        } else {
            rows_in(1)
        };
        let p = full_scan(v, true).await;
        assert_eq!(p.merged, 0, "layout {layout_n}: {p:?}");
        assert_eq!(p.positioned, want, "layout {layout_n}: {p:?}");
        check_all(&db, &[]).await;
        db.close().await;
    }
}

/// The overlay is named by what the row-oriented levels hold (their newest sequence
/// number), not by their files: a compaction of L0 into L1 merges versions without changing
/// any key's newest one, so the overlay built before it serves the first scan after it
/// (it used to be rebuilt from scratch after every L0 compaction, the scans in between
/// resolving the row levels row by row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_outlives_compactions_within_the_row_levels() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(false);
    // L0 settles into L1 two seconds after it last grew (and only then).
    c.l0_compaction_trigger = 100;
    c.l0_settle_ms = 2_000;
    let db = open(&store, dir.path(), c).await;
    db.create_table_with_layout("t", table_schema(false), &["id"], layout(0))
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    for op in fold_ops() {
        apply(&t, &op, 0).await;
    }
    t.flush().await.unwrap();
    let l0 = |t: &strata_engine::Table| -> (usize, usize) {
        let m = t.shards().next().unwrap().manifest();
        (m.value.levels[0].ssts.len(), m.value.levels[1].ssts.len())
    };
    assert_eq!(l0(&t), (2, 0), "both flushes in L0");
    let p = full_scan(db.view("t", None).await.unwrap(), true).await;
    assert_eq!(
        (p.overlaid, p.patched, p.merged, p.positioned),
        (30, 0, 0, 1200),
        "{p:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while l0(&t) != (0, 1) {
        assert!(
            std::time::Instant::now() < deadline,
            "L0 never settled: {:?}",
            l0(&t)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, _, hits_before, misses_before) = db.scan_cache_stats();
    assert!(
        misses_before > 0,
        "the first positioned scan decodes its columns"
    );
    // The first scan after the compaction: the overlay is ready, nothing goes row by row.
    let p = full_scan(db.view("t", None).await.unwrap(), false).await;
    assert_eq!(
        (p.overlaid, p.patched, p.merged, p.positioned),
        (30, 0, 0, 1200),
        "{p:?}"
    );
    // And the deep level's columns come decoded from memory (the same files).
    let (bytes, chunks, hits, misses) = db.scan_cache_stats();
    assert!(
        hits > hits_before && misses == misses_before && bytes > 0 && chunks > 0,
        "{:?}",
        db.scan_cache_stats()
    );
    db.close().await;
}

/// The newest keys lie past the deep level's last key, in L0 or the memtables: a scan of
/// them covers none of the deep level, yet reads every one of them row by row unless the
/// overlay holds them. A scan over a sixteenth or more of the versions above the deep level
/// starts the overlay (and the memtables' fold) like a wide one; a scan over a few of them
/// does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_the_newest_keys_builds_the_overlay() {
    let (_dir, db, t) = table_t(0, false, false).await;
    for op in [
        Op::Upsert {
            start: 0,
            len: 1200,
            salt: 7,
        },
        Op::Drain,
        // The newest keys, flushed into L0.
        Op::Upsert {
            start: 2000,
            len: 600,
            salt: 3,
        },
        Op::Flush,
    ] {
        apply(&t, &op, 0).await;
    }
    let scan = |range| scan_range(&db, &[0, 1, 2], range, 1000);
    // Twenty of the 600 newest keys: row by row, and no overlay started for them.
    for _ in 0..3 {
        let p = scan((Some(2100), Some(2120))).await;
        assert_eq!((p.merged, p.overlaid), (20, 0), "{p:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Half of them: the first scan goes row by row and starts the overlay; later ones
    // splice them from it.
    let until_overlaid = |range: (Option<i64>, Option<i64>), want: u64| {
        let scan = &scan;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let p = scan(range).await;
                if p.overlaid == want {
                    assert_eq!(p.merged + p.patched, 0, "{p:?}");
                    break;
                }
                // Resolved row by row meanwhile (the memtables' keys past the deep level
                // count as patched into its tail).
                assert_eq!(p.merged + p.patched, want, "{p:?}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "no overlay for the newest keys: {p:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    until_overlaid((Some(2300), None), 300).await;
    // Newer keys still, in the memtable: their fold over the overlay is started the same way.
    apply(
        &t,
        &Op::Upsert {
            start: 3000,
            len: 400,
            salt: 5,
        },
        0,
    )
    .await;
    until_overlaid((Some(3000), Some(3400)), 400).await;
    db.close().await;
}

/// A scan read in key order (memtable versions in its range: no overlay splices by
/// position) slices the deep level's decoded row groups kept in memory, like a positioned
/// one, so repeating it decodes nothing; a single key is a point read, which decodes no
/// row group's columns on its first cold read of the row group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_ordered_scans_read_decoded_columns_from_memory() {
    let (_dir, db, t) = table_t(0, false, false).await;
    for op in [
        Op::Upsert {
            start: 0,
            len: 1200,
            salt: 7,
        },
        Op::Drain,
        Op::CompactS3 { level: 0, group: 0 },
        // Newer versions in the memtable, inside the ranges scanned below.
        Op::UpdateA {
            start: 400,
            len: 5,
            salt: 3,
        },
        Op::Delete {
            start: 420,
            len: 5,
            step: 2,
        },
    ] {
        apply(&t, &op, 0).await;
    }
    let scan = |range| scan_range(&db, &[0, 2], range, 100);
    let p = scan((Some(300), Some(700))).await;
    assert_eq!(p.positioned, 0, "{p:?}");
    assert!(p.passed > 0 && p.patched > 0, "{p:?}");
    let (_, _, hits0, misses0) = db.scan_cache_stats();
    assert!(misses0 > 0, "the first scan decodes its row groups");
    let p = scan((Some(350), Some(650))).await;
    assert_eq!(p.positioned, 0, "{p:?}");
    let (_, _, hits1, misses1) = db.scan_cache_stats();
    assert!(
        hits1 > hits0 && misses1 == misses0,
        "a narrower scan of the same rows decodes nothing: {:?}",
        db.scan_cache_stats()
    );
    // Point reads (one `BIGINT` key) in and out of the cached row groups. A row group's
    // first cold span read decodes no row group (it may slice the columns cached above);
    // later ones decode its dictionary-heavy columns whole, once.
    scan((Some(100), Some(101))).await;
    let (_, _, _, misses2) = db.scan_cache_stats();
    assert_eq!(misses2, misses1, "a first point read decodes no row group");
    for k in [402, 422, 1100, 5000] {
        scan((Some(k), Some(k + 1))).await;
    }
    let (_, _, _, misses3) = db.scan_cache_stats();
    for k in [100, 402, 422, 1100, 5000, 250, 600, 900] {
        scan((Some(k), Some(k + 1))).await;
    }
    let (_, _, _, misses4) = db.scan_cache_stats();
    assert_eq!(
        misses4, misses3,
        "a row group's columns are decoded whole at most once"
    );
    db.close().await;
}

/// Under a stream of writes the memtables change between any two scans, so their exact
/// fold is never reused. Scans then use a fold through an older sequence number and
/// resolve only the newer versions row by row, folding those over it in the background
/// once they have grown enough; every scan agrees with the row path throughout (whole
/// rows, partial updates and deletes, old keys and new ones), and a reader at an older
/// sequence number than the fold does not use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_under_writes_fold_the_memtables_through_an_older_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let store = memory_store();
    let mut c = config(true);
    c.memtable_bytes_max = 64 << 20;
    c.scan_memtable_refold_bytes = 2 << 10;
    let db = open(&store, dir.path(), c).await;
    db.create_table_with_layout("t", table_schema(false), &["id"], layout(0))
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    for op in fold_ops() {
        apply(&t, &op, 0).await;
    }
    let handle = tokio::runtime::Handle::current();
    let mut older: Vec<Arc<TableView>> = Vec::new();
    let (mut folded_scans, mut last) = (0, ScanPaths::default());
    for i in 0..120i64 {
        let op = match i % 4 {
            0 | 1 => Op::Upsert {
                start: 1200 + i * 7,
                len: 9,
                salt: i,
            },
            2 => Op::UpdateA {
                start: (i * 37) % 1300,
                len: 6,
                salt: i,
            },
            _ => Op::Delete {
                start: (i * 53) % 1400,
                len: 5,
                step: 2,
            },
        };
        apply(&t, &op, 0).await;
        if i % 10 == 0 {
            older.push(Arc::new(db.view("t", None).await.unwrap()));
        }
        let v = db.view("t", None).await.unwrap();
        let views = older.clone();
        let h = handle.clone();
        let p = strata_common::exec::blocking(move || {
            let shard = &v.shards[0];
            let p = compare(shard, &v.schema, &[0, 1, 2], (None, None), 1000, &h);
            compare(shard, &v.schema, &[2, 0], (Some(90), Some(1700)), 64, &h);
            // Views taken before later writes (and folds): still exact.
            for o in &views {
                compare(&o.shards[0], &o.schema, &[0, 1, 2], (None, None), 1000, &h);
            }
            p
        })
        .await
        .unwrap();
        // The fold of `fold_ops` alone holds 30 keys.
        if p.overlaid > 30 {
            folded_scans += 1;
        }
        last = p;
    }
    assert!(
        folded_scans >= 90,
        "most scans under writes use a fold of the memtables: {folded_scans} of 120"
    );
    // Resolved row by row: what was written since the fold and the partial updates of
    // deep rows, not the whole memtable.
    assert!(
        last.overlaid > last.patched + last.merged,
        "the memtable's keys mostly come from its fold: {last:?}"
    );
    drop(older);
    db.close().await;
}

/// Found by `batches_match_rows` (its minimal failing input): with `b` and `a` in separate
/// column groups, a row whose `b` was moved down a level by a CG-local compaction, then
/// whose `a` alone was updated and moved into the first columnar level, read back with `b`
/// null through `ShardView::batches` (the rows path had it): the job folds the partial
/// update of `a` into a whole version of `a`'s group, and a scan needing both groups kept
/// that version a whole-row put, hiding `b`'s older version in the level below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_updated_alone_after_another_group_moved_down_keeps_both() {
    let ops = vec![
        Op::Delete {
            start: 279,
            len: 98,
            step: 6,
        },
        Op::Upsert {
            start: 839,
            len: 413,
            salt: -1988382987466685371,
        },
        Op::Drain,
        Op::Delete {
            start: 751,
            len: 3,
            step: 5,
        },
        Op::CompactS3 { level: 0, group: 0 },
        Op::CompactS3 { level: 0, group: 0 },
        Op::Upsert {
            start: 806,
            len: 403,
            salt: 2599026432437426596,
        },
        Op::UpdateA {
            start: 1037,
            len: 179,
            salt: 3581773935237468267,
        },
        Op::Delete {
            start: 832,
            len: 137,
            step: 3,
        },
        Op::Drain,
        Op::UpdateA {
            start: 1033,
            len: 151,
            salt: 6628414450170470247,
        },
        Op::Delete {
            start: 815,
            len: 138,
            step: 1,
        },
        Op::Upsert {
            start: 549,
            len: 296,
            salt: 1171579925854371624,
        },
    ];
    // Background jobs make the failing interleaving likely, not certain: run it a few times.
    for _ in 0..10 {
        run(ops.clone(), 2, false, false).await;
    }
}

/// Found by `batches_match_rows`: a deep chunk is cut before its last key (a lone partial
/// row, whose delete was dropped at the bottom), then put back whole behind a memtable key
/// that precedes it; both pieces are read, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_put_back_twice_keeps_its_rows() {
    let ops = vec![
        Op::Delete {
            start: 1006,
            len: 98,
            step: 1,
        },
        Op::UpdateA {
            start: 1000,
            len: 7,
            salt: 0,
        },
        Op::Drain,
        Op::UpdateA {
            start: 0,
            len: 1,
            salt: 0,
        },
    ];
    run(ops, 0, true, false).await;
}
