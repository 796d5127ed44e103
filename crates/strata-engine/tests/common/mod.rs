//! Helpers shared by the engine's integration tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use strata_common::clock;
use strata_engine::{Db, EngineConfig};
use strata_objstore::{ObjectStoreConfig, ObjectStoreMetrics, S3Config, StoreRef};

/// `id Int64` (key), `a Utf8`, `b Int64`.
pub fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("a", DataType::Utf8, true),
        Field::new("b", DataType::Int64, true),
    ])
}

pub fn rows(ids: &[i64], a: &[Option<&str>], b: &[Option<i64>]) -> RecordBatch {
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

pub fn only(cols: &[(&str, ArrayRef)]) -> RecordBatch {
    let s = schema();
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, _)| s.field_with_name(n).unwrap().clone())
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.iter().map(|(_, a)| a.clone()).collect(),
    )
    .unwrap()
}

/// `k Int64` (key) and four strings `a b c d`: LASER's examples.
pub fn wide() -> Schema {
    Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("a", DataType::Utf8, true),
        Field::new("b", DataType::Utf8, true),
        Field::new("c", DataType::Utf8, true),
        Field::new("d", DataType::Utf8, true),
    ])
}

/// A batch of some columns of [`wide`].
pub fn wide_batch(cols: &[(&str, ArrayRef)]) -> RecordBatch {
    let s = wide();
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, _)| s.field_with_name(n).unwrap().clone())
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.iter().map(|c| c.1.clone()).collect(),
    )
    .unwrap()
}

pub fn strs(v: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(v.to_vec()))
}

pub fn keys(ids: &[i64]) -> RecordBatch {
    only(&[("id", Arc::new(Int64Array::from(ids.to_vec())))])
}

/// The row of key `k` of table `table` (the `schema()` table, one shard) read through a
/// view, as SQL over a single key reads it (`ShardView::point`).
pub async fn view_point(
    db: &Db,
    table: &str,
    k: i64,
) -> Option<(i64, Option<String>, Option<i64>)> {
    view_point_at(db, table, k, None).await.unwrap()
}

/// [`view_point`] at a snapshot (`AS OF`): the view's error when it cannot be read.
pub async fn view_point_at(
    db: &Db,
    table: &str,
    k: i64,
    as_of: Option<strata_engine::AsOf>,
) -> strata_engine::Result<Option<(i64, Option<String>, Option<i64>)>> {
    let view = db.view(table, as_of).await?;
    let codec = db.table(table).await.unwrap().table_schema().clone();
    let handle = tokio::runtime::Handle::current();
    let row = strata_common::exec::blocking(move || {
        let key = |k: i64| codec.encode_key(&[strata_engine::Value::Int(k)]).unwrap();
        let (start, end) = (key(k), key(k + 1));
        let mut b = view.shards[0]
            .batches(&start, Some(&end), &[0, 1, 2], 64, &handle)
            .unwrap();
        let mut out = Vec::new();
        while let Some(batch) = b.next_batch().unwrap() {
            out.extend(decode(&batch));
        }
        assert!(out.len() <= 1, "one key, at most one row: {out:?}");
        out.pop()
    })
    .await
    .unwrap();
    Ok(row)
}

/// Rows of a scan result as (id, a, b).
pub fn decode(batch: &RecordBatch) -> Vec<(i64, Option<String>, Option<i64>)> {
    let id = batch
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let a = batch
        .column_by_name("a")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let b = batch
        .column_by_name("b")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    (0..batch.num_rows())
        .map(|i| {
            (
                id.value(i),
                (!a.is_null(i)).then(|| a.value(i).to_string()),
                (!b.is_null(i)).then(|| b.value(i)),
            )
        })
        .collect()
}

/// Column-group layouts of two non-key columns `a`, `b` (as in [`schema`]) over two S3 levels:
/// 0 one group on both, 1 split on the second, 2 split (`b` first) on both.
pub fn layout(n: usize) -> Vec<Vec<Vec<String>>> {
    let g = |cols: &[&str]| cols.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    match n {
        0 => vec![vec![g(&["a", "b"])], vec![g(&["a", "b"])]],
        1 => vec![vec![g(&["a", "b"])], vec![g(&["a"]), g(&["b"])]],
        _ => vec![vec![g(&["b"]), g(&["a"])], vec![g(&["b"]), g(&["a"])]],
    }
}

/// Settings that make flushes and compactions happen after a few writes.
pub fn small_config() -> EngineConfig {
    let mut c = EngineConfig::default();
    c.memtable_bytes_max = 4 << 10;
    c.l0_compaction_trigger = 2;
    c.level_bytes_base = 16 << 10;
    c.level_size_multiplier = 4;
    c.sst_bytes_target = 8 << 10;
    c.sst_block_bytes = 512;
    c.gc.interval_ms = 0;
    c.gc.min_age_ms = 0;
    c.s3_level_bytes_base = 64 << 10;
    c.parquet_file_bytes = 16 << 10;
    c.parquet_row_group_rows = 64;
    c.parquet_page_bytes = 1024;
    c.cache_block_bytes = 4096;
    c.jobs.poll_ms = 20;
    c.jobs.heartbeat_ms = 200;
    c.jobs.lease_ms = 2_000;
    // Tests that do not exercise overload keep writing; tests/overload.rs covers refusals.
    c.sorted_runs_max = 10_000;
    c.memtables_frozen_max = 64;
    // Compaction tests check what is collapsed and dropped; time travel keeps history
    // (query/slt/04_time_travel.slt covers it).
    c.history_retention_ms = 0;
    c
}

pub async fn open(store: &StoreRef, local: &Path, config: EngineConfig) -> Db {
    Db::open_with_store(
        store.clone(),
        None,
        ObjectStoreMetrics::default(),
        local.to_path_buf(),
        config,
        clock::system(),
    )
    .await
    .unwrap()
}

/// [`open`] over `store` with every request counted in the returned metrics.
pub async fn open_counted(
    store: &StoreRef,
    local: &Path,
    config: EngineConfig,
) -> (Db, ObjectStoreMetrics) {
    let metrics = ObjectStoreMetrics::default();
    let counted: StoreRef = Arc::new(strata_objstore::InstrumentedStore::new(
        store.clone(),
        metrics.clone(),
    ));
    let db = Db::open_with_store(
        counted,
        None,
        metrics.clone(),
        local.to_path_buf(),
        config,
        clock::system(),
    )
    .await
    .unwrap();
    (db, metrics)
}

pub fn memory_store() -> StoreRef {
    Arc::new(object_store::memory::InMemory::new())
}

pub fn local_store(dir: &Path) -> StoreRef {
    Arc::new(strata_objstore::LocalDirStore::new(dir).unwrap())
}

/// LocalStack settings from the environment (set by `ci/test.sh`); None skips the test,
/// unless `STRATA_REQUIRE_S3` is set, which turns a missing LocalStack into a failure.
pub fn s3_config() -> Option<ObjectStoreConfig> {
    match std::env::var("STRATA_TEST_S3_ENDPOINT") {
        Ok(endpoint) => Some(ObjectStoreConfig::s3(S3Config {
            bucket: std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into()),
            region: Some("us-east-1".into()),
            endpoint: Some(endpoint),
            request_timeout_ms: 10_000,
        })),
        Err(_) => {
            assert!(
                std::env::var("STRATA_REQUIRE_S3").is_err(),
                "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
            );
            eprintln!(
                "skipping: STRATA_TEST_S3_ENDPOINT unset (run ci/test.sh to start LocalStack)"
            );
            None
        }
    }
}

pub async fn s3_store() -> Option<StoreRef> {
    let cfg = s3_config()?;
    let (store, _) = strata_objstore::build(&cfg, &ObjectStoreMetrics::default())
        .await
        .unwrap();
    Some(store)
}

/// A root prefix unique to this run so tests can share one bucket.
pub fn unique_prefix(name: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    format!(
        "test-{name}-{}-{:x}",
        std::process::id(),
        RandomState::new().hash_one(0u8)
    )
}
