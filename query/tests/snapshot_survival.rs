//! A long query keeps reading its snapshot while the writer flushes, compacts, moves data
//! to S3 and collects garbage underneath it: in the writer's own process (read guard and
//! in-process pin) and in another process (durable pin object in the bucket).

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use futures::StreamExt;
use strata_engine::{Db, Table};
use strata_query::{QueryConfig, QueryService};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

async fn put(t: &Table, ids: std::ops::Range<i64>, tag: &str) {
    let v: Vec<String> = ids.clone().map(|i| format!("{tag}{i}")).collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.collect::<Vec<_>>())),
            Arc::new(StringArray::from(v)),
        ],
    )
    .expect("batch");
    t.upsert(batch).await.expect("upsert");
}

async fn churn(t: &Table) -> strata_engine::GcReport {
    // Overwrite everything (so old files become garbage), then push it all down and collect.
    for round in 0..3 {
        put(t, 0..2000, &format!("new{round}-")).await;
        t.flush().await.expect("flush");
        t.compact().await.expect("compact");
        t.drain_to_bucket().await.expect("drain");
        t.compact_column_group(0, 0).await.expect("compact s3");
        t.wait_jobs().await.expect("jobs");
    }
    t.gc().await.expect("gc")
}

fn slow_service(db: &Db) -> QueryService {
    QueryService::new(
        db.clone(),
        QueryConfig {
            batch_rows: 50,
            scan_partitions: 1,
            ..Default::default()
        },
        false,
    )
}

async fn setup(tmp: &std::path::Path) -> (Db, Table) {
    let store = common::local_store(&tmp.join("bucket"));
    let mut c = common::small_config();
    c.gc.manifest_versions_retained = 1;
    c.history_retention_ms = 0;
    let db = common::open(&store, &tmp.join("writer"), c).await;
    db.create_table("s", schema().as_ref().clone(), &["id"])
        .await
        .expect("create");
    let t = db.table("s").await.expect("table");
    put(&t, 0..2000, "old-").await;
    t.flush().await.expect("flush");
    t.drain_to_bucket().await.expect("drain");
    t.wait_jobs().await.expect("jobs");
    put(&t, 1000..1500, "mid-").await;
    t.flush().await.expect("flush");
    (db, t)
}

async fn check_long_query(q: &QueryService, t: &Table) {
    let (_, mut stream) = q
        .stream("SELECT id, v FROM s ORDER BY id")
        .await
        .expect("query");
    let first = stream.next().await.expect("a batch").expect("ok");
    let report = churn(t).await;
    assert!(
        report.parquet_deleted + report.ssts_deleted > 0,
        "gc collected nothing: {report:?}"
    );
    let mut batches = vec![first];
    while let Some(b) = stream.next().await {
        batches.push(b.expect("the query survives compaction and gc"));
    }
    let rows = common::rows(&batches);
    assert_eq!(rows.len(), 2000);
    for (i, r) in rows.iter().enumerate() {
        let want = if (1000..1500).contains(&i) {
            "mid-"
        } else {
            "old-"
        };
        assert_eq!(r[1], format!("{want}{i}"), "row {i}");
    }
    // A new query sees the churned state.
    let (_, now) = q
        .collect("SELECT v FROM s WHERE id = 7")
        .await
        .expect("query");
    assert_eq!(common::rows(&now), vec![vec!["new2-7".to_string()]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_query_in_the_writer_process_survives_compaction_and_gc() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (db, t) = setup(tmp.path()).await;
    check_long_query(&slow_service(&db), &t).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_query_in_another_process_survives_compaction_and_gc() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (db, t) = setup(tmp.path()).await;
    // A second database over the same bucket is a reader like a query service process.
    let store = common::local_store(&tmp.path().join("bucket"));
    let mut c = common::small_config();
    c.jobs.inprocess_workers = 0;
    let reader = common::open(&store, &tmp.path().join("reader"), c).await;
    check_long_query(&slow_service(&reader), &t).await;
    // The durable pin is gone once the query is.
    let pins = tmp.path().join("bucket/strata/tables");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let left: Vec<_> = walk(&pins)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/pins/"))
        .collect();
    assert!(left.is_empty(), "pins left behind: {left:?}");
    reader.close().await;
    db.close().await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
