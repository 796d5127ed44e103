//! Create-if-absent that tells a caller's own object from another's.
//!
//! A conditional create whose response was lost may have landed. Retried (by the retrying
//! decorator within one call, or by the caller across calls), it finds the object there:
//! `AlreadyExists` then does not say whose it is. Strata's objects written this way (WAL
//! segments, manifest and catalog versions, job results) are deterministic bytes, so the
//! object holding exactly the bytes being written is the caller's own; anything else (a
//! newer writer's fence, another attempt's result, another writer's version) is not.

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};

use crate::Path;

/// The outcome of [`create_or_match`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object holds `bytes`: created now, or by an earlier attempt that landed.
    Mine,
    /// Another object with other bytes was there first.
    Theirs,
}

/// Creates `path` with `bytes` if absent; if it exists, reads it back to tell whose it is.
/// Errors (transient ones included) say nothing about whose the object is: the caller
/// retries or gives up, never treats them as [`Created::Theirs`].
pub async fn create_or_match(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: &Bytes,
) -> object_store::Result<Created> {
    match store
        .put_opts(
            path,
            bytes.clone().into(),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(Created::Mine),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let held = store.get(path).await?.bytes().await?;
            Ok(if held == *bytes {
                Created::Mine
            } else {
                Created::Theirs
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FaultInjectingStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_landed_create_is_mine_and_other_bytes_are_theirs() {
        let fault = FaultInjectingStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            Default::default(),
        );
        let (path, mine) = (Path::from("a/1"), Bytes::from_static(b"mine"));
        fault.lose_next(1);
        assert!(
            create_or_match(&fault, &path, &mine).await.is_err(),
            "the response was lost"
        );
        assert_eq!(
            create_or_match(&fault, &path, &mine).await.unwrap(),
            Created::Mine
        );
        let other = Bytes::from_static(b"other");
        assert_eq!(
            create_or_match(&fault, &path, &other).await.unwrap(),
            Created::Theirs
        );
        let fresh = Path::from("a/2");
        assert_eq!(
            create_or_match(&fault, &fresh, &other).await.unwrap(),
            Created::Mine
        );
    }
}
