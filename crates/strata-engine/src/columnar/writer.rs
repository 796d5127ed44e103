//! Writing a sorted run of one column group as Parquet files of a target size, with the
//! `parquet` crate's writer over the object-store seam.
//!
//! The encoder writes into fixed-size buffers (`ChunkSink`) that are handed to the
//! upload as they are, without a copy. (`parquet`'s async writer gathers each row group
//! into one `Vec` that grows by doubling from empty, then copies it again into the upload's
//! parts: a 100 MB row group meant about 200 MB of fresh memory faulted in, zeroed and
//! copied, a third of a cross-tier job's CPU.)

use std::sync::Arc;

use bytes::Bytes;

use arrow::datatypes::DataType;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaData};
use parquet::file::properties::{
    BloomFilterPosition, EnabledStatistics, WriterProperties, WriterVersion,
};
use parquet::schema::types::ColumnPath;
use strata_manifest::ParquetFileInfo;
use strata_objstore::StoreRef;

use super::format::{DISTINCT_KEYS, GroupFormat, KEY_COLUMN, SEQ_COLUMN};
use crate::entry::Entry;
use crate::error::{Error, Result};

/// File-shape settings.
#[derive(Debug, Clone, Copy)]
pub struct FileShape {
    /// Target object size; a file is closed at the first key boundary past it.
    pub file_bytes_target: u64,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Data page size limit (small pages make point lookups read little).
    pub page_bytes: usize,
    /// Rows per data page at most: a point lookup reads about this many rows of each
    /// column it needs.
    pub page_rows: usize,
    /// Largest dictionary page; past it a column falls back to delta encoding.
    pub dictionary_page_bytes: usize,
}

fn properties(format: &GroupFormat, shape: &FileShape) -> WriterProperties {
    // The writer checks a page's size after each batch of this many rows: with wide
    // variable-width values (200-byte strings, say) 1024-row batches made 200 KiB pages of a
    // 64 KiB limit, and a point lookup decodes a whole page per column.
    let variable_width: Vec<&str> = format
        .schema
        .fields()
        .iter()
        .filter(|f| {
            matches!(
                f.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
            ) && f.name() != KEY_COLUMN
        })
        .map(|f| f.name().as_str())
        .collect();
    let write_batch = if variable_width.is_empty() { 1024 } else { 64 };
    let mut b = WriterProperties::builder()
        // Format 2: integer columns that are not dictionary-encoded use delta encoding
        // (sorted keys and sequence numbers shrink to a few bits a row), byte arrays
        // prefix encoding.
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(shape.row_group_rows.max(1)))
        .set_data_page_size_limit(shape.page_bytes.max(1024))
        .set_data_page_row_count_limit(shape.page_rows.max(64))
        .set_dictionary_page_size_limit(shape.dictionary_page_bytes.max(1024))
        .set_write_batch_size(shape.page_rows.clamp(64, write_batch))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_column_bloom_filter_enabled(ColumnPath::from(KEY_COLUMN), true)
        .set_bloom_filter_position(BloomFilterPosition::End)
        .set_column_dictionary_enabled(ColumnPath::from(KEY_COLUMN), false)
        .set_column_dictionary_enabled(ColumnPath::from(SEQ_COLUMN), false);
    // A reader decodes a column chunk's dictionary page before any of its data pages, so a
    // point lookup pays for the whole dictionary: a megabyte of distinct strings (which fall
    // back to plain encoding anyway) made every cold lookup into such a column cost
    // milliseconds. Low-cardinality strings still fit in 64 KiB.
    for name in variable_width {
        b = b.set_column_dictionary_page_size_limit(
            ColumnPath::from(name),
            shape.dictionary_page_bytes.clamp(1024, 64 << 10),
        );
    }
    // Keys are distinct or nearly: a dictionary of them would only be thrown away.
    for f in format
        .schema
        .fields()
        .iter()
        .skip(1)
        .take(format.key_columns())
    {
        b = b.set_column_dictionary_enabled(ColumnPath::from(f.name().as_str()), false);
    }
    b.build()
}

/// Bytes of each buffer the encoder writes into.
const SINK_CHUNK_BYTES: usize = 1 << 20;

/// A `Write` target that keeps what it is given as a list of buffers of
/// [`SINK_CHUNK_BYTES`], each allocated once and handed on whole.
#[derive(Default)]
struct ChunkSink {
    full: Vec<Bytes>,
    current: Vec<u8>,
}

impl ChunkSink {
    /// Everything written since the last call, in order.
    fn take(&mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.full
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        std::mem::take(&mut self.full)
    }
}

impl std::io::Write for ChunkSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.current.capacity() == 0 {
            self.current.reserve_exact(SINK_CHUNK_BYTES);
        }
        let n = buf.len().min(self.current.capacity() - self.current.len());
        self.current.extend_from_slice(&buf[..n]);
        if self.current.len() == self.current.capacity() {
            self.full
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One Parquet file being encoded and uploaded: each row group's bytes go to the upload
/// once the encoder has flushed it.
struct ParquetUpload {
    encoder: ArrowWriter<ChunkSink>,
    upload: BufWriter,
}

impl ParquetUpload {
    fn new(
        store: StoreRef,
        path: Path,
        format: &GroupFormat,
        shape: &FileShape,
    ) -> parquet::errors::Result<Self> {
        Ok(Self {
            encoder: ArrowWriter::try_new(
                ChunkSink::default(),
                format.schema.clone(),
                Some(properties(format, shape)),
            )?,
            upload: crate::store::objects::upload(&store, path),
        })
    }

    fn bytes_written(&self) -> usize {
        self.encoder.bytes_written()
    }

    fn in_progress_size(&self) -> usize {
        self.encoder.in_progress_size()
    }

    fn append_key_value_metadata(&mut self, kv: KeyValue) {
        self.encoder.append_key_value_metadata(kv);
    }

    async fn write(&mut self, batch: &arrow::record_batch::RecordBatch) -> Result<()> {
        let before = self.encoder.flushed_row_groups().len();
        self.encoder.write(batch).map_err(parquet_error)?;
        if self.encoder.flushed_row_groups().len() != before {
            self.send().await?;
        }
        Ok(())
    }

    /// Hands the encoded bytes to the upload (which writes a part once it holds one).
    async fn send(&mut self) -> Result<()> {
        for chunk in self.encoder.inner_mut().take() {
            self.upload
                .put(chunk)
                .await
                .map_err(|e| Error::Internal(format!("upload parquet: {e}")))?;
        }
        Ok(())
    }

    /// Writes the footer and completes the upload.
    async fn close(mut self) -> Result<ParquetMetaData> {
        let md = self.encoder.finish().map_err(parquet_error)?;
        self.send().await?;
        tokio::io::AsyncWriteExt::shutdown(&mut self.upload)
            .await
            .map_err(|e| Error::Internal(format!("complete parquet upload: {e}")))?;
        Ok(md)
    }
}

fn parquet_error(e: parquet::errors::ParquetError) -> Error {
    Error::Internal(format!("parquet: {e}"))
}

struct Open {
    name: String,
    writer: ParquetUpload,
    info: ParquetFileInfo,
    /// No key has more than one version in the file so far.
    distinct: bool,
}

/// Writes group-local versions (in key, sequence-descending order) into files named
/// `<prefix>-<n>` via `path_of`.
pub struct RunWriter {
    store: StoreRef,
    format: Arc<GroupFormat>,
    shape: FileShape,
    prefix: String,
    path_of: Box<dyn Fn(&str) -> Path + Send + Sync>,
    open: Option<Open>,
    pending: Vec<Entry>,
    next: usize,
    done: Vec<ParquetFileInfo>,
}

const BATCH_ROWS: usize = 4096;

impl RunWriter {
    /// A writer of one run.
    pub fn new(
        store: StoreRef,
        format: Arc<GroupFormat>,
        shape: FileShape,
        prefix: String,
        path_of: Box<dyn Fn(&str) -> Path + Send + Sync>,
    ) -> Self {
        Self {
            store,
            format,
            shape,
            prefix,
            path_of,
            open: None,
            pending: Vec::new(),
            next: 0,
            done: Vec::new(),
        }
    }

    /// Adds the versions of one key (newest first). Files end only between keys.
    pub async fn add_key(&mut self, versions: Vec<Entry>) -> Result<()> {
        if versions.is_empty() {
            return Ok(());
        }
        if let Some(o) = &self.open
            && o.writer.bytes_written() as u64 + o.writer.in_progress_size() as u64
                >= self.shape.file_bytes_target
        {
            self.write_pending().await?;
            self.close_file().await?;
        }
        if self.open.is_none() {
            let name = format!("{}-{:04}", self.prefix, self.next);
            self.next += 1;
            let path = (self.path_of)(&name);
            let writer = ParquetUpload::new(self.store.clone(), path, &self.format, &self.shape)
                .map_err(|e| Error::Internal(format!("parquet writer: {e}")))?;
            self.open = Some(Open {
                name: name.clone(),
                writer,
                info: ParquetFileInfo {
                    name,
                    key_min: versions[0].key.to_vec(),
                    key_max: Vec::new(),
                    seq_min: u64::MAX,
                    seq_max: 0,
                    rows: 0,
                    size_bytes: 0,
                    tail_offset: 0,
                },
                distinct: true,
            });
        }
        if let Some(o) = self.open.as_mut() {
            o.info.key_max = versions[0].key.to_vec();
            for v in &versions {
                o.info.seq_min = o.info.seq_min.min(v.seq);
                o.info.seq_max = o.info.seq_max.max(v.seq);
            }
            o.info.rows += versions.len() as u64;
            o.distinct &= versions.len() == 1;
        }
        self.pending.extend(versions);
        // Row groups smaller than a batch are written as they fill, so the file size a
        // split is decided on keeps up with them.
        if self.pending.len() >= BATCH_ROWS.min(self.shape.row_group_rows.max(1)) {
            self.write_pending().await?;
        }
        Ok(())
    }

    async fn write_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = self.format.to_batch(&self.pending)?;
        self.pending.clear();
        let Some(o) = self.open.as_mut() else {
            return Err(Error::Internal("rows without an open file".into()));
        };
        o.writer
            .write(&batch)
            .await
            .map_err(|e| Error::Internal(format!("write parquet {}: {e}", o.name)))
    }

    async fn close_file(&mut self) -> Result<()> {
        let Some(mut o) = self.open.take() else {
            return Ok(());
        };
        // Scans may skip the version columns of files whose keys are distinct (and whose
        // statistics show only visible puts); files without the flag are read in full.
        o.writer.append_key_value_metadata(KeyValue::new(
            DISTINCT_KEYS.to_string(),
            o.distinct.to_string(),
        ));
        let md: ParquetMetaData = o
            .writer
            .close()
            .await
            .map_err(|e| Error::Internal(format!("close parquet {}: {e}", o.name)))?;
        let data_end = md
            .row_groups()
            .iter()
            .flat_map(|rg| rg.columns().iter())
            .map(|c| {
                let (start, len) = c.byte_range();
                start + len
            })
            .max()
            .unwrap_or(4);
        let size = crate::store::objects::head(&self.store, &(self.path_of)(&o.name))
            .await
            .map_err(Error::store(format!("stat parquet {}", o.name)))?
            .size;
        o.info.size_bytes = size;
        o.info.tail_offset = data_end;
        self.done.push(o.info);
        Ok(())
    }

    /// Finishes the last file and returns every file written.
    pub async fn finish(mut self) -> Result<Vec<ParquetFileInfo>> {
        self.write_pending().await?;
        self.close_file().await?;
        Ok(self.done)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::entry::EntryKind;
    use crate::value::Value;
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Schema};
    use object_store::ObjectStoreExt;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn a_chunk_sink_keeps_what_it_is_given_in_order_in_fixed_buffers() {
        let mut sink = ChunkSink::default();
        let mut want = Vec::new();
        for (i, n) in [10usize, SINK_CHUNK_BYTES, 3, SINK_CHUNK_BYTES * 2 + 5, 0, 7]
            .into_iter()
            .enumerate()
        {
            let piece = vec![i as u8; n];
            sink.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        let chunks = sink.take();
        let (last, full) = chunks.split_last().unwrap();
        assert!(full.iter().all(|c| c.len() == SINK_CHUNK_BYTES));
        assert!(!last.is_empty() && last.len() <= SINK_CHUNK_BYTES);
        assert_eq!(chunks.concat(), want);
        assert!(sink.take().is_empty(), "taken once");
    }

    /// A file of several row groups and more bytes than one upload part goes through the
    /// multipart path and reads back whole, every value in its row.
    #[tokio::test]
    async fn a_file_larger_than_an_upload_part_reads_back_whole() {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Binary, true),
        ]);
        let format = Arc::new(GroupFormat::new(&schema, &[0], &[1], vec![0]));
        let shape = FileShape {
            file_bytes_target: 1 << 30,
            row_group_rows: 4096,
            page_bytes: 64 << 10,
            page_rows: 4096,
            dictionary_page_bytes: 64 << 10,
        };
        let mut w = RunWriter::new(
            store.clone(),
            format.clone(),
            shape,
            "big".into(),
            Box::new(|name| Path::from(format!("p/{name}.parquet"))),
        );
        // Incompressible values, so the file is as large as its rows.
        let value = |i: u64| -> Vec<u8> {
            let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..1000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let rows = 20_000u64;
        for i in 0..rows {
            let encoded = format
                .codec
                .encode(&[Some(Value::Bytes(value(i)))])
                .unwrap();
            w.add_key(vec![Entry {
                key: Bytes::from(((i as i64 as u64) ^ (1 << 63)).to_be_bytes().to_vec()),
                seq: 1,
                kind: EntryKind::Put,
                value: Bytes::from(encoded),
            }])
            .await
            .unwrap();
        }
        let info = w.finish().await.unwrap().pop().unwrap();
        assert!(info.size_bytes > 15 << 20, "{} bytes", info.size_bytes);
        let bytes = store
            .get(&Path::from(format!("p/{}.parquet", info.name)))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(bytes.len() as u64, info.size_bytes);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        assert!(reader.metadata().num_row_groups() >= 4);
        let mut seen = 0u64;
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let v = batch.column_by_name("v").unwrap().as_binary::<i32>();
            for r in 0..batch.num_rows() {
                assert_eq!(v.value(r), value(seen).as_slice(), "row {seen}");
                seen += 1;
            }
        }
        assert_eq!(seen, rows);
    }
}
