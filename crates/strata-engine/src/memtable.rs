//! The in-memory write buffer: a lock-free skiplist of versions ordered by key ascending,
//! then sequence number descending, so the newest version of a key comes first.
//!
//! Scans fold a memtable's versions into Arrow columns once (`crate::read::overlay`) and
//! then need only the versions newer than that fold. The skiplist cannot find those
//! without walking every version of the scan's range, the folded ones included (about
//! 60 ns each: a scan of 50,000 just-written keys spent 3 ms walking them). So once a scan
//! asks for them ([`Memtable::log_newer`]), the memtable also logs each later version in
//! the order written, in chunks of [`RECENT_CHUNK`] sorted by key on first use: the newer
//! versions of a range are then found by a binary search per chunk. A logged version
//! takes [`RECENT_ENTRY_BYTES`] (its key and value are the skiplist's), outside
//! [`Memtable::size_bytes`], so a memtable flushes at the same size whether scanned or not.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

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
    /// Whether versions are logged in the order written (see the module documentation).
    logging: AtomicBool,
    recent: parking_lot::Mutex<Recent>,
}

/// Versions per chunk of the log of recent versions.
pub const RECENT_CHUNK: usize = 1024;

/// The most chunks a scan searches; with more newer versions than that (262,144) it walks
/// the range, a chunk at a time, instead of holding copies of them all at once.
const RECENT_CHUNKS_MAX: usize = 256;

/// Memory a logged version takes (its key and value are shared with the skiplist's).
pub const RECENT_ENTRY_BYTES: usize = std::mem::size_of::<Entry>() + 4;

/// The log of versions written since logging began.
#[derive(Debug, Default)]
struct Recent {
    /// Every version with a sequence number above this one is logged.
    from: u64,
    /// Full chunks, oldest first.
    sealed: Vec<Arc<RecentChunk>>,
    /// The chunk being filled.
    open: Vec<Entry>,
}

/// Up to [`RECENT_CHUNK`] versions in the order written.
#[derive(Debug)]
struct RecentChunk {
    entries: Vec<Entry>,
    /// Newest sequence number in it.
    seq_max: u64,
    /// `entries`' indices in (key, sequence number descending) order, equal versions in the
    /// order written; made by the first scan that needs it.
    by_key: OnceLock<Vec<u32>>,
}

impl RecentChunk {
    fn by_key(&self) -> &[u32] {
        self.by_key.get_or_init(|| {
            let mut idx: Vec<u32> = (0..self.entries.len() as u32).collect();
            // Stable: versions equal in key and sequence number stay in the order written.
            idx.sort_by(|a, b| {
                newest_first(&self.entries[*a as usize], &self.entries[*b as usize])
            });
            idx
        })
    }
}

/// Key ascending, then sequence number descending.
fn newest_first(a: &Entry, b: &Entry) -> CmpOrdering {
    a.key.cmp(&b.key).then_with(|| b.seq.cmp(&a.seq))
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
            logging: AtomicBool::new(false),
            recent: parking_lot::Mutex::new(Recent::default()),
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
        // Sequentially consistent with `log_newer`: either this write sees logging on and
        // logs its versions, or `log_newer` sees this sequence number and logs from it.
        self.seq_max.fetch_max(seq, Ordering::SeqCst);
        if self.logging.load(Ordering::SeqCst) {
            let mut r = self.recent.lock();
            for e in entries {
                r.open.push(Entry {
                    key: e.key.clone(),
                    seq,
                    kind: e.kind,
                    value: e.value.clone(),
                });
                if r.open.len() >= RECENT_CHUNK {
                    let entries = std::mem::take(&mut r.open);
                    let seq_max = entries.iter().map(|e| e.seq).max().unwrap_or(0);
                    r.sealed.push(Arc::new(RecentChunk {
                        entries,
                        seq_max,
                        by_key: OnceLock::new(),
                    }));
                }
            }
        }
        self.bytes.fetch_add(added, Ordering::Relaxed);
        self.wal_id_min.fetch_min(wal_id, Ordering::Release);
        self.wal_id_max.fetch_max(wal_id, Ordering::Release);
    }

    /// Starts logging the versions written from now on (see the module documentation), if
    /// it has not already: a scan folding this memtable calls it before it chooses the
    /// sequence number to fold through, so later scans find the versions newer than that
    /// fold in the log.
    pub fn log_newer(&self) {
        if self.logging.load(Ordering::SeqCst) {
            return;
        }
        let mut r = self.recent.lock();
        if !self.logging.load(Ordering::SeqCst) {
            self.logging.store(true, Ordering::SeqCst);
            r.from = self.seq_max.load(Ordering::SeqCst);
        }
    }

    /// The versions in `[start, end)` with sequence numbers above `seq_floor`, in key order
    /// (newest first within a key), from the log of recent versions; None when the log
    /// does not hold all of them (it started after `seq_floor`, or was never started) or
    /// holds too many newer versions to search.
    fn newer_from_log(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        seq_floor: u64,
    ) -> Option<Vec<Entry>> {
        let inside = |e: &Entry| {
            e.seq > seq_floor
                && e.key.as_ref() >= start
                && end.is_none_or(|end| e.key.as_ref() < end)
        };
        let (chunks, mut out) = {
            let r = self.recent.lock();
            if !self.logging.load(Ordering::SeqCst) || r.from > seq_floor {
                return None;
            }
            // Every chunk holding a version above the floor (not a search by sequence
            // number: nothing here relies on versions being logged in sequence order).
            let chunks: Vec<Arc<RecentChunk>> = r
                .sealed
                .iter()
                .filter(|c| c.seq_max > seq_floor)
                .cloned()
                .collect();
            if chunks.len() > RECENT_CHUNKS_MAX {
                return None;
            }
            let open: Vec<Entry> = r.open.iter().filter(|e| inside(e)).cloned().collect();
            (chunks, open)
        };
        // The chunks' matches, then the open chunk's (written last), each in the order
        // written among equal versions, so a stable sort keeps that order.
        let mut found = Vec::new();
        for c in &chunks {
            let idx = c.by_key();
            let lo = idx.partition_point(|i| c.entries[*i as usize].key.as_ref() < start);
            let hi = match end {
                Some(end) => idx.partition_point(|i| c.entries[*i as usize].key.as_ref() < end),
                None => idx.len(),
            };
            found.extend(
                idx[lo..hi.max(lo)]
                    .iter()
                    .map(|i| &c.entries[*i as usize])
                    .filter(|e| e.seq > seq_floor)
                    .cloned(),
            );
        }
        found.append(&mut out);
        found.sort_by(newest_first);
        // A key written twice by one write (one sequence number): the skiplist holds the
        // last, so keep the last of equal versions.
        let mut deduped: Vec<Entry> = Vec::with_capacity(found.len());
        for e in found {
            match deduped.last_mut() {
                Some(last) if last.key == e.key && last.seq == e.seq => *last = e,
                _ => deduped.push(e),
            }
        }
        Some(deduped)
    }

    /// Memory held by the log of recent versions (see the module documentation), which
    /// [`Self::size_bytes`] leaves out: a memtable flushes at the same size whether or not
    /// scans fold it.
    pub fn log_bytes(&self) -> usize {
        let r = self.recent.lock();
        (r.sealed.len() * RECENT_CHUNK + r.open.len()) * RECENT_ENTRY_BYTES
    }

    /// Approximate memory used by its versions (not counting [`Self::log_bytes`]).
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
    /// `seq_floor` (what a fold through `seq_floor` does not hold): from the memtable's log
    /// of recent versions when that holds them all ([`Memtable::log_newer`]), else by
    /// walking the range.
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
        if self.seq_floor > 0
            && self.last.is_none()
            && self.buf.is_empty()
            && !self.done
            && let Some(found) =
                self.mem
                    .newer_from_log(&self.start, self.end.as_deref(), self.seq_floor)
        {
            self.buf = found.into();
            self.done = true;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn key(k: u16) -> Bytes {
        Bytes::copy_from_slice(&k.to_be_bytes())
    }

    /// The versions a walk of the skiplist finds (what scans did before the log).
    fn walked(m: &Memtable, start: &[u8], end: Option<&[u8]>, floor: u64) -> Vec<Entry> {
        let (mut out, mut last) = (Vec::new(), None);
        loop {
            let (chunk, l, done) = m.chunk(last.as_ref(), start, end, floor, 256);
            out.extend(chunk);
            if l.is_some() {
                last = l;
            }
            if done {
                return out;
            }
        }
    }

    fn iterated(m: &Arc<Memtable>, start: &[u8], end: Option<&[u8]>, floor: u64) -> Vec<Entry> {
        let mut it = MemtableIter::newer_than(m.clone(), start, end, floor);
        let mut out = Vec::new();
        while let Some(e) = it.next_entry().unwrap() {
            out.push(e);
        }
        out
    }

    /// Writes of one to three versions (a key twice in one write, deletes) before and
    /// after logging starts; for sequence numbers from before logging to past the last
    /// write and random ranges, the log's answer is the walk's.
    #[test]
    fn the_log_of_recent_versions_finds_what_a_walk_finds() {
        let mut rng = StdRng::seed_from_u64(7);
        let m = Arc::new(Memtable::new());
        let mut from = None;
        for seq in 1..=4000u64 {
            if seq == 700 {
                m.log_newer();
                from = Some(m.seq_max());
            }
            let mut entries = Vec::new();
            for _ in 0..rng.random_range(1..=3) {
                let k = if !entries.is_empty() && rng.random_bool(0.2) {
                    // The same key again in this write: the skiplist keeps the last.
                    let e: &PreparedEntry = entries.last().unwrap();
                    e.key.clone()
                } else {
                    key(rng.random_range(0..500))
                };
                let delete = rng.random_bool(0.1);
                entries.push(PreparedEntry {
                    key: k,
                    kind: if delete {
                        EntryKind::Delete
                    } else {
                        EntryKind::Put
                    },
                    value: if delete {
                        Bytes::new()
                    } else {
                        Bytes::from(format!("{seq}-{}", rng.random::<u32>()))
                    },
                });
            }
            m.insert(seq, seq / 100, &entries);
        }
        let from = from.unwrap();
        assert_eq!(from, 699);
        let sealed = m.recent.lock().sealed.len();
        assert!(sealed >= 4, "several chunks: {sealed}");
        for floor in [from, from + 1, 1500, 3999, 4000, 5000] {
            for _ in 0..40 {
                let a = rng.random_range(0..520u16);
                let b = rng.random_range(a..=520u16);
                let (start, end) = (key(a), key(b));
                let end = rng.random_bool(0.8).then_some(end);
                let want = walked(&m, &start, end.as_deref(), floor);
                let got = m.newer_from_log(&start, end.as_deref(), floor);
                assert_eq!(got.as_ref(), Some(&want), "floor {floor}, {a}..{b:?}");
                assert_eq!(iterated(&m, &start, end.as_deref(), floor), want);
            }
        }
        // Before logging began the log cannot answer; the iterator walks.
        assert!(m.newer_from_log(&[], None, from - 1).is_none());
        assert_eq!(iterated(&m, &[], None, 300), walked(&m, &[], None, 300));
    }

    /// With more newer versions than a scan may hold at once, the log does not answer and
    /// the iterator walks the range.
    #[test]
    fn too_many_newer_versions_are_walked() {
        let m = Arc::new(Memtable::new());
        m.log_newer();
        let value = Bytes::from_static(b"v");
        let n = (RECENT_CHUNKS_MAX + 1) * RECENT_CHUNK;
        for (i, seq) in (1..=n as u64).enumerate() {
            let k = (i % 60_000) as u16;
            let e = PreparedEntry {
                key: key(k),
                kind: EntryKind::Put,
                value: value.clone(),
            };
            m.insert(seq, 1, &[e]);
        }
        assert!(m.newer_from_log(&[], None, 1).is_none());
        // One chunk fewer: answered from the log.
        let floor = RECENT_CHUNK as u64;
        let got = m.newer_from_log(&key(100), Some(&key(200)), floor).unwrap();
        let want = walked(&m, &key(100), Some(&key(200)), floor);
        assert_eq!(got, want);
        assert_eq!(
            iterated(&m, &key(100), Some(&key(200)), 1),
            walked(&m, &key(100), Some(&key(200)), 1)
        );
    }

    /// A memtable nobody folds logs nothing.
    #[test]
    fn versions_are_logged_only_once_asked() {
        let m = Memtable::new();
        let put = |k| PreparedEntry {
            key: key(k),
            kind: EntryKind::Put,
            value: Bytes::from_static(b"v"),
        };
        m.insert(1, 1, &[put(1)]);
        let before = m.size_bytes();
        assert!(m.newer_from_log(&[], None, 1).is_none());
        assert_eq!(m.log_bytes(), 0);
        assert_eq!(RECENT_ENTRY_BYTES, 84, "as docs/configuration.md says");
        m.log_newer();
        m.insert(2, 1, &[put(2)]);
        assert_eq!(m.log_bytes(), RECENT_ENTRY_BYTES, "one version logged");
        assert!(m.size_bytes() > before);
        let got = m.newer_from_log(&[], None, 1).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].key.clone(), got[0].seq), (key(2), 2));
    }
}
