//! The version set's rules: the shape a shard's manifest must have (one run per column
//! group of each columnar level, as the table's layout declares), and the typed edits that
//! change a shard's tree. An [`Edit`] is applied twice, in the same way, to the manifest
//! committed to the bucket and to the in-memory [`ShardState`] readers take; applying it is
//! pure, and its tests check that both sides name the same files afterwards. The one place
//! that commits an edit (manifest lock, CAS, state install, protections released) is
//! `shard::commit`.

use std::collections::HashSet;
use std::sync::Arc;

use strata_manifest::{Manifest, ParquetFileInfo, S3Level, SstId, SstInfo};

use crate::error::{Error, Result};
use crate::jobs::{JobSource, JobSpec};
use crate::memtable::Memtable;
use crate::state::{ShardState, SstHandle};

/// Gives a manifest the S3 levels of the table's layout (new shards, or older manifests).
pub(crate) fn shape_levels(m: &mut Manifest, groups: &[usize]) -> Result<()> {
    if m.s3_levels.is_empty() {
        m.s3_levels = groups
            .iter()
            .map(|n| S3Level {
                groups: vec![Default::default(); *n],
            })
            .collect();
        return Ok(());
    }
    check_shape(m, groups)
}

/// Checks that a manifest read from the bucket has the table's columnar levels: none yet
/// (a shard no writer has opened since), or one run per column group of every level, so
/// that code indexing a level's runs by the table's groups can trust the shape.
pub(crate) fn check_shape(m: &Manifest, groups: &[usize]) -> Result<()> {
    if m.s3_levels.is_empty() {
        return Ok(());
    }
    let have: Vec<usize> = m.s3_levels.iter().map(|l| l.groups.len()).collect();
    if have != groups {
        return Err(Error::Corrupt(format!(
            "the manifest has S3 levels with {have:?} groups but the table's layout has {groups:?}"
        )));
    }
    Ok(())
}

/// One change to a shard's tree.
pub(crate) enum Edit {
    /// A frozen memtable written as an L0 SST (none when it was empty): the memtable
    /// leaves the state, and the WAL up to it need not be replayed again.
    Flush {
        memtable: Arc<Memtable>,
        sst: Option<Arc<SstHandle>>,
        seq_flushed: u64,
        wal_replay_after: u64,
    },
    /// An NVMe compaction: inputs of `upper` and `output` replaced by `outputs` in `output`.
    Compact {
        upper: usize,
        output: usize,
        upper_inputs: Vec<SstId>,
        lower_inputs: Vec<SstId>,
        outputs: Vec<Arc<SstHandle>>,
        floor: u64,
    },
    /// Promotion by flush (HotRAP §3.4): hot records as an SST at the oldest end of L0.
    Promote { sst: Arc<SstHandle> },
    /// A cross-tier or column-group job's result: its inputs replaced by its outputs in the
    /// columnar level it targets; for a cross-tier job, the last row level's inputs
    /// replaced by the copies HotRAP's retention keeps on NVMe (`retained`).
    Job {
        spec: Box<JobSpec>,
        outputs: Vec<Vec<ParquetFileInfo>>,
        retained: Vec<Arc<SstHandle>>,
        floor: u64,
    },
}

fn sort_by_key_min(ssts: &mut [SstInfo]) {
    ssts.sort_by(|a, b| a.key_min.cmp(&b.key_min));
}

fn sort_handles(level: &mut [Arc<SstHandle>]) {
    level.sort_by(|a, b| a.info.key_min.cmp(&b.info.key_min));
}

impl Edit {
    /// The edit's change to the manifest (the one about to be committed).
    pub(crate) fn apply_to_manifest(&self, m: &mut Manifest) {
        match self {
            Edit::Flush {
                sst,
                seq_flushed,
                wal_replay_after,
                ..
            } => {
                if let Some(h) = sst {
                    m.levels[0].ssts.insert(0, h.info.clone());
                }
                m.seq_flushed = m.seq_flushed.max(*seq_flushed);
                m.wal_replay_after = m.wal_replay_after.max(*wal_replay_after);
            }
            Edit::Compact {
                upper,
                output,
                upper_inputs,
                lower_inputs,
                outputs,
                floor,
            } => {
                m.levels[*upper]
                    .ssts
                    .retain(|s| !upper_inputs.contains(&s.id));
                let out = &mut m.levels[*output].ssts;
                out.retain(|s| !lower_inputs.contains(&s.id));
                out.extend(outputs.iter().map(|h| h.info.clone()));
                sort_by_key_min(out);
                m.compaction_floor_seq = m.compaction_floor_seq.max(*floor);
            }
            Edit::Promote { sst } => m.levels[0].ssts.push(sst.info.clone()),
            Edit::Job {
                spec,
                outputs,
                retained,
                floor,
            } => {
                let last = m.levels.len() - 1;
                match &spec.source {
                    JobSource::CrossTier { ssts } => {
                        let ids: HashSet<SstId> = ssts.iter().map(|s| s.id).collect();
                        let level = &mut m.levels[last].ssts;
                        level.retain(|s| !ids.contains(&s.id));
                        level.extend(retained.iter().map(|h| h.info.clone()));
                        sort_by_key_min(level);
                    }
                    JobSource::Group {
                        level,
                        group,
                        files,
                    } => {
                        let names: HashSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
                        m.s3_levels[*level].groups[*group]
                            .files
                            .retain(|f| !names.contains(f.name.as_str()));
                    }
                }
                let tl = spec.target_level;
                for (t, outs) in spec.targets.iter().zip(outputs) {
                    let names: HashSet<&str> =
                        t.overlapping.iter().map(|f| f.name.as_str()).collect();
                    let run = &mut m.s3_levels[tl].groups[t.group].files;
                    run.retain(|f| !names.contains(f.name.as_str()));
                    run.extend(outs.iter().cloned());
                    run.sort_by(|a, b| a.key_min.cmp(&b.key_min));
                }
                m.compaction_floor_seq = m.compaction_floor_seq.max(*floor);
            }
        }
    }

    /// The edit's change to the in-memory state (the manifest itself is swapped by the
    /// caller). Returns the SSTs it removed from the row levels: compacted away, their files
    /// go once no reader holds them.
    pub(crate) fn apply_to_state(&self, s: &mut ShardState) -> Vec<Arc<SstHandle>> {
        let mut removed = Vec::new();
        let mut take = |level: &mut Vec<Arc<SstHandle>>, ids: &dyn Fn(&SstId) -> bool| {
            level.retain(|h| {
                let gone = ids(&h.info.id);
                if gone {
                    removed.push(h.clone());
                }
                !gone
            });
        };
        match self {
            Edit::Flush { memtable, sst, .. } => {
                s.frozen.retain(|m| !Arc::ptr_eq(m, memtable));
                if let Some(h) = sst {
                    s.levels[0].insert(0, h.clone());
                }
            }
            Edit::Compact {
                upper,
                output,
                upper_inputs,
                lower_inputs,
                outputs,
                ..
            } => {
                take(&mut s.levels[*upper], &|id| upper_inputs.contains(id));
                take(&mut s.levels[*output], &|id| lower_inputs.contains(id));
                s.levels[*output].extend(outputs.iter().cloned());
                sort_handles(&mut s.levels[*output]);
            }
            Edit::Promote { sst } => s.levels[0].push(sst.clone()),
            Edit::Job { spec, retained, .. } => {
                if let JobSource::CrossTier { ssts } = &spec.source {
                    let last = s.levels.len() - 1;
                    let ids: HashSet<SstId> = ssts.iter().map(|s| s.id).collect();
                    take(&mut s.levels[last], &|id| ids.contains(id));
                    // The retained copies take their inputs' places in the same state.
                    s.levels[last].extend(retained.iter().cloned());
                    sort_handles(&mut s.levels[last]);
                }
            }
        }
        removed
    }

    /// The SSTs the edit adds (protected as in flight until the state holds them).
    pub(crate) fn new_ssts(&self) -> Vec<SstId> {
        match self {
            Edit::Flush { sst, .. } => sst.iter().map(|h| h.info.id).collect(),
            Edit::Compact { outputs, .. } => outputs.iter().map(|h| h.info.id).collect(),
            Edit::Promote { sst } => vec![sst.info.id],
            Edit::Job { retained, .. } => retained.iter().map(|h| h.info.id).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobTarget;
    use crate::testkit::parquet;
    use strata_manifest::{GroupRun, Versioned};

    fn sst(dir: &std::path::Path, n: u64, lo: u8, hi: u8) -> Arc<SstHandle> {
        crate::testkit::sst(dir, n, lo, hi, n)
    }

    fn spec(source: JobSource, targets: Vec<JobTarget>) -> JobSpec {
        crate::testkit::job_spec(source, targets, 0)
    }

    /// A state and the manifest it came from, naming the same row-level files.
    fn tree(levels: Vec<Vec<Arc<SstHandle>>>, s3: Vec<S3Level>) -> ShardState {
        let mut m = Manifest::empty(levels.len());
        for (l, files) in levels.iter().enumerate() {
            m.levels[l].ssts = files.iter().map(|h| h.info.clone()).collect();
        }
        m.s3_levels = s3;
        ShardState {
            active: Arc::new(Memtable::new()),
            frozen: vec![Arc::new(Memtable::new())],
            levels,
            manifest: Arc::new(Versioned {
                version: 1,
                value: m,
            }),
        }
    }

    /// Applies `edit` to both sides; checks that they name the same files, level by level
    /// and in order, and returns the new state and the files removed from the row levels.
    fn apply(state: &ShardState, edit: &Edit) -> (ShardState, Vec<SstId>) {
        let mut m = state.manifest.value.clone();
        edit.apply_to_manifest(&mut m);
        let mut next = state.clone();
        let removed = edit.apply_to_state(&mut next);
        for (l, level) in next.levels.iter().enumerate() {
            let in_state: Vec<SstId> = level.iter().map(|h| h.info.id).collect();
            let in_manifest: Vec<SstId> = m.levels[l].ssts.iter().map(|s| s.id).collect();
            assert_eq!(in_state, in_manifest, "level {l}");
        }
        next.manifest = Arc::new(Versioned {
            version: state.manifest.version + 1,
            value: m,
        });
        (next, removed.iter().map(|h| h.info.id).collect())
    }

    fn ids(level: &[Arc<SstHandle>]) -> Vec<u64> {
        level.iter().map(|h| h.info.id.n).collect()
    }

    #[test]
    fn edits_change_the_manifest_and_the_state_alike() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b, c, e) = (
            sst(d, 1, 0, 9),
            sst(d, 2, 10, 19),
            sst(d, 3, 0, 4),
            sst(d, 4, 5, 9),
        );
        let s1 = S3Level {
            groups: vec![GroupRun {
                files: vec![parquet("p1", 0, 50)],
            }],
        };
        let state = tree(vec![vec![a.clone()], vec![b.clone()]], vec![s1]);

        // A flush puts its SST at the newest end of L0 and drops the frozen memtable.
        let f = sst(d, 5, 20, 29);
        let flush = Edit::Flush {
            memtable: state.frozen[0].clone(),
            sst: Some(f.clone()),
            seq_flushed: 5,
            wal_replay_after: 7,
        };
        let (s, removed) = apply(&state, &flush);
        assert_eq!(ids(&s.levels[0]), vec![5, 1]);
        assert!(s.frozen.is_empty() && removed.is_empty());
        assert_eq!(
            (
                s.manifest.value.seq_flushed,
                s.manifest.value.wal_replay_after
            ),
            (5, 7)
        );
        assert_eq!(flush.new_ssts(), vec![f.info.id]);

        // An empty memtable's flush adds no file but still moves the replay point.
        let (s, _) = apply(
            &state,
            &Edit::Flush {
                memtable: state.frozen[0].clone(),
                sst: None,
                seq_flushed: 3,
                wal_replay_after: 4,
            },
        );
        assert_eq!(ids(&s.levels[0]), vec![1]);
        assert_eq!(s.manifest.value.wal_replay_after, 4);

        // A compaction replaces its inputs of both levels by its outputs, in key order.
        let compact = Edit::Compact {
            upper: 0,
            output: 1,
            upper_inputs: vec![a.info.id],
            lower_inputs: vec![],
            outputs: vec![e.clone(), c.clone()],
            floor: 9,
        };
        let (s, removed) = apply(&state, &compact);
        assert!(s.levels[0].is_empty());
        assert_eq!(ids(&s.levels[1]), vec![3, 4, 2]);
        assert_eq!(removed, vec![a.info.id]);
        assert_eq!(s.manifest.value.compaction_floor_seq, 9);

        // Promotion puts its SST at the oldest end of L0.
        let p = sst(d, 6, 30, 31);
        let (s, removed) = apply(&state, &Edit::Promote { sst: p.clone() });
        assert_eq!(ids(&s.levels[0]), vec![1, 6]);
        assert!(removed.is_empty());

        // A cross-tier job: the last row level's inputs leave, retained copies take their
        // place, the target run's overlapping files are replaced by the outputs.
        let kept = sst(d, 7, 12, 12);
        let job = Edit::Job {
            spec: Box::new(spec(
                JobSource::CrossTier {
                    ssts: vec![b.info.clone()],
                },
                vec![JobTarget {
                    group: 0,
                    overlapping: vec![parquet("p1", 0, 50)],
                }],
            )),
            outputs: vec![vec![parquet("p2", 0, 30), parquet("p3", 31, 50)]],
            retained: vec![kept.clone()],
            floor: 2,
        };
        let (s, removed) = apply(&state, &job);
        assert_eq!(ids(&s.levels[1]), vec![7]);
        assert_eq!(removed, vec![b.info.id]);
        let run: Vec<&str> = s.manifest.value.s3_levels[0].groups[0]
            .files
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(run, vec!["p2", "p3"]);
        assert_eq!(job.new_ssts(), vec![kept.info.id]);

        // A column-group job touches no row level.
        let mut two = state.manifest.value.clone();
        two.s3_levels.push(S3Level {
            groups: vec![GroupRun::default()],
        });
        let state2 = ShardState {
            manifest: Arc::new(Versioned {
                version: 1,
                value: two,
            }),
            ..state.clone()
        };
        let mut group_spec = spec(
            JobSource::Group {
                level: 0,
                group: 0,
                files: vec![parquet("p1", 0, 50)],
            },
            vec![JobTarget {
                group: 0,
                overlapping: vec![],
            }],
        );
        group_spec.target_level = 1;
        let (s, removed) = apply(
            &state2,
            &Edit::Job {
                spec: Box::new(group_spec),
                outputs: vec![vec![parquet("q1", 0, 50)]],
                retained: vec![],
                floor: 1,
            },
        );
        assert!(removed.is_empty());
        assert!(s.manifest.value.s3_levels[0].groups[0].files.is_empty());
        assert_eq!(s.manifest.value.s3_levels[1].groups[0].files[0].name, "q1");
        assert_eq!(ids(&s.levels[1]), vec![2]);
    }
}
