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

/// One column group of the deep level, read file by file, cut to the key range.
struct GroupCursor {
    handle: tokio::runtime::Handle,
    files: VecDeque<ParquetSource>,
    stream: Option<(String, BatchStream)>,
    /// File columns read (ascending).
    columns: Vec<usize>,
    /// The Arrow type each column read must have (the group's format): a file whose
    /// columns differ is corrupt, never a panic in the typed code below.
    types: Vec<arrow::datatypes::DataType>,
    /// The first column read is the typed `BIGINT` key rather than `_key`.
    int_key: bool,
    front: Option<RecordBatch>,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    done: bool,
    /// Read by row position instead of by key: rows `from..to` of the level (counted over
    /// its files in order), and the level row the next file starts at.
    rows: Option<(u64, u64)>,
    file_start: u64,
    /// Rows per decoded batch.
    batch: usize,
}

/// The keys of a batch of the deep level (its first column): the encoded `_key`, or, for a
/// table whose key is one `BIGINT`, the typed key column (8 bytes a row to decode instead of
/// a byte array; its order is the encoded order).
#[derive(Clone, Copy)]
enum Keys<'a> {
    Encoded(&'a BinaryArray),
    Int(&'a Int64Array),
}

/// Whether scans read `table`'s keys from the typed `BIGINT` key column (its key is one
/// `BIGINT`) rather than the encoded `_key`, and that column's place in a level's files.
fn key_column(table: &TableSchema) -> (bool, usize) {
    let int_key = table.key_types == [DataType::Int64];
    (int_key, if int_key { 1 } else { 0 })
}

/// The memcomparable encoding of a `BIGINT` key (see `keycodec`).
fn encode_int(v: i64) -> [u8; 8] {
    ((v as u64) ^ 0x8000_0000_0000_0000).to_be_bytes()
}

impl<'a> Keys<'a> {
    fn of(batch: &'a RecordBatch, int: bool, origin: &str) -> Result<Self> {
        let c = batch.column(0);
        let keys = if int {
            c.as_primitive_opt::<Int64Type>().map(Keys::Int)
        } else {
            c.as_binary_opt::<i32>().map(Keys::Encoded)
        };
        keys.ok_or_else(|| Error::Corrupt(format!("parquet {origin}: unexpected key column type")))
    }

    fn len(&self) -> usize {
        match self {
            Keys::Encoded(k) => k.len(),
            Keys::Int(k) => k.len(),
        }
    }

    /// Row `i`'s key compared with an encoded key.
    fn cmp_at(&self, i: usize, bound: &[u8]) -> Ordering {
        match self {
            Keys::Encoded(k) => k.value(i).cmp(bound),
            Keys::Int(k) => encode_int(k.value(i)).as_slice().cmp(bound),
        }
    }

    /// Row `i`'s encoded key.
    fn key(&self, i: usize) -> Bytes {
        match self {
            Keys::Encoded(k) => Bytes::copy_from_slice(k.value(i)),
            Keys::Int(k) => Bytes::copy_from_slice(&encode_int(k.value(i))),
        }
    }

    fn same(&self, i: usize, other: &Keys, j: usize) -> bool {
        match (self, other) {
            (Keys::Encoded(a), Keys::Encoded(b)) => a.value(i) == b.value(j),
            (Keys::Int(a), Keys::Int(b)) => a.value(i) == b.value(j),
            _ => false,
        }
    }

    fn strictly_increasing(&self) -> bool {
        match self {
            Keys::Encoded(k) => (1..k.len()).all(|i| k.value(i - 1) < k.value(i)),
            Keys::Int(k) => k.values().windows(2).all(|w| w[0] < w[1]),
        }
    }
}

/// The first row of `keys` whose key is at least (`strict`: greater than) `bound`.
fn lower_bound(keys: Keys, bound: &[u8], strict: bool) -> usize {
    lower_bound_from(keys, 0, bound, strict)
}

/// The `BIGINT` whose encoding is `bound`, when it is one.
fn decode_int(bound: &[u8]) -> Option<i64> {
    let b: [u8; 8] = bound.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ 0x8000_0000_0000_0000) as i64)
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

/// The first index of `items` where `below` turns false (`below` must be true then false,
/// like `partition_point`'s predicate), searching outward from the start: O(log d) for an
/// answer d items in. A scan's searches mostly land a short way past the last one.
fn gallop<T>(items: &[T], below: impl Fn(&T) -> bool) -> usize {
    let mut lo = 0;
    let mut step = 1;
    loop {
        let probe = lo + step;
        if probe >= items.len() {
            return lo + items[lo..].partition_point(&below);
        }
        if !below(&items[probe]) {
            return lo + items[lo..probe].partition_point(&below);
        }
        lo = probe;
        step *= 2;
    }
}

/// [`lower_bound`] among rows `from..`.
fn lower_bound_from(keys: Keys, from: usize, bound: &[u8], strict: bool) -> usize {
    if let (Keys::Int(k), Some(b)) = (keys, decode_int(bound)) {
        // Same order as the encoding; compares integers instead of bytes.
        let values = &k.values()[from..];
        return from + gallop(values, |v| *v < b || (strict && *v == b));
    }
    let (mut lo, mut hi) = (from, keys.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let o = keys.cmp_at(mid, bound);
        if o == Ordering::Less || (strict && o == Ordering::Equal) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Checks that a batch read from a columnar file has the columns its format gives them
/// (count and Arrow types), so a file written otherwise (corrupt, or not Strata's) is an
/// error naming it rather than a panic in the typed code that reads the batch.
fn check_types(
    batch: &RecordBatch,
    types: &[arrow::datatypes::DataType],
    origin: &str,
) -> Result<()> {
    if batch.num_columns() != types.len() {
        return Err(Error::Corrupt(format!(
            "parquet {origin}: {} columns read where {} were asked",
            batch.num_columns(),
            types.len()
        )));
    }
    for (i, (c, t)) in batch.columns().iter().zip(types).enumerate() {
        if c.data_type() != t {
            return Err(Error::Corrupt(format!(
                "parquet {origin}: column {} is {} where the format has {t}",
                batch.schema().field(i).name(),
                c.data_type()
            )));
        }
    }
    Ok(())
}

impl GroupCursor {
    /// Makes sure `front` holds at least one row; false at the end of the range.
    fn fill(&mut self) -> Result<bool> {
        while self.front.as_ref().is_none_or(|b| b.num_rows() == 0) {
            self.front = None;
            if self.done {
                return Ok(false);
            }
            if let Some((from, to)) = self.rows {
                // By position: each file's rows within `from..to`, already cut.
                if self.stream.is_none() {
                    let Some(f) = self.files.pop_front() else {
                        self.done = true;
                        return Ok(false);
                    };
                    let a = self.file_start;
                    let b = a + self.handle.block_on(f.num_rows())?;
                    self.file_start = b;
                    if a >= to {
                        self.done = true;
                        return Ok(false);
                    }
                    if b > from {
                        let s = self.handle.block_on(f.rows_cached(
                            from.max(a) - a,
                            to.min(b) - a,
                            &self.columns,
                            self.batch,
                        ))?;
                        self.stream = Some((f.path.to_string(), s));
                    }
                    continue;
                }
                let Some((origin, stream)) = self.stream.as_mut() else {
                    continue;
                };
                match self.handle.block_on(stream.next()) {
                    Some(b) => {
                        let b = b.map_err(|e| Error::Corrupt(format!("parquet {origin}: {e}")))?;
                        check_types(&b, &self.types, origin)?;
                        self.front = Some(b);
                    }
                    None => self.stream = None,
                }
                continue;
            }
            if self.stream.is_none() {
                let Some(f) = self.files.pop_front() else {
                    self.done = true;
                    return Ok(false);
                };
                let s = self.handle.block_on(f.keyed_cached(
                    &self.start,
                    self.end.as_deref(),
                    &self.columns,
                    self.batch,
                ))?;
                self.stream = Some((f.path.to_string(), s));
            }
            let Some((origin, stream)) = self.stream.as_mut() else {
                continue;
            };
            let Some(batch) = self.handle.block_on(stream.next()) else {
                self.stream = None;
                continue;
            };
            let batch = batch.map_err(|e| Error::Corrupt(format!("parquet {origin}: {e}")))?;
            check_types(&batch, &self.types, origin)?;
            let keys = Keys::of(&batch, self.int_key, origin)?;
            let lo = lower_bound(keys, &self.start, false);
            let hi = match &self.end {
                Some(e) => lower_bound(keys, e, false),
                None => keys.len(),
            };
            if hi < keys.len() {
                // Past the end of the range: nothing further in this run is wanted.
                self.done = true;
                self.files.clear();
                self.stream = None;
            }
            if hi > lo {
                self.front = Some(batch.slice(lo, hi - lo));
            }
        }
        Ok(true)
    }

    fn take(&mut self, n: usize) -> RecordBatch {
        let front = self.front.take().expect("filled");
        if n < front.num_rows() {
            self.front = Some(front.slice(n, front.num_rows() - n));
            front.slice(0, n)
        } else {
            front
        }
    }
}

/// Where an output column comes from in a deep-level chunk.
#[derive(Clone, Copy)]
struct ColumnSource {
    group: usize,
    column: usize,
}

/// Batch columns of a group's version columns.
#[derive(Clone, Copy)]
struct MetaColumns {
    seq: usize,
    kind: usize,
    present: usize,
}

/// The deep level's groups a scan reads, lined up row by row.
struct Deep {
    cursors: Vec<GroupCursor>,
    formats: Vec<Arc<GroupFormat>>,
    /// Per group: (position in the group's columns, batch column) of each value column read.
    values: Vec<Vec<(usize, usize)>>,
    /// Per group: batch columns of `_seq`, `_kind` and `_present`; None when the level
    /// holds only whole-row puts visible at the read sequence number, one per key (the
    /// version columns are not read; every chunk is clean).
    meta: Option<Vec<MetaColumns>>,
    int_key: bool,
    outputs: Vec<ColumnSource>,
    origin: String,
    /// A chunk (or its rest) put back to be taken again.
    pushback: Option<Chunk>,
    /// Rows `from..to` of the level are read by position, without the key column unless
    /// it is projected (see [`Positions`]).
    rows: Option<(u64, u64)>,
}

/// A chunk of the deep level: the same rows of every group read.
struct Chunk {
    groups: Vec<RecordBatch>,
    int_key: bool,
}

impl Chunk {
    fn rows(&self) -> usize {
        self.groups[0].num_rows()
    }

    fn keys(&self) -> Keys<'_> {
        let c = self.groups[0].column(0);
        if self.int_key {
            Keys::Int(c.as_primitive::<Int64Type>())
        } else {
            Keys::Encoded(c.as_binary::<i32>())
        }
    }

    fn slice(&self, offset: usize, len: usize) -> Chunk {
        Chunk {
            groups: self.groups.iter().map(|b| b.slice(offset, len)).collect(),
            int_key: self.int_key,
        }
    }
}

impl Deep {
    /// The next chunk of at most `max` rows, or None at the end of the range.
    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if let Some(c) = self.pushback.take() {
            return Ok(Some(c));
        }
        let mut any = false;
        let mut all = true;
        for c in &mut self.cursors {
            let filled = c.fill()?;
            any |= filled;
            all &= filled;
        }
        if !any {
            return Ok(None);
        }
        if !all {
            return Err(self.misaligned("one group ended before the others"));
        }
        let n = self
            .cursors
            .iter()
            .map(|c| c.front.as_ref().map_or(0, |b| b.num_rows()))
            .min()
            .unwrap_or(0)
            .min(max.max(1));
        let groups: Vec<RecordBatch> = self.cursors.iter_mut().map(|c| c.take(n)).collect();
        if self.rows.is_some() {
            // Read by position: every group's files are cut to the same rows.
            return Ok(Some(Chunk {
                groups,
                int_key: self.int_key,
            }));
        }
        // The groups must be lined up: same key bounds and, when read, the same versions
        // (sequence numbers). Without version columns every key has one version, so equal
        // bounds over equal row counts mean equal keys.
        let first = Keys::of(&groups[0], self.int_key, &self.origin)?;
        for (g, b) in groups.iter().enumerate().skip(1) {
            let k = Keys::of(b, self.int_key, &self.origin)?;
            if !k.same(0, &first, 0) || !k.same(n - 1, &first, n - 1) {
                return Err(self.misaligned("rows differ between groups"));
            }
            if let Some(meta) = &self.meta {
                let seqs = |g: usize| {
                    groups[g]
                        .column(meta[g].seq)
                        .as_primitive::<UInt64Type>()
                        .values()
                };
                if seqs(g) != seqs(0) {
                    return Err(self.misaligned("versions differ between groups"));
                }
            }
        }
        Ok(Some(Chunk {
            groups,
            int_key: self.int_key,
        }))
    }

    fn misaligned(&self, what: &str) -> Error {
        let files: Vec<&str> = self
            .cursors
            .iter()
            .filter_map(|c| c.stream.as_ref().map(|(origin, _)| origin.as_str()))
            .collect();
        Error::Corrupt(format!(
            "column groups of S3 level {} disagree: {what} (files {})",
            self.origin,
            files.join(", ")
        ))
    }

    /// Whether every row is a whole-row put visible at `seq` with a key of its own.
    fn clean(&self, chunk: &Chunk, seq: u64) -> bool {
        let Some(meta) = &self.meta else {
            return true;
        };
        let b = &chunk.groups[0];
        let kinds = b.column(meta[0].kind).as_primitive::<UInt8Type>();
        if kinds.values().iter().any(|k| *k != EntryKind::Put as u8) {
            return false;
        }
        let seqs = b.column(meta[0].seq).as_primitive::<UInt64Type>();
        if seqs.values().iter().any(|s| *s > seq) {
            return false;
        }
        chunk.keys().strictly_increasing()
    }

    /// The versions of rows `rows` of a chunk, widened to the table's width (columns not
    /// read are "not carried"), in (key, sequence descending) order per group.
    fn versions(
        &self,
        table: &TableSchema,
        chunk: &Chunk,
        rows: impl Iterator<Item = usize> + Clone,
        out: &mut Vec<Entry>,
    ) -> Result<()> {
        let width = table.value_indices.len();
        for (g, batch) in chunk.groups.iter().enumerate() {
            let format = &self.formats[g];
            let keys = Keys::of(batch, self.int_key, &self.origin)?;
            // Without version columns every row is a whole-row put older than any upper
            // version of its key: sequence number 0 orders it last.
            let m = self.meta.as_ref().map(|m| {
                let m = m[g];
                (
                    batch.column(m.seq).as_primitive::<UInt64Type>(),
                    batch.column(m.kind).as_primitive::<UInt8Type>(),
                    batch.column(m.present).as_binary::<i32>(),
                )
            });
            for row in rows.clone() {
                let (seq, kind) = match &m {
                    Some((seqs, kinds, _)) => (
                        seqs.value(row),
                        EntryKind::from_u8(kinds.value(row)).map_err(|_| {
                            Error::Corrupt(format!("unknown kind {} in S3 level", kinds.value(row)))
                        })?,
                    ),
                    None => (0, EntryKind::Put),
                };
                let value = if kind == EntryKind::Delete {
                    Bytes::new()
                } else {
                    let bits = m
                        .as_ref()
                        .and_then(|(_, _, p)| (!p.is_null(row)).then(|| p.value(row)));
                    let mut vals: RowValues = vec![None; width];
                    for &(pos, col) in &self.values[g] {
                        let carried = carries(kind, bits, pos).ok_or_else(|| {
                            Error::Corrupt("partial row without _present in S3 level".into())
                        })?;
                        if carried {
                            vals[format.columns[pos]] =
                                Some(value_at(batch.column(col).as_ref(), row)?);
                        }
                    }
                    Bytes::from(table.codec.encode(&vals)?)
                };
                out.push(Entry {
                    key: keys.key(row),
                    seq,
                    kind: if kind == EntryKind::Delete {
                        EntryKind::Delete
                    } else {
                        EntryKind::Partial
                    },
                    value,
                });
            }
        }
        Ok(())
    }

    /// The projected output columns of a chunk.
    fn columns(&self, chunk: &Chunk) -> Vec<ArrayRef> {
        self.outputs
            .iter()
            .map(|s| chunk.groups[s.group].column(s.column).clone())
            .collect()
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

/// Where a key's output row comes from in a patched chunk.
enum From {
    /// Resolved row by row: the i-th such key.
    Resolved(usize),
    /// A whole row of the overlay (its batch row).
    Overlay(usize),
    /// Deleted.
    Gone,
}

/// Overwrites rows of a freshly decoded primitive column in place: `writes` are
/// (position, source, row) with source 1 or 2 indexing `sources` (0 and 1 here). Gives
/// `base` back when it cannot: another type, nulls among the new values, or a buffer
/// shared with another array (a sliced batch).
fn overwrite(
    base: ArrayRef,
    sources: [&ArrayRef; 2],
    writes: &[(usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrayRef> {
    macro_rules! primitive {
        ($t:ty) => {
            overwrite_primitive::<$t>(base, sources, writes)
        };
    }
    downcast_primitive! {
        base.data_type() => (primitive),
        _ => Err(base)
    }
}

fn overwrite_primitive<T: ArrowPrimitiveType>(
    base: ArrayRef,
    sources: [&ArrayRef; 2],
    writes: &[(usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrayRef> {
    if sources
        .iter()
        .any(|a| a.null_count() > 0 || a.data_type() != base.data_type())
    {
        return Err(base);
    }
    let array = base.as_primitive::<T>().clone();
    drop(base);
    let data_type = array.data_type().clone();
    let mut builder = match array.into_builder() {
        Ok(b) => b,
        Err(array) => return Err(Arc::new(array)),
    };
    let new = sources.map(|a| a.as_primitive::<T>().values());
    let values = builder.values_slice_mut();
    for &(pos, src, row) in writes {
        values[pos] = new[src - 1][row];
    }
    if let Some(valid) = builder.validity_slice_mut() {
        for &(pos, _, _) in writes {
            arrow::util::bit_util::set_bit(valid, pos);
        }
    }
    Ok(Arc::new(builder.finish().with_data_type(data_type)))
}

/// Copies `segments` ((source, start, end) row ranges of `sources`) into one array of
/// `total` rows. Primitive columns are copied slice by slice (the common case: a few
/// hundred short runs per chunk); other types go through `MutableArrayData`.
fn splice(
    sources: [&ArrayRef; 3],
    segments: &[(usize, usize, usize)],
    total: usize,
) -> Result<ArrayRef> {
    macro_rules! primitive {
        ($t:ty) => {
            Ok(splice_primitive::<$t>(sources, segments, total))
        };
    }
    downcast_primitive! {
        sources[0].data_type() => (primitive),
        _ => {
            let data: Vec<_> = sources.iter().map(|a| a.to_data()).collect();
            let mut out = MutableArrayData::new(data.iter().collect(), false, total);
            for &(src, start, end) in segments {
                out.try_extend(src, start, end)
                    .map_err(|e| Error::Internal(format!("splicing a scan batch: {e}")))?;
            }
            Ok(make_array(out.freeze()))
        }
    }
}

fn splice_primitive<T: ArrowPrimitiveType>(
    sources: [&ArrayRef; 3],
    segments: &[(usize, usize, usize)],
    total: usize,
) -> ArrayRef {
    let arrays = sources.map(|a| a.as_primitive::<T>());
    let mut values: Vec<T::Native> = Vec::with_capacity(total);
    for &(src, start, end) in segments {
        values.extend_from_slice(&arrays[src].values()[start..end]);
    }
    let nulls = arrays.iter().any(|a| a.null_count() > 0).then(|| {
        let mut b = BooleanBufferBuilder::new(total);
        for &(src, start, end) in segments {
            match arrays[src].nulls() {
                Some(n) => b.append_buffer(&n.inner().slice(start, end - start)),
                None => b.append_n(end - start, true),
            }
        }
        NullBuffer::new(b.finish())
    });
    Arc::new(
        PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls)
            .with_data_type(sources[0].data_type().clone()),
    )
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

/// What the deep level of a scan is: its group formats and files, and the range.
pub(crate) struct DeepSpec {
    pub(crate) level: usize,
    pub(crate) groups: Vec<(Arc<GroupFormat>, Vec<ParquetSource>)>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) start: Vec<u8>,
    pub(crate) end: Option<Vec<u8>>,
    /// Read by row position when the level allows it (only visible puts, one per key, and
    /// row-group statistics): the level's rows, as counted when the overlay's
    /// [`Positions`] were computed.
    pub(crate) by_position: Option<u64>,
}

impl DeepSpec {
    /// The level's reader; its files are decoded in batches of about `batch_rows` (the
    /// scan's batch size, so that a chunk passed through is one output batch).
    fn build(
        self,
        table: &TableSchema,
        projection: &[usize],
        read_seq: u64,
        batch_rows: usize,
    ) -> Result<Deep> {
        let batch = batch_rows.clamp(1024, 1 << 16);
        let k = table.key_indices.len();
        let (seq_file, kind_file, present_file) = (1 + k, 2 + k, 3 + k);
        let first_value = 4 + k;
        let wants_keys = projection.iter().any(|c| table.key_indices.contains(c));
        let (int_key, key_file) = key_column(table);
        let in_range = |f: &ParquetSource| {
            f.info.key_max.as_slice() >= self.start.as_slice()
                && self
                    .end
                    .as_deref()
                    .is_none_or(|e| f.info.key_min.as_slice() < e)
        };
        // The version columns are needed unless every file read holds only visible puts,
        // one per key (by its footer and statistics; metadata is cached).
        let mut versions_needed = false;
        'groups: for (_, files) in &self.groups {
            for f in files.iter().filter(|f| in_range(f)) {
                if !self.handle.block_on(f.only_visible_puts(
                    &self.start,
                    self.end.as_deref(),
                    read_seq,
                ))? {
                    versions_needed = true;
                    break 'groups;
                }
            }
        }
        let rows = match self.by_position {
            Some(total) if !versions_needed => {
                let first = self.groups.first().map_or(&[][..], |(_, f)| f.as_slice());
                row_bounds(
                    first,
                    &self.start,
                    self.end.as_deref(),
                    total,
                    table,
                    &self.handle,
                )?
            }
            _ => None,
        };
        let mut cursors = Vec::new();
        let mut formats = Vec::new();
        let mut values = Vec::new();
        let mut meta = Vec::new();
        let mut outputs: Vec<Option<ColumnSource>> = vec![None; projection.len()];
        for (g, (format, files)) in self.groups.into_iter().enumerate() {
            // By position the key column is read only when projected.
            let mut cols = Vec::new();
            if rows.is_none() {
                cols.push(key_file);
            }
            if versions_needed {
                cols.extend([seq_file, kind_file, present_file]);
            }
            if g == 0 && wants_keys {
                cols.extend(1..=k);
            }
            let mut read = Vec::new();
            for (pos, c) in format.columns.iter().enumerate() {
                if projection.contains(&table.value_indices[*c]) {
                    cols.push(first_value + pos);
                    read.push(pos);
                }
            }
            // Nothing to read but row counts: by position (rows known from the metadata)
            // the files' batches carry counts alone; by key the key column bounds them.
            if cols.is_empty() && rows.is_none() {
                cols.push(key_file);
            }
            cols.sort_unstable();
            cols.dedup();
            let at = |file_col: usize| cols.iter().position(|c| *c == file_col).unwrap_or(0);
            for (o, &pc) in projection.iter().enumerate() {
                if let Some(ki) = table.key_indices.iter().position(|x| *x == pc) {
                    if g == 0 {
                        outputs[o] = Some(ColumnSource {
                            group: 0,
                            column: at(1 + ki),
                        });
                    }
                } else if let Some(vi) = table.value_indices.iter().position(|x| *x == pc)
                    && let Some(pos) = format.columns.iter().position(|x| *x == vi)
                {
                    outputs[o] = Some(ColumnSource {
                        group: g,
                        column: at(first_value + pos),
                    });
                }
            }
            values.push(read.iter().map(|p| (*p, at(first_value + p))).collect());
            meta.push(MetaColumns {
                seq: at(seq_file),
                kind: at(kind_file),
                present: at(present_file),
            });
            cursors.push(GroupCursor {
                handle: self.handle.clone(),
                files: if rows.is_some() {
                    files.into()
                } else {
                    files.into_iter().filter(|f| in_range(f)).collect()
                },
                rows,
                file_start: 0,
                batch,
                stream: None,
                front: None,
                start: self.start.clone(),
                end: self.end.clone(),
                done: false,
                types: cols
                    .iter()
                    .map(|c| {
                        format
                            .schema
                            .fields()
                            .get(*c)
                            .map(|f| f.data_type().clone())
                            .ok_or_else(|| {
                                Error::Internal(format!("column {c} beyond the group's format"))
                            })
                    })
                    .collect::<Result<_>>()?,
                columns: cols.clone(),
                int_key,
            });
            formats.push(format);
        }
        Ok(Deep {
            cursors,
            formats,
            values,
            meta: versions_needed.then_some(meta),
            int_key,
            outputs: outputs
                .into_iter()
                .map(|o| {
                    o.unwrap_or(ColumnSource {
                        group: 0,
                        column: 0,
                    })
                })
                .collect(),
            origin: self.level.to_string(),
            pushback: None,
            rows,
        })
    }
}

/// The rows of a level (files in key order, one row per key) with keys in `[start, end)`,
/// as a row range: bounds between row groups (by their `_key` statistics: a whole level,
/// or a scan split at row-group starts) from the metadata alone, a bound inside a row
/// group by reading that row group's keys. None when the files do not hold `total` rows
/// or a row group has no statistics.
fn row_bounds(
    files: &[ParquetSource],
    start: &[u8],
    end: Option<&[u8]>,
    total: u64,
    table: &TableSchema,
    handle: &tokio::runtime::Handle,
) -> Result<Option<(u64, u64)>> {
    let (mut from, mut to) = (None, None);
    let mut at = 0u64;
    for f in files {
        let mut local = 0u64;
        for (n, span) in handle.block_on(f.row_group_spans())? {
            let Some((lo, hi)) = span else {
                return Ok(None);
            };
            // The first row group not wholly below a bound starts its rows; a bound that
            // cuts a row group is placed among its keys.
            for (bound, slot) in [(Some(start), &mut from), (end, &mut to)] {
                if let Some(b) = bound
                    && slot.is_none()
                {
                    if b <= lo.as_slice() {
                        *slot = Some(at);
                    } else if b <= hi.as_slice() {
                        // A truncated maximum may lie above the row group's last key: a
                        // bound past every key here belongs to a later row group.
                        let below = keys_below(f, local, local + n, b, table, handle)?;
                        if below < n {
                            *slot = Some(at + below);
                        }
                    }
                }
            }
            at += n;
            local += n;
        }
    }
    if at != total {
        return Ok(None);
    }
    let from = from.unwrap_or(at);
    // An empty range (end before start) reads nothing.
    Ok(Some((from, to.unwrap_or(at).max(from))))
}

/// How many of rows `from..to` of a file (sorted, distinct keys) have keys below `bound`.
fn keys_below(
    f: &ParquetSource,
    from: u64,
    to: u64,
    bound: &[u8],
    table: &TableSchema,
    handle: &tokio::runtime::Handle,
) -> Result<u64> {
    let origin = f.path.to_string();
    let (int_key, key_column) = key_column(table);
    let mut stream = handle.block_on(f.stream_rows(from, to, &[key_column], 8192))?;
    let mut below = 0u64;
    while let Some(batch) = handle.block_on(stream.next()) {
        let batch = batch.map_err(|e| Error::Corrupt(format!("parquet {origin}: {e}")))?;
        let keys = Keys::of(&batch, int_key, &origin)?;
        let p = lower_bound(keys, bound, false);
        below += p as u64;
        if p < keys.len() {
            break;
        }
    }
    Ok(below)
}

/// Where the keys of an overlay fall in the deep level beneath it, so that a scan can
/// splice the overlay into the level's chunks by row number without reading or searching
/// the key column. Computed with the overlay (one pass over the level's key column); the
/// overlay's cache key names the level's files, so they hold while it is used.
#[derive(Debug)]
pub(crate) struct Positions {
    /// Rows of the level.
    pub(crate) rows: u64,
    /// Per overlay entry: the level's rows with smaller keys.
    pub(crate) at: Vec<u64>,
    /// Per overlay entry: whether the level holds its key (in row `at`).
    pub(crate) hit: Vec<bool>,
}

impl Positions {
    /// Positions of `entries` (in key order) in the level whose first group's files are
    /// `files` (in key order). Blocking.
    pub(crate) fn compute(
        table: &TableSchema,
        entries: &[Entry],
        files: &[ParquetSource],
        handle: &tokio::runtime::Handle,
    ) -> Result<Self> {
        let (int_key, key_column) = key_column(table);
        let mut at = Vec::with_capacity(entries.len());
        let mut hit = Vec::with_capacity(entries.len());
        let mut rows = 0u64;
        for f in files {
            let origin = f.path.to_string();
            let mut stream = handle.block_on(f.stream(&[], None, Some(&[key_column]), 8192))?;
            while let Some(batch) = handle.block_on(stream.next()) {
                let batch = batch.map_err(|e| Error::Corrupt(format!("parquet {origin}: {e}")))?;
                let keys = Keys::of(&batch, int_key, &origin)?;
                let mut from = 0;
                while let Some(e) = entries.get(at.len()) {
                    let p = lower_bound_from(keys, from, &e.key, false);
                    if p == keys.len() {
                        // Past this batch: its place is in a later one (or the end).
                        break;
                    }
                    at.push(rows + p as u64);
                    hit.push(keys.cmp_at(p, &e.key) == Ordering::Equal);
                    from = p;
                }
                rows += keys.len() as u64;
            }
        }
        at.resize(entries.len(), rows);
        hit.resize(entries.len(), false);
        Ok(Self { rows, at, hit })
    }

    /// Memory held (bytes).
    pub(crate) fn bytes(&self) -> u64 {
        (self.at.len() * 9) as u64
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
