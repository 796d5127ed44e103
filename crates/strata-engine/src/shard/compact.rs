//! NVMe compaction as the shard runs it: the background loop, one compaction at a time,
//! the merge on a blocking thread, and the commit of its result. What to compact is
//! `crate::compaction`'s pure picker.

use std::sync::Arc;

use crate::compaction::{
    Job, Merge, Output, l0_settled, last_level_held, overlapping, pick, range_of,
};
use crate::config::EngineConfig;
use crate::error::{Error, Result};
use crate::metrics::ShardStats;
use crate::schema::TableSchema;
use crate::shard::commit::{Reserved, Tree};
use crate::shard::files::Files;
use crate::shard::signals::Signals;
use crate::sst::SstReader;
use crate::state::SstHandle;
use crate::version::Edit;
use strata_common::clock::ClockRef;

/// What NVMe compaction touches: the tree (levels, pins, the jobs that lock files, the
/// commit point), the SST files, and the one-compaction-at-a-time lock it shares with the
/// publishing of cross-tier jobs.
pub(crate) struct Compactor {
    pub(crate) name: String,
    pub(crate) table: Arc<TableSchema>,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) clock: ClockRef,
    pub(crate) stats: Arc<ShardStats>,
    pub(crate) files: Arc<Files>,
    pub(crate) tree: Arc<Tree>,
    pub(crate) signals: Arc<Signals>,
    /// One compaction at a time per shard; cross-tier inputs are locked under it too.
    pub(crate) lock: Arc<tokio::sync::Mutex<()>>,
}

/// The background task: compacts whenever asked and something is due.
pub(crate) async fn compaction_loop(c: Arc<Compactor>) {
    let signals = &c.signals;
    loop {
        tokio::select! {
            biased;
            _ = signals.compaction_wanted.notified() => {}
            _ = signals.cancel.cancelled() => return,
        }
        if let Err(e) = c.compact_until_idle().await {
            if signals.stopping() {
                return;
            }
            tracing::warn!(shard = %c.name, error = %e, "compaction failed; will retry");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            signals.compaction_wanted.notify_one();
        }
    }
}

impl Compactor {
    /// Whether a job would consume SSTs an outstanding cross-tier job reads.
    fn touches_locked(&self, job: &Job) -> bool {
        let book = self.tree.jobs.lock();
        job.upper_inputs
            .iter()
            .chain(job.lower_inputs.iter())
            .any(|h| book.is_locked(&h.info.id))
    }

    /// Runs compactions until none is due.
    pub(crate) async fn compact_until_idle(&self) -> Result<()> {
        let _one_at_a_time = self.lock.lock().await;
        loop {
            let settled = l0_settled(
                &self.config,
                self.tree
                    .l0_grown_ms
                    .load(std::sync::atomic::Ordering::Acquire),
                self.clock.now_ms(),
            );
            let state = self.tree.current();
            let held = last_level_held(&state, &self.config, &self.tree.retained_ssts.lock());
            let Some(job) = pick(&state, &self.config, settled, held) else {
                break;
            };
            if self.touches_locked(&job) {
                break; // retried when the cross-tier job settles
            }
            self.run(job).await?;
        }
        self.signals.jobs_wanted.notify_one();
        Ok(())
    }

    /// Compacts every NVMe level into the last one, regardless of size targets. Returns false
    /// when an outstanding cross-tier job holds files it needs (wait for the job, then retry).
    pub(crate) async fn compact_all_to_last(&self) -> Result<bool> {
        let _one_at_a_time = self.lock.lock().await;
        loop {
            let state = self.tree.current();
            let last = state.levels.len() - 1;
            let Some(upper) = (0..last).find(|l| !state.levels[*l].is_empty()) else {
                return Ok(true);
            };
            let upper_inputs = state.levels[upper].clone();
            let (lo, hi) = range_of(&upper_inputs);
            let output = upper + 1;
            let job = Job {
                upper,
                output,
                upper_inputs,
                lower_inputs: overlapping(&state.levels[output], &lo, &hi),
                bottommost: false,
            };
            if self.touches_locked(&job) {
                return Ok(false);
            }
            self.run(job).await?;
        }
    }

    async fn run(&self, job: Job) -> Result<()> {
        let started = std::time::Instant::now();
        let pins = self.tree.pinned();
        let keep_above = self.tree.history_horizon();
        let readers: Vec<Arc<SstReader>> = job
            .upper_inputs
            .iter()
            .chain(job.lower_inputs.iter())
            .map(|h| h.reader.clone())
            .collect();
        let floor = job
            .upper_inputs
            .iter()
            .chain(job.lower_inputs.iter())
            .map(|h| h.info.seq_max)
            .max()
            .unwrap_or(0)
            .min(keep_above);
        let merge = Merge {
            readers,
            codec: self.table.codec.clone(),
            pins,
            keep_above,
            bottommost: job.bottommost,
            block_bytes: self.config.sst_block_bytes,
            bloom_bits_per_key: self.config.bloom_bits_per_key,
            file_bytes: self.config.sst_bytes_target,
        };
        let worker = self.files.clone();
        let outputs = crate::background::run("strata-compact", move || {
            merge.run(|| {
                let id = worker.new_sst_id();
                let path = worker.local_sst_path(&id);
                (id, path)
            })
        })
        .await??;

        let files = self.tree.reserve(outputs.iter().map(|o| o.info.id));
        let result = self.commit(&job, outputs, files, floor).await;
        if let Err(e) = &result {
            tracing::warn!(shard = %self.name, error = %e, "compaction commit failed");
        }
        self.stats.record_compaction(started.elapsed());
        result
    }

    async fn commit(
        &self,
        job: &Job,
        outputs: Vec<Output>,
        files: Reserved,
        floor: u64,
    ) -> Result<()> {
        let upload = async {
            for o in &outputs {
                self.files.upload_sst(&o.info.id, &o.path).await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        // Dropping the reservation releases the outputs; the commit point releases them once
        // it has committed the edit or failed to.
        upload?;
        self.tree
            .commit(
                Edit::Compact {
                    upper: job.upper,
                    output: job.output,
                    upper_inputs: job.upper_inputs.iter().map(|h| h.info.id).collect(),
                    lower_inputs: job.lower_inputs.iter().map(|h| h.info.id).collect(),
                    outputs: outputs
                        .into_iter()
                        .map(|o| Arc::new(SstHandle::new(o.info, o.reader, o.path)))
                        .collect(),
                    floor,
                },
                files,
            )
            .await
    }
}
