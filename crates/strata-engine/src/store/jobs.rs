//! The job objects in the bucket (`<id>.json`, `<id>.lease`, `<id>.result`) and the
//! protocol's steps on them: publish, claim and renew a lease, hand a result back, read and
//! remove. Calls nothing in the engine but its error type.

use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};
use strata_common::clock::ClockRef;
use strata_manifest::{Layout, ParquetFileInfo, ShardPaths, SstInfo, TableEntry};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// What a job moves down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSource {
    /// Files of the last NVMe level into every group of S3 level 1.
    CrossTier {
        /// The SSTs.
        ssts: Vec<SstInfo>,
    },
    /// Files of one column group of an S3 level into the groups of the next level that lie
    /// inside it (CG-local compaction, LASER §4).
    Group {
        /// S3 level (0-based).
        level: usize,
        /// Group of that level.
        group: usize,
        /// The files.
        files: Vec<ParquetFileInfo>,
    },
}

/// One target group: its overlapping files are merged with the inputs and replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTarget {
    /// Group of the target level.
    pub group: usize,
    /// Its files overlapping the inputs' key range.
    pub overlapping: Vec<ParquetFileInfo>,
}

/// A published job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// `<table id>-<shard>-<writer epoch>-<n>`: unique for ever.
    pub id: String,
    /// The table (schema, key, layout).
    pub table: TableEntry,
    /// The shard's directory in the bucket.
    pub shard_dir: String,
    /// Inputs.
    pub source: JobSource,
    /// Target S3 level (0-based).
    pub target_level: usize,
    /// Target groups.
    pub targets: Vec<JobTarget>,
    /// No deeper level holds versions of these keys for the target groups: tombstones and
    /// partial rows with nothing under them are resolved.
    pub bottommost: bool,
    /// Pinned snapshots: versions they see survive.
    pub pins: Vec<u64>,
    /// History horizon: every version above it survives (time travel).
    #[serde(default = "no_history")]
    pub keep_above: u64,
    /// Output object size target.
    pub file_bytes: u64,
    /// Output rows per row group.
    pub row_group_rows: usize,
    /// Output page size.
    pub page_bytes: usize,
    /// Output rows per page.
    #[serde(default = "default_page_rows")]
    pub page_rows: usize,
    /// Output dictionary page size limit.
    #[serde(default = "default_dictionary_page_bytes")]
    pub dictionary_page_bytes: usize,
    /// Bytes read by the job (the greedy scheduler runs the smallest first).
    pub input_bytes: u64,
    /// When it was published.
    pub created_at_ms: u64,
}

fn no_history() -> u64 {
    u64::MAX
}

fn default_page_rows() -> usize {
    1024
}

fn default_dictionary_page_bytes() -> usize {
    64 << 10
}

impl JobSpec {
    /// The prefix of output file names of an attempt.
    pub fn output_prefix(&self, attempt: u64) -> String {
        format!("{}-a{attempt:03}", self.id)
    }
}

/// A worker's claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// Job id.
    pub job: String,
    /// Worker name.
    pub worker: String,
    /// Attempt number (1 for the first claim).
    pub attempt: u64,
    /// Expiry on the claimer's clock.
    pub expires_at_ms: u64,
}

/// A finished job, awaiting commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// Job id.
    pub job: String,
    /// Attempt that produced it.
    pub attempt: u64,
    /// Worker.
    pub worker: String,
    /// New files per target group (same order as the spec's targets).
    pub outputs: Vec<Vec<ParquetFileInfo>>,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Wall time of the merge.
    pub took_ms: u64,
}

fn json<T: Serialize>(v: &T) -> Result<Bytes> {
    serde_json::to_vec_pretty(v)
        .map(Bytes::from)
        .map_err(|e| Error::Internal(e.to_string()))
}

fn parse<T: for<'a> Deserialize<'a>>(path: &Path, data: &[u8]) -> Result<T> {
    serde_json::from_slice(data).map_err(|e| Error::Corrupt(format!("{path}: {e}")))
}

/// Publishes a job.
pub async fn publish(store: &StoreRef, layout: &Layout, spec: &JobSpec) -> Result<()> {
    store
        .put_opts(
            &layout.job(&spec.id),
            json(spec)?.into(),
            PutOptions::from(PutMode::Create),
        )
        .await
        .map_err(Error::store(format!("publish job {}", spec.id)))?;
    Ok(())
}

/// The result of a job, if a worker has handed one back.
pub async fn result(store: &StoreRef, layout: &Layout, id: &str) -> Result<Option<JobResult>> {
    let path = layout.job_result(id);
    match store.get(&path).await {
        Ok(g) => {
            let data = g.bytes().await.map_err(Error::store("read job result"))?;
            Ok(Some(parse(&path, &data)?))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::store(format!("read result of {id}"))(e)),
    }
}

/// Whether a job's spec is still in the bucket (an operator or a lifecycle rule may have
/// removed it).
pub async fn spec_exists(store: &StoreRef, layout: &Layout, id: &str) -> Result<bool> {
    match store.head(&layout.job(id)).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(Error::store(format!("look for the spec of {id}"))(e)),
    }
}

/// Whether a result of job `id` is seen to stand (an error reading it counts as no: the
/// claim that follows finds out).
pub async fn result_stands(store: &StoreRef, layout: &Layout, id: &str) -> bool {
    store.head(&layout.job_result(id)).await.is_ok()
}

/// Whether the spec of job `id` is seen to stand (an error reading it counts as no).
pub async fn spec_stands(store: &StoreRef, layout: &Layout, id: &str) -> bool {
    store.head(&layout.job(id)).await.is_ok()
}

/// Lets go of a lease on job `id` (best effort: an expired lease is taken over anyway).
pub async fn release_lease(store: &StoreRef, layout: &Layout, id: &str) {
    let _ = store.delete(&layout.job_lease(id)).await;
}

/// Deletes the output files of an attempt whose result lost the hand-back (best effort:
/// files no manifest names are garbage collected anyway). Never call it for a result that
/// stands.
pub async fn remove_outputs(store: &StoreRef, spec: &JobSpec, lost: &JobResult) {
    let paths = ShardPaths::from_dir(&spec.shard_dir);
    for f in lost.outputs.iter().flatten() {
        let _ = store.delete(&paths.parquet(&f.name)).await;
    }
}

/// Deletes a job's objects. The spec goes first: a worker that claims the job after that
/// finds no spec and lets go (see [`crate::jobs::Worker::run_one`]).
pub async fn remove(store: &StoreRef, layout: &Layout, id: &str) -> Result<()> {
    for p in [layout.job(id), layout.job_result(id), layout.job_lease(id)] {
        match store.delete(&p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(Error::store(format!("delete {p}"))(e)),
        }
    }
    Ok(())
}

/// Lists published job ids (optionally only those whose id starts with `prefix`).
pub async fn list(store: &StoreRef, layout: &Layout, prefix: &str) -> Result<Vec<String>> {
    use futures::TryStreamExt;
    let metas: Vec<object_store::ObjectMeta> = store
        .list(Some(&layout.jobs_dir()))
        .try_collect()
        .await
        .map_err(Error::store("list jobs"))?;
    let mut ids: Vec<String> = metas
        .iter()
        .filter_map(|m| {
            m.location
                .filename()?
                .strip_suffix(".json")
                .map(String::from)
        })
        .filter(|id| id.starts_with(prefix))
        .collect();
    ids.sort();
    Ok(ids)
}

/// Reads a job's lease, if it has one (claimed; possibly expired).
pub async fn lease(store: &StoreRef, layout: &Layout, id: &str) -> Result<Option<Lease>> {
    let path = layout.job_lease(id);
    match store.get(&path).await {
        Ok(g) => {
            let data = g.bytes().await.map_err(Error::store("read lease"))?;
            Ok(Some(parse(&path, &data)?))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::store(format!("read lease of job {id}"))(e)),
    }
}

/// Reads a job's spec.
pub async fn spec(store: &StoreRef, layout: &Layout, id: &str) -> Result<Option<JobSpec>> {
    let path = layout.job(id);
    match store.get(&path).await {
        Ok(g) => {
            let data = g.bytes().await.map_err(Error::store("read job"))?;
            Ok(Some(parse(&path, &data)?))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::store(format!("read job {id}"))(e)),
    }
}

/// A held lease: renewing it is a CAS on its ETag.
#[derive(Debug)]
pub struct HeldLease {
    /// The lease document.
    pub lease: Lease,
    version: UpdateVersion,
}

/// Tries to claim a job: create its lease, or take over an expired one.
pub async fn claim(
    store: &StoreRef,
    layout: &Layout,
    id: &str,
    worker: &str,
    lease_ms: u64,
    clock: &ClockRef,
) -> Result<Option<HeldLease>> {
    let path = layout.job_lease(id);
    let now = clock.now_ms();
    let existing = match store.get(&path).await {
        Ok(g) => {
            let meta = g.meta.clone();
            let data = g.bytes().await.map_err(Error::store("read lease"))?;
            Some((parse::<Lease>(&path, &data)?, meta))
        }
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(Error::store(format!("read lease of {id}"))(e)),
    };
    let (attempt, mode) = match &existing {
        None => (1, PutMode::Create),
        Some((l, _)) if l.expires_at_ms > now => return Ok(None),
        Some((l, meta)) => (
            l.attempt + 1,
            PutMode::Update(UpdateVersion {
                e_tag: meta.e_tag.clone(),
                version: meta.version.clone(),
            }),
        ),
    };
    let lease = Lease {
        job: id.to_string(),
        worker: worker.to_string(),
        attempt,
        expires_at_ms: now + lease_ms,
    };
    match store
        .put_opts(&path, json(&lease)?.into(), PutOptions::from(mode))
        .await
    {
        Ok(r) => Ok(Some(HeldLease {
            lease,
            version: UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            },
        })),
        Err(object_store::Error::AlreadyExists { .. })
        | Err(object_store::Error::Precondition { .. }) => Ok(None),
        Err(e) => Err(Error::store(format!("claim {id}"))(e)),
    }
}

/// Renews a lease. `Ok(false)` = it was taken over (stop working on the job).
pub async fn renew(
    store: &StoreRef,
    layout: &Layout,
    held: &mut HeldLease,
    lease_ms: u64,
    clock: &ClockRef,
) -> Result<bool> {
    let mut lease = held.lease.clone();
    lease.expires_at_ms = clock.now_ms() + lease_ms;
    match store
        .put_opts(
            &layout.job_lease(&lease.job),
            json(&lease)?.into(),
            PutOptions::from(PutMode::Update(held.version.clone())),
        )
        .await
    {
        Ok(r) => {
            held.lease = lease;
            held.version = UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            };
            Ok(true)
        }
        Err(object_store::Error::Precondition { .. })
        | Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(Error::store("renew lease")(e)),
    }
}

/// Hands a result back. `Ok(false)` = another attempt's result is already there (its
/// files, not this one's, are the job's). A result that already stands and holds exactly
/// this one is this call's own (a create that landed with its response lost): `Ok(true)`.
/// When that cannot be read, the error says nothing about whose result stands, so the
/// caller must keep its files.
pub async fn hand_back(store: &StoreRef, layout: &Layout, result: &JobResult) -> Result<bool> {
    let path = layout.job_result(&result.job);
    let body = json(result)?;
    let mut attempt = 0u32;
    loop {
        match strata_objstore::create_or_match(store.as_ref(), &path, &body).await {
            Ok(created) => return Ok(created == strata_objstore::Created::Mine),
            Err(e) if attempt + 1 < HAND_BACK_ATTEMPTS => {
                tracing::warn!(job = %result.job, attempt, error = %e, "handing back the result failed; retrying");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
            }
            Err(e) => return Err(Error::store(format!("hand back {}", result.job))(e)),
        }
    }
}

/// Attempts of one hand-back against transient failures.
const HAND_BACK_ATTEMPTS: u32 = 5;
