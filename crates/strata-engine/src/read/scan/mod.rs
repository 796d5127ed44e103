//! Vectorized scans of a view: live rows of a key range as Arrow batches.
//!
//! Most of a table's rows sit in the deepest S3 level, already columnar. The scan reads that
//! level's needed column groups as Arrow batches (only the columns asked for, row groups
//! pruned by key) and lines the groups up row by row: every version is stored in every group
//! of a level, in (key, sequence descending) order, so after cutting to the key range the
//! groups hold the same rows. Everything above that level (memtables or WAL tail, NVMe-tier
//! SSTs, shallower S3 levels) is merged by key into one ordered stream of versions, usually
//! small. Each chunk of the deep level then takes one of three paths:
//!
//! - **pass-through**: every row is a whole-row put visible at the read sequence number,
//!   keys strictly increase, and no upper version falls in the chunk's key range: the
//!   projected columns are handed on as they are (no copy);
//! - **patch**: the chunk is clean but upper versions fall in its range: those keys are
//!   resolved row by row (upper versions over the deep one, decoded only when the newest
//!   upper version is partial) and spliced into the chunk's columns, copying runs of rows;
//! - **row merge**: anything else (history versions kept for time travel, partial rows,
//!   deletes, versions newer than the read sequence number): the chunk is decoded into
//!   versions and resolved with the same fold as point reads. The last key's versions may
//!   continue in the next chunk, so they are carried over.
//!
//! When the overlay of the upper tiers carries its keys' row positions in the deep level
//! ([`Positions`]) and nothing is left for the row path, the level is read by row number
//! instead: no key column is read or searched, and each chunk takes the overlay entries
//! placed before its last row.

mod deep;
mod keys;
mod splice;

pub(crate) use deep::DeepSpec;
use deep::*;
pub(crate) use keys::Positions;
use keys::*;
use splice::*;

use std::collections::VecDeque;
use std::sync::Arc;

use std::cmp::{Ordering, Reverse};

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int64Array, RecordBatch, RecordBatchOptions,
};
use arrow::array::{
    ArrowPrimitiveType, BooleanBufferBuilder, MutableArrayData, PrimitiveArray, downcast_primitive,
    make_array,
};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, SchemaRef, UInt8Type, UInt64Type};
use bytes::Bytes;
use futures::StreamExt;

use crate::columnar::format::{GroupFormat, carries};
use crate::columnar::reader::{BatchStream, ParquetSource};
use crate::entry::{Entry, EntryKind};
use crate::error::{Error, Result};
use crate::iter::{EntryIter, MergeIter, RowIter, VecIter};
use crate::read::overlay::Overlay;
use crate::row::RowValues;
use crate::schema::TableSchema;
use crate::value::value_at;

/// How many rows took each path (for tests and `EXPLAIN ANALYZE`-style reporting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanPaths {
    /// Deep-level rows handed on column-wise without decoding.
    pub passed: u64,
    /// Rows resolved row by row and spliced into a deep-level chunk.
    pub patched: u64,
    /// Rows resolved row by row (chunks that are not clean, and rows only in upper tiers
    /// past the deep level's last key).
    pub merged: u64,
    /// Deep-level rows read without the version columns (`_seq`, `_kind`, `_present`):
    /// the level's files hold only visible whole-row puts, one per key.
    pub unversioned: u64,
    /// Rows spliced straight from the overlay of the immutable upper tiers (whole rows;
    /// see [`crate::read::overlay`]), and deep rows dropped under its deletes.
    pub overlaid: u64,
    /// Deep-level rows read by row position: the overlay's keys placed by the positions
    /// computed with it, without reading or searching the key column.
    pub positioned: u64,
}

/// The smaller of the next keys of two key-ordered streams (memtables, overlay), and
/// whether each stream holds it; None when both are done.
fn smaller<'a>(a: Option<&'a Bytes>, b: Option<&'a Bytes>) -> Option<(&'a Bytes, bool, bool)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(match a.cmp(b) {
            Ordering::Less => (a, true, false),
            Ordering::Equal => (a, true, true),
            Ordering::Greater => (b, false, true),
        }),
        (Some(a), None) => Some((a, true, false)),
        (None, Some(b)) => Some((b, false, true)),
        (None, None) => None,
    }
}

/// Live rows of a view's key range as Arrow batches (see the module documentation).
pub struct ViewBatches {
    table: Arc<TableSchema>,
    projection: Vec<usize>,
    schema: SchemaRef,
    read_seq: u64,
    batch_rows: usize,
    end: Option<Vec<u8>>,
    /// Versions of every tier above the deep level, merged (only the memtables when an
    /// overlay holds the immutable tiers).
    upper: Box<dyn EntryIter>,
    /// The overlay of the immutable upper tiers, when the scan uses one: its entries
    /// `ov_pos..ov_end` are still to come.
    overlay: Option<Arc<Overlay>>,
    ov_pos: usize,
    ov_end: usize,
    /// Per output column: the overlay's column, cast to the deep level's type.
    ov_columns: Vec<Option<ArrayRef>>,
    upper_peek: Option<Entry>,
    upper_done: bool,
    deep: Option<Deep>,
    /// Versions (deep and upper) of a key whose deep versions may continue in the next chunk.
    carry: Vec<Entry>,
    /// Deep rows with keys up to this one are already decided (older versions of a key
    /// passed on).
    decided: Option<Bytes>,
    /// After the deep level: the remaining versions, resolved row by row.
    tail: Option<RowIter>,
    /// After a deep level read by position: the overlay's keys past its last row, spliced
    /// from the overlay's columns (nothing else is left for the row path).
    ov_tail: bool,
    /// After the deep level (or without one), with an overlay: its keys still to come
    /// spliced from its columns, and only keys with memtable versions (or partial rows)
    /// resolved row by row (see [`Self::next_spliced_tail`]).
    spliced_tail: bool,
    /// Slices of a merged or patched batch larger than `batch_rows`, still to be returned.
    queued: std::collections::VecDeque<RecordBatch>,
    paths: ScanPaths,
    /// The deep level is read by position (see [`Positions`]): the level row the next
    /// chunk starts at.
    next_row: Option<u64>,
}

impl ViewBatches {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        table: Arc<TableSchema>,
        projection: Vec<usize>,
        read_seq: u64,
        batch_rows: usize,
        start: &[u8],
        end: Option<Vec<u8>>,
        mut upper: Box<dyn EntryIter>,
        overlay: Option<Arc<Overlay>>,
        deep: Option<DeepSpec>,
    ) -> Result<Self> {
        let schema = Arc::new(
            table
                .read_schema
                .project(&projection)
                .map_err(|e| Error::Invalid(format!("projection: {e}")))?,
        );
        let upper_peek = upper
            .next_entry()?
            .filter(|e| end.as_deref().is_none_or(|end| e.key.as_ref() < end));
        // Reading by position splices only whole rows and deletes from the overlay: nothing
        // may be left for the row path (memtable versions, partial rows).
        let positional = upper_peek.is_none() && overlay.as_ref().is_some_and(|o| !o.partial);
        let deep = deep
            .map(|mut d| {
                if !positional {
                    d.by_position = None;
                }
                d.build(&table, &projection, read_seq, batch_rows)
            })
            .transpose()?;
        let next_row = deep.as_ref().and_then(|d| d.rows).map(|(from, _)| from);
        let (ov_pos, ov_end) = overlay.as_ref().map_or((0, 0), |o| {
            (
                o.lower_bound(start),
                end.as_deref().map_or(o.entries.len(), |e| o.lower_bound(e)),
            )
        });
        let ov_columns = vec![None; projection.len()];
        Ok(Self {
            table,
            projection,
            schema,
            read_seq,
            batch_rows: batch_rows.max(1),
            end,
            upper,
            overlay,
            ov_pos,
            ov_end,
            ov_columns,
            upper_done: upper_peek.is_none(),
            upper_peek,
            deep,
            carry: Vec::new(),
            decided: None,
            tail: None,
            ov_tail: false,
            spliced_tail: false,
            queued: Default::default(),
            paths: ScanPaths::default(),
            next_row,
        })
    }

    /// Batches of the resolved rows `rows` (in key order) and nothing else.
    pub(crate) fn ready(
        table: Arc<TableSchema>,
        projection: Vec<usize>,
        rows: &[(Bytes, RowValues)],
    ) -> Result<Self> {
        let empty: Box<dyn EntryIter> = Box::new(VecIter(Vec::new().into_iter()));
        let mut me = Self::new(
            table,
            projection,
            0,
            usize::MAX,
            &[],
            None,
            empty,
            None,
            None,
        )?;
        if !rows.is_empty() {
            let b = me.rows_batch(rows)?;
            me.queued.push_back(b);
        }
        Ok(me)
    }

    /// The schema of the batches: the table's read schema, projected.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// How many rows took each path so far.
    pub fn paths(&self) -> ScanPaths {
        self.paths
    }

    fn peek_upper(&mut self) -> Result<Option<&Entry>> {
        if self.upper_peek.is_none() && !self.upper_done {
            self.upper_peek = self.upper.next_entry()?;
            if let (Some(e), Some(end)) = (&self.upper_peek, &self.end)
                && e.key.as_ref() >= end.as_slice()
            {
                self.upper_peek = None;
            }
            self.upper_done = self.upper_peek.is_none();
        }
        Ok(self.upper_peek.as_ref())
    }

    /// The next overlay entry still to come.
    fn peek_overlay(&self) -> Option<&Entry> {
        self.overlay
            .as_ref()
            .filter(|_| self.ov_pos < self.ov_end)
            .map(|o| &o.entries[self.ov_pos])
    }

    /// The smallest key still to come above the deep level (memtables or overlay).
    fn next_upper_key(&mut self) -> Result<Option<Bytes>> {
        let mem = self.peek_upper()?.map(|e| e.key.clone());
        let ov = self.peek_overlay().map(|e| e.key.clone());
        Ok(match (mem, ov) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Copies of overlay entries (for the row path).
    fn overlay_entries(&self, range: std::ops::Range<usize>) -> Vec<Entry> {
        self.overlay
            .as_ref()
            .map_or_else(Vec::new, |o| o.entries[range].to_vec())
    }

    /// Upper versions with keys below `bound` (`inclusive`: at most `bound`; None: no
    /// bound), of at most `max_keys` keys: the memtables' versions, and the overlay's
    /// entries taken (a range); when it stops early, also the last key taken (every version
    /// of it is taken).
    fn upper_until(
        &mut self,
        bound: Option<&[u8]>,
        inclusive: bool,
        max_keys: usize,
    ) -> Result<(Vec<Entry>, std::ops::Range<usize>, Option<Bytes>)> {
        let mut out: Vec<Entry> = Vec::new();
        let ov_from = self.ov_pos;
        let mut keys = 0;
        // The last key taken: a memtable key, or (most keys) the overlay entry before
        // `ov_pos`; copied only when the scan stops early.
        let mut last_mem: Option<Bytes> = None;
        loop {
            self.peek_upper()?;
            // Overlay entries below the memtables' next key and within the bound are taken
            // at once (a binary search, not a comparison per entry).
            if let Some(o) = &self.overlay
                && self.ov_pos < self.ov_end
                && keys < max_keys
            {
                let mem = self.upper_peek.as_ref().map(|e| e.key.as_ref());
                let below = gallop(&o.entries[self.ov_pos..self.ov_end], |e| {
                    let k = e.key.as_ref();
                    bound.is_none_or(|b| k < b || (inclusive && k == b))
                        && mem.is_none_or(|m| k < m)
                });
                let take = below.min(max_keys - keys);
                if take > 0 {
                    self.ov_pos += take;
                    keys += take;
                    last_mem = None;
                }
            }
            let mem = self.upper_peek.as_ref().map(|e| &e.key);
            let ov = self.peek_overlay().map(|e| &e.key);
            let Some((key, in_mem, in_ov)) = smaller(mem, ov) else {
                break;
            };
            if bound.is_some_and(|b| key.as_ref() > b || (!inclusive && key.as_ref() == b)) {
                break;
            }
            if keys == max_keys {
                let cut = match last_mem {
                    Some(k) => k,
                    None => self
                        .overlay
                        .as_ref()
                        .map(|o| o.entries[self.ov_pos - 1].key.clone())
                        .unwrap_or_default(),
                };
                return Ok((out, ov_from..self.ov_pos, Some(cut)));
            }
            keys += 1;
            let mem_key = in_mem.then(|| key.clone());
            if in_ov {
                self.ov_pos += 1;
            }
            last_mem = None;
            if let Some(k) = mem_key {
                while self.peek_upper()?.is_some_and(|e| e.key == k) {
                    out.extend(self.upper_peek.take());
                }
                last_mem = (!in_ov).then_some(k);
            }
        }
        Ok((out, ov_from..self.ov_pos, None))
    }

    fn batch(&self, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(a, f)| {
                if a.data_type() == f.data_type() {
                    Ok(a)
                } else {
                    cast(&a, f.data_type())
                        .map_err(|e| Error::Internal(format!("column {}: {e}", f.name())))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| Error::Internal(format!("building a scan batch: {e}")))
    }

    fn rows_batch(&self, rows: &[(Bytes, RowValues)]) -> Result<RecordBatch> {
        if self.projection.is_empty() {
            return self.batch(Vec::new(), rows.len());
        }
        let b = self.table.to_batch(rows, &self.projection)?;
        self.batch(b.columns().to_vec(), rows.len())
    }

    /// Resolves sorted versions row by row.
    fn resolve(&self, mut versions: Vec<Entry>) -> Result<Vec<(Bytes, RowValues)>> {
        let order = |a: &Entry, b: &Entry| (&a.key, Reverse(a.seq)).cmp(&(&b.key, Reverse(b.seq)));
        // Upper versions arrive in order; deep versions appended for a patch do not.
        if !versions.is_sorted_by(|a, b| order(a, b) != Ordering::Greater) {
            versions.sort_by(order);
        }
        // Parts of one version (column groups) are merged into one; without any, the
        // versions go straight to the fold.
        let parts = versions
            .windows(2)
            .any(|w| w[0].seq == w[1].seq && w[0].key == w[1].key);
        let mut inner: Box<dyn EntryIter> = Box::new(VecIter(versions.into_iter()));
        if parts {
            inner = Box::new(MergeIter::with_parts(vec![inner], self.table.codec.clone()));
        }
        let mut rows = RowIter::new(inner, &self.table.codec, self.read_seq, None);
        let mut out = Vec::new();
        while let Some(r) = rows.next_row()? {
            out.push(r);
        }
        Ok(out)
    }

    /// The next batch of live rows in key order, or None at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(b) = self.queued.pop_front() {
            return Ok(Some(b));
        }
        let b = self.next_unbounded()?;
        Ok(b.map(|b| self.bounded(b)))
    }

    /// Returns the first `batch_rows` rows of `b` and queues the rest as zero-copy slices:
    /// a row merge (a carried key, the chunk, the upper keys among it) or a patch may yield
    /// more rows than one batch holds.
    fn bounded(&mut self, b: RecordBatch) -> RecordBatch {
        let n = b.num_rows();
        if n <= self.batch_rows {
            return b;
        }
        let mut offset = self.batch_rows;
        while offset < n {
            let len = self.batch_rows.min(n - offset);
            self.queued.push_back(b.slice(offset, len));
            offset += len;
        }
        b.slice(0, self.batch_rows)
    }

    fn next_unbounded(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.tail.is_some() {
                return self.next_tail();
            }
            if self.spliced_tail {
                match self.next_spliced_tail()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            if self.ov_tail {
                match self.next_overlay_tail()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            if self.next_row.is_some() {
                match self.next_positioned()? {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            let Some(deep) = self.deep.as_mut() else {
                self.after_deep()?;
                continue;
            };
            let fresh = deep.pushback.is_none();
            let Some(mut chunk) = deep.next_chunk(self.batch_rows)? else {
                self.after_deep()?;
                continue;
            };
            if fresh && deep.meta.is_none() {
                self.paths.unversioned += chunk.rows() as u64;
            }
            if let Some(d) = &self.decided {
                let skip = lower_bound(chunk.keys(), d, true);
                if skip == chunk.rows() {
                    continue;
                }
                if skip > 0 {
                    chunk = chunk.slice(skip, chunk.rows() - skip);
                }
            }
            let first = chunk.keys().key(0);
            // Upper keys before the chunk are not in the deep level: resolve them alone.
            if self.carry.is_empty() && self.next_upper_key()?.is_some_and(|k| k < first) {
                if let Some(deep) = self.deep.as_mut() {
                    deep.pushback = Some(chunk);
                }
                let (mut versions, ov, _) =
                    self.upper_until(Some(&first), false, self.batch_rows)?;
                versions.extend(self.overlay_entries(ov));
                if let Some(b) = self.merged(versions)? {
                    return Ok(Some(b));
                }
                continue;
            }
            let mut n = chunk.rows();
            let mut last = chunk.keys().key(n - 1);
            let (upper, ov, cut) = self.upper_until(Some(&last), true, self.batch_rows)?;
            if let Some(u) = cut {
                // Many upper keys in the chunk's range: stop the chunk after them.
                let split = lower_bound(chunk.keys(), &u, true);
                if split < n {
                    let rest = chunk.slice(split, n - split);
                    if let Some(deep) = self.deep.as_mut() {
                        deep.pushback = Some(rest);
                    }
                    if split == 0 {
                        // Only with a carry: it and these upper keys precede the chunk.
                        let mut versions = std::mem::take(&mut self.carry);
                        versions.extend(upper);
                        versions.extend(self.overlay_entries(ov));
                        if let Some(b) = self.merged(versions)? {
                            return Ok(Some(b));
                        }
                        continue;
                    }
                    chunk = chunk.slice(0, split);
                    n = split;
                    last = chunk.keys().key(n - 1);
                }
            }
            let deep = self.deep.as_ref().expect("deep level");
            if self.carry.is_empty() && deep.clean(&chunk, self.read_seq) {
                self.decided = Some(last);
                if upper.is_empty() && ov.is_empty() {
                    self.paths.passed += n as u64;
                    let columns = deep.columns(&chunk);
                    return self.batch(columns, n).map(Some);
                }
                let batch = self.patch(chunk, upper, ov)?;
                if batch.num_rows() > 0 {
                    return Ok(Some(batch));
                }
                continue;
            }
            // Row merge. Versions of the last key may continue in the next chunk, and upper
            // keys past it must follow it: both wait.
            let mut all = std::mem::take(&mut self.carry);
            all.extend(upper);
            all.extend(self.overlay_entries(ov));
            deep.versions(&self.table, &chunk, 0..n, &mut all)?;
            let (carry, versions): (Vec<Entry>, Vec<Entry>) =
                all.into_iter().partition(|e| e.key >= last);
            self.carry = carry;
            if let Some(b) = self.merged(versions)? {
                return Ok(Some(b));
            }
        }
    }

    /// The next chunk of a deep level read by position, with the overlay entries that
    /// fall in its rows spliced in (None when nothing in it is live). After the level, the
    /// overlay's keys past its last row go to the row path.
    fn next_positioned(&mut self) -> Result<Option<RecordBatch>> {
        let (Some(deep), Some(g0)) = (self.deep.as_mut(), self.next_row) else {
            return Ok(None);
        };
        let Some(chunk) = deep.next_chunk(self.batch_rows)? else {
            self.next_row = None;
            if self.overlay_tail_only()? {
                self.deep = None;
                self.ov_tail = true;
            } else {
                self.after_deep()?;
            }
            return Ok(None);
        };
        let n = chunk.rows();
        self.paths.unversioned += n as u64;
        self.paths.positioned += n as u64;
        let g1 = g0 + n as u64;
        self.next_row = Some(g1);
        let overlay = self
            .overlay
            .clone()
            .expect("positions come with an overlay");
        let positions = overlay.positions.as_ref().expect("positions");
        // Entries placed before row g1: replacing one of the chunk's rows, deleting it, or
        // new keys going in before it.
        let from = self.ov_pos;
        let take = gallop(&positions.at[from..self.ov_end], |r| *r < g1);
        if take == 0 {
            self.paths.passed += n as u64;
            let columns = deep.columns(&chunk);
            return self.batch(columns, n).map(Some);
        }
        self.ov_pos += take;
        let mut ukeys = Vec::with_capacity(take);
        for i in from..from + take {
            let src = match overlay.entries[i].kind {
                EntryKind::Put => From::Overlay(overlay.rows[i] as usize),
                EntryKind::Delete => From::Gone,
                EntryKind::Partial => {
                    return Err(Error::Internal(
                        "a partial row in an overlay read by position".into(),
                    ));
                }
            };
            let pos = positions.at[i].checked_sub(g0).ok_or_else(|| {
                Error::Internal("an overlay entry placed before its chunk".into())
            })?;
            ukeys.push((pos as usize, positions.hit[i], src));
        }
        let base = deep.columns(&chunk);
        drop(chunk);
        let batch = self.assemble(base, n, &ukeys, Vec::new(), &[])?;
        Ok((batch.num_rows() > 0).then_some(batch))
    }

    /// Resolves versions row by row into a batch (None when no row is live).
    fn merged(&mut self, versions: Vec<Entry>) -> Result<Option<RecordBatch>> {
        let rows = self.resolve(versions)?;
        if rows.is_empty() {
            return Ok(None);
        }
        self.paths.merged += rows.len() as u64;
        self.rows_batch(&rows).map(Some)
    }

    /// Resolves the keys of `upper` and of the overlay's entries `ov` (all within the
    /// chunk's range) over the chunk's rows and splices them in: runs of the chunk's rows,
    /// resolved rows and the overlay's whole rows are copied in key order, and a deep row
    /// under an overlay delete is dropped. Only keys with memtable versions or a partial
    /// overlay entry are resolved row by row, and a deep row's values are decoded only
    /// when nothing above it is a whole row or a delete.
    fn patch(
        &mut self,
        chunk: Chunk,
        upper: Vec<Entry>,
        ov: std::ops::Range<usize>,
    ) -> Result<RecordBatch> {
        let overlay = self.overlay.clone();
        let (ov_entries, ov_rows): (&[Entry], &[u32]) = match &overlay {
            Some(o) => (&o.entries[ov.clone()], &o.rows[ov]),
            None => (&[], &[]),
        };
        let deep = self.deep.as_ref().expect("deep level");
        let keys = chunk.keys();
        let n = chunk.rows();
        let mut from = 0;
        let Sourced {
            ukeys,
            resolved_keys,
            mut versions,
            need_deep,
        } = sourced(&upper, ov_entries, ov_rows, self.read_seq, |key| {
            let pos = lower_bound_from(keys, from, key, false);
            from = pos;
            (pos, pos < n && keys.cmp_at(pos, key) == Ordering::Equal)
        });
        deep.versions(
            &self.table,
            &chunk,
            need_deep.iter().copied(),
            &mut versions,
        )?;
        let patched = if versions.is_empty() {
            Vec::new()
        } else {
            self.resolve(versions)?
        };
        let base = deep.columns(&chunk);
        // The chunk's own references go, so its freshly decoded columns can be written
        // in place.
        drop(chunk);
        self.assemble(base, n, &ukeys, patched, &resolved_keys)
    }

    /// Splices a chunk's `n` rows (`base`, its projected columns) with the keys of `ukeys`
    /// (in key order: position in the chunk, whether they replace the row there, and where
    /// their row comes from): rows resolved row by row (`patched`, for `resolved_keys`)
    /// and whole rows of the overlay.
    fn assemble(
        &mut self,
        base: Vec<ArrayRef>,
        n: usize,
        ukeys: &[(usize, bool, From)],
        patched: Vec<(Bytes, RowValues)>,
        resolved_keys: &[Bytes],
    ) -> Result<RecordBatch> {
        let overlay = self.overlay.clone();
        let hits = ukeys.iter().filter(|u| u.1).count();
        // Segments of the output: (source, start, end); sources: 0 = chunk, 1 = resolved
        // rows, 2 = the overlay's whole rows.
        let mut segments: Vec<(usize, usize, usize)> = Vec::with_capacity(2 * ukeys.len() + 1);
        let push =
            |segments: &mut Vec<(usize, usize, usize)>, src: usize, row: usize| match segments
                .last_mut()
            {
                Some((s, _, end)) if *s == src && *end == row => *end = row + 1,
                _ => segments.push((src, row, row + 1)),
            };
        let (mut at, mut p) = (0, 0);
        let mut overlaid = 0u64;
        // When every key replaces a deep row one for one (updates: no new key, no delete),
        // the rows to overwrite in place: (position, source, row).
        let mut writes: Option<Vec<(usize, usize, usize)>> = Some(Vec::with_capacity(ukeys.len()));
        for (pos, hit, src) in ukeys {
            if *pos > at {
                segments.push((0, at, *pos));
                at = *pos;
            }
            let write = match src {
                From::Resolved(r) => {
                    if patched
                        .get(p)
                        .is_some_and(|(pk, _)| *pk == resolved_keys[*r])
                    {
                        push(&mut segments, 1, p);
                        p += 1;
                        Some((*pos, 1, p - 1))
                    } else {
                        None
                    }
                }
                From::Overlay(r) => {
                    push(&mut segments, 2, *r);
                    overlaid += 1;
                    Some((*pos, 2, *r))
                }
                From::Gone => {
                    overlaid += 1;
                    None
                }
            };
            match (write, *hit, writes.as_mut()) {
                (Some(w), true, Some(ws)) => ws.push(w),
                _ => writes = None,
            }
            if *hit {
                at = pos + 1;
            }
        }
        if at < n {
            segments.push((0, at, n));
        }
        let total: usize = segments.iter().map(|(_, a, b)| b - a).sum();
        self.paths.passed += (n - hits) as u64;
        self.paths.patched += patched.len() as u64;
        self.paths.overlaid += overlaid;
        let patch = self.table.to_batch(&patched, &self.projection)?;
        let cast_to = |a: &ArrayRef, b: &ArrayRef| -> Result<ArrayRef> {
            if a.data_type() == b.data_type() {
                Ok(a.clone())
            } else {
                cast(a, b.data_type()).map_err(|e| Error::Internal(e.to_string()))
            }
        };
        let mut columns = Vec::with_capacity(base.len());
        for (c, b) in base.into_iter().enumerate() {
            let p = cast_to(patch.column(c), &b)?;
            let o = match &overlay {
                Some(o) => match &self.ov_columns[c] {
                    Some(a) if a.data_type() == b.data_type() => a.clone(),
                    _ => {
                        let a = cast_to(o.batch.column(self.projection[c]), &b)?;
                        self.ov_columns[c] = Some(a.clone());
                        a
                    }
                },
                None => p.clone(),
            };
            let b = match &writes {
                Some(ws) => match overwrite(b, [&p, &o], ws) {
                    Ok(a) => {
                        columns.push(a);
                        continue;
                    }
                    Err(b) => b,
                },
                None => b,
            };
            columns.push(splice([&b, &p, &o], &segments, total)?);
        }
        self.batch(columns, total)
    }

    /// Whether all that is left after a deep level read by position is the overlay's
    /// entries (no carried versions, no memtable versions): then its keys past the level's
    /// last row, new keys appended since (an append-only load's fresh rows), are copied
    /// from its columns instead of resolved row by row.
    fn overlay_tail_only(&mut self) -> Result<bool> {
        if !self.carry.is_empty() || self.peek_upper()?.is_some() {
            return Ok(false);
        }
        Ok(self.overlay.as_ref().is_some_and(|o| !o.partial))
    }

    /// The next run of the overlay's keys past the deep level (see
    /// [`Self::overlay_tail_only`]): whole rows copied in key order; a delete there has
    /// nothing beneath it. Hands over to the (empty) row path when they are done.
    fn next_overlay_tail(&mut self) -> Result<Option<RecordBatch>> {
        let overlay = self
            .overlay
            .clone()
            .expect("an overlay tail comes with an overlay");
        while self.ov_pos < self.ov_end {
            let to = (self.ov_pos + self.batch_rows).min(self.ov_end);
            let mut ukeys = Vec::with_capacity(to - self.ov_pos);
            for i in self.ov_pos..to {
                match overlay.entries[i].kind {
                    EntryKind::Put => {
                        ukeys.push((0, false, From::Overlay(overlay.rows[i] as usize)))
                    }
                    EntryKind::Delete => {}
                    EntryKind::Partial => {
                        return Err(Error::Internal(
                            "a partial row in an overlay read by position".into(),
                        ));
                    }
                }
            }
            self.ov_pos = to;
            if ukeys.is_empty() {
                continue;
            }
            let base = self.empty_base(&overlay);
            let batch = self.assemble(base, 0, &ukeys, Vec::new(), &[])?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
        self.ov_tail = false;
        self.start_tail()?;
        Ok(None)
    }

    /// Past the deep level: the keys above it still to come are spliced from the overlay
    /// where there is one (and nothing is carried over from the level), else resolved row
    /// by row.
    fn after_deep(&mut self) -> Result<()> {
        if self.carry.is_empty() && self.overlay.is_some() && !self.spliced_tail {
            self.deep = None;
            self.spliced_tail = true;
            return Ok(());
        }
        self.start_tail()
    }

    /// The next run of keys above the deep level past its end (see [`Self::after_deep`]):
    /// the overlay's whole rows copied from its columns, a delete dropped, and only keys
    /// with memtable versions or a partial overlay entry resolved row by row. Hands over to
    /// the (then empty) row path when they are done.
    fn next_spliced_tail(&mut self) -> Result<Option<RecordBatch>> {
        let end = self.end.clone();
        loop {
            let (upper, ov, _) = self.upper_until(end.as_deref(), false, self.batch_rows)?;
            if upper.is_empty() && ov.is_empty() {
                self.spliced_tail = false;
                self.start_tail()?;
                return Ok(None);
            }
            let overlay = self
                .overlay
                .clone()
                .expect("a spliced tail comes with an overlay");
            let (ov_entries, ov_rows) = (&overlay.entries[ov.clone()], &overlay.rows[ov]);
            // No deep rows: every key is new.
            let Sourced {
                ukeys,
                resolved_keys,
                versions,
                ..
            } = sourced(&upper, ov_entries, ov_rows, self.read_seq, |_| (0, false));
            let patched = if versions.is_empty() {
                Vec::new()
            } else {
                self.resolve(versions)?
            };
            let base = self.empty_base(&overlay);
            let batch = self.assemble(base, 0, &ukeys, patched, &resolved_keys)?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
    }

    /// No deep rows: an empty base of the types the overlay's columns are spliced as.
    fn empty_base(&self, overlay: &Overlay) -> Vec<ArrayRef> {
        (0..self.projection.len())
            .map(|c| {
                let t = match &self.ov_columns[c] {
                    Some(a) => a.data_type().clone(),
                    None => overlay.batch.column(self.projection[c]).data_type().clone(),
                };
                arrow::array::new_empty_array(&t)
            })
            .collect()
    }

    fn start_tail(&mut self) -> Result<()> {
        self.deep = None;
        let mut carry = std::mem::take(&mut self.carry);
        carry.sort_by(|a, b| {
            (&a.key, std::cmp::Reverse(a.seq)).cmp(&(&b.key, std::cmp::Reverse(b.seq)))
        });
        let rest: Box<dyn EntryIter> = Box::new(Upper {
            peek: self.upper_peek.take(),
            inner: std::mem::replace(&mut self.upper, Box::new(VecIter(Vec::new().into_iter()))),
        });
        let overlay = self.overlay_entries(self.ov_pos..self.ov_end);
        self.ov_pos = self.ov_end;
        let merged = MergeIter::with_parts(
            vec![
                Box::new(VecIter(carry.into_iter())),
                rest,
                Box::new(VecIter(overlay.into_iter())),
            ],
            self.table.codec.clone(),
        );
        self.tail = Some(RowIter::new(
            Box::new(merged),
            &self.table.codec,
            self.read_seq,
            self.end.clone(),
        ));
        Ok(())
    }

    fn next_tail(&mut self) -> Result<Option<RecordBatch>> {
        let Some(tail) = self.tail.as_mut() else {
            return Ok(None);
        };
        let mut rows = Vec::with_capacity(self.batch_rows.min(1024));
        while rows.len() < self.batch_rows {
            match tail.next_row()? {
                Some(r) => rows.push(r),
                None => break,
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        self.paths.merged += rows.len() as u64;
        self.rows_batch(&rows).map(Some)
    }
}

/// Where the keys above a run of deep rows come from (see [`sourced`]).
struct Sourced {
    /// Per key, in key order: its position among the deep rows, whether the deep row there
    /// has the key, and where its row comes from.
    ukeys: Vec<(usize, bool, From)>,
    /// The keys resolved row by row ([`From::Resolved`] indexes them).
    resolved_keys: Vec<Bytes>,
    /// Their versions, newest first per key.
    versions: Vec<Entry>,
    /// Positions of deep rows whose versions the resolution also needs: the key's visible
    /// upper versions are all partial.
    need_deep: Vec<usize>,
}

/// Lines up the memtable versions `upper` and the overlay's entries `ov_entries` (whose
/// whole rows are at `ov_rows` in its batch) by key, placing each key among the deep rows
/// with `place` (its position, and whether the deep row there has it). Keys are compared
/// in place; only the few resolved row by row (memtable keys, partial rows) are copied.
fn sourced(
    upper: &[Entry],
    ov_entries: &[Entry],
    ov_rows: &[u32],
    read_seq: u64,
    mut place: impl FnMut(&Bytes) -> (usize, bool),
) -> Sourced {
    let mut out = Sourced {
        ukeys: Vec::with_capacity(ov_entries.len() + upper.len()),
        resolved_keys: Vec::new(),
        versions: Vec::new(),
        need_deep: Vec::new(),
    };
    let (mut u, mut j) = (0, 0);
    loop {
        let mk = upper.get(u).map(|e| &e.key);
        let ok = ov_entries.get(j).map(|e| &e.key);
        let Some((key, in_mem, in_ov)) = smaller(mk, ok) else {
            break;
        };
        let (pos, hit) = place(key);
        let group = out.versions.len();
        let src = if !in_mem {
            let e = &ov_entries[j];
            j += 1;
            match e.kind {
                EntryKind::Put => From::Overlay(ov_rows[j - 1] as usize),
                EntryKind::Delete => From::Gone,
                EntryKind::Partial => {
                    out.versions.push(e.clone());
                    out.resolved_keys.push(e.key.clone());
                    From::Resolved(out.resolved_keys.len() - 1)
                }
            }
        } else {
            let k = key.clone();
            while upper.get(u).is_some_and(|e| e.key == k) {
                out.versions.push(upper[u].clone());
                u += 1;
            }
            if in_ov {
                out.versions.push(ov_entries[j].clone());
                j += 1;
            }
            out.resolved_keys.push(k);
            From::Resolved(out.resolved_keys.len() - 1)
        };
        if hit && matches!(src, From::Resolved(_)) {
            // Versions of a key arrive newest first; a whole row or a delete among the
            // visible ones hides the deep row.
            let whole = out.versions[group..]
                .iter()
                .any(|e| e.seq <= read_seq && e.kind != EntryKind::Partial);
            if !whole {
                out.need_deep.push(pos);
            }
        }
        out.ukeys.push((pos, hit, src));
    }
    out
}

/// The rest of the upper stream, with the version already peeked first.
struct Upper {
    peek: Option<Entry>,
    inner: Box<dyn EntryIter>,
}

impl EntryIter for Upper {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        match self.peek.take() {
            Some(e) => Ok(Some(e)),
            None => self.inner.next_entry(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    #[test]
    fn integer_lower_bound_from_is_partition_point() {
        let v = Int64Array::from((0..500).map(|i| i * 3).collect::<Vec<i64>>());
        let keys = Keys::Int(&v);
        for from in [0, 1, 63, 64, 100, 499, 500] {
            for b in (-2..1505).step_by(7) {
                for strict in [false, true] {
                    let want = from
                        + v.values()[from..].partition_point(|x| *x < b || (strict && *x == b));
                    assert_eq!(
                        lower_bound_from(keys, from, &encode_int(b), strict),
                        want,
                        "from {from} bound {b} strict {strict}"
                    );
                }
            }
        }
    }

    #[test]
    fn gallop_is_partition_point() {
        let v: Vec<i64> = (0..300).map(|i| i * 2).collect();
        for len in [0, 1, 2, 3, 7, 64, 300] {
            for b in -1..605 {
                assert_eq!(
                    gallop(&v[..len], |x| *x < b),
                    v[..len].partition_point(|x| *x < b),
                    "len {len} bound {b}"
                );
            }
        }
    }

    /// Updates overwrite a column nobody else holds; a shared one is given back.
    #[test]
    fn overwrite_writes_in_place_only_when_unshared() {
        let ints = |v: Vec<Option<i64>>| -> ArrayRef { Arc::new(Int64Array::from(v)) };
        let resolved = ints(vec![Some(10)]);
        let overlay = ints(vec![Some(20), Some(21)]);
        let writes = [(0, 2, 1), (2, 1, 0)];
        let base = ints(vec![Some(0), Some(1), None, Some(3)]);
        let out = overwrite(base, [&resolved, &overlay], &writes).unwrap();
        assert_eq!(
            out.as_ref(),
            ints(vec![Some(21), Some(1), Some(10), Some(3)]).as_ref()
        );
        let base = ints(vec![Some(0), Some(1), Some(2)]);
        let held = base.clone();
        let back = overwrite(base, [&resolved, &overlay], &writes).unwrap_err();
        assert_eq!(back.as_ref(), held.as_ref());
        let sliced = ints(vec![Some(0), Some(1), Some(2), Some(3)]).slice(1, 3);
        assert!(overwrite(sliced, [&resolved, &overlay], &writes).is_err());
        // A null among the new values: not in place.
        let base = ints(vec![Some(0), Some(1), Some(2)]);
        assert!(overwrite(base, [&ints(vec![None]), &overlay], &writes).is_err());
    }

    /// The typed splice and the generic one agree, with nulls and sliced (offset) sources.
    #[test]
    fn splice_copies_segments_with_nulls_and_offsets() {
        let segments = [(0, 0, 2), (2, 1, 2), (1, 0, 1), (0, 3, 5), (2, 0, 1)];
        let ints = |v: Vec<Option<i64>>| -> ArrayRef { Arc::new(Int64Array::from(v)) };
        let deep = ints(vec![Some(9), Some(0), Some(1), None, Some(3), Some(4)]).slice(1, 5);
        let resolved = ints(vec![Some(10)]);
        let overlay = ints(vec![None, Some(21), Some(22)]).slice(0, 2);
        let out = splice([&deep, &resolved, &overlay], &segments, 7).unwrap();
        let want = ints(vec![
            Some(0),
            Some(1),
            Some(21),
            Some(10),
            Some(3),
            Some(4),
            None,
        ]);
        assert_eq!(out.as_ref(), want.as_ref());
        // Without nulls anywhere: no null buffer.
        let plain = ints(vec![Some(1), Some(2)]);
        let out = splice([&plain, &plain, &plain], &[(0, 0, 2), (1, 1, 2)], 3).unwrap();
        assert_eq!(out.null_count(), 0);
        assert!(out.nulls().is_none());
        // Strings take the generic path.
        let s = |v: Vec<Option<&str>>| -> ArrayRef { Arc::new(StringArray::from(v)) };
        let out = splice(
            [
                &s(vec![Some("a"), None]),
                &s(vec![Some("r")]),
                &s(vec![Some("o")]),
            ],
            &[(0, 0, 1), (2, 0, 1), (0, 1, 2), (1, 0, 1)],
            4,
        )
        .unwrap();
        assert_eq!(
            out.as_ref(),
            s(vec![Some("a"), Some("o"), None, Some("r")]).as_ref()
        );
    }
}
