//! The embedded database: the catalog of tables and the shards this process writes.

mod catalog;
mod ddl;
mod membership;
mod table;

pub use catalog::{CatalogSnapshot, MISS_RECHECK};
use table::TableInner;
pub use table::{ScanOptions, Snapshot, Table, TableView};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::Schema;
use strata_common::clock::{self, ClockRef};
use strata_manifest::{
    Catalog, DroppedTable, Layout, ShardEntry, TableEntry, TableKind, VersionedStore,
};
use strata_objstore::{FaultInjectingStore, ObjectStoreConfig, ObjectStoreMetrics, StoreRef};

use crate::config::EngineConfig;
use crate::error::{Error, Result};
use crate::schema::{TableSchema, key_value_schema, validate_definition};
use crate::shard::Shard;

/// How to open a database.
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// The bucket.
    pub store: ObjectStoreConfig,
    /// The local directory standing for NVMe (holds SSTs; losing it loses nothing).
    pub local_dir: PathBuf,
    /// Engine settings.
    pub engine: EngineConfig,
}

struct DbInner {
    store: StoreRef,
    fault: Option<Arc<FaultInjectingStore>>,
    metrics: ObjectStoreMetrics,
    layout: Layout,
    config: EngineConfig,
    local_dir: PathBuf,
    clock: ClockRef,
    catalog: catalog::CatalogCache,
    open: tokio::sync::Mutex<HashMap<u64, Table>>,
    process: crate::context::ProcessContext,
    workers: tokio_util::sync::CancellationToken,
    worker_stats: Vec<Arc<crate::jobs::WorkerStats>>,
    remote: crate::read::view::RemoteViews,
    /// Set when this process is an ingest node of a cluster (shards owned through leases).
    cluster: std::sync::OnceLock<Arc<crate::cluster::Cluster>>,
}

impl Drop for DbInner {
    fn drop(&mut self) {
        self.workers.cancel();
    }
}

/// An embedded Strata database.
#[derive(Clone)]
pub struct Db {
    inner: Arc<DbInner>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({})", self.inner.store)
    }
}

fn validate_name(name: &str) -> Result<()> {
    // `namespace.table` or `table`: each part letters, digits, '_' or '-', not starting with
    // '-' (a namespace groups tables for access control).
    let part = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !p.starts_with('-')
    };
    let ok = name.len() <= 128
        && match name.split_once('.') {
            Some((ns, t)) => ns.len() <= 64 && part(ns) && part(t),
            None => part(name),
        };
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "table name {name:?} must be 1-128 characters of letters, digits, '_' or '-', optionally prefixed by a namespace and a dot (sales.orders)"
        )))
    }
}

impl Db {
    /// Opens the database in the configured bucket.
    pub async fn open(config: DbConfig) -> Result<Db> {
        let metrics = ObjectStoreMetrics::default();
        let (store, fault) = strata_objstore::build(&config.store, &metrics).await?;
        // The standard decorators over a local directory: an SST's file can stand for its
        // upload's payload (`strata_objstore::LocalSource::instead_of_payload`).
        let local_bucket = matches!(
            config.store.backend,
            strata_objstore::BackendConfig::Local { .. }
        );
        Self::open_on(
            store,
            fault,
            metrics,
            config.local_dir,
            config.engine,
            clock::system(),
            local_bucket,
        )
        .await
    }

    /// Opens the database on an already built store (tests inject clocks and stores here).
    pub async fn open_with_store(
        store: StoreRef,
        fault: Option<Arc<FaultInjectingStore>>,
        metrics: ObjectStoreMetrics,
        local_dir: PathBuf,
        config: EngineConfig,
        clock: ClockRef,
    ) -> Result<Db> {
        Self::open_on(store, fault, metrics, local_dir, config, clock, false).await
    }

    /// Opens the database on `store`; `local_bucket` says it is a local directory under the
    /// standard decorators (`strata_objstore::build`), which take an SST's file in place of
    /// its upload's payload.
    async fn open_on(
        store: StoreRef,
        fault: Option<Arc<FaultInjectingStore>>,
        metrics: ObjectStoreMetrics,
        local_dir: PathBuf,
        config: EngineConfig,
        clock: ClockRef,
        local_bucket: bool,
    ) -> Result<Db> {
        crate::background::set_nice(config.merge_nice);
        if config.levels < 2 {
            return Err(Error::Invalid(
                "levels must be at least 2 (L0 and L1)".into(),
            ));
        }
        if !(config.history_bytes_ratio >= 0.0 && config.history_bytes_ratio.is_finite()) {
            return Err(Error::Invalid(format!(
                "history_bytes_ratio must be a number >= 0 (0 turns the cap off), got {}",
                config.history_bytes_ratio
            )));
        }
        std::fs::create_dir_all(&local_dir)
            .map_err(Error::io(format!("create {}", local_dir.display())))?;
        let layout = Layout::new(&config.root_prefix);
        let catalog = catalog::CatalogCache::new(
            store.clone(),
            VersionedStore::new(store.clone(), layout.catalog_dir()),
            config.catalog_refresh_ms,
        );
        let cache = crate::columnar::BlockCache::new(crate::columnar::CacheConfig {
            dir: local_dir.join("cache"),
            block_bytes: config.cache_block_bytes,
            budget_bytes: config.cache_bytes_max,
        })?;
        let hotness = if config.hotness.enabled {
            let budget =
                crate::config::nvme_budget_for(config.hotness.nvme_budget_bytes, &local_dir)
                    .map_err(Error::io(format!(
                        "size of the file system of {}",
                        local_dir.display()
                    )))?;
            tracing::info!(
                nvme_budget_bytes = budget,
                derived = config.hotness.nvme_budget_bytes == 0,
                "hotness tracker"
            );
            let mut t = crate::hotness::TrackerConfig::new(local_dir.join("hotness"), budget);
            t.autotune = config.hotness.autotune;
            Some(Arc::new(crate::hotness::HotnessTracker::open(t)?))
        } else {
            None
        };
        let process = crate::context::ProcessContext {
            hotness,
            reads: crate::read::ReadContext {
                cache,
                metas: Arc::new(crate::columnar::MetaCache::with_scan_cache(
                    config.page_cache_bytes,
                    config.scan_cache_bytes,
                )),
                overlays: Arc::new(
                    crate::read::overlay::OverlayCache::new(config.scan_overlay_bytes)
                        .with_refold_bytes(config.scan_memtable_refold_bytes),
                ),
                row_blocks: Arc::new(crate::sst::DecodedBlocks::new(config.row_block_cache_bytes)),
            },
            layout: layout.clone(),
            jobs_published: Arc::default(),
            local_bucket,
        };
        let workers = tokio_util::sync::CancellationToken::new();
        let mut worker_stats = Vec::new();
        for i in 0..config.jobs.inprocess_workers {
            let w = crate::jobs::Worker::new(
                store.clone(),
                layout.clone(),
                crate::jobs::WorkerConfig {
                    name: format!("inprocess-{}-{i}", std::process::id()),
                    lease_ms: config.jobs.lease_ms,
                    heartbeat_ms: config.jobs.heartbeat_ms,
                    poll_ms: config.jobs.poll_ms,
                    idle_poll_max_ms: config.jobs.idle_poll_max_ms,
                    scratch: local_dir.join("scratch"),
                    debug_pause_per_file_ms: 0,
                },
                clock.clone(),
            )
            .with_wake(process.jobs_published.clone());
            worker_stats.push(w.stats.clone());
            let cancel = workers.clone();
            tokio::spawn(async move { w.run(cancel).await });
        }
        let remote = crate::read::view::RemoteViews::new(
            store.clone(),
            process.reads.clone(),
            clock.clone(),
            local_dir.join("views"),
            config.pin_lease_ms,
        );
        let db = Db {
            inner: Arc::new(DbInner {
                remote,
                process,
                workers,
                worker_stats,
                store,
                fault,
                metrics,
                layout,
                config,
                local_dir,
                clock,
                catalog,
                open: tokio::sync::Mutex::new(HashMap::new()),
                cluster: std::sync::OnceLock::new(),
            }),
        };
        // Dropped tables are collected by the processes that collect garbage (writers; a
        // query service runs with GC off).
        let every = db.inner.config.gc.interval_ms;
        if every > 0 {
            let weak = Arc::downgrade(&db.inner);
            let cancel = db.inner.workers.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(every)) => {}
                    }
                    let Some(inner) = weak.upgrade() else { return };
                    if let Err(e) = (Db { inner }).collect_dropped().await {
                        tracing::warn!("collecting dropped tables: {e}");
                    }
                }
            });
        }
        Ok(db)
    }

    /// Where objects live in the bucket.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The object store (decorated).
    pub fn store(&self) -> &StoreRef {
        &self.inner.store
    }

    /// Object-store metrics.
    pub fn object_store_metrics(&self) -> &ObjectStoreMetrics {
        &self.inner.metrics
    }

    /// The fault injector, when configured.
    pub fn fault_injector(&self) -> Option<&Arc<FaultInjectingStore>> {
        self.inner.fault.as_ref()
    }

    /// Whether the bucket answers now: one HEAD request for an object that need not exist
    /// (not found is an answer). The error says why not, for readiness probes.
    pub async fn probe_store(&self) -> Result<()> {
        let path = self.layout().root().clone().join("ready-probe");
        match crate::store::objects::head(self.store(), &path).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(Error::Store {
                context: format!("readiness probe: HEAD {path}"),
                source,
            }),
        }
    }

    /// Every live table (from the catalog cached in this process: see [`Db::catalog`]).
    pub async fn list_tables(&self) -> Result<Vec<TableEntry>> {
        Ok(self
            .catalog()
            .await?
            .catalog
            .tables
            .values()
            .cloned()
            .collect())
    }

    /// The catalog as this process knows it: a commit through this process at once, one by
    /// another process within `catalog_refresh_ms` (one HEAD request per interval, made by
    /// the first lookup after it). Tables open here that the newer catalog no longer holds
    /// (dropped elsewhere) are closed: their writes are refused from then on.
    pub async fn catalog(&self) -> Result<Arc<CatalogSnapshot>> {
        let (snap, changed) = self.inner.catalog.current().await?;
        if changed {
            self.close_dropped(&snap).await;
        }
        Ok(snap)
    }

    /// The catalog holding `name`: checked against the bucket again on a miss (at most
    /// once per [`MISS_RECHECK`]), so a table created elsewhere is found at once.
    async fn catalog_with(&self, name: &str) -> Result<Arc<CatalogSnapshot>> {
        let snap = self.catalog().await?;
        if snap.entry(name).is_some() {
            return Ok(snap);
        }
        let (snap, changed) = self.inner.catalog.after_miss().await?;
        if changed {
            self.close_dropped(&snap).await;
        }
        Ok(snap)
    }

    /// The engine's view of a live table, from the cached catalog (checked again on a miss,
    /// like [`Db::table`]): a table another process just created is found at once.
    pub async fn table_schema(&self, name: &str) -> Result<Arc<TableSchema>> {
        self.catalog_with(name).await?.schema(name)
    }

    /// Removes the open tables `which` picks (by table id) and returns them, to be closed.
    async fn take_open(&self, which: impl Fn(u64, &Table) -> bool) -> Vec<Table> {
        let mut open = self.inner.open.lock().await;
        let ids: Vec<u64> = open
            .iter()
            .filter(|(id, t)| which(**id, t))
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| open.remove(id)).collect()
    }

    async fn close_dropped(&self, snap: &CatalogSnapshot) {
        let gone = self.take_open(|id, _| !snap.has_id(id)).await;
        for t in gone {
            tracing::warn!(
                table = t.name(),
                "the table was dropped by another process: closing it here"
            );
            t.close().await;
        }
    }

    /// Opens a table for reading and writing. The first open in this process makes it the
    /// writer of the table's shards, fencing any other writer.
    pub async fn table(&self, name: &str) -> Result<Table> {
        let catalog = self.catalog_with(name).await?;
        let entry = catalog
            .entry(name)
            .cloned()
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        if let Some(c) = self.inner.cluster.get() {
            for s in &entry.shards {
                c.ensure(name, entry.id, s.id).await?;
            }
        }
        let mut open = self.inner.open.lock().await;
        if let Some(t) = open.get(&entry.id) {
            return Ok(t.clone());
        }
        let schema = catalog.schema(name)?;
        let mut shards = Vec::with_capacity(entry.shards.len());
        for s in &entry.shards {
            let local = self.local_table_dir(entry.id).join(format!("{:05}", s.id));
            shards.push((
                s.clone(),
                Shard::open(
                    schema.clone(),
                    s.id,
                    self.inner.layout.shard(entry.id, s.id),
                    self.inner.store.clone(),
                    local,
                    self.inner.config.clone(),
                    self.inner.clock.clone(),
                    self.inner.process.clone(),
                )
                .await?,
            ));
        }
        let table = Table {
            inner: Arc::new(TableInner {
                schema,
                shards,
                config: self.inner.config.clone(),
            }),
        };
        open.insert(entry.id, table.clone());
        Ok(table)
    }

    /// A consistent read-only view of a table (one pinned view per shard) with every write
    /// acknowledged before the call, or as of an older snapshot. Reads the writer's state
    /// when this process writes the table, otherwise the bucket alone (WAL tail included):
    /// query services call this without becoming writers.
    pub async fn view(
        &self,
        name: &str,
        as_of: Option<crate::read::view::AsOf>,
    ) -> Result<TableView> {
        let schema = self.catalog_with(name).await?.schema(name)?;
        self.view_of(schema, as_of).await
    }

    /// [`Db::view`] of a table whose catalog entry the caller already read (a query loads
    /// the catalog once, not once per scan).
    pub async fn view_of(
        &self,
        schema: Arc<TableSchema>,
        as_of: Option<crate::read::view::AsOf>,
    ) -> Result<TableView> {
        let entry = schema.entry.clone();
        let open = self.inner.open.lock().await.get(&entry.id).cloned();
        let mut shards = Vec::with_capacity(entry.shards.len());
        let schema = match &open {
            Some(t) => t.inner.schema.clone(),
            None => schema,
        };
        for (i, s) in entry.shards.iter().enumerate() {
            let view = match &open {
                Some(t) => t.inner.shards[i].1.view()?,
                None => {
                    self.inner
                        .remote
                        .open(schema.clone(), self.inner.layout.shard(entry.id, s.id))
                        .await?
                }
            };
            shards.push(match as_of {
                Some(a) => view.at(a)?,
                None => view,
            });
        }
        Ok(TableView {
            schema,
            entry,
            shards,
        })
    }

    /// The catalog entry of a table.
    pub async fn describe(&self, name: &str) -> Result<TableEntry> {
        self.catalog_with(name)
            .await?
            .entry(name)
            .cloned()
            .ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    /// Counters of this process's compaction workers.
    pub fn worker_stats(&self) -> &[Arc<crate::jobs::WorkerStats>] {
        &self.inner.worker_stats
    }

    /// The tables this process has open as their writer, without any I/O (metrics: a
    /// reader such as the query service has none, and must not open one just to report).
    pub async fn open_tables(&self) -> Vec<Table> {
        let mut out: Vec<Table> = self.inner.open.lock().await.values().cloned().collect();
        out.sort_by(|a, b| a.name().cmp(b.name()));
        out
    }

    /// Stops every open shard and the in-process compaction workers; an ingest node of a
    /// cluster then releases its shard leases so that other nodes take them over at once.
    pub async fn close(&self) {
        self.inner.workers.cancel();
        let open: Vec<Table> = self
            .inner
            .open
            .lock()
            .await
            .drain()
            .map(|(_, t)| t)
            .collect();
        // Concurrently: each shard may wait for its WAL uploads (`CLOSE_UPLOAD_WAIT`).
        futures::future::join_all(open.iter().map(|t| t.close())).await;
        if let Some(c) = self.inner.cluster.get() {
            c.release_all().await;
        }
        // Files retired so far leave the local directory before the process may exit (a
        // shard's next open would remove them; a view's cache directory is not swept).
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), crate::reclaim::settle())
            .await;
    }

    /// The decoded-page cache of point lookups into columnar levels: (bytes held, pages
    /// held, hits, misses). Its bytes stay within `page_cache_bytes`.
    pub fn page_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.process.reads.metas.page_stats()
    }

    /// The decoded-block cache of point reads into row SSTs (L0 and the row levels):
    /// (bytes held, blocks held, hits, blocks read from their files). Its bytes stay within
    /// `row_block_cache_bytes`.
    pub fn row_block_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.process.reads.row_blocks.stats()
    }

    /// The decoded-column cache of scans over columnar levels: (bytes held, column chunks
    /// held, hits, misses). Its bytes stay within `scan_cache_bytes`.
    pub fn scan_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.process.reads.metas.column_stats()
    }

    /// The local-disk cache of the columnar levels' data blocks and file tails: (bytes
    /// held, files held, reads answered from it, reads that fetched from the bucket). Its
    /// bytes stay within `cache_bytes_max`.
    pub fn block_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.process.reads.cache.stats()
    }

    /// The hotness tracker's sizes and counters, when it is enabled.
    pub fn hotness_stats(&self) -> Option<crate::hotness::TrackerStats> {
        self.inner.process.hotness.as_ref().map(|t| t.stats())
    }

    /// The hotness tracker, when it is enabled.
    pub fn hotness(&self) -> Option<&Arc<crate::hotness::HotnessTracker>> {
        self.inner.process.hotness.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a bucket configured as a local directory (the standard decorators over it) is
    /// given SST uploads whose file stands for the payload; a memory bucket and any store
    /// handed in get the bytes.
    #[tokio::test]
    async fn only_a_configured_local_directory_takes_an_sst_file_for_its_payload() {
        let dir = tempfile::tempdir().unwrap();
        let open = |store: ObjectStoreConfig, local: &str| {
            Db::open(DbConfig {
                store,
                local_dir: dir.path().join(local),
                engine: EngineConfig::default(),
            })
        };
        let local = open(ObjectStoreConfig::local(dir.path().join("bucket")), "a")
            .await
            .unwrap();
        assert!(local.inner.process.local_bucket);
        local.close().await;
        let memory = open(ObjectStoreConfig::memory(), "b").await.unwrap();
        assert!(!memory.inner.process.local_bucket);
        memory.close().await;
        let handed: StoreRef =
            Arc::new(strata_objstore::LocalDirStore::new(&dir.path().join("bucket")).unwrap());
        let handed = Db::open_with_store(
            handed,
            None,
            ObjectStoreMetrics::default(),
            dir.path().join("c"),
            EngineConfig::default(),
            clock::system(),
        )
        .await
        .unwrap();
        assert!(!handed.inner.process.local_bucket);
        handed.close().await;
    }
}
