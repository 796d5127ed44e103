//! Tables created and dropped: catalog updates by CAS, table definitions validated, a
//! dropped table's shards closed and its objects collected later.

use super::*;

impl Db {
    pub(super) async fn update_catalog<T>(
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

    pub(super) async fn create(
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

    /// This node's directory of table `id`: its shards' NVMe-tier SSTs and local logs.
    pub(crate) fn local_table_dir(&self, id: u64) -> std::path::PathBuf {
        self.inner.local_dir.join(format!("tables/{id:020}"))
    }

    /// Removes this node's directory of dropped table `id`, unless the table is open here
    /// (it never is once dropped: [`Db::drop_table`] closes it). Best effort: a directory
    /// left behind is removed by the next pass.
    async fn remove_local_table_dir(&self, id: u64) {
        if self.inner.open.lock().await.contains_key(&id) {
            return;
        }
        let dir = self.local_table_dir(id);
        match crate::localfs::remove_dir_all(&dir).await {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed a dropped table's local directory")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "removing a dropped table's local directory")
            }
        }
    }

    /// Garbage collection of dropped tables: deletes every object of a table dropped at
    /// least `gc.min_age_ms` ago (its shards' directories, compaction jobs and shard
    /// leases) and this node's local directory of it, and
    /// forgets it in the catalog once a pass finds nothing left (a worker still finishing
    /// one of its jobs may write an output after the first pass). Returns the objects
    /// deleted. Deletes are idempotent, so every ingest node of a cluster may run it.
    pub async fn collect_dropped(&self) -> Result<u64> {
        use crate::store::objects;
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
                let listed = objects::list(store, &dir, &format!("list {dir}")).await?;
                named.extend(listed);
            }
        }
        for d in dropped.iter().filter(|d| now >= d.dropped_at_ms + min_age) {
            let table_dir = self.inner.layout.table_dir(d.id);
            let mut objects: Vec<object_store::path::Path> =
                objects::list(store, &table_dir, &format!("list dropped table {}", d.name))
                    .await?
                    .into_iter()
                    .map(|m| m.location)
                    .collect();
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
                self.remove_local_table_dir(d.id).await;
                gone.push(d.id);
                continue;
            }
            // A query that began before the drop pins the shards it reads: wait for it
            // (a lease of slack on the reader's expiry, for a reader clock behind ours).
            let mut pinned = false;
            for o in objects.iter().filter(|o| o.as_ref().contains("/pins/")) {
                let rec = objects::read(store, o)
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<crate::store::pins::PinRecord>(&b).ok());
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
            deleted += objects::delete_all(store, objects).await?;
            self.remove_local_table_dir(d.id).await;
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
}
