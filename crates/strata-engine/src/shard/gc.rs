//! Garbage collection as the shard runs it: the background loop, and the shard as the
//! writer a pass asks for its protections (readers, in-flight files, outstanding jobs) and
//! state. The pass is `crate::gc::pass`'s, the rules `crate::gc`'s.

use std::collections::HashSet;
use std::sync::Arc;

use strata_manifest::SstId;

use crate::error::{Error, Result};
use crate::gc::pass::{Pass, Writer};
use crate::gc::{GcPlan, GcReport, next_wait};
use crate::shard::ShardInner;
use crate::state::ShardState;

/// The background GC of a shard: a pass every `gc.interval_ms` while the shard changes;
/// while it does not (same manifest version as at the last pass, which deleted nothing),
/// each wait doubles up to `gc.idle_interval_max_ms`, so an idle shard costs a few LISTs an
/// hour. Garbage left for `min_age_ms` is collected at most one longest wait late.
pub(crate) async fn gc_loop(inner: Arc<ShardInner>) {
    let base = inner.config.gc.interval_ms;
    let max = inner.config.gc.idle_interval_max_ms.max(base);
    let mut wait = base;
    let mut last_version = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            _ = inner.cancel.cancelled() => return,
        }
        if inner.fenced.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let version = inner.current().manifest.version;
        let quiet = match collect(&inner).await {
            Ok(r) if r != GcReport::default() => {
                tracing::info!(shard = %inner.name, ?r, "gc");
                false
            }
            Ok(_) => last_version == Some(version),
            Err(e) => {
                tracing::warn!(shard = %inner.name, error = %e, "gc failed");
                false
            }
        };
        wait = next_wait(wait, quiet, base, max);
        last_version = Some(version);
    }
}

impl Writer for ShardInner {
    fn versions_read(&self) -> HashSet<u64> {
        self.readers.lock().keys().copied().collect()
    }

    fn awaited_jobs(&self) -> Vec<String> {
        self.jobs.lock().ids()
    }

    fn in_flight(&self) -> HashSet<SstId> {
        self.in_flight.snapshot()
    }

    fn current(&self) -> Arc<ShardState> {
        ShardInner::current(self)
    }

    fn deposed(&self, epoch: u64) -> Error {
        self.fenced
            .store(true, std::sync::atomic::Ordering::Release);
        self.fenced_error(epoch)
    }
}

/// A pass over `inner`'s shard, now.
fn pass(inner: &ShardInner) -> Pass<'_> {
    Pass {
        store: &inner.store,
        paths: &inner.paths,
        layout: &inner.s3.layout,
        job_prefix: inner.job_prefix(),
        manifests: &inner.manifests,
        sightings: &inner.sightings,
        epoch: inner.epoch,
        now_ms: inner.clock.now_ms(),
        min_age_ms: inner.config.gc.min_age_ms,
        versions_retained: inner.config.gc.manifest_versions_retained,
        pin_lease_ms: inner.config.pin_lease_ms,
    }
}

/// One GC pass: the plan, then its deletions.
pub(crate) async fn collect(inner: &ShardInner) -> Result<GcReport> {
    pass(inner).collect(inner).await
}

/// What a GC pass deletes now; `tidy` also deletes lapsed snapshot pins (a dry run
/// changes nothing).
pub(crate) async fn plan(inner: &ShardInner, tidy: bool) -> Result<GcPlan> {
    pass(inner).plan(inner, tidy).await
}
