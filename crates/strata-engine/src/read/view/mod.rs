//! Consistent read-only views of shards: what a query reads (Umzi §7).
//!
//! A [`ShardView`] is one shard's memtables, NVMe-tier SSTs and S3-level Parquet runs as of
//! one manifest version, read at one sequence number. Its file set never changes while it
//! lives, so compaction and GC running underneath cannot change what it returns:
//!
//! - **In the writer's process** the view is the shard's current state (memtables included)
//!   plus an in-process snapshot pin and a read guard that keeps its manifest version's
//!   objects from GC.
//! - **In any other process** (a query service) the view is built from the bucket alone: the
//!   newest manifest version, every WAL segment after its replay point (so every write
//!   acknowledged before the view was opened is visible, and nothing newer), and the SSTs it
//!   lists (downloaded once into the local directory). A *durable pin* object under
//!   `<shard>/pins/` names the manifest version; the writer's GC keeps that version's objects
//!   until the pin lapses. The view renews the pin while it lives and deletes it when
//!   dropped.
//!
//! Time travel reads a view at an older sequence number: exact for any number at or above
//! the manifest's `compaction_floor_seq` (compaction keeps every version written within
//! `history_retention_ms`, as far back as `history_bytes_ratio` allows), refused with
//! `SnapshotTooOld` below it.

mod bucket;
mod overlays;

pub(crate) use bucket::{RemoteViews, fetch_sst};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use parking_lot::Mutex;
use strata_common::clock::ClockRef;
use strata_common::ids::parse_id;
use strata_manifest::{Manifest, SeqTime, ShardPaths, SstId, SstInfo, Versioned, VersionedStore};
use strata_objstore::StoreRef;

use crate::deep_run::DeepRun;
use crate::error::{Error, Result};
use crate::iter::{EntryIter, MergeIter, RowIter};
use crate::memtable::{Memtable, MemtableIter};
use crate::read::ReadContext;
use crate::read::remote::BucketFiles;
use crate::row::RowValues;
use crate::schema::TableSchema;
use crate::sst::{SstIter, SstReader};
use crate::state::{ShardState, SstHandle};
use crate::wal::Segment;

/// Which snapshot a read sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// Every write with at most this (shard) sequence number.
    Seq(u64),
    /// Every write acknowledged at or before this time (milliseconds since the Unix epoch),
    /// resolved through the shard's seq-time index (one-second resolution once flushed).
    TimestampMs(u64),
}

/// Counts of what a scan of a view reads and skips (for `EXPLAIN`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanSummary {
    /// Memtables merged (the WAL tail, in a query service).
    pub memtables: usize,
    /// NVMe-tier SSTs overlapping the key range.
    pub ssts_read: usize,
    /// NVMe-tier SSTs skipped by the key range.
    pub ssts_pruned: usize,
    /// Parquet files of the groups needed overlapping the key range.
    pub parquet_read: usize,
    /// Parquet files skipped: outside the key range, or of groups the projection does not
    /// need.
    pub parquet_pruned: usize,
    /// Column groups read, per S3 level.
    pub groups_read: Vec<usize>,
}

/// Something a view holds on to until dropped (pins and guards).
pub(crate) trait Hold: Send + Sync {}
impl<T: Send + Sync> Hold for T {}

/// Where a view's point reads report, when the view is of a shard this process writes
/// (the shard implements it; the view holds it weakly). Kept narrow so that reads do not
/// depend on the shard: the tier that answered, the access for the hotness tracker, and
/// the promotion cache (HotRAP §3.3).
pub(crate) trait PointReadSink: Send + Sync {
    /// The shard's name, for logs.
    fn name(&self) -> &str;
    /// Counts a point read answered by `source`.
    fn record_point_read(&self, source: crate::metrics::ReadSource);
    /// Records an access to `key` (newest version `value_len` bytes); returns the tracker
    /// when its buffer is full and must be flushed (blocking work: the caller's to place).
    fn note_access(
        &self,
        key: &[u8],
        value_len: u32,
    ) -> Option<Arc<crate::hotness::HotnessTracker>>;
    /// Whether point reads at the latest sequence number go through the promotion cache.
    fn promotes(&self) -> bool;
    /// The versions of `key` the promotion cache holds for a read at `seq`.
    fn promoted(&self, key: &[u8], seq: u64) -> Option<Vec<crate::entry::Entry>>;
    /// Offers `versions` of `key`, read from the columnar levels at `seq` under promotion
    /// epoch `epoch`, to the promotion cache; a full cache starts promotion on `runtime`.
    fn offer_promotion(
        self: Arc<Self>,
        key: &[u8],
        versions: Vec<crate::entry::Entry>,
        seq: u64,
        epoch: u64,
        runtime: &tokio::runtime::Handle,
    );
}

/// A consistent read-only view of one shard.
pub struct ShardView {
    pub(crate) table: Arc<TableSchema>,
    pub(crate) state: Arc<ShardState>,
    /// The newest sequence number visible.
    pub(crate) latest_seq: u64,
    /// The sequence number reads use (`seq`, or older for time travel).
    pub(crate) read_seq: u64,
    pub(crate) store: StoreRef,
    pub(crate) paths: ShardPaths,
    pub(crate) reads: ReadContext,
    pub(crate) seq_times: Vec<SeqTime>,
    /// Shared with background work reading the view's files (an overlay build).
    holds: Arc<Vec<Box<dyn Hold>>>,
    /// The shard point reads through the view report to (None: a view of a shard this
    /// process does not write, read from the bucket), and its promotion epoch taken before
    /// the view's state. A point read reports as `Shard::get` does: the tier that answered
    /// (`strata_point_reads_total`), the access (the hotness tracker, which HotRAP's
    /// retention reads) and, at the latest sequence number, the promotion cache (HotRAP
    /// §3.3). SQL over a single key is such a read. Weak: a view does not keep a closed
    /// shard alive.
    shard: Option<(Weak<dyn PointReadSink>, u64)>,
}

impl std::fmt::Debug for ShardView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ShardView({}, manifest v{}, seq {})",
            self.paths.dir(),
            self.state.manifest.version,
            self.read_seq
        )
    }
}

impl ShardView {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        table: Arc<TableSchema>,
        state: Arc<ShardState>,
        seq: u64,
        store: StoreRef,
        paths: ShardPaths,
        reads: ReadContext,
        seq_times: Vec<SeqTime>,
        holds: Vec<Box<dyn Hold>>,
    ) -> Self {
        Self {
            table,
            state,
            latest_seq: seq,
            read_seq: seq,
            store,
            paths,
            reads,
            seq_times,
            holds: Arc::new(holds),
            shard: None,
        }
    }

    /// The view, reporting its point reads to `shard` (promotion epoch `promotion_epoch`).
    pub(crate) fn reporting_to(
        mut self,
        shard: Weak<dyn PointReadSink>,
        promotion_epoch: u64,
    ) -> Self {
        self.shard = Some((shard, promotion_epoch));
        self
    }

    /// The sequence number reads see.
    pub fn seq(&self) -> u64 {
        self.read_seq
    }

    /// The newest sequence number in the view (what a read without `AS OF` sees).
    pub fn latest_seq(&self) -> u64 {
        self.latest_seq
    }

    /// The manifest version the view reads.
    pub fn manifest_version(&self) -> u64 {
        self.state.manifest.version
    }

    /// The manifest the view reads.
    pub fn manifest(&self) -> &Arc<Versioned<Manifest>> {
        &self.state.manifest
    }

    /// The oldest sequence number the view can read exactly.
    pub fn oldest_readable_seq(&self) -> u64 {
        self.state.manifest.value.compaction_floor_seq
    }

    /// Whether two views read the very same memtable (two views of one writer's state, or
    /// of one WAL tail, which a reader folds once and shares).
    pub fn shares_memtable_with(&self, other: &ShardView) -> bool {
        Arc::ptr_eq(&self.state.active, &other.state.active)
    }

    /// The table read.
    pub fn table(&self) -> &Arc<TableSchema> {
        &self.table
    }

    /// Reads the view at `seq`, a sequence number a snapshot of the shard pins: compaction
    /// keeps the versions it sees even below [`Self::oldest_readable_seq`] (which counts
    /// only the history kept for unpinned reads).
    pub(crate) fn at_pinned(mut self, seq: u64) -> Self {
        self.read_seq = seq.min(self.latest_seq);
        self
    }

    /// Reads the view as of an older snapshot.
    pub fn at(mut self, as_of: AsOf) -> Result<Self> {
        let floor = self.oldest_readable_seq();
        let seq = match as_of {
            AsOf::Seq(s) => s,
            AsOf::TimestampMs(ms) => match self
                .seq_times
                .iter()
                .filter(|t| t.ms <= ms)
                .map(|t| t.seq)
                .max()
            {
                Some(s) => s.min(self.latest_seq),
                // Nothing acknowledged before `ms` is known: the table was empty then, unless
                // its early history has been compacted away.
                None if floor == 0 => 0,
                None => {
                    return Err(Error::SnapshotTooOld {
                        requested: 0,
                        floor,
                    });
                }
            },
        };
        if seq > self.latest_seq {
            return Err(Error::Invalid(format!(
                "sequence number {seq} is newer than the latest acknowledged write of {} ({})",
                self.table.name(),
                self.latest_seq
            )));
        }
        if seq < floor {
            return Err(Error::SnapshotTooOld {
                requested: seq,
                floor,
            });
        }
        self.read_seq = seq;
        Ok(self)
    }

    /// The row-tier sources of `[start, end)`: memtables (or WAL tail) and the SSTs
    /// overlapping it, newest first.
    fn row_sources(&self, start: &[u8], end: Option<&[u8]>) -> Vec<Box<dyn EntryIter>> {
        let mut sources: Vec<Box<dyn EntryIter>> = Vec::new();
        for mem in self.state.memtables() {
            sources.push(Box::new(MemtableIter::new(mem.clone(), start)));
        }
        for h in self.state.levels.iter().flatten() {
            let before_start = h.info.key_max.as_slice() < start;
            let after_end = end.is_some_and(|e| h.info.key_min.as_slice() >= e);
            if !before_start && !after_end {
                sources.push(Box::new(SstIter::new(h.reader.clone(), start)));
            }
        }
        sources
    }

    /// The view's memtables that hold anything.
    fn nonempty_memtables(&self) -> Vec<Arc<Memtable>> {
        self.state
            .memtables()
            .filter(|m| !m.is_empty())
            .cloned()
            .collect()
    }

    /// The memtables (or WAL tail) from `start`, newest first.
    fn memtable_sources(&self, start: &[u8]) -> Vec<Box<dyn EntryIter>> {
        self.state
            .memtables()
            .map(|mem| Box::new(MemtableIter::new(mem.clone(), start)) as Box<dyn EntryIter>)
            .collect()
    }

    fn files(&self) -> BucketFiles<'_> {
        BucketFiles {
            store: &self.store,
            paths: &self.paths,
            cache: &self.reads.cache,
            metas: &self.reads.metas,
        }
    }

    /// What a scan of `[start, end)` needing the non-key columns `needed` reads.
    pub fn summary(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        needed: Option<&[usize]>,
    ) -> ScanSummary {
        let overlaps = |lo: &[u8], hi: &[u8]| hi >= start && end.is_none_or(|e| lo < e);
        let mut s = ScanSummary {
            memtables: self.state.memtables().filter(|m| !m.is_empty()).count(),
            ..Default::default()
        };
        for h in self.state.levels.iter().flatten() {
            if overlaps(&h.info.key_min, &h.info.key_max) {
                s.ssts_read += 1;
            } else {
                s.ssts_pruned += 1;
            }
        }
        for (li, level) in self.state.manifest.value.s3_levels.iter().enumerate() {
            let wanted = crate::read::remote::groups_needed(&self.table, li, needed);
            s.groups_read.push(wanted.len());
            for (g, run) in level.groups.iter().enumerate() {
                for f in &run.files {
                    if wanted.contains(&g) && overlaps(&f.key_min, &f.key_max) {
                        s.parquet_read += 1;
                    } else {
                        s.parquet_pruned += 1;
                    }
                }
            }
        }
        s
    }

    /// Live rows of `[start, end)` in key order at the view's sequence number, reading only
    /// the S3 groups holding the non-key columns `needed` (indices into the table's value
    /// columns; None = all). Blocking: call it on a blocking thread.
    pub fn rows(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        needed: Option<&[usize]>,
        handle: &tokio::runtime::Handle,
    ) -> ViewRows {
        let sources = self.row_sources(start, end);
        let mut merged = MergeIter::with_parts(sources, self.table.codec.clone());
        let files = self.files();
        merged.add_sources(crate::read::remote::run_iters(
            &self.table,
            &files,
            &self.state.manifest.value,
            0..usize::MAX,
            &std::collections::HashSet::new(),
            start,
            end,
            needed,
            false,
            handle,
        ));
        ViewRows {
            rows: RowIter::new(
                Box::new(merged),
                &self.table.codec,
                self.read_seq,
                end.map(|e| e.to_vec()),
            ),
        }
    }
    /// Keys a scan can be split at into parts of similar size: the first key of every row
    /// group of each S3 level's first group (Parquet metadata, one cached read per file)
    /// and of every SST below L0. Unordered, possibly repeated.
    pub async fn split_keys(&self) -> Result<Vec<Vec<u8>>> {
        let files = self.files();
        let mut out = Vec::new();
        for level in &self.state.manifest.value.s3_levels {
            if let Some(run) = level.groups.first() {
                for f in &run.files {
                    out.extend(files.parquet_source(f).row_group_starts().await?);
                }
            }
        }
        for level in self.state.levels.iter().skip(1) {
            out.extend(level.iter().map(|h| h.info.key_min.clone()));
        }
        Ok(out)
    }

    /// Live rows of `[start, end)` in key order at the view's sequence number, as Arrow
    /// batches of the table's read schema projected to `projection` (indices into the
    /// table's columns), at most `batch_rows` rows each. The deepest S3 level is read
    /// column-wise and passed through where nothing above it overrides a row (see
    /// [`crate::read::scan`]). Blocking: call it on a blocking thread.
    pub fn batches(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        projection: &[usize],
        batch_rows: usize,
        handle: &tokio::runtime::Handle,
    ) -> Result<crate::read::scan::ViewBatches> {
        let table = &self.table;
        if self.single_key(start, end) {
            // A point read: the key's versions tier by tier, as `Shard::get` finds them
            // (one page per column group in a columnar level), not a scan of its row groups.
            let row = self.point(start, handle)?;
            let rows: Vec<(Bytes, RowValues)> = row
                .map(|r| (Bytes::copy_from_slice(start), r))
                .into_iter()
                .collect();
            return crate::read::scan::ViewBatches::ready(
                table.clone(),
                projection.to_vec(),
                &rows,
            );
        }
        let needed: Vec<usize> = projection
            .iter()
            .filter_map(|c| table.value_indices.iter().position(|v| v == c))
            .collect();
        let manifest = &self.state.manifest.value;
        let run = self.deep_run(&needed);
        let wide = run.as_ref().is_some_and(|r| self.wide(r, start, end));
        let key = run.as_ref().and_then(|r| self.overlay_key(r));
        let overlay = run
            .as_ref()
            .zip(key.as_ref())
            .and_then(|(r, k)| self.overlay(k.clone(), r, handle, wide, false));
        // With the memtables folded in too, nothing is left for the row path; with them
        // folded through an older sequence number, only their newer versions are.
        let combined = match (&overlay, &key, &run) {
            // Not the exact fold of `memtable_overlay`: under writes two scans that happen
            // to see the same memtables would each start a fold of all of them, to be
            // thrown away at the next write; the fold through a sequence number is reused.
            (Some(base), Some(k), Some(r)) => self
                .memtable_overlay(k, r, base, handle, false)
                .or_else(|| self.folded_memtables(k, r, base, handle, wide)),
            _ => None,
        };
        let memtables_through = combined
            .as_ref()
            .map(|o| o.memtables.as_ref().map(|f| f.seq));
        let overlay = combined.or(overlay);
        let files = self.files();
        let upper = if let Some(through) = memtables_through {
            let sources = match through {
                Some(seq) => self
                    .state
                    .memtables()
                    .map(|m| {
                        Box::new(crate::memtable::MemtableIter::newer_than(
                            m.clone(),
                            start,
                            end,
                            seq,
                        )) as Box<dyn EntryIter>
                    })
                    .collect(),
                None => Vec::new(),
            };
            MergeIter::with_parts(sources, table.codec.clone())
        } else if overlay.is_some() {
            MergeIter::with_parts(self.memtable_sources(start), table.codec.clone())
        } else {
            let mut upper =
                MergeIter::with_parts(self.row_sources(start, end), table.codec.clone());
            let none = std::collections::HashSet::new();
            upper.add_sources(crate::read::remote::run_iters(
                table,
                &files,
                manifest,
                0..run.as_ref().map_or(usize::MAX, |r| r.level),
                run.as_ref().map_or(&none, |r| &r.joined),
                start,
                end,
                Some(&needed),
                true,
                handle,
            ));
            upper
        };
        let deep = run.map(|run| {
            let li = run.level;
            let groups = crate::read::remote::groups_needed(table, li, Some(&needed));
            crate::read::scan::DeepSpec {
                level: li,
                by_position: overlay
                    .as_deref()
                    .and_then(|o| self.positions_hold(o, &run, &groups)),
                groups: groups
                    .into_iter()
                    .map(|g| {
                        let sources = run.groups[g]
                            .iter()
                            .map(|f| files.parquet_source(f))
                            .collect();
                        (table.groups[li][g].clone(), sources)
                    })
                    .collect(),
                handle: handle.clone(),
                start: start.to_vec(),
                end: end.map(|e| e.to_vec()),
            }
        });
        crate::read::scan::ViewBatches::new(
            table.clone(),
            projection.to_vec(),
            self.read_seq,
            batch_rows,
            start,
            end.map(|e| e.to_vec()),
            Box::new(upper),
            overlay,
            deep,
        )
    }

    /// Whether `[start, end)` holds exactly one encoded key: `end` is `start` followed by a
    /// zero byte (the next key in memcomparable order), or, for a table keyed by one
    /// `BIGINT`, the encoding of the next integer.
    fn single_key(&self, start: &[u8], end: Option<&[u8]>) -> bool {
        let Some(end) = end else {
            return false;
        };
        if end.len() == start.len() + 1 && end.starts_with(start) && end[start.len()] == 0 {
            return true;
        }
        let int = |b: &[u8]| -> Option<i64> {
            let b: [u8; 8] = b.try_into().ok()?;
            Some((u64::from_be_bytes(b) ^ 0x8000_0000_0000_0000) as i64)
        };
        self.table.key_types == [arrow::datatypes::DataType::Int64]
            && matches!((int(start), int(end)), (Some(a), Some(b)) if a.checked_add(1) == Some(b))
    }

    /// The row of the encoded key `key` at the view's sequence number: its versions from
    /// the memtables and row levels down, the columnar levels only while those leave the
    /// row undecided. Blocking: call it on a blocking thread.
    pub fn point(&self, key: &[u8], handle: &tokio::runtime::Handle) -> Result<Option<RowValues>> {
        let codec = &self.table.codec;
        let shard = self
            .shard
            .as_ref()
            .and_then(|(s, epoch)| Some((s.upgrade()?, *epoch)));
        let (mut versions, mut source) = crate::read::upper::point_versions(
            &self.state,
            key,
            self.read_seq,
            &self.reads.row_blocks,
            crate::sst::BlockReads::Any,
        )?
        .ok_or_else(|| {
            crate::error::Error::Internal("a point read that may read found no answer".into())
        })?;
        if !crate::fold::decided(codec, &mut versions)? {
            // Through the promotion cache only at the latest sequence number (not time
            // travel), as `Shard::get` without a snapshot.
            let promoting = shard
                .as_ref()
                .filter(|(s, _)| self.read_seq == self.latest_seq && s.promotes());
            let cached = promoting.and_then(|(shard, _)| shard.promoted(key, self.read_seq));
            if let Some(c) = cached {
                source = crate::metrics::ReadSource::PromotionCache;
                versions.extend(c);
            } else {
                source = crate::metrics::ReadSource::S3;
                let before = versions.len();
                crate::read::remote::point_versions(
                    &self.table,
                    &self.files(),
                    &self.state,
                    key,
                    self.read_seq,
                    &mut versions,
                    handle,
                )?;
                if let Some((shard, epoch)) = promoting
                    && versions.len() > before
                {
                    shard.clone().offer_promotion(
                        key,
                        versions[before..].to_vec(),
                        self.read_seq,
                        *epoch,
                        handle,
                    );
                }
            }
            crate::fold::coalesce(codec, &mut versions)?;
        }
        let row = crate::iter::resolve(codec, &versions)?;
        if let Some((shard, _)) = &shard {
            shard.record_point_read(source);
            let value_len = versions.first().map_or(0, |e| e.value.len()) as u32;
            if row.is_some()
                && let Some(t) = shard.note_access(key, value_len)
                && let Err(e) = t.flush_full()
            {
                // Losing an access loses warmth, never data: log and go on.
                tracing::warn!(shard = %shard.name(), "hotness tracker: {e}");
            }
        }
        Ok(row)
    }

    /// The run a scan needing the non-key columns `needed` reads column-wise (see
    /// [`DeepRun`]), when its groups are known and line up.
    fn deep_run(&self, needed: &[usize]) -> Option<DeepRun> {
        let run = DeepRun::of(&self.table, &self.state.manifest.value)?;
        // Its needed groups must hold the same versions to be read side by side; groups
        // compacted separately may not (their runs then differ in rows or sequence span).
        let groups = crate::read::remote::groups_needed(&self.table, run.level, Some(needed));
        let first = run.signature(groups[0]);
        groups
            .iter()
            .all(|g| run.signature(*g) == first)
            .then_some(run)
    }
}

/// What a group's run holds (see [`crate::deep_run::signature`]).
fn run_signature(run: &strata_manifest::GroupRun) -> crate::deep_run::Signature<'_> {
    crate::deep_run::signature(&run.files.iter().collect::<Vec<_>>())
}

/// Live rows of a view, in key order.
pub struct ViewRows {
    rows: RowIter,
}

impl ViewRows {
    /// The next live row (encoded key, values of the non-key columns).
    pub fn next_row(&mut self) -> Result<Option<(Bytes, RowValues)>> {
        self.rows.next_row()
    }
}
