//! Compaction jobs for the S3 levels, published in the bucket by a shard's writer (the only
//! manifest writer) and run by any number of stateless workers.
//!
//! Protocol (all objects under `<root>/jobs/`):
//! 1. The writer PUTs `<id>.json` (create-if-absent): the inputs (last-NVMe-level SSTs, or
//!    one column group's files of an S3 level), the overlapping files of each target group,
//!    the pinned snapshots, and the output shape.
//! 2. A worker claims the job by creating `<id>.lease`, or by replacing an expired lease
//!    with If-Match on its ETag (attempt + 1). It renews the lease the same way while it
//!    works; losing the CAS means another worker took over, and it stops.
//! 3. The worker writes its output files (names carry the job id and attempt, so attempts
//!    never collide) and then `<id>.result` (create-if-absent): exactly one attempt's
//!    output is ever handed back. A slow worker that finishes after a takeover simply loses
//!    that race; its files are unreferenced and garbage collected.
//! 4. The writer commits the result through the manifest CAS if every input is still in
//!    the manifest (else the job is abandoned) and deletes the job's objects.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};
use strata_common::clock::ClockRef;
use strata_manifest::{Layout, ParquetFileInfo, ShardPaths, SstInfo, TableEntry};
use strata_objstore::StoreRef;
use tokio_util::sync::CancellationToken;

use crate::columnar::reader::block_on_unless;
use crate::columnar::{FileShape, GroupFormat, MetaCache, ParquetSource, RunIter, RunWriter};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fold::collapse;
use crate::iter::{EntryIter, MergeIter};
use crate::row::RowCodec;
use crate::schema::TableSchema;
use crate::sst::SstIter;

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

/// Deletes a job's objects. The spec goes first: a worker that claims the job after that
/// finds no spec and lets go (see [`Worker::run_one`]).
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

/// Projects versions of another format into a group.
struct ProjectIter {
    inner: Box<dyn EntryIter>,
    from: RowCodec,
    from_columns: Option<Vec<usize>>,
    to: Arc<GroupFormat>,
}

impl EntryIter for ProjectIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        match self.inner.next_entry()? {
            None => Ok(None),
            Some(e) => Ok(Some(self.to.project_from(
                &self.from,
                self.from_columns.as_deref(),
                &e,
            )?)),
        }
    }
}

/// Runs a job's merge: reads the inputs, writes the outputs of attempt `attempt`, and
/// returns them (nothing is committed here). `scratch` holds downloaded SSTs. Once `stop`
/// is cancelled, the merge ends with [`Error::Closed`] at its next read or key.
pub async fn execute(
    store: &StoreRef,
    spec: &JobSpec,
    attempt: u64,
    scratch: &std::path::Path,
    metas: &Arc<MetaCache>,
    pause_per_file_ms: u64,
    stop: &CancellationToken,
) -> Result<JobResult> {
    let started = std::time::Instant::now();
    let table = Arc::new(TableSchema::new(spec.table.clone())?);
    let paths = ShardPaths::from_dir(&spec.shard_dir);
    let bytes_read = spec.input_bytes;
    // Row SSTs come from the bucket into scratch space.
    let mut readers = Vec::new();
    if let JobSource::CrossTier { ssts } = &spec.source {
        tokio::fs::create_dir_all(scratch)
            .await
            .map_err(Error::io(format!("create {}", scratch.display())))?;
        for s in ssts {
            let local = scratch.join(format!("{}-{}.sst", spec.id, s.id));
            // Corruption is named after the object.
            let reader =
                crate::sst::download::open_object(store, &paths.sst(&s.id), &local).await?;
            readers.push(Arc::new(reader));
        }
    }
    let handle = tokio::runtime::Handle::current();
    let mut outputs = Vec::with_capacity(spec.targets.len());
    let mut bytes_written = 0;
    let source_of = |f: &ParquetFileInfo| ParquetSource {
        store: store.clone(),
        path: paths.parquet(&f.name),
        info: f.clone(),
        cache: None,
        metas: metas.clone(),
    };
    for target in &spec.targets {
        let to = table
            .groups
            .get(spec.target_level)
            .and_then(|l| l.get(target.group))
            .cloned()
            .ok_or_else(|| Error::Invalid(format!("job {}: no target group", spec.id)))?;
        let mut sources: Vec<Box<dyn EntryIter>> = Vec::new();
        match &spec.source {
            JobSource::CrossTier { .. } => {
                for r in &readers {
                    sources.push(Box::new(ProjectIter {
                        inner: Box::new(SstIter::new(r.clone(), &[])),
                        from: table.codec.clone(),
                        from_columns: None,
                        to: to.clone(),
                    }));
                }
            }
            JobSource::Group {
                level,
                group,
                files,
            } => {
                let from = table
                    .groups
                    .get(*level)
                    .and_then(|l| l.get(*group))
                    .cloned()
                    .ok_or_else(|| Error::Invalid(format!("job {}: no source group", spec.id)))?;
                sources.push(Box::new(ProjectIter {
                    inner: Box::new(
                        RunIter::new(
                            handle.clone(),
                            from.clone(),
                            files.iter().map(source_of).collect(),
                            &[],
                            None,
                            None,
                        )
                        .stop_on(stop.clone()),
                    ),
                    from: from.codec.clone(),
                    from_columns: Some(from.columns.clone()),
                    to: to.clone(),
                }));
            }
        }
        sources.push(Box::new(
            RunIter::new(
                handle.clone(),
                to.clone(),
                target.overlapping.iter().map(source_of).collect(),
                &[],
                None,
                None,
            )
            .stop_on(stop.clone()),
        ));
        let writer = RunWriter::new(
            store.clone(),
            to.clone(),
            FileShape {
                file_bytes_target: spec.file_bytes,
                row_group_rows: spec.row_group_rows,
                page_bytes: spec.page_bytes,
                page_rows: spec.page_rows,
                dictionary_page_bytes: spec.dictionary_page_bytes,
            },
            format!("{}-g{:03}", spec.output_prefix(attempt), target.group),
            {
                let paths = paths.clone();
                Box::new(move |name: &str| paths.parquet(name))
            },
        );
        let (pins, bottommost, codec) = (spec.pins.clone(), spec.bottommost, to.codec.clone());
        let keep_above = spec.keep_above;
        let (h, stop) = (handle.clone(), stop.clone());
        let files =
            crate::background::run("strata-job", move || -> Result<Vec<ParquetFileInfo>> {
                let mut writer = writer;
                // Copies of one version (a record retained on NVMe, or promoted, beside the
                // version the bucket holds) are one version: merged as parts, so a partial
                // copy never hides the columns the bucket's resolved copy carries.
                let mut merged = MergeIter::with_parts(sources, codec.clone());
                let mut group: Vec<Entry> = Vec::new();
                loop {
                    let next = merged.next_entry()?;
                    let boundary = match (&next, group.first()) {
                        (Some(e), Some(g)) => e.key != g.key,
                        (None, _) => true,
                        (Some(_), None) => false,
                    };
                    if boundary && !group.is_empty() {
                        let collapsed = collapse(&codec, &group, &pins, keep_above, bottommost)?;
                        group.clear();
                        block_on_unless(&h, Some(&stop), writer.add_key(collapsed))??;
                    }
                    match next {
                        Some(e) => group.push(e),
                        None => break,
                    }
                }
                block_on_unless(&h, Some(&stop), writer.finish())?
            })
            .await??;
        if pause_per_file_ms > 0 {
            tokio::time::sleep(Duration::from_millis(
                pause_per_file_ms * files.len() as u64,
            ))
            .await;
        }
        bytes_written += files.iter().map(|f| f.size_bytes).sum::<u64>();
        outputs.push(files);
    }
    Ok(JobResult {
        job: spec.id.clone(),
        attempt,
        worker: String::new(),
        outputs,
        bytes_read,
        bytes_written,
        took_ms: started.elapsed().as_millis() as u64,
    })
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

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Name in leases and logs.
    pub name: String,
    /// Lease length.
    pub lease_ms: u64,
    /// Renewal period.
    pub heartbeat_ms: u64,
    /// Idle polling period: the first look for jobs after one that found none waits this
    /// long; every further empty look doubles the wait, up to `idle_poll_max_ms`.
    pub poll_ms: u64,
    /// The longest wait between looks when there is nothing to do (an idle worker costs one
    /// LIST per this period). A job published in this process wakes its workers at once.
    pub idle_poll_max_ms: u64,
    /// Scratch directory.
    pub scratch: std::path::PathBuf,
    /// Fault injection for tests: pause after each output file (lets a test kill a worker
    /// mid-job with some output written). 0 in production.
    pub debug_pause_per_file_ms: u64,
}

/// Counters of a worker.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs finished and handed back.
    pub jobs_done: std::sync::atomic::AtomicU64,
    /// Bytes read by finished jobs.
    pub bytes_read: std::sync::atomic::AtomicU64,
    /// Bytes written by finished jobs.
    pub bytes_written: std::sync::atomic::AtomicU64,
}

/// A compaction worker: claims the published job with the least input (greedy: smallest
/// remaining work first, Luo ch. 5), runs it under a renewed lease, hands the result back.
pub struct Worker {
    store: StoreRef,
    layout: Layout,
    config: WorkerConfig,
    clock: ClockRef,
    metas: Arc<MetaCache>,
    /// Counters.
    pub stats: Arc<WorkerStats>,
    specs: parking_lot::Mutex<std::collections::HashMap<String, JobSpec>>,
    wake: Arc<tokio::sync::Notify>,
}

impl Worker {
    /// A worker over the bucket layout `layout`.
    pub fn new(store: StoreRef, layout: Layout, config: WorkerConfig, clock: ClockRef) -> Self {
        Self {
            store,
            layout,
            config,
            clock,
            metas: Arc::new(MetaCache::default()),
            stats: Arc::new(WorkerStats::default()),
            specs: Default::default(),
            wake: Arc::default(),
        }
    }

    /// Wakes the worker from its idle wait whenever `wake` is notified (`notify_waiters`):
    /// a process that publishes jobs hands its in-process workers the same `Notify`.
    pub fn with_wake(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// How long to wait after `idle` looks in a row found nothing.
    fn idle_wait(&self, idle: u32) -> Duration {
        let base = self.config.poll_ms.max(1);
        let max = self.config.idle_poll_max_ms.max(base);
        Duration::from_millis(base.saturating_mul(1u64 << idle.min(20)).min(max))
    }

    /// Runs until cancelled.
    pub async fn run(&self, cancel: CancellationToken) {
        let mut idle = 0u32;
        loop {
            // Listen before looking, so that a job published during the look is not missed.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let worked = match self.run_one(&cancel).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(worker = %self.config.name, error = %e, "compaction job failed");
                    false
                }
            };
            if cancel.is_cancelled() {
                return;
            }
            if worked {
                idle = 0;
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.idle_wait(idle)) => idle = idle.saturating_add(1),
                _ = &mut woken => idle = 0,
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// Claims and runs at most one job. Returns whether one was run.
    pub async fn run_one(&self, cancel: &CancellationToken) -> Result<bool> {
        let ids = list(&self.store, &self.layout, "").await?;
        let mut candidates = Vec::new();
        {
            let mut specs = self.specs.lock();
            specs.retain(|id, _| ids.contains(id));
        }
        for id in &ids {
            let cached = self.specs.lock().get(id).cloned();
            let s = match cached {
                Some(s) => s,
                None => match spec(&self.store, &self.layout, id).await? {
                    Some(s) => {
                        self.specs.lock().insert(id.clone(), s.clone());
                        s
                    }
                    None => continue,
                },
            };
            candidates.push(s);
        }
        candidates.sort_by_key(|s| (s.input_bytes, s.created_at_ms));
        for s in candidates {
            if self
                .store
                .head(&self.layout.job_result(&s.id))
                .await
                .is_ok()
            {
                continue;
            }
            let Some(held) = claim(
                &self.store,
                &self.layout,
                &s.id,
                &self.config.name,
                self.config.lease_ms,
                &self.clock,
            )
            .await?
            else {
                continue;
            };
            // Settled and removed between our listing and the claim: do not redo it.
            if self.store.head(&self.layout.job(&s.id)).await.is_err() {
                let _ = self.store.delete(&self.layout.job_lease(&s.id)).await;
                continue;
            }
            self.work(s, held, cancel).await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn work(
        &self,
        spec: JobSpec,
        mut held: HeldLease,
        cancel: &CancellationToken,
    ) -> Result<()> {
        let attempt = held.lease.attempt;
        tracing::info!(worker = %self.config.name, job = %spec.id, attempt, input_bytes = spec.input_bytes, "compaction job claimed");
        // Cancelled with the worker (synchronously: the merge on its blocking thread stops
        // before the runtime's timers go), or when the lease is lost.
        let lost = cancel.child_token();
        let heartbeat = {
            let (store, layout, clock) =
                (self.store.clone(), self.layout.clone(), self.clock.clone());
            let (lease_ms, every) = (self.config.lease_ms, self.config.heartbeat_ms.max(10));
            let lost = lost.clone();
            let cancel = cancel.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(every)) => {}
                        _ = cancel.cancelled() => { lost.cancel(); return; }
                    }
                    match renew(&store, &layout, &mut held, lease_ms, &clock).await {
                        Ok(true) => {}
                        Ok(false) => {
                            lost.cancel();
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
                    }
                }
            }
        };
        let scratch = self.config.scratch.join(spec.output_prefix(attempt));
        let run = execute(
            &self.store,
            &spec,
            attempt,
            &scratch,
            &self.metas,
            self.config.debug_pause_per_file_ms,
            &lost,
        );
        let outcome = tokio::select! {
            r = run => Some(r),
            _ = heartbeat => None,
            _ = lost.cancelled() => None,
        };
        let _ = tokio::fs::remove_dir_all(&scratch).await;
        match outcome {
            None => {
                tracing::warn!(job = %spec.id, attempt, "lease lost or worker stopping; abandoning the attempt");
                Ok(())
            }
            Some(Err(e)) => Err(e),
            Some(Ok(mut result)) => {
                result.worker = self.config.name.clone();
                if hand_back(&self.store, &self.layout, &result).await? {
                    use std::sync::atomic::Ordering::Relaxed;
                    self.stats.jobs_done.fetch_add(1, Relaxed);
                    self.stats.bytes_read.fetch_add(result.bytes_read, Relaxed);
                    self.stats
                        .bytes_written
                        .fetch_add(result.bytes_written, Relaxed);
                    tracing::info!(job = %spec.id, attempt, took_ms = result.took_ms, "compaction job done");
                } else {
                    // Another attempt won: our files are garbage; remove them now.
                    let paths = ShardPaths::from_dir(&spec.shard_dir);
                    for f in result.outputs.iter().flatten() {
                        let _ = self.store.delete(&paths.parquet(&f.name)).await;
                    }
                }
                Ok(())
            }
        }
    }
}
