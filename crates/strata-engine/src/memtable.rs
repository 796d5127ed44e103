//! The in-memory write buffer: a lock-free skiplist of versions ordered by key ascending,
//! then sequence number descending, so the newest version of a key comes first.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use crossbeam_skiplist::SkipMap;

use crate::entry::{Entry, EntryKind};
use crate::error::Result;
use crate::iter::EntryIter;
use crate::schema::PreparedEntry;

/// Key of a version: user key ascending, sequence number descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalKey {
    /// Encoded user key.
    pub key: Bytes,
    /// Sequence number.
    pub seq: u64,
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.key
            .cmp(&other.key)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// A memtable.
#[derive(Debug)]
pub struct Memtable {
    /// Unique in the process.
    id: u64,
    /// What its content is made of, when another memtable built from the same source has
    /// the same content (a view's WAL tail: the segments read and the replay point).
    origin: Option<String>,
    map: SkipMap<InternalKey, (EntryKind, Bytes)>,
    bytes: AtomicUsize,
    seq_max: AtomicU64,
    wal_id_min: AtomicU64,
    wal_id_max: AtomicU64,
}

impl Default for Memtable {
    fn default() -> Self {
        Self::new()
    }
}

impl Memtable {
    /// An empty memtable.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            origin: None,
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            seq_max: AtomicU64::new(0),
            wal_id_min: AtomicU64::new(u64::MAX),
            wal_id_max: AtomicU64::new(0),
        }
    }

    /// An empty memtable to be filled from `origin` (see [`Self::identity`]).
    pub fn with_origin(origin: String) -> Self {
        Self {
            origin: Some(origin),
            ..Self::new()
        }
    }

    /// Its identity in this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What a cached fold of it is keyed by, with its newest sequence number: its origin
    /// when it has one (memtables filled from the same origin hold the same versions),
    /// else its id.
    pub fn identity(&self) -> String {
        match &self.origin {
            Some(o) => o.clone(),
            None => self.id.to_string(),
        }
    }

    /// Adds the versions of one write with sequence number `seq`, logged in WAL segment
    /// `wal_id`.
    pub fn insert(&self, seq: u64, wal_id: u64, entries: &[PreparedEntry]) {
        let mut added = 0;
        for e in entries {
            added += e.key.len() + e.value.len() + 32;
            self.map.insert(
                InternalKey {
                    key: e.key.clone(),
                    seq,
                },
                (e.kind, e.value.clone()),
            );
        }
        self.bytes.fetch_add(added, Ordering::Relaxed);
        self.seq_max.fetch_max(seq, Ordering::Release);
        self.wal_id_min.fetch_min(wal_id, Ordering::Release);
        self.wal_id_max.fetch_max(wal_id, Ordering::Release);
    }

    /// Approximate memory used.
    pub fn size_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Its smallest and largest keys; None when empty.
    pub fn key_span(&self) -> Option<(Bytes, Bytes)> {
        let lo = self.map.front()?.key().key.clone();
        let hi = self.map.back()?.key().key.clone();
        Some((lo, hi))
    }

    /// Number of versions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Highest sequence number inserted.
    pub fn seq_max(&self) -> u64 {
        self.seq_max.load(Ordering::Acquire)
    }

    /// Highest WAL segment whose writes were inserted.
    pub fn wal_id_max(&self) -> u64 {
        self.wal_id_max.load(Ordering::Acquire)
    }

    /// WAL segments its writes span (what a reopen replays if it is not flushed); 0 when
    /// empty.
    pub fn wal_segments(&self) -> u64 {
        let min = self.wal_id_min.load(Ordering::Acquire);
        let max = self.wal_id_max.load(Ordering::Acquire);
        if min > max { 0 } else { max - min + 1 }
    }

    /// Versions of `key` visible at `seq`, newest first.
    pub fn get(&self, key: &[u8], seq: u64) -> Vec<Entry> {
        let start = InternalKey {
            key: Bytes::copy_from_slice(key),
            seq,
        };
        self.map
            .range(start..)
            .take_while(|e| e.key().key.as_ref() == key)
            .map(|e| Entry {
                key: e.key().key.clone(),
                seq: e.key().seq,
                kind: e.value().0,
                value: e.value().1.clone(),
            })
            .collect()
    }

    /// Up to `max` versions after `after` (or from `start` when `after` is None), newer
    /// than `seq_floor` and below `end`; also the last version looked at, and whether the
    /// range is exhausted. Versions at or below the floor are skipped without a copy.
    fn chunk(
        &self,
        after: Option<&InternalKey>,
        start: &[u8],
        end: Option<&[u8]>,
        seq_floor: u64,
        max: usize,
    ) -> (Vec<Entry>, Option<InternalKey>, bool) {
        let lower = match after {
            Some(k) => Bound::Excluded(k.clone()),
            None => Bound::Included(InternalKey {
                key: Bytes::copy_from_slice(start),
                seq: u64::MAX,
            }),
        };
        let mut out = Vec::new();
        let mut last: Option<crossbeam_skiplist::map::Entry<'_, InternalKey, (EntryKind, Bytes)>> =
            None;
        // Versions looked at per call, so that a range of skipped versions is not walked
        // in one go while the caller holds nothing to show for it.
        let mut budget = max.saturating_mul(64).max(1);
        for e in self.map.range((lower, Bound::Unbounded)) {
            let k = e.key();
            if end.is_some_and(|end| k.key.as_ref() >= end) {
                return (out, last.map(|e| e.key().clone()), true);
            }
            if k.seq > seq_floor {
                out.push(Entry {
                    key: k.key.clone(),
                    seq: k.seq,
                    kind: e.value().0,
                    value: e.value().1.clone(),
                });
            }
            budget -= 1;
            if out.len() >= max || budget == 0 {
                return (out, Some(k.clone()), false);
            }
            last = Some(e);
        }
        (out, last.map(|e| e.key().clone()), true)
    }
}

/// Iterates a memtable from a start key, copying out bounded chunks so it owns no borrow.
pub struct MemtableIter {
    mem: std::sync::Arc<Memtable>,
    start: Bytes,
    end: Option<Bytes>,
    seq_floor: u64,
    last: Option<InternalKey>,
    buf: std::collections::VecDeque<Entry>,
    done: bool,
}

impl MemtableIter {
    /// Iterates `mem` from `start`.
    pub fn new(mem: std::sync::Arc<Memtable>, start: &[u8]) -> Self {
        Self::newer_than(mem, start, None, 0)
    }

    /// Iterates the versions of `mem` in `[start, end)` with sequence numbers above
    /// `seq_floor` (what a fold through `seq_floor` does not hold).
    pub fn newer_than(
        mem: std::sync::Arc<Memtable>,
        start: &[u8],
        end: Option<&[u8]>,
        seq_floor: u64,
    ) -> Self {
        Self {
            mem,
            start: Bytes::copy_from_slice(start),
            end: end.map(Bytes::copy_from_slice),
            seq_floor,
            last: None,
            buf: Default::default(),
            done: false,
        }
    }
}

impl EntryIter for MemtableIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        while self.buf.is_empty() && !self.done {
            let (chunk, last, exhausted) = self.mem.chunk(
                self.last.as_ref(),
                &self.start,
                self.end.as_deref(),
                self.seq_floor,
                256,
            );
            self.done = exhausted;
            if last.is_some() {
                self.last = last;
            }
            self.buf.extend(chunk);
        }
        Ok(self.buf.pop_front())
    }
}
