//! Shared helpers of the query-service tests.
#![allow(clippy::field_reassign_with_default)]
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use strata_common::clock;
use strata_engine::{Db, EngineConfig};
use strata_objstore::{ObjectStoreMetrics, StoreRef};
use strata_query::{QueryConfig, QueryService};

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
    c.sorted_runs_max = 10_000;
    c.memtables_frozen_max = 64;
    c
}

pub fn local_store(dir: &Path) -> StoreRef {
    Arc::new(strata_objstore::LocalDirStore::new(dir).expect("bucket dir"))
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
    .expect("open db")
}

pub fn service(db: &Db, writable: bool) -> QueryService {
    QueryService::new(
        db.clone(),
        QueryConfig {
            scan_partitions: 2,
            ..Default::default()
        },
        writable,
    )
}

/// Rows of batches as strings (NULL for nulls), in order.
pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            out.push(fmts.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    out
}

/// Runs SQL and returns its rows as strings.
pub async fn sql(q: &QueryService, text: &str) -> Vec<Vec<String>> {
    let (_, batches) = q
        .collect(text)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    rows(&batches)
}
