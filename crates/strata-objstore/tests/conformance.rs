//! The conformance suite against every backend. The S3 run needs LocalStack (started by
//! `ci/test.sh`); it is skipped with a notice when `STRATA_TEST_S3_ENDPOINT` is unset, and
//! CI sets `STRATA_REQUIRE_S3=1` so a missing LocalStack fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use object_store::path::Path;
use strata_objstore::conformance::run_all;
use strata_objstore::*;

fn run_id() -> String {
    format!("conf-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

#[tokio::test]
async fn memory_backend_conforms() {
    let store = object_store::memory::InMemory::new();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn local_dir_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirStore::new(dir.path()).unwrap();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn decorated_stack_conforms_under_faults() {
    // Every decorator, with injected transient errors and lost put responses: retries must
    // hide them, and conditional writes must still have exactly one winner.
    let dir = tempfile::tempdir().unwrap();
    let mut config = ObjectStoreConfig::local(dir.path());
    config.retry.backoff_ms_initial = 1;
    config.retry.attempts_max = 20;
    config.fault = Some(FaultConfig {
        error_rate: 0.1,
        lost_response_rate: 0.1,
        seed: 7,
        ..Default::default()
    });
    let metrics = ObjectStoreMetrics::default();
    let (store, fault) = build(&config, &metrics).await.unwrap();
    // A fixed prefix (the directory is fresh): faults are drawn per object, so the run,
    // and the retries the assertions below count on, are the same every time.
    run_all(store.as_ref(), &Path::from("conf-faults")).await;
    let fault = fault.expect("fault injector configured");
    assert!(
        fault.injected() > 0,
        "the run must have seen injected faults"
    );
    assert!(
        metrics.requests("put", "basic") >= 3,
        "instrumentation counts every attempt"
    );
}

fn s3_config() -> Option<S3Config> {
    let endpoint = std::env::var("STRATA_TEST_S3_ENDPOINT").ok();
    if endpoint.is_none() {
        assert!(
            std::env::var("STRATA_REQUIRE_S3").is_err(),
            "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
        );
        eprintln!("skipping S3 conformance: STRATA_TEST_S3_ENDPOINT unset");
        return None;
    }
    Some(S3Config {
        bucket: std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into()),
        region: Some("us-east-1".into()),
        endpoint,
        request_timeout_ms: 10_000,
    })
}

#[tokio::test]
async fn s3_backend_conforms() {
    let Some(cfg) = s3_config() else { return };
    let store = s3::build(&cfg).await.unwrap();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn s3_decorated_stack_conforms() {
    let Some(cfg) = s3_config() else { return };
    let metrics = ObjectStoreMetrics::default();
    let (store, _) = build(&ObjectStoreConfig::s3(cfg), &metrics).await.unwrap();
    let store: Arc<dyn ObjectStore> = store;
    run_all(store.as_ref(), &Path::from(run_id())).await;
    assert!(metrics.requests("put", "create") >= 2);
}
