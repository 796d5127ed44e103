//! The S3 levels: column-group Parquet files (LASER §4), their reader with a local block
//! cache, and their writer.

pub mod cache;
pub mod format;
pub mod reader;
pub mod writer;

pub use cache::{BlockCache, CacheConfig};
pub use format::GroupFormat;
pub use reader::{MetaCache, ParquetSource, RunIter};
pub use writer::{FileShape, RunWriter};
