//! Decoded data blocks of row SSTs, kept in memory for point reads (per process).
//!
//! A point read whose key lands in a row SST (an L0 file, a row level) used to read the
//! block with a `pread` and decode it on the blocking pool every time: a thread hop of tens
//! of microseconds for a block the OS page cache held anyway. With its blocks here, a
//! repeated read runs on the caller's task and costs a binary search. Weighed in bytes (the
//! block as stored plus its decoded keys), bounded by `engine.row_block_cache_bytes`, on
//! `quick_cache` (S3-FIFO) like the columnar levels' caches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::sst::block::Block;

/// Typical weight of one block (a 4 KiB block with its keys), for the cache's item
/// estimate.
const BLOCK_BYTES_TYPICAL: u64 = 6 << 10;

/// Bytes charged per decoded entry beside its key (the `Entry` and its two handles).
const ENTRY_OVERHEAD: u64 = std::mem::size_of::<crate::entry::Entry>() as u64;

/// Which block: the reader's process-unique id and the block's index in the file.
pub(crate) type BlockKey = (u64, u32);

/// A decoded block and what it weighs.
#[derive(Debug)]
pub struct CachedBlock {
    /// The entries.
    pub block: Block,
    weight: u64,
}

impl CachedBlock {
    /// `block`, decoded from `stored_len` bytes.
    pub fn new(block: Block, stored_len: usize) -> Self {
        let keys: u64 = block.entries.iter().map(|e| e.key.len() as u64).sum();
        let weight = stored_len as u64 + keys + ENTRY_OVERHEAD * block.entries.len() as u64;
        Self { block, weight }
    }
}

#[derive(Clone, Copy)]
struct Weigh;

impl quick_cache::Weighter<BlockKey, Arc<CachedBlock>> for Weigh {
    fn weight(&self, _: &BlockKey, v: &Arc<CachedBlock>) -> u64 {
        v.weight.max(1)
    }
}

/// The cache (see the module doc). Disabled (every lookup a miss, nothing kept) at 0 bytes.
pub struct DecodedBlocks {
    blocks: Option<quick_cache::sync::Cache<BlockKey, Arc<CachedBlock>, Weigh>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl DecodedBlocks {
    /// A cache of at most `bytes` of decoded blocks (0: none).
    pub fn new(bytes: u64) -> Self {
        let blocks = (bytes > 0).then(|| {
            let items = (bytes / BLOCK_BYTES_TYPICAL).clamp(16, 1 << 22) as usize;
            quick_cache::sync::Cache::with_weighter(items, bytes, Weigh)
        });
        Self {
            blocks,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The block, when held (counted as a hit).
    pub(crate) fn get(&self, key: BlockKey) -> Option<Arc<CachedBlock>> {
        let got = self.blocks.as_ref().and_then(|c| c.get(&key));
        if got.is_some() {
            self.hits.fetch_add(1, Relaxed);
        }
        got
    }

    /// Keeps a block just read from its file (counted as a miss; kept when the cache is
    /// on).
    pub(crate) fn insert(&self, key: BlockKey, block: Arc<CachedBlock>) {
        self.misses.fetch_add(1, Relaxed);
        if let Some(c) = &self.blocks {
            c.insert(key, block);
        }
    }

    /// Bytes held, blocks held, lookups answered, lookups that had to read the file.
    pub fn stats(&self) -> (u64, usize, u64, u64) {
        let (bytes, len) = self
            .blocks
            .as_ref()
            .map_or((0, 0), |c| (c.weight(), c.len()));
        (
            bytes,
            len,
            self.hits.load(Relaxed),
            self.misses.load(Relaxed),
        )
    }
}

impl std::fmt::Debug for DecodedBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (bytes, blocks, _, _) = self.stats();
        write!(f, "DecodedBlocks({blocks} blocks, {bytes} bytes)")
    }
}
