//! The fixed-size, versioned SST footer.

use crate::error::{Error, Result};

/// "STRATSST"
pub const MAGIC: &[u8; 8] = b"STRATSST";
/// Format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Encoded size.
pub const FOOTER_BYTES: usize = 48;

/// Where the index and bloom blocks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Index block offset.
    pub index_offset: u64,
    /// Index block length.
    pub index_len: u32,
    /// Bloom block offset.
    pub bloom_offset: u64,
    /// Bloom block length.
    pub bloom_len: u32,
    /// Entries in the file.
    pub entries: u64,
}

impl Footer {
    /// Encodes to exactly [`FOOTER_BYTES`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FOOTER_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.index_offset.to_le_bytes());
        out.extend_from_slice(&self.index_len.to_le_bytes());
        out.extend_from_slice(&self.bloom_offset.to_le_bytes());
        out.extend_from_slice(&self.bloom_len.to_le_bytes());
        out.extend_from_slice(&self.entries.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), FOOTER_BYTES);
        out
    }

    /// Decodes and verifies.
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != FOOTER_BYTES {
            return Err(Error::Corrupt("sst footer has the wrong size".into()));
        }
        let crc = u32::from_le_bytes(b[44..48].try_into().map_err(|_| bad())?);
        if crc32c::crc32c(&b[..44]) != crc {
            return Err(Error::Corrupt("sst footer checksum mismatch".into()));
        }
        if &b[..8] != MAGIC {
            return Err(Error::Corrupt("not a strata sst".into()));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().map_err(|_| bad())?);
        if version != FORMAT_VERSION {
            return Err(Error::Corrupt(format!("unsupported sst format {version}")));
        }
        Ok(Self {
            index_offset: u64::from_le_bytes(b[12..20].try_into().map_err(|_| bad())?),
            index_len: u32::from_le_bytes(b[20..24].try_into().map_err(|_| bad())?),
            bloom_offset: u64::from_le_bytes(b[24..32].try_into().map_err(|_| bad())?),
            bloom_len: u32::from_le_bytes(b[32..36].try_into().map_err(|_| bad())?),
            entries: u64::from_le_bytes(b[36..44].try_into().map_err(|_| bad())?),
        })
    }
}

fn bad() -> Error {
    Error::Corrupt("sst footer".into())
}

/// Appends a crc32c of `block` to it.
pub fn seal(mut block: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&block);
    block.extend_from_slice(&crc.to_le_bytes());
    block
}

/// Verifies and strips the trailing crc32c of a block.
pub fn unseal(block: &[u8]) -> Result<&[u8]> {
    if block.len() < 4 {
        return Err(Error::Corrupt("sst block too short".into()));
    }
    let (body, crc) = block.split_at(block.len() - 4);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| bad())?);
    if crc32c::crc32c(body) != crc {
        return Err(Error::Corrupt("sst block checksum mismatch".into()));
    }
    Ok(body)
}
