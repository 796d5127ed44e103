//! Per-shard counters (exported by the services as Prometheus metrics later).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::state::ShardState;

/// Live counters.
#[derive(Debug, Default)]
pub struct ShardStats {
    wal_segments: AtomicU64,
    writes_in_segments: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    compaction_us: AtomicU64,
    stalls: AtomicU64,
    stall_us_max: AtomicU64,
    stall_us_total: AtomicU64,
    s3_jobs: AtomicU64,
    s3_bytes_read: AtomicU64,
    s3_bytes_written: AtomicU64,
    overloaded: AtomicU64,
    /// Point reads by where they were answered (see [`ReadSource`]).
    point_reads: [AtomicU64; 4],
    promoted_flush_bytes: AtomicU64,
    promoted_compaction_bytes: AtomicU64,
    promotion_aborts: AtomicU64,
    /// Bytes of hot records kept on NVMe by cross-tier jobs (retention).
    retained_bytes: AtomicU64,
}

/// Where a point read was answered: the first tier that decided the row (a whole-row
/// version or a tombstone), or S3 when the NVMe tier alone could not (the key was missing
/// there or only partial versions were found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSource {
    /// The active or a frozen memtable.
    Memtable = 0,
    /// An NVMe-tier SST level.
    Nvme = 1,
    /// The S3 levels (through the local block cache).
    S3 = 2,
    /// The promotion cache (records read from S3 before, not yet promoted).
    PromotionCache = 3,
}

/// Sorted runs a read may have to merge: frozen memtables, each L0 file, each non-empty
/// deeper NVMe level and each non-empty S3 group run (Luo ch. 5's component count).
pub fn sorted_runs(state: &ShardState) -> usize {
    state.frozen.len()
        + state.levels.first().map_or(0, |l| l.len())
        + state
            .levels
            .iter()
            .skip(1)
            .filter(|l| !l.is_empty())
            .count()
        + state
            .manifest
            .value
            .s3_levels
            .iter()
            .flat_map(|l| l.groups.iter())
            .filter(|g| !g.files.is_empty())
            .count()
}

/// A copy of the counters plus the shape of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardStatsSnapshot {
    /// WAL segments written (group commits).
    pub wal_segments: u64,
    /// Writes carried by those segments.
    pub writes_in_segments: u64,
    /// Memtable flushes.
    pub flushes: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Time spent compacting, microseconds.
    pub compaction_us: u64,
    /// Write stalls: periods in which writes were refused as overloaded.
    pub stalls: u64,
    /// Longest stall, microseconds.
    pub stall_us_max: u64,
    /// Sum of stalls, microseconds.
    pub stall_us_total: u64,
    /// SSTs per level.
    pub ssts_per_level: Vec<usize>,
    /// Bytes per level.
    pub bytes_per_level: Vec<u64>,
    /// Frozen memtables awaiting flush.
    pub memtables_frozen: usize,
    /// Sorted runs now (see [`sorted_runs`]).
    pub sorted_runs: usize,
    /// Parquet files per S3 level and group.
    pub s3_files: Vec<Vec<usize>>,
    /// Bytes per S3 level and group.
    pub s3_bytes: Vec<Vec<u64>>,
    /// S3 compaction jobs committed.
    pub s3_jobs: u64,
    /// Bytes read by committed S3 jobs.
    pub s3_bytes_read: u64,
    /// Bytes written by committed S3 jobs.
    pub s3_bytes_written: u64,
    /// Writes refused as overloaded.
    pub overloaded: u64,
    /// Input bytes of S3 compaction jobs that are due or published and not yet committed.
    pub pending_compaction_bytes: u64,
    /// S3 compaction jobs published and not yet committed.
    pub jobs_outstanding: usize,
    /// Point reads answered from the memtables.
    pub point_reads_memtable: u64,
    /// Point reads answered from the NVMe-tier levels.
    pub point_reads_nvme: u64,
    /// Point reads that needed the S3 levels.
    pub point_reads_s3: u64,
    /// Bytes of hot records kept on NVMe by cross-tier jobs (retention, HotRAP §3.5).
    pub retained_bytes: u64,
    /// Point reads answered from the promotion cache.
    pub point_reads_promotion_cache: u64,
    /// Bytes promoted to L0 from the promotion cache (promotion by flush).
    pub promoted_flush_bytes: u64,
    /// Bytes promoted into NVMe-to-S3 jobs' retained records (promotion by compaction).
    pub promoted_compaction_bytes: u64,
    /// Promotion-cache inserts aborted because an NVMe-to-S3 job committed meanwhile.
    pub promotion_aborts: u64,
    /// Bytes in the promotion cache now.
    pub promotion_cache_bytes: u64,
}

impl ShardStats {
    pub(crate) fn record_wal_segment(&self, writes: usize) {
        self.wal_segments.fetch_add(1, Ordering::Relaxed);
        self.writes_in_segments
            .fetch_add(writes as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_compaction(&self, took: Duration) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.compaction_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_stall(&self, took: Duration) {
        let us = took.as_micros() as u64;
        self.stalls.fetch_add(1, Ordering::Relaxed);
        self.stall_us_total.fetch_add(us, Ordering::Relaxed);
        self.stall_us_max.fetch_max(us, Ordering::Relaxed);
    }

    pub(crate) fn record_s3_job(&self, read: u64, written: u64) {
        self.s3_jobs.fetch_add(1, Ordering::Relaxed);
        self.s3_bytes_read.fetch_add(read, Ordering::Relaxed);
        self.s3_bytes_written.fetch_add(written, Ordering::Relaxed);
    }

    pub(crate) fn record_point_read(&self, source: ReadSource) {
        self.point_reads[source as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_retained(&self, bytes: u64) {
        self.retained_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn record_promoted(&self, by_flush: bool, bytes: u64) {
        let c = if by_flush {
            &self.promoted_flush_bytes
        } else {
            &self.promoted_compaction_bytes
        };
        c.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn record_promotion_abort(&self) {
        self.promotion_aborts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_overloaded(&self) {
        self.overloaded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, state: &ShardState) -> ShardStatsSnapshot {
        ShardStatsSnapshot {
            wal_segments: self.wal_segments.load(Ordering::Relaxed),
            writes_in_segments: self.writes_in_segments.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            compactions: self.compactions.load(Ordering::Relaxed),
            compaction_us: self.compaction_us.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
            stall_us_max: self.stall_us_max.load(Ordering::Relaxed),
            stall_us_total: self.stall_us_total.load(Ordering::Relaxed),
            ssts_per_level: state.levels.iter().map(|l| l.len()).collect(),
            bytes_per_level: state
                .levels
                .iter()
                .map(|l| l.iter().map(|h| h.info.size_bytes).sum())
                .collect(),
            memtables_frozen: state.frozen.len(),
            sorted_runs: sorted_runs(state),
            s3_files: state
                .manifest
                .value
                .s3_levels
                .iter()
                .map(|l| l.groups.iter().map(|g| g.files.len()).collect())
                .collect(),
            s3_bytes: state
                .manifest
                .value
                .s3_levels
                .iter()
                .map(|l| l.groups.iter().map(|g| g.size_bytes()).collect())
                .collect(),
            s3_jobs: self.s3_jobs.load(Ordering::Relaxed),
            s3_bytes_read: self.s3_bytes_read.load(Ordering::Relaxed),
            s3_bytes_written: self.s3_bytes_written.load(Ordering::Relaxed),
            overloaded: self.overloaded.load(Ordering::Relaxed),
            pending_compaction_bytes: 0,
            jobs_outstanding: 0,
            point_reads_memtable: self.point_reads[0].load(Ordering::Relaxed),
            point_reads_nvme: self.point_reads[1].load(Ordering::Relaxed),
            point_reads_s3: self.point_reads[2].load(Ordering::Relaxed),
            retained_bytes: self.retained_bytes.load(Ordering::Relaxed),
            point_reads_promotion_cache: self.point_reads[3].load(Ordering::Relaxed),
            promoted_flush_bytes: self.promoted_flush_bytes.load(Ordering::Relaxed),
            promoted_compaction_bytes: self.promoted_compaction_bytes.load(Ordering::Relaxed),
            promotion_aborts: self.promotion_aborts.load(Ordering::Relaxed),
            promotion_cache_bytes: 0,
        }
    }
}
