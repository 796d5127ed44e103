//! Versioned, immutable object chains committed by compare-and-swap, and the two chains
//! Strata keeps: the per-shard [`Manifest`] and the cluster [`Catalog`].
//!
//! A chain is a directory of objects `<dir>/<20-digit version>.json`. Version `v+1` is
//! committed by creating it if absent (If-None-Match); losing that race means another writer
//! committed first, and the caller refreshes and decides again. Invariants are checked before
//! every commit and right after every read.
//!
//! Limits: a chain's objects are small JSON documents; listing the directory is how the
//! newest version is found, so old versions must be garbage collected.

pub mod catalog;
pub mod error;
pub mod hexbytes;
pub mod layout;
pub mod manifest;
pub mod versioned;

pub use catalog::{Catalog, DroppedTable, ShardEntry, TableEntry, TableKind};
pub use error::{Error, Result};
pub use layout::{Layout, ShardPaths};
pub use manifest::{GroupRun, Level, Manifest, ParquetFileInfo, S3Level, SeqTime, SstId, SstInfo};
pub use versioned::{Invariants, Versioned, VersionedStore};
