//! One shard: the unit of ownership, WAL, manifest and LSM tree.
//!
//! Opening a shard makes this process its writer: it bumps the writer epoch in the
//! manifest (CAS), creates an empty fence segment at the first free WAL id (so the previous
//! writer's next WAL write fails), replays the WAL segments before the fence, and re-checks
//! its epoch. After that, one task group-commits writes (WAL segment PUT, then memtable,
//! then acknowledge), one flushes frozen memtables to L0 SSTs, one compacts, one collects
//! garbage.
//!
//! The shard room: this module owns `ShardInner` (the writer's state, locks and
//! protections) and is the only place that reaches into it. `commit` is the one commit
//! point of the tree (every flush, compaction, promotion and job result is a
//! `version::Edit` committed there). The other submodules run the background subsystems
//! on it: `compact` (NVMe compaction), `offload` (cross-tier and
//! column-group jobs, HotRAP retention) and `gc`. They call the pure policies below the
//! shard (`crate::compaction`, `crate::offload`, `crate::gc`), the reads (`crate::read`,
//! to which the shard reports through `PointReadSink`), the formats and the jobs protocol;
//! nothing below the shard calls back into it (`ci/modgraph.py` checks).

mod commit;
mod compact;
mod gc;
mod offload;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use parking_lot::{Mutex, RwLock};
use strata_common::clock::ClockRef;
use strata_common::ids::parse_id;
use strata_manifest::{Manifest, SeqTime, ShardPaths, SstId, SstInfo, Versioned, VersionedStore};
use strata_objstore::{Created, StoreRef};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::{Durability, EngineConfig};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::history::{HorizonInputs, merge_seq_times, push_seq_time, seq_time_quantum};
use crate::iter::{EntryIter, RowIter, resolve};
use crate::memtable::{Memtable, MemtableIter};
use crate::metrics::ReadSource;
use crate::read::upper::{point_versions, row_files_may_hold, state_iter};
use crate::row::RowValues;
use crate::schema::{PreparedEntry, TableSchema};
use crate::sst::{SstBuilder, SstReader};
use crate::state::{ShardState, SstHandle};
use crate::version::Edit;
use crate::wal::Segment;

/// A write waiting in a group commit: sequence number, versions, durability, reply.
type PendingWrite = (
    u64,
    Vec<PreparedEntry>,
    Durability,
    Option<oneshot::Sender<Result<u64>>>,
);

enum Request {
    Write {
        entries: Vec<PreparedEntry>,
        durability: Durability,
        reply: oneshot::Sender<Result<u64>>,
    },
    Freeze {
        reply: oneshot::Sender<()>,
    },
    /// Answered once every write sent before it is in the bucket (or failed).
    Sync {
        reply: oneshot::Sender<()>,
    },
}

/// WAL segments a reopening writer fetches at once while replaying its tail.
const REPLAY_READS: usize = 32;

/// How long [`Shard::close`] waits for the WAL uploads of writes already acknowledged
/// locally (`Durability::Local`) and of writes already sent.
pub const CLOSE_UPLOAD_WAIT: Duration = Duration::from_secs(10);

/// Everything shared by a shard's tasks.
pub(crate) struct ShardInner {
    pub(crate) name: String,
    pub(crate) table: Arc<TableSchema>,
    pub(crate) config: EngineConfig,
    pub(crate) store: StoreRef,
    pub(crate) paths: ShardPaths,
    pub(crate) local_dir: PathBuf,
    pub(crate) epoch: u64,
    pub(crate) clock: ClockRef,
    pub(crate) manifests: VersionedStore<Manifest>,
    pub(crate) state: RwLock<Arc<ShardState>>,
    /// Highest sequence number visible to readers.
    pub(crate) last_seq: AtomicU64,
    /// Serializes manifest commits (flush, compaction).
    pub(crate) manifest_lock: tokio::sync::Mutex<()>,
    /// One compaction at a time per shard.
    pub(crate) compaction_lock: tokio::sync::Mutex<()>,
    pub(crate) fenced: AtomicBool,
    pub(crate) cancel: CancellationToken,
    pub(crate) flush_wanted: Notify,
    pub(crate) flushed: Notify,
    pub(crate) compaction_wanted: Notify,
    /// Pinned snapshot sequence numbers and their pin counts.
    pub(crate) pins: Mutex<BTreeMap<u64, usize>>,
    /// SSTs uploaded but not yet committed: GC must not delete them.
    pub(crate) in_flight: Mutex<HashSet<SstId>>,
    /// GC's record of when this process first saw each object (ages by its own clock).
    pub(crate) sightings: Mutex<crate::gc::Sightings>,
    next_sst: AtomicU64,
    /// Shard id within the table.
    pub(crate) shard_id: u32,
    /// Reading context of the S3 levels.
    pub(crate) s3: crate::context::ProcessContext,
    /// Published S3 compaction jobs awaiting results.
    pub(crate) outstanding: Mutex<std::collections::HashMap<String, crate::offload::Outstanding>>,
    /// Last-NVMe-level SSTs an outstanding cross-tier job reads: NVMe compaction leaves them.
    pub(crate) locked_ssts: Mutex<HashSet<SstId>>,
    /// Last-NVMe-level SSTs written by retention: copies of records already in S3, which a
    /// forced drain to S3 leaves where they are.
    pub(crate) retained_ssts: Mutex<HashSet<SstId>>,
    /// Records read from S3 waiting to be promoted (HotRAP §3.3–§3.4).
    pub(crate) promotion: Mutex<crate::promotion::PromotionCache>,
    pub(crate) next_job: AtomicU64,
    pub(crate) jobs_wanted: Notify,
    /// Manifest versions in-flight reads use (GC keeps their objects).
    pub(crate) readers: Mutex<BTreeMap<u64, usize>>,
    /// Since when writes are refused as overloaded (a stall).
    pub(crate) overloaded_since: Mutex<Option<std::time::Instant>>,
    pub(crate) stats: crate::metrics::ShardStats,
    /// When sequence numbers were acknowledged since the last manifest commit.
    pub(crate) time_index: Mutex<Vec<SeqTime>>,
    /// Bytes written to the shard since its creation (WAL segment bytes, continued from the
    /// manifest's last seq-time entry on open): what [`SeqTime::bytes`] samples.
    pub(crate) written_bytes: AtomicU64,
    /// When L0 last gained a file (clock ms): an L0 unchanged for `l0_settle_ms` settles.
    pub(crate) l0_grown_ms: AtomicU64,
}

/// A handle to an open shard.
#[derive(Clone)]
pub struct Shard {
    pub(crate) inner: Arc<ShardInner>,
    tx: mpsc::Sender<Request>,
}

impl ShardInner {
    /// A key as the process-wide hotness tracker knows it: table id, shard id, key.
    pub(crate) fn hotness_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(12 + key.len());
        k.extend_from_slice(&self.table.entry.id.to_be_bytes());
        k.extend_from_slice(&self.shard_id.to_be_bytes());
        k.extend_from_slice(key);
        k
    }

    /// Records a point read that found `key` (its newest version `value_len` bytes) in the
    /// hotness tracker, when there is one; returns the tracker when its buffer is full and
    /// must be flushed (blocking work: the caller's to place).
    pub(crate) fn note_access(
        &self,
        key: &[u8],
        value_len: u32,
    ) -> Option<Arc<crate::hotness::HotnessTracker>> {
        let t = self.s3.hotness.as_ref()?;
        t.buffer_access(&self.hotness_key(key), value_len)
            .then(|| t.clone())
    }

    /// Whether point reads at the latest sequence number go through the promotion cache
    /// (HotRAP §3.3): hot-record tracking and promotion both on.
    pub(crate) fn promotes(&self) -> bool {
        self.s3.hotness.is_some() && self.config.hotness.promotion
    }

    /// The versions of `key` the promotion cache holds for a read at `seq`.
    pub(crate) fn promoted(&self, key: &[u8], seq: u64) -> Option<Vec<Entry>> {
        self.promotion
            .lock()
            .get(key, seq)
            .map(|c| c.versions.clone())
    }

    /// Offers `versions` of `key`, read from the columnar levels at `seq`, to the promotion
    /// cache. `epoch` is the promotion epoch taken before the state they were read from:
    /// a cross-tier commit since then makes them stale, and the cache refuses them. A cache
    /// that fills starts promotion by flush (one round at a time) on `runtime`.
    pub(crate) fn offer_promotion(
        self: &Arc<Self>,
        key: &[u8],
        versions: Vec<Entry>,
        seq: u64,
        epoch: u64,
        runtime: &tokio::runtime::Handle,
    ) {
        let read = crate::promotion::Cached {
            versions,
            read_seq: seq,
        };
        let full = {
            let mut pc = self.promotion.lock();
            if pc.insert(key, read, epoch) {
                pc.bytes() >= self.config.hotness.promotion_cache_bytes
                    && !std::mem::replace(&mut pc.flushing, true)
            } else {
                self.stats.record_promotion_abort();
                false
            }
        };
        if !full {
            return;
        }
        let inner = self.clone();
        runtime.spawn(async move {
            // Reads during a round refill the cache without starting another (one round at
            // a time), and reads the cache answers insert nothing: a cache full again when
            // a round ends is flushed again. Each round empties it.
            loop {
                if let Err(e) = promote_by_flush(&inner).await {
                    tracing::warn!(shard = %inner.name, "promotion by flush: {e}");
                    inner.promotion.lock().flushing = false;
                    break;
                }
                let mut pc = inner.promotion.lock();
                if pc.bytes() < inner.config.hotness.promotion_cache_bytes {
                    pc.flushing = false;
                    break;
                }
            }
        });
    }
}

impl crate::read::view::PointReadSink for ShardInner {
    fn name(&self) -> &str {
        &self.name
    }

    fn record_point_read(&self, source: ReadSource) {
        self.stats.record_point_read(source);
    }

    fn note_access(
        &self,
        key: &[u8],
        value_len: u32,
    ) -> Option<Arc<crate::hotness::HotnessTracker>> {
        ShardInner::note_access(self, key, value_len)
    }

    fn promotes(&self) -> bool {
        ShardInner::promotes(self)
    }

    fn promoted(&self, key: &[u8], seq: u64) -> Option<Vec<Entry>> {
        ShardInner::promoted(self, key, seq)
    }

    fn offer_promotion(
        self: Arc<Self>,
        key: &[u8],
        versions: Vec<Entry>,
        seq: u64,
        epoch: u64,
        runtime: &tokio::runtime::Handle,
    ) {
        ShardInner::offer_promotion(&self, key, versions, seq, epoch, runtime)
    }
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shard({}, epoch {})", self.inner.name, self.inner.epoch)
    }
}

/// Keeps a manifest version's objects from GC while a read uses them.
pub(crate) struct ReadGuard {
    inner: Arc<ShardInner>,
    version: u64,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        let mut r = self.inner.readers.lock();
        if let Some(n) = r.get_mut(&self.version) {
            *n -= 1;
            if *n == 0 {
                r.remove(&self.version);
            }
        }
    }
}

/// A pinned point-in-time view: versions it can see are kept by compaction until dropped.
pub struct ShardSnapshot {
    inner: Arc<ShardInner>,
    seq: u64,
}

impl std::fmt::Debug for ShardSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardSnapshot({}, seq {})", self.inner.name, self.seq)
    }
}

impl ShardSnapshot {
    /// The snapshot's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl Drop for ShardSnapshot {
    fn drop(&mut self) {
        let mut pins = self.inner.pins.lock();
        if let Some(n) = pins.get_mut(&self.seq) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.seq);
            }
        }
    }
}

impl ShardInner {
    fn check_open(&self) -> Result<()> {
        if self.fenced.load(Ordering::Acquire) {
            return Err(self.fenced_error(0));
        }
        if self.cancel.is_cancelled() {
            return Err(Error::Closed(format!("shard {} is closed", self.name)));
        }
        Ok(())
    }

    pub(crate) fn fenced_error(&self, newer: u64) -> Error {
        Error::Fenced {
            shard: self.name.clone(),
            mine: self.epoch,
            newer,
        }
    }

    pub(crate) fn new_sst_id(&self) -> SstId {
        SstId {
            epoch: self.epoch,
            n: self.next_sst.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn local_sst_path(&self, id: &SstId) -> PathBuf {
        self.local_dir.join(format!("{id}.sst"))
    }

    pub(crate) fn current(&self) -> Arc<ShardState> {
        self.state.read().clone()
    }

    /// The current state plus a guard that keeps the objects of its manifest version from
    /// GC while a read runs.
    pub(crate) fn read_state(self: &Arc<Self>) -> (Arc<ShardState>, ReadGuard) {
        let state = self.current();
        let v = state.manifest.version;
        *self.readers.lock().entry(v).or_default() += 1;
        (
            state,
            ReadGuard {
                inner: self.clone(),
                version: v,
            },
        )
    }

    /// Commits a manifest derived from the current one by `change`, holding the manifest
    /// lock. A lost race means a newer writer exists: the shard is fenced.
    pub(crate) async fn commit_manifest(
        &self,
        change: impl FnOnce(&mut Manifest),
    ) -> Result<Arc<Versioned<Manifest>>> {
        let prev = self.current().manifest.clone();
        let mut next = prev.value.clone();
        change(&mut next);
        next.written_at_ms = self.clock.now_ms();
        // Entries go only once compaction has merged what they resolve to (the floor): a
        // time with no entry left is then refused as too old, not read as an empty table.
        let horizon = self.history_horizon().min(next.compaction_floor_seq);
        let pending = std::mem::take(&mut *self.time_index.lock());
        next.seq_times = merge_seq_times(
            &next.seq_times,
            &pending,
            horizon,
            seq_time_quantum(self.config.history_bytes_min),
        );
        match self.manifests.commit(Some(&prev), next).await {
            Ok(v) => Ok(Arc::new(v)),
            Err(strata_manifest::Error::Conflict { .. }) => {
                let newer = self
                    .manifests
                    .latest()
                    .await?
                    .map(|v| v.value.writer_epoch)
                    .unwrap_or(0);
                self.fenced.store(true, Ordering::Release);
                Err(self.fenced_error(newer))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Records that every write up to `seq` is acknowledged now, after `bytes` more were
    /// written (about one entry a second, more when a second writes more than the byte
    /// budget's precision).
    pub(crate) fn note_acknowledged(&self, seq: u64, bytes: u64) {
        let now = self.clock.now_ms();
        let bytes = self.written_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let entry = SeqTime {
            ms: now,
            seq,
            bytes,
        };
        let quantum = seq_time_quantum(self.config.history_bytes_min);
        let before = self
            .current()
            .manifest
            .value
            .seq_times
            .last()
            .map_or(0, |t| t.bytes);
        push_seq_time(&mut self.time_index.lock(), entry, quantum, before);
    }

    /// The history horizon: every version above this sequence number is kept by
    /// compaction (time travel reads it exactly): written within `history_retention_ms`,
    /// and with at most the history's byte budget written after it
    /// ([`crate::history::horizon`]).
    pub(crate) fn history_horizon(&self) -> u64 {
        let retention = self.config.history_retention_ms;
        if retention == 0 {
            return self.last_seq.load(Ordering::Acquire);
        }
        let manifest = self.current().manifest.clone();
        let stored = manifest
            .value
            .levels
            .iter()
            .map(|l| l.size_bytes())
            .sum::<u64>()
            + manifest
                .value
                .s3_levels
                .iter()
                .flat_map(|l| l.groups.iter())
                .map(|g| g.size_bytes())
                .sum::<u64>();
        let pending = self.time_index.lock();
        crate::history::horizon(
            manifest.value.seq_times.iter().chain(pending.iter()),
            HorizonInputs {
                now_ms: self.clock.now_ms(),
                retention_ms: retention,
                written_bytes: self.written_bytes.load(Ordering::Acquire),
                bytes_max: crate::history::bytes_budget(
                    self.config.history_bytes_ratio,
                    self.config.history_bytes_min,
                    stored,
                ),
            },
        )
    }

    /// The seq-time entries known to this writer (committed plus pending), ascending.
    pub(crate) fn seq_times(&self) -> Vec<SeqTime> {
        let manifest = self.current().manifest.clone();
        let mut out = manifest.value.seq_times.clone();
        out.extend(self.time_index.lock().iter().copied());
        out
    }

    /// Uploads a finished local SST (create-if-absent: names are never reused).
    pub(crate) async fn upload_sst(&self, id: &SstId, path: &std::path::Path) -> Result<()> {
        let data = tokio::fs::read(path)
            .await
            .map_err(Error::io(format!("read {}", path.display())))?;
        self.store
            .put_opts(
                &self.paths.sst(id),
                Bytes::from(data).into(),
                PutOptions::from(PutMode::Create),
            )
            .await
            .map_err(Error::store(format!("upload sst {id}")))?;
        Ok(())
    }
}

impl Shard {
    /// Opens `table`'s shard `shard_id` as its writer, fencing any previous writer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn open(
        table: Arc<TableSchema>,
        shard_id: u32,
        paths: ShardPaths,
        store: StoreRef,
        local_root: PathBuf,
        config: EngineConfig,
        clock: ClockRef,
        s3: crate::context::ProcessContext,
    ) -> Result<Shard> {
        let name = format!("{}/{}", table.name(), shard_id);
        let group_counts: Vec<usize> = table.groups.iter().map(|g| g.len()).collect();
        let manifests = VersionedStore::<Manifest>::new(store.clone(), paths.manifest_dir());

        // 1. Bump the writer epoch.
        let manifest = loop {
            let latest = manifests.latest().await?;
            let mut next = match &latest {
                Some(v) => v.value.clone(),
                None => Manifest::empty(config.levels),
            };
            next.writer_epoch += 1;
            next.written_at_ms = clock.now_ms();
            crate::version::shape_levels(&mut next, &group_counts).map_err(|e| match &latest {
                Some(v) => e.in_object(&manifests.path(v.version)),
                None => e,
            })?;
            match manifests.commit(latest.as_ref(), next).await {
                Ok(v) => break v,
                Err(strata_manifest::Error::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let epoch = manifest.value.writer_epoch;
        tracing::info!(shard = %name, epoch, version = manifest.version, "opening shard writer");

        // 1b. Segments a previous process on this node acknowledged after the local fsync
        // (`Durability::Local`) and did not upload: uploaded now, in order, before the fence.
        upload_local_segments(
            &store,
            &paths,
            &local_root,
            &name,
            manifest.value.wal_replay_after,
        )
        .await?;

        // 2. Fence the WAL at the first free id after everything listed.
        let mut wal_ids: Vec<(u64, u64)> = store
            .list(Some(&paths.wal_dir()))
            .try_filter_map(
                |m| async move { Ok(parse_id(m.location.as_ref()).map(|id| (id, m.size))) },
            )
            .try_collect()
            .await
            .map_err(Error::store("list wal"))?;
        wal_ids.sort();
        let mut fence = wal_ids
            .last()
            .map_or(0, |(id, _)| *id)
            .max(manifest.value.wal_replay_after)
            + 1;
        loop {
            match store
                .put_opts(
                    &paths.wal(fence),
                    Bytes::new().into(),
                    PutOptions::from(PutMode::Create),
                )
                .await
            {
                Ok(_) => break,
                Err(object_store::Error::AlreadyExists { .. }) => fence += 1,
                Err(e) => return Err(Error::store("write wal fence")(e)),
            }
        }

        // 3. Replay every segment between the manifest's replay point and the fence.
        let active = Arc::new(Memtable::new());
        let mut last_seq = manifest.value.seq_flushed;
        // Segments are fetched REPLAY_READS at a time and applied in id order: a tail of
        // thousands of small group commits replays in a few round trips' time, not one
        // round trip per segment.
        let replay_from = manifest.value.wal_replay_after + 1;
        let mut segments = futures::stream::iter(replay_from..fence)
            .map(|id| {
                let (store, path) = (store.clone(), paths.wal(id));
                async move {
                    let got = match store.get(&path).await {
                        Ok(g) => g.bytes().await,
                        Err(e) => Err(e),
                    };
                    (id, path, got)
                }
            })
            .buffered(REPLAY_READS);
        while let Some((id, path, got)) = segments.next().await {
            let data = match got {
                Ok(data) => data,
                // Ids are consecutive (a writer never skips one, fences are never
                // collected, and GC keeps every segment above the oldest retained
                // manifest's replay point): a missing one held acknowledged writes.
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::Corrupt(format!(
                        "shard {name}: WAL segment {id} is missing from the bucket; replay \
                         from {replay_from} to {fence} needs it (acknowledged writes would be lost)"
                    )));
                }
                Err(e) => return Err(Error::store(format!("read {path}"))(e)),
            };
            if data.is_empty() {
                continue; // an older writer's fence
            }
            let segment = Segment::decode(&data).map_err(|e| e.in_object(&path))?;
            for record in segment.records {
                if record.seq <= manifest.value.seq_flushed {
                    continue;
                }
                active.insert(record.seq, id, &record.entries);
                last_seq = last_seq.max(record.seq);
            }
        }
        drop(segments);
        // The byte count continues from the last committed entry (writes replayed above
        // are not counted again: an undercount only keeps more history).
        let written_bytes = manifest.value.seq_times.last().map_or(0, |t| t.bytes);

        // 4. Still the owner? (A newer writer may have fenced us while we replayed.)
        if let Some(latest) = manifests.latest().await?
            && latest.value.writer_epoch != epoch
        {
            return Err(Error::Fenced {
                shard: name,
                mine: epoch,
                newer: latest.value.writer_epoch,
            });
        }

        // 5. Bring the referenced SSTs to the local directory.
        let local_dir = local_root;
        tokio::fs::create_dir_all(&local_dir)
            .await
            .map_err(Error::io(format!("create {}", local_dir.display())))?;
        // Several at once: a replacement node's time to first read is this download (the
        // row levels are small and bounded at default settings, so it is too).
        let mut levels = Vec::with_capacity(manifest.value.levels.len());
        let mut referenced = HashSet::new();
        for level in &manifest.value.levels {
            for info in &level.ssts {
                referenced.insert(local_dir.join(format!("{}.sst", info.id)));
            }
            // The futures are made first: a stream holding the closure that makes them is
            // not `Send` for every lifetime, which the spawned open needs.
            let mut downloads = Vec::with_capacity(level.ssts.len());
            for info in &level.ssts {
                downloads.push(crate::read::view::fetch_sst(
                    &store, &paths, info, &local_dir,
                ));
            }
            let handles: Vec<_> = futures::stream::iter(downloads)
                .buffered(SST_DOWNLOADS_CONCURRENT)
                .try_collect()
                .await?;
            levels.push(handles);
        }
        // Local files no manifest references are leftovers of a previous process.
        if let Ok(mut dir) = tokio::fs::read_dir(&local_dir).await {
            while let Ok(Some(e)) = dir.next_entry().await {
                if !referenced.contains(&e.path()) {
                    let _ = tokio::fs::remove_file(e.path()).await;
                }
            }
        }

        let state = ShardState {
            active,
            frozen: Vec::new(),
            levels,
            manifest: Arc::new(manifest),
        };
        let (tx, rx) = mpsc::channel(config.write_queue_max.max(1));
        let opened_ms = clock.now_ms();
        let inner = Arc::new(ShardInner {
            name,
            table,
            config,
            store,
            paths,
            local_dir,
            epoch,
            clock,
            manifests,
            state: RwLock::new(Arc::new(state)),
            last_seq: AtomicU64::new(last_seq),
            manifest_lock: tokio::sync::Mutex::new(()),
            compaction_lock: tokio::sync::Mutex::new(()),
            fenced: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            flush_wanted: Notify::new(),
            flushed: Notify::new(),
            compaction_wanted: Notify::new(),
            pins: Mutex::new(BTreeMap::new()),
            in_flight: Mutex::new(HashSet::new()),
            sightings: Mutex::new(crate::gc::Sightings::default()),
            next_sst: AtomicU64::new(1),
            stats: Default::default(),
            shard_id,
            s3,
            outstanding: Mutex::new(Default::default()),
            locked_ssts: Mutex::new(HashSet::new()),
            retained_ssts: Mutex::new(HashSet::new()),
            promotion: Mutex::new(Default::default()),
            next_job: AtomicU64::new(1),
            jobs_wanted: Notify::new(),
            readers: Mutex::new(BTreeMap::new()),
            overloaded_since: Mutex::new(None),
            time_index: Mutex::new(Vec::new()),
            written_bytes: AtomicU64::new(written_bytes),
            l0_grown_ms: AtomicU64::new(opened_ms),
        });
        offload::clear_stale_jobs(&inner).await?;
        tokio::spawn(offload::job_loop(inner.clone()));
        tokio::spawn(writer_loop(inner.clone(), rx, fence + 1, last_seq + 1));
        tokio::spawn(flush_loop(inner.clone()));
        tokio::spawn(compact::compaction_loop(inner.clone()));
        if inner.config.gc.interval_ms > 0 {
            tokio::spawn(gc::gc_loop(inner.clone()));
        }
        inner.compaction_wanted.notify_one();
        Ok(Shard { inner, tx })
    }

    /// The shard's name (`table/shard`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This writer's epoch.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// Highest sequence number visible to readers.
    pub fn last_seq(&self) -> u64 {
        self.inner.last_seq.load(Ordering::Acquire)
    }

    /// Statistics.
    pub fn stats(&self) -> crate::metrics::ShardStatsSnapshot {
        let state = self.inner.current();
        let mut s = self.inner.stats.snapshot(&state);
        s.promotion_cache_bytes = self.inner.promotion.lock().bytes();
        let outstanding: Vec<u64> = self
            .inner
            .outstanding
            .lock()
            .values()
            .map(|o| o.spec.input_bytes)
            .collect();
        s.jobs_outstanding = outstanding.len();
        let due: u64 = self
            .inner
            .candidates(&state, false)
            .iter()
            .map(|(spec, _)| spec.input_bytes)
            .sum();
        s.pending_compaction_bytes = outstanding.iter().sum::<u64>() + due;
        s
    }

    /// The manifest version readers currently see.
    pub fn manifest(&self) -> Arc<Versioned<Manifest>> {
        self.inner.current().manifest.clone()
    }

    /// Writes validated versions atomically under one new sequence number.
    pub async fn write(&self, entries: Vec<PreparedEntry>, durability: Durability) -> Result<u64> {
        self.inner.check_open()?;
        self.admit()?;
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Write {
                entries,
                durability,
                reply,
            })
            .await
            .map_err(|_| self.closed_error())?;
        rx.await.map_err(|_| self.closed_error())?
    }

    /// Refuses the write when compaction is too far behind (Luo ch. 5: a global limit on
    /// sorted runs; below it nothing is throttled). A refusal period is a stall.
    fn admit(&self) -> Result<()> {
        let state = self.inner.current();
        let runs = crate::metrics::sorted_runs(&state);
        let frozen = state.frozen.len();
        let limit = self.inner.config.sorted_runs_max;
        let mut since = self.inner.overloaded_since.lock();
        if crate::backpressure::refuses(runs, frozen, &self.inner.config).is_some() {
            if since.is_none() {
                *since = Some(std::time::Instant::now());
                tracing::warn!(shard = %self.inner.name, runs, frozen, "write stall: refusing writes until compaction catches up");
            }
            self.inner.stats.record_overloaded();
            self.inner.flush_wanted.notify_one();
            self.inner.compaction_wanted.notify_one();
            self.inner.jobs_wanted.notify_one();
            return Err(Error::Overloaded {
                shard: self.inner.name.clone(),
                runs,
                limit,
                frozen,
            });
        }
        if let Some(t) = since.take() {
            self.inner.stats.record_stall(t.elapsed());
        }
        Ok(())
    }

    /// Moves everything in the NVMe tier down to the S3 levels now (flush, compact the NVMe
    /// levels into the last one, then cross-tier jobs), waiting until committed.
    pub async fn drain_to_s3(&self) -> Result<()> {
        self.flush().await?;
        loop {
            self.wait_jobs().await?;
            if compact::compact_all_to_last(&self.inner).await? {
                break;
            }
        }
        self.run_jobs_forced(|spec| matches!(spec.source, crate::jobs::JobSource::CrossTier { .. }))
            .await
    }

    /// Moves one column group of S3 level `level` (0-based) down a level now (CG-local
    /// compaction), waiting until committed.
    pub async fn compact_s3_group(&self, level: usize, group: usize) -> Result<()> {
        self.run_jobs_forced(move |spec| {
            matches!(spec.source, crate::jobs::JobSource::Group { level: l, group: g, .. } if l == level && g == group)
        })
        .await
    }

    async fn run_jobs_forced(&self, which: impl Fn(&crate::jobs::JobSpec) -> bool) -> Result<()> {
        // Background jobs may take the runs first; repeat until nothing matching is left.
        loop {
            self.inner.check_open()?;
            self.wait_jobs().await?;
            let cands: Vec<_> = self
                .inner
                .candidates(&self.inner.current(), true)
                .into_iter()
                .filter(|(s, _)| which(s))
                .collect();
            if cands.is_empty() {
                return Ok(());
            }
            self.inner.publish(cands).await?;
        }
    }

    /// Waits until every published job of this shard is settled (committed or abandoned).
    pub async fn wait_jobs(&self) -> Result<()> {
        loop {
            self.inner.check_open()?;
            if self.inner.outstanding.lock().is_empty() {
                return Ok(());
            }
            self.inner.settle_results().await?;
            if self.inner.outstanding.lock().is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(
                self.inner.config.jobs.poll_ms.clamp(10, 200),
            ))
            .await;
        }
    }

    /// The shard's manifest versions in the bucket: (version, bytes, last modified ms).
    pub async fn manifest_versions(&self) -> Result<Vec<(u64, u64, u64)>> {
        Ok(self
            .inner
            .manifests
            .list_versions()
            .await?
            .into_iter()
            .map(|(v, m)| (v, m.size, m.last_modified.timestamp_millis().max(0) as u64))
            .collect())
    }

    /// Durable snapshot pins of readers in other processes: (reader, record).
    pub async fn pins(&self) -> Result<Vec<(String, crate::pins::PinRecord)>> {
        crate::pins::list_pins(&self.inner.store, &self.inner.paths).await
    }

    /// Snapshots this process holds (pinned sequence numbers, one per snapshot).
    pub fn local_snapshots(&self) -> Vec<u64> {
        self.inner
            .pins
            .lock()
            .iter()
            .flat_map(|(seq, n)| std::iter::repeat_n(*seq, *n))
            .collect()
    }

    /// Whether a newer writer has fenced this one: it acknowledges nothing more, and a
    /// node still holding the shard's lease reopens it (see `Db::join_cluster`).
    pub fn is_fenced(&self) -> bool {
        self.inner.fenced.load(Ordering::Acquire)
    }

    /// Job ids this shard has published and not settled.
    pub fn outstanding_jobs(&self) -> Vec<String> {
        self.inner.outstanding.lock().keys().cloned().collect()
    }

    fn closed_error(&self) -> Error {
        if self.inner.fenced.load(Ordering::Acquire) {
            self.inner.fenced_error(0)
        } else {
            Error::Closed(format!("shard {} is closed", self.inner.name))
        }
    }

    /// Freezes the active memtable and waits until every frozen memtable is flushed to an
    /// SST in the object store and committed in the manifest.
    pub async fn flush(&self) -> Result<()> {
        self.inner.check_open()?;
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Freeze { reply })
            .await
            .map_err(|_| self.closed_error())?;
        rx.await.map_err(|_| self.closed_error())?;
        loop {
            let notified = self.inner.flushed.notified();
            if self.inner.current().frozen.is_empty() {
                return Ok(());
            }
            self.inner.check_open()?;
            self.inner.flush_wanted.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    /// Runs compactions until none is due, waiting for them.
    pub async fn compact(&self) -> Result<()> {
        self.inner.check_open()?;
        compact::compact_until_idle(&self.inner).await
    }

    /// Runs garbage collection once now.
    pub async fn gc(&self) -> Result<crate::gc::GcReport> {
        self.inner.check_open()?;
        gc::collect(&self.inner).await
    }

    /// What a GC pass would delete now, deleting nothing (a dry run).
    pub async fn gc_plan(&self) -> Result<crate::gc::GcPlan> {
        self.inner.check_open()?;
        gc::plan(&self.inner, false).await
    }

    /// Pins the current state: versions visible at it survive compaction until dropped.
    pub fn snapshot(&self) -> ShardSnapshot {
        let mut pins = self.inner.pins.lock();
        let seq = self.last_seq();
        *pins.entry(seq).or_default() += 1;
        ShardSnapshot {
            inner: self.inner.clone(),
            seq,
        }
    }

    fn read_seq(&self, snapshot: Option<&ShardSnapshot>) -> Result<u64> {
        self.inner.check_open()?;
        Ok(match snapshot {
            Some(s) => s.seq,
            None => self.last_seq(),
        })
    }

    /// A consistent read-only view of the shard's current state (every acknowledged
    /// write), pinned until dropped.
    pub fn view(&self) -> Result<crate::read::view::ShardView> {
        self.inner.check_open()?;
        let snap = self.snapshot();
        // The promotion epoch before the state, as in `get`: versions a point read through
        // the view finds in the columnar levels are offered to the promotion cache under it.
        let promotion_epoch = self.inner.promotion.lock().epoch;
        let (state, guard) = self.inner.read_state();
        Ok(crate::read::view::ShardView::new(
            self.inner.table.clone(),
            state,
            snap.seq(),
            self.inner.store.clone(),
            self.inner.paths.clone(),
            self.inner.s3.reads.clone(),
            self.inner.seq_times(),
            vec![Box::new(snap), Box::new(guard)],
        )
        .reporting_to(Arc::downgrade(&self.inner) as _, promotion_epoch))
    }

    /// Point read of an encoded key; the row's non-key values, or None.
    ///
    /// Runs on the caller's task unless a row-level SST may hold the key (their key ranges
    /// and Bloom filters are in memory; reading one is a blocking `pread`, done on the
    /// blocking pool): a key answered by the memtables or the columnar levels through the
    /// decoded-page cache costs no thread hop.
    pub async fn get(
        &self,
        key: Vec<u8>,
        snapshot: Option<&ShardSnapshot>,
    ) -> Result<Option<RowValues>> {
        let seq = self.read_seq(snapshot)?;
        // The promotion epoch before the state: a cross-tier commit after the state was
        // taken makes a version read from it stale, and the cache refuses it.
        let epoch = self.inner.promotion.lock().epoch;
        let (state, _guard) = self.inner.read_state();
        let inner = &self.inner;
        let (mut versions, mut source) = if row_files_may_hold(&state, &key) {
            let (st, k) = (state.clone(), key.clone());
            tokio::task::spawn_blocking(move || point_versions(&st, &k, seq))
                .await
                .map_err(|e| Error::Internal(e.to_string()))??
        } else {
            point_versions(&state, &key, seq)?
        };
        let codec = &inner.table.codec;
        let promote = snapshot.is_none() && inner.promotes();
        if !crate::fold::decided(codec, &mut versions)? {
            let cached = promote.then(|| inner.promoted(&key, seq)).flatten();
            if let Some(c) = cached {
                source = ReadSource::PromotionCache;
                versions.extend(c);
            } else {
                source = ReadSource::S3;
                let before = versions.len();
                let files = crate::read::remote::BucketFiles {
                    store: &inner.store,
                    paths: &inner.paths,
                    cache: &inner.s3.reads.cache,
                    metas: &inner.s3.reads.metas,
                };
                crate::read::remote::point_versions_async(
                    &inner.table,
                    &files,
                    &state,
                    &key,
                    seq,
                    &mut versions,
                )
                .await?;
                if promote && versions.len() > before {
                    inner.offer_promotion(
                        &key,
                        versions[before..].to_vec(),
                        seq,
                        epoch,
                        &tokio::runtime::Handle::current(),
                    );
                }
            }
            crate::fold::coalesce(codec, &mut versions)?;
        }
        inner.stats.record_point_read(source);
        let row = resolve(codec, &versions)?;
        let value_len = versions.first().map_or(0, |e| e.value.len()) as u32;
        if row.is_some()
            && let Some(t) = inner.note_access(&key, value_len)
        {
            // Losing an access loses warmth, never data: log and go on.
            let flushed = tokio::task::spawn_blocking(move || t.flush_full())
                .await
                .map_err(|e| Error::Internal(e.to_string()))
                .and_then(|r| r);
            if let Err(e) = flushed {
                tracing::warn!(shard = %inner.name, "hotness tracker: {e}");
            }
        }
        // A read answered from memory never waits; without this, a loop of them on a
        // runtime thread would starve flushes and compactions queued behind it.
        tokio::task::consume_budget().await;
        Ok(row)
    }

    /// Scans encoded keys in `[start, end)` in key order, returning at most `limit` live rows.
    pub async fn scan(
        &self,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        limit: usize,
        snapshot: Option<&ShardSnapshot>,
    ) -> Result<Vec<(Bytes, RowValues)>> {
        let seq = self.read_seq(snapshot)?;
        let (state, _guard) = self.inner.read_state();
        let inner = self.inner.clone();
        let table = self.inner.table.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let mut iter = state_iter(&state, &start, end.as_deref(), &table.codec);
            let files = crate::read::remote::BucketFiles {
                store: &inner.store,
                paths: &inner.paths,
                cache: &inner.s3.reads.cache,
                metas: &inner.s3.reads.metas,
            };
            iter.add_sources(crate::read::remote::run_iters(
                &table,
                &files,
                &state.manifest.value,
                0..usize::MAX,
                &std::collections::HashSet::new(),
                &start,
                end.as_deref(),
                None,
                false,
                &handle,
            ));
            let mut rows = RowIter::new(Box::new(iter), &table.codec, seq, end);
            let mut out = Vec::new();
            while out.len() < limit {
                match rows.next_row()? {
                    Some(r) => out.push(r),
                    None => break,
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    /// Stops the shard's tasks. Nothing is flushed (the WAL holds every acknowledged write),
    /// but first the writes already sent are finished and the WAL segments of writes
    /// acknowledged after a local fsync (`Durability::Local`) are uploaded, waiting at most
    /// [`CLOSE_UPLOAD_WAIT`]: an orderly shutdown leaves them in the bucket, not only on
    /// this node's disk. (Stopping at once lost them to a node replacing this one.)
    pub async fn close(&self) {
        let sync = async {
            let (reply, rx) = oneshot::channel();
            if self.tx.send(Request::Sync { reply }).await.is_ok() {
                let _ = rx.await;
            }
        };
        if tokio::time::timeout(CLOSE_UPLOAD_WAIT, sync).await.is_err() {
            tracing::warn!(shard = %self.inner.name, "close: WAL uploads still pending after {CLOSE_UPLOAD_WAIT:?}; locally acknowledged writes stay on this node's disk until the shard reopens here");
        }
        self.inner.cancel.cancel();
    }
}

async fn writer_loop(
    inner: Arc<ShardInner>,
    mut rx: mpsc::Receiver<Request>,
    mut wal_id: u64,
    mut next_seq: u64,
) {
    loop {
        // A memtable left with writes and then idle for `memtable_settle_ms` is flushed.
        let settle = inner.config.memtable_settle_ms;
        let idle_flush = settle > 0 && !inner.current().active.is_empty();
        let first = tokio::select! {
            r = rx.recv() => match r { Some(r) => r, None => return },
            _ = inner.cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(settle)), if idle_flush => {
                if !inner.current().active.is_empty() {
                    tracing::debug!(shard = %inner.name, "flushing an idle memtable");
                    freeze(&inner);
                }
                continue;
            }
        };
        // Write stall: too many memtables wait for flush.
        while inner.current().frozen.len() >= inner.config.memtables_frozen_max {
            let stall = std::time::Instant::now();
            inner.flush_wanted.notify_one();
            let notified = inner.flushed.notified();
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = inner.cancel.cancelled() => return,
            }
            inner.stats.record_stall(stall.elapsed());
        }
        let mut group = vec![first];
        let mut bytes = 0usize;
        while bytes < inner.config.wal_segment_bytes_max {
            match rx.try_recv() {
                Ok(r) => {
                    if let Request::Write { entries, .. } = &r {
                        bytes += entries
                            .iter()
                            .map(|e| e.key.len() + e.value.len() + 8)
                            .sum::<usize>();
                    }
                    group.push(r);
                }
                Err(_) => break,
            }
        }
        let mut freeze_replies = Vec::new();
        let mut sync_replies = Vec::new();
        let mut writes = Vec::new();
        for r in group {
            match r {
                Request::Write {
                    entries,
                    durability,
                    reply,
                } => {
                    if entries.is_empty() {
                        let _ = reply.send(Ok(next_seq.saturating_sub(1)));
                        continue;
                    }
                    writes.push((next_seq, entries, durability, Some(reply)));
                    next_seq += 1;
                }
                Request::Freeze { reply } => freeze_replies.push(reply),
                Request::Sync { reply } => sync_replies.push(reply),
            }
        }
        if !writes.is_empty() {
            let records: Vec<(u64, &[PreparedEntry])> = writes
                .iter()
                .map(|(seq, entries, _, _)| (*seq, entries.as_slice()))
                .collect();
            let data = Bytes::from(Segment::encode(inner.epoch, &records));
            let data_len = data.len() as u64;
            let mut applied = false;
            // Only a group with a locally durable write leaves a local segment to remove.
            let local = writes.iter().any(|w| w.2 == Durability::Local);
            if local {
                match write_local_wal(&inner, wal_id, &data).await {
                    Ok(()) => {
                        apply(&inner, wal_id, &writes);
                        applied = true;
                        for w in writes.iter_mut().filter(|w| w.2 == Durability::Local) {
                            if let Some(reply) = w.3.take() {
                                let _ = reply.send(Ok(w.0));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(shard = %inner.name, error = %e, "local wal write failed; waiting for the upload")
                    }
                }
            }
            match upload_segment(&inner, wal_id, data).await {
                Ok(()) => {}
                Err(e) => {
                    // Fenced or closed: nothing more can be acknowledged by this writer.
                    for w in writes.iter_mut() {
                        if let Some(reply) = w.3.take() {
                            let _ = reply.send(Err(match &e {
                                Error::Fenced { .. } => inner.fenced_error(0),
                                _ => Error::Closed(format!("shard {} is closed", inner.name)),
                            }));
                        }
                    }
                    rx.close();
                    while let Some(r) = rx.recv().await {
                        if let Request::Write { reply, .. } = r {
                            let _ = reply.send(Err(inner.fenced_error(0)));
                        }
                    }
                    return;
                }
            }
            if local {
                let _ =
                    tokio::fs::remove_file(inner.local_dir.join(format!("{wal_id:020}.wal"))).await;
            }
            if !applied {
                apply(&inner, wal_id, &writes);
            }
            if let Some(last) = writes.last() {
                inner.note_acknowledged(last.0, data_len);
            }
            for w in writes.iter_mut() {
                if let Some(reply) = w.3.take() {
                    let _ = reply.send(Ok(w.0));
                }
            }
            inner.stats.record_wal_segment(writes.len());
            wal_id += 1;
        }
        let state = inner.current();
        if (!freeze_replies.is_empty() && !state.active.is_empty())
            || state.active.size_bytes() >= inner.config.memtable_bytes_max
            || state.active.wal_segments() >= inner.config.memtable_wal_segments_max.max(1)
        {
            freeze(&inner);
        }
        for r in freeze_replies.into_iter().chain(sync_replies) {
            let _ = r.send(());
        }
    }
}

fn apply(inner: &ShardInner, wal_id: u64, writes: &[PendingWrite]) {
    let state = inner.current();
    let mut max = 0;
    for (seq, entries, _, _) in writes {
        state.active.insert(*seq, wal_id, entries);
        max = max.max(*seq);
    }
    inner.last_seq.fetch_max(max, Ordering::AcqRel);
}

fn freeze(inner: &ShardInner) {
    let mut guard = inner.state.write();
    let mut next = (**guard).clone();
    let old = std::mem::replace(&mut next.active, Arc::new(Memtable::new()));
    next.frozen.insert(0, old);
    *guard = Arc::new(next);
    drop(guard);
    inner.flush_wanted.notify_one();
}

async fn write_local_wal(inner: &ShardInner, wal_id: u64, data: &Bytes) -> Result<()> {
    let path = inner.local_dir.join(format!("{wal_id:020}.wal"));
    let data = data.clone();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&data)?;
        f.sync_all()
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
    .map_err(Error::io("local wal"))
}

/// Uploads the local WAL segments above `replay_after` that a previous process left (written
/// and fsynced for `Durability::Local`, acknowledged, not yet uploaded), in id order, each
/// create-if-absent at its own id, so the replay that follows finds them. A segment already
/// in the bucket with the same bytes was uploaded; one whose id is taken by other bytes
/// means another writer fenced the WAL there before this reopen: that segment and every
/// later local one are lost (an error in the log; the mode's documented risk). Every local
/// segment file is removed afterwards.
async fn upload_local_segments(
    store: &StoreRef,
    paths: &ShardPaths,
    local_dir: &std::path::Path,
    name: &str,
    replay_after: u64,
) -> Result<()> {
    let mut local: Vec<(u64, PathBuf)> = Vec::new();
    if let Ok(mut dir) = tokio::fs::read_dir(local_dir).await {
        while let Ok(Some(e)) = dir.next_entry().await {
            let file = e.file_name();
            let id = file
                .to_str()
                .and_then(|f| f.strip_suffix(".wal"))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(id) = id {
                local.push((id, e.path()));
            }
        }
    }
    local.sort();
    let mut lost_from = None;
    for (id, file) in &local {
        if *id <= replay_after || lost_from.is_some() {
            continue;
        }
        let data = Bytes::from(
            tokio::fs::read(file)
                .await
                .map_err(Error::io(format!("read {}", file.display())))?,
        );
        let created = strata_objstore::create_or_match(store.as_ref(), &paths.wal(*id), &data)
            .await
            .map_err(Error::store(format!("upload local wal {id}")))?;
        if created == Created::Theirs {
            lost_from = Some(*id);
        }
    }
    if let Some(id) = lost_from {
        tracing::error!(shard = %name, from = id, "locally acknowledged WAL segments lost: another writer fenced the WAL before they were uploaded");
    }
    for (_, file) in &local {
        let _ = tokio::fs::remove_file(file).await;
    }
    Ok(())
}

/// PUTs a segment at `wal_id`, retrying transient failures with the same id and bytes (ids
/// must stay consecutive for fencing to hold). An object already there with other bytes is
/// a newer writer's fence; one with exactly these bytes is this writer's own (an attempt
/// that landed with its response lost).
async fn upload_segment(inner: &ShardInner, wal_id: u64, data: Bytes) -> Result<()> {
    let path = inner.paths.wal(wal_id);
    let mut backoff = Duration::from_millis(50);
    loop {
        match strata_objstore::create_or_match(inner.store.as_ref(), &path, &data).await {
            Ok(Created::Mine) => return Ok(()),
            Ok(Created::Theirs) => {
                inner.fenced.store(true, Ordering::Release);
                tracing::warn!(shard = %inner.name, epoch = inner.epoch, wal_id, "fenced by a newer writer");
                return Err(inner.fenced_error(0));
            }
            Err(e) => {
                tracing::warn!(shard = %inner.name, wal_id, error = %e, "wal upload failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = inner.cancel.cancelled() => return Err(Error::Closed(inner.name.clone())),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn flush_loop(inner: Arc<ShardInner>) {
    loop {
        tokio::select! {
            _ = inner.flush_wanted.notified() => {}
            _ = inner.cancel.cancelled() => return,
        }
        loop {
            let Some(mem) = inner.current().frozen.last().cloned() else {
                break;
            };
            match flush_one(&inner, mem).await {
                Ok(()) => {
                    inner.flushed.notify_waiters();
                    inner.compaction_wanted.notify_one();
                }
                Err(e) => {
                    if inner.fenced.load(Ordering::Acquire) || inner.cancel.is_cancelled() {
                        inner.flushed.notify_waiters();
                        return;
                    }
                    tracing::warn!(shard = %inner.name, error = %e, "flush failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// Writes the oldest frozen memtable to an L0 SST, uploads it, commits the manifest, then
/// swaps it into the readers' state.
async fn flush_one(inner: &Arc<ShardInner>, mem: Arc<Memtable>) -> Result<()> {
    let id = inner.new_sst_id();
    let path = inner.local_sst_path(&id);
    let handle = if mem.is_empty() {
        None
    } else {
        let (block, bits) = (
            inner.config.sst_block_bytes,
            inner.config.bloom_bits_per_key,
        );
        let (m, p) = (mem.clone(), path.clone());
        let stats = tokio::task::spawn_blocking(move || -> Result<crate::sst::SstStats> {
            let mut b = SstBuilder::create(&p, block, bits)?;
            let mut it = MemtableIter::new(m, &[]);
            while let Some(e) = it.next_entry()? {
                b.add(&e)?;
            }
            b.finish()
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        inner.in_flight.lock().insert(id);
        let uploaded = inner.upload_sst(&id, &path).await;
        if let Err(e) = uploaded {
            inner.in_flight.lock().remove(&id);
            return Err(e);
        }
        let info = SstInfo {
            id,
            key_min: stats.key_min,
            key_max: stats.key_max,
            seq_min: stats.seq_min,
            seq_max: stats.seq_max,
            entries: stats.entries,
            size_bytes: stats.size_bytes,
        };
        let p = path.clone();
        let reader = tokio::task::spawn_blocking(move || SstReader::open(&p))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        Some(Arc::new(SstHandle::new(info, reader, path)))
    };
    // Commits, installs, and releases the file from `in_flight` (also on failure).
    inner
        .commit(Edit::Flush {
            memtable: mem.clone(),
            sst: handle,
            seq_flushed: mem.seq_max(),
            wal_replay_after: mem.wal_id_max(),
        })
        .await?;
    inner.stats.record_flush();
    Ok(())
}

/// Promotion by flush (HotRAP §3.4): the promotion cache's hot records that have no version
/// in the memtables or NVMe levels become an SST at the oldest end of L0. The SST is written
/// and uploaded first; the check is repeated under the manifest lock right before the
/// commit, so no flush or compaction moves a newer version below L0 in between; writes arriving meanwhile land in the memtable, above L0. Records
/// cached before an NVMe→S3 commit are dropped (the epoch moved: a newer version may have
/// reached S3).
pub(crate) async fn promote_by_flush(inner: &Arc<ShardInner>) -> Result<()> {
    let (taken, epoch) = inner.promotion.lock().take_all();
    let tracker = inner.s3.hotness.clone();
    let check = inner.config.hotness.check;
    let hot: Vec<(Vec<u8>, crate::promotion::Cached)> = taken
        .into_iter()
        .filter(|(k, _)| {
            !check
                || tracker
                    .as_ref()
                    .is_some_and(|t| t.is_hot(&inner.hotness_key(k)))
        })
        .collect();
    if hot.is_empty() {
        return Ok(());
    }
    // Built and uploaded without the manifest lock; the check that decides is repeated
    // under it, just before the commit.
    let id = inner.new_sst_id();
    let path = inner.local_sst_path(&id);
    let (block, bloom) = (
        inner.config.sst_block_bytes,
        inner.config.bloom_bits_per_key,
    );
    let (p, state) = (path.clone(), inner.current());
    let built = tokio::task::spawn_blocking(
        move || -> Result<Option<(crate::compaction::Output, Vec<Vec<u8>>)>> {
            let mut builder: Option<crate::sst::SstBuilder> = None;
            let mut keys = Vec::new();
            for (key, cached) in hot {
                if has_version(&state, &key) {
                    continue;
                }
                if builder.is_none() {
                    builder = Some(crate::sst::SstBuilder::create(&p, block, bloom)?);
                }
                if let Some(b) = builder.as_mut() {
                    for e in &cached.versions {
                        b.add(e)?;
                    }
                }
                keys.push(key);
            }
            match builder {
                Some(b) => Ok(Some((crate::compaction::finish(id, p, b)?, keys))),
                None => Ok(None),
            }
        },
    )
    .await
    .map_err(|e| Error::Internal(e.to_string()))??;
    let Some((o, keys)) = built else {
        return Ok(());
    };
    inner.in_flight.lock().insert(id);
    let bytes = o.info.size_bytes;
    let committed = async {
        inner.upload_sst(&id, &path).await?;
        let editor = inner.editor().await;
        // No NVMe→S3 commit since the records were cached, and still no version of any of
        // their keys above S3 (a write may have arrived and been flushed meanwhile): else
        // the promotion is dropped whole.
        let state = editor.current();
        let stale = inner.promotion.lock().epoch != epoch
            || tokio::task::spawn_blocking(move || keys.iter().any(|k| has_version(&state, k)))
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
        if stale {
            return Ok(false);
        }
        editor
            .commit(Edit::Promote {
                sst: Arc::new(SstHandle::new(o.info, o.reader, o.path)),
            })
            .await?;
        Ok(true)
    }
    .await;
    inner.in_flight.lock().remove(&id);
    match committed {
        Ok(true) => {}
        Ok(false) => {
            inner.stats.record_promotion_abort();
            let _ = std::fs::remove_file(&path);
            return Ok(());
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    }
    inner
        .l0_grown_ms
        .store(inner.clock.now_ms(), Ordering::Release);
    inner.stats.record_promoted(true, bytes);
    // A read-only workload flushes no memtable: L0 grows by promotions alone, and they
    // must start compactions as flushes do.
    inner.compaction_wanted.notify_one();
    tracing::debug!(shard = %inner.name, bytes, "promoted hot records to L0");
    Ok(())
}

/// Whether a key has any version in the memtables or NVMe levels of `state`.
fn has_version(state: &ShardState, key: &[u8]) -> bool {
    state.memtables().any(|m| !m.get(key, u64::MAX).is_empty())
        || state
            .levels
            .iter()
            .flatten()
            .any(|h| h.covers(key) && h.reader.get(key, u64::MAX).is_ok_and(|v| !v.is_empty()))
}

/// SSTs a shard's open downloads at once (a replacement node with an empty directory).
const SST_DOWNLOADS_CONCURRENT: usize = 8;
