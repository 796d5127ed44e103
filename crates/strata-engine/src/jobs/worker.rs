//! The compaction worker: looks for published jobs, claims one by [`claim_order`], runs it
//! under a renewed lease and hands the result back. Stateless: everything it knows is in
//! the bucket.

use std::sync::Arc;
use std::time::Duration;

use strata_common::clock::ClockRef;
use strata_manifest::Layout;
use strata_objstore::StoreRef;
use tokio_util::sync::CancellationToken;

use super::execute::execute;
use crate::columnar::MetaCache;
use crate::error::Result;
use crate::store::jobs::{
    HeldLease, JobSpec, claim, hand_back, list, release_lease, remove_outputs, renew,
    result_stands, spec, spec_stands,
};

/// The order in which a worker tries to claim published jobs: least input first (greedy,
/// smallest remaining work first: Luo ch. 5), the older of two equal ones first, then by
/// id, so that every worker tries the same job first and the order never depends on the
/// bucket's listing order.
pub fn claim_order(mut jobs: Vec<JobSpec>) -> Vec<JobSpec> {
    jobs.sort_by(|a, b| {
        (a.input_bytes, a.created_at_ms, &a.id).cmp(&(b.input_bytes, b.created_at_ms, &b.id))
    });
    jobs
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Name in leases and logs.
    pub name: String,
    /// Lease length.
    pub lease_ms: u64,
    /// Renewal period.
    pub heartbeat_ms: u64,
    /// Idle polling period: the first look for jobs after one that found none waits this
    /// long; every further empty look doubles the wait, up to `idle_poll_max_ms`.
    pub poll_ms: u64,
    /// The longest wait between looks when there is nothing to do (an idle worker costs one
    /// LIST per this period). A job published in this process wakes its workers at once.
    pub idle_poll_max_ms: u64,
    /// Scratch directory.
    pub scratch: std::path::PathBuf,
    /// Fault injection for tests: pause after each output file (lets a test kill a worker
    /// mid-job with some output written). 0 in production.
    pub debug_pause_per_file_ms: u64,
}

/// Counters of a worker.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs finished and handed back.
    pub jobs_done: std::sync::atomic::AtomicU64,
    /// Bytes read by finished jobs.
    pub bytes_read: std::sync::atomic::AtomicU64,
    /// Bytes written by finished jobs.
    pub bytes_written: std::sync::atomic::AtomicU64,
}

/// A compaction worker: claims the published job with the least input (greedy: smallest
/// remaining work first, Luo ch. 5), runs it under a renewed lease, hands the result back.
pub struct Worker {
    store: StoreRef,
    layout: Layout,
    config: WorkerConfig,
    clock: ClockRef,
    metas: Arc<MetaCache>,
    /// Counters.
    pub stats: Arc<WorkerStats>,
    specs: parking_lot::Mutex<std::collections::HashMap<String, JobSpec>>,
    wake: Arc<tokio::sync::Notify>,
}

impl Worker {
    /// A worker over the bucket layout `layout`.
    pub fn new(store: StoreRef, layout: Layout, config: WorkerConfig, clock: ClockRef) -> Self {
        Self {
            store,
            layout,
            config,
            clock,
            metas: Arc::new(MetaCache::default()),
            stats: Arc::new(WorkerStats::default()),
            specs: Default::default(),
            wake: Arc::default(),
        }
    }

    /// Wakes the worker from its idle wait whenever `wake` is notified (`notify_waiters`):
    /// a process that publishes jobs hands its in-process workers the same `Notify`.
    pub fn with_wake(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// How long to wait after `idle` looks in a row found nothing.
    fn idle_wait(&self, idle: u32) -> Duration {
        let base = self.config.poll_ms.max(1);
        let max = self.config.idle_poll_max_ms.max(base);
        Duration::from_millis(base.saturating_mul(1u64 << idle.min(20)).min(max))
    }

    /// Runs until cancelled.
    pub async fn run(&self, cancel: CancellationToken) {
        let mut idle = 0u32;
        loop {
            // Listen before looking, so that a job published during the look is not missed.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let worked = match self.run_one(&cancel).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(worker = %self.config.name, error = %e, "compaction job failed");
                    false
                }
            };
            if cancel.is_cancelled() {
                return;
            }
            if worked {
                idle = 0;
                continue;
            }
            tokio::select! {
                biased;
                _ = tokio::time::sleep(self.idle_wait(idle)) => idle = idle.saturating_add(1),
                _ = &mut woken => idle = 0,
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// Claims and runs at most one job. Returns whether one was run.
    pub async fn run_one(&self, cancel: &CancellationToken) -> Result<bool> {
        let ids = list(&self.store, &self.layout, "").await?;
        let mut candidates = Vec::new();
        {
            let mut specs = self.specs.lock();
            specs.retain(|id, _| ids.contains(id));
        }
        for id in &ids {
            let cached = self.specs.lock().get(id).cloned();
            let s = match cached {
                Some(s) => s,
                None => match spec(&self.store, &self.layout, id).await? {
                    Some(s) => {
                        self.specs.lock().insert(id.clone(), s.clone());
                        s
                    }
                    None => continue,
                },
            };
            candidates.push(s);
        }
        for s in claim_order(candidates) {
            if result_stands(&self.store, &self.layout, &s.id).await {
                continue;
            }
            let Some(held) = claim(
                &self.store,
                &self.layout,
                &s.id,
                &self.config.name,
                self.config.lease_ms,
                &self.clock,
            )
            .await?
            else {
                continue;
            };
            // Settled and removed between our listing and the claim: do not redo it.
            if !spec_stands(&self.store, &self.layout, &s.id).await {
                release_lease(&self.store, &self.layout, &s.id).await;
                continue;
            }
            self.work(s, held, cancel).await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn work(
        &self,
        spec: JobSpec,
        mut held: HeldLease,
        cancel: &CancellationToken,
    ) -> Result<()> {
        let attempt = held.lease.attempt;
        tracing::info!(worker = %self.config.name, job = %spec.id, attempt, input_bytes = spec.input_bytes, "compaction job claimed");
        // Cancelled with the worker (synchronously: the merge on its blocking thread stops
        // before the runtime's timers go), or when the lease is lost.
        let lost = cancel.child_token();
        let heartbeat = {
            let (store, layout, clock) =
                (self.store.clone(), self.layout.clone(), self.clock.clone());
            let (lease_ms, every) = (self.config.lease_ms, self.config.heartbeat_ms.max(10));
            let lost = lost.clone();
            let cancel = cancel.clone();
            async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep(Duration::from_millis(every)) => {}
                        _ = cancel.cancelled() => { lost.cancel(); return; }
                    }
                    match renew(&store, &layout, &mut held, lease_ms, &clock).await {
                        Ok(true) => {}
                        Ok(false) => {
                            lost.cancel();
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
                    }
                }
            }
        };
        let scratch = self.config.scratch.join(spec.output_prefix(attempt));
        let run = execute(
            &self.store,
            &spec,
            attempt,
            &scratch,
            &self.metas,
            self.config.debug_pause_per_file_ms,
            &lost,
        );
        let outcome = tokio::select! {
            biased;
            r = run => Some(r),
            _ = heartbeat => None,
            _ = lost.cancelled() => None,
        };
        let _ = crate::localfs::remove_dir_all(&scratch).await;
        match outcome {
            None => {
                tracing::warn!(job = %spec.id, attempt, "lease lost or worker stopping; abandoning the attempt");
                Ok(())
            }
            Some(Err(e)) => Err(e),
            Some(Ok(mut result)) => {
                result.worker = self.config.name.clone();
                if hand_back(&self.store, &self.layout, &result).await? {
                    use std::sync::atomic::Ordering::Relaxed;
                    self.stats.jobs_done.fetch_add(1, Relaxed);
                    self.stats.bytes_read.fetch_add(result.bytes_read, Relaxed);
                    self.stats
                        .bytes_written
                        .fetch_add(result.bytes_written, Relaxed);
                    tracing::info!(job = %spec.id, attempt, took_ms = result.took_ms, "compaction job done");
                } else {
                    // Another attempt won: our files are garbage; remove them now.
                    remove_outputs(&self.store, &spec, &result).await;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobSource;

    fn job(id: &str, input_bytes: u64, created_at_ms: u64) -> JobSpec {
        let mut s = crate::testkit::job_spec(
            JobSource::CrossTier { ssts: Vec::new() },
            Vec::new(),
            input_bytes,
        );
        s.id = id.into();
        s.created_at_ms = created_at_ms;
        s
    }

    /// (jobs as listed: id, input bytes, published at) -> the ids in the order a worker
    /// tries to claim them.
    #[test]
    fn claim_order_is_least_input_then_oldest_then_id() {
        type Listed<'a> = &'a [(&'a str, u64, u64)];
        let cases: &[(Listed, &[&str])] = &[
            (&[], &[]),
            (&[("a", 5, 0)], &["a"]),
            // Least input first, whatever the listing order.
            (
                &[("big", 900, 1), ("small", 10, 2), ("mid", 100, 3)],
                &["small", "mid", "big"],
            ),
            // Equal input: the older first.
            (&[("new", 50, 20), ("old", 50, 10)], &["old", "new"]),
            // Input decides before age.
            (
                &[("old-big", 60, 1), ("new-small", 50, 99)],
                &["new-small", "old-big"],
            ),
            // Equal input and age: by id, so every worker tries the same job first.
            (
                &[
                    ("t-0-1-9", 50, 10),
                    ("t-0-1-10", 50, 10),
                    ("t-0-1-2", 50, 10),
                ],
                &["t-0-1-10", "t-0-1-2", "t-0-1-9"],
            ),
        ];
        for (listed, want) in cases {
            let jobs = listed.iter().map(|(id, b, t)| job(id, *b, *t)).collect();
            let got: Vec<String> = claim_order(jobs).into_iter().map(|s| s.id).collect();
            assert_eq!(got, *want, "listed {listed:?}");
            // The listing order never matters.
            let reversed = listed
                .iter()
                .rev()
                .map(|(id, b, t)| job(id, *b, *t))
                .collect();
            let again: Vec<String> = claim_order(reversed).into_iter().map(|s| s.id).collect();
            assert_eq!(again, *want, "listed reversed {listed:?}");
        }
    }
}
