//! The table store: the only part of the engine that makes object-store requests
//! (`ci/modgraph.py --check` fails on a request made anywhere else), and the caches in
//! front of them. Everything above names what it wants (a WAL segment, an SST, a column
//! group's pages, a job's lease) and comes here for the bytes.
//!
//! - [`objects`]: the requests themselves (GET, HEAD, PUT, conditional PUT, LIST, DELETE,
//!   streaming uploads): one function per kind, no policy.
//! - [`cache`]: the local block cache of Parquet tails and pages, which a point read or a
//!   scan of the columnar levels reads through.
//! - [`download`]: an SST object copied into the local directory (or opened in place on a
//!   local-directory bucket).
//! - [`jobs`]: the compaction jobs' objects (spec, lease, result) and the protocol's steps
//!   on them.
//! - [`pins`]: durable pins, which keep a manifest version's objects from GC.
//!
//! May call: the error type, and the SST format (to open a downloaded file). Retries,
//! timeouts, fault injection and request metrics are the decorators of the store itself
//! (`strata-objstore`); manifests and the catalog have their own store in
//! `strata-manifest`.

pub mod cache;
pub mod download;
pub mod jobs;
pub(crate) mod objects;
pub mod pins;

pub use cache::{BlockCache, CacheConfig};
