//! Reads an SST from a local file: footer, index and bloom filter are loaded at open; data
//! blocks are read on demand (the OS page cache keeps hot blocks).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::iter::EntryIter;
use crate::sst::block::Block;
use crate::sst::bloom::Bloom;
use crate::sst::cache::{CachedBlock, DecodedBlocks};
use crate::sst::footer::{FOOTER_BYTES, Footer, unseal};
use crate::varint;

#[derive(Debug)]
struct IndexEntry {
    last_key: Vec<u8>,
    offset: u64,
    len: u32,
}

/// How far [`SstReader::lookup`] may go for a block not held among the decoded blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReads {
    /// Only blocks already held: otherwise no answer.
    Held,
    /// Also a block whose bytes the OS page cache holds: a read that cannot wait for the
    /// disk (`preadv2` with `RWF_NOWAIT`), fit for a runtime thread. A file just written
    /// (a flush, a compaction's output) is in the page cache on a node with memory to spare.
    PageCached,
    /// Any block, from the disk if need be: blocking.
    Any,
}

/// Ids of open readers, unique in the process: the decoded-block cache's key.
static NEXT_READER: AtomicU64 = AtomicU64::new(1);

/// An open SST.
#[derive(Debug)]
pub struct SstReader {
    /// Process-unique: names this open file's blocks in [`DecodedBlocks`].
    id: u64,
    /// The local file, named in errors.
    name: String,
    file: ClosedElsewhere,
    index: Vec<IndexEntry>,
    bloom: Bloom,
    footer: Footer,
}

impl SstReader {
    /// Opens and verifies the metadata of an SST. Every length and offset in it is checked
    /// against the file's size before anything is read or allocated; errors name the file.
    pub fn open(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(Error::io(format!("open {name}")))?;
        Self::open_file(file, name.clone()).map_err(|e| named(&name, e))
    }

    /// Opens an SST from a file already open (an object a local-directory bucket handed
    /// over), naming it `name` in errors.
    pub fn open_handle(file: std::fs::File, name: &str) -> Result<Self> {
        Self::open_file(file, name.to_string()).map_err(|e| named(name, e))
    }

    fn open_file(file: std::fs::File, name: String) -> Result<Self> {
        let len = file.metadata().map_err(Error::io("stat sst"))?.len();
        if len < FOOTER_BYTES as u64 {
            return Err(Error::Corrupt("too short for an sst".into()));
        }
        let data_end = len - FOOTER_BYTES as u64;
        let footer_raw = read_at(&file, &name, data_end, FOOTER_BYTES)?;
        let footer = Footer::decode(&footer_raw)?;
        let within = |offset: u64, len: u32, end: u64| {
            offset.checked_add(u64::from(len)).is_some_and(|e| e <= end)
        };
        if !within(footer.index_offset, footer.index_len, data_end)
            || !within(footer.bloom_offset, footer.bloom_len, data_end)
        {
            return Err(Error::Corrupt(
                "footer points past the end of the file".into(),
            ));
        }
        let index_raw = read_at(&file, &name, footer.index_offset, footer.index_len as usize)?;
        let mut buf = unseal(&index_raw)?;
        let n = varint::get(&mut buf)? as usize;
        // An untrusted count: an index entry takes at least one byte.
        let mut index = Vec::with_capacity(n.min(buf.len()));
        for _ in 0..n {
            let klen = varint::get(&mut buf)? as usize;
            if buf.len() < klen {
                return Err(Error::Corrupt("truncated sst index".into()));
            }
            let last_key = buf[..klen].to_vec();
            buf = &buf[klen..];
            let offset = varint::get(&mut buf)?;
            let len = u32::try_from(varint::get(&mut buf)?)
                .map_err(|_| Error::Corrupt("sst index: block length over 4 GiB".into()))?;
            // Data blocks lie before the index.
            if !within(offset, len, footer.index_offset.min(footer.bloom_offset)) {
                return Err(Error::Corrupt(
                    "sst index points past the data blocks".into(),
                ));
            }
            index.push(IndexEntry {
                last_key,
                offset,
                len,
            });
        }
        let bloom_raw = read_at(&file, &name, footer.bloom_offset, footer.bloom_len as usize)?;
        let bloom = Bloom::new(unseal(&bloom_raw)?.to_vec());
        Ok(Self {
            id: NEXT_READER.fetch_add(1, Ordering::Relaxed),
            name,
            file: ClosedElsewhere(Some(file)),
            index,
            bloom,
            footer,
        })
    }

    /// Entries in the file.
    pub fn entries(&self) -> u64 {
        self.footer.entries
    }

    fn block(&self, i: usize) -> Result<Block> {
        let e = &self.index[i];
        let raw = Bytes::from(read_at(
            self.file.get(),
            &self.name,
            e.offset,
            e.len as usize,
        )?);
        Block::decode(&raw).map_err(|err| named(&self.name, err))
    }

    /// Block `i` when the OS page cache holds all its bytes (read without waiting for the
    /// disk); `None` when it does not, or where such reads are not supported.
    fn block_if_cached(&self, i: usize) -> Result<Option<Block>> {
        let e = &self.index[i];
        let mut raw = vec![0u8; e.len as usize];
        if !read_if_cached(self.file.get(), &mut raw, e.offset) {
            return Ok(None);
        }
        Block::decode(&Bytes::from(raw))
            .map(Some)
            .map_err(|err| named(&self.name, err))
    }

    fn first_block_for(&self, key: &[u8]) -> usize {
        self.index.partition_point(|b| b.last_key.as_slice() < key)
    }

    /// Versions of `key` visible at `seq`, newest first.
    pub fn get(&self, key: &[u8], seq: u64) -> Result<Vec<Entry>> {
        if !self.bloom.may_contain(key) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for bi in self.first_block_for(key)..self.index.len() {
            if versions_in(&self.block(bi)?.entries, key, seq, &mut out) {
                break;
            }
        }
        Ok(out)
    }

    /// [`Self::get`] through `blocks`, the decoded blocks of the process: a block held
    /// there is neither read nor decoded, a block read is kept. `reads` says which blocks
    /// not held may be read: `None` when one the key needs may not (the caller then looks
    /// again where blocking is allowed).
    pub fn lookup(
        &self,
        key: &[u8],
        seq: u64,
        blocks: &DecodedBlocks,
        reads: BlockReads,
    ) -> Result<Option<Vec<Entry>>> {
        if !self.bloom.may_contain(key) {
            return Ok(Some(Vec::new()));
        }
        let mut out = Vec::new();
        for bi in self.first_block_for(key)..self.index.len() {
            let id = (self.id, bi as u32);
            let held = match blocks.get(id) {
                Some(b) => b,
                None => {
                    let block = match reads {
                        BlockReads::Held => None,
                        BlockReads::PageCached => self.block_if_cached(bi)?,
                        BlockReads::Any => Some(self.block(bi)?),
                    };
                    let Some(block) = block else {
                        return Ok(None);
                    };
                    let b = Arc::new(CachedBlock::new(block, self.index[bi].len as usize));
                    blocks.insert(id, b.clone());
                    b
                }
            };
            if versions_in(&held.block.entries, key, seq, &mut out) {
                break;
            }
        }
        Ok(Some(out))
    }
}

/// Appends the versions of `key` visible at `seq` in a block's `entries` to `out`; whether
/// the block holds a later key (the key's versions end here). Entries are in (key asc, seq
/// desc) order, so the key's versions are one run, found by binary search.
fn versions_in(entries: &[Entry], key: &[u8], seq: u64, out: &mut Vec<Entry>) -> bool {
    let from = entries.partition_point(|e| e.key.as_ref() < key);
    for e in &entries[from..] {
        if e.key.as_ref() != key {
            return true;
        }
        if e.seq <= seq {
            out.push(e.clone());
        }
    }
    false
}

/// An SST's open file, closed on the reclaimer's thread: the close of a file already
/// unlinked frees it, which is not work for whichever thread drops the last reader.
#[derive(Debug)]
struct ClosedElsewhere(Option<std::fs::File>);

impl ClosedElsewhere {
    fn get(&self) -> &std::fs::File {
        self.0
            .as_ref()
            .expect("an sst file is open until its reader is dropped")
    }
}

impl Drop for ClosedElsewhere {
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            crate::reclaim::close_later(file);
        }
    }
}

/// A corrupt-data error of the SST `name`, saying which file.
fn named(name: &str, e: Error) -> Error {
    match e {
        Error::Corrupt(m) => Error::Corrupt(format!("sst {name}: {m}")),
        e => e,
    }
}

fn read_at(file: &std::fs::File, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)
        .map_err(|source| Error::Io {
            context: format!("read sst {name}"),
            source,
        })?;
    Ok(buf)
}

/// Fills `buf` from `offset` of `file` if the OS page cache holds those bytes, without
/// waiting for the disk (`preadv2` with `RWF_NOWAIT`); false when it does not (or part of
/// them), or on any error (the blocking read that follows reports it).
#[cfg(target_os = "linux")]
fn read_if_cached(file: &std::fs::File, buf: &mut [u8], offset: u64) -> bool {
    let mut done = 0;
    while done < buf.len() {
        let read = rustix::io::preadv2(
            file,
            &mut [std::io::IoSliceMut::new(&mut buf[done..])],
            offset + done as u64,
            rustix::io::ReadWriteFlags::NOWAIT,
        );
        match read {
            Ok(n) if n > 0 => done += n,
            _ => return false,
        }
    }
    true
}

#[cfg(not(target_os = "linux"))]
fn read_if_cached(_file: &std::fs::File, _buf: &mut [u8], _offset: u64) -> bool {
    false
}

/// Iterates an SST from a start key.
pub struct SstIter {
    reader: Arc<SstReader>,
    next_block: usize,
    current: std::vec::IntoIter<Entry>,
    start: Vec<u8>,
}

impl SstIter {
    /// Iterates `reader` from the first key >= `start`.
    pub fn new(reader: Arc<SstReader>, start: &[u8]) -> Self {
        let next_block = reader.first_block_for(start);
        Self {
            reader,
            next_block,
            current: Vec::new().into_iter(),
            start: start.to_vec(),
        }
    }
}

impl EntryIter for SstIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            for e in self.current.by_ref() {
                if e.key.as_ref() >= self.start.as_slice() {
                    return Ok(Some(e));
                }
            }
            if self.next_block >= self.reader.index.len() {
                return Ok(None);
            }
            let block = self.reader.block(self.next_block)?;
            self.next_block += 1;
            self.current = block.entries.into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;
    use crate::sst::SstBuilder;

    /// Keys 0..300 (two bytes each), key k with versions at seq 10 and 20 (k % 7 == 0 also
    /// at 30 and 40), values of 100 bytes: many 1 KiB blocks, some versions runs crossing
    /// a block boundary.
    fn many_blocks(dir: &Path) -> SstReader {
        let path = dir.join("a.sst");
        let mut b = SstBuilder::create(&path, 1024, 10).unwrap();
        for k in 0..300u16 {
            let seqs: &[u64] = if k % 7 == 0 {
                &[40, 30, 20, 10]
            } else {
                &[20, 10]
            };
            for &seq in seqs {
                b.add(&Entry {
                    key: Bytes::from(k.to_be_bytes().to_vec()),
                    seq,
                    kind: EntryKind::Put,
                    value: Bytes::from(vec![(k % 251) as u8 ^ seq as u8; 100]),
                })
                .unwrap();
            }
        }
        b.finish().unwrap();
        SstReader::open(&path).unwrap()
    }

    /// Through the decoded blocks a lookup answers as `get` does, at every key and
    /// sequence number (runs of versions across blocks included); without reading it
    /// answers only once the blocks are held, and then without reading the file.
    #[test]
    fn a_lookup_through_decoded_blocks_answers_as_a_read_and_needs_no_file_once_held() {
        let dir = tempfile::tempdir().unwrap();
        let r = many_blocks(dir.path());
        assert!(r.index.len() > 50, "{} blocks", r.index.len());
        let blocks = DecodedBlocks::new(64 << 20);
        let key = |k: u16| k.to_be_bytes().to_vec();
        assert_eq!(
            r.lookup(&key(5), 100, &blocks, BlockReads::Held).unwrap(),
            None
        );
        for k in (0..300u16).chain([300, 1000]) {
            for seq in [5, 10, 15, 20, 35, 100] {
                let want = r.get(&key(k), seq).unwrap();
                assert_eq!(
                    r.lookup(&key(k), seq, &blocks, BlockReads::Any)
                        .unwrap()
                        .as_ref(),
                    Some(&want),
                    "key {k} seq {seq}"
                );
            }
        }
        let (bytes, held, _, read) = blocks.stats();
        assert_eq!(held, r.index.len());
        assert_eq!(read, r.index.len() as u64, "each block read once");
        assert!(bytes > 0 && bytes < 1 << 20, "{bytes} bytes");
        // The file's blocks are all held: answers come without reading, even with the file
        // gone from under the reader's handle (as a retired SST's is).
        std::fs::remove_file(dir.path().join("a.sst")).unwrap();
        for k in 0..300u16 {
            let got = r
                .lookup(&key(k), 25, &blocks, BlockReads::Held)
                .unwrap()
                .expect("held");
            assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![20, 10]);
            assert_eq!(got[0].value[..], vec![(k % 251) as u8 ^ 20; 100][..]);
        }
        assert_eq!(
            blocks.stats().3,
            r.index.len() as u64,
            "no block read again"
        );
    }

    /// A cache of 0 bytes keeps nothing: every lookup that may read does, and one that may
    /// not answers only for keys the Bloom filter rules out.
    #[test]
    fn without_a_cache_every_lookup_reads() {
        let dir = tempfile::tempdir().unwrap();
        let r = many_blocks(dir.path());
        let blocks = DecodedBlocks::new(0);
        let key = 7u16.to_be_bytes().to_vec();
        for _ in 0..3 {
            assert_eq!(
                r.lookup(&key, 100, &blocks, BlockReads::Any)
                    .unwrap()
                    .unwrap()
                    .len(),
                4
            );
            assert_eq!(
                r.lookup(&key, 100, &blocks, BlockReads::Held).unwrap(),
                None
            );
        }
        let (bytes, held, hits, read) = blocks.stats();
        assert_eq!((bytes, held, hits), (0, 0, 0));
        assert!(
            read >= 3 && read % 3 == 0,
            "{read} blocks read: the same each time"
        );
    }

    /// A lookup that may not wait for the disk reads a block the OS page cache holds (as it
    /// does a file just written) and answers as a blocking one would; where the page cache
    /// cannot be read without waiting, it gives no answer and reads nothing.
    #[test]
    fn a_lookup_reads_a_block_the_page_cache_holds_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let r = many_blocks(dir.path());
        let blocks = DecodedBlocks::new(64 << 20);
        let key = |k: u16| k.to_be_bytes().to_vec();
        let mut probe = [0u8; 16];
        let cached = read_if_cached(r.file.get(), &mut probe, 0);
        for k in [0u16, 7, 150, 299] {
            let want = r.get(&key(k), 35).unwrap();
            let got = r
                .lookup(&key(k), 35, &blocks, BlockReads::PageCached)
                .unwrap();
            if cached {
                assert_eq!(got.as_ref(), Some(&want), "key {k}");
            } else {
                assert_eq!(got, None, "key {k}");
            }
        }
        let (_, held, hits, read) = blocks.stats();
        if cached {
            assert!(
                held >= 4 && read >= 4 && hits == 0,
                "{held} held, {read} read"
            );
        } else {
            assert_eq!((held, read), (0, 0));
        }
        // A file just written is in the page cache: only a file system that cannot read
        // without waiting (tmpfs here: EOPNOTSUPP) may leave a lookup without an answer.
        #[cfg(target_os = "linux")]
        if !cached {
            let e = rustix::io::preadv2(
                r.file.get(),
                &mut [std::io::IoSliceMut::new(&mut probe)],
                0,
                rustix::io::ReadWriteFlags::NOWAIT,
            )
            .expect_err("the probe failed before");
            assert!(
                matches!(e, rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL),
                "a file just written is not in the page cache: {e}"
            );
        }
    }
}
