//! Reads of one shard state's upper tiers: the memtables and the row levels. The versions
//! of one key (stopping at the first that decides the row); range reads go through
//! [`crate::read::view::ShardView`], and the columnar levels beneath are `remote`'s.

use std::sync::Arc;

use crate::entry::Entry;
use crate::error::Result;
use crate::metrics::ReadSource;
use crate::sst::{BlockReads, DecodedBlocks};
use crate::state::{ShardState, SstHandle};

/// The row-level SSTs of `state` whose key range covers `key`, level by level (every L0
/// file, newest first; at most one per deeper, sorted level).
fn covering<'a>(
    state: &'a ShardState,
    key: &'a [u8],
) -> impl Iterator<Item = &'a Arc<SstHandle>> + 'a {
    state
        .levels
        .iter()
        .enumerate()
        .flat_map(move |(li, level)| {
            let files: &[Arc<SstHandle>] = if li == 0 {
                level
            } else {
                let i = level.partition_point(|h| h.info.key_max.as_slice() < key);
                level.get(i..(i + 1).min(level.len())).unwrap_or(&[])
            };
            files.iter().filter(move |h| h.covers(key))
        })
}

/// All versions of `key` visible at `seq`, newest first, stopping once a source yields a
/// version that alone determines the row; and the tier that stopped the search (the NVMe
/// tier when none did: the caller decides whether S3 is needed). Row SSTs are read through
/// `blocks`, reading only what `reads` allows: the answer is `None` when a block the key
/// needs may not be read (look again where blocking is allowed).
pub(crate) fn point_versions(
    state: &ShardState,
    key: &[u8],
    seq: u64,
    blocks: &DecodedBlocks,
    reads: BlockReads,
) -> Result<Option<(Vec<Entry>, ReadSource)>> {
    let mut out: Vec<Entry> = Vec::new();
    let done = |v: &[Entry]| v.iter().any(|e| e.kind.is_full());
    for mem in state.memtables() {
        let v = mem.get(key, seq);
        let stop = done(&v);
        out.extend(v);
        if stop {
            return Ok(Some((out, ReadSource::Memtable)));
        }
    }
    for h in covering(state, key) {
        let Some(v) = h.reader.lookup(key, seq, blocks, reads)? else {
            return Ok(None);
        };
        let stop = done(&v);
        out.extend(v);
        if stop {
            return Ok(Some((out, ReadSource::Nvme)));
        }
    }
    Ok(Some((out, ReadSource::Nvme)))
}
