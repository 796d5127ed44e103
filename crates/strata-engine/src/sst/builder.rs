//! Writes an SST to a local file (through a temporary name, fsynced, then renamed).
//!
//! The file is synced as it grows, every [`SYNC_EVERY_BYTES`], not only at its end (as
//! RocksDB's `bytes_per_sync`). With tens of gigabytes of memory the kernel keeps a whole
//! SST dirty until its final `fsync`, and on ext4 (ordered data) the journal commit that
//! `fsync` causes writes out all of it while every other `fsync` on the disk, the WAL's
//! group commits among them, waits behind it: a write-latency spike per flush. Synced in
//! slices, each commit carries at most a slice, and each slice is synced during the
//! process's turn at the disk for bulk data ([`strata_objstore::bulk_turn`]), so a flush,
//! a compaction and a job's Parquet upload never queue their slices at the device
//! together ahead of a WAL segment.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::sst::block::BlockBuilder;
use crate::sst::bloom::BloomBuilder;
use crate::sst::footer::{Footer, seal};
use crate::varint;

/// Bytes written between the builder's `fdatasync`s of a growing SST.
pub const SYNC_EVERY_BYTES: u64 = strata_objstore::BULK_SLICE_BYTES as u64;

/// What an SST holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstStats {
    /// Smallest key.
    pub key_min: Vec<u8>,
    /// Largest key.
    pub key_max: Vec<u8>,
    /// Smallest sequence number.
    pub seq_min: u64,
    /// Largest sequence number.
    pub seq_max: u64,
    /// Entries.
    pub entries: u64,
    /// File size.
    pub size_bytes: u64,
}

/// Builds one SST.
pub struct SstBuilder {
    path: PathBuf,
    tmp: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    offset: u64,
    /// Bytes of the file known to be on the disk.
    synced: u64,
    block: BlockBuilder,
    block_bytes: usize,
    bits_per_key: usize,
    index: Vec<u8>,
    index_count: usize,
    bloom: BloomBuilder,
    stats: SstStats,
    last: Option<(Vec<u8>, u64)>,
}

impl SstBuilder {
    /// Starts an SST at `path`.
    pub fn create(path: &Path, block_bytes: usize, bits_per_key: usize) -> Result<Self> {
        let tmp = path.with_extension("sst.tmp");
        let f =
            std::fs::File::create(&tmp).map_err(Error::io(format!("create {}", tmp.display())))?;
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
            out: std::io::BufWriter::with_capacity(1 << 20, f),
            offset: 0,
            synced: 0,
            block: BlockBuilder::default(),
            block_bytes,
            bits_per_key,
            index: Vec::new(),
            index_count: 0,
            bloom: BloomBuilder::default(),
            stats: SstStats {
                key_min: Vec::new(),
                key_max: Vec::new(),
                seq_min: u64::MAX,
                seq_max: 0,
                entries: 0,
                size_bytes: 0,
            },
            last: None,
        })
    }

    /// Adds an entry; order must be key ascending, then sequence number descending.
    pub fn add(&mut self, e: &Entry) -> Result<()> {
        if let Some((k, s)) = &self.last {
            let ordered =
                (k.as_slice(), std::cmp::Reverse(*s)) < (&e.key[..], std::cmp::Reverse(e.seq));
            if !ordered {
                return Err(Error::Internal("sst entries out of order".into()));
            }
        }
        if self.stats.entries == 0 {
            self.stats.key_min = e.key.to_vec();
        }
        self.stats.key_max = e.key.to_vec();
        self.stats.seq_min = self.stats.seq_min.min(e.seq);
        self.stats.seq_max = self.stats.seq_max.max(e.seq);
        self.stats.entries += 1;
        self.bloom.add(&e.key);
        self.block.add(&e.key, e.seq, e.kind, &e.value);
        self.last = Some((e.key.to_vec(), e.seq));
        if self.block.size_bytes() >= self.block_bytes {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Bytes written plus the open block.
    pub fn size_bytes(&self) -> u64 {
        self.offset + self.block.size_bytes() as u64
    }

    /// Entries added.
    pub fn entries(&self) -> u64 {
        self.stats.entries
    }

    fn write(&mut self, data: &[u8]) -> Result<()> {
        self.out
            .write_all(data)
            .map_err(Error::io(format!("write {}", self.tmp.display())))?;
        self.offset += data.len() as u64;
        if self.offset - self.synced >= SYNC_EVERY_BYTES {
            let _turn = strata_objstore::bulk_turn();
            self.out
                .flush()
                .and_then(|()| self.out.get_ref().sync_data())
                .map_err(Error::io(format!("sync {}", self.tmp.display())))?;
            self.synced = self.offset;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let last_key = self.block.last_key().to_vec();
        let data = self.block.finish();
        let offset = self.offset;
        self.write(&data)?;
        varint::put(&mut self.index, last_key.len() as u64);
        self.index.extend_from_slice(&last_key);
        varint::put(&mut self.index, offset);
        varint::put(&mut self.index, data.len() as u64);
        self.index_count += 1;
        Ok(())
    }

    /// Writes bloom, index and footer, syncs and renames into place.
    pub fn finish(mut self) -> Result<SstStats> {
        if self.stats.entries == 0 {
            return Err(Error::Internal("refusing to write an empty sst".into()));
        }
        self.flush_block()?;
        let bloom = seal(self.bloom.build(self.bits_per_key));
        let bloom_offset = self.offset;
        self.write(&bloom)?;
        let mut index = Vec::with_capacity(self.index.len() + 8);
        varint::put(&mut index, self.index_count as u64);
        index.extend_from_slice(&self.index);
        let index = seal(index);
        let index_offset = self.offset;
        self.write(&index)?;
        let footer = Footer {
            index_offset,
            index_len: index.len() as u32,
            bloom_offset,
            bloom_len: bloom.len() as u32,
            entries: self.stats.entries,
        };
        self.write(&footer.encode())?;
        let turn = strata_objstore::bulk_turn();
        let f = self.out.into_inner().map_err(|e| Error::Io {
            context: "flush sst".into(),
            source: e.into_error(),
        })?;
        f.sync_all().map_err(Error::io("fsync sst"))?;
        drop(turn);
        std::fs::rename(&self.tmp, &self.path)
            .map_err(Error::io(format!("rename {}", self.path.display())))?;
        self.stats.size_bytes = self.offset;
        Ok(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;
    use bytes::Bytes;

    /// A growing SST syncs its slices during the process's bulk turn: while another file
    /// holds the turn, the builder waits at its first slice and finishes once it is free.
    #[test]
    fn a_growing_sst_syncs_its_slices_during_the_bulk_turn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sst");
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _turn = strata_objstore::bulk_turn();
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut b = SstBuilder::create(&path, 4096, 10).unwrap();
            let value = Bytes::from(vec![9u8; 1000]);
            let entries = SYNC_EVERY_BYTES as usize * 3 / 1000;
            for i in 0..entries as u64 {
                b.add(&Entry {
                    key: Bytes::from(i.to_be_bytes().to_vec()),
                    seq: 1,
                    kind: EntryKind::Put,
                    value: value.clone(),
                })
                .unwrap();
            }
            done_tx.send(()).unwrap();
            b.finish().unwrap()
        });
        assert!(
            done_rx
                .recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "the builder waits for the turn at its first slice"
        );
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        let stats = writer.join().unwrap();
        assert!(stats.size_bytes > 2 * SYNC_EVERY_BYTES);
    }
}
