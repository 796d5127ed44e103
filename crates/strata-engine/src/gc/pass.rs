//! One GC pass over a shard's objects in the bucket, on a narrow context: the bucket and
//! its manifests ([`Pass`]) and what the pass asks of the shard's writer ([`Writer`]: the
//! versions its reads use, its protections and state, and the notice that it was
//! deposed). The decisions are the rules of the parent module; the shard runs passes
//! (`shard::gc`).

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use strata_manifest::{Layout, Manifest, ShardPaths, SstId, VersionedStore};
use strata_objstore::StoreRef;

use super::{
    GcPlan, GcReport, Protections, Sightings, collectable_files, pinned_versions, split_versions,
};
use crate::error::{Error, Result};
use crate::state::ShardState;

/// What a pass asks of the writer whose shard it collects.
pub(crate) trait Writer {
    /// Manifest versions this process's reads use now.
    fn versions_read(&self) -> HashSet<u64>;
    /// Ids of the jobs the writer awaits (their outputs are protected).
    fn awaited_jobs(&self) -> Vec<String>;
    /// SSTs the writer is uploading and has not committed.
    fn in_flight(&self) -> HashSet<SstId>;
    /// The writer's current state.
    fn current(&self) -> Arc<ShardState>;
    /// A newer writer (`epoch`) owns the shard: the writer is marked fenced, and this is
    /// the error the pass returns.
    fn deposed(&self, epoch: u64) -> Error;
}

/// The bucket side of a pass: where the shard's objects are, and the rules' settings.
pub(crate) struct Pass<'a> {
    pub(crate) store: &'a StoreRef,
    pub(crate) paths: &'a ShardPaths,
    pub(crate) layout: &'a Layout,
    /// Ids of this shard's jobs start with it.
    pub(crate) job_prefix: String,
    pub(crate) manifests: &'a VersionedStore<Manifest>,
    /// This process's first sightings of objects: their ages.
    pub(crate) sightings: &'a Mutex<Sightings>,
    /// The writer's epoch.
    pub(crate) epoch: u64,
    /// Now, by the writer's clock.
    pub(crate) now_ms: u64,
    pub(crate) min_age_ms: u64,
    pub(crate) versions_retained: usize,
    pub(crate) pin_lease_ms: u64,
}

impl Pass<'_> {
    /// An object's age by this process's sightings.
    fn age_ms(&self, m: &object_store::ObjectMeta) -> u64 {
        self.sightings.lock().age(
            m.location.as_ref(),
            m.last_modified.timestamp_millis(),
            self.now_ms,
        )
    }

    /// The plan, then its deletions.
    pub(crate) async fn collect(&self, writer: &impl Writer) -> Result<GcReport> {
        let plan = self.plan(writer, true).await?;
        // Deposed while planning: nothing is deleted (the plan's check covers a writer
        // deposed before the pass; this one a newer writer that opened during it).
        if let Some(newest) = self.manifests.latest().await?
            && newest.value.writer_epoch != self.epoch
        {
            return Err(writer.deposed(newest.value.writer_epoch));
        }
        // Versions before the files only they name: a pass cut short (a crash, a failed
        // delete) leaves files no version names, which the next pass collects, never a
        // version naming deleted files. (The other order left such versions behind, and a
        // later pass on a clock running behind the first one's judged them young again and
        // kept them.)
        for v in &plan.manifests {
            self.manifests.delete(*v).await?;
        }
        let files: Vec<object_store::path::Path> = plan
            .ssts
            .iter()
            .chain(&plan.wal_segments)
            .chain(&plan.parquet)
            .cloned()
            .collect();
        crate::store::objects::delete_all(self.store, files).await?;
        for id in &plan.jobs {
            crate::jobs::remove(self.store, self.layout, id).await?;
        }
        Ok(plan.report())
    }

    /// What the pass deletes now (see the parent module); `tidy` also deletes lapsed
    /// snapshot pins (a dry run changes nothing).
    pub(crate) async fn plan(&self, writer: &impl Writer, tidy: bool) -> Result<GcPlan> {
        self.sightings.lock().begin();
        let plan = self.plan_pass(writer, tidy).await;
        self.sightings.lock().end();
        plan
    }

    async fn plan_pass(&self, writer: &impl Writer, tidy: bool) -> Result<GcPlan> {
        let mut report = GcPlan::default();
        let min_age = self.min_age_ms;
        let versions = self.manifests.list_versions().await?;
        let Some((newest, _)) = versions.last() else {
            return Ok(report);
        };
        let newest = *newest;
        let mut reading = writer.versions_read();
        // Views in other processes (queries) pin the manifest version they read.
        reading.extend(
            pinned_versions(
                self.store,
                self.paths,
                self.now_ms,
                tidy,
                self.sightings,
                self.pin_lease_ms,
            )
            .await?,
        );
        let (retained, discard) =
            split_versions(&versions, self.versions_retained, min_age, &reading, |m| {
                self.age_ms(m)
            });
        let mut referenced: HashSet<SstId> = HashSet::new();
        let mut parquet_referenced: HashSet<String> = HashSet::new();
        let mut replay_floor = u64::MAX;
        for v in &retained {
            let m = match self.manifests.get(*v).await {
                // A newer writer owns the shard: its uploads and jobs not yet named by a
                // manifest are not protected here (only this writer's are), so a deposed
                // writer collects nothing, and now knows it is deposed.
                Ok(m) if *v == newest && m.writer_epoch != self.epoch => {
                    return Err(writer.deposed(m.writer_epoch));
                }
                Ok(m) => m,
                // Collected by a concurrent pass; the newest is always readable.
                Err(strata_manifest::Error::Store(object_store::Error::NotFound { .. })) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            referenced.extend(m.ssts().map(|s| s.id));
            parquet_referenced.extend(m.parquet_files().map(|f| f.name.clone()));
            replay_floor = replay_floor.min(m.wal_replay_after);
        }
        // The bucket is listed first, what the writer protects second, its state third:
        // an object in a listing was uploaded before it, so it is either still protected
        // (in flight for SSTs, awaited for a job's outputs) when that is read, or was
        // released after the state naming it was installed, and the state read last names
        // it. (Listing after reading the protections let a flush that began in between
        // upload an SST, be listed, and lose it to the pass before its manifest named it.)
        let list = |dir: object_store::path::Path, what: &'static str| async move {
            crate::store::objects::list(self.store, &dir, what).await
        };
        let (ssts, wal, parquet, jobs) = futures::try_join!(
            list(self.paths.sst_dir(), "list ssts"),
            list(self.paths.wal_dir(), "list wal"),
            list(self.paths.parquet_dir(), "list parquet"),
            crate::jobs::list(self.store, self.layout, &self.job_prefix),
        )?;

        let awaited = writer.awaited_jobs();
        let in_flight = writer.in_flight();
        // Objects in use by this process's readers are referenced by the current state
        // too, and its replay point bounds the WAL even if a retained version could not be
        // read.
        let current = writer.current();
        replay_floor = replay_floor.min(current.manifest.value.wal_replay_after);
        referenced.extend(current.levels.iter().flatten().map(|h| h.info.id));
        parquet_referenced.extend(
            current
                .manifest
                .value
                .parquet_files()
                .map(|f| f.name.clone()),
        );
        // Versions the writer committed after the listing of versions and replaced before
        // the state was read are among the newest, so retained: what they name is kept
        // too. (A flush committed and a compaction replaced within one pass left a
        // retained version naming an SST the pass deleted; only `min_age_ms` hid it from
        // readers in other processes that had just read that version.)
        for v in newest + 1..current.manifest.version {
            match self.manifests.get(v).await {
                Ok(m) => {
                    referenced.extend(m.ssts().map(|s| s.id));
                    parquet_referenced.extend(m.parquet_files().map(|f| f.name.clone()));
                }
                Err(strata_manifest::Error::Store(object_store::Error::NotFound { .. })) => {}
                Err(e) => return Err(e.into()),
            }
        }

        let protections = Protections {
            referenced,
            parquet_referenced,
            replay_floor,
            in_flight,
            awaited,
        };
        collectable_files(
            ssts,
            wal,
            parquet,
            &protections,
            min_age,
            |m| self.age_ms(m),
            &mut report,
        );
        let awaited = protections.awaited;

        for id in jobs {
            if awaited.contains(&id) {
                continue;
            }
            let old = match crate::store::objects::head(self.store, &self.layout.job(&id)).await {
                Ok(meta) => self.age_ms(&meta) >= min_age,
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
}
