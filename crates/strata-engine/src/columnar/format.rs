//! The Parquet file format of one column group (LASER §4).
//!
//! Columns, in order: `_key` (the memcomparable primary key, so statistics, the page index
//! and the Bloom filter order and test keys exactly as the engine does), the key columns
//! (typed, for analytical readers), `_seq`, `_kind` (1 put, 2 partial, 3 delete),
//! `_present` (a bitmap over the group's columns, set only for partial rows) and the group's
//! columns. Rows are sorted by (`_key` ascending, `_seq` descending).
//!
//! A version is stored in every group of a level, also when a partial row carries none of
//! the group's columns (an *existence marker*: `_present` all zero). So every group sees
//! every version's sequence number and kind, and a read of any subset of groups decides
//! whether a row exists (a partial row written after a delete re-creates the row).
//!
//! The footer's key-value metadata records [`DISTINCT_KEYS`]: whether every key has one
//! version in the file. With it, and statistics showing only puts no newer than a read, a
//! scan can skip `_seq`, `_kind` and `_present` altogether.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, RecordBatch, UInt8Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt8Type, UInt64Type};
use bytes::Bytes;

use crate::entry::{Entry, EntryKind};
use crate::error::{Error, Result};
use crate::keycodec;
use crate::row::{RowCodec, RowValues};
use crate::value::{Value, build_array, value_at};

/// Name of the encoded-key column.
pub const KEY_COLUMN: &str = "_key";
/// Name of the sequence-number column.
pub const SEQ_COLUMN: &str = "_seq";
/// Name of the entry-kind column.
pub const KIND_COLUMN: &str = "_kind";
/// Name of the present-columns bitmap.
pub const PRESENT_COLUMN: &str = "_present";
/// Parquet key-value metadata: `true` when no key has more than one version in the file.
pub const DISTINCT_KEYS: &str = "strata.distinct_keys";

/// Whether a version of `kind` whose `_present` bitmap is `bits` carries the group's column
/// at `pos`; None for a partial version without a bitmap (corrupt).
pub(crate) fn carries(kind: EntryKind, bits: Option<&[u8]>, pos: usize) -> Option<bool> {
    match (kind, bits) {
        (EntryKind::Partial, Some(b)) => {
            Some(b.get(pos / 8).is_some_and(|x| x & (1 << (pos % 8)) != 0))
        }
        (EntryKind::Partial, None) => None,
        _ => Some(true),
    }
}

/// How one column group is stored and how its versions relate to whole rows.
#[derive(Debug, Clone)]
pub struct GroupFormat {
    /// Positions of the group's columns among the table's non-key columns (codec order).
    pub columns: Vec<usize>,
    /// Codec of the group's columns.
    pub codec: RowCodec,
    /// The Parquet/Arrow schema of the group's files.
    pub schema: SchemaRef,
    key_types: Vec<DataType>,
    value_types: Vec<DataType>,
    full_width: usize,
}

/// What a scan reads of one group's files.
#[derive(Debug, Clone)]
pub struct ScanColumns {
    /// The group's columns read (positions in the group, ascending); the others are not.
    pub read: Vec<usize>,
    /// The group holds every column the scan needs, so a whole-row put decides the row
    /// (see [`GroupFormat::scan_entries`]).
    pub puts_decide: bool,
}

impl GroupFormat {
    /// How many typed key columns follow `_key`.
    pub fn key_columns(&self) -> usize {
        self.key_types.len()
    }

    /// The format of a group made of the non-key columns at `columns` (codec positions) of
    /// a table whose Arrow schema is `table`, with key columns at `key_indices` and value
    /// columns (in codec order) at `value_indices`.
    pub fn new(
        table: &Schema,
        key_indices: &[usize],
        value_indices: &[usize],
        columns: Vec<usize>,
    ) -> Self {
        let mut fields = vec![Field::new(KEY_COLUMN, DataType::Binary, false)];
        let mut key_types = Vec::with_capacity(key_indices.len());
        for i in key_indices {
            let f = table.field(*i);
            fields.push(Field::new(f.name(), f.data_type().clone(), false));
            key_types.push(f.data_type().clone());
        }
        fields.push(Field::new(SEQ_COLUMN, DataType::UInt64, false));
        fields.push(Field::new(KIND_COLUMN, DataType::UInt8, false));
        fields.push(Field::new(PRESENT_COLUMN, DataType::Binary, true));
        let mut value_types = Vec::with_capacity(columns.len());
        for c in &columns {
            let f = table.field(value_indices[*c]);
            fields.push(Field::new(f.name(), f.data_type().clone(), true));
            value_types.push(f.data_type().clone());
        }
        Self {
            codec: RowCodec::new(value_types.clone()),
            columns,
            schema: Arc::new(Schema::new(fields)),
            key_types,
            value_types,
            full_width: value_indices.len(),
        }
    }

    /// Index of the first group column in the file schema.
    fn first_value_column(&self) -> usize {
        4 + self.key_types.len()
    }

    /// Projects a version from a wider format (`from_columns` = the codec positions that
    /// format covers, decoded with `from`) into this group. Whole rows stay whole rows (they
    /// cover every column of the group); partial rows keep the columns they carry, possibly
    /// none (an existence marker).
    pub fn project_from(
        &self,
        from: &RowCodec,
        from_columns: Option<&[usize]>,
        e: &Entry,
    ) -> Result<Entry> {
        if e.kind == EntryKind::Delete {
            return Ok(Entry {
                value: Bytes::new(),
                ..e.clone()
            });
        }
        let values = from.decode(&e.value)?;
        let mut out: RowValues = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            let pos = match from_columns {
                None => Some(*c),
                Some(cols) => cols.iter().position(|x| x == c),
            };
            let pos = pos
                .ok_or_else(|| Error::Internal(format!("column {c} is not in the source group")))?;
            out.push(values.get(pos).cloned().flatten());
        }
        Ok(Entry {
            key: e.key.clone(),
            seq: e.seq,
            kind: e.kind,
            value: Bytes::from(self.codec.encode(&out)?),
        })
    }

    /// Widens a version of this group to the table's full width for readers: columns outside
    /// the group are "not carried", so a whole row of the group becomes a partial row.
    pub fn widen(&self, full: &RowCodec, e: &Entry) -> Result<Entry> {
        if e.kind == EntryKind::Delete {
            return Ok(e.clone());
        }
        let values = self.codec.decode(&e.value)?;
        let mut out: RowValues = vec![None; self.full_width];
        for (v, c) in values.into_iter().zip(&self.columns) {
            out[*c] = v;
        }
        Ok(Entry {
            key: e.key.clone(),
            seq: e.seq,
            kind: EntryKind::Partial,
            value: Bytes::from(full.encode(&out)?),
        })
    }

    /// Builds a record batch of group-local versions.
    pub fn to_batch(&self, entries: &[Entry]) -> Result<RecordBatch> {
        let n = entries.len();
        let mut keys = BinaryBuilder::with_capacity(n, n * 16);
        let mut key_values: Vec<Vec<Value>> = vec![Vec::with_capacity(n); self.key_types.len()];
        let mut seqs = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut present = BinaryBuilder::new();
        let mut values: Vec<Vec<Value>> = vec![Vec::with_capacity(n); self.columns.len()];
        for e in entries {
            keys.append_value(&e.key);
            for (i, v) in keycodec::decode_key(&self.key_types, &e.key)?
                .into_iter()
                .enumerate()
            {
                key_values[i].push(v);
            }
            seqs.push(e.seq);
            kinds.push(e.kind as u8);
            let row = match e.kind {
                EntryKind::Delete => vec![None; self.columns.len()],
                _ => self.codec.decode(&e.value)?,
            };
            if e.kind == EntryKind::Partial {
                let mut bits = vec![0u8; self.columns.len().div_ceil(8)];
                for (i, v) in row.iter().enumerate() {
                    if v.is_some() {
                        bits[i / 8] |= 1 << (i % 8);
                    }
                }
                present.append_value(&bits);
            } else {
                present.append_null();
            }
            for (i, v) in row.into_iter().enumerate() {
                values[i].push(v.unwrap_or(Value::Null));
            }
        }
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(keys.finish())];
        for (t, vals) in self.key_types.iter().zip(&key_values) {
            arrays.push(build_array(t, vals)?);
        }
        arrays.push(Arc::new(UInt64Array::from(seqs)));
        arrays.push(Arc::new(UInt8Array::from(kinds)));
        arrays.push(Arc::new(present.finish()));
        for (t, vals) in self.value_types.iter().zip(&values) {
            arrays.push(build_array(t, vals)?);
        }
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| Error::Internal(format!("building a column-group batch: {e}")))
    }

    /// Reads versions for a scan from a batch holding `_key`, `_seq`, `_kind`, `_present`
    /// and the group columns `scan.read` (positions in the group, ascending), in file order,
    /// keeping rows whose key is in `[start, end)`. Versions come out at the table's full
    /// width (`full`) in one encoding step. With `scan.puts_decide` (this group holds every
    /// column the scan needs) a whole-row put keeps its kind: it decides the row for those
    /// columns, so older versions need not be consulted. Otherwise a put is a partial row
    /// of this group's columns, as [`Self::widen`] makes it: a group's newer version (a
    /// partial update folded into a whole one by a job) must not hide another group's
    /// older version of the row, which may sit in another level after a CG-local
    /// compaction.
    pub fn scan_entries(
        &self,
        full: &RowCodec,
        scan: &ScanColumns,
        batch: &RecordBatch,
        origin: &str,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<Vec<Entry>> {
        let (read, puts_decide) = (scan.read.as_slice(), scan.puts_decide);
        let bad = |what: &str| Error::Corrupt(format!("parquet {origin}: {what}"));
        if batch.num_columns() != 4 + read.len() {
            return Err(bad("unexpected projection"));
        }
        let keys: &BinaryArray = batch
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("_key is not binary"))?;
        let seqs = batch
            .column(1)
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| bad("_seq is not uint64"))?;
        let kinds = batch
            .column(2)
            .as_primitive_opt::<UInt8Type>()
            .ok_or_else(|| bad("_kind is not uint8"))?;
        let present: &BinaryArray = batch
            .column(3)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("_present is not binary"))?;
        if keys.null_count() + seqs.null_count() + kinds.null_count() > 0 {
            return Err(bad("null in a required column"));
        }
        let mut out = Vec::with_capacity(batch.num_rows());
        let mut vals: RowValues = vec![None; self.full_width];
        for row in 0..batch.num_rows() {
            let key = keys.value(row);
            if key < start || end.is_some_and(|e| key >= e) {
                continue;
            }
            let kind = EntryKind::from_u8(kinds.value(row))
                .map_err(|_| bad(&format!("unknown kind {}", kinds.value(row))))?;
            let value = if kind == EntryKind::Delete {
                Bytes::new()
            } else {
                let bits = (!present.is_null(row)).then(|| present.value(row));
                for (j, &pos) in read.iter().enumerate() {
                    let carried = carries(kind, bits, pos)
                        .ok_or_else(|| bad("partial row without _present"))?;
                    vals[self.columns[pos]] = if carried {
                        Some(value_at(batch.column(4 + j).as_ref(), row)?)
                    } else {
                        None
                    };
                }
                Bytes::from(full.encode(&vals)?)
            };
            out.push(Entry {
                key: Bytes::copy_from_slice(key),
                seq: seqs.value(row),
                kind: if kind == EntryKind::Put && !puts_decide {
                    EntryKind::Partial
                } else {
                    kind
                },
                value,
            });
        }
        Ok(out)
    }

    /// Reads group-local versions back from a batch of this format, keeping rows whose key
    /// is in `[start, end)`. `origin` names the object for error messages.
    pub fn from_batch(
        &self,
        batch: &RecordBatch,
        origin: &str,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<Vec<Entry>> {
        self.from_rows(batch, 0..batch.num_rows(), origin, start, end)
    }

    /// [`Self::from_batch`] over the rows `rows` of `batch` only (no sliced copy of its
    /// columns: a point lookup reads a few rows of a cached decoded page).
    pub fn from_rows(
        &self,
        batch: &RecordBatch,
        rows: std::ops::Range<usize>,
        origin: &str,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<Vec<Entry>> {
        let bad = |what: &str| Error::Corrupt(format!("parquet {origin}: {what}"));
        if rows.end > batch.num_rows() || rows.start > rows.end {
            return Err(bad(&format!(
                "rows {rows:?} of a batch of {}",
                batch.num_rows()
            )));
        }
        if batch.num_columns() != self.schema.fields().len() {
            return Err(bad(&format!(
                "{} columns, the table's group has {}",
                batch.num_columns(),
                self.schema.fields().len()
            )));
        }
        let keys: &BinaryArray = batch
            .column(0)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("_key is not binary"))?;
        let k = self.key_types.len();
        let seqs = batch
            .column(1 + k)
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| bad("_seq is not uint64"))?;
        let kinds = batch
            .column(2 + k)
            .as_primitive_opt::<UInt8Type>()
            .ok_or_else(|| bad("_kind is not uint8"))?;
        let present: &BinaryArray = batch
            .column(3 + k)
            .as_binary_opt::<i32>()
            .ok_or_else(|| bad("_present is not binary"))?;
        let first = self.first_value_column();
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if keys.is_null(row) || seqs.is_null(row) || kinds.is_null(row) {
                return Err(bad("null in a required column"));
            }
            let key = keys.value(row);
            if key < start || end.is_some_and(|e| key >= e) {
                continue;
            }
            let kind = EntryKind::from_u8(kinds.value(row))
                .map_err(|_| bad(&format!("unknown kind {}", kinds.value(row))))?;
            let value = match kind {
                EntryKind::Delete => Bytes::new(),
                _ => {
                    let bits = (!present.is_null(row)).then(|| present.value(row));
                    let mut vals: RowValues = Vec::with_capacity(self.columns.len());
                    for i in 0..self.columns.len() {
                        let carried = carries(kind, bits, i)
                            .ok_or_else(|| bad("partial row without _present"))?;
                        vals.push(if carried {
                            Some(value_at(batch.column(first + i).as_ref(), row)?)
                        } else {
                            None
                        });
                    }
                    Bytes::from(self.codec.encode(&vals)?)
                }
            };
            out.push(Entry {
                key: Bytes::copy_from_slice(key),
                seq: seqs.value(row),
                kind,
                value,
            });
        }
        Ok(out)
    }
}
