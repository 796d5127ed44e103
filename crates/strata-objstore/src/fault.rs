//! Injects latency and faults (errors, timeouts, lost responses) for tests and benchmarks.
//! Randomness comes from one seeded RNG so a failing run can be replayed.

use std::collections::HashMap;
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
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// What to inject. Rates are probabilities per request in `[0, 1]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Added before every request (a first-byte latency, e.g. 15 for S3).
    pub latency_ms: u64,
    /// Uniform random extra latency up to this many milliseconds.
    pub latency_ms_jitter: u64,
    /// Probability that a request fails with a transient error before reaching the store.
    pub error_rate: f64,
    /// Probability that a request hangs for `timeout_ms` and then fails as a timeout.
    pub timeout_rate: f64,
    /// How long an injected timeout hangs.
    pub timeout_ms: u64,
    /// Probability that a request reaches the store but its response is lost (reported as
    /// a transient error): a put or delete that took effect, a get or list whose answer
    /// never arrived. Exercises retries of conditional writes and of deletes.
    pub lost_response_rate: f64,
    /// Seed of the RNG.
    pub seed: u64,
}

/// Operation classes that scripted faults can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// get, head, get_ranges
    Get,
    /// put, multipart
    Put,
    /// list
    List,
    /// delete
    Delete,
}

#[derive(Debug)]
struct State {
    config: FaultConfig,
    rng: StdRng,
    scripted: HashMap<FaultOp, u32>,
    /// Puts still to land with their response lost (scripted).
    lost_scripted: u32,
    counts: FaultCounts,
}

/// Faults injected so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Requests failed before reaching the store (random or scripted).
    pub errors: u64,
    /// Requests that hung and then failed before reaching the store.
    pub timeouts: u64,
    /// Requests that took effect with their response lost.
    pub lost_responses: u64,
}

impl FaultCounts {
    /// Every fault.
    pub fn total(&self) -> u64 {
        self.errors + self.timeouts + self.lost_responses
    }
}

/// Fault-injecting decorator.
#[derive(Debug)]
pub struct FaultInjectingStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
}

enum Verdict {
    Pass,
    Fail(&'static str),
    Timeout(Duration),
}

fn injected(kind: &'static str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultInjectingStore",
        source: format!("injected {kind}").into(),
    }
}

impl FaultInjectingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, config: FaultConfig) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        Self {
            inner,
            state: Arc::new(Mutex::new(State {
                config,
                rng,
                scripted: HashMap::new(),
                lost_scripted: 0,
                counts: FaultCounts::default(),
            })),
        }
    }

    /// Replaces the configuration (keeps the RNG stream).
    pub fn set_config(&self, config: FaultConfig) {
        self.state.lock().config = config;
    }

    /// The current configuration.
    pub fn config(&self) -> FaultConfig {
        self.state.lock().config.clone()
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.state.lock().counts.total()
    }

    /// How many faults of each kind were injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.state.lock().counts
    }

    /// Makes the next `n` requests of class `op` fail with a transient error.
    pub fn fail_next(&self, op: FaultOp, n: u32) {
        *self.state.lock().scripted.entry(op).or_default() += n;
    }

    /// Drops every scripted fault not yet injected.
    pub fn clear_scripted(&self) {
        let mut s = self.state.lock();
        s.scripted.clear();
        s.lost_scripted = 0;
    }

    /// Makes the next `n` puts reach the store and then fail with a transient error (a
    /// response lost after the request landed).
    pub fn lose_next(&self, n: u32) {
        self.state.lock().lost_scripted += n;
    }

    fn decide(&self, op: FaultOp) -> (Duration, Verdict) {
        let mut s = self.state.lock();
        let State {
            config,
            rng,
            scripted,
            counts,
            ..
        } = &mut *s;
        let jitter = if config.latency_ms_jitter > 0 {
            rng.random_range(0..=config.latency_ms_jitter)
        } else {
            0
        };
        let delay = Duration::from_millis(config.latency_ms + jitter);
        if let Some(n) = scripted.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            counts.errors += 1;
            return (delay, Verdict::Fail("scripted error"));
        }
        if config.error_rate > 0.0 && rng.random_bool(config.error_rate.min(1.0)) {
            counts.errors += 1;
            return (delay, Verdict::Fail("error"));
        }
        if config.timeout_rate > 0.0 && rng.random_bool(config.timeout_rate.min(1.0)) {
            counts.timeouts += 1;
            return (
                delay,
                Verdict::Timeout(Duration::from_millis(config.timeout_ms)),
            );
        }
        (delay, Verdict::Pass)
    }

    async fn before(&self, op: FaultOp) -> Result<()> {
        let (delay, verdict) = self.decide(op);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match verdict {
            Verdict::Pass => Ok(()),
            Verdict::Fail(kind) => Err(injected(kind)),
            Verdict::Timeout(d) => {
                tokio::time::sleep(d).await;
                Err(injected("timeout"))
            }
        }
    }

    /// Delays a listing and possibly replaces it with an injected failure.
    fn faulty_listing(
        &self,
        inner: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (delay, verdict) = self.decide(FaultOp::List);
        futures::stream::once(async move {
            tokio::time::sleep(delay).await;
            match verdict {
                Verdict::Pass => inner,
                Verdict::Fail(kind) => {
                    futures::stream::once(async move { Err(injected(kind)) }).boxed()
                }
                Verdict::Timeout(d) => {
                    tokio::time::sleep(d).await;
                    futures::stream::once(async { Err(injected("timeout")) }).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }

    /// Whether the response of a put that landed is lost (scripted ones first).
    fn lose_put_response(&self) -> bool {
        let mut s = self.state.lock();
        if s.lost_scripted > 0 {
            s.lost_scripted -= 1;
            s.counts.lost_responses += 1;
            return true;
        }
        drop(s);
        self.lose_response()
    }

    /// Whether the response of a request that reached the store is lost.
    fn lose_response(&self) -> bool {
        let mut s = self.state.lock();
        let rate = s.config.lost_response_rate;
        let lose = rate > 0.0 && s.rng.random_bool(rate.min(1.0));
        s.counts.lost_responses += u64::from(lose);
        lose
    }
}

impl std::fmt::Display for FaultInjectingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FaultInjecting({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for FaultInjectingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.before(FaultOp::Put).await?;
        let r = self.inner.put_opts(location, payload, opts).await?;
        if self.lose_put_response() {
            return Err(injected("lost response"));
        }
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.before(FaultOp::Put).await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.before(FaultOp::Get).await?;
        let r = self.inner.get_opts(location, options).await?;
        if self.lose_response() {
            return Err(injected("lost response"));
        }
        Ok(r)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.before(FaultOp::Get).await?;
        let r = self.inner.get_ranges(location, ranges).await?;
        if self.lose_response() {
            return Err(injected("lost response"));
        }
        Ok(r)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = FaultInjectingStore {
            inner: self.inner.clone(),
            state: self.state.clone(),
        };
        let this = Arc::new(this);
        let after = this.clone();
        let checked = locations
            .then(move |loc| {
                let this = this.clone();
                async move {
                    let loc = loc?;
                    this.before(FaultOp::Delete).await?;
                    Ok(loc)
                }
            })
            .boxed();
        // A delete that took effect can still lose its response.
        self.inner
            .delete_stream(checked)
            .map(move |r| match r {
                Ok(_) if after.lose_response() => Err(injected("lost response")),
                other => other,
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.faulty_listing(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.faulty_listing(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.before(FaultOp::List).await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.before(FaultOp::Put).await?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.before(FaultOp::Put).await?;
        self.inner.rename_opts(from, to, options).await
    }
}
