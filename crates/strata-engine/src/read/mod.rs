//! Reads: point reads and scans of a shard at a sequence number, across the memtables, the
//! row levels and the columnar levels in the bucket.
//!
//! - [`view`]: a consistent, pinned view of one shard (the state, the sequence number, the
//!   holds that keep its files) and its point reads and scans;
//! - [`scan`]: the scan itself, the deep columnar level read by position or by key, with
//!   the upper tiers spliced in;
//! - [`overlay`]: merged columnar copies of the immutable upper tiers, kept for scans;
//! - `upper`: the versions of a key, and iterators, over the memtables and row levels;
//! - `remote`: iterators over the columnar levels and point lookups into them.
//!
//! May call the formats (`sst`, `columnar`), the shard state (`state`), version folding
//! (`fold`) and the record primitives; never the shard, compaction, jobs or GC.

pub mod overlay;
pub(crate) mod remote;
pub mod scan;
pub(crate) mod upper;
pub mod view;

use std::sync::Arc;

/// The process-wide caches reads go through (shared by every view of the process).
#[derive(Debug, Clone)]
pub struct ReadContext {
    /// Local block and tail cache of the columnar files.
    pub cache: Arc<crate::columnar::BlockCache>,
    /// Parsed metadata of open files, and their decoded pages.
    pub metas: Arc<crate::columnar::MetaCache>,
    /// Merged columnar copies of immutable upper tiers, for scans.
    pub overlays: Arc<overlay::OverlayCache>,
    /// Decoded data blocks of row SSTs, for point reads.
    pub row_blocks: Arc<crate::sst::DecodedBlocks>,
}
