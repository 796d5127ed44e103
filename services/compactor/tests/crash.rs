//! A compaction worker killed mid-job (real processes, LocalStack): its job is reclaimed
//! after the lease expires and finished by another worker; the result equals the oracle;
//! the dead attempt's output is garbage collected; nothing is lost or duplicated.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use strata_engine::{Db, EngineConfig, ScanOptions, Value};
use strata_objstore::{ObjectStoreConfig, ObjectStoreMetrics, S3Config};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("a", DataType::Utf8, true),
        Field::new("b", DataType::Int64, true),
    ])
}

fn rows(ids: &[i64], a: &[String], b: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(a.to_vec())),
            Arc::new(Int64Array::from(b.to_vec())),
        ],
    )
    .unwrap()
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(endpoint: &str, bucket: &str, prefix: &str, name: &str, pause_ms: u64) -> Worker {
    let scratch = tempfile::tempdir().unwrap().keep();
    Worker(
        Command::new(env!("CARGO_BIN_EXE_strata-compactor"))
            .args(["--store", "s3", "--bucket", bucket, "--endpoint", endpoint])
            .args(["--root-prefix", prefix, "--name", name])
            .args([
                "--lease-ms",
                "1500",
                "--heartbeat-ms",
                "300",
                "--poll-ms",
                "50",
            ])
            .arg("--scratch")
            .arg(&scratch)
            .arg(format!("--debug-pause-per-file-ms={pause_ms}"))
            .env("AWS_REGION", "us-east-1")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_job_is_finished_by_another() {
    let Ok(endpoint) = std::env::var("STRATA_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("STRATA_REQUIRE_S3").is_err(),
            "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
        );
        eprintln!("skipping: STRATA_TEST_S3_ENDPOINT unset (run ci/test.sh)");
        return;
    };
    let bucket = std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into());
    let prefix = format!("test-crash-{}", std::process::id());
    let store_config = ObjectStoreConfig::s3(S3Config {
        bucket: bucket.clone(),
        region: Some("us-east-1".into()),
        endpoint: Some(endpoint.clone()),
        request_timeout_ms: 10_000,
    });
    let (store, _) = strata_objstore::build(&store_config, &ObjectStoreMetrics::default())
        .await
        .unwrap();
    let mut config = EngineConfig::default();
    config.root_prefix = prefix.clone();
    config.jobs.inprocess_workers = 0; // only the worker processes below
    config.jobs.poll_ms = 50;
    config.gc.interval_ms = 0;
    config.gc.min_age_ms = 0;
    config.parquet_file_bytes = 32 << 10;
    config.parquet_row_group_rows = 512;
    let local = tempfile::tempdir().unwrap();
    let db = Db::open_with_store(
        store.clone(),
        None,
        ObjectStoreMetrics::default(),
        local.path().to_path_buf(),
        config,
        strata_common::clock::system(),
    )
    .await
    .unwrap();
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();

    // Oracle: upserts over 3000 keys, then updates and deletes of some.
    let mut oracle: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    for chunk in (0..3000i64).collect::<Vec<_>>().chunks(500) {
        let a: Vec<String> = chunk.iter().map(|i| format!("row-{i}")).collect();
        let b: Vec<i64> = chunk.iter().map(|i| i * 7).collect();
        t.upsert(rows(chunk, &a, &b)).await.unwrap();
        for (i, id) in chunk.iter().enumerate() {
            oracle.insert(*id, (a[i].clone(), b[i]));
        }
        t.flush().await.unwrap();
    }
    let upd: Vec<i64> = (0..3000).step_by(3).collect();
    let a: Vec<String> = upd.iter().map(|i| format!("upd-{i}")).collect();
    let b: Vec<i64> = upd.iter().map(|i| -i).collect();
    t.upsert(rows(&upd, &a, &b)).await.unwrap();
    for (i, id) in upd.iter().enumerate() {
        oracle.insert(*id, (a[i].clone(), b[i]));
    }
    let del: Vec<i64> = (0..3000).step_by(10).collect();
    t.delete(
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(del.clone())) as ArrayRef],
        )
        .unwrap(),
    )
    .await
    .unwrap();
    for id in &del {
        oracle.remove(id);
    }

    // Worker A pauses after writing its output, before handing it back: killed there.
    let mut a = worker(&endpoint, &bucket, &prefix, "worker-a", 60_000);
    let drain = {
        let t = t.clone();
        tokio::spawn(async move { t.drain_to_bucket().await })
    };
    let parquet_dir = strata_manifest::Layout::new(&prefix)
        .shard(1, 0)
        .parquet_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    let first_attempt_files = loop {
        let names: Vec<String> = store
            .list(Some(&parquet_dir))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        let mine: Vec<String> = names.into_iter().filter(|n| n.contains("-a001-")).collect();
        if !mine.is_empty() {
            // Let the rest of its files land; it pauses before handing back.
            tokio::time::sleep(Duration::from_millis(500)).await;
            break mine;
        }
        assert!(Instant::now() < deadline, "worker A never wrote output");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let jobs_dir = strata_manifest::Layout::new(&prefix).jobs_dir();
    let results: Vec<String> = store
        .list(Some(&jobs_dir))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    assert!(
        !results.iter().any(|p| p.ends_with(".result")),
        "worker A was killed before handing back: {results:?}"
    );

    // Worker B takes the job over once A's lease expires.
    let mut b = worker(&endpoint, &bucket, &prefix, "worker-b", 0);
    let drained = match tokio::time::timeout(Duration::from_secs(120), drain).await {
        Ok(d) => d,
        Err(_) => {
            // What the bucket says of the jobs, and whether worker B still runs, for the
            // failure message: a hang here otherwise leaves no trace.
            let jobs: Vec<(String, u64)> = store
                .list(Some(&jobs_dir))
                .map_ok(|m| (m.location.to_string(), m.size))
                .try_collect()
                .await
                .unwrap_or_default();
            let b_state = b.0.try_wait();
            panic!("job not finished by worker B in 120 s; worker B: {b_state:?}; jobs: {jobs:?}");
        }
    };
    drained.unwrap().unwrap();

    let m = t.shards().next().unwrap().manifest();
    let committed: Vec<String> = m.value.parquet_files().map(|f| f.name.clone()).collect();
    assert!(!committed.is_empty());
    assert!(
        committed.iter().all(|n| n.contains("-a002-")),
        "the second attempt's output is committed: {committed:?}"
    );
    assert_eq!(m.value.ssts().count(), 0, "the NVMe tier was moved down");

    let check = |batch: &RecordBatch| {
        let id = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let a = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let b = batch
            .column(2)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let got: Vec<(i64, (String, i64))> = (0..batch.num_rows())
            .map(|i| {
                assert!(!a.is_null(i) && !b.is_null(i));
                (id.value(i), (a.value(i).to_string(), b.value(i)))
            })
            .collect();
        let want: Vec<(i64, (String, i64))> = oracle.iter().map(|(k, v)| (*k, v.clone())).collect();
        assert_eq!(got.len(), want.len(), "no row lost or duplicated");
        assert_eq!(got, want);
    };
    check(&t.scan(&ScanOptions::default(), None).await.unwrap());
    for k in [0i64, 1, 3, 10, 2999] {
        let got = t.get(&[Value::Int(k)], None, None).await.unwrap();
        assert_eq!(got.is_some(), oracle.contains_key(&k), "key {k}");
    }

    // The dead attempt's files are garbage; GC removes them and nothing else.
    let report = t.gc().await.unwrap();
    assert!(
        report.parquet_deleted >= first_attempt_files.len(),
        "{report:?} vs {first_attempt_files:?}"
    );
    for f in &first_attempt_files {
        let p = object_store::path::Path::from(f.as_str());
        assert!(store.head(&p).await.is_err(), "{f} collected");
    }
    check(&t.scan(&ScanOptions::default(), None).await.unwrap());
    db.close().await;
}
