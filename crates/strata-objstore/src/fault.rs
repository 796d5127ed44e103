//! Injects latency and faults (errors, timeouts, lost responses) for tests and benchmarks.
//!
//! Every decision is a function of the seed and the request alone: the operation, the
//! object (or listing prefix) and how many times this store has seen that operation on that
//! object before. Concurrent callers therefore draw the same faults whatever order the
//! scheduler runs them in, and a failing run replays with its seed.

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
    /// Seed of every decision.
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
    /// Requests seen so far per (operation, object), by a hash of the pair: the attempt
    /// number that, with the seed, decides a request's faults.
    attempts: HashMap<u64, u32>,
    scripted: HashMap<FaultOp, u32>,
    /// Puts still to land with their response lost (scripted).
    lost_scripted: u32,
    counts: FaultCounts,
    /// Requests waiting out their latency now, and the most there have been at once.
    waiting: u64,
    waiting_peak: u64,
    /// Objects whose requests wait until released, by path suffix.
    holds: HashMap<String, tokio::sync::watch::Sender<bool>>,
    /// Requests held now.
    held: usize,
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

/// What happens to one request.
struct Decision {
    delay: Duration,
    verdict: Verdict,
    /// Whether the response is lost if the request reaches the store.
    lose: bool,
}

/// FNV-1a over `bytes`, continuing from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The key of (operation, object) in [`State::attempts`].
fn request_key(op: FaultOp, location: &str) -> u64 {
    fnv(fnv(0xcbf2_9ce4_8422_2325, &[op as u8]), location.as_bytes())
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
        Self {
            inner,
            state: Arc::new(Mutex::new(State {
                config,
                attempts: HashMap::new(),
                scripted: HashMap::new(),
                lost_scripted: 0,
                counts: FaultCounts::default(),
                waiting: 0,
                waiting_peak: 0,
                holds: HashMap::new(),
                held: 0,
            })),
        }
    }

    /// Replaces the configuration (attempt counts are kept).
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

    /// The most requests that were waiting out their injected latency at once (0 without
    /// latency): how many requests a caller had in flight together.
    pub fn concurrent_peak(&self) -> u64 {
        self.state.lock().waiting_peak
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

    /// Holds every request on an object whose path ends with `suffix` before it reaches the
    /// store, until [`Self::release`]: a test's way to keep one upload in flight while the
    /// rest of the system moves on.
    pub fn hold(&self, suffix: &str) {
        let (tx, _) = tokio::sync::watch::channel(true);
        self.state.lock().holds.insert(suffix.to_string(), tx);
    }

    /// Lets the requests [`Self::hold`] holds for `suffix` (and later ones) proceed.
    pub fn release(&self, suffix: &str) {
        if let Some(tx) = self.state.lock().holds.remove(suffix) {
            let _ = tx.send(false);
        }
    }

    /// How many requests are held now.
    pub fn held(&self) -> usize {
        self.state.lock().held
    }

    /// Waits while a hold covers `location`.
    async fn wait_if_held(&self, location: &str) {
        let rx = {
            let s = self.state.lock();
            s.holds
                .iter()
                .find(|(suffix, _)| location.ends_with(suffix.as_str()))
                .map(|(_, tx)| tx.subscribe())
        };
        let Some(mut rx) = rx else { return };
        struct Held<'a>(&'a Mutex<State>);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                self.0.lock().held -= 1;
            }
        }
        self.state.lock().held += 1;
        let _held = Held(&self.state);
        // Released (false), or the hold dropped: go on either way.
        let _ = rx.wait_for(|held| !*held).await;
    }

    /// Decides the fate of one request of class `op` on `location` (the object, or the
    /// prefix of a listing). Scripted faults come first, in call order.
    fn decide(&self, op: FaultOp, location: &str) -> Decision {
        let mut s = self.state.lock();
        let State {
            config,
            attempts,
            scripted,
            counts,
            lost_scripted,
            ..
        } = &mut *s;
        let attempt = attempts.entry(request_key(op, location)).or_default();
        *attempt += 1;
        let mut rng = StdRng::seed_from_u64(
            config.seed ^ request_key(op, location).rotate_left(17) ^ u64::from(*attempt),
        );
        let jitter = if config.latency_ms_jitter > 0 {
            rng.random_range(0..=config.latency_ms_jitter)
        } else {
            0
        };
        let delay = Duration::from_millis(config.latency_ms + jitter);
        // Every draw is made whatever the outcome, so one rate does not shift the others.
        let error = rng.random_bool(config.error_rate.clamp(0.0, 1.0));
        let timeout = rng.random_bool(config.timeout_rate.clamp(0.0, 1.0));
        let lost = rng.random_bool(config.lost_response_rate.clamp(0.0, 1.0));
        let lose = if op == FaultOp::Put && *lost_scripted > 0 {
            *lost_scripted -= 1;
            true
        } else {
            lost
        };
        let verdict = if let Some(n) = scripted.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            counts.errors += 1;
            Verdict::Fail("scripted error")
        } else if error {
            counts.errors += 1;
            Verdict::Fail("error")
        } else if timeout {
            counts.timeouts += 1;
            Verdict::Timeout(Duration::from_millis(config.timeout_ms))
        } else {
            Verdict::Pass
        };
        Decision {
            delay,
            verdict,
            lose,
        }
    }

    /// Waits out a decision's delay and fails the request if it says so; otherwise returns
    /// whether the response is to be lost.
    async fn before(&self, op: FaultOp, location: &str) -> Result<bool> {
        self.wait_if_held(location).await;
        let d = self.decide(op, location);
        if !d.delay.is_zero() {
            {
                let mut s = self.state.lock();
                s.waiting += 1;
                s.waiting_peak = s.waiting_peak.max(s.waiting);
            }
            // Counted out on drop too: a caller may drop the request mid-latency.
            struct Waiting<'a>(&'a Mutex<State>);
            impl Drop for Waiting<'_> {
                fn drop(&mut self) {
                    self.0.lock().waiting -= 1;
                }
            }
            let _waiting = Waiting(&self.state);
            strata_common::exec::sleep(d.delay).await;
        }
        match d.verdict {
            Verdict::Pass => Ok(d.lose),
            Verdict::Fail(kind) => Err(injected(kind)),
            Verdict::Timeout(t) => {
                strata_common::exec::sleep(t).await;
                Err(injected("timeout"))
            }
        }
    }

    /// Counts a lost response and returns its error.
    fn lost(&self) -> object_store::Error {
        self.state.lock().counts.lost_responses += 1;
        injected("lost response")
    }

    /// Delays a listing and possibly replaces it with an injected failure.
    fn faulty_listing(
        &self,
        prefix: Option<&Path>,
        inner: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let d = self.decide(FaultOp::List, prefix.map_or("", |p| p.as_ref()));
        futures::stream::once(async move {
            strata_common::exec::sleep(d.delay).await;
            match d.verdict {
                Verdict::Pass => inner,
                Verdict::Fail(kind) => {
                    futures::stream::once(async move { Err(injected(kind)) }).boxed()
                }
                Verdict::Timeout(t) => {
                    strata_common::exec::sleep(t).await;
                    futures::stream::once(async { Err(injected("timeout")) }).boxed()
                }
            }
        })
        .flatten()
        .boxed()
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
        let lose = self.before(FaultOp::Put, location.as_ref()).await?;
        let r = self.inner.put_opts(location, payload, opts).await?;
        if lose {
            return Err(self.lost());
        }
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.before(FaultOp::Put, location.as_ref()).await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let lose = self.before(FaultOp::Get, location.as_ref()).await?;
        let r = self.inner.get_opts(location, options).await?;
        if lose {
            return Err(self.lost());
        }
        Ok(r)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let lose = self.before(FaultOp::Get, location.as_ref()).await?;
        let r = self.inner.get_ranges(location, ranges).await?;
        if lose {
            return Err(self.lost());
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
        // Paths whose delete is to lose its response once it took effect.
        let doomed = Arc::new(Mutex::new(std::collections::HashSet::<Path>::new()));
        let marked = doomed.clone();
        let checked = locations
            .then(move |loc| {
                let this = this.clone();
                let marked = marked.clone();
                async move {
                    let loc = loc?;
                    if this.before(FaultOp::Delete, loc.as_ref()).await? {
                        marked.lock().insert(loc.clone());
                    }
                    Ok(loc)
                }
            })
            .boxed();
        // A delete that took effect can still lose its response.
        self.inner
            .delete_stream(checked)
            .map(move |r| match r {
                Ok(p) if doomed.lock().remove(&p) => Err(after.lost()),
                other => other,
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.faulty_listing(prefix, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.faulty_listing(prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.before(FaultOp::List, prefix.map_or("", |p| p.as_ref()))
            .await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.before(FaultOp::Put, to.as_ref()).await?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.before(FaultOp::Put, to.as_ref()).await?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn faulty(seed: u64) -> FaultInjectingStore {
        FaultInjectingStore::new(
            Arc::new(InMemory::new()),
            FaultConfig {
                error_rate: 0.3,
                lost_response_rate: 0.3,
                seed,
                ..Default::default()
            },
        )
    }

    /// The outcome of three puts and three gets of `name`, in that order.
    async fn outcomes(store: &FaultInjectingStore, name: &str) -> Vec<String> {
        let path = Path::from(name);
        let mut out = Vec::new();
        for _ in 0..3 {
            let r = store.put(&path, PutPayload::from_static(b"x")).await;
            out.push(
                r.map(|_| ())
                    .map_err(|e| e.to_string())
                    .err()
                    .unwrap_or_default(),
            );
        }
        for _ in 0..3 {
            let r = store.get(&path).await;
            out.push(
                r.map(|_| ())
                    .map_err(|e| e.to_string())
                    .err()
                    .unwrap_or_default(),
            );
        }
        out
    }

    #[tokio::test]
    async fn a_request_draws_the_same_faults_whatever_runs_beside_it() {
        let names: Vec<String> = (0..40).map(|i| format!("dir/object-{i}")).collect();
        let forward = faulty(9);
        let mut a = Vec::new();
        for n in &names {
            a.push(outcomes(&forward, n).await);
        }
        // The same requests per object, the objects visited in reverse and with unrelated
        // requests in between.
        let backward = faulty(9);
        let mut b = Vec::new();
        for n in names.iter().rev() {
            let _ = backward.get(&Path::from("elsewhere")).await;
            b.push(outcomes(&backward, n).await);
        }
        b.reverse();
        assert_eq!(a, b);
        let faults = forward.counts();
        assert!(faults.errors > 0 && faults.lost_responses > 0, "{faults:?}");
        // Another seed decides differently.
        let other = faulty(10);
        let mut c = Vec::new();
        for n in &names {
            c.push(outcomes(&other, n).await);
        }
        assert_ne!(a, c);
    }

    #[tokio::test]
    async fn scripted_faults_come_first() {
        let store = FaultInjectingStore::new(Arc::new(InMemory::new()), FaultConfig::default());
        let path = Path::from("a");
        store.lose_next(1);
        assert!(
            store
                .put(&path, PutPayload::from_static(b"x"))
                .await
                .is_err()
        );
        // The put landed; only its response was lost.
        store.get(&path).await.unwrap();
        store.fail_next(FaultOp::Get, 2);
        assert!(store.get(&path).await.is_err());
        assert!(store.get(&path).await.is_err());
        store.get(&path).await.unwrap();
        assert_eq!(
            store.counts(),
            FaultCounts {
                errors: 2,
                timeouts: 0,
                lost_responses: 1
            }
        );
    }
}
