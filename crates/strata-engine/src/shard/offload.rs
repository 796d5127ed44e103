//! Offload to the columnar levels, the coordinator: jobs planned on the shard's state
//! (`crate::offload::plan`), admitted (greedy, smallest first: `crate::offload::JobBook`)
//! and published; their results settled and committed through the commit point with
//! HotRAP's hot records kept on NVMe; and the shard's job loop. The pure pieces are in
//! `crate::offload`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use std::sync::atomic::AtomicU64;

use strata_common::clock::ClockRef;
use strata_manifest::{Layout, ParquetFileInfo, SstId};

use crate::config::EngineConfig;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::hotness::HotnessTracker;
use crate::iter::EntryIter;
use crate::jobs::{self, JobSource, JobSpec};
use crate::metrics::ShardStats;
use crate::offload::plan::Planner;
use crate::offload::{Resource, sst_span};
use crate::schema::TableSchema;
use crate::shard::commit::{Reserved, Tree};
use crate::shard::files::Files;
use crate::shard::signals::Signals;
use crate::state::ShardState;
use crate::version::Edit;

/// What the offload coordinator touches: the tree (levels, pins, jobs book, retained
/// copies, promotion cache, the commit point), the bucket's job directory, the SST files
/// retention writes, the hotness tracker, and the NVMe compaction lock under which
/// cross-tier inputs are locked.
pub(crate) struct Offloader {
    pub(crate) name: String,
    pub(crate) table: Arc<TableSchema>,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) clock: ClockRef,
    pub(crate) stats: Arc<ShardStats>,
    pub(crate) epoch: u64,
    /// Job ids of this shard begin with this (table id, shard id).
    pub(crate) job_prefix: String,
    pub(crate) layout: Layout,
    /// Notified when a job is published: wakes the process's idle workers.
    pub(crate) jobs_published: Arc<tokio::sync::Notify>,
    pub(crate) hotness: Option<Arc<HotnessTracker>>,
    /// The tracker's keys of this shard begin with this.
    pub(crate) hotness_prefix: Vec<u8>,
    pub(crate) files: Arc<Files>,
    pub(crate) tree: Arc<Tree>,
    pub(crate) signals: Arc<Signals>,
    /// NVMe compaction's lock (see [`crate::shard::compact::Compactor::lock`]).
    pub(crate) compaction_lock: Arc<tokio::sync::Mutex<()>>,
    pub(crate) next_job: AtomicU64,
}

/// The job-id prefix of a table's shard.
pub(crate) fn job_prefix(table_id: u64, shard_id: u32) -> String {
    format!("{table_id:020}-{shard_id:05}-")
}

impl Offloader {
    fn new_job_id(&self) -> String {
        format!(
            "{}{:010}-{:010}",
            self.job_prefix,
            self.epoch,
            self.next_job.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn hotness_key(&self, key: &[u8]) -> Vec<u8> {
        crate::shard::promote::hotness_key(&self.hotness_prefix, key)
    }

    /// Plans jobs on `state` and this shard's settings now (see [`Planner`]).
    fn planner<'a>(
        &'a self,
        state: &'a ShardState,
    ) -> Planner<'a, impl Fn(&[u8], &[u8]) -> u64 + 'a> {
        Planner {
            config: &self.config,
            table: &self.table,
            state,
            shard_dir: self.files.paths.dir().to_string(),
            pins: self.tree.pinned(),
            keep_above: self.tree.history_horizon(),
            now_ms: self.clock.now_ms(),
            l0_grown_ms: self.tree.l0_grown_ms.load(Ordering::Acquire),
            retained: self.tree.retained_ssts.lock().clone(),
            hot_size: |lo: &[u8], hi: &[u8]| self.hot_size(lo, hi),
        }
    }

    /// Candidate jobs now, with the resources each holds. `force` moves everything down
    /// regardless of level targets (tests, and draining before shutdown).
    pub(crate) fn candidates(
        &self,
        state: &ShardState,
        force: bool,
    ) -> Vec<(JobSpec, HashSet<Resource>)> {
        self.planner(state).candidates(force)
    }

    /// Publishes due jobs that conflict with no outstanding one, smallest first (greedy).
    pub(crate) async fn publish_due(&self, force: bool) -> Result<()> {
        let cands = self.candidates(&self.tree.current(), force);
        self.publish(cands).await
    }

    /// Publishes candidates that conflict with no outstanding job, smallest first (the
    /// order and the conflicts are [`crate::offload::JobBook::admit`]'s).
    pub(crate) async fn publish(&self, cands: Vec<(JobSpec, HashSet<Resource>)>) -> Result<()> {
        // Cross-tier inputs are locked under the NVMe compaction lock, so an NVMe compaction
        // never consumes a file a job reads (its pick and run hold the lock throughout).
        let _nvme = if cands
            .iter()
            .any(|(s, _)| matches!(s.source, JobSource::CrossTier { .. }))
        {
            Some(self.compaction_lock.lock().await)
        } else {
            None
        };
        let last_ids: HashSet<SstId> = self
            .tree
            .current()
            .levels
            .last()
            .map(|l| l.iter().map(|h| h.info.id).collect())
            .unwrap_or_default();
        let admitted = self.tree.jobs.lock().admit(
            cands,
            self.config.jobs.outstanding_max,
            &last_ids,
            self.clock.now_ms(),
            || self.new_job_id(),
        );
        let mut admitted = admitted.into_iter();
        while let Some(spec) = admitted.next() {
            if let Err(e) = jobs::publish(&self.files.store, &self.layout, &spec).await {
                // Neither this job nor the ones after it were published.
                let editor = self.tree.editor().await;
                editor.abandon_job(&spec.id);
                for rest in admitted {
                    editor.abandon_job(&rest.id);
                }
                return Err(e);
            }
            self.jobs_published.notify_waiters();
            tracing::debug!(shard = %self.name, job = %spec.id, bytes = spec.input_bytes, "published compaction job");
        }
        Ok(())
    }

    /// Commits every job whose result is in. Returns how many were settled.
    pub(crate) async fn settle_results(&self) -> Result<usize> {
        let store = &self.files.store;
        let mut ids = self.tree.jobs.lock().ids();
        ids.sort();
        let mut settled = 0;
        for id in ids {
            let Some(result) = jobs::result(store, &self.layout, &id).await? else {
                // A job whose spec vanished (removed by hand or by a lifecycle rule) will
                // never get a result: once a lease long, look, and let it go (its inputs
                // are published again in a new job).
                let due = self.tree.jobs.lock().look_due(
                    &id,
                    self.clock.now_ms(),
                    self.config.jobs.lease_ms,
                );
                if due && !jobs::spec_exists(store, &self.layout, &id).await? {
                    tracing::warn!(shard = %self.name, job = %id, "job spec vanished from the bucket; job abandoned");
                    self.tree.editor().await.abandon_job(&id);
                    jobs::remove(store, &self.layout, &id).await?;
                    settled += 1;
                }
                continue;
            };
            let Some(o) = self.tree.jobs.lock().get(&id).cloned() else {
                continue;
            };
            let committed = self.commit_job(&o.spec, &result).await;
            match &committed {
                // The commit point released the job under the manifest lock, committed
                // or abandoned.
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(shard = %self.name, job = %id, "inputs changed; job abandoned");
                }
                Err(Error::Fenced { .. }) => return committed.map(|_| settled),
                Err(e) => {
                    tracing::warn!(shard = %self.name, job = %id, error = %e, "committing job failed; will retry");
                    continue;
                }
            }
            jobs::remove(store, &self.layout, &id).await?;
            settled += 1;
            self.stats
                .record_s3_job(result.bytes_read, result.bytes_written);
        }
        Ok(settled)
    }

    /// The tracker's (over)estimate of the hot bytes in `[lo, hi]` of this shard (0 without
    /// a tracker).
    fn hot_size(&self, lo: &[u8], hi: &[u8]) -> u64 {
        let Some(t) = self
            .hotness
            .as_ref()
            .filter(|_| self.config.hotness.retention)
        else {
            return 0;
        };
        let mut end = self.hotness_key(hi);
        end.push(0); // just past `hi`
        t.range_hot_size(&self.hotness_key(lo), Some(&end))
    }

    /// Retention (HotRAP §3.5): the records of a cross-tier job's input SSTs whose keys the
    /// tracker calls hot, written to one new SST per input (each within its input's key
    /// range, so the last NVMe level stays non-overlapping once the inputs leave it). The
    /// S3 copy is written all the same: the bucket stays the truth, and these are copies of
    /// the same versions (same sequence numbers), which every merge treats as one: as parts
    /// of one version (a retained partial version and the bucket's resolved copy of it
    /// union to the resolved row; keeping only the newer source's copy lost columns).
    async fn retain_hot(&self, spec: &JobSpec) -> Result<Vec<crate::compaction::Output>> {
        let (Some(tracker), JobSource::CrossTier { ssts }) = (&self.hotness, &spec.source) else {
            return Ok(Vec::new());
        };
        let h = &self.config.hotness;
        if !h.retention && !h.promotion {
            return Ok(Vec::new());
        }
        let cur = self.tree.current();
        let last = cur.levels.len() - 1;
        let mut inputs = Vec::new();
        for s in ssts {
            if let Some(h) = cur.levels[last].iter().find(|h| h.info.id == s.id) {
                let id = self.files.new_sst_id();
                inputs.push((h.clone(), id, self.files.local_sst_path(&id)));
            }
        }
        // Promotion by compaction (§3.1): copies of the promotion cache's records in the
        // job's range go with the retained ones (the commit point drops the range from the
        // cache and moves its epoch).
        let cached = if h.promotion {
            let (lo, hi) = sst_span(ssts);
            self.tree.promotion.lock().range(&lo, &hi)
        } else {
            Vec::new()
        };
        let tracker = tracker.clone();
        let prefix = self.hotness_prefix.clone();
        let (retain, check) = (h.retention, h.check);
        let (block, bloom) = (self.config.sst_block_bytes, self.config.bloom_bits_per_key);
        let (outs, promoted) = strata_common::exec::blocking(
            move || -> Result<(Vec<crate::compaction::Output>, u64)> {
                let hot =
                    |k: &[u8]| tracker.is_hot(&crate::shard::promote::hotness_key(&prefix, k));
                let mut outs = Vec::new();
                let mut promoted = 0u64;
                for (h, id, path) in inputs {
                    let mut entries: Vec<Entry> = Vec::new();
                    if retain {
                        let mut it = crate::sst::SstIter::new(h.reader.clone(), &[]);
                        while let Some(e) = it.next_entry()? {
                            if !check || hot(&e.key) {
                                entries.push(e);
                            }
                        }
                    }
                    // Cached records in this input's range whose key the input does not
                    // hold (if it does, its version is the same or newer).
                    for (k, c) in &cached {
                        let inside = h.covers(k);
                        if inside && (!check || hot(k)) && h.reader.get(k, u64::MAX)?.is_empty() {
                            promoted +=
                                c.versions.iter().map(|e| e.value.len() as u64).sum::<u64>();
                            entries.extend(c.versions.iter().cloned());
                        }
                    }
                    if entries.is_empty() {
                        continue;
                    }
                    entries.sort_by(|a, b| {
                        (&a.key, std::cmp::Reverse(a.seq)).cmp(&(&b.key, std::cmp::Reverse(b.seq)))
                    });
                    let mut b = crate::sst::SstBuilder::create(&path, block, bloom)?;
                    for e in &entries {
                        b.add(e)?;
                    }
                    outs.push(crate::compaction::finish(id, path, b)?);
                }
                Ok((outs, promoted))
            },
        )
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        if promoted > 0 {
            self.stats.record_promoted(false, promoted);
        }
        Ok(outs)
    }

    async fn commit_job(&self, spec: &JobSpec, result: &jobs::JobResult) -> Result<bool> {
        // Retention is an optimisation: when it fails, the job commits without it.
        let mut retained = match self.retain_hot(spec).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(shard = %self.name, "retaining hot records: {e}");
                Vec::new()
            }
        };
        let mut files = self.tree.reserve(retained.iter().map(|o| o.info.id));
        let mut failed = None;
        for o in &retained {
            if let Err(e) = self.files.upload_sst(&o.info.id, &o.path).await {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            tracing::warn!(shard = %self.name, "uploading retained hot records: {e}");
            for o in retained.drain(..) {
                let _ = std::fs::remove_file(&o.path);
            }
            files = self.tree.reserve([]);
        }
        let paths: Vec<std::path::PathBuf> = retained.iter().map(|o| o.path.clone()).collect();
        let bytes: u64 = retained.iter().map(|o| o.info.size_bytes).sum();
        let committed = self.commit_job_with(spec, result, retained, files).await;
        match committed {
            Ok(true) => {
                if bytes > 0 {
                    self.stats.record_retained(bytes);
                    tracing::debug!(shard = %self.name, bytes, files = paths.len(), "retained hot records on NVMe");
                }
                Ok(true)
            }
            other => {
                for path in &paths {
                    let _ = std::fs::remove_file(path);
                }
                other
            }
        }
    }

    async fn commit_job_with(
        &self,
        spec: &JobSpec,
        result: &jobs::JobResult,
        retained: Vec<crate::compaction::Output>,
        files: Reserved,
    ) -> Result<bool> {
        if result.outputs.len() != spec.targets.len() {
            return Err(Error::Corrupt(format!(
                "job {} result has {} outputs for {} targets",
                spec.id,
                result.outputs.len(),
                spec.targets.len()
            )));
        }
        let editor = self.tree.editor().await;
        let cur = editor.current();
        let m = &cur.manifest.value;
        let tl = spec.target_level;
        let present = |level: usize, group: usize, names: &[ParquetFileInfo]| {
            m.s3_levels
                .get(level)
                .and_then(|l| l.groups.get(group))
                .is_some_and(|run| {
                    names
                        .iter()
                        .all(|f| run.files.iter().any(|x| x.name == f.name))
                })
        };
        let last = m.levels.len() - 1;
        let inputs_ok = match &spec.source {
            JobSource::CrossTier { ssts } => ssts
                .iter()
                .all(|s| m.levels[last].ssts.iter().any(|x| x.id == s.id)),
            JobSource::Group {
                level,
                group,
                files,
            } => present(*level, *group, files),
        } && spec
            .targets
            .iter()
            .all(|t| present(tl, t.group, &t.overlapping));
        if !inputs_ok {
            editor.abandon_job(&spec.id);
            return Ok(false);
        }
        let floor = match &spec.source {
            JobSource::CrossTier { ssts } => ssts.iter().map(|s| s.seq_max).max().unwrap_or(0),
            JobSource::Group { files, .. } => files.iter().map(|f| f.seq_max).max().unwrap_or(0),
        }
        .min(spec.keep_above);
        editor
            .commit(
                Edit::Job {
                    spec: Box::new(spec.clone()),
                    outputs: result.outputs.clone(),
                    retained: retained
                        .into_iter()
                        .map(|o| Arc::new(crate::state::SstHandle::new(o.info, o.reader, o.path)))
                        .collect(),
                    floor,
                },
                files,
            )
            .await?;
        Ok(true)
    }
}

/// The writer's job task: publishes due jobs and commits results.
pub(crate) async fn job_loop(o: Arc<Offloader>) {
    let every = Duration::from_millis(o.config.jobs.poll_ms.max(10));
    let signals = &o.signals;
    loop {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(every) => {}
            _ = signals.jobs_wanted.notified() => {}
            _ = signals.cancel.cancelled() => return,
        }
        if signals.is_fenced() {
            return;
        }
        match o.settle_results().await {
            Ok(n) if n > 0 => signals.compaction_wanted.notify_one(),
            Ok(_) => {}
            Err(e) => {
                if signals.is_fenced() {
                    return;
                }
                tracing::warn!(shard = %o.name, error = %e, "settling compaction jobs failed")
            }
        }
        if let Err(e) = o.publish_due(false).await {
            tracing::warn!(shard = %o.name, error = %e, "publishing compaction jobs failed");
        }
        // An L0 below its trigger that stopped growing settles into L1 (and from there into
        // the columnar levels): nothing else would wake the compaction task for it.
        let l0_waiting = !o.tree.current().levels[0].is_empty();
        if l0_waiting
            && crate::compaction::l0_settled(
                &o.config,
                o.tree.l0_grown_ms.load(Ordering::Acquire),
                o.clock.now_ms(),
            )
        {
            signals.compaction_wanted.notify_one();
        }
    }
}

impl Offloader {
    /// Removes jobs an older writer of this shard published (their results can no longer
    /// be committed by it; the files they wrote are garbage collected).
    pub(crate) async fn clear_stale_jobs(&self) -> Result<()> {
        let store = &self.files.store;
        for id in jobs::list(store, &self.layout, &self.job_prefix).await? {
            jobs::remove(store, &self.layout, &id).await?;
        }
        Ok(())
    }
}
