//! The one commit point of a shard's tree. Every change (flush, compaction, promotion,
//! a job's result with HotRAP's retained copies) is a typed [`Edit`] that a background
//! task hands here with the [`Reserved`] files it wrote; the commit point applies it in
//! this order and under the manifest lock: the manifest by CAS, then the new in-memory
//! state, then the protections released (the edit's files in flight, the job it settles,
//! the promotion cache's stale records). Nothing else commits a manifest or swaps the
//! state: the group-commit task's memtable rotations go through [`Tree::install`]
//! here too. A caller that must check the tree before deciding (a job whose inputs may
//! have moved, a promotion that may be stale) takes an [`Editor`], checks under its lock,
//! then commits through it.
//!
//! [`Tree`] is the shard's tree as the commit point owns it: the readers' state, the
//! manifest chain and its lock, and the protections a commit releases or GC and compaction
//! read: files written and not yet committed ([`InFlight`]: a task reserves its files
//! before uploading them and hands the reservation to the commit; a reservation dropped
//! without a commit releases them), outstanding jobs, retained copies, the promotion cache,
//! snapshot pins and the manifest versions reads use; and the history index of when
//! sequence numbers were acknowledged. The shard's tasks hold a `Tree`, never the shard.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use strata_common::clock::ClockRef;
use strata_manifest::{Manifest, SeqTime, SstId, Versioned, VersionedStore};

use crate::config::EngineConfig;
use crate::error::Result;
use crate::history::{HorizonInputs, merge_seq_times, push_seq_time, seq_time_quantum};
use crate::jobs::JobSource;
use crate::offload::sst_span;
use crate::shard::signals::Signals;
use crate::state::ShardState;
use crate::version::Edit;

/// The shard's tree, its commit point and the protections around it.
pub(crate) struct Tree {
    config: Arc<EngineConfig>,
    clock: ClockRef,
    signals: Arc<Signals>,
    manifests: VersionedStore<Manifest>,
    state: RwLock<Arc<ShardState>>,
    /// Highest sequence number visible to readers.
    pub(crate) last_seq: AtomicU64,
    /// Serializes manifest commits.
    manifest_lock: tokio::sync::Mutex<()>,
    /// SSTs uploaded but not yet committed: GC must not delete them.
    pub(crate) in_flight: Arc<InFlight>,
    /// Published jobs awaiting results, and the last-NVMe-level SSTs the cross-tier ones
    /// read (NVMe compaction leaves those).
    pub(crate) jobs: Mutex<crate::offload::JobBook>,
    /// Last-NVMe-level SSTs written by retention: copies of records already in S3, which a
    /// forced drain to S3 leaves where they are.
    pub(crate) retained_ssts: Mutex<HashSet<SstId>>,
    /// Records read from S3 waiting to be promoted (HotRAP §3.3–§3.4).
    pub(crate) promotion: Mutex<crate::promotion::PromotionCache>,
    /// Pinned snapshot sequence numbers and their pin counts.
    pub(crate) pins: Mutex<BTreeMap<u64, usize>>,
    /// Manifest versions in-flight reads use (GC keeps their objects).
    pub(crate) readers: Mutex<BTreeMap<u64, usize>>,
    /// When sequence numbers were acknowledged since the last manifest commit.
    time_index: Mutex<Vec<SeqTime>>,
    /// Bytes written to the shard since its creation (WAL segment bytes, continued from the
    /// manifest's last seq-time entry on open): what [`SeqTime::bytes`] samples.
    written_bytes: AtomicU64,
    /// When L0 last gained a file (clock ms): an L0 unchanged for `l0_settle_ms` settles.
    pub(crate) l0_grown_ms: AtomicU64,
}

/// Keeps a manifest version's objects from GC while a read uses them.
pub(crate) struct ReadGuard {
    tree: Arc<Tree>,
    version: u64,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        release(&self.tree.readers, self.version);
    }
}

/// One holder of `key` fewer (a snapshot pin, a read of a manifest version); the key goes
/// with its last holder.
fn release(counts: &Mutex<BTreeMap<u64, usize>>, key: u64) {
    let mut c = counts.lock();
    if let Some(n) = c.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            c.remove(&key);
        }
    }
}

/// Files uploaded (or being uploaded) and not yet committed: GC must not delete them.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashSet<SstId>>);

impl InFlight {
    /// Protects `ids` from GC until the returned reservation is committed or dropped.
    pub(crate) fn reserve(self: &Arc<Self>, ids: impl IntoIterator<Item = SstId>) -> Reserved {
        let ids: Vec<SstId> = ids.into_iter().collect();
        self.0.lock().extend(ids.iter().copied());
        Reserved {
            set: self.clone(),
            ids,
        }
    }

    /// The files in flight now.
    pub(crate) fn snapshot(&self) -> HashSet<SstId> {
        self.0.lock().clone()
    }
}

/// The files of one edit in flight: released when the commit point has committed (or
/// failed to commit) the edit, or when dropped unused.
#[must_use = "a reservation dropped at once protects nothing"]
#[derive(Debug)]
pub(crate) struct Reserved {
    set: Arc<InFlight>,
    ids: Vec<SstId>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let mut set = self.set.0.lock();
        for id in &self.ids {
            set.remove(id);
        }
    }
}

/// The manifest lock, held: no other edit commits until it drops.
pub(crate) struct Editor<'a> {
    inner: &'a Tree,
    _lock: tokio::sync::MutexGuard<'a, ()>,
}

impl Tree {
    /// The tree of a shard opened at `state`, whose writes so far total `written_bytes`.
    pub(crate) fn new(
        config: Arc<EngineConfig>,
        clock: ClockRef,
        signals: Arc<Signals>,
        manifests: VersionedStore<Manifest>,
        state: ShardState,
        last_seq: u64,
        written_bytes: u64,
    ) -> Self {
        let now = clock.now_ms();
        Self {
            config,
            clock,
            signals,
            manifests,
            state: RwLock::new(Arc::new(state)),
            last_seq: AtomicU64::new(last_seq),
            manifest_lock: tokio::sync::Mutex::new(()),
            in_flight: Default::default(),
            jobs: Default::default(),
            retained_ssts: Mutex::new(HashSet::new()),
            promotion: Mutex::new(Default::default()),
            pins: Mutex::new(BTreeMap::new()),
            readers: Mutex::new(BTreeMap::new()),
            time_index: Mutex::new(Vec::new()),
            written_bytes: AtomicU64::new(written_bytes),
            l0_grown_ms: AtomicU64::new(now),
        }
    }

    /// The manifest chain (GC lists and deletes its old versions).
    pub(crate) fn manifests(&self) -> &VersionedStore<Manifest> {
        &self.manifests
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
                tree: self.clone(),
                version: v,
            },
        )
    }

    /// Pins the newest visible sequence number until [`Tree::unpin`]: versions visible at
    /// it survive compaction. Read under the pins' lock, so a compaction that reads the
    /// pins after it sees the pin.
    pub(crate) fn pin_latest(&self) -> u64 {
        let mut pins = self.pins.lock();
        let seq = self.last_seq.load(Ordering::Acquire);
        *pins.entry(seq).or_default() += 1;
        seq
    }

    /// Drops one pin of `seq`.
    pub(crate) fn unpin(&self, seq: u64) {
        release(&self.pins, seq);
    }

    /// The pinned snapshot sequence numbers now (compaction keeps what they see).
    pub(crate) fn pinned(&self) -> Vec<u64> {
        self.pins.lock().keys().copied().collect()
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

    /// Protects `ids` from GC until the returned reservation is committed or dropped.
    pub(crate) fn reserve(&self, ids: impl IntoIterator<Item = SstId>) -> Reserved {
        self.in_flight.reserve(ids)
    }

    /// Takes the manifest lock for an edit.
    pub(crate) async fn editor(&self) -> Editor<'_> {
        Editor {
            inner: self,
            _lock: self.manifest_lock.lock().await,
        }
    }

    /// Commits `edit` on its own (see [`Editor::commit`]).
    pub(crate) async fn commit(&self, edit: Edit, files: Reserved) -> Result<()> {
        self.editor().await.commit(edit, files).await
    }

    /// Commits a manifest derived from the current one by `change`, holding the manifest
    /// lock. A lost race means a newer writer exists: the shard is fenced.
    async fn commit_manifest(
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
                Err(self.signals.deposed(newer))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Freezes the active memtable: a fresh one takes writes, the old one waits for its
    /// flush at the head of the frozen ones. The one state change the manifest does not
    /// record (the group-commit task makes it); edits of the tree go through
    /// [`Editor::commit`].
    pub(crate) fn rotate_memtable(&self) {
        self.install(|next| {
            let old =
                std::mem::replace(&mut next.active, Arc::new(crate::memtable::Memtable::new()));
            next.frozen.insert(0, old);
        });
    }

    /// Replaces the state with a copy `change` edited.
    fn install<R>(&self, change: impl FnOnce(&mut ShardState) -> R) -> R {
        let mut guard = self.state.write();
        let mut next = (**guard).clone();
        let r = change(&mut next);
        *guard = Arc::new(next);
        r
    }

    /// Settles job `id` (committed, abandoned, or never published): it leaves the
    /// outstanding jobs and its inputs are unlocked. Only under the manifest lock
    /// ([`Editor::commit`], [`Editor::abandon_job`]).
    fn settle_job(&self, id: &str) {
        self.jobs.lock().settle(id);
    }
}

impl Editor<'_> {
    /// The shard's state; no other edit changes it while the editor is held.
    pub(crate) fn current(&self) -> Arc<ShardState> {
        self.inner.current()
    }

    /// Releases job `id` without committing it (never published, its inputs changed, or
    /// its spec vanished from the bucket): it leaves the outstanding jobs and its inputs
    /// are unlocked for a later job. Under the manifest lock, like every release, so no
    /// commit sees the job half gone.
    pub(crate) fn abandon_job(&self, id: &str) {
        self.inner.settle_job(id);
    }

    /// Commits `edit`: the manifest by CAS (a lost race fences the shard), then the state
    /// with the edit applied, the files it removed marked obsolete; then, whether or not the
    /// commit succeeded, the edit's new files (`files`) leave `in_flight` (GC must not see
    /// them outside it before the state holds them); a committed job is settled. A
    /// cross-tier job moves newer versions to the bucket, so the promotion cache's records
    /// of its range are dropped before the commit and again after the install (a read that
    /// took the cache's epoch between the two and the state before the install read the
    /// range's old versions; reads take the epoch, then the state).
    pub(crate) async fn commit(&self, edit: Edit, files: Reserved) -> Result<()> {
        let inner = self.inner;
        debug_assert!(
            edit.new_ssts().iter().all(|id| files.ids.contains(id)),
            "an edit's new files are reserved before they are uploaded"
        );
        let cross_tier_span = match &edit {
            Edit::Job { spec, .. } => match &spec.source {
                JobSource::CrossTier { ssts } => Some(sst_span(ssts)),
                JobSource::Group { .. } => None,
            },
            _ => None,
        };
        if let Some((lo, hi)) = &cross_tier_span {
            inner.promotion.lock().take_range(lo, hi);
        }
        let committed = inner.commit_manifest(|m| edit.apply_to_manifest(m)).await;
        let result = committed.map(|manifest| {
            let removed = inner.install(|next| {
                let removed = edit.apply_to_state(next);
                next.manifest = manifest;
                match &edit {
                    Edit::Flush { sst: Some(_), .. } | Edit::Promote { .. } => inner
                        .l0_grown_ms
                        .store(inner.clock.now_ms(), Ordering::Release),
                    Edit::Job { retained, .. } if cross_tier_span.is_some() => {
                        let last = next.levels.len() - 1;
                        let mut kept = inner.retained_ssts.lock();
                        kept.extend(retained.iter().map(|h| h.info.id));
                        kept.retain(|id| next.levels[last].iter().any(|h| h.info.id == *id));
                    }
                    _ => {}
                }
                removed
            });
            for h in removed {
                h.mark_obsolete();
            }
        });
        drop(files);
        if result.is_ok() {
            if let Edit::Job { spec, .. } = &edit {
                inner.settle_job(&spec.id);
            }
            if let Some((lo, hi)) = &cross_tier_span {
                inner.promotion.lock().take_range(lo, hi);
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_protects_its_files_until_dropped() {
        let set = Arc::new(InFlight::default());
        let id = |n| SstId { epoch: 1, n };
        let a = set.reserve([id(1), id(2)]);
        let b = set.reserve([id(3)]);
        assert_eq!(set.snapshot(), HashSet::from([id(1), id(2), id(3)]));
        drop(a);
        assert_eq!(set.snapshot(), HashSet::from([id(3)]));
        drop(b);
        assert!(set.snapshot().is_empty());
    }
}
