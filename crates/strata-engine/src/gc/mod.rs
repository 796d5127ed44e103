//! Garbage collection of a shard's objects in the bucket, the rules and their pieces: a
//! pass's plan and report, ages by sightings, pinned versions, batched deletes. The shard
//! runs the passes (`shard::gc`) through `pass`, on a narrow context.
//!
//! By the shard's writer only: a pass
//! that finds a newer writer's manifest (or finds one when it is about to delete) deletes
//! nothing and marks the shard fenced.
//!
//! Retained manifest versions: the newest `manifest_versions_retained`, plus every version
//! younger than `min_age_ms` (readers in other processes may be using them). An object is
//! deleted only if it is older than `min_age_ms` and
//! - an SST: no retained version references it and it is not being uploaded (the bucket
//!   is listed before the protections and the state are read, so an upload that lands
//!   during a pass is either still protected or named by the state);
//! - a WAL segment: not a fence (fences are kept forever) and covered by the oldest retained
//!   version's replay point;
//! - a Parquet file: no retained version (nor a read in flight) references it and it is not
//!   the output of a job this writer still awaits (outputs of dead or losing attempts are
//!   collected this way);
//! - a job's objects: the job is not outstanding (an older writer's, or abandoned);
//! - a manifest version: not retained (never the newest, never one a read in flight uses,
//!   never one a live durable pin of another process names; lapsed pins are deleted).
//!
//! Ages and pin leases are judged by this process's clock alone (`Sightings`): an
//! object's age is the time since a pass of this process first listed it (or saw it
//! change), never the store's `last_modified` against the local clock, and a pin lapses
//! only once its own expiry says so *and* this process has seen it unrenewed for its lease.
//! A store or reader clock that disagrees with the writer's, by any amount, can then only
//! delay collection, never hasten it; what remains is the writer's own clock running fast
//! (a forward jump of it counts as time passed). A new process deletes nothing protected
//! by `min_age_ms` before it has watched that long.

pub(crate) mod pass;

use std::collections::{HashMap, HashSet};

use strata_manifest::SstId;

use crate::error::{Error, Result};

/// What one GC pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// SST objects deleted.
    pub ssts_deleted: usize,
    /// WAL segments deleted.
    pub wal_segments_deleted: usize,
    /// Manifest versions deleted.
    pub manifests_deleted: usize,
    /// Parquet objects deleted.
    pub parquet_deleted: usize,
    /// Abandoned jobs whose objects were deleted.
    pub jobs_deleted: usize,
}

/// What one GC pass would delete: the plan of a dry run, or of a pass before it deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// SST objects.
    pub ssts: Vec<object_store::path::Path>,
    /// WAL segments.
    pub wal_segments: Vec<object_store::path::Path>,
    /// Parquet objects.
    pub parquet: Vec<object_store::path::Path>,
    /// Abandoned jobs (their spec, lease, result and outputs).
    pub jobs: Vec<String>,
    /// Manifest versions.
    pub manifests: Vec<u64>,
    /// Manifest versions kept (the newest ones, young ones, and those readers use).
    pub manifests_retained: Vec<u64>,
}

impl GcPlan {
    /// The counts of the plan.
    pub fn report(&self) -> GcReport {
        GcReport {
            ssts_deleted: self.ssts.len(),
            wal_segments_deleted: self.wal_segments.len(),
            manifests_deleted: self.manifests.len(),
            parquet_deleted: self.parquet.len(),
            jobs_deleted: self.jobs.len(),
        }
    }
}

/// The wait before the next pass: doubled after a quiet one (up to `max`), else `base`.
pub(crate) fn next_wait(wait: u64, quiet: bool, base: u64, max: u64) -> u64 {
    if quiet {
        wait.saturating_mul(2).clamp(base, max)
    } else {
        base
    }
}

/// When this process first saw each object of a shard, by its own clock (see the module
/// documentation): the age GC judges objects by.
#[derive(Debug, Default)]
pub(crate) struct Sightings {
    seen: HashMap<String, Sighting>,
    pass: u64,
}

#[derive(Debug)]
struct Sighting {
    /// What the object looked like (its `last_modified`, or a pin's expiry): a change
    /// restarts its age.
    stamp: i64,
    /// Local time of the first sighting with this stamp.
    first_ms: u64,
    /// The last pass that saw it.
    pass: u64,
}

impl Sightings {
    /// Starts a pass.
    pub(crate) fn begin(&mut self) {
        self.pass += 1;
    }

    /// How long (local clock) this process has seen `path` as it is now (`stamp`); 0 at
    /// its first sighting.
    pub(crate) fn age(&mut self, path: &str, stamp: i64, now_ms: u64) -> u64 {
        let pass = self.pass;
        let s = self.seen.entry(path.to_string()).or_insert(Sighting {
            stamp,
            first_ms: now_ms,
            pass,
        });
        if s.stamp != stamp {
            s.stamp = stamp;
            s.first_ms = now_ms;
        }
        s.pass = pass;
        now_ms.saturating_sub(s.first_ms)
    }

    /// Ends a pass: objects it did not see are gone (or were missed: they start over).
    pub(crate) fn end(&mut self) {
        let pass = self.pass;
        self.seen.retain(|_, s| s.pass == pass);
    }
}

/// Manifest versions pinned by live durable pins of the shard at `paths`; lapsed pins are
/// deleted when `delete_lapsed`.
pub(crate) async fn pinned_versions(
    store: &strata_objstore::StoreRef,
    paths: &strata_manifest::ShardPaths,
    now_ms: u64,
    delete_lapsed: bool,
    sightings: &parking_lot::Mutex<crate::gc::Sightings>,
    lease_ms: u64,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for (location, p) in crate::store::pins::read_pins(store, paths).await? {
        // Live by the reader's clock (its expiry), or by ours: not yet seen unrenewed for
        // a whole lease (a reader whose clock runs behind ours writes expiries that look
        // past already). A renewal changes the expiry and restarts our count.
        let unrenewed_ms = sightings
            .lock()
            .age(location.as_ref(), p.expires_at_ms as i64, now_ms);
        let lease = if p.lease_ms > 0 { p.lease_ms } else { lease_ms };
        if p.expires_at_ms >= now_ms || unrenewed_ms < lease {
            out.push(p.manifest_version);
        } else if delete_lapsed {
            match crate::store::objects::delete(store, &location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(Error::store("delete lapsed pin")(e)),
            }
        }
    }
    Ok(out)
}

/// What protects objects from a GC pass besides their age (see the module documentation),
/// gathered by the pass before it decides.
#[derive(Debug, Default)]
pub(crate) struct Protections {
    /// SSTs named by a retained manifest version or the current state.
    pub(crate) referenced: HashSet<SstId>,
    /// Parquet files (names without the extension) named likewise.
    pub(crate) parquet_referenced: HashSet<String>,
    /// The oldest WAL replay point of the retained versions and the state: segments up
    /// to it are replayed by nobody.
    pub(crate) replay_floor: u64,
    /// SSTs being uploaded, not yet named by the state.
    pub(crate) in_flight: HashSet<SstId>,
    /// Jobs this writer awaits: their outputs' names start with the job's id.
    pub(crate) awaited: Vec<String>,
}

/// Splits the manifest versions listed (oldest first) into those a pass keeps and those it
/// deletes: the newest `keep` are kept, so are the newest of all, any version a reader
/// uses (`reading`), and any younger than `min_age` by `age`. `age` is asked only about
/// versions no other rule keeps: it records sightings (see [`Sightings`]).
pub(crate) fn split_versions(
    versions: &[(u64, object_store::ObjectMeta)],
    keep: usize,
    min_age: u64,
    reading: &HashSet<u64>,
    mut age: impl FnMut(&object_store::ObjectMeta) -> u64,
) -> (Vec<u64>, Vec<u64>) {
    let (mut retained, mut discard) = (Vec::new(), Vec::new());
    let Some((newest, _)) = versions.last() else {
        return (retained, discard);
    };
    let keep_from = versions.len().saturating_sub(keep.max(1));
    for (i, (v, meta)) in versions.iter().enumerate() {
        if i >= keep_from || age(meta) < min_age || v == newest || reading.contains(v) {
            retained.push(*v);
        } else {
            discard.push(*v);
        }
    }
    (retained, discard)
}

/// Adds to `plan` the listed SSTs, WAL segments and Parquet files a pass deletes: those
/// no protection covers and `age` says are at least `min_age` old. Fences (WAL objects of
/// a fence's size or less, `wal::is_fence_size`) are kept for ever. `age` is asked only about objects nothing else keeps.
pub(crate) fn collectable_files(
    ssts: Vec<object_store::ObjectMeta>,
    wal: Vec<object_store::ObjectMeta>,
    parquet: Vec<object_store::ObjectMeta>,
    p: &Protections,
    min_age: u64,
    mut age: impl FnMut(&object_store::ObjectMeta) -> u64,
    plan: &mut GcPlan,
) {
    for m in ssts {
        let name = m.location.filename().unwrap_or_default();
        let Some(id) = name
            .strip_suffix(".sst")
            .and_then(|s| s.parse::<SstId>().ok())
        else {
            continue;
        };
        if p.referenced.contains(&id) || p.in_flight.contains(&id) || age(&m) < min_age {
            continue;
        }
        plan.ssts.push(m.location);
    }
    for m in wal {
        let Some(id) = strata_common::ids::parse_id(m.location.as_ref()) else {
            continue;
        };
        if id <= p.replay_floor && !crate::wal::is_fence_size(m.size) && age(&m) >= min_age {
            plan.wal_segments.push(m.location);
        }
    }
    for m in parquet {
        let Some(name) = m
            .location
            .filename()
            .and_then(|f| f.strip_suffix(".parquet"))
        else {
            continue;
        };
        if p.parquet_referenced.contains(name)
            || p.awaited.iter().any(|j| name.starts_with(j.as_str()))
            || age(&m) < min_age
        {
            continue;
        }
        plan.parquet.push(m.location);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_count_from_this_process_first_sighting_and_restart_on_a_change() {
        let mut s = Sightings::default();
        s.begin();
        // Whatever the store's stamp says (here: an hour ago), a first sighting is age 0.
        assert_eq!(s.age("a", 1_000, 3_600_000), 0);
        s.end();
        s.begin();
        assert_eq!(s.age("a", 1_000, 3_660_000), 60_000);
        // Rewritten (a renewed pin): its age starts over.
        assert_eq!(s.age("a", 2_000, 3_700_000), 0);
        s.end();
        // Not seen by a pass: forgotten, and new again when it reappears.
        s.begin();
        s.end();
        s.begin();
        assert_eq!(s.age("a", 2_000, 3_800_000), 0);
        // A clock that went backwards gives age 0, never a wrapped one.
        assert_eq!(s.age("a", 2_000, 3_000_000), 0);
        s.end();
    }

    #[test]
    fn quiet_passes_back_off_and_a_change_resets() {
        let (base, max) = (60_000, 3_600_000);
        let mut w = base;
        let mut waits = Vec::new();
        for _ in 0..8 {
            w = next_wait(w, true, base, max);
            waits.push(w);
        }
        assert_eq!(
            waits,
            [
                120_000, 240_000, 480_000, 960_000, 1_920_000, 3_600_000, 3_600_000, 3_600_000
            ]
        );
        assert_eq!(next_wait(w, false, base, max), base);
    }

    fn meta(path: &str, size: u64) -> object_store::ObjectMeta {
        object_store::ObjectMeta {
            location: object_store::path::Path::from(path),
            last_modified: Default::default(),
            size,
            e_tag: None,
            version: None,
        }
    }

    #[test]
    fn versions_kept_table() {
        let versions: Vec<(u64, object_store::ObjectMeta)> =
            (1..=6).map(|v| (v, meta(&format!("m/{v}"), 1))).collect();
        // Ages by version: 1-3 old, 4 young, 5-6 old.
        let age_of = |m: &object_store::ObjectMeta| match m.location.as_ref() {
            "m/4" => 10,
            _ => 1_000,
        };
        // (case, keep, reading, expected retained, expected discarded)
        type Case = (&'static str, usize, Vec<u64>, Vec<u64>, Vec<u64>);
        let cases: Vec<Case> = vec![
            (
                "newest 2 kept, young 4 kept",
                2,
                vec![],
                vec![4, 5, 6],
                vec![1, 2, 3],
            ),
            ("0 counts as 1", 0, vec![], vec![4, 6], vec![1, 2, 3, 5]),
            (
                "read versions kept",
                1,
                vec![2],
                vec![2, 4, 6],
                vec![1, 3, 5],
            ),
            ("all kept", 10, vec![], vec![1, 2, 3, 4, 5, 6], vec![]),
        ];
        for (case, keep, reading, want_kept, want_gone) in cases {
            let reading: HashSet<u64> = reading.into_iter().collect();
            let (kept, gone) = split_versions(&versions, keep, 100, &reading, age_of);
            assert_eq!((kept, gone), (want_kept, want_gone), "{case}");
        }
        assert_eq!(
            split_versions(&[], 2, 100, &HashSet::new(), age_of),
            (vec![], vec![])
        );
        // Ages are asked only of versions no other rule keeps (they record sightings).
        let mut asked = Vec::new();
        split_versions(&versions, 2, 100, &[1].into_iter().collect(), |m| {
            asked.push(m.location.to_string());
            1_000
        });
        assert_eq!(asked, vec!["m/1", "m/2", "m/3", "m/4"]);
    }

    #[test]
    fn files_collected_table() {
        let id = |n: u64| SstId { epoch: 1, n };
        let sst_name = |n: u64| format!("s/{}.sst", id(n));
        let protections = Protections {
            referenced: [id(1)].into_iter().collect(),
            parquet_referenced: ["kept".to_string()].into_iter().collect(),
            replay_floor: 5,
            in_flight: [id(2)].into_iter().collect(),
            awaited: vec!["job-7-".to_string()],
        };
        let young = ["s/young", "w/00000000000000000003.wal", "p/young.parquet"];
        let age = |m: &object_store::ObjectMeta| {
            let p = m.location.to_string();
            if young.iter().any(|y| p.starts_with(y)) || p == sst_name(4) {
                10
            } else {
                1_000
            }
        };
        let ssts = vec![
            meta(&sst_name(1), 1),  // referenced
            meta(&sst_name(2), 1),  // in flight
            meta(&sst_name(3), 1),  // garbage
            meta(&sst_name(4), 1),  // young
            meta("s/notes.txt", 1), // not an SST
        ];
        let wal = vec![
            meta("w/00000000000000000001.wal", 100), // replayed by nobody: garbage
            meta("w/00000000000000000002.wal", 0),   // an old-format fence: kept for ever
            meta("w/00000000000000000003.wal", 100), // young
            meta("w/00000000000000000004.wal", crate::wal::FENCE_BYTES), // a fence: kept
            meta("w/00000000000000000006.wal", 100), // past the replay floor
        ];
        let parquet = vec![
            meta("p/kept.parquet", 1),
            meta("p/job-7-0001.parquet", 1), // an awaited job's output
            meta("p/job-6-0001.parquet", 1), // a dead job's output: garbage
            meta("p/young.parquet", 1),
        ];
        let mut plan = GcPlan::default();
        collectable_files(ssts, wal, parquet, &protections, 100, age, &mut plan);
        let names = |v: &[object_store::path::Path]| -> Vec<String> {
            v.iter().map(|p| p.to_string()).collect()
        };
        assert_eq!(names(&plan.ssts), vec![sst_name(3)]);
        assert_eq!(
            names(&plan.wal_segments),
            vec!["w/00000000000000000001.wal"]
        );
        assert_eq!(names(&plan.parquet), vec!["p/job-6-0001.parquet"]);
    }
}
