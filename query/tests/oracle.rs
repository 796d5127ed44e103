//! SQL results equal a model: random upserts, partial updates and deletes, with the data
//! moved between tiers at random (flush, NVMe compaction, drain to S3), then queries whose
//! answers the model computes (full scan, key range, non-key filter, aggregate).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use proptest::prelude::*;
use strata_engine::Table;

#[derive(Debug, Clone)]
enum Op {
    Upsert(Vec<(i64, Option<i64>, Option<String>)>),
    UpdateA(Vec<(i64, i64)>),
    Delete(Vec<i64>),
    Flush,
    Compact,
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0i64..40;
    prop_oneof![
        4 => prop::collection::vec(
            (key.clone(), proptest::option::of(-50i64..50), proptest::option::of("[a-c]{0,2}")),
            1..6
        )
        .prop_map(Op::Upsert),
        2 => prop::collection::vec((key.clone(), -50i64..50), 1..4).prop_map(Op::UpdateA),
        2 => prop::collection::vec(key, 1..4).prop_map(Op::Delete),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Drain),
    ]
}

type Model = BTreeMap<i64, (Option<i64>, Option<String>)>;

fn schema(all: bool) -> Arc<Schema> {
    let mut f = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("a", DataType::Int64, true),
    ];
    if all {
        f.push(Field::new("b", DataType::Utf8, true));
    }
    Arc::new(Schema::new(f))
}

async fn apply(t: &Table, model: &mut Model, op: &Op) {
    match op {
        Op::Upsert(rows) => {
            let mut dedup: BTreeMap<i64, (Option<i64>, Option<String>)> = BTreeMap::new();
            for (k, a, b) in rows {
                dedup.insert(*k, (*a, b.clone()));
            }
            let batch = RecordBatch::try_new(
                schema(true),
                vec![
                    Arc::new(Int64Array::from(dedup.keys().copied().collect::<Vec<_>>())),
                    Arc::new(Int64Array::from(
                        dedup.values().map(|v| v.0).collect::<Vec<_>>(),
                    )),
                    Arc::new(StringArray::from(
                        dedup.values().map(|v| v.1.clone()).collect::<Vec<_>>(),
                    )),
                ],
            )
            .expect("batch");
            t.upsert(batch).await.expect("upsert");
            model.extend(dedup);
        }
        Op::UpdateA(rows) => {
            let mut dedup: BTreeMap<i64, i64> = BTreeMap::new();
            for (k, a) in rows {
                dedup.insert(*k, *a);
            }
            let batch = RecordBatch::try_new(
                schema(false),
                vec![
                    Arc::new(Int64Array::from(dedup.keys().copied().collect::<Vec<_>>())),
                    Arc::new(Int64Array::from(
                        dedup.values().copied().collect::<Vec<_>>(),
                    )),
                ],
            )
            .expect("batch");
            t.update(batch).await.expect("update");
            for (k, a) in dedup {
                // A partial update of a missing row creates it with the other columns NULL.
                model.entry(k).or_insert((None, None)).0 = Some(a);
            }
        }
        Op::Delete(keys) => {
            let mut keys = keys.clone();
            keys.sort();
            keys.dedup();
            let batch = RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
                vec![Arc::new(Int64Array::from(keys.clone()))],
            )
            .expect("batch");
            t.delete(batch).await.expect("delete");
            for k in keys {
                model.remove(&k);
            }
        }
        Op::Flush => t.flush().await.expect("flush"),
        Op::Compact => {
            t.flush().await.expect("flush");
            t.compact().await.expect("compact")
        }
        Op::Drain => {
            t.flush().await.expect("flush");
            t.drain_to_bucket().await.expect("drain");
            t.wait_jobs().await.expect("jobs")
        }
    }
}

fn show(v: &Option<i64>) -> String {
    v.map_or("NULL".into(), |x| x.to_string())
}

fn show_s(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "NULL".into())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("STRATA_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12), ..ProptestConfig::default() })]
    #[test]
    fn sql_equals_the_model(ops in prop::collection::vec(op(), 1..40), lo in 0i64..40, span in 0i64..20) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(async {
            let tmp = tempfile::tempdir().expect("tmp");
            let store = common::local_store(&tmp.path().join("bucket"));
            let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
            db.create_table("m", schema(true).as_ref().clone(), &["id"]).await.expect("create");
            let t = db.table("m").await.expect("table");
            let mut model = Model::new();
            for op in &ops {
                apply(&t, &mut model, op).await;
            }
            // Both the writer's own view and a reader over the bucket alone.
            let mut c = common::small_config();
            c.jobs.inprocess_workers = 0;
            let reader = common::open(&store, &tmp.path().join("reader"), c).await;
            for q in [common::service(&db, false), common::service(&reader, false)] {
                let all = common::sql(&q, "SELECT id, a, b FROM m ORDER BY id").await;
                let want: Vec<Vec<String>> = model
                    .iter()
                    .map(|(k, (a, b))| vec![k.to_string(), show(a), show_s(b)])
                    .collect();
                assert_eq!(all, want);

                let hi = lo + span;
                let got = common::sql(&q, &format!("SELECT id FROM m WHERE id >= {lo} AND id < {hi} ORDER BY id")).await;
                let want: Vec<Vec<String>> = model.range(lo..hi).map(|(k, _)| vec![k.to_string()]).collect();
                assert_eq!(got, want);

                let got = common::sql(&q, "SELECT id FROM m WHERE a > 0 ORDER BY id").await;
                let want: Vec<Vec<String>> = model
                    .iter()
                    .filter(|(_, (a, _))| a.is_some_and(|a| a > 0))
                    .map(|(k, _)| vec![k.to_string()])
                    .collect();
                assert_eq!(got, want);

                let got = common::sql(&q, "SELECT count(*), count(b), sum(a) FROM m").await;
                let sum: Option<i64> = model.values().filter_map(|v| v.0).fold(None, |s, a| Some(s.unwrap_or(0) + a));
                let want = vec![vec![
                    model.len().to_string(),
                    model.values().filter(|v| v.1.is_some()).count().to_string(),
                    show(&sum),
                ]];
                assert_eq!(got, want);
            }
            reader.close().await;
            db.close().await;
        });
    }
}
