//! NVMe compaction as the shard runs it: the background loop, one compaction at a time,
//! the merge on a blocking thread, and the commit of its result. What to compact is
//! `crate::compaction`'s pure picker.

use std::sync::Arc;

use crate::compaction::{
    Job, Merge, Output, l0_settled, last_level_held, overlapping, pick, range_of,
};
use crate::error::{Error, Result};
use crate::shard::ShardInner;
use crate::shard::commit::Reserved;
use crate::sst::SstReader;
use crate::state::SstHandle;
use crate::version::Edit;

/// The background task: compacts whenever asked and something is due.
pub(crate) async fn compaction_loop(inner: Arc<ShardInner>) {
    loop {
        tokio::select! {
            _ = inner.compaction_wanted.notified() => {}
            _ = inner.cancel.cancelled() => return,
        }
        if let Err(e) = compact_until_idle(&inner).await {
            if inner.fenced.load(std::sync::atomic::Ordering::Acquire)
                || inner.cancel.is_cancelled()
            {
                return;
            }
            tracing::warn!(shard = %inner.name, error = %e, "compaction failed; will retry");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            inner.compaction_wanted.notify_one();
        }
    }
}

/// Whether a job would consume SSTs an outstanding cross-tier job reads.
fn touches_locked(inner: &ShardInner, job: &Job) -> bool {
    let book = inner.jobs.lock();
    job.upper_inputs
        .iter()
        .chain(job.lower_inputs.iter())
        .any(|h| book.is_locked(&h.info.id))
}

/// Runs compactions until none is due.
pub(crate) async fn compact_until_idle(inner: &Arc<ShardInner>) -> Result<()> {
    let _one_at_a_time = inner.compaction_lock.lock().await;
    loop {
        let settled = l0_settled(
            &inner.config,
            inner.l0_grown_ms.load(std::sync::atomic::Ordering::Acquire),
            inner.clock.now_ms(),
        );
        let state = inner.current();
        let held = last_level_held(&state, &inner.config, &inner.retained_ssts.lock());
        let Some(job) = pick(&state, &inner.config, settled, held) else {
            break;
        };
        if touches_locked(inner, &job) {
            break; // retried when the cross-tier job settles
        }
        run(inner, job).await?;
    }
    inner.jobs_wanted.notify_one();
    Ok(())
}

/// Compacts every NVMe level into the last one, regardless of size targets. Returns false
/// when an outstanding cross-tier job holds files it needs (wait for the job, then retry).
pub(crate) async fn compact_all_to_last(inner: &Arc<ShardInner>) -> Result<bool> {
    let _one_at_a_time = inner.compaction_lock.lock().await;
    loop {
        let state = inner.current();
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
        if touches_locked(inner, &job) {
            return Ok(false);
        }
        run(inner, job).await?;
    }
}

async fn run(inner: &Arc<ShardInner>, job: Job) -> Result<()> {
    let started = std::time::Instant::now();
    let pins: Vec<u64> = inner.pins.lock().keys().copied().collect();
    let keep_above = inner.history_horizon();
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
        codec: inner.table.codec.clone(),
        pins,
        keep_above,
        bottommost: job.bottommost,
        block_bytes: inner.config.sst_block_bytes,
        bloom_bits_per_key: inner.config.bloom_bits_per_key,
        file_bytes: inner.config.sst_bytes_target,
    };
    let worker = inner.clone();
    let outputs = crate::background::run("strata-compact", move || {
        merge.run(|| {
            let id = worker.new_sst_id();
            let path = worker.local_sst_path(&id);
            (id, path)
        })
    })
    .await??;

    let files = inner.reserve(outputs.iter().map(|o| o.info.id));
    let result = commit(inner, &job, outputs, files, floor).await;
    if let Err(e) = &result {
        tracing::warn!(shard = %inner.name, error = %e, "compaction commit failed");
    }
    inner.stats.record_compaction(started.elapsed());
    result
}

async fn commit(
    inner: &Arc<ShardInner>,
    job: &Job,
    outputs: Vec<Output>,
    files: Reserved,
    floor: u64,
) -> Result<()> {
    let upload = async {
        for o in &outputs {
            inner.upload_sst(&o.info.id, &o.path).await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    // Dropping the reservation releases the outputs; the commit point releases them once
    // it has committed the edit or failed to.
    upload?;
    inner
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
