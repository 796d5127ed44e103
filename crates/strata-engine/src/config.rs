//! Engine settings (serde; every field has a default).

use serde::{Deserialize, Serialize};

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// After the WAL segment holding it is in the object store (default).
    #[default]
    Remote,
    /// After the WAL segment is fsynced to the local directory; uploaded with the other local
    /// writes of `EngineConfig::wal_local_upload_delay_ms` (and
    /// before an orderly close returns, waiting at most `shard::CLOSE_UPLOAD_WAIT`). If
    /// the process stops before the upload, the shard uploads the segment when it reopens
    /// on the same node (same local directory), before fencing the WAL, and replays it. A
    /// write acknowledged this way is lost if the node's disk is lost before the upload, or
    /// if another node takes the shard over first (its fence takes the segment's id).
    Local,
}

/// Options of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// When to acknowledge.
    pub durability: Durability,
}

/// Engine settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Prefix of every object in the bucket.
    pub root_prefix: String,
    /// Active memtable size that triggers a flush.
    pub memtable_bytes_max: usize,
    /// WAL segments an active memtable may span before it is flushed: what a reopening
    /// writer replays at most (one GET each), however slowly writes arrive.
    pub memtable_wal_segments_max: u64,
    /// Frozen memtables waiting for flush before writes wait (a write stall).
    pub memtables_frozen_max: usize,
    /// Largest WAL segment (a group commit stops collecting writes past it).
    pub wal_segment_bytes_max: usize,
    /// WAL segment uploads a shard's writer keeps in flight at once (1 to
    /// `wal::UPLOADS_IN_FLIGHT`, 8; `strata` refuses values outside, the embedded API clamps
    /// them). More cut a write's wait for the previous group commit's round trip, at the
    /// price of smaller segments and so more PUTs per write.
    pub wal_uploads_in_flight: usize,
    /// How long the locally durable writes (`Durability::Local`) of a shard gather into one
    /// WAL segment before it is uploaded (ms; 0: a segment per group commit, as remote
    /// writes). They are on the node's disk and acknowledged already; gathering them costs
    /// one PUT per this interval instead of one per group commit, and keeps the upload's
    /// syncs off the next local writes' disk. A remote write, a full segment or a close
    /// uploads what is gathered at once.
    pub wal_local_upload_delay_ms: u64,
    /// How many `nice` steps below the threads serving requests NVMe compaction and
    /// cross-tier job merges run (0 to 19; 0: the same priority). Process-wide: the last
    /// `Db` opened in a process sets it.
    pub merge_nice: i32,
    /// Writes queued per shard before callers wait.
    pub write_queue_max: usize,
    /// Row-oriented levels including L0 (LASER: the format follows the level). Everything
    /// below the last of them is columnar (Parquet in the table's column-group layout), so
    /// the row-oriented part of a shard stays bounded by these levels' targets, whatever
    /// the data size. Applies to shards created from now on (a shard keeps its levels).
    pub levels: usize,
    /// An active memtable that has taken no write for this long is flushed however small,
    /// so that after a burst of writes (a bulk load, say) its rows join the rest of the
    /// tree on the way to the columnar levels instead of being read row by row by every
    /// scan until more writes fill it (0: flushed only by size or WAL segment count).
    pub memtable_settle_ms: u64,
    /// L0 SST count that triggers an L0 -> L1 compaction.
    pub l0_compaction_trigger: usize,
    /// An L0 that has not grown for this long is compacted into L1 even below
    /// `l0_compaction_trigger`, so that after a burst of writes the tree settles into its
    /// columnar levels instead of keeping up to `l0_compaction_trigger - 1` row-oriented
    /// memtable flushes indefinitely (0: only the trigger compacts L0).
    pub l0_settle_ms: u64,
    /// Target size of L1; each deeper level is `level_size_multiplier` times larger. With
    /// the default two row levels, L1's target bounds the row-oriented files of a shard;
    /// beyond it, cross-tier jobs move L1 into the first columnar level.
    pub level_bytes_base: u64,
    /// Growth factor between levels.
    pub level_size_multiplier: u64,
    /// Target SST size.
    pub sst_bytes_target: u64,
    /// Target data block size.
    pub sst_block_bytes: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: usize,
    /// Largest encoded primary key.
    pub key_bytes_max: usize,
    /// Largest encoded row value.
    pub value_bytes_max: usize,
    /// Largest write batch (encoded).
    pub batch_bytes_max: usize,
    /// S3 levels of tables created without a column-group layout.
    pub s3_levels: usize,
    /// Target size of each column group's run in S3 level 1; deeper S3 levels grow by
    /// `level_size_multiplier`. A group over its target is compacted down on its own.
    pub s3_level_bytes_base: u64,
    /// Target Parquet object size (tens to hundreds of MB suit S3).
    pub parquet_file_bytes: u64,
    /// Rows per Parquet row group.
    pub parquet_row_group_rows: usize,
    /// Parquet data page size (the unit a point lookup reads per column).
    pub parquet_page_bytes: usize,
    /// Rows per Parquet data page at most (what a point lookup decodes per column).
    pub parquet_page_rows: usize,
    /// Largest Parquet dictionary page: a column whose dictionary outgrows it falls back
    /// to delta encoding. Scans decode dictionary indices much faster than plain values;
    /// a point lookup reads the dictionary page once per row group (then it is cached).
    pub parquet_dictionary_page_bytes: usize,
    /// Block size of the local cache of S3-level data.
    pub cache_block_bytes: u64,
    /// Bytes of memory for scans' merged, columnar copies of the immutable upper tiers
    /// (NVMe-tier SSTs and shallower S3 levels), one per shard and file set, reused until a
    /// flush or compaction changes the files; 0 turns them off. One overlay holds at most
    /// half of it, so the default (2 GiB) covers the row-oriented top of a shard at the
    /// default row levels (memtables, L0, a 64 MiB L1) and a first-level columnar file that
    /// overlaps the level below, decoded as Arrow.
    pub scan_overlay_bytes: u64,
    /// Under writes the memtables change between any two scans, so scans use a fold of
    /// them into the overlay through an older sequence number and resolve only newer
    /// versions row by row; once the memtables have grown by this many bytes (and by as
    /// much as was folded) since the fold, a scan folds the newer versions over it in the
    /// background, so a growing memtable is folded a logarithmic number of times. 0: scans
    /// resolve memtables that change under them row by row.
    pub scan_memtable_refold_bytes: u64,
    /// Bytes of columnar files (data blocks and file tails) cached in the local directory.
    pub cache_bytes_max: u64,
    /// Bytes of memory for decoded Parquet pages that point lookups read (per process), so
    /// a repeated lookup into a columnar level costs no read and no decode; 0 turns it off.
    pub page_cache_bytes: u64,
    /// Bytes of memory for decoded data blocks of row SSTs (L0 and the row levels) that
    /// point reads use (per process), so a repeated read of a fresh key that left the
    /// memtable costs no file read, no decode and no hop to the blocking pool; 0 turns it
    /// off.
    pub row_block_cache_bytes: u64,
    /// Bytes of memory for the decoded columns of columnar files that scans read, SQL and
    /// key-value range scans alike (per process, whole row groups of one column each), so
    /// a repeated scan of the same columns costs no read and no decode, as in-memory
    /// column stores serve analytics, and a short scan a slice of them. Point lookups
    /// slice it too, and from a row group's second cold lookup on decode its
    /// high-cardinality columns (dictionary at least half the chunk) into it whole; 0
    /// turns it off.
    pub scan_cache_bytes: u64,
    /// Sorted runs (frozen memtables, L0 files, non-empty deeper NVMe levels and S3 group
    /// runs) above which writes are refused with a retryable "overloaded" error (Luo ch. 5:
    /// no throttling below the limit, no unbounded queue above it).
    pub sorted_runs_max: usize,
    /// Compaction jobs for the S3 levels.
    pub jobs: JobsConfig,
    /// Garbage collection settings.
    pub gc: GcConfig,
    /// How far back time travel (`AS OF`) reaches at most: compaction keeps every version
    /// written within this window while the history is under `history_bytes_ratio` (0
    /// keeps only what pinned snapshots need).
    pub history_retention_ms: u64,
    /// Time travel's window is also capped by size, so a table rewritten quickly does not
    /// carry many times its data in old versions through every merge: a version inside
    /// the window is kept only while the bytes written to the shard after it (its WAL
    /// bytes) stay under this fraction of the shard's stored bytes (or under
    /// `history_bytes_min`, whichever is larger). 0 turns the cap off (the whole window is
    /// kept whatever it holds).
    pub history_bytes_ratio: f64,
    /// History a shard always keeps within the window, whatever `history_bytes_ratio`
    /// allows: a small table's time travel reaches its whole window.
    pub history_bytes_min: u64,
    /// A durable snapshot pin (a reader in another process, e.g. a query) lapses this long
    /// after its last renewal; readers renew at a third of it.
    pub pin_lease_ms: u64,
    /// The catalog is cached in the process; a table created or dropped by another process
    /// is seen within this long (one HEAD request per interval, by the first lookup after
    /// it; a lookup of an unknown name checks at once).
    pub catalog_refresh_ms: u64,
    /// The hotness tracker of point reads (HotRAP's RALT).
    pub hotness: HotnessConfig,
}

/// The hotness tracker (see `strata_engine::hotness`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HotnessConfig {
    /// Track point reads: each read key enters the tracker (scores, hot set, limits).
    pub enabled: bool,
    /// The NVMe budget the tracker's tick, limits and auto-tuning scale with: the local
    /// bytes hot records may take. 0 (the default) derives it from the local directory's
    /// file system when the `Db` opens: a fifth of its size, at least 1 GiB (see
    /// [`nvme_budget_for`]).
    pub nvme_budget_bytes: u64,
    /// Auto-tune the hot-set and physical-size limits (HotRAP §3.7); off: fixed limits of
    /// 50% and 15% of the budget.
    pub autotune: bool,
    /// Keep hot records on NVMe when NVMe-to-S3 jobs move their files (HotRAP §3.5), and
    /// pick the files with the least hot data to move.
    pub retention: bool,
    /// Promote hot records read from S3 back to NVMe (HotRAP §3.3–§3.4): through a
    /// promotion cache, to L0 when it is full and into NVMe-to-S3 jobs' retained records.
    pub promotion: bool,
    /// Size of a shard's promotion cache; full, its hot records are written to L0.
    pub promotion_cache_bytes: u64,
    /// Promote and retain only what the tracker calls hot; off: every record read from S3
    /// is promoted (the paper's no-hotness-check ablation).
    pub check: bool,
}

impl Default for HotnessConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            nvme_budget_bytes: 0,
            autotune: true,
            retention: true,
            promotion: true,
            promotion_cache_bytes: 64 << 20,
            check: true,
        }
    }
}

/// Share of the local file system an NVMe budget of 0 resolves to: the rest is left to the
/// row levels, the WAL, the block cache of columnar data and whatever else shares the disk.
pub const NVME_BUDGET_DISK_SHARE: u64 = 5;

/// Smallest NVMe budget an NVMe budget of 0 resolves to.
pub const NVME_BUDGET_MIN: u64 = 1 << 30;

/// The NVMe budget of a `Db` over `local_dir`: `configured` when set, else a fifth of the
/// size of the file system holding `local_dir` (at least [`NVME_BUDGET_MIN`]).
pub fn nvme_budget_for(configured: u64, local_dir: &std::path::Path) -> std::io::Result<u64> {
    if configured > 0 {
        return Ok(configured);
    }
    let st = rustix::fs::statvfs(local_dir).map_err(std::io::Error::from)?;
    let size = st.f_blocks.saturating_mul(st.f_frsize);
    Ok((size / NVME_BUDGET_DISK_SHARE).max(NVME_BUDGET_MIN))
}

/// How S3-level compaction jobs are published and run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JobsConfig {
    /// Compaction workers run inside this process (0 = only external `strata-compactor`
    /// processes run jobs).
    pub inprocess_workers: usize,
    /// A worker's claim on a job lasts this long without a heartbeat.
    pub lease_ms: u64,
    /// How often a worker renews its lease.
    pub heartbeat_ms: u64,
    /// How often workers look for jobs and the ingest node looks for results.
    pub poll_ms: u64,
    /// An idle worker doubles its wait after every look that finds no job, up to this (one
    /// LIST of `jobs/` per period when idle); jobs published in the same process wake its
    /// workers at once.
    pub idle_poll_max_ms: u64,
    /// Jobs a shard keeps published at once (they never touch the same runs).
    pub outstanding_max: usize,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self {
            inprocess_workers: 1,
            lease_ms: 30_000,
            heartbeat_ms: 5_000,
            poll_ms: 500,
            idle_poll_max_ms: 20_000,
            outstanding_max: 4,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            root_prefix: "strata".into(),
            memtable_bytes_max: 64 << 20,
            memtable_wal_segments_max: 4096,
            memtables_frozen_max: 4,
            wal_segment_bytes_max: 8 << 20,
            // Measured (docs/BENCHMARKS.md, "WAL uploads in flight"): 2 takes nearly all of
            // the latency and throughput gain of 8 at 1.4x the PUTs per write, not 4.9x.
            wal_uploads_in_flight: 2,
            wal_local_upload_delay_ms: 50,
            merge_nice: crate::background::NICE_DEFAULT,
            write_queue_max: 4096,
            levels: 2,
            memtable_settle_ms: 10_000,
            l0_compaction_trigger: 4,
            l0_settle_ms: 10_000,
            level_bytes_base: 64 << 20,
            level_size_multiplier: 10,
            sst_bytes_target: 64 << 20,
            sst_block_bytes: 4096,
            bloom_bits_per_key: 10,
            key_bytes_max: 4096,
            value_bytes_max: 4 << 20,
            batch_bytes_max: 64 << 20,
            s3_levels: 2,
            s3_level_bytes_base: 1 << 30,
            parquet_file_bytes: 128 << 20,
            parquet_row_group_rows: 128 * 1024,
            parquet_page_bytes: 64 << 10,
            parquet_page_rows: 4096,
            parquet_dictionary_page_bytes: 1 << 20,
            cache_block_bytes: 256 << 10,
            cache_bytes_max: 4 << 30,
            page_cache_bytes: 1 << 30,
            row_block_cache_bytes: 256 << 20,
            scan_cache_bytes: 2 << 30,
            scan_overlay_bytes: 2 << 30,
            scan_memtable_refold_bytes: 4 << 20,
            sorted_runs_max: 24,
            jobs: JobsConfig::default(),
            gc: GcConfig::default(),
            history_retention_ms: 15 * 60_000,
            history_bytes_ratio: 0.5,
            history_bytes_min: 64 << 20,
            pin_lease_ms: 60_000,
            catalog_refresh_ms: 1_000,
            hotness: HotnessConfig::default(),
        }
    }
}

/// Garbage collection settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GcConfig {
    /// How often the writer runs GC for its shards (0 disables the background task).
    pub interval_ms: u64,
    /// A shard whose manifest has not changed since a pass that deleted nothing waits twice
    /// as long for its next pass, up to this (an idle shard costs a few LISTs per period);
    /// a change of the manifest brings it back to `interval_ms`.
    pub idle_interval_max_ms: u64,
    /// Objects younger than this are never deleted: a margin for readers of recent
    /// manifest versions in other processes that hold no pin, and for clock skew. Uploads
    /// not yet committed and jobs' outputs do not depend on it (the writer protects them
    /// until the state naming them is installed, and a pass lists the bucket before it
    /// reads those protections); the fault simulation runs at 0. The bucket holds about
    /// this much compaction churn beyond the live data, plus up to `interval_ms` (a
    /// sustained 40 MB/s of writes churns about 200 MB/s of row SSTs, Parquet and WAL).
    pub min_age_ms: u64,
    /// Newest manifest versions always retained.
    pub manifest_versions_retained: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval_ms: 15_000,
            idle_interval_max_ms: 3_600_000,
            min_age_ms: 30_000,
            manifest_versions_retained: 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_nvme_budget_is_a_fifth_of_the_local_file_system() {
        let dir = std::env::temp_dir();
        assert_eq!(nvme_budget_for(12345, &dir).unwrap(), 12345);
        let st = rustix::fs::statvfs(&dir).unwrap();
        let fs = st.f_blocks * st.f_frsize;
        let derived = nvme_budget_for(0, &dir).unwrap();
        assert_eq!(derived, (fs / NVME_BUDGET_DISK_SHARE).max(NVME_BUDGET_MIN));
        assert!(derived >= NVME_BUDGET_MIN);
        assert!(nvme_budget_for(0, &dir.join("no-such-dir-of-strata")).is_err());
        assert_eq!(EngineConfig::default().hotness.nvme_budget_bytes, 0);
    }
}
