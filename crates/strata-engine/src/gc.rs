//! Garbage collection of a shard's objects in the bucket, by the shard's writer only: a pass
//! that finds a newer writer's manifest (or finds one when it is about to delete) deletes
//! nothing and marks the shard fenced.
//!
//! Retained manifest versions: the newest `manifest_versions_retained`, plus every version
//! younger than `min_age_ms` (readers in other processes may be using them). An object is
//! deleted only if it is older than `min_age_ms` and
//! - an SST: no retained version references it and it is not being uploaded (the bucket
//!   is listed before the protections and the state are read, so an upload that lands
//!   during a pass is either still protected or named by the state);
//! - a WAL segment: non-empty (fences are kept forever) and covered by the oldest retained
//!   version's replay point;
//! - a Parquet file: no retained version (nor a read in flight) references it and it is not
//!   the output of a job this writer still awaits (outputs of dead or losing attempts are
//!   collected this way);
//! - a job's objects: the job is not outstanding (an older writer's, or abandoned);
//! - a manifest version: not retained (never the newest, never one a read in flight uses,
//!   never one a live durable pin of another process names; lapsed pins are deleted).
//!
//! Ages and pin leases are judged by this process's clock alone ([`Sightings`]): an
//! object's age is the time since a pass of this process first listed it (or saw it
//! change), never the store's `last_modified` against the local clock, and a pin lapses
//! only once its own expiry says so *and* this process has seen it unrenewed for its lease.
//! A store or reader clock that disagrees with the writer's, by any amount, can then only
//! delay collection, never hasten it; what remains is the writer's own clock running fast
//! (a forward jump of it counts as time passed). A new process deletes nothing protected
//! by `min_age_ms` before it has watched that long.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use strata_common::ids::parse_id;
use strata_manifest::SstId;

use crate::error::{Error, Result};
use crate::shard::ShardInner;

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

/// The background GC of a shard: a pass every `gc.interval_ms` while the shard changes;
/// while it does not (same manifest version as at the last pass, which deleted nothing),
/// each wait doubles up to `gc.idle_interval_max_ms`, so an idle shard costs a few LISTs an
/// hour. Garbage left for `min_age_ms` is collected at most one longest wait late.
pub(crate) async fn gc_loop(inner: Arc<ShardInner>) {
    let base = inner.config.gc.interval_ms;
    let max = inner.config.gc.idle_interval_max_ms.max(base);
    let mut wait = base;
    let mut last_version = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            _ = inner.cancel.cancelled() => return,
        }
        if inner.fenced.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let version = inner.current().manifest.version;
        let quiet = match collect(&inner).await {
            Ok(r) if r != GcReport::default() => {
                tracing::info!(shard = %inner.name, ?r, "gc");
                false
            }
            Ok(_) => last_version == Some(version),
            Err(e) => {
                tracing::warn!(shard = %inner.name, error = %e, "gc failed");
                false
            }
        };
        wait = next_wait(wait, quiet, base, max);
        last_version = Some(version);
    }
}

/// The wait before the next pass: doubled after a quiet one (up to `max`), else `base`.
fn next_wait(wait: u64, quiet: bool, base: u64, max: u64) -> u64 {
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

/// An object's age by this process's sightings.
fn age_ms(inner: &ShardInner, now_ms: u64, m: &object_store::ObjectMeta) -> u64 {
    inner.sightings.lock().age(
        m.location.as_ref(),
        m.last_modified.timestamp_millis(),
        now_ms,
    )
}

/// One GC pass: the plan, then its deletions.
pub(crate) async fn collect(inner: &ShardInner) -> Result<GcReport> {
    let plan = plan(inner, true).await?;
    // Deposed while planning: nothing is deleted (the plan's check covers a writer deposed
    // before the pass; this one a newer writer that opened during it).
    if let Some(newest) = inner.manifests.latest().await?
        && newest.value.writer_epoch != inner.epoch
    {
        inner
            .fenced
            .store(true, std::sync::atomic::Ordering::Release);
        return Err(inner.fenced_error(newest.value.writer_epoch));
    }
    // Versions before the files only they name: a pass cut short (a crash, a failed
    // delete) leaves files no version names, which the next pass collects, never a
    // version naming deleted files. (The other order left such versions behind, and a
    // later pass on a clock running behind the first one's judged them young again and
    // kept them.)
    for v in &plan.manifests {
        inner.manifests.delete(*v).await?;
    }
    let files: Vec<object_store::path::Path> = plan
        .ssts
        .iter()
        .chain(&plan.wal_segments)
        .chain(&plan.parquet)
        .cloned()
        .collect();
    delete_all(&inner.store, files).await?;
    let layout = &inner.s3.layout;
    for id in &plan.jobs {
        crate::jobs::remove(&inner.store, layout, id).await?;
    }
    Ok(plan.report())
}

/// What a GC pass deletes now (see the module documentation); `tidy` also deletes lapsed
/// snapshot pins (a dry run changes nothing).
pub(crate) async fn plan(inner: &ShardInner, tidy: bool) -> Result<GcPlan> {
    let now = inner.clock.now_ms();
    let min_age = inner.config.gc.min_age_ms;
    inner.sightings.lock().begin();
    let report = plan_pass(inner, tidy, now, min_age).await;
    inner.sightings.lock().end();
    report
}

async fn plan_pass(inner: &ShardInner, tidy: bool, now: u64, min_age: u64) -> Result<GcPlan> {
    let mut report = GcPlan::default();
    let versions = inner.manifests.list_versions().await?;
    let Some((newest, _)) = versions.last() else {
        return Ok(report);
    };
    let newest = *newest;
    let keep_from = versions
        .len()
        .saturating_sub(inner.config.gc.manifest_versions_retained.max(1));
    let mut retained = Vec::new();
    let mut discard = Vec::new();
    let mut reading: HashSet<u64> = inner.readers.lock().keys().copied().collect();
    // Views in other processes (queries) pin the manifest version they read.
    reading.extend(
        crate::view::pinned_versions(
            &inner.store,
            &inner.paths,
            now,
            tidy,
            &inner.sightings,
            inner.config.pin_lease_ms,
        )
        .await?,
    );
    for (i, (v, meta)) in versions.iter().enumerate() {
        if i >= keep_from
            || age_ms(inner, now, meta) < min_age
            || *v == newest
            || reading.contains(v)
        {
            retained.push(*v);
        } else {
            discard.push(*v);
        }
    }
    let mut referenced: HashSet<SstId> = HashSet::new();
    let mut parquet_referenced: HashSet<String> = HashSet::new();
    let mut replay_floor = u64::MAX;
    for v in &retained {
        let m = match inner.manifests.get(*v).await {
            // A newer writer owns the shard: its uploads and jobs not yet named by a
            // manifest are not protected here (only this writer's are), so a deposed
            // writer collects nothing, and now knows it is deposed.
            Ok(m) if *v == newest && m.writer_epoch != inner.epoch => {
                inner
                    .fenced
                    .store(true, std::sync::atomic::Ordering::Release);
                return Err(inner.fenced_error(m.writer_epoch));
            }
            Ok(m) => m,
            // Collected by a concurrent pass; the newest is always readable.
            Err(strata_manifest::Error::Store(object_store::Error::NotFound { .. })) => continue,
            Err(e) => return Err(e.into()),
        };
        referenced.extend(m.ssts().map(|s| s.id));
        parquet_referenced.extend(m.parquet_files().map(|f| f.name.clone()));
        replay_floor = replay_floor.min(m.wal_replay_after);
    }
    // The bucket is listed first, what this writer protects second, its state third: an
    // object in a listing was uploaded before it, so it is either still protected
    // (`in_flight` for SSTs, `outstanding` for a job's outputs) when that is read, or was
    // released after the state naming it was installed, and the state read last names it.
    // (Listing after reading the protections let a flush that began in between upload an
    // SST, be listed, and lose it to the pass before its manifest named it.)
    let list = |dir: object_store::path::Path, what: &'static str| async move {
        inner
            .store
            .list(Some(&dir))
            .try_collect::<Vec<object_store::ObjectMeta>>()
            .await
            .map_err(Error::store(what))
    };
    let layout = &inner.s3.layout;
    let job_prefix = inner.job_prefix();
    let (ssts, wal, parquet, jobs) = futures::try_join!(
        list(inner.paths.sst_dir(), "list ssts"),
        list(inner.paths.wal_dir(), "list wal"),
        list(inner.paths.parquet_dir(), "list parquet"),
        crate::jobs::list(&inner.store, layout, &job_prefix),
    )?;

    let awaited: Vec<String> = inner.outstanding.lock().keys().cloned().collect();
    let in_flight: HashSet<SstId> = inner.in_flight.lock().clone();
    // Objects in use by this process's readers are referenced by the current state too,
    // and its replay point bounds the WAL even if a retained version could not be read.
    let current = inner.current();
    replay_floor = replay_floor.min(current.manifest.value.wal_replay_after);
    referenced.extend(current.levels.iter().flatten().map(|h| h.info.id));
    parquet_referenced.extend(
        current
            .manifest
            .value
            .parquet_files()
            .map(|f| f.name.clone()),
    );
    // Versions this writer committed after the listing of versions and replaced before
    // the state was read are among the newest, so retained: what they name is kept too.
    // (A flush committed and a compaction replaced within one pass left a retained
    // version naming an SST the pass deleted; only `min_age_ms` hid it from readers in
    // other processes that had just read that version.)
    for v in newest + 1..current.manifest.version {
        match inner.manifests.get(v).await {
            Ok(m) => {
                referenced.extend(m.ssts().map(|s| s.id));
                parquet_referenced.extend(m.parquet_files().map(|f| f.name.clone()));
            }
            Err(strata_manifest::Error::Store(object_store::Error::NotFound { .. })) => {}
            Err(e) => return Err(e.into()),
        }
    }

    for m in ssts {
        let name = m.location.filename().unwrap_or_default();
        let Some(id) = name
            .strip_suffix(".sst")
            .and_then(|s| s.parse::<SstId>().ok())
        else {
            continue;
        };
        if referenced.contains(&id) || in_flight.contains(&id) || age_ms(inner, now, &m) < min_age {
            continue;
        }
        report.ssts.push(m.location);
    }

    for m in wal {
        let Some(id) = parse_id(m.location.as_ref()) else {
            continue;
        };
        if id <= replay_floor && m.size > 0 && age_ms(inner, now, &m) >= min_age {
            report.wal_segments.push(m.location);
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
        if parquet_referenced.contains(name)
            || awaited.iter().any(|j| name.starts_with(j.as_str()))
            || age_ms(inner, now, &m) < min_age
        {
            continue;
        }
        report.parquet.push(m.location);
    }

    for id in jobs {
        if awaited.contains(&id) {
            continue;
        }
        let old = match inner.store.head(&layout.job(&id)).await {
            Ok(meta) => age_ms(inner, now, &meta) >= min_age,
            Err(_) => true,
        };
        if old {
            report.jobs.push(id);
        }
    }
    report.manifests = discard;
    report.manifests_retained = retained;
    Ok(report)
}

/// Deletes `paths` through one `delete_stream` (the store deletes them concurrently, in
/// any order; what is already gone counts as deleted); how many.
pub(crate) async fn delete_all(
    store: &strata_objstore::StoreRef,
    paths: Vec<object_store::path::Path>,
) -> Result<u64> {
    use futures::StreamExt;
    if paths.is_empty() {
        return Ok(0);
    }
    let mut done = store.delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
    let mut deleted = 0;
    while let Some(r) = done.next().await {
        match r {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
            Err(e) => return Err(Error::store("delete unreferenced objects")(e)),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::{Sightings, next_wait};

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
}
