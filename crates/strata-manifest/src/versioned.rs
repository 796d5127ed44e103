//! A chain of immutable versions committed by create-if-absent of the next version.

use std::marker::PhantomData;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use strata_common::ids::{format_id, parse_id};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// Rules a value must satisfy, alone and relative to the version it replaces.
pub trait Invariants {
    /// `Err(reason)` if `self` may not follow `prev` (or stand alone when `prev` is None).
    fn check(&self, prev: Option<&Self>) -> std::result::Result<(), String>;
}

/// A value at a version.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The version number (1 is the first).
    pub version: u64,
    /// The value.
    pub value: T,
}

/// Reads and commits one chain.
#[derive(Debug, Clone)]
pub struct VersionedStore<T> {
    store: StoreRef,
    dir: Path,
    _value: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned + Invariants> VersionedStore<T> {
    /// The chain stored under `dir`.
    pub fn new(store: StoreRef, dir: Path) -> Self {
        Self {
            store,
            dir,
            _value: PhantomData,
        }
    }

    /// The chain directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The object of version `v`.
    pub fn path(&self, version: u64) -> Path {
        Path::from(format!("{}/{}.json", self.dir, format_id(version)))
    }

    /// Every stored version with its object metadata, oldest first.
    pub async fn list_versions(&self) -> Result<Vec<(u64, ObjectMeta)>> {
        let mut out: Vec<(u64, ObjectMeta)> = self
            .store
            .list(Some(&self.dir))
            .try_filter_map(|m| async move { Ok(parse_id(m.location.as_ref()).map(|v| (v, m))) })
            .try_collect()
            .await?;
        out.sort_by_key(|(v, _)| *v);
        Ok(out)
    }

    /// The newest version, or `None` for an empty chain.
    pub async fn latest(&self) -> Result<Option<Versioned<T>>> {
        // A version can be garbage collected between the listing and the read; the newest
        // never is, so a retry converges.
        for _ in 0..5 {
            let Some((version, _)) = self.list_versions().await?.pop() else {
                return Ok(None);
            };
            match self.get(version).await {
                Ok(value) => return Ok(Some(Versioned { version, value })),
                Err(Error::Store(object_store::Error::NotFound { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Corrupt {
            path: self.dir.to_string(),
            reason: "newest version kept disappearing while being read".into(),
        })
    }

    /// Reads version `version`, checking its invariants.
    pub async fn get(&self, version: u64) -> Result<T> {
        let path = self.path(version);
        let bytes = self.store.get(&path).await?.bytes().await?;
        let value: T = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        value.check(None).map_err(|reason| Error::Corrupt {
            path: path.to_string(),
            reason,
        })?;
        Ok(value)
    }

    /// Commits `next` as the version after `prev` (or as version 1). Fails with
    /// [`Error::Conflict`] if another writer committed that version, or any later one, first.
    pub async fn commit(&self, prev: Option<&Versioned<T>>, next: T) -> Result<Versioned<T>> {
        let version = prev.map_or(1, |p| p.version + 1);
        next.check(prev.map(|p| &p.value))
            .map_err(|reason| Error::Invariant {
                dir: self.dir.to_string(),
                version,
                reason,
            })?;
        let body = serde_json::to_vec_pretty(&next).map_err(|e| Error::Corrupt {
            path: self.path(version).to_string(),
            reason: e.to_string(),
        })?;
        let path = self.path(version);
        let body = Bytes::from(body);
        // A create whose response was lost may have landed: the version holding exactly
        // this body is this commit's own, any other is another writer's.
        let mut attempt = 0u32;
        loop {
            match strata_objstore::create_or_match(self.store.as_ref(), &path, &body).await {
                Ok(strata_objstore::Created::Mine) => break,
                Ok(strata_objstore::Created::Theirs) => {
                    return Err(Error::Conflict {
                        dir: self.dir.to_string(),
                        version,
                    });
                }
                Err(e) if attempt + 1 >= COMMIT_ATTEMPTS => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(path = %path, attempt, error = %e, "manifest commit failed; retrying");
                    attempt += 1;
                    strata_common::exec::sleep(std::time::Duration::from_millis(20 << attempt))
                        .await;
                }
            }
        }
        // If `version` had existed and been garbage collected, our create succeeded on a
        // dead branch: a newer version proves it. (Old versions are only collected once
        // newer ones exist, so this check is sufficient.)
        let newer = self
            .store
            .list_with_offset(Some(&self.dir), &path)
            .try_filter_map(|m| async move { Ok(parse_id(m.location.as_ref())) })
            .try_collect::<Vec<u64>>()
            .await?;
        if newer.iter().any(|v| *v > version) {
            return Err(Error::Conflict {
                dir: self.dir.to_string(),
                version,
            });
        }
        Ok(Versioned {
            version,
            value: next,
        })
    }

    /// Deletes version `version` (garbage collection; never the newest).
    pub async fn delete(&self, version: u64) -> Result<()> {
        match self.store.delete(&self.path(version)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Attempts of one commit against transient failures (each after looking at what landed).
const COMMIT_ATTEMPTS: u32 = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::sync::Arc;

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    struct Counter {
        n: u64,
    }

    impl Invariants for Counter {
        fn check(&self, prev: Option<&Self>) -> std::result::Result<(), String> {
            match prev {
                Some(p) if self.n < p.n => Err(format!("n went backwards: {} < {}", self.n, p.n)),
                _ => Ok(()),
            }
        }
    }

    fn chain() -> VersionedStore<Counter> {
        VersionedStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            Path::from("c"),
        )
    }

    #[tokio::test]
    async fn commits_in_order_and_detects_conflicts() {
        let c = chain();
        assert!(c.latest().await.unwrap().is_none());
        let v1 = c.commit(None, Counter { n: 1 }).await.unwrap();
        assert_eq!(v1.version, 1);
        let v2 = c.commit(Some(&v1), Counter { n: 2 }).await.unwrap();
        // A writer still at v1 loses.
        let err = c.commit(Some(&v1), Counter { n: 5 }).await.unwrap_err();
        assert!(matches!(err, Error::Conflict { version: 2, .. }), "{err}");
        assert_eq!(c.latest().await.unwrap().unwrap(), v2);
    }

    #[tokio::test]
    async fn invariants_checked_before_commit() {
        let c = chain();
        let v1 = c.commit(None, Counter { n: 3 }).await.unwrap();
        let err = c.commit(Some(&v1), Counter { n: 2 }).await.unwrap_err();
        assert!(matches!(err, Error::Invariant { .. }), "{err}");
        assert_eq!(c.list_versions().await.unwrap().len(), 1, "nothing written");
    }

    #[tokio::test]
    async fn recreating_a_collected_version_is_a_conflict() {
        let c = chain();
        let v1 = c.commit(None, Counter { n: 1 }).await.unwrap();
        let v2 = c.commit(Some(&v1), Counter { n: 2 }).await.unwrap();
        c.commit(Some(&v2), Counter { n: 3 }).await.unwrap();
        c.delete(2).await.unwrap();
        // A stale writer at v1 can create v2 again, but must learn it is on a dead branch.
        let err = c.commit(Some(&v1), Counter { n: 9 }).await.unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{err}");
        assert_eq!(c.latest().await.unwrap().unwrap().value.n, 3);
    }

    #[tokio::test]
    async fn a_commit_whose_response_was_lost_is_its_own_not_a_conflict() {
        let fault = Arc::new(strata_objstore::FaultInjectingStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            Default::default(),
        ));
        let c: VersionedStore<Counter> = VersionedStore::new(fault.clone(), Path::from("c"));
        let v1 = c.commit(None, Counter { n: 1 }).await.unwrap();
        fault.lose_next(1);
        let v2 = c.commit(Some(&v1), Counter { n: 2 }).await.unwrap();
        assert_eq!(
            fault.injected(),
            1,
            "the create landed with its response lost"
        );
        assert_eq!(v2.version, 2);
        assert_eq!(c.latest().await.unwrap().unwrap(), v2);
        // Another writer's version is still a conflict, also when a failed attempt made
        // the create ambiguous.
        c.commit(Some(&v2), Counter { n: 3 }).await.unwrap();
        fault.fail_next(strata_objstore::FaultOp::Put, 1);
        let err = c.commit(Some(&v2), Counter { n: 9 }).await.unwrap_err();
        assert!(matches!(err, Error::Conflict { version: 3, .. }), "{err}");
        assert_eq!(c.latest().await.unwrap().unwrap().value.n, 3);
    }
}
