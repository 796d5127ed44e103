//! One shard: the unit of ownership, WAL, manifest and LSM tree.
//!
//! Opening a shard makes this process its writer: it bumps the writer epoch in the
//! manifest (CAS), fences the WAL where the previous writer would write next (so its next
//! WAL write fails; `crate::wal` has the rules), replays the WAL segments before the
//! fences, and re-checks its epoch. After that, one task group-commits writes (WAL segment
//! PUTs, several in flight, then memtable and acknowledgement in id order), one flushes frozen memtables to L0 SSTs, one compacts, one collects
//! garbage.
//!
//! The shard room: this module owns `ShardInner` (the shard's identity and its parts) and
//! the `Shard` API; only this file and `open` name `ShardInner` (`ci/modgraph.py` checks).
//! The parts every task may share:
//! - `signals`: closed, fenced, and the notices between the tasks;
//! - `files`: SST ids, local paths and uploads;
//! - `commit`: the `commit::Tree`: the readers' state, the manifest chain, the
//!   protections (files in flight, outstanding jobs, retained copies, the promotion cache,
//!   pins, versions in use) and the one commit point of the tree (every flush, compaction,
//!   promotion and job result is a `version::Edit` committed there: manifest lock, CAS,
//!   state install, protections released).
//!
//! Each task and coordinator is a context built at open from the parts it uses, never the
//! whole shard:
//! - `writer::GroupCommit`: the group-commit task (WAL segment, memtable, acknowledge,
//!   freeze);
//! - `flush::Flusher`: the flush task (frozen memtables to L0 SSTs);
//! - `compact::Compactor`: NVMe compaction on the pure picker `crate::compaction`;
//! - `offload::Offloader`: cross-tier and column-group jobs with HotRAP retention, on the
//!   pure pieces in `crate::offload`;
//! - `gc::Collector`: garbage collection passes on the rules in `crate::gc`;
//! - `promote::Promoter`: hot-record accesses, the promotion cache and promotion by flush
//!   (the reads' `PointReadSink`).
//!
//! `open` opens the shard as the writer (fencing, WAL replay, SST fetch) and starts the
//! tasks.
//!
//! They call the policies, the reads (`crate::read`, to which the shard reports through
//! `PointReadSink`), the formats and the jobs protocol; nothing below the shard calls back
//! into it (`ci/modgraph.py` checks).

mod commit;
mod compact;
mod files;
mod flush;
mod gc;
mod offload;
mod open;
mod promote;
mod signals;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use strata_common::clock::ClockRef;
use strata_manifest::{Manifest, ShardPaths, Versioned, VersionedStore};
use strata_objstore::{Created, StoreRef};
use tokio::sync::{mpsc, oneshot};

use crate::config::{Durability, EngineConfig};
use crate::error::{Error, Result};
use crate::iter::resolve;
use crate::memtable::Memtable;
use crate::metrics::ReadSource;
use crate::read::upper::point_versions;
use crate::row::RowValues;
use crate::schema::{PreparedEntry, TableSchema};
use crate::sst::BlockReads;
use crate::state::ShardState;
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

/// The shard: its identity and settings, and the parts its tasks share. Each task holds
/// only the parts it needs (its context, built at open), never the whole shard.
pub(crate) struct ShardInner {
    pub(crate) name: String,
    pub(crate) table: Arc<TableSchema>,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) epoch: u64,
    /// What the shards of this process share (caches, hotness tracker, bucket layout).
    pub(crate) process: crate::context::ProcessContext,
    pub(crate) stats: Arc<crate::metrics::ShardStats>,
    pub(crate) signals: Arc<signals::Signals>,
    pub(crate) files: Arc<files::Files>,
    /// The tree and its commit point.
    pub(crate) tree: Arc<commit::Tree>,
    /// NVMe compaction.
    pub(crate) compactor: Arc<compact::Compactor>,
    /// Cross-tier and column-group jobs.
    pub(crate) offloader: Arc<offload::Offloader>,
    /// Hot-record accesses and promotion (the reads' [`crate::read::view::PointReadSink`]).
    pub(crate) promoter: Arc<promote::Promoter>,
    /// Garbage collection.
    pub(crate) collector: Arc<gc::Collector>,
    /// Since when writes are refused as overloaded (a stall).
    pub(crate) overloaded_since: Mutex<Option<std::time::Instant>>,
}

/// A handle to an open shard.
#[derive(Clone)]
pub struct Shard {
    pub(crate) inner: Arc<ShardInner>,
    tx: mpsc::Sender<Request>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shard({}, epoch {})", self.inner.name, self.inner.epoch)
    }
}

/// A pinned point-in-time view: versions it can see are kept by compaction until dropped.
pub struct ShardSnapshot {
    tree: Arc<commit::Tree>,
    seq: u64,
}

impl std::fmt::Debug for ShardSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardSnapshot(seq {})", self.seq)
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
        self.tree.unpin(self.seq);
    }
}

impl ShardInner {
    fn check_open(&self) -> Result<()> {
        self.signals.check_open()
    }

    pub(crate) fn current(&self) -> Arc<ShardState> {
        self.tree.current()
    }
}

impl Shard {
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
        self.inner.tree.last_seq.load(Ordering::Acquire)
    }

    /// Statistics.
    pub fn stats(&self) -> crate::metrics::ShardStatsSnapshot {
        let state = self.inner.current();
        let mut s = self.inner.stats.snapshot(&state);
        s.promotion_cache_bytes = self.inner.tree.promotion.lock().bytes();
        let outstanding: Vec<u64> = self
            .inner
            .tree
            .jobs
            .lock()
            .jobs()
            .map(|o| o.spec.input_bytes)
            .collect();
        s.jobs_outstanding = outstanding.len();
        let due: u64 = self
            .inner
            .offloader
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
            let signals = &self.inner.signals;
            signals.flush_wanted.notify_one();
            signals.compaction_wanted.notify_one();
            signals.jobs_wanted.notify_one();
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
    pub async fn drain_to_bucket(&self) -> Result<()> {
        self.flush().await?;
        loop {
            self.wait_jobs().await?;
            if self.inner.compactor.compact_all_to_last().await? {
                break;
            }
        }
        self.run_jobs_forced(|spec| matches!(spec.source, crate::jobs::JobSource::CrossTier { .. }))
            .await
    }

    /// Moves one column group of S3 level `level` (0-based) down a level now (CG-local
    /// compaction), waiting until committed.
    pub async fn compact_column_group(&self, level: usize, group: usize) -> Result<()> {
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
            let offloader = &self.inner.offloader;
            let cands: Vec<_> = offloader
                .candidates(&self.inner.current(), true)
                .into_iter()
                .filter(|(s, _)| which(s))
                .collect();
            if cands.is_empty() {
                return Ok(());
            }
            offloader.publish(cands).await?;
        }
    }

    /// Waits until every published job of this shard is settled (committed or abandoned).
    pub async fn wait_jobs(&self) -> Result<()> {
        loop {
            self.inner.check_open()?;
            if self.inner.tree.jobs.lock().is_empty() {
                return Ok(());
            }
            self.inner.offloader.settle_results().await?;
            if self.inner.tree.jobs.lock().is_empty() {
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
            .tree
            .manifests()
            .list_versions()
            .await?
            .into_iter()
            .map(|(v, m)| (v, m.size, m.last_modified.timestamp_millis().max(0) as u64))
            .collect())
    }

    /// Durable snapshot pins of readers in other processes: (reader, record).
    pub async fn pins(&self) -> Result<Vec<(String, crate::store::pins::PinRecord)>> {
        crate::store::pins::list_pins(&self.inner.files.store, &self.inner.files.paths).await
    }

    /// Snapshots this process holds (pinned sequence numbers, one per snapshot).
    pub fn local_snapshots(&self) -> Vec<u64> {
        self.inner
            .tree
            .pins
            .lock()
            .iter()
            .flat_map(|(seq, n)| std::iter::repeat_n(*seq, *n))
            .collect()
    }

    /// Whether a newer writer has fenced this one: it acknowledges nothing more, and a
    /// node still holding the shard's lease reopens it (see `Db::join_cluster`).
    pub fn is_fenced(&self) -> bool {
        self.inner.signals.is_fenced()
    }

    /// Job ids this shard has published and not settled.
    pub fn outstanding_jobs(&self) -> Vec<String> {
        self.inner.tree.jobs.lock().ids()
    }

    fn closed_error(&self) -> Error {
        self.inner.signals.closed_error()
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
            let notified = self.inner.signals.flushed.notified();
            if self.inner.current().frozen.is_empty() {
                return Ok(());
            }
            self.inner.check_open()?;
            self.inner.signals.flush_wanted.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    /// Runs compactions until none is due, waiting for them.
    pub async fn compact(&self) -> Result<()> {
        self.inner.check_open()?;
        self.inner.compactor.compact_until_idle().await
    }

    /// Runs garbage collection once now.
    pub async fn gc(&self) -> Result<crate::gc::GcReport> {
        self.inner.check_open()?;
        self.inner.collector.collect().await
    }

    /// What a GC pass would delete now, deleting nothing (a dry run).
    pub async fn gc_plan(&self) -> Result<crate::gc::GcPlan> {
        self.inner.check_open()?;
        self.inner.collector.plan(false).await
    }

    /// Pins the current state: versions visible at it survive compaction until dropped.
    pub fn snapshot(&self) -> ShardSnapshot {
        let seq = self.inner.tree.pin_latest();
        ShardSnapshot {
            tree: self.inner.tree.clone(),
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
        let tree = &self.inner.tree;
        let promotion_epoch = tree.promotion.lock().epoch;
        let (state, guard) = tree.read_state();
        Ok(crate::read::view::ShardView::new(
            self.inner.table.clone(),
            state,
            snap.seq(),
            self.inner.files.store.clone(),
            self.inner.files.paths.clone(),
            self.inner.process.reads.clone(),
            tree.seq_times(),
            vec![Box::new(snap), Box::new(guard)],
        )
        .reporting_to(Arc::downgrade(&self.inner.promoter) as _, promotion_epoch))
    }

    /// Point read of an encoded key; the row's non-key values, or None.
    ///
    /// Runs on the caller's task unless a row-level SST may hold the key and the block it
    /// needs is neither among the process's decoded blocks nor in the OS page cache (key
    /// ranges and Bloom filters are in memory; a block read from the disk is a blocking
    /// `pread`, done on the blocking pool): a key answered by the memtables, by a row SST's
    /// block in memory or by the columnar levels through the decoded-page cache costs no
    /// thread hop.
    pub async fn get(
        &self,
        key: Vec<u8>,
        snapshot: Option<&ShardSnapshot>,
    ) -> Result<Option<RowValues>> {
        let seq = self.read_seq(snapshot)?;
        // The promotion epoch before the state: a cross-tier commit after the state was
        // taken makes a version read from it stale, and the cache refuses it.
        let inner = &self.inner;
        let epoch = inner.tree.promotion.lock().epoch;
        let (state, _guard) = inner.tree.read_state();
        let promoter = &inner.promoter;
        let blocks = &inner.process.reads.row_blocks;
        let found = match point_versions(&state, &key, seq, blocks, BlockReads::PageCached)? {
            Some(found) => Some(found),
            None => {
                let (st, k, b) = (state.clone(), key.clone(), blocks.clone());
                strata_common::exec::blocking(move || {
                    point_versions(&st, &k, seq, &b, BlockReads::Any)
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))??
            }
        };
        let (mut versions, mut source) = found
            .ok_or_else(|| Error::Internal("a point read that may read found no answer".into()))?;
        let codec = &inner.table.codec;
        let promote = snapshot.is_none() && promoter.promotes();
        if !crate::fold::decided(codec, &mut versions)? {
            let cached = promote.then(|| promoter.promoted(&key, seq)).flatten();
            if let Some(c) = cached {
                source = ReadSource::PromotionCache;
                versions.extend(c);
            } else {
                source = ReadSource::S3;
                let before = versions.len();
                let files = crate::read::remote::BucketFiles {
                    store: &inner.files.store,
                    paths: &inner.files.paths,
                    cache: &inner.process.reads.cache,
                    metas: &inner.process.reads.metas,
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
                    promoter.offer_promotion(
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
            && let Some(t) = promoter.note_access(&key, value_len)
        {
            // Losing an access loses warmth, never data: log and go on.
            let flushed = strata_common::exec::blocking(move || t.flush_full())
                .await
                .map_err(|e| Error::Internal(e.to_string()))
                .and_then(|r| r);
            if let Err(e) = flushed {
                tracing::warn!(shard = %inner.name, "hotness tracker: {e}");
            }
        }
        // A read answered from memory never waits; without this, a loop of them on a
        // runtime thread would starve flushes and compactions queued behind it.
        spend_budget().await;
        Ok(row)
    }

    /// Scans encoded keys in `[start, end)` in key order: at most `limit` live rows, as
    /// Arrow batches of the table's read schema projected to `projection` (indices into the
    /// table's columns).
    ///
    /// Reads through a [`crate::read::view::ShardView`] as SQL scans do: the deepest
    /// columnar level's rows come as slices of the decoded columns kept in memory
    /// (`engine.scan_cache_bytes`), with the versions above them spliced in, so a short
    /// scan there costs what one over a row SST does, not the decoding of a Parquet batch
    /// of every column. Reading stops at the batch that reaches `limit`.
    pub async fn scan(
        &self,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        projection: Vec<usize>,
        limit: usize,
        snapshot: Option<&ShardSnapshot>,
    ) -> Result<Vec<arrow::record_batch::RecordBatch>> {
        let mut view = self.view()?;
        if end.as_deref().is_some_and(|e| e <= start.as_slice()) {
            // An empty range (the scan path below takes start < end as given).
            return Ok(Vec::new());
        }
        if let Some(s) = snapshot {
            view = view.at_pinned(s.seq);
        }
        let handle = tokio::runtime::Handle::current();
        strata_common::exec::blocking(move || {
            let mut batches = view.batches(
                &start,
                end.as_deref(),
                &projection,
                limit.clamp(1, SCAN_BATCH_ROWS),
                &handle,
            )?;
            let mut out = Vec::new();
            let mut rows = 0;
            while rows < limit {
                let Some(b) = batches.next_batch()? else {
                    break;
                };
                let b = if b.num_rows() > limit - rows {
                    b.slice(0, limit - rows)
                } else {
                    b
                };
                rows += b.num_rows();
                if b.num_rows() > 0 {
                    out.push(b);
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
        self.inner.signals.cancel.cancel();
    }
}

/// Rows per batch of a key-value scan ([`Shard::scan`]) that asks for more.
const SCAN_BATCH_ROWS: usize = 8192;

/// Reads answered from memory per unit of tokio's cooperative budget.
///
/// tokio gives a task 128 units per turn and spends one per ready resource (a channel
/// message, a socket read): fractions of a microsecond each. A point read costs several
/// microseconds, so one unit each already makes a turn of over a millisecond; the task
/// still yields within a bounded time (two reads per unit: 256 reads per turn).
const READS_PER_BUDGET_UNIT: u32 = 2;

/// Spends one unit of the task's budget every [`READS_PER_BUDGET_UNIT`] reads on this
/// thread (yielding when the budget is gone), so a loop of reads answered from memory
/// cannot starve the tasks queued behind it.
async fn spend_budget() {
    thread_local! {
        static READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    let n = READS.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n
    });
    if n.is_multiple_of(READS_PER_BUDGET_UNIT) {
        tokio::task::consume_budget().await;
    }
}
