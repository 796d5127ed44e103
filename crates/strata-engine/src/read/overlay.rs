//! The upper overlay: a merged, columnar copy of a shard's immutable upper tiers.
//!
//! A scan lines the deepest S3 level up with every version above it (see [`crate::read::scan`]).
//! Most of those versions sit in immutable files (NVMe-tier SSTs, shallower S3 levels)
//! that many scans read again and again until the next flush or drain changes the file
//! set. Merging them version by version through the row codec on every scan cost a scan
//! with 2% of its keys in upper tiers as much as decoding the whole deep level.
//!
//! An [`Overlay`] is that merge done once per file set: each key's versions in the
//! immutable upper files folded into one (a whole row, a delete, or a partial row that
//! still needs what lies beneath), and the whole rows decoded into Arrow columns of the
//! table's read schema. Scans then splice whole rows straight from those columns, drop
//! deep rows under deletes, and send only partial rows and keys also in the memtables
//! down the row path. The fold is exact for any read at or above the newest sequence
//! number in those files; older reads (time travel) do not use it.
//!
//! Overlays are kept per process in an [`OverlayCache`] under a byte budget, keyed by the
//! shard, the table's schema, the newest sequence number in its row-oriented levels (a
//! compaction within them keeps the overlay) and the exact columnar files folded. A scan that finds none starts
//! building one on a blocking thread and reads without it; later scans of the same file
//! set use it. A file set whose overlay would outgrow its share of the budget is
//! remembered as too large and read the old way.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::RecordBatch;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::columnar::reader::ParquetSource;
use crate::deep_run::DeepRun;
use crate::entry::{Entry, EntryKind, Folded};
use crate::error::Result;
use crate::iter::{EntryIter, MergeIter};
use crate::read::remote::BucketFiles;
use crate::read::scan::Positions;
use crate::row::RowValues;
use crate::schema::TableSchema;
use crate::sst::SstIter;
use crate::state::ShardState;

/// No row of the overlay's batch (a delete or a partial row).
pub(crate) const NO_ROW: u32 = u32::MAX;

/// The immutable upper tiers of one shard's file set, merged.
pub struct Overlay {
    /// One folded version per key, in key order.
    pub(crate) entries: Vec<Entry>,
    /// Per entry: its row in `batch` (whole rows), or [`NO_ROW`].
    pub(crate) rows: Vec<u32>,
    /// Whole rows, every column of the table's read schema.
    pub(crate) batch: RecordBatch,
    /// Whether any entry is a partial row.
    pub(crate) partial: bool,
    /// Where the keys fall in the deep level beneath (see [`Positions`]), when known.
    pub(crate) positions: Option<Positions>,
    bytes: u64,
    /// Memtables folded in, when any (see [`MemtablesFolded`]).
    pub(crate) memtables: Option<MemtablesFolded>,
}

/// What of the memtables an overlay holds: every version through `seq` of the memtables
/// named, which then held `bytes`. A scan at or above `seq` whose memtables include these
/// takes only their newer versions on the row path.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemtablesFolded {
    pub(crate) seq: u64,
    pub(crate) ids: Vec<String>,
    pub(crate) bytes: u64,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Overlay({} keys, {} whole rows, {} bytes)",
            self.entries.len(),
            self.batch.num_rows(),
            self.bytes
        )
    }
}

impl Overlay {
    /// Keys folded.
    pub fn keys(&self) -> usize {
        self.entries.len()
    }

    /// Memory held (bytes, approximate).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The first entry whose key is at least `key`.
    pub(crate) fn lower_bound(&self, key: &[u8]) -> usize {
        self.entries.partition_point(|e| e.key.as_ref() < key)
    }

    /// Folds the SSTs of `state` and the files of its S3 levels above the deep run `run`
    /// that the run does not hold; None when the result would hold more than `max_bytes`.
    /// Blocking.
    pub(crate) fn build(
        table: &TableSchema,
        state: &ShardState,
        files: &BucketFiles<'_>,
        run: &DeepRun,
        max_bytes: u64,
        handle: &tokio::runtime::Handle,
    ) -> Result<Option<Self>> {
        let mut sources: Vec<Box<dyn EntryIter>> = Vec::new();
        for h in state.levels.iter().flatten() {
            sources.push(Box::new(SstIter::new(h.reader.clone(), &[])));
        }
        let all: Vec<usize> = (0..table.value_indices.len()).collect();
        sources.extend(crate::read::remote::run_iters(
            table,
            files,
            &state.manifest.value,
            0..run.level,
            &run.joined,
            &[],
            None,
            Some(&all),
            true,
            handle,
        ));
        let started = std::time::Instant::now();
        let Some(folded) = Self::fold(table, sources, u64::MAX, max_bytes)? else {
            return Ok(None);
        };
        tracing::debug!(
            keys = folded.keys(),
            ms = started.elapsed().as_millis() as u64,
            "scan overlay: upper tiers folded"
        );
        let deep_files: Vec<ParquetSource> = run
            .groups
            .first()
            .into_iter()
            .flatten()
            .map(|f| files.parquet_source(f))
            .collect();
        if deep_files.is_empty() {
            return Ok(Some(folded));
        }
        Ok(Some(folded.positioned(table, &deep_files, handle)))
    }

    /// Folds the versions of `sources` (newest first per key) at sequence number `max_seq`
    /// (newer versions are left out); None when the result would hold more than
    /// `max_bytes`. Blocking.
    pub(crate) fn fold(
        table: &TableSchema,
        sources: Vec<Box<dyn EntryIter>>,
        max_seq: u64,
        max_bytes: u64,
    ) -> Result<Option<Self>> {
        let codec = &table.codec;
        let mut merged = MergeIter::with_parts(sources, codec.clone());
        let mut entries: Vec<Entry> = Vec::new();
        let mut rows: Vec<u32> = Vec::new();
        // Whole rows, encoded: decoded column by column at the end.
        let mut whole: Vec<(Bytes, Bytes)> = Vec::new();
        let mut bytes = 0u64;
        // The key being folded: its newest version, and the fold so far when that version
        // is a partial row (a whole row or a delete needs no fold: older versions are
        // skipped without being decoded).
        let mut current: Option<(Entry, Option<Folded>)> = None;
        let finish = |(first, f): (Entry, Option<Folded>),
                      entries: &mut Vec<Entry>,
                      rows: &mut Vec<u32>,
                      whole: &mut Vec<(Bytes, Bytes)>|
         -> Result<u64> {
            let (kind, value) = match f {
                Some(f) => (f.kind, f.encode(codec)?),
                // Copied: the version may share a block with versions the fold skipped.
                None => (first.kind, Bytes::copy_from_slice(&first.value)),
            };
            let size = (first.key.len() + value.len() + 64) as u64;
            if kind == EntryKind::Put {
                rows.push(whole.len() as u32);
                whole.push((first.key.clone(), value.clone()));
            } else {
                rows.push(NO_ROW);
            }
            entries.push(Entry {
                key: first.key,
                seq: first.seq,
                kind,
                value,
            });
            Ok(size)
        };
        while let Some(e) = merged.next_entry()? {
            if e.seq > max_seq {
                continue;
            }
            match &mut current {
                Some((first, f)) if first.key == e.key => {
                    if let Some(f) = f
                        && !f.kind.is_full()
                    {
                        f.merge_older(codec, e.kind, &e.value)?;
                    }
                }
                _ => {
                    let f = if e.kind.is_full() {
                        None
                    } else {
                        Some(Folded::from_entry(codec, e.kind, &e.value)?)
                    };
                    if let Some(done) = current.replace((e, f)) {
                        bytes += finish(done, &mut entries, &mut rows, &mut whole)?;
                        if bytes > max_bytes {
                            return Ok(None);
                        }
                    }
                }
            }
        }
        if let Some(done) = current.take() {
            bytes += finish(done, &mut entries, &mut rows, &mut whole)?;
        }
        let all_columns: Vec<usize> = (0..table.read_schema.fields().len()).collect();
        let batch = table.encoded_to_batch(&whole, &all_columns)?;
        bytes += batch.get_array_memory_size() as u64;
        Ok(Self::within(entries, rows, batch, bytes, max_bytes))
    }

    /// The overlay, unless it holds more than `max_bytes`.
    fn within(
        entries: Vec<Entry>,
        rows: Vec<u32>,
        batch: RecordBatch,
        bytes: u64,
        max_bytes: u64,
    ) -> Option<Self> {
        (bytes <= max_bytes).then_some(Self {
            partial: entries.iter().any(|e| e.kind == EntryKind::Partial),
            entries,
            rows,
            batch,
            positions: None,
            bytes,
            memtables: None,
        })
    }

    /// This overlay with the positions of its keys in the deep level whose first group's
    /// files are `files`, so scans of the level can splice it in by row number. Blocking.
    /// Without them when they cannot be computed (a read failed): scans then line the
    /// overlay up by key.
    pub(crate) fn positioned(
        mut self,
        table: &TableSchema,
        files: &[ParquetSource],
        handle: &tokio::runtime::Handle,
    ) -> Self {
        let started = std::time::Instant::now();
        match Positions::compute(table, &self.entries, files, handle) {
            Ok(p) => {
                tracing::debug!(
                    keys = self.entries.len(),
                    rows = p.rows,
                    ms = started.elapsed().as_millis() as u64,
                    "scan overlay: keys placed in the deep run"
                );
                self.bytes += p.bytes();
                self.positions = Some(p);
            }
            Err(e) => tracing::debug!("placing a scan overlay's keys failed: {e}"),
        }
        self
    }

    /// This overlay with `newer` (a fold of the memtables) laid over it: a key of `newer`
    /// that is a whole row or a delete replaces this one's; a partial row is folded over
    /// it. Whole rows are gathered column-wise from both batches. None when the result
    /// would hold more than `max_bytes`. Blocking.
    pub(crate) fn combine(
        &self,
        table: &TableSchema,
        newer: &Overlay,
        max_bytes: u64,
    ) -> Result<Option<Self>> {
        use std::cmp::Ordering;
        let codec = &table.codec;
        let capacity = self.entries.len() + newer.entries.len();
        let mut entries: Vec<Entry> = Vec::with_capacity(capacity);
        let mut rows: Vec<u32> = Vec::with_capacity(capacity);
        // Per whole row of the result: (batch, row); batches: 0 = self, 1 = newer, 2 = rows
        // folded here.
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(capacity);
        let mut folded: Vec<(Bytes, RowValues)> = Vec::new();
        /// Takes entry `i` of `from` (whose rows are batch `batch`) as it is.
        fn take(
            (entries, rows, picks): (&mut Vec<Entry>, &mut Vec<u32>, &mut Vec<(usize, usize)>),
            from: &Overlay,
            batch: usize,
            i: usize,
        ) {
            let row = from.rows[i];
            if row == NO_ROW {
                rows.push(NO_ROW);
            } else {
                rows.push(picks.len() as u32);
                picks.push((batch, row as usize));
            }
            entries.push(from.entries[i].clone());
        }
        let (mut i, mut j) = (0, 0);
        loop {
            let order = match (self.entries.get(i), newer.entries.get(j)) {
                (Some(a), Some(b)) => a.key.cmp(&b.key),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => break,
            };
            match order {
                Ordering::Less => {
                    take((&mut entries, &mut rows, &mut picks), self, 0, i);
                    i += 1;
                }
                Ordering::Greater => {
                    take((&mut entries, &mut rows, &mut picks), newer, 1, j);
                    j += 1;
                }
                Ordering::Equal if newer.entries[j].kind.is_full() => {
                    take((&mut entries, &mut rows, &mut picks), newer, 1, j);
                    i += 1;
                    j += 1;
                }
                Ordering::Equal => {
                    let (old, new) = (&self.entries[i], &newer.entries[j]);
                    let mut f = Folded::from_entry(codec, new.kind, &new.value)?;
                    f.merge_older(codec, old.kind, &old.value)?;
                    let value = f.encode(codec)?;
                    if f.kind == EntryKind::Put {
                        rows.push(picks.len() as u32);
                        picks.push((2, folded.len()));
                        folded.push((new.key.clone(), f.values));
                    } else {
                        rows.push(NO_ROW);
                    }
                    entries.push(Entry {
                        key: new.key.clone(),
                        seq: new.seq,
                        kind: f.kind,
                        value,
                    });
                    i += 1;
                    j += 1;
                }
            }
        }
        let all_columns: Vec<usize> = (0..table.read_schema.fields().len()).collect();
        let folded = table.to_batch(&folded, &all_columns)?;
        let columns = (0..all_columns.len())
            .map(|c| {
                let sources = [
                    self.batch.column(c).as_ref(),
                    newer.batch.column(c).as_ref(),
                    folded.column(c).as_ref(),
                ];
                arrow::compute::interleave(&sources, &picks)
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| crate::error::Error::Internal(format!("combining overlays: {e}")))?;
        let batch = RecordBatch::try_new_with_options(
            self.batch.schema(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(picks.len())),
        )
        .map_err(|e| crate::error::Error::Internal(format!("combining overlays: {e}")))?;
        let bytes = entries
            .iter()
            .map(|e| (e.key.len() + e.value.len() + 64) as u64)
            .sum::<u64>()
            + batch.get_array_memory_size() as u64;
        Ok(Self::within(entries, rows, batch, bytes, max_bytes))
    }
}

enum Slot {
    Building,
    Ready(Arc<Overlay>),
    /// Over its share of the budget (or failed to build): read without one.
    Skip,
}

#[derive(Default)]
struct Slots {
    map: HashMap<String, Slot>,
    /// Ready overlays, least recently used first.
    order: VecDeque<String>,
    bytes: u64,
    /// Ready overlays being rebuilt ([`OverlayCache::start_refresh`]).
    refreshing: std::collections::HashSet<String>,
}

/// Overlays of a process, under a byte budget (see the module documentation).
pub struct OverlayCache {
    budget: u64,
    /// See `EngineConfig::scan_memtable_refold_bytes`.
    refold_bytes: u64,
    slots: Mutex<Slots>,
}

impl std::fmt::Debug for OverlayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.slots.lock();
        write!(
            f,
            "OverlayCache({} of {} bytes, {} slots)",
            s.bytes,
            self.budget,
            s.map.len()
        )
    }
}

/// What the cache holds for a file set.
pub(crate) enum Lookup {
    /// Use it.
    Ready(Arc<Overlay>),
    /// Nothing yet: the caller builds it (and reports with [`OverlayCache::finish`]).
    Build,
    /// Another scan is building it.
    Building,
    /// Not worth it (too large): read without.
    Skip,
}

impl OverlayCache {
    /// A cache of at most `budget` bytes (0: no overlays).
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            refold_bytes: 4 << 20,
            slots: Mutex::new(Slots::default()),
        }
    }

    /// This cache, with scans folding the newer versions of the memtables over an older
    /// fold once they have grown by `bytes` (and by as much as was folded) since; 0: never.
    pub fn with_refold_bytes(mut self, bytes: u64) -> Self {
        self.refold_bytes = bytes;
        self
    }

    /// Growth of the memtables since their fold (of `folded` bytes) that makes a scan fold
    /// again: as much as was folded, and at least the configured bytes, so a memtable is
    /// folded a logarithmic number of times as it grows. None: scans do not fold
    /// memtables that change under them.
    pub(crate) fn refold_bytes(&self, folded: u64) -> Option<u64> {
        (self.refold_bytes > 0).then(|| folded.max(self.refold_bytes))
    }

    /// The most one overlay may hold: half the budget, so that two shards (or a shard at
    /// two sets of files) share it. A quarter was too little at 10M rows of a 31-column
    /// table, where the newest columnar file overlapping the deeper level (rows of the
    /// first level's last job) joins the row levels in the overlay.
    pub(crate) fn max_overlay_bytes(&self) -> u64 {
        self.budget / 2
    }

    /// Bytes held by ready overlays.
    pub fn bytes(&self) -> u64 {
        self.slots.lock().bytes
    }

    /// Looks `key` up; on a miss, when `build`, marks it as being built by the caller
    /// (else the miss is [`Lookup::Skip`]).
    pub(crate) fn lookup(&self, key: &str, build: bool) -> Lookup {
        if self.budget == 0 {
            return Lookup::Skip;
        }
        let mut s = self.slots.lock();
        match s.map.get(key) {
            Some(Slot::Ready(o)) => {
                let o = o.clone();
                if let Some(i) = s.order.iter().position(|k| k == key) {
                    let k = s.order.remove(i).expect("present");
                    s.order.push_back(k);
                }
                Lookup::Ready(o)
            }
            Some(Slot::Building) => Lookup::Building,
            Some(Slot::Skip) => Lookup::Skip,
            None if build => {
                s.map.insert(key.to_string(), Slot::Building);
                Lookup::Build
            }
            None => Lookup::Skip,
        }
    }

    /// Marks the ready overlay under `key` as being rebuilt by the caller, who reports with
    /// [`Self::finish`]; scans keep using it meanwhile. False when it is not ready or
    /// another caller is rebuilding it.
    pub(crate) fn start_refresh(&self, key: &str) -> bool {
        let mut s = self.slots.lock();
        if !matches!(s.map.get(key), Some(Slot::Ready(_))) || s.refreshing.contains(key) {
            return false;
        }
        s.refreshing.insert(key.to_string());
        true
    }

    /// Takes the ready overlay under `key` out of the accounting (it is being replaced).
    fn forget(s: &mut Slots, key: &str) {
        if let Some(Slot::Ready(old)) = s.map.remove(key) {
            s.bytes -= old.bytes;
            if let Some(i) = s.order.iter().position(|k| k == key) {
                s.order.remove(i);
            }
        }
    }

    /// Records the outcome of a build started by [`Self::lookup`] or
    /// [`Self::start_refresh`] (a failed refresh keeps the overlay it was to replace);
    /// older overlays are dropped, least recently used first, to stay within the budget.
    pub(crate) fn finish(&self, key: &str, built: Result<Option<Overlay>>) -> Option<Arc<Overlay>> {
        let mut s = self.slots.lock();
        let refresh = s.refreshing.remove(key);
        if refresh && built.is_err() {
            return None;
        }
        Self::forget(&mut s, key);
        match built {
            Ok(Some(o)) => {
                let o = Arc::new(o);
                s.bytes += o.bytes;
                s.map.insert(key.to_string(), Slot::Ready(o.clone()));
                s.order.push_back(key.to_string());
                while s.bytes > self.budget {
                    let Some(old) = s.order.pop_front() else {
                        break;
                    };
                    if let Some(Slot::Ready(gone)) = s.map.remove(&old) {
                        s.bytes -= gone.bytes;
                    }
                }
                // Skip markers are small, but must not pile up forever.
                if s.map.len() > 4096 {
                    s.map.retain(|_, v| !matches!(v, Slot::Skip));
                }
                matches!(s.map.get(key), Some(Slot::Ready(_))).then_some(o)
            }
            Ok(None) => {
                s.map.insert(key.to_string(), Slot::Skip);
                None
            }
            Err(e) => {
                // Files of a dropped view may be gone: the next scan tries again.
                tracing::debug!("building a scan overlay failed: {e}");
                s.map.remove(key);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(bytes: u64) -> Overlay {
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        Overlay {
            entries: Vec::new(),
            rows: Vec::new(),
            batch: RecordBatch::new_empty(schema),
            partial: false,
            positions: None,
            bytes,
            memtables: None,
        }
    }

    #[test]
    fn one_overlay_may_take_half_the_budget() {
        assert_eq!(OverlayCache::new(100).max_overlay_bytes(), 50);
        assert_eq!(
            OverlayCache::new(crate::config::EngineConfig::default().scan_overlay_bytes)
                .max_overlay_bytes(),
            1 << 30
        );
    }

    #[test]
    fn cache_builds_once_and_evicts_least_recently_used() {
        let c = OverlayCache::new(100);
        assert!(matches!(c.lookup("a", true), Lookup::Build));
        assert!(matches!(c.lookup("a", true), Lookup::Building));
        assert!(c.finish("a", Ok(Some(overlay(40)))).is_some());
        assert!(matches!(c.lookup("b", true), Lookup::Build));
        c.finish("b", Ok(Some(overlay(40))));
        // Touch a: b is now the least recently used.
        assert!(matches!(c.lookup("a", true), Lookup::Ready(_)));
        assert!(matches!(c.lookup("c", true), Lookup::Build));
        c.finish("c", Ok(Some(overlay(40))));
        assert_eq!(c.bytes(), 80);
        assert!(matches!(c.lookup("a", true), Lookup::Ready(_)));
        assert!(matches!(c.lookup("c", true), Lookup::Ready(_)));
        assert!(
            matches!(c.lookup("b", true), Lookup::Build),
            "b was evicted"
        );
        // Too large: remembered, not retried.
        c.finish("b", Ok(None));
        assert!(matches!(c.lookup("b", true), Lookup::Skip));
        // A failed build is retried.
        assert!(matches!(c.lookup("d", true), Lookup::Build));
        c.finish("d", Err(crate::error::Error::Internal("gone".into())));
        assert!(matches!(c.lookup("d", true), Lookup::Build));
        assert!(matches!(
            OverlayCache::new(0).lookup("a", true),
            Lookup::Skip
        ));
    }
}
