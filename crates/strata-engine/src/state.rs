//! The immutable view of a shard readers take: memtables, SST handles per level, and the
//! manifest version they came from. Replaced whole (copy on write) by writes that freeze
//! memtables, flushes and compactions; a reader holding an `Arc<ShardState>` keeps every
//! file in it alive (epoch-style reclamation: L-Store, Umzi).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use strata_manifest::{Manifest, SstInfo, Versioned};

use crate::memtable::Memtable;
use crate::sst::SstReader;

/// An open local SST. Once marked obsolete (compacted away), its file is deleted when the
/// last reader drops it.
#[derive(Debug)]
pub struct SstHandle {
    /// Manifest entry.
    pub info: SstInfo,
    /// Reader.
    pub reader: Arc<SstReader>,
    /// Local file.
    pub path: PathBuf,
    obsolete: AtomicBool,
}

impl SstHandle {
    /// Wraps an open SST.
    pub fn new(info: SstInfo, reader: SstReader, path: PathBuf) -> Self {
        Self {
            info,
            reader: Arc::new(reader),
            path,
            obsolete: AtomicBool::new(false),
        }
    }

    /// Marks the file for deletion once unreferenced.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Whether `key` is inside the file's key range.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.info.key_min.as_slice() <= key && key <= self.info.key_max.as_slice()
    }
}

impl Drop for SstHandle {
    fn drop(&mut self) {
        // Often the last reader is a runtime thread: the unlink happens elsewhere.
        if self.obsolete.load(Ordering::Acquire) {
            crate::reclaim::delete_later(&self.path);
        }
    }
}

/// One consistent view of a shard.
#[derive(Debug, Clone)]
pub struct ShardState {
    /// The memtable taking writes.
    pub active: Arc<Memtable>,
    /// Frozen memtables awaiting flush, newest first.
    pub frozen: Vec<Arc<Memtable>>,
    /// SSTs per level (L0 newest first; deeper levels sorted by key).
    pub levels: Vec<Vec<Arc<SstHandle>>>,
    /// The manifest these levels come from.
    pub manifest: Arc<Versioned<Manifest>>,
}

impl ShardState {
    /// Memtables newest first.
    pub fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.active).chain(self.frozen.iter())
    }
}
