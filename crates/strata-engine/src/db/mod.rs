//! The embedded database: the catalog of tables and the shards this process writes.

mod catalog;
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
    s3: crate::context::ProcessContext,
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
        Self::open_with_store(
            store,
            fault,
            metrics,
            config.local_dir,
            config.engine,
            clock::system(),
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
        let s3 = crate::context::ProcessContext {
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
            },
            layout: layout.clone(),
            jobs_published: Arc::default(),
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
            .with_wake(s3.jobs_published.clone());
            worker_stats.push(w.stats.clone());
            let cancel = workers.clone();
            tokio::spawn(async move { w.run(cancel).await });
        }
        let remote = crate::read::view::RemoteViews::new(
            store.clone(),
            s3.reads.clone(),
            clock.clone(),
            local_dir.join("views"),
            config.pin_lease_ms,
        );
        let db = Db {
            inner: Arc::new(DbInner {
                remote,
                s3,
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

    async fn update_catalog<T>(
        &self,
        mut change: impl FnMut(&mut Catalog) -> Result<T>,
    ) -> Result<T> {
        loop {
            let chain = self.inner.catalog.chain();
            let latest = chain.latest().await?;
            let mut next = latest.as_ref().map(|v| v.value.clone()).unwrap_or_default();
            let out = change(&mut next)?;
            match chain.commit(latest.as_ref(), next).await {
                Ok(v) => {
                    self.inner.catalog.committed(v);
                    return Ok(out);
                }
                Err(strata_manifest::Error::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Creates a table with `schema` and a primary key of the named columns.
    pub async fn create_table(
        &self,
        name: &str,
        schema: Schema,
        primary_key: &[&str],
    ) -> Result<TableEntry> {
        self.create(name, schema, primary_key, TableKind::Table, None)
            .await
    }

    /// Creates a table with a column-group layout for its S3 levels (LASER §4):
    /// `layout[i]` partitions the non-key columns for S3 level i+1, and each group of a
    /// level must lie inside one group of the level above. Invalid layouts are rejected.
    pub async fn create_table_with_layout(
        &self,
        name: &str,
        schema: Schema,
        primary_key: &[&str],
        layout: Vec<Vec<Vec<String>>>,
    ) -> Result<TableEntry> {
        self.create(name, schema, primary_key, TableKind::Table, Some(layout))
            .await
    }

    /// Creates a key-value namespace (`key: binary` primary key, `value: binary`).
    pub async fn create_kv_namespace(&self, name: &str) -> Result<TableEntry> {
        self.create(
            name,
            key_value_schema(),
            &["key"],
            TableKind::KeyValue,
            None,
        )
        .await
    }

    async fn create(
        &self,
        name: &str,
        schema: Schema,
        primary_key: &[&str],
        kind: TableKind,
        layout: Option<Vec<Vec<Vec<String>>>>,
    ) -> Result<TableEntry> {
        validate_name(name)?;
        let pk: Vec<String> = primary_key.iter().map(|s| s.to_string()).collect();
        validate_definition(&schema, &pk)?;
        let layout = match layout {
            Some(l) => l,
            None => crate::schema::default_layout(&schema, &pk, self.inner.config.s3_levels),
        };
        crate::schema::validate_layout(&schema, &pk, &layout)?;
        let now = self.inner.clock.now_ms();
        self.update_catalog(|c| {
            if c.tables.contains_key(name) {
                return Err(Error::TableExists(name.to_string()));
            }
            let entry = TableEntry {
                id: c.next_table_id,
                name: name.to_string(),
                kind,
                schema: schema.clone(),
                primary_key: pk.clone(),
                shards: vec![ShardEntry {
                    id: 0,
                    key_start: Vec::new(),
                    key_end: None,
                }],
                column_groups: layout.clone(),
                created_at_ms: now,
            };
            c.next_table_id += 1;
            c.tables.insert(name.to_string(), entry.clone());
            Ok(entry)
        })
        .await
    }

    /// Whether the bucket answers now: one HEAD request for an object that need not exist
    /// (not found is an answer). The error says why not, for readiness probes.
    pub async fn probe_store(&self) -> Result<()> {
        use object_store::ObjectStoreExt;
        let path = self.layout().root().clone().join("ready-probe");
        match self.store().head(&path).await {
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

    /// Drops a table; its objects are garbage collected later.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let now = self.inner.clock.now_ms();
        let entry = self
            .update_catalog(|c| {
                let t = c
                    .tables
                    .remove(name)
                    .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
                c.dropped.push(DroppedTable {
                    id: t.id,
                    name: t.name.clone(),
                    dropped_at_ms: now,
                });
                Ok(t)
            })
            .await?;
        if let Some(t) = self.inner.open.lock().await.remove(&entry.id) {
            t.close().await;
        }
        if let Some(c) = self.inner.cluster.get() {
            c.forget(entry.id);
        }
        Ok(())
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
            let local = self
                .inner
                .local_dir
                .join(format!("tables/{:020}/{:05}", entry.id, s.id));
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
                    self.inner.s3.clone(),
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

    /// Garbage collection of dropped tables: deletes every object of a table dropped at
    /// least `gc.min_age_ms` ago (its shards' directories, compaction jobs and shard
    /// leases), and
    /// forgets it in the catalog once a pass finds nothing left (a worker still finishing
    /// one of its jobs may write an output after the first pass). Returns the objects
    /// deleted. Deletes are idempotent, so every ingest node of a cluster may run it.
    pub async fn collect_dropped(&self) -> Result<u64> {
        use futures::TryStreamExt;
        use object_store::ObjectStoreExt;
        let now = self.inner.clock.now_ms();
        let min_age = self.inner.config.gc.min_age_ms;
        let dropped: Vec<DroppedTable> = self.catalog().await?.catalog.dropped.clone();
        let store = &self.inner.store;
        let mut deleted = 0u64;
        let mut gone = Vec::new();
        // Its compaction jobs and shard leases are named after its id.
        let mut named: Vec<object_store::ObjectMeta> = Vec::new();
        if !dropped.is_empty() {
            for dir in [self.inner.layout.jobs_dir(), self.inner.layout.leases_dir()] {
                let listed: Vec<object_store::ObjectMeta> = store
                    .list(Some(&dir))
                    .try_collect()
                    .await
                    .map_err(Error::store(format!("list {dir}")))?;
                named.extend(listed);
            }
        }
        for d in dropped.iter().filter(|d| now >= d.dropped_at_ms + min_age) {
            let mut objects: Vec<object_store::path::Path> = store
                .list(Some(&self.inner.layout.table_dir(d.id)))
                .map_ok(|m| m.location)
                .try_collect()
                .await
                .map_err(Error::store(format!("list dropped table {}", d.name)))?;
            let job_prefix = format!("{:020}-", d.id);
            objects.extend(
                named
                    .iter()
                    .filter(|m| {
                        m.location
                            .filename()
                            .is_some_and(|f| f.starts_with(&job_prefix))
                    })
                    .map(|m| m.location.clone()),
            );
            if objects.is_empty() {
                gone.push(d.id);
                continue;
            }
            // A query that began before the drop pins the shards it reads: wait for it
            // (a lease of slack on the reader's expiry, for a reader clock behind ours).
            let mut pinned = false;
            for o in objects.iter().filter(|o| o.as_ref().contains("/pins/")) {
                let rec =
                    match store.get(o).await {
                        Ok(g) => g.bytes().await.ok().and_then(|b| {
                            serde_json::from_slice::<crate::pins::PinRecord>(&b).ok()
                        }),
                        Err(_) => None,
                    };
                if let Some(p) = rec {
                    let lease = p.lease_ms.max(self.inner.config.pin_lease_ms);
                    if p.expires_at_ms.saturating_add(lease) >= now {
                        pinned = true;
                        break;
                    }
                }
            }
            if pinned {
                tracing::debug!(table = d.name, "dropped table still pinned by a reader");
                continue;
            }
            let count = objects.len();
            deleted += crate::gc::delete_all(store, objects).await?;
            tracing::info!(table = d.name, objects = count, "collected a dropped table");
        }
        if !gone.is_empty() {
            self.update_catalog(|c| {
                c.dropped.retain(|d| !gone.contains(&d.id));
                Ok(())
            })
            .await?;
        }
        Ok(deleted)
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

    /// Makes this process an ingest node of a cluster: from now on it serves (and writes)
    /// only the shards it holds a lease on, claims free shards it is preferred for, takes
    /// over shards of nodes that died, and answers [`Error::NotOwner`] for the rest (see
    /// [`crate::cluster`]). Runs until [`Db::close`].
    pub async fn join_cluster(&self, config: crate::cluster::ClusterConfig) -> Result<()> {
        let cluster = Arc::new(crate::cluster::Cluster::new(
            config,
            self.inner.store.clone(),
            self.inner.layout.clone(),
            self.inner.clock.clone(),
        )?);
        cluster.refresh_nodes().await?;
        if self.inner.cluster.set(cluster.clone()).is_err() {
            return Err(Error::Invalid("already joined a cluster".into()));
        }
        let weak = Arc::downgrade(&self.inner);
        let cancel = self.inner.workers.clone();
        let every = std::time::Duration::from_millis(cluster.config.renew_ms);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                let Some(inner) = weak.upgrade() else { return };
                let db = Db { inner };
                db.cluster_round(&cluster).await;
            }
        });
        Ok(())
    }

    /// One round of an ingest node: liveness, lease renewal, claiming free shards.
    async fn cluster_round(&self, c: &crate::cluster::Cluster) {
        let live = match c.refresh_nodes().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("refreshing cluster nodes: {e}");
                c.live()
            }
        };
        for (table_id, _) in c.renew().await {
            if let Some(t) = self.inner.open.lock().await.remove(&table_id) {
                tracing::warn!(table = t.name(), "lost the shard lease: closing the table");
                t.close().await;
            }
        }
        // A shard fenced while this node still holds its lease (a writer that owns no lease
        // opened it: an operator's process, a node that took it over on a stale view) is
        // taken back now rather than left refusing writes until a restart: reopened, its
        // writer epoch fences the intruder and its WAL is replayed.
        let fenced = self
            .take_open(|id, t| t.fenced_shards().iter().any(|s| c.holds(id, *s)))
            .await;
        for t in fenced {
            tracing::warn!(
                table = t.name(),
                "fenced by another writer while holding the shard lease: reopening"
            );
            t.close().await;
            if let Err(e) = self.table(t.name()).await {
                tracing::warn!(table = t.name(), "reopening a fenced shard: {e}");
            }
        }
        let tables = match self.list_tables().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("reading the catalog: {e}");
                return;
            }
        };
        for entry in tables {
            for s in &entry.shards {
                if c.holds(entry.id, s.id) {
                    continue;
                }
                let preferred = crate::cluster::preferred(&live, entry.id, s.id)
                    .is_some_and(|p| p.name == c.config.node);
                match c.ensure(&entry.name, entry.id, s.id).await {
                    Ok(_) => {
                        // Open it now: the writer epoch fences a previous owner and the WAL
                        // is replayed before the first request arrives.
                        if let Err(e) = self.table(&entry.name).await {
                            tracing::warn!(table = entry.name, "opening a claimed shard: {e}");
                        }
                    }
                    Err(Error::NotOwner { .. }) => {}
                    Err(e) if preferred => {
                        tracing::warn!(table = entry.name, shard = s.id, "claiming: {e}")
                    }
                    Err(_) => {}
                }
            }
        }
    }

    /// The ownership lease of each shard of a table, when this process is in a cluster
    /// (None otherwise).
    pub async fn shard_leases(
        &self,
        entry: &TableEntry,
    ) -> Result<Option<Vec<Option<crate::cluster::ShardLease>>>> {
        let Some(c) = self.inner.cluster.get() else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for s in &entry.shards {
            out.push(c.lease(entry.id, s.id).await?);
        }
        Ok(Some(out))
    }

    /// The live ingest nodes of the cluster as of the last round (empty outside a cluster).
    pub fn cluster_nodes(&self) -> Vec<crate::cluster::NodeInfo> {
        self.inner
            .cluster
            .get()
            .map(|c| c.live())
            .unwrap_or_default()
    }

    /// The decoded-page cache of point lookups into columnar levels: (bytes held, pages
    /// held, hits, misses). Its bytes stay within `page_cache_bytes`.
    pub fn page_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.s3.reads.metas.page_stats()
    }

    /// The decoded-column cache of scans over columnar levels: (bytes held, column chunks
    /// held, hits, misses). Its bytes stay within `scan_cache_bytes`.
    pub fn scan_cache_stats(&self) -> (u64, usize, u64, u64) {
        self.inner.s3.reads.metas.column_stats()
    }

    /// The hotness tracker's sizes and counters, when it is enabled.
    pub fn hotness_stats(&self) -> Option<crate::hotness::TrackerStats> {
        self.inner.s3.hotness.as_ref().map(|t| t.stats())
    }

    /// The hotness tracker, when it is enabled.
    pub fn hotness(&self) -> Option<&Arc<crate::hotness::HotnessTracker>> {
        self.inner.s3.hotness.as_ref()
    }

    /// Whether this process is an ingest node of a cluster.
    pub fn in_cluster(&self) -> bool {
        self.inner.cluster.get().is_some()
    }

    /// This node's name in the cluster.
    pub fn cluster_node(&self) -> Option<String> {
        self.inner.cluster.get().map(|c| c.config.node.clone())
    }

    /// The shards this node holds leases on, as (table id, shard id).
    pub fn held_shards(&self) -> Vec<(u64, u32)> {
        self.inner
            .cluster
            .get()
            .map(|c| c.held())
            .unwrap_or_default()
    }
}
