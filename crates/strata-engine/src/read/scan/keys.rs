//! The deep level's key column as a scan searches it: a typed view of the key column
//! (`_key` bytes, or an Int64 key read as its sort order), lower bounds found by galloping
//! from the last position, and the positions of an overlay's keys in the deep level
//! ([`Positions`]), computed once so that later scans splice by row number.

use super::*;

/// The keys of a batch of the deep level (its first column): the encoded `_key`, or, for a
/// table whose key is one `BIGINT`, the typed key column (8 bytes a row to decode instead of
/// a byte array; its order is the encoded order).
#[derive(Clone, Copy)]
pub(super) enum Keys<'a> {
    Encoded(&'a BinaryArray),
    Int(&'a Int64Array),
}

/// Whether scans read `table`'s keys from the typed `BIGINT` key column (its key is one
/// `BIGINT`) rather than the encoded `_key`, and that column's place in a level's files.
pub(super) fn key_column(table: &TableSchema) -> (bool, usize) {
    let int_key = table.key_types == [DataType::Int64];
    (int_key, if int_key { 1 } else { 0 })
}

/// The memcomparable encoding of a `BIGINT` key (see `keycodec`).
pub(super) fn encode_int(v: i64) -> [u8; 8] {
    ((v as u64) ^ 0x8000_0000_0000_0000).to_be_bytes()
}

impl<'a> Keys<'a> {
    pub(super) fn of(batch: &'a RecordBatch, int: bool, origin: &str) -> Result<Self> {
        let c = batch.column(0);
        let keys = if int {
            c.as_primitive_opt::<Int64Type>().map(Keys::Int)
        } else {
            c.as_binary_opt::<i32>().map(Keys::Encoded)
        };
        keys.ok_or_else(|| Error::Corrupt(format!("parquet {origin}: unexpected key column type")))
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Keys::Encoded(k) => k.len(),
            Keys::Int(k) => k.len(),
        }
    }

    /// Row `i`'s key compared with an encoded key.
    pub(super) fn cmp_at(&self, i: usize, bound: &[u8]) -> Ordering {
        match self {
            Keys::Encoded(k) => k.value(i).cmp(bound),
            Keys::Int(k) => encode_int(k.value(i)).as_slice().cmp(bound),
        }
    }

    /// Row `i`'s encoded key.
    pub(super) fn key(&self, i: usize) -> Bytes {
        match self {
            Keys::Encoded(k) => Bytes::copy_from_slice(k.value(i)),
            Keys::Int(k) => Bytes::copy_from_slice(&encode_int(k.value(i))),
        }
    }

    pub(super) fn same(&self, i: usize, other: &Keys, j: usize) -> bool {
        match (self, other) {
            (Keys::Encoded(a), Keys::Encoded(b)) => a.value(i) == b.value(j),
            (Keys::Int(a), Keys::Int(b)) => a.value(i) == b.value(j),
            _ => false,
        }
    }

    pub(super) fn strictly_increasing(&self) -> bool {
        match self {
            Keys::Encoded(k) => (1..k.len()).all(|i| k.value(i - 1) < k.value(i)),
            Keys::Int(k) => k.values().windows(2).all(|w| w[0] < w[1]),
        }
    }
}

/// The first row of `keys` whose key is at least (`strict`: greater than) `bound`.
pub(super) fn lower_bound(keys: Keys, bound: &[u8], strict: bool) -> usize {
    lower_bound_from(keys, 0, bound, strict)
}

/// The `BIGINT` whose encoding is `bound`, when it is one.
pub(super) fn decode_int(bound: &[u8]) -> Option<i64> {
    let b: [u8; 8] = bound.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ 0x8000_0000_0000_0000) as i64)
}

/// The first index of `items` where `below` turns false (`below` must be true then false,
/// like `partition_point`'s predicate), searching outward from the start: O(log d) for an
/// answer d items in. A scan's searches mostly land a short way past the last one.
pub(super) fn gallop<T>(items: &[T], below: impl Fn(&T) -> bool) -> usize {
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
pub(super) fn lower_bound_from(keys: Keys, from: usize, bound: &[u8], strict: bool) -> usize {
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

/// How many of rows `from..to` of a file (sorted, distinct keys) have keys below `bound`.
pub(super) fn keys_below(
    f: &ParquetSource,
    from: u64,
    to: u64,
    bound: &[u8],
    table: &TableSchema,
    handle: &tokio::runtime::Handle,
) -> Result<u64> {
    let origin = f.path.to_string();
    let (int_key, key_column) = key_column(table);
    // Through the decoded-column cache: a bound placed in this row group again (every
    // scan with a bound inside it) searches the kept keys instead of decoding them.
    let rows = usize::try_from(to.saturating_sub(from)).unwrap_or(usize::MAX);
    let mut stream =
        strata_common::exec::wait(handle, f.rows_cached(from, to, &[key_column], rows))?;
    let mut below = 0u64;
    while let Some(batch) = strata_common::exec::wait(handle, stream.next()) {
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
            let mut stream =
                strata_common::exec::wait(handle, f.stream(&[], None, Some(&[key_column]), 8192))?;
            while let Some(batch) = strata_common::exec::wait(handle, stream.next()) {
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
