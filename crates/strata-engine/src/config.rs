//! Engine settings (serde; every field has a default).

use serde::{Deserialize, Serialize};

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// After the WAL segment holding it is in the object store (default).
    #[default]
    Remote,
    /// After the WAL segment is fsynced to the local directory; uploaded right after. A
    /// write acknowledged this way is lost if the node's disk is lost before the upload.
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
    /// Frozen memtables waiting for flush before writes wait (a write stall).
    pub memtables_frozen_max: usize,
    /// Largest WAL segment (a group commit stops collecting writes past it).
    pub wal_segment_bytes_max: usize,
    /// Writes queued per shard before callers wait.
    pub write_queue_max: usize,
    /// NVMe-tier levels including L0.
    pub levels: usize,
    /// L0 SST count that triggers an L0 -> L1 compaction.
    pub l0_compaction_trigger: usize,
    /// Target size of L1; each deeper level is `level_size_multiplier` times larger.
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
    /// Garbage collection settings.
    pub gc: GcConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            root_prefix: "strata".into(),
            memtable_bytes_max: 64 << 20,
            memtables_frozen_max: 4,
            wal_segment_bytes_max: 8 << 20,
            write_queue_max: 4096,
            levels: 4,
            l0_compaction_trigger: 4,
            level_bytes_base: 256 << 20,
            level_size_multiplier: 10,
            sst_bytes_target: 64 << 20,
            sst_block_bytes: 4096,
            bloom_bits_per_key: 10,
            key_bytes_max: 4096,
            value_bytes_max: 4 << 20,
            batch_bytes_max: 64 << 20,
            gc: GcConfig::default(),
        }
    }
}

/// Garbage collection settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GcConfig {
    /// How often the writer runs GC for its shards (0 disables the background task).
    pub interval_ms: u64,
    /// Objects younger than this are never deleted (covers uploads not yet committed and
    /// readers of recent manifest versions in other processes).
    pub min_age_ms: u64,
    /// Newest manifest versions always retained.
    pub manifest_versions_retained: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval_ms: 60_000,
            min_age_ms: 3_600_000,
            manifest_versions_retained: 8,
        }
    }
}
