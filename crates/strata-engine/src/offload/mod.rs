//! Offload to the columnar levels, the pure part: what an outstanding cross-tier or
//! column-group job holds, and which file of a level is a straggler worth moving down.
//! Plain values in, plain values out; the coordinator that publishes jobs and commits
//! their results is `shard::offload`.

pub(crate) mod plan;

use std::collections::{HashMap, HashSet};

use strata_manifest::{ParquetFileInfo, S3Level, SstId, SstInfo};

use crate::jobs::{JobSource, JobSpec};

/// What a job holds while outstanding: runs no other job may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Resource {
    /// The last NVMe level's files taken as input.
    Nvme,
    /// The run of (S3 level, group).
    Run(usize, usize),
}

/// A published job awaiting its result.
#[derive(Debug, Clone)]
pub(crate) struct Outstanding {
    pub(crate) spec: JobSpec,
    pub(crate) resources: HashSet<Resource>,
    /// When the job's spec was last seen in the bucket (ms).
    pub(crate) seen_at_ms: u64,
}

/// The jobs a shard has published and not settled, and the last-NVMe-level SSTs the
/// cross-tier ones read (NVMe compaction leaves those alone). Plain bookkeeping: the
/// coordinator admits jobs through [`JobBook::admit`] and the commit point settles them.
#[derive(Debug, Default)]
pub(crate) struct JobBook {
    outstanding: HashMap<String, Outstanding>,
    locked: HashSet<SstId>,
}

impl JobBook {
    /// Admits candidates, smallest input first (greedy), each given an id by `next_id` and
    /// recorded as outstanding: at most `max` jobs at once, none holding a resource another
    /// holds, and no cross-tier job whose inputs are no longer all in the last NVMe level
    /// (`last_level`). Returns the admitted specs in admission order.
    pub(crate) fn admit(
        &mut self,
        mut cands: Vec<(JobSpec, HashSet<Resource>)>,
        max: usize,
        last_level: &HashSet<SstId>,
        now_ms: u64,
        mut next_id: impl FnMut() -> String,
    ) -> Vec<JobSpec> {
        cands.sort_by_key(|(s, _)| s.input_bytes);
        let mut admitted = Vec::new();
        for (mut spec, resources) in cands {
            if self.outstanding.len() >= max.max(1)
                || self
                    .outstanding
                    .values()
                    .any(|o| !o.resources.is_disjoint(&resources))
            {
                continue;
            }
            if let JobSource::CrossTier { ssts } = &spec.source {
                if !ssts.iter().all(|s| last_level.contains(&s.id)) {
                    continue; // compacted meanwhile
                }
                self.locked.extend(ssts.iter().map(|s| s.id));
            }
            spec.id = next_id();
            self.outstanding.insert(
                spec.id.clone(),
                Outstanding {
                    spec: spec.clone(),
                    resources,
                    seen_at_ms: now_ms,
                },
            );
            admitted.push(spec);
        }
        admitted
    }

    /// Removes a job (committed, abandoned or never published), unlocking its inputs.
    pub(crate) fn settle(&mut self, id: &str) -> Option<Outstanding> {
        let removed = self.outstanding.remove(id)?;
        if let JobSource::CrossTier { ssts } = &removed.spec.source {
            for s in ssts {
                self.locked.remove(&s.id);
            }
        }
        Some(removed)
    }

    /// Whether an outstanding cross-tier job reads `id`.
    pub(crate) fn is_locked(&self, id: &SstId) -> bool {
        self.locked.contains(id)
    }

    /// The outstanding job `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Outstanding> {
        self.outstanding.get(id)
    }

    /// Marks job `id` as seen in the bucket at `now_ms` if it was last seen at least
    /// `every_ms` before: whether it was due for that look.
    pub(crate) fn look_due(&mut self, id: &str, now_ms: u64, every_ms: u64) -> bool {
        match self.outstanding.get_mut(id) {
            Some(o) if now_ms >= o.seen_at_ms.saturating_add(every_ms) => {
                o.seen_at_ms = now_ms;
                true
            }
            _ => false,
        }
    }

    /// Ids of the outstanding jobs, in no particular order.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.outstanding.keys().cloned().collect()
    }

    /// The outstanding jobs.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &Outstanding> {
        self.outstanding.values()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.outstanding.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.outstanding.is_empty()
    }
}

pub(crate) fn overlapping(files: &[ParquetFileInfo], lo: &[u8], hi: &[u8]) -> Vec<ParquetFileInfo> {
    files
        .iter()
        .filter(|f| f.key_max.as_slice() >= lo && f.key_min.as_slice() <= hi)
        .cloned()
        .collect()
}

/// Most rows of the level below a [`straggler`] may overlap, per row of the file.
const STRAGGLER_OVERLAP: u64 = 4;

/// The file of `files` (one run of a columnar level) to move into the level below,
/// `below`, while nothing else is due: one whose keys interleave with `below`'s, so that
/// scans cannot read it as part of the deep run (see [`crate::deep_run`]) and fold it,
/// row by row, into the overlay of every file set. A load in key order leaves one such file
/// at its tail (at 10M rows, 856 K rows folded into every scan's overlay, which then took
/// seconds to build after each change). Only files overlapping at most
/// [`STRAGGLER_OVERLAP`] times their rows below qualify, the least overlapping first: under
/// uniform writes every file of a level overlaps all of the level below, and moving them
/// early would rewrite that level again and again.
pub(crate) fn straggler<'a>(
    files: &'a [ParquetFileInfo],
    below: &[ParquetFileInfo],
) -> Option<&'a ParquetFileInfo> {
    files
        .iter()
        .filter_map(|f| {
            // Rows, not bytes: the level below may be laid out in other column groups.
            let over: u64 = overlapping(below, &f.key_min, &f.key_max)
                .iter()
                .map(|b| b.rows)
                .sum();
            let rows = f.rows.max(1);
            (over > 0 && over <= STRAGGLER_OVERLAP.saturating_mul(rows))
                .then_some((over as f64 / rows as f64, f))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, f)| f)
}

/// The key span `[lo, hi]` of a set of SSTs.
pub(crate) fn sst_span(ssts: &[strata_manifest::SstInfo]) -> (Vec<u8>, Vec<u8>) {
    let lo = ssts.iter().map(|s| s.key_min.clone()).min();
    let hi = ssts.iter().map(|s| s.key_max.clone()).max();
    (lo.unwrap_or_default(), hi.unwrap_or_default())
}

pub(crate) fn size(files: &[ParquetFileInfo]) -> u64 {
    files.iter().map(|f| f.size_bytes).sum()
}

/// The file of the last row level a cross-tier job moves, as HotRAP §3.5 scores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CrossTierPick {
    /// The file at this index has the best score: the least rewriting of the first
    /// columnar level per cold byte moved. The job may take its neighbours too.
    Scored(usize),
    /// No file has a cold byte by the (overestimated) hot sizes: the oldest file that is
    /// not a copy retention just wrote (moving that one would retain it again).
    Oldest(usize),
}

/// Picks the file of the last row level (`files`) to move into the first columnar level
/// (`below`): the best `(size - hot) / (size + overlapping bytes below)`, where `hot_size`
/// tells how many bytes of a key range the hotness tracker holds hot (0 without one), and
/// the oldest file not in `retained` when no score is positive. None when there is no file
/// (or every candidate of the fallback is retained).
pub(crate) fn pick_cross_tier(
    files: &[&SstInfo],
    below: &S3Level,
    hot_size: impl Fn(&[u8], &[u8]) -> u64,
    retained: &HashSet<SstId>,
) -> Option<CrossTierPick> {
    let score = |f: &SstInfo| {
        let ov: u64 = below
            .groups
            .iter()
            .map(|g| size(&overlapping(&g.files, &f.key_min, &f.key_max)))
            .sum();
        let hot = hot_size(&f.key_min, &f.key_max);
        f.size_bytes.saturating_sub(hot) as f64 / (f.size_bytes + ov).max(1) as f64
    };
    let (best, i) = files
        .iter()
        .enumerate()
        .map(|(i, f)| (score(f), i))
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    if best > 0.0 {
        return Some(CrossTierPick::Scored(i));
    }
    files
        .iter()
        .enumerate()
        .filter(|(_, f)| !retained.contains(&f.id))
        .min_by_key(|(_, f)| (f.id.epoch, f.id.n))
        .map(|(i, _)| CrossTierPick::Oldest(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file holding keys `lo..=hi` (one byte each): `mb` MiB, a thousand rows a MiB.
    fn file(name: &str, lo: u8, hi: u8, mb: u64) -> ParquetFileInfo {
        ParquetFileInfo {
            rows: mb * 1000,
            size_bytes: mb << 20,
            ..crate::testkit::parquet(name, lo, hi)
        }
    }

    #[test]
    fn straggler_is_the_least_overlapping_file_within_bounds() {
        // (level, level below, the file expected to move down)
        let cases: Vec<(Vec<ParquetFileInfo>, Vec<ParquetFileInfo>, Option<&str>)> = vec![
            // Nothing below, or nothing overlapping: every file joins the deep run.
            (vec![file("a", 10, 20, 100)], vec![], None),
            (
                vec![file("a", 10, 20, 100), file("b", 30, 40, 100)],
                vec![file("x", 0, 9, 100), file("y", 21, 29, 100)],
                None,
            ),
            // An in-order load's tail: the newest file interleaves with two below.
            (
                vec![file("a", 10, 20, 100), file("tail", 70, 99, 120)],
                vec![
                    file("x", 0, 9, 100),
                    file("y", 75, 80, 90),
                    file("z", 81, 90, 90),
                ],
                Some("tail"),
            ),
            // The least overlapping per row goes first.
            (
                vec![file("a", 10, 20, 100), file("b", 30, 40, 100)],
                vec![file("x", 15, 16, 300), file("y", 35, 36, 50)],
                Some("b"),
            ),
            // Overlapping more than four times its rows: left where it is (uniform
            // writes: every file overlaps the whole level below).
            (
                vec![file("a", 0, 99, 100)],
                vec![file("x", 0, 49, 300), file("y", 50, 99, 300)],
                None,
            ),
            // Exactly four times: moved.
            (
                vec![file("a", 0, 99, 100)],
                vec![file("x", 0, 49, 200), file("y", 50, 99, 200)],
                Some("a"),
            ),
        ];
        for (i, (files, below, want)) in cases.into_iter().enumerate() {
            let got = straggler(&files, &below).map(|f| f.name.as_str());
            assert_eq!(got, want, "case {i}");
        }
    }

    fn sst(n: u64, lo: u8, hi: u8, mb: u64) -> SstInfo {
        SstInfo {
            id: SstId { epoch: 1, n },
            key_min: vec![lo],
            key_max: vec![hi],
            seq_min: 1,
            seq_max: 1,
            entries: mb * 1000,
            size_bytes: mb << 20,
        }
    }

    #[test]
    fn cross_tier_pick_table() {
        let below = S3Level {
            groups: vec![strata_manifest::GroupRun {
                files: vec![file("p", 0, 99, 64)],
            }],
        };
        let empty = S3Level {
            groups: vec![Default::default()],
        };
        let none = HashSet::new();
        let cold = |_: &[u8], _: &[u8]| 0u64;
        // (case, files, level below, hot bytes of keys 100..=199, retained, expected)
        let a = sst(1, 0, 50, 8); // overlaps the 64 MiB below
        let b = sst(2, 100, 150, 8); // overlaps nothing below
        let c = sst(3, 160, 199, 8); // overlaps nothing below
        let hot_above_100 = |lo: &[u8], _: &[u8]| if lo[0] >= 100 { 8u64 << 20 } else { 0 };
        let all_hot = |_: &[u8], _: &[u8]| 8u64 << 20;
        let r1: HashSet<SstId> = [a.id].into_iter().collect();
        let r12: HashSet<SstId> = [a.id, b.id, c.id].into_iter().collect();
        type Hot<'a> = &'a dyn Fn(&[u8], &[u8]) -> u64;
        type Case<'a> = (
            &'a str,
            Vec<&'a SstInfo>,
            &'a S3Level,
            Hot<'a>,
            &'a HashSet<SstId>,
            Option<CrossTierPick>,
        );
        let cases: Vec<Case> = vec![
            ("no file", vec![], &below, &cold, &none, None),
            (
                "least overlap wins",
                vec![&a, &b],
                &below,
                &cold,
                &none,
                Some(CrossTierPick::Scored(1)),
            ),
            (
                "nothing below: a tie goes to the later file",
                vec![&a, &b],
                &empty,
                &cold,
                &none,
                Some(CrossTierPick::Scored(1)),
            ),
            (
                "hot files stay: the cold one moves despite its overlap",
                vec![&a, &b, &c],
                &below,
                &hot_above_100,
                &none,
                Some(CrossTierPick::Scored(0)),
            ),
            (
                "all hot: the oldest moves",
                vec![&c, &b, &a],
                &below,
                &all_hot,
                &none,
                Some(CrossTierPick::Oldest(2)),
            ),
            (
                "all hot: the oldest not retained moves",
                vec![&c, &b, &a],
                &below,
                &all_hot,
                &r1,
                Some(CrossTierPick::Oldest(1)),
            ),
            (
                "all hot and all retained: nothing",
                vec![&a, &b, &c],
                &below,
                &all_hot,
                &r12,
                None,
            ),
        ];
        for (case, files, below, hot, retained, want) in cases {
            assert_eq!(
                pick_cross_tier(&files, below, hot, retained),
                want,
                "{case}"
            );
        }
    }

    fn cross(ns: &[u64], bytes: u64) -> (JobSpec, HashSet<Resource>) {
        let ssts = ns.iter().map(|&n| sst(n, 0, 9, 1)).collect();
        (
            crate::testkit::job_spec(JobSource::CrossTier { ssts }, Vec::new(), bytes),
            HashSet::from([Resource::Nvme, Resource::Run(0, 0)]),
        )
    }

    fn group(level: usize, g: usize, bytes: u64) -> (JobSpec, HashSet<Resource>) {
        (
            crate::testkit::job_spec(
                JobSource::Group {
                    level,
                    group: g,
                    files: Vec::new(),
                },
                Vec::new(),
                bytes,
            ),
            HashSet::from([Resource::Run(level, g), Resource::Run(level + 1, g)]),
        )
    }

    #[test]
    fn the_book_admits_smallest_first_without_conflicts() {
        let last: HashSet<SstId> = [1, 2, 3].map(|n| SstId { epoch: 1, n }).into();
        // (already outstanding, candidates, max, admitted input sizes in order)
        type Cands = Vec<(JobSpec, HashSet<Resource>)>;
        let cases: Vec<(Cands, Cands, usize, Vec<u64>)> = vec![
            // Smallest first; a candidate conflicting with one admitted before it waits.
            (
                vec![],
                vec![group(1, 0, 30), group(0, 0, 20), group(1, 1, 10)],
                4,
                vec![10, 20],
            ),
            // At most `max` at once, counting those already outstanding.
            (
                vec![group(1, 3, 5)],
                vec![group(1, 0, 30), group(1, 1, 20), group(1, 2, 10)],
                3,
                vec![10, 20],
            ),
            // A cross-tier job whose inputs left the last NVMe level is not admitted; one
            // whose inputs are all there is.
            (
                vec![],
                vec![cross(&[1, 4], 5), cross(&[2, 3], 50)],
                4,
                vec![50],
            ),
            // A resource held by an outstanding job blocks a candidate needing it.
            (
                vec![cross(&[1], 5)],
                vec![cross(&[2], 1), group(0, 0, 2)],
                4,
                vec![],
            ),
            (vec![], vec![], 4, vec![]),
        ];
        for (i, (before, cands, max, want)) in cases.into_iter().enumerate() {
            let mut book = JobBook::default();
            let mut n = 0;
            let mut next = || {
                n += 1;
                format!("j{n}")
            };
            book.admit(before, 16, &last, 0, &mut next);
            let outstanding = book.len();
            let got = book.admit(cands, max, &last, 7, &mut next);
            let sizes: Vec<u64> = got.iter().map(|s| s.input_bytes).collect();
            assert_eq!(sizes, want, "case {i}");
            assert_eq!(book.len(), outstanding + want.len(), "case {i}");
            for s in &got {
                assert_eq!(book.get(&s.id).unwrap().seen_at_ms, 7, "case {i}");
            }
        }
    }

    #[test]
    fn settling_a_cross_tier_job_unlocks_its_inputs() {
        let last: HashSet<SstId> = [1, 2].map(|n| SstId { epoch: 1, n }).into();
        let mut book = JobBook::default();
        let got = book.admit(vec![cross(&[1, 2], 5)], 4, &last, 0, || "j".into());
        assert_eq!(got.len(), 1);
        assert!(book.is_locked(&SstId { epoch: 1, n: 2 }));
        assert!(
            !book.look_due("j", 10, 20),
            "seen at 0, looked at 10, every 20"
        );
        assert!(book.look_due("j", 20, 20));
        assert!(book.settle("j").is_some());
        assert!(!book.is_locked(&SstId { epoch: 1, n: 1 }));
        assert!(book.is_empty());
        assert!(book.settle("j").is_none(), "settled once");
    }
}
