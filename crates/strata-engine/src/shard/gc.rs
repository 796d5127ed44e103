//! Garbage collection as the shard runs it: the background loop, a pass's plan over the
//! bucket against the writer's protections (readers, in-flight files, outstanding jobs,
//! durable pins), and its deletions. The rules are `crate::gc`'s.

use std::collections::HashSet;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use strata_manifest::SstId;

use crate::error::{Error, Result};
use crate::gc::{
    GcPlan, GcReport, Protections, collectable_files, delete_all, next_wait, pinned_versions,
    split_versions,
};
use crate::shard::ShardInner;

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
    let mut reading: HashSet<u64> = inner.readers.lock().keys().copied().collect();
    // Views in other processes (queries) pin the manifest version they read.
    reading.extend(
        pinned_versions(
            &inner.store,
            &inner.paths,
            now,
            tidy,
            &inner.sightings,
            inner.config.pin_lease_ms,
        )
        .await?,
    );
    let (retained, discard) = split_versions(
        &versions,
        inner.config.gc.manifest_versions_retained,
        min_age,
        &reading,
        |m| age_ms(inner, now, m),
    );
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

    let awaited: Vec<String> = inner.jobs.lock().ids();
    let in_flight: HashSet<SstId> = inner.in_flight.snapshot();
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
        |m| age_ms(inner, now, m),
        &mut report,
    );
    let awaited = protections.awaited;

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
