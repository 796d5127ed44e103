//! Leveled compaction of the NVMe tier, the policy: which files to compact (a pure
//! picker over plain level lists, unit-tested here), level size targets, and the output
//! SST of a merge. The shard runs it (`shard::compact`); the version rules a merge applies
//! are `crate::fold`'s. Calls nothing above the formats and the shard state.
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

use std::path::PathBuf;
use std::sync::Arc;

use strata_manifest::{SstId, SstInfo};

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::iter::{EntryIter, MergeIter};
use crate::row::RowCodec;
use crate::sst::{SstBuilder, SstIter, SstReader};
use crate::state::{ShardState, SstHandle};

/// A chosen compaction, over the files of a level (`SstHandle`s in a shard, plain
/// `SstInfo`s in the picker's tests).
#[derive(Debug)]
pub(crate) struct Job<F = Arc<SstHandle>> {
    pub(crate) upper: usize,
    pub(crate) output: usize,
    pub(crate) upper_inputs: Vec<F>,
    pub(crate) lower_inputs: Vec<F>,
    pub(crate) bottommost: bool,
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

pub(crate) fn overlapping<F: LevelFile>(level: &[F], lo: &[u8], hi: &[u8]) -> Vec<F> {
    level
        .iter()
        .filter(|h| h.info().key_max.as_slice() >= lo && h.info().key_min.as_slice() <= hi)
        .cloned()
        .collect()
}

pub(crate) fn range_of<F: LevelFile>(files: &[F]) -> (Vec<u8>, Vec<u8>) {
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
    // Bottommost only if no deeper level, row or columnar, may hold older versions of any
    // key the merge rewrites: the lower inputs are rewritten whole, and their keys can
    // reach past the upper inputs'.
    let (lo, hi) = if lower_inputs.is_empty() {
        (lo, hi)
    } else {
        let (l, h) = range_of(&lower_inputs);
        (lo.min(l), hi.max(h))
    };
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

/// A merge of SSTs into new SSTs of one level, on narrow inputs: what it reads, how it
/// folds versions (`crate::fold::collapse`: pinned snapshots, the history horizon, whether
/// the output is the bottom), and how it writes. Blocking: run it on a blocking thread.
pub(crate) struct Merge {
    /// The inputs, in any order.
    pub(crate) readers: Vec<Arc<SstReader>>,
    /// The table's row codec.
    pub(crate) codec: RowCodec,
    /// Pinned snapshots (sequence numbers), ascending.
    pub(crate) pins: Vec<u64>,
    /// Every version above this sequence number is kept as written (time travel).
    pub(crate) keep_above: u64,
    /// Nothing older lies below the output: tombstones and partial rows are resolved.
    pub(crate) bottommost: bool,
    /// Output block size.
    pub(crate) block_bytes: usize,
    /// Output Bloom filter bits per key.
    pub(crate) bloom_bits_per_key: usize,
    /// Output file size target.
    pub(crate) file_bytes: u64,
}

impl Merge {
    /// Merges the inputs into SSTs of about `file_bytes`, each at a path `new_file` names.
    pub(crate) fn run(self, mut new_file: impl FnMut() -> (SstId, PathBuf)) -> Result<Vec<Output>> {
        let sources: Vec<Box<dyn EntryIter>> = self
            .readers
            .iter()
            .map(|r| Box::new(SstIter::new(r.clone(), &[])) as Box<dyn EntryIter>)
            .collect();
        // Copies of one version (retained or promoted beside another copy) merge as parts.
        let mut merged = MergeIter::with_parts(sources, self.codec.clone());
        let mut outputs = Vec::new();
        let mut builder: Option<(SstId, PathBuf, SstBuilder)> = None;
        let mut group: Vec<Entry> = Vec::new();
        let mut finish_group = |group: &mut Vec<Entry>,
                                builder: &mut Option<(SstId, PathBuf, SstBuilder)>,
                                outputs: &mut Vec<Output>|
         -> Result<()> {
            if group.is_empty() {
                return Ok(());
            }
            let collapsed = crate::fold::collapse(
                &self.codec,
                group,
                &self.pins,
                self.keep_above,
                self.bottommost,
                // Row SSTs hold whole versions: nothing is split by group.
                true,
            )?;
            group.clear();
            if collapsed.is_empty() {
                return Ok(());
            }
            if builder.is_none() {
                let (id, path) = new_file();
                let b = SstBuilder::create(&path, self.block_bytes, self.bloom_bits_per_key)?;
                *builder = Some((id, path, b));
            }
            let Some((_, _, b)) = builder.as_mut() else {
                return Err(Error::Internal("no builder".into()));
            };
            for e in &collapsed {
                b.add(e)?;
            }
            if b.size_bytes() >= self.file_bytes
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
    }
}

/// A written SST, not yet uploaded or committed.
pub(crate) struct Output {
    pub(crate) info: SstInfo,
    pub(crate) path: std::path::PathBuf,
    pub(crate) reader: SstReader,
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

#[cfg(test)]
mod tests {
    use super::*;

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
            Case {
                name: "a lower input reaches past the upper ones, over deeper data: not the bottom",
                levels: vec![
                    vec![],
                    vec![sst(1, b"a", b"d", 5, 80), sst(2, b"m", b"p", 3, 80)],
                    vec![sst(3, b"k", b"q", 1, 10)],
                    vec![sst(4, b"k", b"k", 0, 10)],
                ],
                settled: false,
                columnar: false,
                want: Some((1, vec![2], vec![3], false)),
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

    /// An SST at `dir/<n>.sst` of `(key, seq, delete?)` versions (in key, then newest-first
    /// order), each value a row of one Int64 column equal to its sequence number.
    fn file(dir: &std::path::Path, n: u64, versions: &[(u8, u64, bool)]) -> Arc<SstReader> {
        let codec = RowCodec::new(vec![arrow::datatypes::DataType::Int64]);
        let path = dir.join(format!("in-{n}.sst"));
        let mut b = SstBuilder::create(&path, 4096, 10).unwrap();
        for (k, seq, delete) in versions {
            b.add(&Entry {
                key: bytes::Bytes::from(vec![*k]),
                seq: *seq,
                kind: if *delete {
                    crate::entry::EntryKind::Delete
                } else {
                    crate::entry::EntryKind::Put
                },
                value: if *delete {
                    bytes::Bytes::new()
                } else {
                    bytes::Bytes::from(
                        codec
                            .encode(&[Some(crate::value::Value::Int(*seq as i64))])
                            .unwrap(),
                    )
                },
            })
            .unwrap();
        }
        b.finish().unwrap();
        Arc::new(SstReader::open(&path).unwrap())
    }

    #[test]
    fn a_merge_folds_versions_and_splits_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Newer file: key 1 deleted at 10, key 2 rewritten at 11. Older file: keys 1-4.
        let newer = file(d, 1, &[(1, 10, true), (2, 11, false)]);
        let older = file(
            d,
            2,
            &[(1, 1, false), (2, 2, false), (3, 3, false), (4, 4, false)],
        );
        let run = |bottommost: bool, pins: Vec<u64>, file_bytes: u64| {
            let mut n = 100;
            let merge = Merge {
                readers: vec![newer.clone(), older.clone()],
                codec: RowCodec::new(vec![arrow::datatypes::DataType::Int64]),
                pins,
                keep_above: u64::MAX,
                bottommost,
                block_bytes: 4096,
                bloom_bits_per_key: 10,
                file_bytes,
            };
            merge
                .run(|| {
                    n += 1;
                    (
                        SstId { epoch: 1, n },
                        d.join(format!("out-{bottommost}-{n}.sst")),
                    )
                })
                .unwrap()
        };
        let versions = |outs: &[Output]| -> Vec<(u8, u64)> {
            outs.iter()
                .flat_map(|o| {
                    let mut it = SstIter::new(Arc::new(SstReader::open(&o.path).unwrap()), &[]);
                    let mut v = Vec::new();
                    while let Some(e) = it.next_entry().unwrap() {
                        v.push((e.key[0], e.seq));
                    }
                    v
                })
                .collect()
        };
        // Not the bottom: the delete stays; one version per key.
        let outs = run(false, vec![], 1 << 20);
        assert_eq!(outs.len(), 1);
        assert_eq!(versions(&outs), vec![(1, 10), (2, 11), (3, 3), (4, 4)]);
        assert_eq!((outs[0].info.seq_min, outs[0].info.seq_max), (3, 11));
        // The bottom: the delete and what it hides are gone.
        let outs = run(true, vec![], 1 << 20);
        assert_eq!(versions(&outs), vec![(2, 11), (3, 3), (4, 4)]);
        // A pinned snapshot at 5 keeps the versions it sees.
        let outs = run(true, vec![5], 1 << 20);
        assert_eq!(
            versions(&outs),
            vec![(1, 10), (1, 1), (2, 11), (2, 2), (3, 3), (4, 4)]
        );
        // A tiny size target: a new file after every key, keys in order across files.
        let outs = run(false, vec![], 1);
        assert_eq!(outs.len(), 4);
        assert_eq!(versions(&outs), vec![(1, 10), (2, 11), (3, 3), (4, 4)]);
        assert!(
            outs.windows(2)
                .all(|w| w[0].info.key_max < w[1].info.key_min)
        );
    }
}
