//! Strata's object-store seam. Everything durable goes through [`object_store::ObjectStore`];
//! this crate builds the backend named by configuration (a local directory, memory, or S3
//! through the AWS SDK's standard configuration) and wraps it in decorators named for what
//! they add: [`RetryingStore`], [`InstrumentedStore`] and [`FaultInjectingStore`].
//!
//! Contract relied on by the engine (checked on every backend by the `conformance` suite,
//! feature `conformance`): `put` is atomic; `PutMode::Create` fails with `AlreadyExists`
//! if the object exists (If-None-Match); `PutMode::Update` fails with `Precondition`
//! unless the e-tag matches (If-Match).
//!
//! Limits: the local directory backend implements If-Match with a lock that excludes other
//! conditional writers of the same directory only (unconditional overwrites are not locked).

pub mod config;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod create;
pub mod error;
pub mod fault;
pub mod instrumented;
pub mod local;
pub mod retrying;
pub mod s3;

use std::sync::Arc;

pub use config::{BackendConfig, ObjectStoreConfig, RetryConfig, S3Config};
pub use create::{Created, create_or_match};
pub use error::{Error, Result};
pub use fault::{FaultConfig, FaultCounts, FaultInjectingStore, FaultOp};
pub use instrumented::{InstrumentedStore, ObjectStoreMetrics, RequestTotals, s3_price_per_1000};
pub use local::{BULK_SLICE_BYTES, LocalDirStore, LocalSource, bulk_turn};
pub use object_store::path::Path;
pub use object_store::{ObjectStore, ObjectStoreExt};
pub use retrying::RetryingStore;

/// A shared object store handle.
pub type StoreRef = Arc<dyn ObjectStore>;

/// Builds the configured backend wrapped in the standard decorator stack:
/// `Retrying(Instrumented(FaultInjecting?(backend)))`. Instrumentation sits under the retry
/// layer so every attempt (what the provider bills) is counted; faults sit under both so
/// retries and metrics see them. The fault injector is returned so tests can steer it.
pub async fn build(
    config: &ObjectStoreConfig,
    metrics: &ObjectStoreMetrics,
) -> Result<(StoreRef, Option<Arc<FaultInjectingStore>>)> {
    let backend: StoreRef = match &config.backend {
        BackendConfig::Local { path } => Arc::new(LocalDirStore::new(path)?),
        BackendConfig::Memory => Arc::new(object_store::memory::InMemory::new()),
        BackendConfig::S3(s3) => Arc::new(s3::build(s3).await?),
    };
    let (below_metrics, fault): (StoreRef, _) = match &config.fault {
        Some(fc) => {
            let f = Arc::new(FaultInjectingStore::new(backend, fc.clone()));
            (f.clone() as StoreRef, Some(f))
        }
        None => (backend, None),
    };
    let instrumented: StoreRef = Arc::new(InstrumentedStore::new(below_metrics, metrics.clone()));
    let retrying: StoreRef = Arc::new(RetryingStore::new(instrumented, config.retry.clone()));
    Ok((retrying, fault))
}
