//! Iterators over versions: one trait for every source (memtable, SST), a k-way merge in
//! (key ascending, sequence descending) order, and the resolution of each key's versions at
//! a snapshot into one row.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use bytes::Bytes;

use crate::entry::{Entry, EntryKind, Folded};
use crate::error::Result;
use crate::row::{RowCodec, RowValues};

/// A source of versions in (key ascending, sequence descending) order.
pub trait EntryIter: Send {
    /// The next version, or None at the end.
    fn next_entry(&mut self) -> Result<Option<Entry>>;
}

struct HeapItem {
    entry: Entry,
    source: usize,
}

impl PartialEq for HeapItem {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for HeapItem {}
impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> Ordering {
        // Ties (same key and seq in two sources) go to the lower source index: the newer one.
        (&self.entry.key, Reverse(self.entry.seq), self.source).cmp(&(
            &other.entry.key,
            Reverse(other.entry.seq),
            other.source,
        ))
    }
}

/// Merges sources into one ordered stream. Versions with the same key and sequence number
/// from several sources are parts of one version (column groups of the S3 levels): they
/// are merged into one when a codec is given, else exact duplicates are dropped.
pub struct MergeIter {
    sources: Vec<Box<dyn EntryIter>>,
    heap: BinaryHeap<Reverse<HeapItem>>,
    last: Option<(Bytes, u64)>,
    primed: bool,
    parts: Option<RowCodec>,
}

/// Merges two parts of the same version: columns carried by either.
pub fn union_parts(codec: &RowCodec, a: &Entry, b: &Entry) -> Result<Entry> {
    if a.kind == EntryKind::Delete || b.kind == EntryKind::Delete {
        return Ok(if a.kind == EntryKind::Delete { a } else { b }.clone());
    }
    let mut va = codec.decode(&a.value)?;
    let vb = codec.decode(&b.value)?;
    for (x, y) in va.iter_mut().zip(vb) {
        if x.is_none() {
            *x = y;
        }
    }
    // Parts that together carry every column are the whole row: older versions cannot
    // change it (a scan reads a multi-group row's parts as partial rows, see
    // `GroupFormat::scan_entries`).
    let kind =
        if a.kind == EntryKind::Put || b.kind == EntryKind::Put || va.iter().all(|v| v.is_some()) {
            EntryKind::Put
        } else {
            EntryKind::Partial
        };
    Ok(Entry {
        key: a.key.clone(),
        seq: a.seq,
        kind,
        value: Bytes::from(codec.encode(&va)?),
    })
}

impl MergeIter {
    /// Merges `sources`, listed newest first.
    pub fn new(sources: Vec<Box<dyn EntryIter>>) -> Self {
        Self {
            sources,
            heap: BinaryHeap::new(),
            last: None,
            primed: false,
            parts: None,
        }
    }

    /// Merges `sources` (newest first), merging parts of one version into one.
    pub fn with_parts(sources: Vec<Box<dyn EntryIter>>, codec: RowCodec) -> Self {
        let mut m = Self::new(sources);
        m.parts = Some(codec);
        m
    }

    /// Adds sources older than every source given so far (before the first read).
    pub fn add_sources(&mut self, more: Vec<Box<dyn EntryIter>>) {
        debug_assert!(!self.primed);
        self.sources.extend(more);
    }

    fn pop(&mut self) -> Result<Option<Entry>> {
        let Some(Reverse(item)) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(next) = self.sources[item.source].next_entry()? {
            self.heap.push(Reverse(HeapItem {
                entry: next,
                source: item.source,
            }));
        }
        Ok(Some(item.entry))
    }
}

impl EntryIter for MergeIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        if !self.primed {
            for (i, s) in self.sources.iter_mut().enumerate() {
                if let Some(entry) = s.next_entry()? {
                    self.heap.push(Reverse(HeapItem { entry, source: i }));
                }
            }
            self.primed = true;
        }
        while let Some(mut entry) = self.pop()? {
            if self.parts.is_some() {
                while self.heap.peek().is_some_and(|Reverse(top)| {
                    top.entry.key == entry.key && top.entry.seq == entry.seq
                }) {
                    if let (Some(part), Some(codec)) = (self.pop()?, self.parts.as_ref()) {
                        entry = union_parts(codec, &entry, &part)?;
                    }
                }
                return Ok(Some(entry));
            }
            let dup = self
                .last
                .as_ref()
                .is_some_and(|(k, s)| *k == entry.key && *s == entry.seq);
            if dup {
                continue;
            }
            self.last = Some((entry.key.clone(), entry.seq));
            return Ok(Some(entry));
        }
        Ok(None)
    }
}

/// Resolves each key's versions at `seq` into the row a reader sees; deleted keys are
/// skipped. Stops at `end` (exclusive).
pub struct RowIter {
    inner: Box<dyn EntryIter>,
    codec: RowCodec,
    seq: u64,
    end: Option<Vec<u8>>,
    pending: Option<Entry>,
}

impl RowIter {
    /// Resolves `inner` at snapshot `seq`.
    pub fn new(
        inner: Box<dyn EntryIter>,
        codec: &RowCodec,
        seq: u64,
        end: Option<Vec<u8>>,
    ) -> Self {
        Self {
            inner,
            codec: codec.clone(),
            seq,
            end,
            pending: None,
        }
    }

    /// The next live row.
    pub fn next_row(&mut self) -> Result<Option<(Bytes, RowValues)>> {
        loop {
            let first = match self.pending.take() {
                Some(e) => e,
                None => match self.inner.next_entry()? {
                    Some(e) => e,
                    None => return Ok(None),
                },
            };
            if let Some(end) = &self.end
                && first.key.as_ref() >= end.as_slice()
            {
                return Ok(None);
            }
            // Gather this key's visible versions (newest first) and fold them.
            let key = first.key.clone();
            let mut folded: Option<Folded> = None;
            let mut full = false;
            let mut next = Some(first);
            while let Some(e) = next {
                if e.key != key {
                    self.pending = Some(e);
                    break;
                }
                if e.seq <= self.seq && !full {
                    match &mut folded {
                        None => {
                            let f = Folded::from_entry(&self.codec, e.kind, &e.value)?;
                            full = f.kind.is_full();
                            folded = Some(f);
                        }
                        Some(f) => full = f.merge_older(&self.codec, e.kind, &e.value)?,
                    }
                }
                next = self.inner.next_entry()?;
            }
            if let Some(mut f) = folded {
                f.finish_at_bottom();
                if f.kind != EntryKind::Delete {
                    return Ok(Some((key, f.values)));
                }
            }
        }
    }
}

/// Folds a point lookup's versions (newest first, all visible) into a row.
pub fn resolve(codec: &RowCodec, versions: &[Entry]) -> Result<Option<RowValues>> {
    let Some((first, older)) = versions.split_first() else {
        return Ok(None);
    };
    let mut f = Folded::from_entry(codec, first.kind, &first.value)?;
    for e in older {
        if f.merge_older(codec, e.kind, &e.value)? {
            break;
        }
    }
    f.finish_at_bottom();
    Ok((f.kind != EntryKind::Delete).then_some(f.values))
}

/// An iterator over a vector (tests and small sources).
pub struct VecIter(pub std::vec::IntoIter<Entry>);

impl EntryIter for VecIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        Ok(self.0.next())
    }
}
