//! The per-shard manifest: what a reader at any version needs to find every byte.

use serde::{Deserialize, Serialize};

use crate::versioned::Invariants;

/// The manifest format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Names an SST for ever: the writer epoch that created it and a counter local to that
/// writer. Epochs are never reused, so two writers can never pick the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SstId {
    /// Writer epoch of the creator.
    pub epoch: u64,
    /// Counter within that epoch.
    pub n: u64,
}

impl std::fmt::Display for SstId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:010}-{:010}", self.epoch, self.n)
    }
}

impl std::str::FromStr for SstId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (e, n) = s.split_once('-').ok_or_else(|| format!("bad sst id {s}"))?;
        Ok(SstId {
            epoch: e.parse().map_err(|_| format!("bad sst id {s}"))?,
            n: n.parse().map_err(|_| format!("bad sst id {s}"))?,
        })
    }
}

/// One row SST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SstInfo {
    /// Its name.
    pub id: SstId,
    /// Smallest encoded key.
    #[serde(with = "crate::hexbytes")]
    pub key_min: Vec<u8>,
    /// Largest encoded key.
    #[serde(with = "crate::hexbytes")]
    pub key_max: Vec<u8>,
    /// Smallest sequence number of any entry.
    pub seq_min: u64,
    /// Largest sequence number of any entry.
    pub seq_max: u64,
    /// Entries (versions) stored.
    pub entries: u64,
    /// File size.
    pub size_bytes: u64,
}

/// One level. L0 lists SSTs newest first and they may overlap; deeper levels are sorted,
/// non-overlapping runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Level {
    /// The SSTs.
    pub ssts: Vec<SstInfo>,
}

impl Level {
    /// Total bytes.
    pub fn size_bytes(&self) -> u64 {
        self.ssts.iter().map(|s| s.size_bytes).sum()
    }
}

/// One Parquet file of a column group in an S3 level. Rows are sorted by (key ascending,
/// sequence descending) and carry the encoded key, the key columns, the sequence number, the
/// entry kind, a present-columns marker and the group's columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetFileInfo {
    /// Object name under the shard's `parquet/` prefix, without extension. Never reused.
    pub name: String,
    /// Smallest encoded key.
    #[serde(with = "crate::hexbytes")]
    pub key_min: Vec<u8>,
    /// Largest encoded key.
    #[serde(with = "crate::hexbytes")]
    pub key_max: Vec<u8>,
    /// Smallest sequence number.
    pub seq_min: u64,
    /// Largest sequence number.
    pub seq_max: u64,
    /// Rows (versions) stored.
    pub rows: u64,
    /// Object size.
    pub size_bytes: u64,
    /// Offset where the data pages end and the Bloom filters, page index and footer begin:
    /// one ranged read from here gets everything needed to plan a lookup.
    pub tail_offset: u64,
}

/// The sorted run of one column group in one S3 level: non-overlapping files in key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GroupRun {
    /// The files.
    pub files: Vec<ParquetFileInfo>,
}

impl GroupRun {
    /// Total bytes.
    pub fn size_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size_bytes).sum()
    }
}

/// One S3 level: a run per column group of the table's layout for that level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct S3Level {
    /// Runs, indexed like the level's column groups.
    pub groups: Vec<GroupRun>,
}

/// A shard's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of this document.
    pub format_version: u32,
    /// The epoch of the writer that owns the shard; bumping it fences older writers.
    pub writer_epoch: u64,
    /// Every write with a sequence number up to this one is in the SSTs listed here.
    pub seq_flushed: u64,
    /// WAL segments with ids up to this one are covered by the SSTs and need no replay;
    /// replay reads the segments after it (listed from `wal/`).
    pub wal_replay_after: u64,
    /// Versions of keys older than this sequence number may have been merged by compaction;
    /// reads at older snapshots need a pin.
    pub compaction_floor_seq: u64,
    /// NVMe-tier levels, `levels[0]` = L0.
    pub levels: Vec<Level>,
    /// Columnar levels in the object store below the NVMe tier, shallowest first.
    #[serde(default)]
    pub s3_levels: Vec<S3Level>,
    /// When this version was written (writer's clock).
    pub written_at_ms: u64,
    /// When sequence numbers were acknowledged (ascending, about one entry per second,
    /// pruned to the history retention): resolves `AS OF TIMESTAMP` to a sequence number.
    #[serde(default)]
    pub seq_times: Vec<SeqTime>,
}

/// A sequence number acknowledged at a time: every write up to `seq` was acknowledged at or
/// before `ms` (writer's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqTime {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// Sequence number.
    pub seq: u64,
    /// Bytes written to the shard up to `seq` (its WAL bytes, counted by its writers, each
    /// continuing from the last committed entry; 0 where not recorded): bounds time
    /// travel's history by size. Only differences between entries matter.
    #[serde(default)]
    pub bytes: u64,
}

impl Manifest {
    /// The manifest of a new, empty shard.
    pub fn empty(levels: usize) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            writer_epoch: 0,
            seq_flushed: 0,
            wal_replay_after: 0,
            compaction_floor_seq: 0,
            levels: vec![Level::default(); levels.max(2)],
            s3_levels: Vec::new(),
            written_at_ms: 0,
            seq_times: Vec::new(),
        }
    }

    /// Every SST referenced.
    pub fn ssts(&self) -> impl Iterator<Item = &SstInfo> {
        self.levels.iter().flat_map(|l| l.ssts.iter())
    }

    /// Every Parquet file referenced.
    pub fn parquet_files(&self) -> impl Iterator<Item = &ParquetFileInfo> {
        self.s3_levels
            .iter()
            .flat_map(|l| l.groups.iter().flat_map(|g| g.files.iter()))
    }
}

impl Invariants for Manifest {
    fn check(&self, prev: Option<&Self>) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "unsupported manifest format {} (this build reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        if self.levels.len() < 2 {
            return Err("a manifest needs at least L0 and L1".into());
        }
        let mut ids = std::collections::HashSet::new();
        for (li, level) in self.levels.iter().enumerate() {
            for s in &level.ssts {
                if !ids.insert(s.id) {
                    return Err(format!("sst {} listed twice", s.id));
                }
                if s.key_min > s.key_max || s.seq_min > s.seq_max {
                    return Err(format!("sst {} has inverted key or seq bounds", s.id));
                }
                if s.seq_max > self.seq_flushed {
                    return Err(format!(
                        "sst {} holds seq {} beyond seq_flushed {}",
                        s.id, s.seq_max, self.seq_flushed
                    ));
                }
            }
            if li > 0 {
                for w in level.ssts.windows(2) {
                    if w[0].key_max >= w[1].key_min {
                        return Err(format!(
                            "L{li} ssts {} and {} overlap or are out of order",
                            w[0].id, w[1].id
                        ));
                    }
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        for (li, level) in self.s3_levels.iter().enumerate() {
            for (gi, run) in level.groups.iter().enumerate() {
                for f in &run.files {
                    if !names.insert(f.name.as_str()) {
                        return Err(format!("parquet file {} listed twice", f.name));
                    }
                    if f.key_min > f.key_max || f.seq_min > f.seq_max {
                        return Err(format!(
                            "parquet file {} has inverted key or seq bounds",
                            f.name
                        ));
                    }
                    if f.seq_max > self.seq_flushed {
                        return Err(format!(
                            "parquet file {} holds seq {} beyond seq_flushed {}",
                            f.name, f.seq_max, self.seq_flushed
                        ));
                    }
                    if f.tail_offset > f.size_bytes {
                        return Err(format!("parquet file {} has its tail past its end", f.name));
                    }
                }
                for w in run.files.windows(2) {
                    if w[0].key_max >= w[1].key_min {
                        return Err(format!(
                            "S{} group {gi} files {} and {} overlap or are out of order",
                            li + 1,
                            w[0].name,
                            w[1].name
                        ));
                    }
                }
            }
        }
        if let Some(p) = prev {
            if self.writer_epoch < p.writer_epoch {
                return Err(format!(
                    "writer epoch went backwards: {} < {}",
                    self.writer_epoch, p.writer_epoch
                ));
            }
            if self.seq_flushed < p.seq_flushed {
                return Err("seq_flushed went backwards".into());
            }
            if self.wal_replay_after < p.wal_replay_after {
                return Err("wal_replay_after went backwards".into());
            }
            if self.compaction_floor_seq < p.compaction_floor_seq {
                return Err("compaction_floor_seq went backwards".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sst(n: u64, lo: &[u8], hi: &[u8]) -> SstInfo {
        SstInfo {
            id: SstId { epoch: 1, n },
            key_min: lo.to_vec(),
            key_max: hi.to_vec(),
            seq_min: 1,
            seq_max: 2,
            entries: 1,
            size_bytes: 10,
        }
    }

    #[test]
    fn overlapping_deep_level_is_rejected() {
        let mut m = Manifest::empty(3);
        m.seq_flushed = 5;
        m.levels[1].ssts = vec![sst(1, b"a", b"m"), sst(2, b"k", b"z")];
        assert!(m.check(None).unwrap_err().contains("overlap"));
        m.levels[1].ssts = vec![sst(1, b"a", b"j"), sst(2, b"k", b"z")];
        assert!(m.check(None).is_ok());
        // L0 may overlap.
        m.levels[0].ssts = vec![sst(3, b"a", b"z"), sst(4, b"b", b"c")];
        assert!(m.check(None).is_ok());
    }

    #[test]
    fn epoch_and_sequence_never_go_backwards() {
        let mut a = Manifest::empty(2);
        a.writer_epoch = 3;
        a.seq_flushed = 10;
        let mut b = a.clone();
        b.writer_epoch = 2;
        assert!(b.check(Some(&a)).unwrap_err().contains("epoch"));
        let mut c = a.clone();
        c.seq_flushed = 9;
        assert!(c.check(Some(&a)).is_err());
    }

    #[test]
    fn unflushed_sequence_in_sst_is_rejected() {
        let mut m = Manifest::empty(2);
        m.levels[0].ssts = vec![sst(1, b"a", b"b")];
        m.seq_flushed = 1;
        assert!(m.check(None).unwrap_err().contains("beyond seq_flushed"));
    }

    #[test]
    fn sst_id_round_trips() {
        let id = SstId { epoch: 12, n: 7 };
        assert_eq!(id.to_string().parse::<SstId>().unwrap(), id);
    }
}
