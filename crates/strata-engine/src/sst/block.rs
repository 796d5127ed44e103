//! Data blocks.
//!
//! ```text
//! entry*: shared varint | unshared varint | value_len varint | seq varint | kind u8 | key suffix | value
//! restart offsets (u32 each) | restart count u32 | crc32c u32
//! ```
//! Every `RESTART_INTERVAL`-th entry stores its whole key (shared = 0) so a reader can binary
//! search the restarts.

use bytes::Bytes;

use crate::entry::{Entry, EntryKind};
use crate::error::{Error, Result};
use crate::sst::footer::{seal, unseal};
use crate::varint;

/// Entries between restart points.
pub const RESTART_INTERVAL: usize = 16;

/// Builds one block.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    count: usize,
}

impl BlockBuilder {
    /// Adds an entry; entries must arrive in (key asc, seq desc) order.
    pub fn add(&mut self, key: &[u8], seq: u64, kind: EntryKind, value: &[u8]) {
        let shared = if self.count.is_multiple_of(RESTART_INTERVAL) {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        varint::put(&mut self.buf, shared as u64);
        varint::put(&mut self.buf, (key.len() - shared) as u64);
        varint::put(&mut self.buf, value.len() as u64);
        varint::put(&mut self.buf, seq);
        self.buf.push(kind as u8);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.count += 1;
    }

    /// Bytes so far.
    pub fn size_bytes(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 8
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Finishes the block (with checksum) and resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.last_key.clear();
        self.count = 0;
        seal(out)
    }
}

/// A decoded block: all its entries (blocks are small; decoding whole is simple and fast).
#[derive(Debug)]
pub struct Block {
    /// Entries in order.
    pub entries: Vec<Entry>,
}

impl Block {
    /// Verifies and decodes a block.
    pub fn decode(raw: &Bytes) -> Result<Self> {
        let body = unseal(raw)?;
        if body.len() < 4 {
            return Err(Error::Corrupt("block without restart count".into()));
        }
        let n = u32::from_le_bytes(
            body[body.len() - 4..]
                .try_into()
                .map_err(|_| Error::Corrupt("restart count".into()))?,
        ) as usize;
        let restarts_bytes = n
            .checked_mul(4)
            .and_then(|r| r.checked_add(4))
            .filter(|r| *r <= body.len())
            .ok_or_else(|| Error::Corrupt("bad restart array".into()))?;
        let data_len = body.len() - restarts_bytes;
        let mut buf = &body[..data_len];
        let mut entries = Vec::new();
        let mut key: Vec<u8> = Vec::new();
        while !buf.is_empty() {
            let shared = varint::get(&mut buf)? as usize;
            let unshared = varint::get(&mut buf)? as usize;
            let vlen = varint::get(&mut buf)? as usize;
            let seq = varint::get(&mut buf)?;
            let (&kind, rest) = buf
                .split_first()
                .ok_or_else(|| Error::Corrupt("truncated entry".into()))?;
            buf = rest;
            if shared > key.len() || unshared.checked_add(vlen).is_none_or(|n| buf.len() < n) {
                return Err(Error::Corrupt("bad entry lengths".into()));
            }
            key.truncate(shared);
            key.extend_from_slice(&buf[..unshared]);
            buf = &buf[unshared..];
            let offset = data_len - buf.len();
            let value = raw.slice(offset..offset + vlen);
            buf = &buf[vlen..];
            entries.push(Entry {
                key: Bytes::copy_from_slice(&key),
                seq,
                kind: EntryKind::from_u8(kind)?,
                value,
            });
        }
        Ok(Self { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_prefix_compression() {
        let mut b = BlockBuilder::default();
        let keys: Vec<Vec<u8>> = (0..40u32)
            .map(|i| format!("user{i:04}").into_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            b.add(k, 100 - i as u64, EntryKind::Put, b"val");
        }
        let raw = Bytes::from(b.finish());
        let block = Block::decode(&raw).unwrap();
        assert_eq!(block.entries.len(), 40);
        for (e, k) in block.entries.iter().zip(&keys) {
            assert_eq!(&e.key[..], &k[..]);
            assert_eq!(&e.value[..], b"val");
        }
        let mut bad = raw.to_vec();
        bad[3] ^= 0xFF;
        assert!(Block::decode(&Bytes::from(bad)).is_err());
    }

    /// Entry lengths whose sum wraps around are an error under a valid checksum, not an
    /// overflow (a panic in debug builds, a wrong bounds check in release ones).
    #[test]
    fn lengths_that_overflow_are_errors() {
        let mut body = Vec::new();
        varint::put(&mut body, 0); // shared
        varint::put(&mut body, u64::MAX); // unshared
        varint::put(&mut body, 2); // value length
        varint::put(&mut body, 1); // seq
        body.push(EntryKind::Put as u8);
        body.extend_from_slice(b"xy");
        body.extend_from_slice(&0u32.to_le_bytes()); // no restarts
        assert!(Block::decode(&Bytes::from(seal(body))).is_err());
    }
}
