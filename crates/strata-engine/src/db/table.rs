//! An open table (writes, point reads, scans, snapshots, the key-value API) and the
//! read-only view of one.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use strata_manifest::{ShardEntry, TableEntry};

use crate::config::{EngineConfig, WriteOptions};
use crate::error::{Error, Result};
use crate::schema::{Mutation, TableSchema};
use crate::shard::{Shard, ShardSnapshot};
use crate::value::Value;

/// A consistent read-only view of a table: one pinned [`crate::read::view::ShardView`] per shard.
#[derive(Debug)]
pub struct TableView {
    /// The engine's view of the table.
    pub schema: Arc<TableSchema>,
    /// The catalog entry (shard key ranges).
    pub entry: TableEntry,
    /// One view per shard, in shard order.
    pub shards: Vec<crate::read::view::ShardView>,
}

pub(super) struct TableInner {
    pub(super) schema: Arc<TableSchema>,
    pub(super) shards: Vec<(ShardEntry, Shard)>,
    pub(super) config: EngineConfig,
}

/// An open table.
#[derive(Clone)]
pub struct Table {
    pub(super) inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.name())
    }
}

/// A pinned snapshot of a table (one pin per shard).
#[derive(Debug)]
pub struct Snapshot {
    shards: Vec<ShardSnapshot>,
}

impl Snapshot {
    /// The sequence number of the first shard (tables have one shard until splitting).
    pub fn seq(&self) -> u64 {
        self.shards.first().map_or(0, |s| s.seq())
    }
}

/// A key-range scan.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions<'a> {
    /// Inclusive start: values of the first key columns (all or a prefix); None = first key.
    pub start: Option<Vec<Value>>,
    /// Exclusive end, like `start`; None = after the last key.
    pub end: Option<Vec<Value>>,
    /// Most rows returned.
    pub limit: usize,
    /// Columns to return; None = all.
    pub projection: Option<&'a [&'a str]>,
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        self.inner.schema.name()
    }

    /// The schema of rows read back.
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.read_schema.clone()
    }

    /// The engine's view of the table.
    pub fn table_schema(&self) -> &Arc<TableSchema> {
        &self.inner.schema
    }

    /// The shards (one per key range).
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.inner.shards.iter().map(|(_, s)| s)
    }

    /// The shard ids whose writers a newer writer fenced.
    pub(crate) fn fenced_shards(&self) -> Vec<u32> {
        self.inner
            .shards
            .iter()
            .filter(|(_, s)| s.is_fenced())
            .map(|(e, _)| e.id)
            .collect()
    }

    fn shard_index(&self, key: &[u8]) -> usize {
        self.inner
            .shards
            .iter()
            .position(|(e, _)| {
                e.key_start.as_slice() <= key && e.key_end.as_deref().is_none_or(|end| key < end)
            })
            .unwrap_or(0)
    }

    /// Writes mutations atomically per shard; returns the sequence number of the write (of
    /// the last shard written when the batch spans shards).
    pub async fn write(&self, mutations: &[Mutation], opts: WriteOptions) -> Result<u64> {
        let prepared = self.inner.schema.prepare(mutations, &self.inner.config)?;
        if self.inner.shards.len() == 1 {
            return self.inner.shards[0]
                .1
                .write(prepared, opts.durability)
                .await;
        }
        let mut per_shard: Vec<Vec<_>> = vec![Vec::new(); self.inner.shards.len()];
        for p in prepared {
            per_shard[self.shard_index(&p.key)].push(p);
        }
        let mut seq = 0;
        for (i, entries) in per_shard.into_iter().enumerate() {
            if !entries.is_empty() {
                seq = self.inner.shards[i]
                    .1
                    .write(entries, opts.durability)
                    .await?;
            }
        }
        Ok(seq)
    }

    /// Upserts whole rows.
    pub async fn upsert(&self, batch: RecordBatch) -> Result<u64> {
        self.write(&[Mutation::Upsert(batch)], WriteOptions::default())
            .await
    }

    /// Updates some columns of rows (partial update).
    pub async fn update(&self, batch: RecordBatch) -> Result<u64> {
        self.write(&[Mutation::Update(batch)], WriteOptions::default())
            .await
    }

    /// Deletes rows by key (a batch of the key columns).
    pub async fn delete(&self, keys: RecordBatch) -> Result<u64> {
        self.write(&[Mutation::Delete(keys)], WriteOptions::default())
            .await
    }

    /// Pins a snapshot of the table.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            shards: self
                .inner
                .shards
                .iter()
                .map(|(_, s)| s.snapshot())
                .collect(),
        }
    }

    /// Reads one row by key (values of every key column) with a projection, at the
    /// snapshot or the latest state. Returns a one-row batch, or None.
    pub async fn get(
        &self,
        key: &[Value],
        projection: Option<&[&str]>,
        snapshot: Option<&Snapshot>,
    ) -> Result<Option<RecordBatch>> {
        let schema = &self.inner.schema;
        let cols = schema.projection(projection)?;
        let encoded = schema.encode_key(key)?;
        let i = self.shard_index(&encoded);
        let snap = snapshot.and_then(|s| s.shards.get(i));
        let row = self.inner.shards[i].1.get(encoded.clone(), snap).await?;
        match row {
            None => Ok(None),
            Some(values) => Ok(Some(schema.to_batch(&[(encoded.into(), values)], &cols)?)),
        }
    }

    /// Scans a key range in key order.
    pub async fn scan(
        &self,
        opts: &ScanOptions<'_>,
        snapshot: Option<&Snapshot>,
    ) -> Result<RecordBatch> {
        let schema = &self.inner.schema;
        let cols = schema.projection(opts.projection)?;
        let encode_prefix = |vals: &Vec<Value>| -> Result<Vec<u8>> {
            if vals.len() > schema.key_types.len() {
                return Err(Error::Invalid(
                    "scan bound has more values than key columns".into(),
                ));
            }
            crate::keycodec::encode_key(&schema.key_types[..vals.len()], vals)
        };
        let start = opts
            .start
            .as_ref()
            .map(encode_prefix)
            .transpose()?
            .unwrap_or_default();
        let end = opts.end.as_ref().map(encode_prefix).transpose()?;
        let limit = if opts.limit == 0 {
            usize::MAX
        } else {
            opts.limit
        };
        // Each column read once; the output takes them in the order asked for.
        let mut unique = cols.clone();
        unique.sort_unstable();
        unique.dedup();
        let out_schema = Arc::new(
            schema
                .read_schema
                .project(&unique)
                .map_err(|e| Error::Invalid(format!("projection: {e}")))?,
        );
        let mut batches = Vec::new();
        let mut rows = 0;
        for (i, (entry, shard)) in self.inner.shards.iter().enumerate() {
            if rows >= limit {
                break;
            }
            if entry
                .key_end
                .as_deref()
                .is_some_and(|e| e <= start.as_slice())
                || end
                    .as_deref()
                    .is_some_and(|e| e <= entry.key_start.as_slice())
            {
                continue;
            }
            let snap = snapshot.and_then(|s| s.shards.get(i));
            let got = shard
                .scan(
                    start.clone(),
                    end.clone(),
                    unique.clone(),
                    limit - rows,
                    snap,
                )
                .await?;
            rows += got.iter().map(|b| b.num_rows()).sum::<usize>();
            batches.extend(got);
        }
        let all = arrow::compute::concat_batches(&out_schema, &batches)
            .map_err(|e| Error::Internal(format!("building result batch: {e}")))?;
        let order: Vec<usize> = cols
            .iter()
            .map(|c| unique.binary_search(c).expect("a column asked for"))
            .collect();
        all.project(&order)
            .map_err(|e| Error::Internal(format!("building result batch: {e}")))
    }

    /// Flushes every shard's memtables to SSTs.
    pub async fn flush(&self) -> Result<()> {
        for (_, s) in &self.inner.shards {
            s.flush().await?;
        }
        Ok(())
    }

    /// Runs due compactions on every shard.
    pub async fn compact(&self) -> Result<()> {
        for (_, s) in &self.inner.shards {
            s.compact().await?;
        }
        Ok(())
    }

    /// Moves everything in the NVMe tier down to the S3 levels now (through compaction
    /// jobs, run by this process's or external workers), waiting until committed.
    pub async fn drain_to_bucket(&self) -> Result<()> {
        for (_, s) in &self.inner.shards {
            s.drain_to_bucket().await?;
        }
        Ok(())
    }

    /// Moves column group `group` of S3 level `level` (0-based) down one level now
    /// (CG-local compaction), waiting until committed.
    pub async fn compact_column_group(&self, level: usize, group: usize) -> Result<()> {
        for (_, s) in &self.inner.shards {
            s.compact_column_group(level, group).await?;
        }
        Ok(())
    }

    /// Waits until every published compaction job is settled.
    pub async fn wait_jobs(&self) -> Result<()> {
        for (_, s) in &self.inner.shards {
            s.wait_jobs().await?;
        }
        Ok(())
    }

    /// Runs garbage collection on every shard.
    pub async fn gc(&self) -> Result<crate::gc::GcReport> {
        let mut total = crate::gc::GcReport::default();
        for (_, s) in &self.inner.shards {
            let r = s.gc().await?;
            total.ssts_deleted += r.ssts_deleted;
            total.wal_segments_deleted += r.wal_segments_deleted;
            total.manifests_deleted += r.manifests_deleted;
            total.parquet_deleted += r.parquet_deleted;
            total.jobs_deleted += r.jobs_deleted;
        }
        Ok(total)
    }

    /// Stops the table's shards.
    pub async fn close(&self) {
        // Concurrently: each shard may wait for its WAL uploads (`CLOSE_UPLOAD_WAIT`).
        futures::future::join_all(self.inner.shards.iter().map(|(_, s)| s.close())).await;
    }

    fn kv_batch(&self, keys: &[&[u8]], values: Option<&[&[u8]]>) -> Result<RecordBatch> {
        if !self.inner.schema.is_key_value() {
            return Err(Error::Invalid(format!(
                "{} is not a key-value namespace",
                self.name()
            )));
        }
        let key_field = self.inner.schema.schema.field(0).clone();
        let mut fields = vec![key_field];
        let mut cols: Vec<arrow::array::ArrayRef> = vec![Arc::new(
            arrow::array::BinaryArray::from_iter_values(keys.iter()),
        )];
        if let Some(values) = values {
            fields.push(self.inner.schema.schema.field(1).clone());
            cols.push(Arc::new(arrow::array::BinaryArray::from_iter_values(
                values.iter(),
            )));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
            .map_err(|e| Error::Invalid(e.to_string()))
    }

    /// Key-value namespaces: puts pairs atomically.
    pub async fn kv_put(&self, pairs: &[(&[u8], &[u8])], opts: WriteOptions) -> Result<u64> {
        let keys: Vec<&[u8]> = pairs.iter().map(|p| p.0).collect();
        let values: Vec<&[u8]> = pairs.iter().map(|p| p.1).collect();
        let batch = self.kv_batch(&keys, Some(&values))?;
        self.write(&[Mutation::Upsert(batch)], opts).await
    }

    /// Key-value namespaces: reads a value.
    pub async fn kv_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if !self.inner.schema.is_key_value() {
            return Err(Error::Invalid(format!(
                "{} is not a key-value namespace",
                self.name()
            )));
        }
        let encoded = self
            .inner
            .schema
            .encode_key(&[Value::Bytes(key.to_vec())])?;
        let i = self.shard_index(&encoded);
        Ok(self.inner.shards[i]
            .1
            .get(encoded, None)
            .await?
            .and_then(|v| match v.into_iter().next() {
                Some(Some(Value::Bytes(b))) => Some(b),
                _ => None,
            }))
    }

    /// Key-value namespaces: deletes keys.
    pub async fn kv_delete(&self, keys: &[&[u8]]) -> Result<u64> {
        let batch = self.kv_batch(keys, None)?;
        self.write(&[Mutation::Delete(batch)], WriteOptions::default())
            .await
    }
}
