//! A worker hands its job's result back with a create-if-absent PUT. When that PUT lands but
//! its response is lost, the retry finds the result standing: it is the worker's own, and
//! the worker must not take it for another attempt's (it would delete its output files
//! while its result, naming them, stands and is committed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use strata_engine::jobs::{JobResult, hand_back};
use strata_manifest::Layout;
use strata_objstore::{FaultInjectingStore, StoreRef};

fn result(attempt: u64, worker: &str) -> JobResult {
    JobResult {
        job: "job-0000000001".into(),
        attempt,
        worker: worker.into(),
        outputs: vec![Vec::new()],
        bytes_read: 10,
        bytes_written: 20,
        took_ms: 1,
    }
}

#[tokio::test]
async fn a_result_whose_response_was_lost_is_the_workers_own() {
    let fault = Arc::new(FaultInjectingStore::new(
        common::memory_store(),
        Default::default(),
    ));
    let store: StoreRef = fault.clone();
    let layout = Layout::new("strata");
    fault.lose_next(1);
    assert!(
        hand_back(&store, &layout, &result(1, "w1")).await.unwrap(),
        "the result landed: it is this worker's, and its files are the job's"
    );
    assert_eq!(fault.injected(), 1, "the result's PUT lost its response");
    // A later attempt (another worker) finds a result it did not write: not its own.
    assert!(!hand_back(&store, &layout, &result(2, "w2")).await.unwrap());
    // The first worker handing back again (a retry of its own) still recognizes it.
    assert!(hand_back(&store, &layout, &result(1, "w1")).await.unwrap());
}
