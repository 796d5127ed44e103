//! Row SSTs of the NVMe tier.
//!
//! ```text
//! data block*  : entries, restart array, crc32c      (block.rs)
//! bloom block  : bloom filter over user keys, crc32c (bloom.rs)
//! index block  : per data block (last key, offset, length), crc32c
//! footer       : fixed 48 bytes, versioned, crc32c   (footer.rs)
//! ```
//! Entries are sorted by key ascending, then sequence number descending. Keys are the
//! memcomparable encoded primary keys, prefix-compressed against the previous key.

pub mod block;
pub mod bloom;
pub mod builder;
pub mod cache;
pub mod footer;
pub mod reader;

pub use builder::{SstBuilder, SstStats};
pub use cache::DecodedBlocks;
pub use reader::{BlockReads, SstIter, SstReader};
