//! The columnar levels: column-group Parquet files (LASER §4), their reader (through the
//! table store's block cache, [`crate::store::cache`]) and their writer.

pub mod format;
pub mod reader;
pub mod writer;

pub use crate::store::{BlockCache, CacheConfig};
pub use format::GroupFormat;
pub use reader::{MetaCache, ParquetSource, RunIter};
pub use writer::{FileShape, RunWriter};
