//! Offload to the columnar levels, the coordinator: picking cross-tier and column-group
//! jobs (greedy, smallest first; HotRAP's hot records kept on NVMe), publishing them,
//! settling and committing their results, and the shard's job loop. The pure pieces are
//! in `crate::offload`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use strata_manifest::{Manifest, ParquetFileInfo, SstId};

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::iter::EntryIter;
use crate::jobs::{self, JobSource, JobSpec, JobTarget};
use crate::offload::{
    CrossTierPick, Resource, overlapping, pick_cross_tier, size, sst_span, straggler,
};
use crate::shard::ShardInner;
use crate::shard::commit::Reserved;
use crate::state::ShardState;
use crate::version::Edit;

impl ShardInner {
    pub(crate) fn job_prefix(&self) -> String {
        format!("{:020}-{:05}-", self.table.entry.id, self.shard_id)
    }

    fn new_job_id(&self) -> String {
        format!(
            "{}{:010}-{:010}",
            self.job_prefix(),
            self.epoch,
            self.next_job.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Whether any deeper S3 level than `level` holds files overlapping `[lo, hi]` in the
    /// groups descending from the target groups (conservatively: in any group).
    fn deeper_overlap(m: &Manifest, level: usize, lo: &[u8], hi: &[u8]) -> bool {
        m.s3_levels.iter().skip(level + 1).any(|l| {
            l.groups
                .iter()
                .any(|g| !overlapping(&g.files, lo, hi).is_empty())
        })
    }

    /// Whether an NVMe SST other than the job's inputs may hold versions of `[lo, hi]` as
    /// old as the job's: a copy HotRAP retained on NVMe while newer versions moved down.
    /// Such a job is not bottommost: a tombstone it dropped (or a partial update it
    /// completed with NULLs) would let the retained copy resurrect once it moves down in
    /// turn. Judged by sequence numbers, which the manifest keeps (the set of retained
    /// SSTs is in memory only and empty after a reopen).
    fn older_on_nvme(
        &self,
        source: &JobSource,
        targets: &[JobTarget],
        lo: &[u8],
        hi: &[u8],
    ) -> bool {
        let (inputs, source_seq): (Vec<SstId>, u64) = match source {
            JobSource::CrossTier { ssts } => (
                ssts.iter().map(|s| s.id).collect(),
                ssts.iter().map(|s| s.seq_max).max().unwrap_or(0),
            ),
            JobSource::Group { files, .. } => (
                Vec::new(),
                files.iter().map(|f| f.seq_max).max().unwrap_or(0),
            ),
        };
        let seq_max = targets
            .iter()
            .flat_map(|t| t.overlapping.iter().map(|f| f.seq_max))
            .fold(source_seq, u64::max);
        self.current().levels.iter().flatten().any(|h| {
            !inputs.contains(&h.info.id)
                && h.info.seq_min <= seq_max
                && h.info.key_max.as_slice() >= lo
                && h.info.key_min.as_slice() <= hi
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn spec(
        &self,
        m: &Manifest,
        source: JobSource,
        target_level: usize,
        target_groups: Vec<usize>,
        lo: &[u8],
        hi: &[u8],
        source_bytes: u64,
    ) -> JobSpec {
        let targets: Vec<JobTarget> = target_groups
            .into_iter()
            .map(|g| JobTarget {
                group: g,
                overlapping: overlapping(&m.s3_levels[target_level].groups[g].files, lo, hi),
            })
            .collect();
        let input_bytes = source_bytes + targets.iter().map(|t| size(&t.overlapping)).sum::<u64>();
        let bottommost = !Self::deeper_overlap(m, target_level, lo, hi)
            && !self.older_on_nvme(&source, &targets, lo, hi);
        JobSpec {
            id: String::new(),
            table: self.table.entry.clone(),
            shard_dir: self.paths.dir().to_string(),
            source,
            target_level,
            targets,
            bottommost,
            pins: self.pins.lock().keys().copied().collect(),
            keep_above: self.history_horizon(),
            file_bytes: self.config.parquet_file_bytes,
            row_group_rows: self.config.parquet_row_group_rows,
            page_bytes: self.config.parquet_page_bytes,
            page_rows: self.config.parquet_page_rows,
            dictionary_page_bytes: self.config.parquet_dictionary_page_bytes,
            input_bytes,
            created_at_ms: self.clock.now_ms(),
        }
    }

    /// A cross-tier job's inputs: `best`, and while the last NVMe level stays over its
    /// target by `overflow` bytes, its neighbours in key order (so the job's key span stays
    /// narrow), up to [`CROSS_TIER_JOB_BYTES`]. One file per job cannot keep up with a
    /// bulk load (each job is a round of publish, lease, Parquet rewrite and commit), and
    /// the NVMe tier would outgrow its budget. Retained copies are not moved again.
    fn with_neighbours(
        &self,
        files: &[Arc<crate::state::SstHandle>],
        best: &crate::state::SstHandle,
        overflow: u64,
    ) -> Vec<strata_manifest::SstInfo> {
        let retained = self.retained_ssts.lock();
        let movable = |h: &crate::state::SstHandle| !retained.contains(&h.info.id);
        let Some(at) = files.iter().position(|h| h.info.id == best.info.id) else {
            return vec![best.info.clone()];
        };
        let (mut lo, mut hi) = (at, at + 1);
        let mut bytes = best.info.size_bytes;
        let fits = |bytes: u64, h: &crate::state::SstHandle| {
            bytes < overflow && bytes + h.info.size_bytes <= CROSS_TIER_JOB_BYTES
        };
        loop {
            let right = files.get(hi).filter(|h| movable(h) && fits(bytes, h));
            if let Some(h) = right {
                bytes += h.info.size_bytes;
                hi += 1;
                continue;
            }
            let left = lo
                .checked_sub(1)
                .map(|i| &files[i])
                .filter(|h| movable(h) && fits(bytes, h));
            if let Some(h) = left {
                bytes += h.info.size_bytes;
                lo -= 1;
                continue;
            }
            break;
        }
        files[lo..hi].iter().map(|h| h.info.clone()).collect()
    }

    /// Candidate jobs now, with the resources each holds. `force` moves everything down
    /// regardless of level targets (tests, and draining before shutdown).
    pub(crate) fn candidates(
        &self,
        state: &ShardState,
        force: bool,
    ) -> Vec<(JobSpec, HashSet<Resource>)> {
        let m = &state.manifest.value;
        let mut out = Vec::new();
        if m.s3_levels.is_empty() {
            return out;
        }
        let last = state.levels.len() - 1;
        let last_files = &state.levels[last];
        let mult = self.config.level_size_multiplier.max(2);
        let last_target = crate::compaction::level_target(&self.config, last);
        let last_size: u64 = last_files.iter().map(|h| h.info.size_bytes).sum();
        let s1 = &m.s3_levels[0];
        if !last_files.is_empty() && (force || last_size > last_target) {
            let chosen: Vec<_> = if force {
                // Everything but retained copies (their records are in S3 already).
                let retained = self.retained_ssts.lock();
                last_files
                    .iter()
                    .filter(|h| !retained.contains(&h.info.id))
                    .map(|h| h.info.clone())
                    .collect()
            } else {
                // The file whose move rewrites the least of S3 level 1 per byte moved; with
                // the hotness tracker, per cold byte moved (HotRAP §3.5).
                let infos: Vec<&strata_manifest::SstInfo> =
                    last_files.iter().map(|h| &h.info).collect();
                let retained = self.retained_ssts.lock().clone();
                match pick_cross_tier(&infos, s1, |lo, hi| self.hot_size(lo, hi), &retained) {
                    Some(CrossTierPick::Scored(i)) => {
                        self.with_neighbours(last_files, &last_files[i], last_size - last_target)
                    }
                    Some(CrossTierPick::Oldest(i)) => vec![last_files[i].info.clone()],
                    None => Vec::new(),
                }
            };
            if !chosen.is_empty() {
                let (lo, hi) = sst_span(&chosen);
                let bytes = chosen.iter().map(|s| s.size_bytes).sum();
                let groups: Vec<usize> = (0..s1.groups.len()).collect();
                let mut res: HashSet<Resource> =
                    groups.iter().map(|g| Resource::Run(0, *g)).collect();
                res.insert(Resource::Nvme);
                out.push((
                    self.spec(
                        m,
                        JobSource::CrossTier { ssts: chosen },
                        0,
                        groups,
                        &lo,
                        &hi,
                        bytes,
                    ),
                    res,
                ));
            }
        }
        let mut target = self.config.s3_level_bytes_base;
        for level in 0..m.s3_levels.len().saturating_sub(1) {
            for (g, run) in m.s3_levels[level].groups.iter().enumerate() {
                if run.files.is_empty() || !(force || run.size_bytes() > target) {
                    continue;
                }
                let children = self.table.child_groups(level + 1, Some(g));
                let next = &m.s3_levels[level + 1];
                let files: Vec<ParquetFileInfo> = if force {
                    run.files.clone()
                } else {
                    let best = run.files.iter().max_by(|a, b| {
                        let score = |f: &ParquetFileInfo| {
                            let ov: u64 = children
                                .iter()
                                .map(|c| {
                                    size(&overlapping(
                                        &next.groups[*c].files,
                                        &f.key_min,
                                        &f.key_max,
                                    ))
                                })
                                .sum();
                            f.size_bytes as f64 / (f.size_bytes + ov).max(1) as f64
                        };
                        score(a).total_cmp(&score(b))
                    });
                    best.cloned().into_iter().collect()
                };
                out.push(self.group_job(m, level, g, children, files));
            }
            target = target.saturating_mul(mult);
        }
        // Once the shard has settled: no flush for `l0_settle_ms` (at once when it is 0).
        let quiet = self
            .clock
            .now_ms()
            .saturating_sub(self.l0_grown_ms.load(Ordering::Acquire))
            >= self.config.l0_settle_ms;
        if out.is_empty() && !force && quiet {
            out.extend(self.straggler_jobs(m));
        }
        out
    }

    /// A job moving `files` of group `g` of S3 level `level` into its `children` groups of
    /// the level below, with the resources it holds.
    fn group_job(
        &self,
        m: &Manifest,
        level: usize,
        g: usize,
        children: Vec<usize>,
        files: Vec<ParquetFileInfo>,
    ) -> (JobSpec, HashSet<Resource>) {
        let lo = files
            .iter()
            .map(|f| f.key_min.clone())
            .min()
            .unwrap_or_default();
        let hi = files
            .iter()
            .map(|f| f.key_max.clone())
            .max()
            .unwrap_or_default();
        let bytes = size(&files);
        let mut res: HashSet<Resource> = children
            .iter()
            .map(|c| Resource::Run(level + 1, *c))
            .collect();
        res.insert(Resource::Run(level, g));
        (
            self.spec(
                m,
                JobSource::Group {
                    level,
                    group: g,
                    files,
                },
                level + 1,
                children,
                &lo,
                &hi,
                bytes,
            ),
            res,
        )
    }

    /// Jobs that keep the columnar levels disjoint once the shard has settled and nothing
    /// else is due: per group of the level just above the deepest one holding files, its
    /// [`straggler`] moved down.
    fn straggler_jobs(&self, m: &Manifest) -> Vec<(JobSpec, HashSet<Resource>)> {
        let Some(deepest) = m
            .s3_levels
            .iter()
            .rposition(|l| l.groups.iter().any(|g| !g.files.is_empty()))
        else {
            return Vec::new();
        };
        let Some(level) = deepest.checked_sub(1) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (g, run) in m.s3_levels[level].groups.iter().enumerate() {
            let children = self.table.child_groups(deepest, Some(g));
            // Every child group holds the versions the parent's jobs wrote: one is enough.
            let Some(below) = children
                .first()
                .and_then(|c| m.s3_levels[deepest].groups.get(*c))
            else {
                continue;
            };
            if let Some(f) = straggler(&run.files, &below.files) {
                let files = vec![f.clone()];
                out.push(self.group_job(m, level, g, children, files));
            }
        }
        out
    }

    /// Publishes due jobs that conflict with no outstanding one, smallest first (greedy).
    pub(crate) async fn publish_due(self: &Arc<Self>, force: bool) -> Result<()> {
        let cands = self.candidates(&self.current(), force);
        self.publish(cands).await
    }

    /// Publishes candidates that conflict with no outstanding job, smallest first (the
    /// order and the conflicts are [`crate::offload::JobBook::admit`]'s).
    pub(crate) async fn publish(
        self: &Arc<Self>,
        cands: Vec<(JobSpec, HashSet<Resource>)>,
    ) -> Result<()> {
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
            .current()
            .levels
            .last()
            .map(|l| l.iter().map(|h| h.info.id).collect())
            .unwrap_or_default();
        let admitted = self.jobs.lock().admit(
            cands,
            self.config.jobs.outstanding_max,
            &last_ids,
            self.clock.now_ms(),
            || self.new_job_id(),
        );
        let mut admitted = admitted.into_iter();
        while let Some(spec) = admitted.next() {
            if let Err(e) = jobs::publish(&self.store, &self.s3.layout, &spec).await {
                // Neither this job nor the ones after it were published.
                self.settle_job(&spec.id);
                for rest in admitted {
                    self.settle_job(&rest.id);
                }
                return Err(e);
            }
            self.s3.jobs_published.notify_waiters();
            tracing::debug!(shard = %self.name, job = %spec.id, bytes = spec.input_bytes, "published compaction job");
        }
        Ok(())
    }

    /// Commits every job whose result is in. Returns how many were settled.
    pub(crate) async fn settle_results(self: &Arc<Self>) -> Result<usize> {
        let mut ids = self.jobs.lock().ids();
        ids.sort();
        let mut settled = 0;
        for id in ids {
            let Some(result) = jobs::result(&self.store, &self.s3.layout, &id).await? else {
                // A job whose spec vanished (removed by hand or by a lifecycle rule) will
                // never get a result: once a lease long, look, and let it go (its inputs
                // are published again in a new job).
                let due =
                    self.jobs
                        .lock()
                        .look_due(&id, self.clock.now_ms(), self.config.jobs.lease_ms);
                if due && !jobs::spec_exists(&self.store, &self.s3.layout, &id).await? {
                    tracing::warn!(shard = %self.name, job = %id, "job spec vanished from the bucket; job abandoned");
                    self.settle_job(&id);
                    jobs::remove(&self.store, &self.s3.layout, &id).await?;
                    settled += 1;
                }
                continue;
            };
            let Some(o) = self.jobs.lock().get(&id).cloned() else {
                continue;
            };
            let committed = self.commit_job(&o.spec, &result).await;
            match &committed {
                // The commit point released the job, under the manifest lock.
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(shard = %self.name, job = %id, "inputs changed; job abandoned");
                    self.settle_job(&id);
                }
                Err(Error::Fenced { .. }) => return committed.map(|_| settled),
                Err(e) => {
                    tracing::warn!(shard = %self.name, job = %id, error = %e, "committing job failed; will retry");
                    continue;
                }
            }
            jobs::remove(&self.store, &self.s3.layout, &id).await?;
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
            .s3
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
        let (Some(tracker), JobSource::CrossTier { ssts }) = (&self.s3.hotness, &spec.source)
        else {
            return Ok(Vec::new());
        };
        let h = &self.config.hotness;
        if !h.retention && !h.promotion {
            return Ok(Vec::new());
        }
        let cur = self.current();
        let last = cur.levels.len() - 1;
        let mut inputs = Vec::new();
        for s in ssts {
            if let Some(h) = cur.levels[last].iter().find(|h| h.info.id == s.id) {
                let id = self.new_sst_id();
                inputs.push((h.clone(), id, self.local_sst_path(&id)));
            }
        }
        // Promotion by compaction (§3.1): copies of the promotion cache's records in the
        // job's range go with the retained ones (the commit point drops the range from the
        // cache and moves its epoch).
        let cached = if h.promotion {
            let (lo, hi) = sst_span(ssts);
            self.promotion.lock().range(&lo, &hi)
        } else {
            Vec::new()
        };
        let tracker = tracker.clone();
        let prefix = self.hotness_key(&[]);
        let (retain, check) = (h.retention, h.check);
        let (block, bloom) = (self.config.sst_block_bytes, self.config.bloom_bits_per_key);
        let (outs, promoted) = tokio::task::spawn_blocking(
            move || -> Result<(Vec<crate::compaction::Output>, u64)> {
                let hot = |k: &[u8]| {
                    let mut key = prefix.clone();
                    key.extend_from_slice(k);
                    tracker.is_hot(&key)
                };
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
        let mut files = self.reserve(retained.iter().map(|o| o.info.id));
        let mut failed = None;
        for o in &retained {
            if let Err(e) = self.upload_sst(&o.info.id, &o.path).await {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            tracing::warn!(shard = %self.name, "uploading retained hot records: {e}");
            for o in retained.drain(..) {
                let _ = std::fs::remove_file(&o.path);
            }
            files = self.reserve([]);
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
        let editor = self.editor().await;
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

/// Most input bytes of a cross-tier job that moves more than one SST. A job rewrites the
/// part of S3 level 1 its keys overlap (all of it, for uniform writes): 64 MiB jobs into
/// a 1 GiB level rewrote 16 bytes per byte moved and fell behind sustained writes; 256 MiB
/// (the last row level's hold point at the defaults, see `compaction::last_level_held`)
/// cuts that to about 4.
const CROSS_TIER_JOB_BYTES: u64 = 256 << 20;

/// The writer's job task: publishes due jobs and commits results.
pub(crate) async fn job_loop(inner: Arc<ShardInner>) {
    let every = Duration::from_millis(inner.config.jobs.poll_ms.max(10));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = inner.jobs_wanted.notified() => {}
            _ = inner.cancel.cancelled() => return,
        }
        if inner.fenced.load(Ordering::Acquire) {
            return;
        }
        match inner.settle_results().await {
            Ok(n) if n > 0 => inner.compaction_wanted.notify_one(),
            Ok(_) => {}
            Err(e) => {
                if inner.fenced.load(Ordering::Acquire) {
                    return;
                }
                tracing::warn!(shard = %inner.name, error = %e, "settling compaction jobs failed")
            }
        }
        if let Err(e) = inner.publish_due(false).await {
            tracing::warn!(shard = %inner.name, error = %e, "publishing compaction jobs failed");
        }
        // An L0 below its trigger that stopped growing settles into L1 (and from there into
        // the columnar levels): nothing else would wake the compaction task for it.
        let l0_waiting = !inner.current().levels[0].is_empty();
        if l0_waiting
            && crate::compaction::l0_settled(
                &inner.config,
                inner.l0_grown_ms.load(Ordering::Acquire),
                inner.clock.now_ms(),
            )
        {
            inner.compaction_wanted.notify_one();
        }
    }
}

/// Removes jobs an older writer of this shard published (their results can no longer be
/// committed by it; the files they wrote are garbage collected).
pub(crate) async fn clear_stale_jobs(inner: &ShardInner) -> Result<()> {
    for id in jobs::list(&inner.store, &inner.s3.layout, &inner.job_prefix()).await? {
        jobs::remove(&inner.store, &inner.s3.layout, &id).await?;
    }
    Ok(())
}
