//! Strata's LSM engine: tables with an Arrow schema and a primary key, written through a
//! WAL in the object store, buffered in memtables, flushed to row SSTs on a local directory
//! standing for NVMe (and uploaded before any manifest references them), compacted level by
//! level, read by key or key range at pinned snapshots, recovered from the bucket alone.
//!
//! Guarantees: a write acknowledged with `remote` durability is in the bucket; a batch is
//! atomic within a shard; reads at a snapshot see exactly the writes with sequence numbers
//! up to it; a newer writer fences an older one, whose next WAL or manifest write fails.
//!
//! Limits (this version): one shard per table; the S3 columnar tier and hot-record
//! retention are separate components built on this crate; reads of explicit old sequence
//! numbers need a pinned [`Snapshot`].

mod background;
mod backpressure;
pub mod cluster;
pub mod columnar;
pub mod compaction;
pub mod config;
pub mod context;
pub mod db;
mod deep_run;
pub mod entry;
pub mod error;
mod fold;
pub mod gc;
pub mod history;
pub mod hotness;
pub mod iter;
pub mod jobs;
pub mod keycodec;
mod localfs;
pub mod memtable;
pub mod metrics;
pub mod node;
mod offload;
mod promotion;
pub mod read;
mod reclaim;
pub mod row;
pub mod schema;
pub mod shard;
pub mod sst;
pub mod state;
pub mod store;
#[cfg(test)]
mod testkit;
pub mod value;
pub mod varint;
mod version;
pub mod wal;

pub use cluster::{ClusterConfig, ShardLease};
pub use config::{Durability, EngineConfig, GcConfig, HotnessConfig, JobsConfig, WriteOptions};
pub use db::{CatalogSnapshot, Db, DbConfig, ScanOptions, Snapshot, Table, TableView};
pub use error::{Error, Result};
pub use gc::{GcPlan, GcReport};
pub use node::NodeInfo;
pub use read::scan::{ScanPaths, ViewBatches};
pub use read::view::{AsOf, ScanSummary, ShardView, ViewRows};
pub use read::{overlay, scan, view};
pub use schema::Mutation;
pub use shard::{Shard, ShardSnapshot};
pub use store::pins;
pub use value::Value;
