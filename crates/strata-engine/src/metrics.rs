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
    /// Write stalls (waits for flush).
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
        }
    }
}
