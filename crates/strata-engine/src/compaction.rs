//! Leveled compaction of the NVMe tier.
//!
//! Picking: all of L0 plus the overlapping L1 files once L0 has `l0_compaction_trigger`
//! files (so every L1 version is older than every L0 version); otherwise the oldest file of
//! the first level over its size target plus the overlapping files of the next level.
//!
//! Merging: a key's versions are collapsed within each *stripe* between pinned snapshots
//! (a pinned reader must still find the newest version at or below its sequence number);
//! versions above the history horizon (written within `history_retention_ms`) are each a
//! stripe of their own, so time travel to any sequence number above it stays exact;
//! at the bottom level a partial row with nothing older becomes a whole row and a delete
//! with nothing older disappears.

use std::sync::Arc;

use strata_manifest::SstInfo;

use crate::entry::{Entry, EntryKind, Folded};
use crate::error::{Error, Result};
use crate::iter::{EntryIter, MergeIter};
use crate::row::RowCodec;
use crate::shard::ShardInner;
use crate::sst::{SstBuilder, SstIter, SstReader};
use crate::state::{ShardState, SstHandle};

/// A chosen compaction, over the files of a level (`SstHandle`s in a shard, plain
/// `SstInfo`s in the picker's tests).
#[derive(Debug)]
pub(crate) struct Job<F = Arc<SstHandle>> {
    upper: usize,
    output: usize,
    upper_inputs: Vec<F>,
    lower_inputs: Vec<F>,
    bottommost: bool,
}

/// A file of a level as the picker sees it.
pub(crate) trait LevelFile: Clone {
    /// Its manifest entry.
    fn info(&self) -> &SstInfo;
}

impl LevelFile for Arc<SstHandle> {
    fn info(&self) -> &SstInfo {
        &self.info
    }
}

impl LevelFile for SstInfo {
    fn info(&self) -> &SstInfo {
        self
    }
}

fn overlapping<F: LevelFile>(level: &[F], lo: &[u8], hi: &[u8]) -> Vec<F> {
    level
        .iter()
        .filter(|h| h.info().key_max.as_slice() >= lo && h.info().key_min.as_slice() <= hi)
        .cloned()
        .collect()
}

fn range_of<F: LevelFile>(files: &[F]) -> (Vec<u8>, Vec<u8>) {
    let lo = files
        .iter()
        .map(|h| h.info().key_min.clone())
        .min()
        .unwrap_or_default();
    let hi = files
        .iter()
        .map(|h| h.info().key_max.clone())
        .max()
        .unwrap_or_default();
    (lo, hi)
}

/// Whether an L0 that last gained a file at `l0_grown_ms` has settled by `now_ms` (see
/// `EngineConfig::l0_settle_ms`).
pub(crate) fn l0_settled(
    config: &crate::config::EngineConfig,
    l0_grown_ms: u64,
    now_ms: u64,
) -> bool {
    config.l0_settle_ms > 0 && now_ms.saturating_sub(l0_grown_ms) >= config.l0_settle_ms
}

/// How far over its target the last row level may grow (by bytes cross-tier jobs can move)
/// before compactions into it wait for those jobs (see [`last_level_held`]).
pub(crate) const LAST_ROW_LEVEL_SLACK: u64 = 4;

/// The target size of row level `level` (L1 is `level_bytes_base`).
pub(crate) fn level_target(config: &crate::config::EngineConfig, level: usize) -> u64 {
    let mult = config.level_size_multiplier.max(2);
    config
        .level_bytes_base
        .saturating_mul(mult.saturating_pow(level.saturating_sub(1) as u32))
}

/// Whether compactions into the last row level should wait: the table has columnar levels
/// (cross-tier jobs drain the last row level into them) and that level holds more than
/// [`LAST_ROW_LEVEL_SLACK`] times its target in files those jobs may move (copies kept on
/// NVMe for hot records do not count). Under sustained writes the jobs run behind the
/// compactions into the level; letting it grow made every compaction rewrite all of it
/// (uniform keys overlap every file): gigabytes per flush, and the bucket filled with that
/// churn. Held, L0 piles up instead and the sorted-run limit pushes back on writers (Luo
/// ch. 5), at the rate the jobs drain.
pub(crate) fn last_level_held(
    state: &ShardState,
    config: &crate::config::EngineConfig,
    retained: &std::collections::HashSet<strata_manifest::SstId>,
) -> bool {
    if state.manifest.value.s3_levels.is_empty() || state.levels.len() < 2 {
        return false;
    }
    let last = state.levels.len() - 1;
    let movable: u64 = state.levels[last]
        .iter()
        .filter(|h| !retained.contains(&h.info.id))
        .map(|h| h.info.size_bytes)
        .sum();
    movable > level_target(config, last).saturating_mul(LAST_ROW_LEVEL_SLACK)
}

/// Chooses the next compaction of a shard's row levels, if any is due (see [`pick_in`]);
/// none into the last row level while it is `held` ([`last_level_held`]).
pub(crate) fn pick(
    state: &ShardState,
    config: &crate::config::EngineConfig,
    settled: bool,
    held: bool,
) -> Option<Job> {
    let columnar = |lo: &[u8], hi: &[u8]| {
        state
            .manifest
            .value
            .parquet_files()
            .any(|f| f.key_max.as_slice() >= lo && f.key_min.as_slice() <= hi)
    };
    let job = pick_in(&state.levels, &columnar, config, settled)?;
    if held && job.output + 1 == state.levels.len() {
        return None;
    }
    Some(job)
}

/// The picker on plain values: L0 into L1 at `l0_compaction_trigger` files (at one file
/// once L0 has `settled`), else the oldest file of the first deeper level over its target.
/// `columnar_overlaps(lo, hi)` says whether a columnar level holds keys in [lo, hi] (then
/// the output is not the bottom: older versions may lie below it).
pub(crate) fn pick_in<F: LevelFile>(
    levels: &[Vec<F>],
    columnar_overlaps: &dyn Fn(&[u8], &[u8]) -> bool,
    config: &crate::config::EngineConfig,
    settled: bool,
) -> Option<Job<F>> {
    let last = levels.len().checked_sub(1).filter(|l| *l > 0)?;
    let l0_due = if settled {
        1
    } else {
        config.l0_compaction_trigger.max(1)
    };
    let job = if levels[0].len() >= l0_due {
        let upper_inputs = levels[0].clone();
        let (lo, hi) = range_of(&upper_inputs);
        Some((0, upper_inputs, lo, hi))
    } else {
        let mut found = None;
        let mut target = config.level_bytes_base;
        for (li, level) in levels.iter().enumerate().take(last).skip(1) {
            let size: u64 = level.iter().map(|h| h.info().size_bytes).sum();
            if size > target {
                let oldest = level.iter().min_by_key(|h| h.info().seq_max)?.clone();
                let (lo, hi) = (oldest.info().key_min.clone(), oldest.info().key_max.clone());
                found = Some((li, vec![oldest], lo, hi));
                break;
            }
            target = target.saturating_mul(config.level_size_multiplier.max(2));
        }
        found
    };
    let (upper, upper_inputs, lo, hi) = job?;
    let output = upper + 1;
    let lower_inputs = overlapping(&levels[output], &lo, &hi);
    // Bottommost only if no deeper level, row or columnar, may hold older versions.
    let bottommost = levels[output + 1..]
        .iter()
        .all(|l| overlapping(l, &lo, &hi).is_empty())
        && !columnar_overlaps(&lo, &hi);
    Some(Job {
        upper,
        output,
        upper_inputs,
        lower_inputs,
        bottommost,
    })
}

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
    let locked = inner.locked_ssts.lock();
    job.upper_inputs
        .iter()
        .chain(job.lower_inputs.iter())
        .any(|h| locked.contains(&h.info.id))
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

/// Collapses one key's versions (newest first) into one version per snapshot stripe; every
/// version above `keep_above` (the history horizon) is kept as it is.
pub(crate) fn collapse(
    codec: &RowCodec,
    versions: &[Entry],
    pins: &[u64],
    keep_above: u64,
    bottommost: bool,
) -> Result<Vec<Entry>> {
    let stripe = |seq: u64| {
        if seq > keep_above {
            (1, seq)
        } else {
            (0, pins.partition_point(|p| *p < seq) as u64)
        }
    };
    let mut out: Vec<Entry> = Vec::new();
    let mut i = 0;
    while i < versions.len() {
        let head = &versions[i];
        let s = stripe(head.seq);
        let mut folded = Folded::from_entry(codec, head.kind, &head.value)?;
        let mut j = i + 1;
        while j < versions.len() && stripe(versions[j].seq) == s {
            if !folded.kind.is_full() {
                folded.merge_older(codec, versions[j].kind, &versions[j].value)?;
            }
            j += 1;
        }
        let is_last = j == versions.len();
        if bottommost && is_last {
            folded.finish_at_bottom();
        }
        let drop_tombstone = bottommost && is_last && folded.kind == EntryKind::Delete;
        if !drop_tombstone {
            out.push(Entry {
                key: head.key.clone(),
                seq: head.seq,
                kind: folded.kind,
                value: folded.encode(codec)?,
            });
        }
        i = j;
    }
    Ok(out)
}

/// A written SST, not yet uploaded or committed.
pub(crate) struct Output {
    pub(crate) info: SstInfo,
    pub(crate) path: std::path::PathBuf,
    pub(crate) reader: SstReader,
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
    let codec = inner.table.codec.clone();
    let worker = inner.clone();
    let bottommost = job.bottommost;
    let outputs = tokio::task::spawn_blocking(move || -> Result<Vec<Output>> {
        let sources: Vec<Box<dyn EntryIter>> = readers
            .into_iter()
            .map(|r| Box::new(SstIter::new(r, &[])) as Box<dyn EntryIter>)
            .collect();
        // Copies of one version (retained or promoted beside another copy) merge as parts.
        let mut merged = MergeIter::with_parts(sources, codec.clone());
        let mut outputs = Vec::new();
        let mut builder: Option<(strata_manifest::SstId, std::path::PathBuf, SstBuilder)> = None;
        let mut group: Vec<Entry> = Vec::new();
        let finish_group =
            |group: &mut Vec<Entry>,
             builder: &mut Option<(strata_manifest::SstId, std::path::PathBuf, SstBuilder)>,
             outputs: &mut Vec<Output>|
             -> Result<()> {
                if group.is_empty() {
                    return Ok(());
                }
                let collapsed = collapse(&codec, group, &pins, keep_above, bottommost)?;
                group.clear();
                if collapsed.is_empty() {
                    return Ok(());
                }
                if builder.is_none() {
                    let id = worker.new_sst_id();
                    let path = worker.local_sst_path(&id);
                    let b = SstBuilder::create(
                        &path,
                        worker.config.sst_block_bytes,
                        worker.config.bloom_bits_per_key,
                    )?;
                    *builder = Some((id, path, b));
                }
                let Some((_, _, b)) = builder.as_mut() else {
                    return Err(Error::Internal("no builder".into()));
                };
                for e in &collapsed {
                    b.add(e)?;
                }
                if b.size_bytes() >= worker.config.sst_bytes_target
                    && let Some((id, path, b)) = builder.take()
                {
                    outputs.push(finish(id, path, b)?);
                }
                Ok(())
            };
        while let Some(e) = merged.next_entry()? {
            if group.first().is_some_and(|g: &Entry| g.key != e.key) {
                finish_group(&mut group, &mut builder, &mut outputs)?;
            }
            group.push(e);
        }
        finish_group(&mut group, &mut builder, &mut outputs)?;
        if let Some((id, path, b)) = builder.take() {
            outputs.push(finish(id, path, b)?);
        }
        Ok(outputs)
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))??;

    for o in &outputs {
        inner.in_flight.lock().insert(o.info.id);
    }
    let result = commit(inner, &job, outputs, floor).await;
    if let Err(e) = &result {
        tracing::warn!(shard = %inner.name, error = %e, "compaction commit failed");
    }
    inner.stats.record_compaction(started.elapsed());
    result
}

pub(crate) fn finish(
    id: strata_manifest::SstId,
    path: std::path::PathBuf,
    b: SstBuilder,
) -> Result<Output> {
    let stats = b.finish()?;
    let reader = SstReader::open(&path)?;
    Ok(Output {
        info: SstInfo {
            id,
            key_min: stats.key_min,
            key_max: stats.key_max,
            seq_min: stats.seq_min,
            seq_max: stats.seq_max,
            entries: stats.entries,
            size_bytes: stats.size_bytes,
        },
        path,
        reader,
    })
}

async fn commit(
    inner: &Arc<ShardInner>,
    job: &Job,
    outputs: Vec<Output>,
    floor: u64,
) -> Result<()> {
    let ids: Vec<_> = outputs.iter().map(|o| o.info.id).collect();
    let upload = async {
        for o in &outputs {
            inner.upload_sst(&o.info.id, &o.path).await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    let result = match upload {
        Err(e) => Err(e),
        Ok(()) => {
            let _lock = inner.manifest_lock.lock().await;
            let upper_ids: Vec<_> = job.upper_inputs.iter().map(|h| h.info.id).collect();
            let lower_ids: Vec<_> = job.lower_inputs.iter().map(|h| h.info.id).collect();
            let new_infos: Vec<SstInfo> = outputs.iter().map(|o| o.info.clone()).collect();
            let committed = inner
                .commit_manifest(|m| {
                    m.levels[job.upper]
                        .ssts
                        .retain(|s| !upper_ids.contains(&s.id));
                    m.levels[job.output]
                        .ssts
                        .retain(|s| !lower_ids.contains(&s.id));
                    m.levels[job.output].ssts.extend(new_infos.iter().cloned());
                    m.levels[job.output]
                        .ssts
                        .sort_by(|a, b| a.key_min.cmp(&b.key_min));
                    m.compaction_floor_seq = m.compaction_floor_seq.max(floor);
                })
                .await;
            match committed {
                Err(e) => Err(e),
                Ok(manifest) => {
                    let mut guard = inner.state.write();
                    let mut next = (**guard).clone();
                    next.levels[job.upper].retain(|h| !upper_ids.contains(&h.info.id));
                    next.levels[job.output].retain(|h| !lower_ids.contains(&h.info.id));
                    for o in outputs {
                        next.levels[job.output]
                            .push(Arc::new(SstHandle::new(o.info, o.reader, o.path)));
                    }
                    next.levels[job.output].sort_by(|a, b| a.info.key_min.cmp(&b.info.key_min));
                    next.manifest = manifest;
                    *guard = Arc::new(next);
                    drop(guard);
                    for h in job.upper_inputs.iter().chain(job.lower_inputs.iter()) {
                        h.mark_obsolete();
                    }
                    Ok(())
                }
            }
        }
    };
    let mut in_flight = inner.in_flight.lock();
    for id in ids {
        in_flight.remove(&id);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;
    use arrow::datatypes::DataType;
    use bytes::Bytes;

    fn codec() -> RowCodec {
        RowCodec::new(vec![DataType::Int64, DataType::Int64])
    }

    fn e(seq: u64, kind: EntryKind, vals: &[Option<i64>]) -> Entry {
        let c = codec();
        let row: Vec<Option<Value>> = vals.iter().map(|v| v.map(Value::Int)).collect();
        Entry {
            key: Bytes::from_static(b"k"),
            seq,
            kind,
            value: if kind == EntryKind::Delete {
                Bytes::new()
            } else {
                Bytes::from(c.encode(&row).unwrap())
            },
        }
    }

    fn sst(n: u64, lo: &[u8], hi: &[u8], seq_max: u64, bytes: u64) -> SstInfo {
        SstInfo {
            id: strata_manifest::SstId { epoch: 1, n },
            key_min: lo.to_vec(),
            key_max: hi.to_vec(),
            seq_min: seq_max.saturating_sub(10),
            seq_max,
            entries: 10,
            size_bytes: bytes,
        }
    }

    fn ids(files: &[SstInfo]) -> Vec<u64> {
        files.iter().map(|f| f.id.n).collect()
    }

    #[test]
    fn picker_table() {
        let config = crate::config::EngineConfig {
            levels: 3,
            l0_compaction_trigger: 4,
            level_bytes_base: 100,
            level_size_multiplier: 10,
            ..Default::default()
        };
        let none = |_: &[u8], _: &[u8]| false;
        let all = |_: &[u8], _: &[u8]| true;
        let l0 = |n: usize| -> Vec<SstInfo> {
            (0..n as u64)
                .map(|i| sst(10 + i, b"c", b"p", 100 - i, 10))
                .collect()
        };
        let l1 = vec![sst(1, b"a", b"d", 5, 60), sst(2, b"e", b"z", 6, 30)];
        struct Case {
            name: &'static str,
            levels: Vec<Vec<SstInfo>>,
            settled: bool,
            columnar: bool,
            // (upper, upper inputs, lower inputs, bottommost) or None
            want: Option<(usize, Vec<u64>, Vec<u64>, bool)>,
        }
        let cases = vec![
            Case {
                name: "nothing to do",
                levels: vec![vec![], l1.clone(), vec![]],
                settled: false,
                columnar: false,
                want: None,
            },
            Case {
                name: "L0 below its trigger waits",
                levels: vec![l0(3), l1.clone(), vec![]],
                settled: false,
                columnar: false,
                want: None,
            },
            Case {
                name: "L0 at its trigger: all of L0 and the overlapping L1 files",
                levels: vec![l0(4), l1.clone(), vec![]],
                settled: false,
                columnar: false,
                want: Some((0, vec![10, 11, 12, 13], vec![1, 2], true)),
            },
            Case {
                name: "a settled L0 is compacted at one file",
                levels: vec![l0(1), l1.clone(), vec![]],
                settled: true,
                columnar: false,
                want: Some((0, vec![10], vec![1, 2], true)),
            },
            Case {
                name: "settled, but L0 is empty",
                levels: vec![vec![], vec![], vec![]],
                settled: true,
                columnar: false,
                want: None,
            },
            Case {
                name: "columnar data below: not the bottom",
                levels: vec![l0(4), l1.clone(), vec![]],
                settled: false,
                columnar: true,
                want: Some((0, vec![10, 11, 12, 13], vec![1, 2], false)),
            },
            Case {
                name: "L1 over its target: its oldest file into L2",
                levels: vec![
                    vec![],
                    vec![sst(1, b"a", b"d", 5, 80), sst(2, b"e", b"z", 3, 80)],
                    vec![sst(3, b"f", b"g", 1, 10)],
                ],
                settled: false,
                columnar: false,
                want: Some((1, vec![2], vec![3], true)),
            },
        ];
        for c in cases {
            let cols: &dyn Fn(&[u8], &[u8]) -> bool = if c.columnar { &all } else { &none };
            let got = pick_in(&c.levels, cols, &config, c.settled).map(|j| {
                (
                    j.upper,
                    ids(&j.upper_inputs),
                    ids(&j.lower_inputs),
                    j.bottommost,
                )
            });
            assert_eq!(got, c.want, "{}", c.name);
        }
        // Two row levels (the default): L1 is the last and never compacted into a row
        // level below; cross-tier jobs move it into the columnar levels.
        let two = vec![vec![], vec![sst(1, b"a", b"z", 5, 1 << 40)]];
        assert!(pick_in(&two, &none, &config, false).is_none());
        // A single level has nothing to compact into.
        assert!(pick_in(&[l0(8)], &none, &config, true).is_none());
    }

    #[test]
    fn l0_settles_after_its_quiet_period() {
        let mut config = crate::config::EngineConfig::default();
        assert_eq!(config.l0_settle_ms, 10_000);
        assert!(!l0_settled(&config, 1_000, 10_999));
        assert!(l0_settled(&config, 1_000, 11_000));
        assert!(
            !l0_settled(&config, 5_000, 1_000),
            "a clock behind the stamp never settles"
        );
        config.l0_settle_ms = 0;
        assert!(!l0_settled(&config, 0, u64::MAX), "0 turns settling off");
    }

    #[test]
    fn collapses_to_one_version_without_pins() {
        let v = vec![
            e(5, EntryKind::Partial, &[Some(9), None]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        let out = collapse(&codec(), &v, &[], u64::MAX, false).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].seq, 5);
        assert_eq!(out[0].kind, EntryKind::Put);
        assert_eq!(
            codec().decode(&out[0].value).unwrap(),
            vec![Some(Value::Int(9)), Some(Value::Int(2))]
        );
    }

    #[test]
    fn keeps_versions_a_pinned_snapshot_needs() {
        let v = vec![
            e(5, EntryKind::Put, &[Some(9), Some(9)]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        let out = collapse(&codec(), &v, &[4], u64::MAX, false).unwrap();
        assert_eq!(out.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![5, 3]);
    }

    #[test]
    fn keeps_every_version_above_the_history_horizon() {
        let v = vec![
            e(7, EntryKind::Partial, &[Some(7), None]),
            e(6, EntryKind::Put, &[Some(6), Some(6)]),
            e(3, EntryKind::Put, &[Some(3), Some(3)]),
            e(2, EntryKind::Put, &[Some(2), Some(2)]),
        ];
        // Horizon 4: 7 and 6 stay as written, 3 and 2 collapse to 3.
        let out = collapse(&codec(), &v, &[], 4, false).unwrap();
        assert_eq!(out.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![7, 6, 3]);
        assert_eq!(out[0].kind, EntryKind::Partial);
        // A pin below the horizon still splits the old stripe.
        let out = collapse(&codec(), &v, &[2], 4, false).unwrap();
        assert_eq!(
            out.iter().map(|x| x.seq).collect::<Vec<_>>(),
            vec![7, 6, 3, 2]
        );
    }

    #[test]
    fn drops_tombstones_only_at_the_bottom() {
        let v = vec![
            e(5, EntryKind::Delete, &[]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        assert_eq!(
            collapse(&codec(), &v, &[], u64::MAX, false).unwrap()[0].kind,
            EntryKind::Delete
        );
        assert!(
            collapse(&codec(), &v, &[], u64::MAX, true)
                .unwrap()
                .is_empty()
        );
    }
}
