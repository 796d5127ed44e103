//! Garbage collection as the shard runs it: the background loop, and the shard's tree as
//! the writer a pass asks for its protections (readers, in-flight files, outstanding jobs)
//! and state. The pass is `crate::gc::pass`'s, the rules `crate::gc`'s.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use strata_common::clock::ClockRef;
use strata_manifest::{Layout, SstId};

use crate::config::EngineConfig;
use crate::error::{Error, Result};
use crate::gc::pass::{Pass, Writer};
use crate::gc::{GcPlan, GcReport, Sightings, next_wait};
use crate::shard::commit::Tree;
use crate::shard::files::Files;
use crate::shard::signals::Signals;
use crate::state::ShardState;

/// What GC touches: the bucket (through the shard's files and the bucket layout), the
/// tree's protections and manifest chain, and its own record of when it first saw each
/// object.
pub(crate) struct Collector {
    pub(crate) name: String,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) clock: ClockRef,
    pub(crate) epoch: u64,
    pub(crate) layout: Layout,
    /// The shard's job ids begin with this.
    pub(crate) job_prefix: String,
    pub(crate) files: Arc<Files>,
    pub(crate) tree: Arc<Tree>,
    pub(crate) signals: Arc<Signals>,
    /// When this process first saw each object (GC ages by its own clock).
    pub(crate) sightings: Mutex<Sightings>,
}

/// The background GC of a shard: a pass every `gc.interval_ms` while the shard changes;
/// while it does not (same manifest version as at the last pass, which deleted nothing),
/// each wait doubles up to `gc.idle_interval_max_ms`, so an idle shard costs a few LISTs an
/// hour. Garbage left for `min_age_ms` is collected at most one longest wait late.
pub(crate) async fn gc_loop(c: Arc<Collector>) {
    let base = c.config.gc.interval_ms;
    let max = c.config.gc.idle_interval_max_ms.max(base);
    let mut wait = base;
    let mut last_version = None;
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            _ = c.signals.cancel.cancelled() => return,
        }
        if c.signals.is_fenced() {
            return;
        }
        let version = c.tree.current().manifest.version;
        let quiet = match c.collect().await {
            Ok(r) if r != GcReport::default() => {
                tracing::info!(shard = %c.name, ?r, "gc");
                false
            }
            Ok(_) => last_version == Some(version),
            Err(e) => {
                tracing::warn!(shard = %c.name, error = %e, "gc failed");
                false
            }
        };
        wait = next_wait(wait, quiet, base, max);
        last_version = Some(version);
    }
}

/// The writer as a GC pass sees it.
struct Protections<'a> {
    tree: &'a Tree,
    signals: &'a Signals,
}

impl Writer for Protections<'_> {
    fn versions_read(&self) -> HashSet<u64> {
        self.tree.readers.lock().keys().copied().collect()
    }

    fn awaited_jobs(&self) -> Vec<String> {
        self.tree.jobs.lock().ids()
    }

    fn in_flight(&self) -> HashSet<SstId> {
        self.tree.in_flight.snapshot()
    }

    fn current(&self) -> Arc<ShardState> {
        self.tree.current()
    }

    fn deposed(&self, epoch: u64) -> Error {
        self.signals.deposed(epoch)
    }
}

impl Collector {
    /// A pass over the shard, now.
    fn pass(&self) -> Pass<'_> {
        Pass {
            store: &self.files.store,
            paths: &self.files.paths,
            layout: &self.layout,
            job_prefix: self.job_prefix.clone(),
            manifests: self.tree.manifests(),
            sightings: &self.sightings,
            epoch: self.epoch,
            now_ms: self.clock.now_ms(),
            min_age_ms: self.config.gc.min_age_ms,
            versions_retained: self.config.gc.manifest_versions_retained,
            pin_lease_ms: self.config.pin_lease_ms,
        }
    }

    fn protections(&self) -> Protections<'_> {
        Protections {
            tree: &self.tree,
            signals: &self.signals,
        }
    }

    /// One GC pass: the plan, then its deletions.
    pub(crate) async fn collect(&self) -> Result<GcReport> {
        self.pass().collect(&self.protections()).await
    }

    /// What a GC pass deletes now; `tidy` also deletes lapsed snapshot pins (a dry run
    /// changes nothing).
    pub(crate) async fn plan(&self, tidy: bool) -> Result<GcPlan> {
        self.pass().plan(&self.protections(), tidy).await
    }
}
