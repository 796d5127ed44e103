//! Promotion of hot records read from S3 back to NVMe (HotRAP §3.3–§3.4), per shard.
//!
//! A point read that had to go to the S3 levels puts the S3 versions it read into a bounded
//! promotion cache; later reads of the key are answered from the cache (after the memtables
//! and NVMe levels, before S3). Records leave the cache in two ways:
//!
//! - **by flush**: when the cache is full, its hot records (by the hotness tracker) that
//!   have no version in the memtables or NVMe levels are written to an SST at the *oldest*
//!   end of L0, under the manifest lock (no flush or compaction can interleave between the
//!   check and the commit, and writes arriving meanwhile land in the memtable, above L0);
//! - **by compaction**: an NVMe→S3 job copies the cache's hot records in its key range into
//!   the records it retains in the last NVMe level, unless its inputs hold the key (their
//!   version is the same or newer); its commit then drops the range from the cache.
//!
//! The race of §3.3 (a newer version reaching S3 while an older one sits in the cache) is
//! closed with an epoch: every NVMe→S3 commit bumps it and drops the cache's records in its
//! key range, and a read inserts only if the epoch did not move since it began (else the
//! insert is aborted and counted). Cached records are used only by reads at the latest
//! sequence number: they are the versions visible when they were read, and nothing newer
//! can have reached S3 since.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::entry::Entry;

/// One key's S3 versions, newest first, as a read at `read_seq` found them.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) versions: Vec<Entry>,
    pub(crate) read_seq: u64,
}

impl Cached {
    fn bytes(&self, key: &[u8]) -> u64 {
        key.len() as u64
            + self
                .versions
                .iter()
                .map(|e| (e.key.len() + e.value.len() + 16) as u64)
                .sum::<u64>()
    }
}

/// The promotion cache of a shard.
#[derive(Debug, Default)]
pub(crate) struct PromotionCache {
    entries: BTreeMap<Vec<u8>, Cached>,
    bytes: u64,
    /// Bumped by every NVMe→S3 commit.
    pub(crate) epoch: u64,
    /// A promotion by flush is running.
    pub(crate) flushing: bool,
}

impl PromotionCache {
    /// The cached versions of `key` for a read at the latest sequence number `seq`.
    pub(crate) fn get(&self, key: &[u8], seq: u64) -> Option<&Cached> {
        self.entries.get(key).filter(|c| c.read_seq <= seq)
    }

    /// Caches a read's S3 versions unless an NVMe→S3 commit happened since the read began
    /// (`epoch`); false = aborted.
    pub(crate) fn insert(&mut self, key: &[u8], cached: Cached, epoch: u64) -> bool {
        if epoch != self.epoch {
            return false;
        }
        let size = cached.bytes(key);
        if let Some(old) = self.entries.insert(key.to_vec(), cached) {
            self.bytes -= old.bytes(key);
        }
        self.bytes += size;
        true
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Takes the records with keys in `[lo, hi]` (an NVMe→S3 commit's range), bumping the
    /// epoch.
    pub(crate) fn take_range(&mut self, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Cached)> {
        self.epoch += 1;
        let keys: Vec<Vec<u8>> = self
            .entries
            .range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(c) = self.entries.remove(&k) {
                self.bytes -= c.bytes(&k);
                out.push((k, c));
            }
        }
        out
    }

    /// Copies of the records with keys in `[lo, hi]` (the cache is unchanged).
    pub(crate) fn range(&self, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Cached)> {
        self.entries
            .range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)))
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect()
    }

    /// Takes every record (a promotion by flush) with the epoch it was taken at.
    pub(crate) fn take_all(&mut self) -> (Vec<(Vec<u8>, Cached)>, u64) {
        self.bytes = 0;
        (
            std::mem::take(&mut self.entries).into_iter().collect(),
            self.epoch,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;
    use bytes::Bytes;

    fn cached(k: &str, seq: u64) -> Cached {
        Cached {
            versions: vec![Entry {
                key: Bytes::copy_from_slice(k.as_bytes()),
                seq,
                kind: EntryKind::Put,
                value: Bytes::from_static(b"value"),
            }],
            read_seq: seq + 10,
        }
    }

    #[test]
    fn inserts_abort_after_a_commit_and_ranges_are_taken() {
        let mut pc = PromotionCache::default();
        assert!(pc.insert(b"a", cached("a", 1), 0));
        assert!(pc.insert(b"m", cached("m", 2), 0));
        assert!(pc.insert(b"z", cached("z", 3), 0));
        assert_eq!(pc.len(), 3);
        assert!(pc.get(b"a", 11).is_some());
        // A read at an older sequence number than the caching read does not use it.
        assert!(pc.get(b"a", 5).is_none());
        let taken = pc.take_range(b"b", b"m");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].0, b"m".to_vec());
        // A read that began before that commit may hold an older version: aborted.
        assert!(!pc.insert(b"q", cached("q", 4), 0));
        assert!(pc.insert(b"q", cached("q", 4), 1));
        let before = pc.bytes();
        assert!(pc.insert(b"q", cached("q", 4), 1));
        assert_eq!(
            pc.bytes(),
            before,
            "replacing a record keeps the size exact"
        );
        let (all, epoch) = pc.take_all();
        assert_eq!((all.len(), epoch, pc.bytes(), pc.len()), (3, 1, 0, 0));
    }
}
