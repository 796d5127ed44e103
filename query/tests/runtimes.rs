//! Scans decode on the consuming thread on a multi-thread runtime and on a blocking thread
//! behind a channel on a current-thread runtime: both give the same rows, LIMIT included,
//! and the same `EXPLAIN ANALYZE` row counts.

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

const QUERIES: [&str; 3] = [
    "SELECT id, v FROM t ORDER BY id",
    "SELECT count(*), sum(v) FROM t",
    "SELECT count(*) FROM (SELECT id FROM t LIMIT 7)",
];

/// Rows over a flushed level and the memtable, half of them updated since.
async fn scans() -> Vec<Vec<Vec<String>>> {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = common::local_store(&tmp.path().join("bucket"));
    let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
    ]));
    db.create_table("t", schema.as_ref().clone(), &["id"])
        .await
        .expect("create");
    let t = db.table("t").await.expect("table");
    for (ids, add) in [
        ((0..400i64).collect::<Vec<_>>(), 0),
        ((0..400).step_by(2).collect(), 1000),
    ] {
        let v: Vec<i64> = ids.iter().map(|i| i + add).collect();
        t.upsert(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(Int64Array::from(v)),
                ],
            )
            .expect("batch"),
        )
        .await
        .expect("upsert");
        if add == 0 {
            t.flush().await.expect("flush");
        }
    }
    let q = common::service(&db, false);
    let mut out = Vec::new();
    for text in QUERIES {
        out.push(common::sql(&q, text).await);
    }
    // The scan's row counts by path are complete when EXPLAIN ANALYZE reads them, also
    // when a LIMIT stops the scan early.
    let mut counts = Vec::new();
    for text in ["SELECT count(*) FROM t", "SELECT id FROM t LIMIT 7"] {
        let plan = common::sql(&q, &format!("EXPLAIN ANALYZE {text}"))
            .await
            .concat()
            .join(" ");
        let metric = |name: &str| -> String {
            let at = plan.find(&format!("{name}=")).expect(name) + name.len() + 1;
            plan[at..]
                .chars()
                .take_while(|c| *c != ',' && *c != ']')
                .collect()
        };
        counts.push(vec![metric("rows_merged"), metric("rows_passed")]);
    }
    out.push(counts);
    db.close().await;
    out
}

#[test]
fn current_thread_and_multi_thread_scans_agree() {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(scans());
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(scans());
    assert_eq!(multi, current);
    assert_eq!(multi[0].len(), 400);
    assert_eq!(multi[0][1], vec!["1".to_string(), "1".to_string()]);
    assert_eq!(multi[0][2], vec!["2".to_string(), "1002".to_string()]);
    let sum: i64 = (0..400).sum::<i64>() + 200 * 1000;
    assert_eq!(multi[1], vec![vec!["400".to_string(), sum.to_string()]]);
    assert_eq!(multi[2], vec![vec!["7".to_string()]]);
    // The limited scan stops after its first batch (all 400 rows here).
    assert_eq!(
        multi[3],
        vec![vec!["400".to_string(), "0".to_string()]; 2],
        "{current:?}"
    );
}
