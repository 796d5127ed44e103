//! The catalog as this process knows it: the newest version read from the bucket and the
//! engine's view of every table in it, kept in memory so that no request reads the catalog
//! from the bucket on its way.
//!
//! Freshness: a commit through this process is seen at once. A commit by another process
//! is seen within `catalog_refresh_ms`: the first lookup after that interval makes one
//! HEAD request for the version after the known one (a LIST and a GET only when it exists);
//! a lookup of a name the cache does not hold checks at once, at most once per
//! [`MISS_RECHECK`]. Versions are immutable and the chain only grows (create-if-absent of
//! the next number), so a HEAD that finds no next version proves the known one newest.
//! When the bucket does not answer a check, requests go on with the catalog known.
//! Owns: the `VersionedStore<Catalog>`; calls nothing else of the engine but the schema.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::RwLock;
use strata_manifest::{Catalog, TableEntry, Versioned, VersionedStore};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};
use crate::schema::TableSchema;

/// A lookup of a name the cached catalog lacks checks the bucket at most this often.
pub const MISS_RECHECK: Duration = Duration::from_millis(100);

/// One version of the catalog with every table's schema built once.
#[derive(Debug)]
pub struct CatalogSnapshot {
    /// The catalog version (0: no catalog committed yet).
    pub version: u64,
    /// The catalog.
    pub catalog: Catalog,
    schemas: BTreeMap<String, std::result::Result<Arc<TableSchema>, String>>,
}

impl CatalogSnapshot {
    fn new(v: Option<Versioned<Catalog>>) -> Self {
        let (version, catalog) = v.map_or((0, Catalog::default()), |v| (v.version, v.value));
        let schemas = catalog
            .tables
            .iter()
            .map(|(name, e)| {
                let s = TableSchema::new(e.clone())
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                (name.clone(), s)
            })
            .collect();
        Self {
            version,
            catalog,
            schemas,
        }
    }

    /// The entry of a live table.
    pub fn entry(&self, name: &str) -> Option<&TableEntry> {
        self.catalog.tables.get(name)
    }

    /// The engine's view of a live table (built once per catalog version).
    pub fn schema(&self, name: &str) -> Result<Arc<TableSchema>> {
        match self.schemas.get(name) {
            None => Err(Error::TableNotFound(name.to_string())),
            Some(Ok(s)) => Ok(s.clone()),
            Some(Err(e)) => Err(Error::Corrupt(format!(
                "catalog/{}.json (catalog version {}): the entry of {name} is invalid: {e}",
                strata_common::ids::format_id(self.version),
                self.version
            ))),
        }
    }

    /// Whether a live table has this id.
    pub fn has_id(&self, id: u64) -> bool {
        self.catalog.tables.values().any(|t| t.id == id)
    }
}

struct Known {
    snap: Arc<CatalogSnapshot>,
    checked: Instant,
}

/// The cached catalog (see the module docs).
pub(crate) struct CatalogCache {
    chain: VersionedStore<Catalog>,
    store: StoreRef,
    refresh: Duration,
    known: RwLock<Option<Known>>,
    /// One check against the bucket at a time; the others wait for its answer.
    checking: tokio::sync::Mutex<()>,
}

impl CatalogCache {
    pub(crate) fn new(store: StoreRef, chain: VersionedStore<Catalog>, refresh_ms: u64) -> Self {
        Self {
            chain,
            store,
            refresh: Duration::from_millis(refresh_ms),
            known: RwLock::new(None),
            checking: tokio::sync::Mutex::new(()),
        }
    }

    /// The chain in the bucket (commits go there directly).
    pub(crate) fn chain(&self) -> &VersionedStore<Catalog> {
        &self.chain
    }

    fn fresh(&self, within: Duration) -> Option<Arc<CatalogSnapshot>> {
        let known = self.known.read();
        let k = known.as_ref()?;
        (k.checked.elapsed() < within).then(|| k.snap.clone())
    }

    /// The catalog, checked against the bucket within the last `catalog_refresh_ms`.
    /// Returns whether the check found a newer version (the caller reacts to drops).
    pub(crate) async fn current(&self) -> Result<(Arc<CatalogSnapshot>, bool)> {
        match self.fresh(self.refresh) {
            Some(s) => Ok((s, false)),
            None => self.check(self.refresh).await,
        }
    }

    /// The catalog after a lookup of a name it lacked: checked again unless a check ran
    /// within [`MISS_RECHECK`].
    pub(crate) async fn after_miss(&self) -> Result<(Arc<CatalogSnapshot>, bool)> {
        self.check(MISS_RECHECK.min(self.refresh)).await
    }

    async fn check(&self, within: Duration) -> Result<(Arc<CatalogSnapshot>, bool)> {
        let _one = self.checking.lock().await;
        // Another caller may have checked while this one waited.
        if let Some(s) = self.fresh(within) {
            return Ok((s, false));
        }
        let known = self.known.read().as_ref().map(|k| k.snap.clone());
        match self.newer(known.as_ref()).await {
            Ok(snap) => {
                let changed = known.is_none_or(|k| k.version != snap.version);
                Ok((snap, changed))
            }
            // The bucket did not answer the check: requests go on with the catalog known
            // (not marked checked, so the next request checks again).
            Err(e) => match known {
                Some(k) => {
                    tracing::warn!("checking the catalog, using version {}: {e}", k.version);
                    Ok((k, false))
                }
                None => Err(e),
            },
        }
    }

    /// The newest version: `known` if the bucket holds no next one, else read. Marks the
    /// cache checked.
    async fn newer(&self, known: Option<&Arc<CatalogSnapshot>>) -> Result<Arc<CatalogSnapshot>> {
        let started = Instant::now();
        if let Some(k) = known {
            let next = self.chain.path(k.version + 1);
            match crate::store::objects::head(&self.store, &next).await {
                Err(object_store::Error::NotFound { .. }) => {
                    self.set(k.clone(), started);
                    return Ok(k.clone());
                }
                Ok(_) => {}
                Err(e) => return Err(Error::store(format!("check the catalog at {next}"))(e)),
            }
        }
        let snap = Arc::new(CatalogSnapshot::new(self.chain.latest().await?));
        self.set(snap.clone(), started);
        Ok(snap)
    }

    fn set(&self, snap: Arc<CatalogSnapshot>, checked: Instant) {
        let mut known = self.known.write();
        // Never go back to an older version (a slower check finishing late).
        if let Some(k) = known.as_ref()
            && k.snap.version > snap.version
        {
            return;
        }
        *known = Some(Known { snap, checked });
    }

    /// A version this process committed: known at once.
    pub(crate) fn committed(&self, v: Versioned<Catalog>) {
        self.set(Arc::new(CatalogSnapshot::new(Some(v))), Instant::now());
    }
}
