//! A sorted run of access records on the tracker's directory, with what the tracker keeps
//! of it in memory: a Bloom filter of its hot keys and, per block, the hot bytes before it.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::record::Record;
use crate::error::{Error, Result};
use crate::sst::bloom::{Bloom, BloomBuilder};

/// Records per block of a run (the unit of the range hot-size estimate).
pub(super) const BLOCK_RECORDS: usize = 128;
/// Bloom filter bits per hot key (§3.2: 20, false positives well under 0.1%).
const BLOOM_BITS: usize = 20;

/// A sorted run on disk with its in-memory filter and block index.
pub(super) struct Run {
    pub(super) path: PathBuf,
    pub(super) records: usize,
    pub(super) physical: u64,
    /// Hot keys (at the hot threshold when the run was written).
    pub(super) bloom: Bloom,
    /// Per block: its first key and the HotRAP size of the hot records before it.
    pub(super) blocks: Vec<(Vec<u8>, u64)>,
    /// HotRAP size of the run's hot records.
    pub(super) hot: u64,
    pub(super) bloom_bytes: u64,
}

/// Writes `records` (sorted by key) as the run at `path`; `hot` says which records are hot
/// (their keys go into the run's Bloom filter and their sizes into its block index).
pub(super) fn write(
    path: PathBuf,
    records: &[Record],
    hot: impl Fn(&Record) -> bool,
) -> Result<Run> {
    let mut buf = Vec::new();
    let mut bloom = BloomBuilder::default();
    let mut blocks = Vec::new();
    let mut hot_bytes = 0u64;
    for (i, r) in records.iter().enumerate() {
        if i % BLOCK_RECORDS == 0 {
            blocks.push((r.key.clone(), hot_bytes));
        }
        if hot(r) {
            bloom.add(&r.key);
            hot_bytes += r.hot_size();
        }
        r.encode(&mut buf);
    }
    let mut f =
        std::fs::File::create(&path).map_err(Error::io(format!("create {}", path.display())))?;
    f.write_all(&buf)
        .map_err(Error::io(format!("write {}", path.display())))?;
    let filter = bloom.build(BLOOM_BITS);
    Ok(Run {
        path,
        records: records.len(),
        physical: buf.len() as u64,
        bloom_bytes: filter.len() as u64,
        bloom: Bloom::new(filter),
        blocks,
        hot: hot_bytes,
    })
}

/// Reads the records of the run at `path`.
pub(super) fn read(path: &Path) -> Result<Vec<Record>> {
    let buf = std::fs::read(path).map_err(Error::io(format!("read {}", path.display())))?;
    let mut at = 0;
    let mut out = Vec::new();
    while at < buf.len() {
        out.push(Record::decode(&buf, &mut at)?);
    }
    Ok(out)
}
