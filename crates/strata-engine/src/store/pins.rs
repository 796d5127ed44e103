//! Durable pins: a reader that is not the writer (a query service, a snapshot) keeps the
//! objects of one manifest version alive by a renewed `<shard>/pins/<id>.json`; GC keeps
//! every version a live pin names. Writing, renewing, listing.

use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use strata_common::clock::ClockRef;
use strata_manifest::ShardPaths;
use strata_objstore::StoreRef;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// A durable pin: `<shard>/pins/<id>.json`, renewed until dropped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PinRecord {
    /// The manifest version whose objects must be kept.
    pub manifest_version: u64,
    /// The pin lapses after this time (the reader's clock) unless renewed.
    pub expires_at_ms: u64,
    /// The lease it was set with: the writer also keeps it until it has seen it unrenewed
    /// for this long by its own clock (0 in pins of older readers: the writer's
    /// `pin_lease_ms`).
    #[serde(default)]
    pub lease_ms: u64,
}

pub(crate) struct DurablePin {
    cancel: CancellationToken,
}

impl Drop for DurablePin {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn put_pin(store: &StoreRef, path: &object_store::path::Path, rec: &PinRecord) -> Result<()> {
    let body = serde_json::to_vec(rec).map_err(|e| Error::Internal(e.to_string()))?;
    store
        .put(path, PutPayload::from(body))
        .await
        .map_err(Error::store(format!("write pin {path}")))?;
    Ok(())
}

/// Pins `version` of the shard at `paths` until the returned guard drops.
pub(crate) async fn pin_version(
    store: &StoreRef,
    paths: &ShardPaths,
    version: u64,
    clock: &ClockRef,
    lease_ms: u64,
) -> Result<DurablePin> {
    let id = format!(
        "{:016x}-{:08x}-{:016x}",
        clock.now_ms(),
        std::process::id(),
        NEXT_PIN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let path = paths.pin(&id);
    let lease_ms = lease_ms.max(300);
    put_pin(
        store,
        &path,
        &PinRecord {
            manifest_version: version,
            expires_at_ms: clock.now_ms() + lease_ms,
            lease_ms,
        },
    )
    .await?;
    let cancel = CancellationToken::new();
    let (c, store, clock) = (cancel.clone(), store.clone(), clock.clone());
    tokio::spawn(async move {
        let every = std::time::Duration::from_millis(lease_ms / 3);
        loop {
            tokio::select! {
                biased;
                _ = c.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            let rec = PinRecord {
                manifest_version: version,
                expires_at_ms: clock.now_ms() + lease_ms,
                lease_ms,
            };
            if let Err(e) = put_pin(&store, &path, &rec).await {
                tracing::warn!(%path, error = %e, "could not renew snapshot pin");
            }
        }
        if let Err(e) = store.delete(&path).await
            && !matches!(e, object_store::Error::NotFound { .. })
        {
            tracing::warn!(%path, error = %e, "could not delete snapshot pin; it lapses on its own");
        }
    });
    Ok(DurablePin { cancel })
}

static NEXT_PIN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Every durable pin of a shard with its object (lapsed ones included; unreadable ones
/// are logged and skipped).
pub(crate) async fn read_pins(
    store: &StoreRef,
    paths: &ShardPaths,
) -> Result<Vec<(object_store::path::Path, PinRecord)>> {
    let metas: Vec<object_store::ObjectMeta> = store
        .list(Some(&paths.pins_dir()))
        .try_collect()
        .await
        .map_err(Error::store("list pins"))?;
    let mut out = Vec::new();
    for m in metas {
        let data = match store.get(&m.location).await {
            Ok(g) => g.bytes().await.map_err(Error::store("read pin"))?,
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(Error::store("read pin")(e)),
        };
        match serde_json::from_slice::<PinRecord>(&data) {
            Ok(p) => out.push((m.location, p)),
            Err(e) => {
                tracing::warn!(path = %m.location, error = %e, "ignoring unreadable snapshot pin")
            }
        }
    }
    Ok(out)
}

/// Every durable pin of a shard: (reader, record), lapsed ones included.
pub(crate) async fn list_pins(
    store: &StoreRef,
    paths: &ShardPaths,
) -> Result<Vec<(String, PinRecord)>> {
    Ok(read_pins(store, paths)
        .await?
        .into_iter()
        .map(|(location, p)| {
            let reader = location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .unwrap_or_default()
                .to_string();
            (reader, p)
        })
        .collect())
}
