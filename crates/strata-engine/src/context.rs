//! What the shards of one process share: the block and metadata caches of the columnar
//! files, the hotness tracker, the scan overlays, the bucket layout, and the notice that
//! wakes the process's job workers. Built once by the `Db`, cloned into every shard and view.

use std::sync::Arc;

/// The context the shards of one process share.
#[derive(Debug, Clone)]
pub struct ProcessContext {
    /// The hotness tracker of point reads, when enabled (process-wide, like the cache).
    pub hotness: Option<Arc<crate::hotness::HotnessTracker>>,
    /// The caches reads go through.
    pub reads: crate::read::ReadContext,
    /// Bucket layout (for the job directory).
    pub layout: strata_manifest::Layout,
    /// Notified when a shard of this process publishes a job: wakes its idle workers.
    pub jobs_published: Arc<tokio::sync::Notify>,
    /// The bucket is a local directory under the standard decorators: an SST upload names
    /// its file in place of a payload instead of reading the file back into memory.
    pub local_bucket: bool,
}
