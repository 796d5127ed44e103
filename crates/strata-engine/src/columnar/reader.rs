//! Reading column-group Parquet files: metadata from the cached tail, point lookups through
//! the Bloom filter and page index, and ordered scans, all over the object-store seam with
//! the `parquet` crate's async reader.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, RecordBatch};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream};
use parquet::bloom_filter::Sbbf;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::statistics::Statistics;
use strata_manifest::ParquetFileInfo;
use strata_objstore::StoreRef;

use super::format::{DISTINCT_KEYS, GroupFormat, KIND_COLUMN, SEQ_COLUMN};
use crate::entry::{Entry, EntryKind};
use crate::error::{Error, Result};
use crate::iter::EntryIter;
use crate::store::cache::BlockCache;

/// What a reader needs of a file before reading data: parsed metadata and the key Bloom
/// filter.
pub struct FileMeta {
    /// Arrow reader metadata (with the page index).
    pub meta: ArrowReaderMetadata,
    /// Bloom filter of `_key`, per row group.
    pub blooms: Vec<Option<Sbbf>>,
}

/// The tail bytes of a file, served at their file offsets.
struct Tail {
    offset: u64,
    size: u64,
    bytes: Bytes,
}

impl Length for Tail {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for Tail {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self
            .get_bytes(start, (self.size - start) as usize)?
            .reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if start < self.offset || start + length as u64 > self.size {
            return Err(parquet::errors::ParquetError::General(format!(
                "range {start}+{length} outside the file tail {}..{}",
                self.offset, self.size
            )));
        }
        let lo = (start - self.offset) as usize;
        Ok(self.bytes.slice(lo..lo + length))
    }
}

/// Open files' metadata and the decoded pages point lookups read, shared by a process.
///
/// Both are bounded: metadata by file count, pages by the bytes of their decoded Arrow
/// arrays (`page_cache_bytes`). Files never change once written (names are never reused),
/// so nothing is ever invalidated; entries of deleted files age out.
pub struct MetaCache {
    files: quick_cache::sync::Cache<String, Arc<FileMeta>>,
    pages: Option<quick_cache::sync::Cache<PageKey, RecordBatch, BatchWeighter>>,
    page_hits: std::sync::atomic::AtomicU64,
    page_misses: std::sync::atomic::AtomicU64,
    /// Whole row groups of single columns, decoded, that scans read by row position.
    columns: Option<quick_cache::sync::Cache<ColumnKey, ArrayRef, ArrayWeighter>>,
    column_hits: std::sync::atomic::AtomicU64,
    column_misses: std::sync::atomic::AtomicU64,
    /// Row groups that a point read has read a full span of (file, row group), remembered
    /// only where there is a decoded-column cache: the next cold span read of the row
    /// group takes its dictionary-heavy columns whole ([`dictionary_heavy`]).
    spans_read: Option<quick_cache::sync::Cache<(String, usize), ()>>,
    /// Row groups being decoded into `columns`, by file and row group: a scan that misses
    /// waits for the one decoding it rather than decoding it again (cold scans of one key
    /// range arrive together).
    decoding: parking_lot::Mutex<std::collections::HashMap<(String, usize), RowGroupGate>>,
}

/// A decoded column chunk: file name, row group, column (a root column of the file).
type ColumnKey = (String, usize, usize);

/// Weighs a cached column chunk by the memory of its array.
#[derive(Clone)]
struct ArrayWeighter;

impl quick_cache::Weighter<ColumnKey, ArrayRef> for ArrayWeighter {
    fn weight(&self, key: &ColumnKey, array: &ArrayRef) -> u64 {
        (array.get_array_memory_size() + key.0.len() + 64) as u64
    }
}

/// Held while a row group is decoded into the decoded-column cache, with the number of
/// scans holding or waiting for it (counted under the map's lock, so the last one out
/// removes the entry whatever order the others finish in).
type RowGroupGate = (Arc<tokio::sync::Mutex<()>>, usize);

/// A scan's place at a row group's gate ([`MetaCache`]'s `decoding`), taken before it
/// waits: dropping it (done, failed or cancelled) gives the place back, and the last one
/// removes the gate.
struct DecodingRowGroup<'a> {
    metas: &'a MetaCache,
    key: (String, usize),
}

impl<'a> DecodingRowGroup<'a> {
    /// Joins the gate of `key` (making it if none): its mutex and the place.
    fn join(metas: &'a MetaCache, key: (String, usize)) -> (Arc<tokio::sync::Mutex<()>>, Self) {
        let mut map = metas.decoding.lock();
        let (gate, users) = map.entry(key.clone()).or_default();
        *users += 1;
        (gate.clone(), Self { metas, key })
    }
}

impl Drop for DecodingRowGroup<'_> {
    fn drop(&mut self) {
        let mut map = self.metas.decoding.lock();
        if let Some((_, users)) = map.get_mut(&self.key) {
            *users -= 1;
            if *users == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Decoded bytes of a typical cached column chunk (a 128K-row row group of 4-byte values).
const COLUMN_BYTES_TYPICAL: u64 = 512 << 10;

/// Batches of a file's rows, as a scan reads them.
pub type BatchStream =
    futures::stream::BoxStream<'static, std::result::Result<RecordBatch, ParquetError>>;

/// A decoded page span: file name, row group, first row of the span in the row group, and
/// whether it holds the key column only.
type PageKey = (String, usize, usize, bool);

/// A [`PageKey`] borrowing its file name, to look one up without a copy of the name per
/// read (its hash is the tuple's: the fields in order).
#[derive(Hash)]
struct PageKeyRef<'a>(&'a str, usize, usize, bool);

impl quick_cache::Equivalent<PageKey> for PageKeyRef<'_> {
    fn equivalent(&self, k: &PageKey) -> bool {
        self.0 == k.0 && self.1 == k.1 && self.2 == k.2 && self.3 == k.3
    }
}

/// Weighs a cached batch by the memory of its arrays.
#[derive(Clone)]
struct BatchWeighter;

impl quick_cache::Weighter<PageKey, RecordBatch> for BatchWeighter {
    fn weight(&self, key: &PageKey, batch: &RecordBatch) -> u64 {
        (batch.get_array_memory_size() + key.0.len() + 64) as u64
    }
}

const META_CACHE_FILES: usize = 4096;

/// Row groups whose first cold span read [`MetaCache`] remembers (about 80 bytes each).
const SPANS_READ_ROW_GROUPS: usize = 1 << 16;

/// Decoded bytes of a typical cached page span, for sizing the cache's table.
const PAGE_BYTES_TYPICAL: u64 = 256 << 10;

impl Default for MetaCache {
    /// Metadata only: no page cache (compaction workers read each page once).
    fn default() -> Self {
        Self::new(0)
    }
}

impl MetaCache {
    /// A cache keeping up to `page_cache_bytes` of decoded pages for point lookups (0: none).
    pub fn new(page_cache_bytes: u64) -> Self {
        Self::with_scan_cache(page_cache_bytes, 0)
    }

    /// And up to `scan_cache_bytes` of decoded column chunks for scans (0: none).
    pub fn with_scan_cache(page_cache_bytes: u64, scan_cache_bytes: u64) -> Self {
        let pages = (page_cache_bytes > 0).then(|| {
            let items = (page_cache_bytes / PAGE_BYTES_TYPICAL).clamp(16, 1 << 20) as usize;
            quick_cache::sync::Cache::with_weighter(items, page_cache_bytes, BatchWeighter)
        });
        let columns = (scan_cache_bytes > 0).then(|| {
            let items = (scan_cache_bytes / COLUMN_BYTES_TYPICAL).clamp(16, 1 << 20) as usize;
            quick_cache::sync::Cache::with_weighter(items, scan_cache_bytes, ArrayWeighter)
        });
        let spans_read = columns
            .is_some()
            .then(|| quick_cache::sync::Cache::new(SPANS_READ_ROW_GROUPS));
        Self {
            files: quick_cache::sync::Cache::new(META_CACHE_FILES),
            spans_read,
            pages,
            page_hits: Default::default(),
            page_misses: Default::default(),
            columns,
            column_hits: Default::default(),
            column_misses: Default::default(),
            decoding: Default::default(),
        }
    }

    /// Decoded-column cache figures: (bytes held, column chunks, hits, misses).
    pub fn column_stats(&self) -> (u64, usize, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let (bytes, len) = self
            .columns
            .as_ref()
            .map_or((0, 0), |c| (c.weight(), c.len()));
        (
            bytes,
            len,
            self.column_hits.load(Relaxed),
            self.column_misses.load(Relaxed),
        )
    }

    /// Decoded-page cache figures: (bytes held, entries, hits, misses).
    pub fn page_stats(&self) -> (u64, usize, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let (bytes, len) = self
            .pages
            .as_ref()
            .map_or((0, 0), |p| (p.weight(), p.len()));
        (
            bytes,
            len,
            self.page_hits.load(Relaxed),
            self.page_misses.load(Relaxed),
        )
    }
}

impl std::fmt::Debug for MetaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (bytes, pages, _, _) = self.page_stats();
        write!(
            f,
            "MetaCache({} files, {pages} pages, {bytes} bytes)",
            self.files.len()
        )
    }
}

/// A Parquet file of a shard: where it is and how to read it.
#[derive(Clone)]
pub struct ParquetSource {
    /// The store.
    pub store: StoreRef,
    /// The object.
    pub path: Path,
    /// Its manifest entry.
    pub info: ParquetFileInfo,
    /// Block cache (None = read straight from the store, e.g. compaction).
    pub cache: Option<Arc<BlockCache>>,
    /// Metadata cache.
    pub metas: Arc<MetaCache>,
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("parquet {path}: {e}"))
}

impl ParquetSource {
    /// The file's metadata: from memory, the local tail cache, or one ranged GET.
    pub async fn meta(&self) -> Result<Arc<FileMeta>> {
        if let Some(m) = self.metas.files.get(&self.info.name) {
            return Ok(m);
        }
        let (offset, size) = (self.info.tail_offset, self.info.size_bytes);
        if offset >= size {
            return Err(corrupt(&self.path, "empty tail"));
        }
        let bytes = match &self.cache {
            Some(c) => c.tail(&self.store, &self.path, offset, size).await?,
            None => crate::store::objects::read_range(&self.store, &self.path, offset..size)
                .await
                .map_err(Error::store(format!("read tail of {}", self.path)))?,
        };
        if bytes.len() as u64 != size - offset {
            return Err(corrupt(
                &self.path,
                format!(
                    "short tail read: the object ends before the {size} bytes the manifest says                      (truncated, or the manifest is wrong)"
                ),
            ));
        }
        let tail = Tail {
            offset,
            size,
            bytes,
        };
        let parsed: ParquetMetaData = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&tail)
            .map_err(|e| corrupt(&self.path, e))?;
        let mut blooms = Vec::with_capacity(parsed.num_row_groups());
        for rg in parsed.row_groups() {
            let b = Sbbf::read_from_column_chunk(rg.column(0), &tail)
                .map_err(|e| corrupt(&self.path, format!("bloom filter: {e}")))?;
            blooms.push(b);
        }
        let meta = ArrowReaderMetadata::try_new(Arc::new(parsed), ArrowReaderOptions::new())
            .map_err(|e| corrupt(&self.path, e))?;
        let fm = Arc::new(FileMeta { meta, blooms });
        self.metas.files.insert(self.info.name.clone(), fm.clone());
        Ok(fm)
    }

    /// Whether every version in the file's row groups that may hold keys in [start, end) is
    /// a whole-row put visible at `seq`, one per key: the file says its keys are distinct
    /// ([`DISTINCT_KEYS`]) and the `_kind` and `_seq` statistics show only puts with
    /// sequence numbers at most `seq`. Such row groups need no version columns to scan.
    pub async fn only_visible_puts(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        seq: u64,
    ) -> Result<bool> {
        let fm = self.meta().await?;
        let md = fm.meta.metadata();
        let distinct = md.file_metadata().key_value_metadata().is_some_and(|kv| {
            kv.iter()
                .any(|k| k.key == DISTINCT_KEYS && k.value.as_deref() == Some("true"))
        });
        if !distinct {
            return Ok(false);
        }
        let descr = md.file_metadata().schema_descr();
        let find = |name: &str| descr.columns().iter().position(|c| c.name() == name);
        let (Some(seq_col), Some(kind_col)) = (find(SEQ_COLUMN), find(KIND_COLUMN)) else {
            return Ok(false);
        };
        Ok(in_range(md, start, end).into_iter().all(|g| {
            let rg = md.row_group(g);
            let puts = match rg.column(kind_col).statistics() {
                Some(Statistics::Int32(s)) => {
                    s.min_opt() == Some(&(EntryKind::Put as i32))
                        && s.max_opt() == Some(&(EntryKind::Put as i32))
                }
                _ => false,
            };
            let visible = match rg.column(seq_col).statistics() {
                Some(Statistics::Int64(s)) => s.max_opt().is_some_and(|m| (*m as u64) <= seq),
                _ => false,
            };
            puts && visible
        }))
    }

    /// The smallest key of every row group (from the `_key` statistics).
    pub async fn row_group_starts(&self) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .row_group_spans()
            .await?
            .into_iter()
            .filter_map(|(_, span)| span.map(|(min, _)| min))
            .collect())
    }

    fn reader(&self, meta: Arc<FileMeta>) -> FileReader {
        FileReader {
            source: self.clone(),
            meta,
        }
    }

    /// Rows `first..first + n` of row group `rgi`, decoded (every column, or the key column
    /// only): from the page cache, or read (through the block cache) and decoded once, then
    /// cached.
    async fn decoded_span(
        &self,
        fm: &Arc<FileMeta>,
        rgi: usize,
        (first, n): (usize, usize),
        rows: usize,
        keys_only: bool,
    ) -> Result<RecordBatch> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(pages) = &self.metas.pages
            && let Some(batch) = pages.get(&PageKeyRef(&self.info.name, rgi, first, keys_only))
            && batch.num_rows() == n
        {
            self.metas.page_hits.fetch_add(1, Relaxed);
            return Ok(batch);
        }
        let batch = if keys_only {
            let mask = ProjectionMask::leaves(fm.meta.parquet_schema(), [0]);
            self.read_span(fm, rgi, (first, n), rows, Some(mask))
                .await?
        } else {
            match self
                .span_from_whole_chunks(fm, rgi, (first, n), rows)
                .await?
            {
                Some(batch) => batch,
                None => self.read_span(fm, rgi, (first, n), rows, None).await?,
            }
        };
        if let Some(pages) = &self.metas.pages {
            self.metas.page_misses.fetch_add(1, Relaxed);
            // Copied into buffers of exactly its size: decoding grows them as it goes (up
            // to twice what they hold), which would halve what the budget keeps.
            let indices = arrow::array::UInt32Array::from_iter_values(0..batch.num_rows() as u32);
            let compact = arrow::compute::take_record_batch(&batch, &indices)
                .map_err(|e| corrupt(&self.path, e))?;
            pages.insert((self.info.name.clone(), rgi, first, keys_only), compact);
        }
        Ok(batch)
    }

    /// A full span whose columns the decoded-column cache holds are sliced from their
    /// whole column chunks, the rest read over the span's pages; from the second cold span
    /// read of the row group on, its dictionary-heavy columns ([`dictionary_heavy`]) are
    /// decoded whole into that cache first (as a scan does). A point read otherwise decodes
    /// such a column's dictionary (nearly the whole column: its distinct values) again for
    /// every cold span of the row group; decoded once, it serves every later read and scan
    /// of the row group. The first span read decodes no whole chunk, so reads scattered
    /// over many row groups (one each) cost what they did. None where it does not apply:
    /// no decoded-column cache, nested columns, or no column to take whole.
    async fn span_from_whole_chunks(
        &self,
        fm: &Arc<FileMeta>,
        rgi: usize,
        (first, n): (usize, usize),
        rows: usize,
    ) -> Result<Option<RecordBatch>> {
        let Some(cache) = &self.metas.columns else {
            return Ok(None);
        };
        let md = fm.meta.metadata();
        let schema = fm.meta.schema().clone();
        let columns = schema.fields().len();
        if md.file_metadata().schema_descr().num_columns() != columns {
            return Ok(None);
        }
        let name = &self.info.name;
        let cached: Vec<bool> = (0..columns)
            .map(|c| cache.contains_key(&(name.clone(), rgi, c)))
            .collect();
        let heavy: Vec<bool> = (0..columns)
            .map(|c| !cached[c] && dictionary_heavy(md, rgi, c))
            .collect();
        // Heavy columns are taken whole from the row group's second cold span read on.
        let take_heavy = heavy.contains(&true)
            && self.metas.spans_read.as_ref().is_some_and(|read| {
                let key = (name.clone(), rgi);
                let before = read.get(&key).is_some();
                if !before {
                    read.insert(key, ());
                }
                before
            });
        let taken: Vec<bool> = (0..columns)
            .map(|c| cached[c] || (take_heavy && heavy[c]))
            .collect();
        let whole: Vec<usize> = (0..columns).filter(|&c| taken[c]).collect();
        if whole.is_empty() {
            return Ok(None);
        }
        let rest: Vec<usize> = (0..columns).filter(|&c| !taken[c]).collect();
        // Decoding whole chunks is tens of milliseconds of CPU: off the runtime's threads,
        // where the request's task runs (in a simulation, where blocking work runs inline,
        // on the task: its wait would stall every other task).
        let decodes = whole.iter().any(|&c| !cached[c]);
        let chunks = if decodes && !strata_common::exec::inline() {
            let (me, whole) = (self.clone(), whole.clone());
            let handle = tokio::runtime::Handle::current();
            strata_common::exec::blocking(move || {
                strata_common::exec::wait(&handle, me.row_group_columns(rgi, &whole))
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))??
        } else {
            self.row_group_columns(rgi, &whole).await?
        };
        let span = if rest.is_empty() {
            None
        } else {
            let mask =
                ProjectionMask::roots(md.file_metadata().schema_descr(), rest.iter().copied());
            Some(
                self.read_span(fm, rgi, (first, n), rows, Some(mask))
                    .await?,
            )
        };
        let (mut chunks, mut spans) = (chunks.into_iter(), 0..rest.len());
        let arrays: Vec<ArrayRef> = (0..columns)
            .map(|c| match (taken[c], &span) {
                (true, _) => chunks.next().map(|a| a.slice(first, n)),
                (false, Some(b)) => spans.next().map(|i| b.column(i).clone()),
                (false, None) => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| corrupt(&self.path, "a span's columns do not add up"))?;
        RecordBatch::try_new(schema, arrays)
            .map(Some)
            .map_err(|e| corrupt(&self.path, e))
    }

    /// Rows `first..first + n` of row group `rgi`, decoded over the pages holding them:
    /// every column, or those of `mask`.
    async fn read_span(
        &self,
        fm: &Arc<FileMeta>,
        rgi: usize,
        (first, n): (usize, usize),
        rows: usize,
        mask: Option<ProjectionMask>,
    ) -> Result<RecordBatch> {
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(
            self.reader(fm.clone()),
            fm.meta.clone(),
        )
        .with_row_groups(vec![rgi])
        .with_batch_size(n.max(1));
        if let Some(mask) = mask {
            builder = builder.with_projection(mask);
        }
        if (first, n) != (0, rows) {
            let mut selectors = Vec::with_capacity(3);
            if first > 0 {
                selectors.push(RowSelector::skip(first));
            }
            selectors.push(RowSelector::select(n));
            if first + n < rows {
                selectors.push(RowSelector::skip(rows - first - n));
            }
            builder = builder.with_row_selection(RowSelection::from(selectors));
        }
        let schema = builder.schema().clone();
        let mut stream = builder.build().map_err(|e| corrupt(&self.path, e))?;
        let mut batches = Vec::new();
        while let Some(batch) = stream.next().await {
            batches.push(batch.map_err(|e| corrupt(&self.path, e))?);
        }
        match batches.len() {
            1 => Ok(batches.pop().expect("one batch")),
            _ => arrow::compute::concat_batches(&schema, &batches)
                .map_err(|e| corrupt(&self.path, e)),
        }
    }

    /// Every version of `key` in the file with sequence number at most `seq`, newest first,
    /// as group-local entries.
    pub async fn lookup(&self, format: &GroupFormat, key: &[u8], seq: u64) -> Result<Vec<Entry>> {
        let fm = self.meta().await?;
        let md = fm.meta.metadata().clone();
        let mut out = Vec::new();
        for (rgi, rg) in md.row_groups().iter().enumerate() {
            let in_range = match rg.column(0).statistics() {
                Some(Statistics::ByteArray(s)) => {
                    s.min_opt().is_none_or(|m| m.data() <= key)
                        && s.max_opt().is_none_or(|m| key <= m.data())
                }
                _ => true,
            };
            if !in_range {
                continue;
            }
            if let Some(Some(bloom)) = fm.blooms.get(rgi)
                && !bloom.check(key)
            {
                continue;
            }
            // Two steps, each decoding as little as the page index allows: the key column's
            // pages that may hold the key say which rows hold its versions (the span is
            // sorted by key, then sequence number, newest first: they are one run of it);
            // then every column is decoded over just the pages holding those rows.
            let rows = rg.num_rows() as usize;
            let key_span = page_span(&md, rgi, key).unwrap_or((0, rows));
            if key_span.1 == 0 {
                continue;
            }
            let batch = self.decoded_span(&fm, rgi, key_span, rows, true).await?;
            let keys: &BinaryArray = batch
                .column(0)
                .as_binary_opt::<i32>()
                .ok_or_else(|| corrupt(&self.path, "_key is not binary"))?;
            let lo = partition_point(keys, |k| k < key);
            let hi = lo + partition_point_from(keys, lo, |k| k == key);
            if hi == lo {
                continue;
            }
            let (lo, hi) = (key_span.0 + lo, key_span.0 + hi);
            let span = row_span(&md, rgi, lo..hi);
            let batch = self.decoded_span(&fm, rgi, span, rows, false).await?;
            let versions = (lo - span.0)..(hi - span.0);
            let keys = batch.column(0).as_binary_opt::<i32>();
            if keys.is_none_or(|k| {
                versions.end > k.len()
                    || k.value(versions.start) != key
                    || k.value(versions.end - 1) != key
            }) {
                return Err(corrupt(&self.path, "the key column's pages disagree"));
            }
            out.extend(
                format
                    .from_rows(
                        &batch,
                        versions,
                        self.path.as_ref(),
                        key,
                        Some(&next_key(key)),
                    )?
                    .into_iter()
                    .filter(|e| e.seq <= seq),
            );
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.seq));
        Ok(out)
    }

    /// A stream of the file's record batches (of `batch` rows) from the page holding
    /// `start`, reading the given columns (None = all). Rows below `start` may still come
    /// first (the rest of that page): callers cut by key.
    pub async fn stream(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[usize]>,
        batch: usize,
    ) -> Result<ParquetRecordBatchStream<FileReader>> {
        let fm = self.meta().await?;
        let md = fm.meta.metadata().clone();
        // Row groups outside [start, end) by their `_key` statistics are never read, nor
        // the first one's pages whose keys all lie below `start` (its page index): a short
        // scan from the middle of a row group decoded half of it before its first row.
        let groups = in_range(&md, start, end);
        let skip = match groups.first() {
            Some(g) if !start.is_empty() => rows_below(&md, *g, start),
            _ => 0,
        };
        let total: usize = groups
            .iter()
            .map(|g| md.row_group(*g).num_rows() as usize)
            .sum();
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(
            self.reader(fm.clone()),
            fm.meta.clone(),
        )
        .with_row_groups(groups)
        .with_batch_size(batch);
        if skip > 0 && skip <= total {
            builder = builder.with_row_selection(RowSelection::from(vec![
                RowSelector::skip(skip),
                RowSelector::select(total - skip),
            ]));
        }
        if let Some(cols) = columns {
            let mask =
                ProjectionMask::roots(md.file_metadata().schema_descr(), cols.iter().copied());
            builder = builder.with_projection(mask);
        }
        builder.build().map_err(|e| corrupt(&self.path, e))
    }

    /// Rows `from..to` of the file (in file order) in batches of `batch` rows, reading the
    /// given columns: the row groups holding them, cut to the range by a row selection.
    pub async fn stream_rows(
        &self,
        from: u64,
        to: u64,
        columns: &[usize],
        batch: usize,
    ) -> Result<ParquetRecordBatchStream<FileReader>> {
        let fm = self.meta().await?;
        let md = fm.meta.metadata().clone();
        let mut groups = Vec::new();
        let mut selectors = Vec::new();
        let mut at = 0u64;
        for (i, rg) in md.row_groups().iter().enumerate() {
            let (a, b) = (at, at + rg.num_rows() as u64);
            at = b;
            if b <= from || a >= to {
                continue;
            }
            groups.push(i);
            let (lo, hi) = (from.max(a) - a, to.min(b) - a);
            if lo > 0 {
                selectors.push(RowSelector::skip(lo as usize));
            }
            selectors.push(RowSelector::select((hi - lo) as usize));
            if b - a > hi {
                selectors.push(RowSelector::skip((b - a - hi) as usize));
            }
        }
        if to > at {
            return Err(corrupt(
                &self.path,
                format!("rows {from}..{to} asked of a file of {at} rows"),
            ));
        }
        let partial = selectors.iter().any(|s| s.skip);
        let mask =
            ProjectionMask::roots(md.file_metadata().schema_descr(), columns.iter().copied());
        let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(
            self.reader(fm.clone()),
            fm.meta.clone(),
        )
        .with_row_groups(groups)
        .with_batch_size(batch)
        .with_projection(mask);
        if partial {
            builder = builder.with_row_selection(RowSelection::from(selectors));
        }
        builder.build().map_err(|e| corrupt(&self.path, e))
    }

    /// Rows `from..to` (of the whole file) of the root columns `columns` (ascending), as
    /// [`Self::stream_rows`] yields them, through the decoded-column cache when there is
    /// one: each row group's columns are decoded whole once, kept, and sliced for every
    /// later read, so a scan repeated over the same columns reads and decodes nothing.
    pub async fn rows_cached(
        &self,
        from: u64,
        to: u64,
        columns: &[usize],
        batch: usize,
    ) -> Result<BatchStream> {
        if self.metas.columns.is_none() || columns.is_empty() {
            return Ok(self.stream_rows(from, to, columns, batch).await?.boxed());
        }
        let fm = self.meta().await?;
        let md = fm.meta.metadata().clone();
        let schema = Arc::new(
            fm.meta
                .schema()
                .project(columns)
                .map_err(|e| corrupt(&self.path, e))?,
        );
        // (row group, its first row in the file, rows of it wanted).
        let mut parts: Vec<(usize, u64, Range<u64>)> = Vec::new();
        let mut at = 0u64;
        for (i, rg) in md.row_groups().iter().enumerate() {
            let (a, b) = (at, at + rg.num_rows() as u64);
            at = b;
            if b > from && a < to {
                parts.push((i, a, from.max(a) - a..to.min(b) - a));
            }
        }
        if to > at {
            return Err(corrupt(
                &self.path,
                format!("rows {from}..{to} asked of a file of {at} rows"),
            ));
        }
        let (me, columns) = (self.clone(), columns.to_vec());
        let batch = batch.max(1);
        let stream = futures::stream::iter(parts)
            .then(move |(rg, _, rows)| {
                let (me, columns, schema) = (me.clone(), columns.clone(), schema.clone());
                async move {
                    let arrays = me
                        .row_group_columns(rg, &columns)
                        .await
                        .map_err(|e| ParquetError::General(e.to_string()))?;
                    let whole = RecordBatch::try_new(schema, arrays)?;
                    let (lo, hi) = (rows.start as usize, rows.end as usize);
                    // Zero-copy slices of the cached arrays, `batch` rows at a time.
                    Ok::<_, ParquetError>(
                        (lo..hi)
                            .step_by(batch)
                            .map(|s| Ok(whole.slice(s, batch.min(hi - s))))
                            .collect::<Vec<_>>(),
                    )
                }
            })
            .flat_map(|r| match r {
                Ok(batches) => futures::stream::iter(batches),
                Err(e) => futures::stream::iter(vec![Err(e)]),
            });
        Ok(stream.boxed())
    }

    /// The rows with keys in `[start, end)` of the root columns `columns` (ascending, the
    /// first one the key: `_key`, or a table's typed `BIGINT` key), in batches of `batch`
    /// rows, through the decoded-column cache when there is one: the row groups that may
    /// hold the range (by their `_key` statistics) are decoded whole once and kept, and
    /// every scan, cold or warm, slices them at the range's bounds (a binary search of the
    /// key column). Without a cache, as [`Self::stream`] (the batches are then not cut to
    /// the range).
    pub async fn keyed_cached(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        columns: &[usize],
        batch: usize,
    ) -> Result<BatchStream> {
        if self.metas.columns.is_none() || columns.is_empty() {
            return Ok(self.stream(start, end, Some(columns), batch).await?.boxed());
        }
        let fm = self.meta().await?;
        let md = fm.meta.metadata().clone();
        let schema = Arc::new(
            fm.meta
                .schema()
                .project(columns)
                .map_err(|e| corrupt(&self.path, e))?,
        );
        let groups = in_range(&md, start, end);
        let (me, columns) = (self.clone(), columns.to_vec());
        let (start, end) = (start.to_vec(), end.map(|e| e.to_vec()));
        let batch = batch.max(1);
        let stream = futures::stream::iter(groups)
            .then(move |rg| {
                let (me, columns, schema) = (me.clone(), columns.clone(), schema.clone());
                let (start, end) = (start.clone(), end.clone());
                async move {
                    let arrays = me
                        .row_group_columns(rg, &columns)
                        .await
                        .map_err(|e| ParquetError::General(e.to_string()))?;
                    let whole = RecordBatch::try_new(schema, arrays)?;
                    let keys = whole.column(0);
                    let lo = key_lower_bound(keys.as_ref(), &start)
                        .ok_or_else(|| ParquetError::General("unexpected key column".into()))?;
                    let hi = match &end {
                        Some(e) => key_lower_bound(keys.as_ref(), e)
                            .ok_or_else(|| ParquetError::General("unexpected key column".into()))?,
                        None => whole.num_rows(),
                    };
                    // Zero-copy slices of the cached arrays, `batch` rows at a time, made as
                    // they are read (a short scan takes one of a row group's many).
                    Ok::<_, ParquetError>(
                        (lo..hi.max(lo))
                            .step_by(batch)
                            .map(move |s| Ok(whole.slice(s, batch.min(hi - s)))),
                    )
                }
            })
            .flat_map(|r| match r {
                Ok(batches) => futures::stream::iter(batches).left_stream(),
                Err(e) => futures::stream::iter([Err(e)]).right_stream(),
            });
        Ok(stream.boxed())
    }

    /// Row group `rg`'s root columns `columns` (ascending), decoded whole: from the
    /// decoded-column cache, the missing ones read (through the block cache) and cached.
    async fn row_group_columns(&self, rg: usize, columns: &[usize]) -> Result<Vec<ArrayRef>> {
        use std::sync::atomic::Ordering::Relaxed;
        let cache = self.metas.columns.as_ref().expect("a column cache");
        let name = &self.info.name;
        let cached = |out: &mut Vec<Option<ArrayRef>>| -> Vec<usize> {
            for (o, c) in out.iter_mut().zip(columns) {
                if o.is_none() {
                    *o = cache.get(&(name.clone(), rg, *c));
                }
            }
            columns
                .iter()
                .zip(out.iter())
                .filter(|(_, a)| a.is_none())
                .map(|(c, _)| *c)
                .collect()
        };
        let mut out: Vec<Option<ArrayRef>> = vec![None; columns.len()];
        let mut missing = cached(&mut out);
        // Whoever decodes this row group first does it for all: the others wait for it,
        // then take what it cached.
        let _decoding = if missing.is_empty() {
            None
        } else {
            let (gate, place) = DecodingRowGroup::join(&self.metas, (name.clone(), rg));
            let held = gate.lock_owned().await;
            missing = cached(&mut out);
            // The mutex goes before the place (tuple fields drop in order).
            Some((held, place))
        };
        self.metas
            .column_hits
            .fetch_add((columns.len() - missing.len()) as u64, Relaxed);
        if !missing.is_empty() {
            self.metas
                .column_misses
                .fetch_add(missing.len() as u64, Relaxed);
            let fm = self.meta().await?;
            let md = fm.meta.metadata().clone();
            let rows = md.row_group(rg).num_rows() as usize;
            let mask =
                ProjectionMask::roots(md.file_metadata().schema_descr(), missing.iter().copied());
            let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(
                self.reader(fm.clone()),
                fm.meta.clone(),
            )
            .with_row_groups(vec![rg])
            .with_batch_size(rows.max(1))
            .with_projection(mask)
            .build()
            .map_err(|e| corrupt(&self.path, e))?;
            let batches: Vec<RecordBatch> = stream
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| corrupt(&self.path, e))?;
            let read = match batches.len() {
                1 => batches.into_iter().next().expect("one"),
                _ => {
                    let schema = Arc::new(
                        fm.meta
                            .schema()
                            .project(&missing)
                            .map_err(|e| corrupt(&self.path, e))?,
                    );
                    arrow::compute::concat_batches(&schema, &batches)
                        .map_err(|e| corrupt(&self.path, e))?
                }
            };
            if read.num_rows() != rows || read.num_columns() != missing.len() {
                return Err(corrupt(
                    &self.path,
                    format!(
                        "row group {rg} decoded to {} rows x {} columns, expected {rows} x {}",
                        read.num_rows(),
                        read.num_columns(),
                        missing.len()
                    ),
                ));
            }
            for (j, c) in missing.iter().enumerate() {
                let array = read.column(j).clone();
                cache.insert((name.clone(), rg, *c), array.clone());
                let i = columns.iter().position(|x| x == c).expect("asked");
                out[i] = Some(array);
            }
        }
        Ok(out.into_iter().map(|a| a.expect("filled")).collect())
    }

    /// Rows in the file (from its metadata).
    pub async fn num_rows(&self) -> Result<u64> {
        Ok(self
            .meta()
            .await?
            .meta
            .metadata()
            .file_metadata()
            .num_rows() as u64)
    }

    /// Per row group: its row count and the smallest and largest `_key` by its statistics
    /// (None when it has none).
    pub async fn row_group_spans(&self) -> Result<Vec<(u64, Option<(Vec<u8>, Vec<u8>)>)>> {
        let fm = self.meta().await?;
        Ok(fm
            .meta
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| {
                let span = match rg.column(0).statistics() {
                    Some(Statistics::ByteArray(s)) => match (s.min_opt(), s.max_opt()) {
                        (Some(a), Some(b)) => Some((a.data().to_vec(), b.data().to_vec())),
                        _ => None,
                    },
                    _ => None,
                };
                (rg.num_rows() as u64, span)
            })
            .collect())
    }
}

/// Whether a point read should take column `c` of row group `rgi` whole (decoded once into
/// the decoded-column cache) rather than over its span's pages: its dictionary page is at
/// least half of its bytes. A reader decodes a column chunk's dictionary before any of its
/// data pages, so for such a column (high cardinality: the dictionary holds nearly every
/// value) every cold span costs most of what the whole chunk does: decoded whole, it is
/// paid once per row group instead of once per span.
fn dictionary_heavy(md: &ParquetMetaData, rgi: usize, c: usize) -> bool {
    let chunk = md.row_group(rgi).column(c);
    chunk.dictionary_page_offset().is_some_and(|d| {
        let dictionary = chunk.data_page_offset() - d;
        dictionary > 0 && 2 * dictionary >= chunk.compressed_size()
    })
}

/// Row groups that may hold keys in [start, end) by their `_key` statistics.
fn in_range(md: &ParquetMetaData, start: &[u8], end: Option<&[u8]>) -> Vec<usize> {
    md.row_groups()
        .iter()
        .enumerate()
        .filter(|(_, rg)| match rg.column(0).statistics() {
            Some(Statistics::ByteArray(s)) => {
                s.max_opt().is_none_or(|m| m.data() >= start)
                    && end.is_none_or(|e| s.min_opt().is_none_or(|m| m.data() < e))
            }
            _ => true,
        })
        .map(|(i, _)| i)
        .collect()
}

/// The first row of a sorted key column (`_key`, or a typed `BIGINT` key, whose
/// memcomparable encoding orders as the integers do) whose encoded key is at least
/// `bound`; None for another column type.
fn key_lower_bound(keys: &dyn Array, bound: &[u8]) -> Option<usize> {
    if let Some(k) = keys.as_binary_opt::<i32>() {
        return Some(partition_point(k, |v| v < bound));
    }
    let k = keys.as_primitive_opt::<arrow::datatypes::Int64Type>()?;
    let encode = |v: i64| ((v as u64) ^ 0x8000_0000_0000_0000).to_be_bytes();
    Some(
        k.values()
            .partition_point(|v| encode(*v).as_slice() < bound),
    )
}

/// The smallest key greater than every key with prefix `key` equal to `key`: `key + 0x00`.
fn next_key(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

/// The leading rows of row group `rgi` in pages whose `_key` values all lie below `start`
/// (page index): a reader from `start` need not decode them. 0 without a page index.
fn rows_below(md: &ParquetMetaData, rgi: usize, start: &[u8]) -> usize {
    let ci = md
        .column_index()
        .and_then(|c| c.get(rgi))
        .and_then(|c| c.first());
    let oi = md
        .offset_index()
        .and_then(|o| o.get(rgi))
        .and_then(|o| o.first());
    let (Some(ColumnIndexMetaData::BYTE_ARRAY(idx)), Some(oi)) = (ci, oi) else {
        return 0;
    };
    let pages = oi.page_locations();
    for (p, loc) in pages.iter().enumerate() {
        if idx.max_value(p).is_none_or(|m| m >= start) {
            return loc.first_row_index as usize;
        }
    }
    md.row_group(rgi).num_rows() as usize
}

/// The rows of row group `rgi` in pages whose `_key` range may hold `key` (page index), as
/// (first row, row count), or None when the file has no page index. Keys are sorted, so
/// those pages are contiguous; a count of 0 means no page may hold the key.
fn page_span(md: &ParquetMetaData, rgi: usize, key: &[u8]) -> Option<(usize, usize)> {
    let ci = md.column_index()?.get(rgi)?.first()?;
    let oi = md.offset_index()?.get(rgi)?.first()?;
    let ColumnIndexMetaData::BYTE_ARRAY(idx) = ci else {
        return None;
    };
    let pages = oi.page_locations();
    let rows = md.row_group(rgi).num_rows() as usize;
    let mut span: Option<(usize, usize)> = None;
    for (p, loc) in pages.iter().enumerate() {
        let first = loc.first_row_index as usize;
        let end = pages
            .get(p + 1)
            .map_or(rows, |n| n.first_row_index as usize);
        let hit =
            idx.min_value(p).is_none_or(|m| m <= key) && idx.max_value(p).is_none_or(|m| key <= m);
        if hit {
            span = Some(span.map_or((first, end), |(s, _)| (s, end)));
        } else if span.is_some() {
            break;
        }
    }
    Some(span.map_or((0, 0), |(s, e)| (s, e - s)))
}

/// The rows of row group `rgi` to decode for rows `want`: the rows every column's pages
/// holding `want` have in common (one page per column when `want` fits in one), as (first
/// row, row count); `want` itself without an offset index.
fn row_span(md: &ParquetMetaData, rgi: usize, want: Range<usize>) -> (usize, usize) {
    let rows = md.row_group(rgi).num_rows() as usize;
    let Some(columns) = md.offset_index().and_then(|o| o.get(rgi)) else {
        return (want.start, want.len());
    };
    let (mut first, mut end) = (0, rows);
    for column in columns {
        let pages = column.page_locations();
        let page_of = |row: usize| pages.partition_point(|p| p.first_row_index as usize <= row);
        // The page holding the first wanted row starts at or before it ...
        if let Some(p) = page_of(want.start).checked_sub(1) {
            first = first.max(pages[p].first_row_index as usize);
        }
        // ... and the one holding the last ends after it.
        if let Some(next) = pages.get(page_of(want.end - 1)) {
            end = end.min(next.first_row_index as usize);
        }
    }
    (first, end - first)
}

/// How many leading values of `keys` satisfy `below` (which holds for a prefix).
fn partition_point(keys: &BinaryArray, below: impl Fn(&[u8]) -> bool) -> usize {
    partition_point_from(keys, 0, below)
}

/// How many values of `keys` from `start` on satisfy `pred` (which holds for a prefix of
/// them).
fn partition_point_from(keys: &BinaryArray, start: usize, pred: impl Fn(&[u8]) -> bool) -> usize {
    let (mut lo, mut hi) = (start, keys.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(keys.value(mid)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - start
}

/// The async reader handed to the `parquet` crate: data ranges through the block cache
/// (or straight from the store), metadata from [`FileMeta`].
pub struct FileReader {
    source: ParquetSource,
    meta: Arc<FileMeta>,
}

impl FileReader {
    async fn ranges(&self, ranges: Vec<Range<u64>>) -> parquet::errors::Result<Vec<Bytes>> {
        let s = &self.source;
        let result = match &s.cache {
            Some(c) => {
                c.read_ranges(&s.store, &s.path, s.info.size_bytes, &ranges)
                    .await
            }
            None => crate::store::objects::read_ranges(&s.store, &s.path, &ranges)
                .await
                .map_err(Error::store(format!("read {}", s.path))),
        };
        result.map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

impl AsyncFileReader for FileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let mut v = self.ranges(vec![range]).await?;
            v.pop()
                .ok_or_else(|| parquet::errors::ParquetError::General("empty read".into()))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move { self.ranges(ranges).await }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let md = self.meta.meta.metadata().clone();
        async move { Ok(md) }.boxed()
    }
}

/// Group-local versions of a run of files (sorted, non-overlapping) from `start`, in
/// (key, sequence descending) order, read synchronously on a blocking thread.
pub struct RunIter {
    handle: tokio::runtime::Handle,
    format: Arc<GroupFormat>,
    files: VecDeque<ParquetSource>,
    stream: Option<(String, ParquetRecordBatchStream<FileReader>)>,
    buffered: VecDeque<Entry>,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    /// Widen to the full width with this codec (readers) or keep group-local (compaction).
    widen: Option<crate::row::RowCodec>,
    /// For scans: what is read of the group (see [`GroupFormat::scan_entries`]).
    scan: Option<super::format::ScanColumns>,
    /// Once cancelled, reads fail with [`Error::Closed`] instead of starting (see
    /// [`block_on_unless`]).
    stop: Option<tokio_util::sync::CancellationToken>,
}

/// Runs `fut` on `handle` from a blocking thread, unless `stop` is cancelled: checked
/// first and raced with `fut`, so work stopped (a worker shutting down, a lease lost) never
/// polls a timer of a runtime being shut down, which panics.
pub(crate) fn block_on_unless<F: std::future::Future>(
    handle: &tokio::runtime::Handle,
    stop: Option<&tokio_util::sync::CancellationToken>,
    fut: F,
) -> Result<F::Output> {
    let Some(stop) = stop else {
        return Ok(strata_common::exec::wait(handle, fut));
    };
    if stop.is_cancelled() {
        return Err(Error::Closed("stopped".into()));
    }
    strata_common::exec::wait(handle, async {
        tokio::select! {
            biased;
            _ = stop.cancelled() => Err(Error::Closed("stopped".into())),
            out = fut => Ok(out),
        }
    })
}

impl RunIter {
    /// Iterates `files` (in key order) from `start` to `end`.
    pub fn new(
        handle: tokio::runtime::Handle,
        format: Arc<GroupFormat>,
        files: Vec<ParquetSource>,
        start: &[u8],
        end: Option<&[u8]>,
        widen: Option<crate::row::RowCodec>,
    ) -> Self {
        let files = files
            .into_iter()
            .filter(|f| {
                f.info.key_max.as_slice() >= start
                    && end.is_none_or(|e| f.info.key_min.as_slice() < e)
            })
            .collect();
        Self {
            handle,
            format,
            files,
            stream: None,
            buffered: VecDeque::new(),
            start: start.to_vec(),
            end: end.map(|e| e.to_vec()),
            widen,
            scan: None,
            stop: None,
        }
    }

    /// This iterator, stopping with [`Error::Closed`] once `stop` is cancelled.
    pub fn stop_on(mut self, stop: tokio_util::sync::CancellationToken) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Iterates `files` for a scan that reads `scan` of the group: versions come out at the
    /// table's full width (`full`), with whole-row puts kept whole when the group holds
    /// every column the scan needs (see [`GroupFormat::scan_entries`]).
    pub fn for_scan(
        handle: tokio::runtime::Handle,
        format: Arc<GroupFormat>,
        files: Vec<ParquetSource>,
        start: &[u8],
        end: Option<&[u8]>,
        full: crate::row::RowCodec,
        scan: super::format::ScanColumns,
    ) -> Self {
        let mut it = Self::new(handle, format, files, start, end, Some(full));
        it.scan = Some(scan);
        it
    }
}

impl EntryIter for RunIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            if let Some(e) = self.buffered.pop_front() {
                return Ok(Some(match (&self.widen, &self.scan) {
                    (Some(full), None) => self.format.widen(full, &e)?,
                    _ => e,
                }));
            }
            if self.stream.is_none() {
                let Some(f) = self.files.pop_front() else {
                    return Ok(None);
                };
                let start = self.start.clone();
                let columns = self.scan.as_ref().map(|scan| {
                    let k = self.format.key_columns();
                    let mut c = vec![0, 1 + k, 2 + k, 3 + k];
                    c.extend(scan.read.iter().map(|p| 4 + k + p));
                    c
                });
                let s = block_on_unless(
                    &self.handle,
                    self.stop.as_ref(),
                    f.stream(&start, self.end.as_deref(), columns.as_deref(), 4096),
                )??;
                self.stream = Some((f.path.to_string(), s));
            }
            let Some((origin, stream)) = self.stream.as_mut() else {
                continue;
            };
            match block_on_unless(&self.handle, self.stop.as_ref(), stream.next())? {
                None => self.stream = None,
                Some(batch) => {
                    let batch =
                        batch.map_err(|e| Error::Corrupt(format!("parquet {origin}: {e}")))?;
                    let entries = match (&self.scan, &self.widen) {
                        (Some(scan), Some(full)) => self.format.scan_entries(
                            full,
                            scan,
                            &batch,
                            origin,
                            &self.start,
                            self.end.as_deref(),
                        )?,
                        _ => self.format.from_batch(
                            &batch,
                            origin,
                            &self.start,
                            self.end.as_deref(),
                        )?,
                    };
                    self.buffered.extend(entries);
                }
            }
        }
    }
}

#[cfg(test)]
mod page_key_tests {
    use super::*;

    #[test]
    fn a_borrowed_page_key_finds_what_the_owned_one_stored() {
        let cache: quick_cache::sync::Cache<PageKey, u32> = quick_cache::sync::Cache::new(16);
        cache.insert(("f-1".to_string(), 2, 4096, true), 7);
        cache.insert(("f-1".to_string(), 2, 4096, false), 8);
        assert_eq!(cache.get(&PageKeyRef("f-1", 2, 4096, true)), Some(7));
        assert_eq!(cache.get(&PageKeyRef("f-1", 2, 4096, false)), Some(8));
        assert_eq!(cache.get(&PageKeyRef("f-1", 2, 0, true)), None);
        assert_eq!(cache.get(&PageKeyRef("f-2", 2, 4096, true)), None);
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::columnar::writer::{FileShape, RunWriter};
    use crate::entry::EntryKind;
    use arrow::datatypes::{DataType, Field, Schema};

    fn key(i: i64) -> Vec<u8> {
        ((i as u64) ^ 0x8000_0000_0000_0000).to_be_bytes().to_vec()
    }

    /// One columnar file of keys 0..10,000 (value = key) in one row group, read through
    /// `metas`.
    async fn ten_thousand_keys(metas: Arc<MetaCache>) -> ParquetSource {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
        ]);
        let format = Arc::new(GroupFormat::new(&schema, &[0], &[1], vec![0]));
        let shape = FileShape {
            file_bytes_target: 1 << 30,
            row_group_rows: 10_000,
            page_bytes: 1 << 20,
            page_rows: 100,
            dictionary_page_bytes: 64 << 10,
        };
        let mut w = RunWriter::new(
            store.clone(),
            format.clone(),
            shape,
            "t".into(),
            Box::new(|name| Path::from(format!("p/{name}.parquet"))),
        );
        for i in 0..10_000i64 {
            let value = format
                .codec
                .encode(&[Some(crate::value::Value::Int(i))])
                .unwrap();
            w.add_key(vec![Entry {
                key: Bytes::from(key(i)),
                seq: 1,
                kind: EntryKind::Put,
                value: Bytes::from(value),
            }])
            .await
            .unwrap();
        }
        let info = w.finish().await.unwrap().pop().unwrap();
        ParquetSource {
            store,
            path: Path::from(format!("p/{}.parquet", info.name)),
            info,
            cache: None,
            metas,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scans_arriving_together_decode_a_row_group_once() {
        let metas = Arc::new(MetaCache::with_scan_cache(1 << 20, 64 << 20));
        let source = ten_thousand_keys(metas.clone()).await;
        // The row group's gate held here, as by a scan decoding it: the eight scans must
        // all come to wait at it rather than decode the row group themselves.
        let group = (source.info.name.clone(), 0);
        let (gate, place) = DecodingRowGroup::join(&metas, group.clone());
        let held = gate.lock_owned().await;
        let scans: Vec<_> = (0..8i64)
            .map(|i| {
                let source = source.clone();
                tokio::spawn(async move {
                    let start = key(i * 1_000);
                    let mut s = source
                        .keyed_cached(&start, None, &[0, 1], 10)
                        .await
                        .unwrap();
                    let b = s.next().await.unwrap().unwrap();
                    assert_eq!(b.num_rows(), 10);
                    assert_eq!(b.column(0).as_binary::<i32>().value(0), start.as_slice());
                })
            })
            .collect();
        let waiting = || metas.decoding.lock().get(&group).map(|(_, users)| *users);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while waiting() != Some(9) {
            assert!(
                std::time::Instant::now() < deadline,
                "scans at the gate: {:?}",
                waiting()
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(
            metas.column_stats().3,
            0,
            "nothing decoded while the gate is held"
        );
        // The holder goes without caching anything: the first waiter decodes for the rest.
        drop(held);
        drop(place);
        for s in scans {
            s.await.unwrap();
        }
        let (_, _, hits, misses) = metas.column_stats();
        assert_eq!(misses, 2, "the row group's two columns decoded once");
        assert_eq!(hits, 14, "the other seven scans took them from the cache");
        assert!(metas.decoding.lock().is_empty(), "no gate left behind");
    }

    /// Keys 0..10,000 in one row group of pages of 100 rows: `v` distinct (its dictionary
    /// is most of its bytes), `w` of three values (a small dictionary), every seventh key
    /// with a second, newer version.
    async fn keys_with_a_heavy_dictionary(metas: Arc<MetaCache>) -> (ParquetSource, GroupFormat) {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
            Field::new("w", DataType::Int32, true),
        ]);
        let format = GroupFormat::new(&schema, &[0], &[1, 2], vec![0, 1]);
        let shape = FileShape {
            file_bytes_target: 1 << 30,
            row_group_rows: 20_000,
            page_bytes: 1 << 20,
            page_rows: 100,
            dictionary_page_bytes: 1 << 20,
        };
        let mut w = RunWriter::new(
            store.clone(),
            Arc::new(format.clone()),
            shape,
            "t".into(),
            Box::new(|name| Path::from(format!("p/{name}.parquet"))),
        );
        let entry = |i: i64, seq: u64| {
            let v = crate::value::Value::Int(i * 7_919 + seq as i64);
            let value = format
                .codec
                .encode(&[
                    Some(v),
                    (i % 5 != 0).then_some(crate::value::Value::Int(i % 3)),
                ])
                .unwrap();
            Entry {
                key: Bytes::from(key(i)),
                seq,
                kind: EntryKind::Put,
                value: Bytes::from(value),
            }
        };
        for i in 0..10_000i64 {
            let versions = if i % 7 == 0 {
                vec![entry(i, 2), entry(i, 1)]
            } else {
                vec![entry(i, 1)]
            };
            w.add_key(versions).await.unwrap();
        }
        let info = w.finish().await.unwrap().pop().unwrap();
        let source = ParquetSource {
            store,
            path: Path::from(format!("p/{}.parquet", info.name)),
            info,
            cache: None,
            metas,
        };
        (source, format)
    }

    #[tokio::test]
    async fn a_point_read_takes_a_dictionary_heavy_column_whole_and_reads_the_same() {
        let whole = Arc::new(MetaCache::with_scan_cache(64 << 20, 64 << 20));
        let (source, format) = keys_with_a_heavy_dictionary(whole.clone()).await;
        let spans = ParquetSource {
            metas: Arc::new(MetaCache::new(64 << 20)),
            ..source.clone()
        };
        let fm = source.meta().await.unwrap();
        let md = fm.meta.metadata();
        let heavy: Vec<usize> = (0..md.row_group(0).num_columns())
            .filter(|&c| dictionary_heavy(md, 0, c))
            .collect();
        let v = fm.meta.schema().index_of("v").unwrap();
        assert_eq!(
            heavy,
            vec![v],
            "only the distinct column's dictionary is heavy"
        );
        // The row group's first cold span read decodes no whole chunk.
        assert_eq!(source.lookup(&format, &key(5), 1).await.unwrap().len(), 1);
        assert_eq!(whole.column_stats(), (0, 0, 0, 0));
        for i in [0i64, 1, 7, 99, 100, 4_242, 5_005, 9_999, 10_000, -1] {
            for seq in [1, 2, u64::MAX] {
                let got = source.lookup(&format, &key(i), seq).await.unwrap();
                let want = spans.lookup(&format, &key(i), seq).await.unwrap();
                assert_eq!(got, want, "key {i} at {seq}");
                let versions = if !(0..10_000).contains(&i) {
                    0
                } else if i % 7 == 0 && seq >= 2 {
                    2
                } else {
                    1
                };
                assert_eq!(got.len(), versions, "key {i} at {seq}");
            }
        }
        let (_, chunks, hits, misses) = whole.column_stats();
        assert_eq!((chunks, misses), (1, 1), "`v` decoded whole once");
        assert!(hits > 0, "and taken from the cache by the reads after");
        assert_eq!(
            spans.metas.column_stats().1,
            0,
            "no decoded-column cache there"
        );
    }

    #[tokio::test]
    async fn a_stream_from_a_key_skips_the_pages_below_it() {
        let source = ten_thousand_keys(Arc::new(MetaCache::new(1 << 20))).await;
        // The keys a stream from `start` yields, in order.
        let keys_from = |start: Vec<u8>| {
            let source = source.clone();
            async move {
                let mut s = source.stream(&start, None, None, 100_000).await.unwrap();
                let mut out = Vec::new();
                while let Some(b) = s.next().await {
                    let b = b.unwrap();
                    let k = b.column(0).as_binary::<i32>();
                    out.extend((0..k.len()).map(|i| k.value(i).to_vec()));
                }
                out
            }
        };
        assert_eq!(keys_from(Vec::new()).await.len(), 10_000);
        let from = keys_from(key(5_050)).await;
        // Read from the page holding the start key (pages of about 100 rows), not from the
        // row group's first row; and nothing from the start key on is missing.
        let first = from.first().cloned().unwrap();
        assert!(first <= key(5_050) && first >= key(4_850), "{first:?}");
        let first = (u64::from_be_bytes(first.try_into().unwrap()) ^ 0x8000_0000_0000_0000) as i64;
        let want: Vec<Vec<u8>> = (first..10_000).map(key).collect();
        assert_eq!(from, want);
        // A start below every key reads everything; one past the last reads its last page
        // at most.
        assert_eq!(keys_from(key(-1)).await.len(), 10_000);
        assert!(keys_from(key(20_000)).await.len() <= 100);
    }
}
