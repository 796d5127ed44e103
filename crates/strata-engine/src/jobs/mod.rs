//! Compaction jobs for the S3 levels, published in the bucket by a shard's writer (the only
//! manifest writer) and run by any number of stateless workers.
//!
//! Protocol (all objects under `<root>/jobs/`):
//! 1. The writer PUTs `<id>.json` (create-if-absent): the inputs (last-NVMe-level SSTs, or
//!    one column group's files of an S3 level), the overlapping files of each target group,
//!    the pinned snapshots, and the output shape.
//! 2. A worker claims the job by creating `<id>.lease`, or by replacing an expired lease
//!    with If-Match on its ETag (attempt + 1). It renews the lease the same way while it
//!    works; losing the CAS means another worker took over, and it stops.
//! 3. The worker writes its output files (names carry the job id and attempt, so attempts
//!    never collide) and then `<id>.result` (create-if-absent): exactly one attempt's
//!    output is ever handed back. A slow worker that finishes after a takeover simply loses
//!    that race; its files are unreferenced and garbage collected.
//! 4. The writer commits the result through the manifest CAS if every input is still in
//!    the manifest (else the job is abandoned) and deletes the job's objects.
//!
//! - [`crate::store::jobs`] (in the table store): the job objects (spec, lease, result), their reading and writing, the
//!   lease's claim and renewal, the result's hand-back. Calls only the bucket.
//! - [`mod@execute`]: one attempt's merge, from the inputs a spec names to the output files.
//! - [`worker`]: the worker loop: which job to claim ([`worker::claim_order`], pure), the
//!   lease kept while [`fn@execute`] runs, the hand-back.

pub mod execute;
pub mod worker;

pub use crate::store::jobs::{
    HeldLease, JobResult, JobSource, JobSpec, JobTarget, Lease, claim, hand_back, lease, list,
    publish, remove, renew, result, spec, spec_exists,
};
pub use execute::execute;
pub use worker::{Worker, WorkerConfig, WorkerStats};
