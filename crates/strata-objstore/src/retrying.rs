//! Retries transient failures with exponential backoff and full jitter.
//!
//! A conditional write whose response was lost is ambiguous: the retry sees `AlreadyExists`
//! (create) or `Precondition` (update) caused by its own first attempt. The decorator then
//! reads the object back and reports success if it holds exactly the bytes it wrote, so
//! callers never mistake their own commit for a lost race.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};
use rand::Rng;

use crate::config::RetryConfig;

/// Deletes of one `delete_stream` in flight at once (completions come out of order).
pub const DELETES_CONCURRENT: usize = 32;
use crate::error::is_transient;

/// Retrying decorator.
#[derive(Debug)]
pub struct RetryingStore {
    inner: Arc<dyn ObjectStore>,
    policy: RetryConfig,
    /// The backoff's jitter from this seeded generator instead of the thread's (a
    /// simulation's replay draws the same waits).
    jitter: Option<Arc<parking_lot::Mutex<rand::rngs::StdRng>>>,
}

impl RetryingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, policy: RetryConfig) -> Self {
        Self {
            inner,
            policy,
            jitter: None,
        }
    }

    /// Draws the backoff's jitter from a generator seeded with `seed` (for deterministic
    /// simulation; the default draws from the thread's generator).
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        use rand::SeedableRng;
        self.jitter = Some(Arc::new(parking_lot::Mutex::new(
            rand::rngs::StdRng::seed_from_u64(seed),
        )));
        self
    }

    /// Another handle on the same store, policy and jitter.
    fn handle(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            jitter: self.jitter.clone(),
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .policy
            .backoff_ms_initial
            .saturating_mul(1u64 << attempt.min(16))
            .min(self.policy.backoff_ms_max);
        let ms = match &self.jitter {
            Some(rng) => rng.lock().random_range(0..=exp.max(1)),
            None => rand::rng().random_range(0..=exp.max(1)),
        };
        Duration::from_millis(ms)
    }

    async fn retry<T, F, Fut>(&self, op: &str, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut attempt = 0u32;
        loop {
            match f().await {
                Err(e) if is_transient(&e) && attempt + 1 < self.policy.attempts_max => {
                    tracing::debug!(op, attempt, error = %e, "retrying object store request");
                    strata_common::exec::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// A listing is retried as a whole while it has yielded nothing; a failure part way
    /// through is returned to the caller (listings are unordered on some backends, so
    /// resuming could skip or repeat entries).
    fn retry_listing(
        &self,
        list: impl Fn() -> BoxStream<'static, Result<ObjectMeta>> + Send + 'static,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let store = self.handle();
        futures::stream::once(async move {
            let mut attempt = 0u32;
            loop {
                let mut s = list();
                match s.next().await {
                    Some(Err(e)) if is_transient(&e) && attempt + 1 < store.policy.attempts_max => {
                        strata_common::exec::sleep(store.backoff(attempt)).await;
                        attempt += 1;
                    }
                    Some(first) => return futures::stream::once(async { first }).chain(s).boxed(),
                    None => return futures::stream::empty().boxed(),
                }
            }
        })
        .flatten()
        .boxed()
    }

    /// After an ambiguous failure, does the object hold exactly `expected`?
    async fn holds(&self, location: &Path, expected: &Bytes) -> Option<PutResult> {
        let got = self
            .retry("get", || async {
                self.inner.get(location).await?.bytes().await
            })
            .await
            .ok()?;
        if got != *expected {
            return None;
        }
        let meta = self
            .retry("head", || self.inner.head(location))
            .await
            .ok()?;
        Some(PutResult {
            e_tag: meta.e_tag,
            version: meta.version,
        })
    }
}

impl std::fmt::Display for RetryingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retrying({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for RetryingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let conditional = !matches!(opts.mode, PutMode::Overwrite);
        let mut attempt = 0u32;
        let mut ambiguous = false;
        loop {
            match self
                .inner
                .put_opts(location, payload.clone(), opts.clone())
                .await
            {
                Err(e) if is_transient(&e) && attempt + 1 < self.policy.attempts_max => {
                    ambiguous = true;
                    tracing::debug!(attempt, error = %e, path = %location, "retrying put");
                    strata_common::exec::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(
                    e @ (object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }),
                ) if conditional && ambiguous => {
                    // A local file standing for the payload is what the object must hold.
                    let (o, p) = (opts.clone(), payload.clone());
                    let expected = match strata_common::exec::blocking(move || {
                        crate::LocalSource::payload_of(&o, p)
                    })
                    .await
                    {
                        Ok(Ok(p)) => Bytes::from(p),
                        _ => return Err(e),
                    };
                    return match self.holds(location, &expected).await {
                        Some(r) => Ok(r),
                        None => Err(e),
                    };
                }
                other => return other,
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.retry("put_multipart", || {
            self.inner.put_multipart_opts(location, opts.clone())
        })
        .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.retry("get", || self.inner.get_opts(location, options.clone()))
            .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.retry("get_ranges", || self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // Deletes are idempotent: retry each one on its own, DELETES_CONCURRENT at once (a
        // GC pass deletes thousands of WAL segments; one round trip at a time it falls
        // behind a writer on S3).
        let base = self.handle();
        locations
            .map(move |loc| {
                let store = base.handle();
                async move {
                    let loc = loc?;
                    store
                        .retry("delete", || async {
                            match store.inner.delete(&loc).await {
                                Err(object_store::Error::NotFound { .. }) => Ok(()),
                                other => other,
                            }
                        })
                        .await?;
                    Ok(loc)
                }
            })
            .buffer_unordered(DELETES_CONCURRENT)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, prefix) = (self.inner.clone(), prefix.cloned());
        self.retry_listing(move || inner.list(prefix.as_ref()))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (inner, prefix, offset) = (self.inner.clone(), prefix.cloned(), offset.clone());
        self.retry_listing(move || inner.list_with_offset(prefix.as_ref(), &offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.retry("list", || self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.retry("copy", || self.inner.copy_opts(from, to, options.clone()))
            .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.retry("rename", || {
            self.inner.rename_opts(from, to, options.clone())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{FaultConfig, FaultInjectingStore};
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    /// A GC pass hands thousands of deletes to one `delete_stream`: they go out together,
    /// not one round trip after another, and each is still retried on its own.
    #[tokio::test]
    async fn a_delete_stream_deletes_concurrently_and_retries_each() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let paths: Vec<Path> = (0..100)
            .map(|i| Path::from(format!("wal/{i:04}")))
            .collect();
        for p in &paths {
            memory.put(p, PutPayload::from_static(b"x")).await.unwrap();
        }
        let faulty = Arc::new(FaultInjectingStore::new(
            memory.clone(),
            FaultConfig {
                latency_ms: 20,
                ..Default::default()
            },
        ));
        faulty.fail_next(crate::fault::FaultOp::Delete, 3);
        let store = RetryingStore::new(faulty.clone(), RetryConfig::default());
        let mut gone: Vec<Path> = store
            .delete_stream(futures::stream::iter(paths.clone().into_iter().map(Ok)).boxed())
            .map(|r| r.unwrap())
            .collect()
            .await;
        gone.sort();
        assert_eq!(gone, paths);
        assert!(
            memory.list(None).next().await.is_none(),
            "every object deleted"
        );
        assert_eq!(
            faulty.counts().errors,
            3,
            "the scripted failures were retried"
        );
        assert!(
            faulty.concurrent_peak() > 1,
            "deletes went out one at a time (peak {})",
            faulty.concurrent_peak()
        );
    }

    #[test]
    fn a_seeded_jitter_draws_the_same_waits() {
        let policy = RetryConfig {
            attempts_max: 8,
            backoff_ms_initial: 1,
            backoff_ms_max: 1000,
        };
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let waits = |seed: u64| -> Vec<Duration> {
            let s = RetryingStore::new(inner.clone(), policy.clone()).with_jitter_seed(seed);
            let h = s.handle();
            (0..8)
                .map(|a| {
                    if a % 2 == 0 {
                        s.backoff(a)
                    } else {
                        h.backoff(a)
                    }
                })
                .collect()
        };
        assert_eq!(
            waits(3),
            waits(3),
            "same seed, same waits (handles share the generator)"
        );
        assert_ne!(waits(3), waits(4));
        let exp = |a: u32| Duration::from_millis((1u64 << a).min(1000));
        assert!(
            waits(5).iter().zip(0..).all(|(w, a)| *w <= exp(a)),
            "within the backoff"
        );
    }
}
