//! Builders shared by the engine's unit tests: row SSTs on disk, columnar file entries and
//! job specs with one-byte keys.

use std::sync::Arc;

use bytes::Bytes;
use strata_manifest::{ParquetFileInfo, SstId, TableEntry, TableKind};

use crate::entry::{Entry, EntryKind};
use crate::jobs::{JobSource, JobSpec, JobTarget};
use crate::sst::SstBuilder;
use crate::state::SstHandle;

/// An SST `n` (epoch 1) of keys `lo..=hi` (one byte each) at sequence number `seq`, written
/// in `dir`.
pub(crate) fn sst(dir: &std::path::Path, n: u64, lo: u8, hi: u8, seq: u64) -> Arc<SstHandle> {
    let path = dir.join(format!("{n}.sst"));
    let mut b = SstBuilder::create(&path, 4096, 10).unwrap();
    for k in lo..=hi {
        b.add(&Entry {
            key: Bytes::from(vec![k]),
            seq,
            kind: EntryKind::Put,
            value: Bytes::from_static(b"v"),
        })
        .unwrap();
    }
    let o = crate::compaction::finish(SstId { epoch: 1, n }, path, b).unwrap();
    Arc::new(SstHandle::new(o.info, o.reader, o.path))
}

/// A columnar file entry of keys `lo..=hi`: 10 rows, 1,000 bytes, sequence number 1.
pub(crate) fn parquet(name: &str, lo: u8, hi: u8) -> ParquetFileInfo {
    ParquetFileInfo {
        name: name.into(),
        key_min: vec![lo],
        key_max: vec![hi],
        seq_min: 1,
        seq_max: 1,
        rows: 10,
        size_bytes: 1000,
        tail_offset: 0,
    }
}

/// A job spec (id `job`, table `t`, target level 0) reading `input_bytes`.
pub(crate) fn job_spec(source: JobSource, targets: Vec<JobTarget>, input_bytes: u64) -> JobSpec {
    JobSpec {
        id: "job".into(),
        table: TableEntry {
            id: 1,
            name: "t".into(),
            kind: TableKind::Table,
            schema: arrow_schema::Schema::empty(),
            primary_key: Vec::new(),
            shards: Vec::new(),
            column_groups: Vec::new(),
            created_at_ms: 0,
        },
        shard_dir: "t/0".into(),
        source,
        target_level: 0,
        targets,
        bottommost: false,
        pins: Vec::new(),
        keep_above: u64::MAX,
        file_bytes: 1 << 20,
        row_group_rows: 1024,
        page_bytes: 8192,
        page_rows: 1024,
        dictionary_page_bytes: 64 << 10,
        input_bytes,
        created_at_ms: 0,
    }
}
