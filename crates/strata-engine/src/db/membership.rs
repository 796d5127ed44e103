//! This process as an ingest node of a cluster: joining, the membership and lease rounds
//! that take and hand back shards, and what the node holds.

use super::*;

impl Db {
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
                    biased;
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
    pub(super) async fn cluster_round(&self, c: &crate::cluster::Cluster) {
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
