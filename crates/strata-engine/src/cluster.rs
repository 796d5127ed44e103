//! Shard ownership among ingest nodes: leases in the bucket, no coordinator.
//!
//! Every ingest node of a cluster keeps a liveness record (`cluster/nodes/<node>.json`, its
//! addresses and an expiry it pushes forward every `renew_ms`). A shard is owned through a
//! lease (`cluster/leases/<table>-<shard>.json`: the owner, its addresses, an expiry),
//! created with `If-None-Match` and renewed or taken over with `If-Match`, so two nodes never
//! both succeed. A free or expired lease goes to the shard's preferred node: the live node
//! with the highest rendezvous hash of (node, table, shard), so shards spread over the nodes
//! without any node knowing more than the liveness records. When a node dies, its records
//! expire; the shard's preferred node among the survivors takes the lease over and opens the
//! shard, which bumps the writer epoch (fencing the old owner if it is in fact alive) and
//! replays the WAL from the bucket: every acknowledged write is there.
//!
//! The lease is routing, not safety: a node that lost its lease without noticing is stopped
//! by the writer epoch at its next WAL or manifest write. A node that is asked for a shard it
//! does not own answers [`Error::NotOwner`] with the owner's addresses; the services forward
//! the request there.

use std::collections::HashMap;
use std::sync::Mutex;

use object_store::path::Path;
use object_store::{PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};
use strata_common::clock::ClockRef;
use strata_manifest::Layout;
use strata_objstore::StoreRef;

use crate::error::{Error, Result};
pub use crate::node::NodeInfo;
use crate::store::objects;

/// How this process takes part in a cluster of ingest nodes.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster (letters, digits, '-', '_', '.').
    pub node: String,
    /// The HTTP address other nodes forward requests to (`host:port`).
    pub http: String,
    /// The gRPC (Flight SQL and data API) address clients are redirected to.
    pub flight: String,
    /// How long a lease or liveness record lasts without renewal.
    pub lease_ms: u64,
    /// How often leases and the liveness record are renewed and free shards are claimed.
    pub renew_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeRecord {
    node: NodeInfo,
    expires_at_ms: u64,
}

/// A shard's ownership lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardLease {
    /// The table's id.
    pub table_id: u64,
    /// The shard's id.
    pub shard_id: u32,
    /// The owner.
    pub owner: NodeInfo,
    /// When it lapses unless renewed (milliseconds since the epoch).
    pub expires_at_ms: u64,
    /// How many times the lease changed hands.
    pub generation: u64,
}

struct Held {
    lease: ShardLease,
    version: UpdateVersion,
}

/// This node's view of the cluster: the leases it holds and the live nodes.
pub(crate) struct Cluster {
    pub(crate) config: ClusterConfig,
    store: StoreRef,
    layout: Layout,
    clock: ClockRef,
    held: Mutex<HashMap<(u64, u32), Held>>,
    /// Shards other nodes hold: the owner, and until when that answer is used (ms).
    others: Mutex<HashMap<(u64, u32), (NodeInfo, u64)>>,
    live: Mutex<Vec<NodeInfo>>,
}

fn encode<T: Serialize>(v: &T) -> Result<bytes::Bytes> {
    serde_json::to_vec(v)
        .map(bytes::Bytes::from)
        .map_err(|e| Error::Internal(format!("encode: {e}")))
}

/// FNV-1a: a hash every node computes the same way (rendezvous hashing).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The live node preferred for a shard: highest rendezvous hash.
pub fn preferred(live: &[NodeInfo], table_id: u64, shard_id: u32) -> Option<&NodeInfo> {
    live.iter().max_by_key(|n| {
        (
            fnv(&[
                n.name.as_bytes(),
                &table_id.to_be_bytes(),
                &shard_id.to_be_bytes(),
            ]),
            n.name.clone(),
        )
    })
}

impl Cluster {
    pub(crate) fn new(
        config: ClusterConfig,
        store: StoreRef,
        layout: Layout,
        clock: ClockRef,
    ) -> Result<Self> {
        let ok = !config.node.is_empty()
            && config.node.len() <= 128
            && config
                .node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !ok {
            return Err(Error::Invalid(format!(
                "cluster node name {:?} must be 1-128 letters, digits, '-', '_' or '.'",
                config.node
            )));
        }
        if config.renew_ms == 0 || config.renew_ms * 2 > config.lease_ms {
            return Err(Error::Invalid(format!(
                "cluster renew interval ({} ms) must be positive and at most half the lease ({} ms)",
                config.renew_ms, config.lease_ms
            )));
        }
        Ok(Self {
            config,
            store,
            layout,
            clock,
            held: Mutex::new(HashMap::new()),
            others: Mutex::new(HashMap::new()),
            live: Mutex::new(Vec::new()),
        })
    }

    fn me(&self) -> NodeInfo {
        NodeInfo {
            name: self.config.node.clone(),
            http: self.config.http.clone(),
            flight: self.config.flight.clone(),
        }
    }

    /// Whether this node holds the shard's lease with time to spare (a quarter of a lease:
    /// past that, it stops serving the shard before another node may take it).
    pub(crate) fn holds(&self, table_id: u64, shard_id: u32) -> bool {
        let now = self.clock.now_ms();
        self.held
            .lock()
            .expect("lease table")
            .get(&(table_id, shard_id))
            .is_some_and(|h| h.lease.expires_at_ms > now + self.config.lease_ms / 4)
    }

    /// The shards this node holds.
    pub(crate) fn held(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .held
            .lock()
            .expect("lease table")
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// The live nodes as of the last refresh.
    pub(crate) fn live(&self) -> Vec<NodeInfo> {
        self.live.lock().expect("live nodes").clone()
    }

    /// Pushes this node's liveness record forward and lists the live nodes.
    /// `NotOwner` naming the live node a free or lapsed shard goes to (rendezvous hashing),
    /// when that is another node.
    async fn defer_to_preferred(&self, table: &str, table_id: u64, shard_id: u32) -> Result<()> {
        let mut live = self.live();
        if live.is_empty() {
            live = self.refresh_nodes().await?;
        }
        match preferred(&live, table_id, shard_id) {
            Some(p) if p.name != self.config.node => Err(Error::NotOwner {
                table: table.to_string(),
                shard: shard_id,
                owner: Some(p.clone()),
            }),
            _ => Ok(()),
        }
    }

    pub(crate) async fn refresh_nodes(&self) -> Result<Vec<NodeInfo>> {
        let record = NodeRecord {
            node: self.me(),
            expires_at_ms: self.clock.now_ms() + self.config.lease_ms,
        };
        objects::put(
            &self.store,
            &self.layout.node(&self.config.node),
            encode(&record)?.into(),
        )
        .await
        .map_err(Error::store("write the node's liveness record"))?;
        let listed =
            objects::list(&self.store, &self.layout.nodes_dir(), "list cluster nodes").await?;
        let now = self.clock.now_ms();
        let mut live = Vec::new();
        for m in listed {
            let data = match objects::read(&self.store, &m.location).await {
                Ok(data) => data,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(Error::store("read a node record")(e)),
            };
            match serde_json::from_slice::<NodeRecord>(&data) {
                Ok(r) if r.expires_at_ms > now || r.node.name == self.config.node => {
                    live.push(r.node)
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(path = %m.location, "unreadable node record: {e}"),
            }
        }
        live.sort_by(|a, b| a.name.cmp(&b.name));
        *self.live.lock().expect("live nodes") = live.clone();
        Ok(live)
    }

    async fn read_lease(
        &self,
        table_id: u64,
        shard_id: u32,
    ) -> Result<Option<(ShardLease, UpdateVersion)>> {
        let path = self.layout.shard_lease(table_id, shard_id);
        match objects::get(&self.store, &path).await {
            Ok(g) => {
                let version = UpdateVersion {
                    e_tag: g.meta.e_tag.clone(),
                    version: g.meta.version.clone(),
                };
                let data = g
                    .bytes()
                    .await
                    .map_err(Error::store("read a shard lease"))?;
                let lease = serde_json::from_slice(&data)
                    .map_err(|e| Error::Corrupt(format!("shard lease {path}: {e}")))?;
                Ok(Some((lease, version)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::store("read a shard lease")(e)),
        }
    }

    async fn put_lease(
        &self,
        path: &Path,
        lease: &ShardLease,
        mode: PutMode,
    ) -> Result<Option<UpdateVersion>> {
        match objects::put_opts(
            &self.store,
            path,
            encode(lease)?.into(),
            PutOptions::from(mode),
        )
        .await
        {
            Ok(r) => Ok(Some(UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::store("write a shard lease")(e)),
        }
    }

    /// Makes sure this node owns the shard: holds it already, or claims it when it is free
    /// (or lapsed) and this node is its preferred owner, or its preferred owner let it lapse
    /// for a whole lease. Otherwise [`Error::NotOwner`] names the owner, or the node
    /// expected to become it. Another node's live lease is remembered for a renewal
    /// interval, so requests forwarded away do not each read the lease.
    pub(crate) async fn ensure(&self, table: &str, table_id: u64, shard_id: u32) -> Result<bool> {
        if self.holds(table_id, shard_id) {
            return Ok(false);
        }
        let now = self.clock.now_ms();
        let not_owner = |owner: Option<NodeInfo>| Error::NotOwner {
            table: table.to_string(),
            shard: shard_id,
            owner,
        };
        if let Some((owner, until)) = self
            .others
            .lock()
            .expect("owners")
            .get(&(table_id, shard_id))
            && *until > now
        {
            return Err(not_owner(Some(owner.clone())));
        }
        let current = self.read_lease(table_id, shard_id).await?;
        let mode = match &current {
            Some((l, _)) if l.expires_at_ms > now && l.owner.name != self.config.node => {
                let until = l.expires_at_ms.min(now + self.config.renew_ms);
                self.others
                    .lock()
                    .expect("owners")
                    .insert((table_id, shard_id), (l.owner.clone(), until));
                return Err(not_owner(Some(l.owner.clone())));
            }
            Some((l, v)) => {
                let mine = l.owner.name == self.config.node;
                let lapsed_long = now > l.expires_at_ms + self.config.lease_ms;
                if !mine && !lapsed_long {
                    self.defer_to_preferred(table, table_id, shard_id).await?;
                }
                PutMode::Update(v.clone())
            }
            None => {
                self.defer_to_preferred(table, table_id, shard_id).await?;
                PutMode::Create
            }
        };
        let lease = ShardLease {
            table_id,
            shard_id,
            owner: self.me(),
            expires_at_ms: now + self.config.lease_ms,
            generation: current.as_ref().map_or(1, |(l, _)| l.generation + 1),
        };
        let path = self.layout.shard_lease(table_id, shard_id);
        match self.put_lease(&path, &lease, mode).await? {
            Some(version) => {
                tracing::info!(
                    table,
                    shard = shard_id,
                    generation = lease.generation,
                    previous = current.as_ref().map(|(l, _)| l.owner.name.as_str()),
                    "acquired shard lease"
                );
                self.held
                    .lock()
                    .expect("lease table")
                    .insert((table_id, shard_id), Held { lease, version });
                Ok(true)
            }
            None => {
                // Another node won the race: it is the owner.
                let owner = self
                    .read_lease(table_id, shard_id)
                    .await?
                    .map(|(l, _)| l.owner);
                Err(not_owner(owner))
            }
        }
    }

    /// Renews every held lease; returns the shards whose lease was lost (taken over, or not
    /// renewed in time: this node must stop serving them).
    pub(crate) async fn renew(&self) -> Vec<(u64, u32)> {
        let now = self.clock.now_ms();
        let held: Vec<(u64, u32, ShardLease, UpdateVersion)> = self
            .held
            .lock()
            .expect("lease table")
            .iter()
            .map(|(k, h)| (k.0, k.1, h.lease.clone(), h.version.clone()))
            .collect();
        let mut lost = Vec::new();
        for (t, s, mut lease, version) in held {
            if lease.expires_at_ms <= now {
                lost.push((t, s));
                continue;
            }
            lease.expires_at_ms = now + self.config.lease_ms;
            let path = self.layout.shard_lease(t, s);
            match self
                .put_lease(&path, &lease, PutMode::Update(version))
                .await
            {
                Ok(Some(version)) => {
                    if let Some(h) = self.held.lock().expect("lease table").get_mut(&(t, s)) {
                        h.lease = lease;
                        h.version = version;
                    }
                }
                Ok(None) => {
                    tracing::warn!(table = t, shard = s, "shard lease taken over");
                    lost.push((t, s));
                }
                Err(e) => tracing::warn!(table = t, shard = s, "renewing a shard lease: {e}"),
            }
        }
        let mut held = self.held.lock().expect("lease table");
        for k in &lost {
            held.remove(k);
        }
        lost
    }

    /// Forgets a lease without releasing it (the table was dropped or closed).
    pub(crate) fn forget(&self, table_id: u64) {
        self.held
            .lock()
            .expect("lease table")
            .retain(|k, _| k.0 != table_id);
    }

    /// Releases every held lease (marked lapsed, conditionally, so a lease another node took
    /// over is left alone) and removes the liveness record: a graceful shutdown hands the
    /// shards over at once instead of after a lease.
    pub(crate) async fn release_all(&self) {
        let held: Vec<(u64, u32, ShardLease, UpdateVersion)> = self
            .held
            .lock()
            .expect("lease table")
            .drain()
            .map(|(k, h)| (k.0, k.1, h.lease, h.version))
            .collect();
        for (t, s, mut lease, version) in held {
            lease.expires_at_ms = 0;
            let path = self.layout.shard_lease(t, s);
            if let Err(e) = self
                .put_lease(&path, &lease, PutMode::Update(version))
                .await
            {
                tracing::warn!(table = t, shard = s, "releasing a shard lease: {e}");
            }
        }
        if let Err(e) = objects::delete(&self.store, &self.layout.node(&self.config.node)).await {
            tracing::warn!("removing the node's liveness record: {e}");
        }
    }

    /// The current lease of a shard, if any (admin listings).
    pub(crate) async fn lease(&self, table_id: u64, shard_id: u32) -> Result<Option<ShardLease>> {
        Ok(self.read_lease(table_id, shard_id).await?.map(|(l, _)| l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: &str) -> NodeInfo {
        NodeInfo {
            name: n.into(),
            http: format!("{n}:1"),
            flight: format!("{n}:2"),
        }
    }

    #[test]
    fn rendezvous_spreads_and_moves_only_the_dead_nodes_shards() {
        let three = vec![node("a"), node("b"), node("c")];
        let mut counts = HashMap::new();
        for t in 0..300 {
            *counts
                .entry(preferred(&three, t, 0).unwrap().name.clone())
                .or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|c| *c > 60), "{counts:?}");
        let two = vec![node("a"), node("c")];
        for t in 0..300 {
            let before = preferred(&three, t, 0).unwrap();
            let after = preferred(&two, t, 0).unwrap();
            if before.name != "b" {
                assert_eq!(before, after, "table {t}");
            }
        }
        assert!(preferred(&[], 1, 0).is_none());
    }
}
