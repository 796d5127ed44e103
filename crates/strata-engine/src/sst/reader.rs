//! Reads an SST from a local file: footer, index and bloom filter are loaded at open; data
//! blocks are read on demand (the OS page cache keeps hot blocks).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::iter::EntryIter;
use crate::sst::block::Block;
use crate::sst::bloom::Bloom;
use crate::sst::footer::{FOOTER_BYTES, Footer, unseal};
use crate::varint;

#[derive(Debug)]
struct IndexEntry {
    last_key: Vec<u8>,
    offset: u64,
    len: u32,
}

/// An open SST.
#[derive(Debug)]
pub struct SstReader {
    file: std::fs::File,
    index: Vec<IndexEntry>,
    bloom: Bloom,
    footer: Footer,
}

impl SstReader {
    /// Opens and verifies the metadata of an SST.
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).map_err(Error::io(format!("open {}", path.display())))?;
        let len = file.metadata().map_err(Error::io("stat sst"))?.len();
        if len < FOOTER_BYTES as u64 {
            return Err(Error::Corrupt(format!(
                "{} is too short for an sst",
                path.display()
            )));
        }
        let footer_raw = read_at(&file, len - FOOTER_BYTES as u64, FOOTER_BYTES)?;
        let footer = Footer::decode(&footer_raw)?;
        let index_raw = read_at(&file, footer.index_offset, footer.index_len as usize)?;
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
            let len = varint::get(&mut buf)? as u32;
            index.push(IndexEntry {
                last_key,
                offset,
                len,
            });
        }
        let bloom_raw = read_at(&file, footer.bloom_offset, footer.bloom_len as usize)?;
        let bloom = Bloom::new(unseal(&bloom_raw)?.to_vec());
        Ok(Self {
            file,
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
        let raw = Bytes::from(read_at(&self.file, e.offset, e.len as usize)?);
        Block::decode(&raw)
    }

    fn first_block_for(&self, key: &[u8]) -> usize {
        self.index.partition_point(|b| b.last_key.as_slice() < key)
    }

    /// Whether the file may hold `key` (its Bloom filter, in memory: no I/O).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.bloom.may_contain(key)
    }

    /// Versions of `key` visible at `seq`, newest first.
    pub fn get(&self, key: &[u8], seq: u64) -> Result<Vec<Entry>> {
        if !self.bloom.may_contain(key) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for bi in self.first_block_for(key)..self.index.len() {
            let block = self.block(bi)?;
            let mut past = false;
            for e in block.entries {
                match e.key.as_ref().cmp(key) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => {
                        if e.seq <= seq {
                            out.push(e);
                        }
                    }
                    std::cmp::Ordering::Greater => {
                        past = true;
                        break;
                    }
                }
            }
            if past {
                break;
            }
        }
        Ok(out)
    }
}

fn read_at(file: &std::fs::File, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)
        .map_err(Error::io("read sst"))?;
    Ok(buf)
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
