//! Which jobs are due, planned on plain values: the shard's state, its settings and
//! pins, the history horizon, the copies HotRAP retained and the tracker's hot bytes per
//! key range ([`Planner`]). The cross-tier pick (HotRAP's hot-aware score) is
//! [`super::pick_cross_tier`]; the coordinator that publishes what this plans is
//! `shard::offload`.

use std::collections::HashSet;
use std::sync::Arc;

use strata_manifest::{Manifest, ParquetFileInfo, SstId};

use super::{CrossTierPick, Resource, overlapping, pick_cross_tier, size, sst_span, straggler};
use crate::config::EngineConfig;
use crate::jobs::{JobSource, JobSpec, JobTarget};
use crate::schema::TableSchema;
use crate::state::ShardState;

/// Most input bytes of a cross-tier job that moves more than one SST. A job rewrites the
/// part of S3 level 1 its keys overlap (all of it, for uniform writes): 64 MiB jobs into
/// a 1 GiB level rewrote 16 bytes per byte moved and fell behind sustained writes; 256 MiB
/// (the last row level's hold point at the defaults, see `compaction::last_level_held`)
/// cuts that to about 4.
pub(crate) const CROSS_TIER_JOB_BYTES: u64 = 256 << 20;

/// What planning jobs reads of a shard, taken at one moment.
pub(crate) struct Planner<'a, H: Fn(&[u8], &[u8]) -> u64> {
    pub(crate) config: &'a EngineConfig,
    pub(crate) table: &'a TableSchema,
    /// The shard's state.
    pub(crate) state: &'a ShardState,
    /// The shard's directory in the bucket.
    pub(crate) shard_dir: String,
    /// Pinned snapshots (their versions survive a job).
    pub(crate) pins: Vec<u64>,
    /// The history horizon: versions above it survive.
    pub(crate) keep_above: u64,
    pub(crate) now_ms: u64,
    /// When L0 last gained a file.
    pub(crate) l0_grown_ms: u64,
    /// Last-NVMe-level SSTs holding retained copies (never moved down again).
    pub(crate) retained: HashSet<SstId>,
    /// Bytes of hot records in `[lo, hi]` (0 without the tracker or retention).
    pub(crate) hot_size: H,
}

/// The key span a job merges: its source's `[lo, hi]` and every target file it rewrites.
fn merged_span(targets: &[JobTarget], lo: &[u8], hi: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let files = targets.iter().flat_map(|t| t.overlapping.iter());
    let lo = files
        .clone()
        .map(|f| f.key_min.as_slice())
        .fold(lo, std::cmp::min)
        .to_vec();
    let hi = files
        .map(|f| f.key_max.as_slice())
        .fold(hi, std::cmp::max)
        .to_vec();
    (lo, hi)
}

impl<H: Fn(&[u8], &[u8]) -> u64> Planner<'_, H> {
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
        self.state.levels.iter().flatten().any(|h| {
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
        // The job rewrites its target files whole: what it may drop (tombstones, versions
        // under them) spans their keys too, which reach past the source's. A tombstone for
        // a key outside `[lo, hi]` in a target file still hides that key's older versions
        // in deeper levels.
        let (lo, hi) = merged_span(&targets, lo, hi);
        let bottommost = !Self::deeper_overlap(m, target_level, &lo, &hi)
            && !self.older_on_nvme(&source, &targets, &lo, &hi);
        JobSpec {
            id: String::new(),
            table: self.table.entry.clone(),
            shard_dir: self.shard_dir.clone(),
            source,
            target_level,
            targets,
            bottommost,
            pins: self.pins.clone(),
            keep_above: self.keep_above,
            file_bytes: self.config.parquet_file_bytes,
            row_group_rows: self.config.parquet_row_group_rows,
            page_bytes: self.config.parquet_page_bytes,
            page_rows: self.config.parquet_page_rows,
            dictionary_page_bytes: self.config.parquet_dictionary_page_bytes,
            input_bytes,
            created_at_ms: self.now_ms,
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
        let retained = &self.retained;
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
    pub(crate) fn candidates(&self, force: bool) -> Vec<(JobSpec, HashSet<Resource>)> {
        let state = self.state;
        let m = &state.manifest.value;
        let mut out = Vec::new();
        if m.s3_levels.is_empty() {
            return out;
        }
        let last = self.state.levels.len() - 1;
        let last_files = &self.state.levels[last];
        let mult = self.config.level_size_multiplier.max(2);
        let last_target = crate::compaction::level_target(self.config, last);
        let last_size: u64 = last_files.iter().map(|h| h.info.size_bytes).sum();
        let s1 = &m.s3_levels[0];
        if !last_files.is_empty() && (force || last_size > last_target) {
            let chosen: Vec<_> = if force {
                // Everything but retained copies (their records are in S3 already).
                let retained = &self.retained;
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
                let retained = &self.retained;
                match pick_cross_tier(&infos, s1, &self.hot_size, retained) {
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
        let quiet = self.now_ms.saturating_sub(self.l0_grown_ms) >= self.config.l0_settle_ms;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::Memtable;
    use crate::state::SstHandle;
    use crate::testkit::{parquet, sst};
    use arrow_schema::{DataType, Field, Schema};
    use strata_manifest::{GroupRun, S3Level, TableEntry, TableKind, Versioned};

    /// A state of row levels `levels` over two columnar levels, the second holding
    /// `deeper`.
    fn state(levels: Vec<Vec<Arc<SstHandle>>>, deeper: Vec<ParquetFileInfo>) -> ShardState {
        let mut m = Manifest::empty(levels.len());
        for (l, files) in levels.iter().enumerate() {
            m.levels[l].ssts = files.iter().map(|h| h.info.clone()).collect();
        }
        m.s3_levels = vec![
            S3Level {
                groups: vec![GroupRun { files: Vec::new() }],
            },
            S3Level {
                groups: vec![GroupRun { files: deeper }],
            },
        ];
        ShardState {
            active: Arc::new(Memtable::new()),
            frozen: Vec::new(),
            levels,
            manifest: Arc::new(Versioned {
                version: 1,
                value: m,
            }),
        }
    }

    fn table() -> TableSchema {
        table_of_levels(Vec::new())
    }

    /// The test table with `layout` (empty: the default).
    fn table_of_levels(column_groups: Vec<Vec<Vec<String>>>) -> TableSchema {
        TableSchema::new(TableEntry {
            id: 1,
            name: "t".into(),
            kind: TableKind::Table,
            schema: Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("a", DataType::Utf8, true),
            ]),
            primary_key: vec!["id".into()],
            shards: Vec::new(),
            column_groups,
            created_at_ms: 0,
        })
        .unwrap()
    }

    #[test]
    fn the_planner_moves_the_last_row_level_down_when_over_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b, c) = (
            sst(d, 1, 0, 9, 5),
            sst(d, 2, 10, 19, 6),
            sst(d, 3, 20, 29, 7),
        );
        // An L0 copy of older versions of keys 12..=13 (as HotRAP retains), and one of
        // newer versions.
        let (older, newer) = (sst(d, 4, 12, 13, 2), sst(d, 5, 12, 13, 9));
        let table = table();
        let small = EngineConfig::default();
        let tiny = EngineConfig {
            level_bytes_base: 1,
            ..EngineConfig::default()
        };
        type Case<'a> = (
            &'a str,
            &'a EngineConfig,
            ShardState,
            HashSet<SstId>,
            bool,
            Vec<(Vec<u64>, bool)>,
        );
        let ids = |ns: &[u64]| ns.iter().map(|&n| SstId { epoch: 1, n }).collect();
        let cases: Vec<Case> = vec![
            (
                "under its target: nothing",
                &small,
                state(vec![vec![], vec![a.clone(), b.clone()]], vec![]),
                HashSet::new(),
                false,
                vec![],
            ),
            (
                "over its target: the neighbours in key order, bottommost",
                &tiny,
                state(vec![vec![], vec![a.clone(), b.clone(), c.clone()]], vec![]),
                HashSet::new(),
                false,
                vec![(vec![1, 2, 3], true)],
            ),
            (
                "an older copy on NVMe overlapping the job: not bottommost",
                &tiny,
                state(vec![vec![older.clone()], vec![b.clone()]], vec![]),
                HashSet::new(),
                false,
                vec![(vec![2], false)],
            ),
            (
                "a newer version above the job does not matter",
                &tiny,
                state(vec![vec![newer.clone()], vec![b.clone()]], vec![]),
                HashSet::new(),
                false,
                vec![(vec![2], true)],
            ),
            (
                "a file deeper in the bucket overlapping the job: not bottommost",
                &tiny,
                state(vec![vec![], vec![b.clone()]], vec![parquet("p", 0, 50)]),
                HashSet::new(),
                false,
                vec![(vec![2], false)],
            ),
            (
                "forced: every file but the retained copies, whatever the target (the copy,
                 as old as the job's versions and inside its span, makes it not bottommost)",
                &small,
                state(vec![vec![], vec![a.clone(), b.clone(), c.clone()]], vec![]),
                ids(&[2]),
                true,
                vec![(vec![1, 3], false)],
            ),
        ];
        for (what, config, state, retained, force, want) in cases {
            let planner = Planner {
                config,
                table: &table,
                state: &state,
                shard_dir: "t/0".into(),
                pins: vec![3],
                keep_above: 4,
                now_ms: 100,
                l0_grown_ms: 100,
                retained,
                hot_size: |_: &[u8], _: &[u8]| 0,
            };
            let got: Vec<(Vec<u64>, bool)> = planner
                .candidates(force)
                .into_iter()
                .map(|(spec, res)| {
                    let JobSource::CrossTier { ssts } = &spec.source else {
                        panic!("{what}: a column-group job {spec:?}");
                    };
                    assert!(res.contains(&Resource::Nvme), "{what}");
                    assert_eq!((spec.pins.clone(), spec.keep_above), (vec![3], 4), "{what}");
                    (ssts.iter().map(|s| s.id.n).collect(), spec.bottommost)
                })
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }

    /// A state with empty row levels over columnar levels of one group each, level `i`
    /// holding `columnar[i]`.
    fn columnar_state(columnar: Vec<Vec<ParquetFileInfo>>) -> ShardState {
        let mut st = state(vec![vec![], vec![]], vec![]);
        let mut m = st.manifest.value.clone();
        m.s3_levels = columnar
            .into_iter()
            .map(|files| S3Level {
                groups: vec![GroupRun { files }],
            })
            .collect();
        st.manifest = Arc::new(Versioned {
            version: 1,
            value: m,
        });
        st
    }

    /// The jobs between columnar levels: a run over its level's target moves the file that
    /// rewrites the least below it per byte; forced, whole runs move; once the shard has
    /// settled and nothing else is due, a straggler interleaving with the deepest level.
    #[test]
    fn the_planner_moves_columnar_runs_down_and_stragglers_once_settled() {
        // Three columnar levels of one group each.
        let table = table_of_levels(vec![vec![vec!["a".to_string()]]; 3]);
        let (p1, p2, p3) = (
            parquet("p1", 0, 9),
            parquet("p2", 10, 19),
            parquet("p3", 20, 29),
        );
        let q = parquet("q", 5, 14);
        let defaults = EngineConfig::default();
        let small_levels = EngineConfig {
            s3_level_bytes_base: 1500,
            ..EngineConfig::default()
        };
        // (what, settings, columnar levels, force, when L0 last grew, (source level, files,
        // target level, bottommost) of each job)
        type Case<'a> = (
            &'a str,
            &'a EngineConfig,
            Vec<Vec<ParquetFileInfo>>,
            bool,
            u64,
            Vec<(usize, Vec<&'a str>, usize, bool)>,
        );
        let settled = 0;
        let just_grown = 99_000;
        let cases: Vec<Case> = vec![
            (
                "one file in the top level, nothing below: nothing",
                &defaults,
                vec![vec![p1.clone()], vec![]],
                false,
                settled,
                vec![],
            ),
            (
                "a run over its target: the file whose move rewrites least below",
                &small_levels,
                vec![vec![p1.clone(), p2.clone()], vec![parquet("q0", 0, 9)]],
                false,
                just_grown,
                vec![(0, vec!["p2"], 1, true)],
            ),
            (
                "the same over a level under the target level: not bottommost (equal scores: the last)",
                &small_levels,
                vec![
                    vec![p1.clone(), p2.clone()],
                    vec![],
                    vec![parquet("deep", 0, 99)],
                ],
                false,
                just_grown,
                vec![(0, vec!["p2"], 1, false)],
            ),
            (
                "forced: every run with files moves whole, whatever the targets",
                &defaults,
                vec![vec![p1.clone(), p2.clone()], vec![p3.clone()], vec![]],
                true,
                just_grown,
                vec![(0, vec!["p1", "p2"], 1, true), (1, vec!["p3"], 2, true)],
            ),
            (
                "settled, nothing due: the file interleaving with the deepest level",
                &defaults,
                vec![vec![p1.clone(), p3.clone()], vec![q.clone()]],
                false,
                settled,
                vec![(0, vec!["p1"], 1, true)],
            ),
            (
                "a flush within the settle time: no straggler yet",
                &defaults,
                vec![vec![p1.clone(), p3.clone()], vec![q.clone()]],
                false,
                just_grown,
                vec![],
            ),
            (
                "settled, but no file of the level above overlaps the deepest one: nothing",
                &defaults,
                vec![vec![p3.clone()], vec![q.clone()]],
                false,
                settled,
                vec![],
            ),
        ];
        for (what, config, columnar, force, l0_grown_ms, want) in cases {
            let state = columnar_state(columnar);
            let planner = Planner {
                config,
                table: &table,
                state: &state,
                shard_dir: "t/0".into(),
                pins: Vec::new(),
                keep_above: u64::MAX,
                now_ms: 100_000,
                l0_grown_ms,
                retained: HashSet::new(),
                hot_size: |_: &[u8], _: &[u8]| 0,
            };
            let got: Vec<(usize, Vec<String>, usize, bool)> = planner
                .candidates(force)
                .into_iter()
                .map(|(spec, res)| {
                    let JobSource::Group {
                        level,
                        group,
                        files,
                    } = &spec.source
                    else {
                        panic!("{what}: a cross-tier job {spec:?}");
                    };
                    assert_eq!(*group, 0, "{what}");
                    let held =
                        HashSet::from([Resource::Run(*level, 0), Resource::Run(*level + 1, 0)]);
                    assert_eq!(res, held, "{what}");
                    let names = files.iter().map(|f| f.name.clone()).collect();
                    (*level, names, spec.target_level, spec.bottommost)
                })
                .collect();
            let want: Vec<(usize, Vec<String>, usize, bool)> = want
                .into_iter()
                .map(|(l, names, t, b)| (l, names.iter().map(|n| n.to_string()).collect(), t, b))
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }
}
