//! The deep level as a scan reads it: one cursor per needed column group over the level's
//! files (row groups pruned by key, pages through the caches), lined up into chunks of
//! the same rows; and [`DeepSpec`], which run a scan reads column-wise and where its key
//! range starts and ends in it.

use super::*;
use arrow::buffer::BooleanBuffer;
use arrow::compute::FilterBuilder;

/// One column group of the deep level, read file by file, cut to the key range.
pub(super) struct GroupCursor {
    pub(super) handle: tokio::runtime::Handle,
    pub(super) files: VecDeque<ParquetSource>,
    pub(super) stream: Option<(String, BatchStream)>,
    /// File columns read (ascending).
    pub(super) columns: Vec<usize>,
    /// The Arrow type each column read must have (the group's format): a file whose
    /// columns differ is corrupt, never a panic in the typed code below.
    pub(super) types: Vec<arrow::datatypes::DataType>,
    /// The first column read is the typed `BIGINT` key rather than `_key`.
    pub(super) int_key: bool,
    pub(super) front: Option<RecordBatch>,
    pub(super) start: Vec<u8>,
    pub(super) end: Option<Vec<u8>>,
    pub(super) done: bool,
    /// Read by row position instead of by key: rows `from..to` of the level (counted over
    /// its files in order), and the level row the next file starts at.
    pub(super) rows: Option<(u64, u64)>,
    pub(super) file_start: u64,
    /// Rows per decoded batch.
    pub(super) batch: usize,
}

/// Checks that a batch read from a columnar file has the columns its format gives them
/// (count and Arrow types), so a file written otherwise (corrupt, or not Strata's) is an
/// error naming it rather than a panic in the typed code that reads the batch.
pub(super) fn check_types(
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
    pub(super) fn fill(&mut self) -> Result<bool> {
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
                    let b = a + strata_common::exec::wait(&self.handle, f.num_rows())?;
                    self.file_start = b;
                    if a >= to {
                        self.done = true;
                        return Ok(false);
                    }
                    if b > from {
                        let s = strata_common::exec::wait(
                            &self.handle,
                            f.rows_cached(
                                from.max(a) - a,
                                to.min(b) - a,
                                &self.columns,
                                self.batch,
                            ),
                        )?;
                        self.stream = Some((f.path.to_string(), s));
                    }
                    continue;
                }
                let Some((origin, stream)) = self.stream.as_mut() else {
                    continue;
                };
                match strata_common::exec::wait(&self.handle, stream.next()) {
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
                let s = strata_common::exec::wait(
                    &self.handle,
                    f.keyed_cached(&self.start, self.end.as_deref(), &self.columns, self.batch),
                )?;
                self.stream = Some((f.path.to_string(), s));
            }
            let Some((origin, stream)) = self.stream.as_mut() else {
                continue;
            };
            let Some(batch) = strata_common::exec::wait(&self.handle, stream.next()) else {
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

    pub(super) fn take(&mut self, n: usize) -> RecordBatch {
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
pub(super) struct ColumnSource {
    pub(super) group: usize,
    pub(super) column: usize,
}

/// Batch columns of a group's version columns.
#[derive(Clone, Copy)]
pub(super) struct MetaColumns {
    pub(super) seq: usize,
    pub(super) kind: usize,
    pub(super) present: usize,
}

/// The deep level's groups a scan reads, lined up row by row.
pub(super) struct Deep {
    pub(super) cursors: Vec<GroupCursor>,
    pub(super) formats: Vec<Arc<GroupFormat>>,
    /// Per group: (position in the group's columns, batch column) of each value column read.
    pub(super) values: Vec<Vec<(usize, usize)>>,
    /// Per group: batch columns of `_seq`, `_kind` and `_present`; None when the level
    /// holds only whole-row puts visible at the read sequence number, one per key (the
    /// version columns are not read; every chunk is clean).
    pub(super) meta: Option<Vec<MetaColumns>>,
    pub(super) int_key: bool,
    pub(super) outputs: Vec<ColumnSource>,
    pub(super) origin: String,
    /// Chunks (or their rests) put back to be taken again, in key order: each put back
    /// goes before the others, its rows preceding theirs.
    pub(super) pushback: VecDeque<Chunk>,
    /// Rows `from..to` of the level are read by position, without the key column unless
    /// it is projected (see [`Positions`]).
    pub(super) rows: Option<(u64, u64)>,
}

/// A chunk of the deep level: the same rows of every group read.
pub(super) struct Chunk {
    pub(super) groups: Vec<RecordBatch>,
    pub(super) int_key: bool,
}

impl Chunk {
    pub(super) fn rows(&self) -> usize {
        self.groups[0].num_rows()
    }

    pub(super) fn keys(&self) -> Keys<'_> {
        let c = self.groups[0].column(0);
        if self.int_key {
            Keys::Int(c.as_primitive::<Int64Type>())
        } else {
            Keys::Encoded(c.as_binary::<i32>())
        }
    }

    pub(super) fn slice(&self, offset: usize, len: usize) -> Chunk {
        Chunk {
            groups: self.groups.iter().map(|b| b.slice(offset, len)).collect(),
            int_key: self.int_key,
        }
    }
}

impl Deep {
    /// The next chunk of at most `max` rows, or None at the end of the range.
    pub(super) fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if let Some(c) = self.pushback.pop_front() {
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

    pub(super) fn misaligned(&self, what: &str) -> Error {
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

    /// A chunk's kinds and sequence numbers (the same in every group), None for a level
    /// without version columns.
    fn kinds_and_seqs<'c>(&self, chunk: &'c Chunk) -> Option<(&'c [u8], &'c [u64])> {
        let meta = self.meta.as_ref()?;
        let b = &chunk.groups[0];
        Some((
            b.column(meta[0].kind).as_primitive::<UInt8Type>().values(),
            b.column(meta[0].seq).as_primitive::<UInt64Type>().values(),
        ))
    }

    /// Whether every row is a whole-row put visible at `seq` with a key of its own.
    pub(super) fn clean(&self, chunk: &Chunk, seq: u64) -> bool {
        let Some((kinds, seqs)) = self.kinds_and_seqs(chunk) else {
            return true;
        };
        if kinds.iter().any(|k| *k != EntryKind::Put as u8) || seqs.iter().any(|s| *s > seq) {
            return false;
        }
        chunk.keys().strictly_increasing()
    }

    /// Where the chunk's last key's versions start, when they may go on in the next
    /// chunk and matter there: no version visible at `seq` in this chunk, or only partial
    /// ones. None for a level without versions, or when the last key is decided here.
    pub(super) fn open_tail(&self, chunk: &Chunk, seq: u64) -> Option<usize> {
        let (kinds, seqs) = self.kinds_and_seqs(chunk)?;
        let keys = chunk.keys();
        let n = chunk.rows();
        let mut i = n - 1;
        while i > 0 && keys.same(i - 1, &keys, n - 1) {
            i -= 1;
        }
        let decided = (i..n).any(|r| seqs[r] <= seq && kinds[r] != EntryKind::Partial as u8);
        (!decided).then_some(i)
    }

    /// A chunk that is not clean, made clean column-wise: of each key, the newest version
    /// visible at `seq` when it is a whole-row put (a delete drops the key), every other
    /// row left out. Versions of one key are consecutive, newest first, so this is one pass
    /// over the keys and sequence numbers and a filter of each group's batch. A key whose
    /// visible version is partial is left out too, its visible versions given back (in
    /// group order, as [`Deep::versions`] gives them) to be resolved row by row and spliced
    /// in like an upper key's. None when the chunk's last key has no visible version in it or only
    /// partial ones (older versions may follow in the next chunk): the chunk is then merged
    /// row by row.
    pub(super) fn visible(
        &self,
        table: &TableSchema,
        chunk: &Chunk,
        seq: u64,
    ) -> Result<Option<(Chunk, Vec<Entry>)>> {
        let (Some(meta), Some((kinds, seqs))) = (self.meta.as_ref(), self.kinds_and_seqs(chunk))
        else {
            return Ok(None);
        };
        let n = chunk.rows();
        let put = EntryKind::Put as u8;
        // The common chunk (a read of the latest state, no partial row): a row is kept when
        // it is a put heading its key's versions, which a bitmap built word by word says.
        let simple = seqs.iter().max().is_some_and(|m| *m <= seq)
            && !kinds.contains(&(EntryKind::Partial as u8));
        let selected = match (chunk.keys(), simple) {
            (Keys::Int(k), true) => {
                let k = k.values();
                Some((
                    BooleanBuffer::collect_bool(n, |i| {
                        kinds[i] == put && (i == 0 || k[i] != k[i - 1])
                    }),
                    Vec::new(),
                ))
            }
            (Keys::Encoded(k), true) => Some((
                BooleanBuffer::collect_bool(n, |i| {
                    kinds[i] == put && (i == 0 || k.value(i) != k.value(i - 1))
                }),
                Vec::new(),
            )),
            (Keys::Int(k), false) => {
                let k = k.values();
                select_visible(n, |a, b| k[a] == k[b], kinds, seqs, seq)
            }
            (Keys::Encoded(k), false) => {
                select_visible(n, |a, b| k.value(a) == k.value(b), kinds, seqs, seq)
            }
        };
        let Some((keep, partial)) = selected else {
            return Ok(None);
        };
        let mut versions = Vec::new();
        if !partial.is_empty() {
            self.versions(table, chunk, partial.into_iter(), &mut versions)?;
        }
        let kept = keep.count_set_bits();
        let filter = FilterBuilder::new(&BooleanArray::new(keep, None))
            .optimize()
            .build();
        let mut groups = Vec::with_capacity(chunk.groups.len());
        for (g, batch) in chunk.groups.iter().enumerate() {
            let m = meta[g];
            let mut columns = Vec::with_capacity(batch.num_columns());
            for (c, column) in batch.columns().iter().enumerate() {
                // Every row kept is a whole-row put: its kind is known and its columns
                // are all carried, so those two are not copied.
                columns.push(if c == m.kind {
                    Arc::new(arrow::array::UInt8Array::from_value(
                        EntryKind::Put as u8,
                        kept,
                    )) as ArrayRef
                } else if c == m.present {
                    arrow::array::new_null_array(column.data_type(), kept)
                } else {
                    filter.filter(column).map_err(|e| {
                        Error::Internal(format!("selecting a chunk's visible rows: {e}"))
                    })?
                });
            }
            groups.push(
                RecordBatch::try_new_with_options(
                    batch.schema(),
                    columns,
                    &RecordBatchOptions::new().with_row_count(Some(kept)),
                )
                .map_err(|e| Error::Internal(format!("selecting a chunk's visible rows: {e}")))?,
            );
        }
        Ok(Some((
            Chunk {
                groups,
                int_key: chunk.int_key,
            },
            versions,
        )))
    }

    /// The versions of rows `rows` of a chunk, widened to the table's width (columns not
    /// read are "not carried"), in (key, sequence descending) order per group.
    pub(super) fn versions(
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
    pub(super) fn columns(&self, chunk: &Chunk) -> Vec<ArrayRef> {
        self.outputs
            .iter()
            .map(|s| chunk.groups[s.group].column(s.column).clone())
            .collect()
    }
}

/// [`Deep::visible`]'s pass over a chunk's keys (`same(a, b)`: rows a and b hold the same
/// key), kinds and sequence numbers: the rows kept, and the rows of keys whose visible
/// version is partial (from it down to a whole row or a delete). None when the last key
/// is open (no visible version, or only partial ones).
fn select_visible(
    n: usize,
    same: impl Fn(usize, usize) -> bool,
    kinds: &[u8],
    seqs: &[u64],
    seq: u64,
) -> Option<(BooleanBuffer, Vec<usize>)> {
    let (put, delete, part) = (
        EntryKind::Put as u8,
        EntryKind::Delete as u8,
        EntryKind::Partial as u8,
    );
    let mut keep = BooleanBufferBuilder::new(n);
    let mut partial: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && same(j, i) {
            j += 1;
        }
        let chosen = (i..j).find(|&r| seqs[r] <= seq);
        let mut kept = None;
        match chosen {
            Some(r) if kinds[r] == put => kept = Some(r),
            Some(r) if kinds[r] == delete => {}
            Some(r) => {
                // Partial: its older visible versions down to a whole row or a delete.
                let base = (r..j).find(|&o| kinds[o] != part);
                if base.is_none() && j == n {
                    return None;
                }
                partial.extend(r..base.map_or(j, |o| o + 1));
            }
            None if j == n => return None,
            // Every version newer than the read: the key did not exist then.
            None => {}
        }
        for r in i..j {
            keep.append(kept == Some(r));
        }
        i = j;
    }
    Some((keep.finish(), partial))
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
    pub(super) fn build(
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
                if !strata_common::exec::wait(
                    &self.handle,
                    f.only_visible_puts(&self.start, self.end.as_deref(), read_seq),
                )? {
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
            pushback: VecDeque::new(),
            rows,
        })
    }
}

/// The rows of a level (files in key order, one row per key) with keys in `[start, end)`,
/// as a row range: bounds between row groups (by their `_key` statistics: a whole level,
/// or a scan split at row-group starts) from the metadata alone, a bound inside a row
/// group by reading that row group's keys. None when the files do not hold `total` rows
/// or a row group has no statistics.
pub(super) fn row_bounds(
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
        for (n, span) in strata_common::exec::wait(handle, f.row_group_spans())? {
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
