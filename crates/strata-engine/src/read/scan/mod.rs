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
//! - **row merge**: a chunk whose visible version of some key is a partial row (or whose
//!   last key has no visible version in it): the chunk is decoded into versions and
//!   resolved with the same fold as point reads. The last key's versions may continue in
//!   the next chunk, so they are carried over.
//!
//! A chunk holding other versions (history kept for time travel, deletes, versions newer
//! than the read sequence number) is first made clean column-wise when it can be: each
//! key's visible whole-row version selected, every other row filtered out
//! ([`Deep::visible`]); it then passes through or is patched.
//!
//! When the overlay of the upper tiers carries its keys' row positions in the deep level
//! (`Positions`) and nothing is left for the row path, the level is read by row number
//! instead: no key column is read or searched, and each chunk takes the overlay entries
//! placed before its last row.
//!
//! This file holds the operator ([`ViewBatches`]): its state, the merge of the upper tiers
//! and row-by-row resolution; `chunks` takes the deep level chunk by chunk (the three
//! paths, and reads by position), `tail` what comes after it; `deep` reads the level,
//! `keys` searches its key column, `splice` copies runs of rows between columns.

mod chunks;
mod deep;
mod keys;
mod splice;
mod tail;

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
    ArrowPrimitiveType, BooleanArray, BooleanBufferBuilder, MutableArrayData, PrimitiveArray,
    downcast_primitive, make_array,
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
    /// Deep-level rows left out column-wise by [`Deep::visible`]: versions older than
    /// their key's visible one, deletes, and versions newer than the read.
    pub superseded: u64,
}

/// Versions in key order, each key's newest first: the order every version list of a scan
/// is resolved in.
fn newest_first(a: &Entry, b: &Entry) -> Ordering {
    (&a.key, Reverse(a.seq)).cmp(&(&b.key, Reverse(b.seq)))
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
        // Upper versions arrive in order; deep versions appended for a patch do not.
        if !versions.is_sorted_by(|a, b| newest_first(a, b) != Ordering::Greater) {
            versions.sort_by(newest_first);
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
