//! Background CPU work (the merges of NVMe compactions and cross-tier jobs) on threads of
//! lower scheduling priority.
//!
//! A merge is long and CPU-bound. On the blocking pool it ran at the priority of the
//! threads that serve requests and commit the WAL, and on a small machine the scheduler
//! shared the cores evenly between them: a write waited for a merge's time slice. Here each
//! merge gets a thread of its own (a merge takes seconds, a thread microseconds to start)
//! whose `nice` value is raised by [`NICE`] (on Linux a thread's own priority), as RocksDB
//! lowers its compaction pool's: request threads run first whenever both are runnable, and
//! merges take the rest of the machine, which is all of it when requests are idle. Where
//! the priority cannot be changed, the work runs at normal priority.
//!
//! Under a deterministic simulation (`strata_common::exec::inline`) the work runs on the
//! caller's thread instead.
//!
//! Owns nothing but those threads and the process-wide setting; calls nothing in the
//! engine but its error type.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::error::{Error, Result};

/// How much lower (in `nice` steps) a merge thread runs than the threads serving requests,
/// unless `engine.merge_nice` says otherwise.
pub const NICE_DEFAULT: i32 = 10;

static NICE: AtomicI32 = AtomicI32::new(NICE_DEFAULT);

/// Sets the process's merge priority offset (`engine.merge_nice`, clamped to 0..=19).
pub(crate) fn set_nice(steps: i32) {
    NICE.store(steps.clamp(0, 19), Ordering::Relaxed);
}

/// Runs `f` on a new thread named `name` at lower priority and waits for its result.
pub(crate) async fn run<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    if strata_common::exec::inline() {
        // A simulation: on the caller's thread, like all blocking work there.
        return strata_common::exec::blocking(f)
            .await
            .map_err(|e| Error::Internal(format!("background work {name}: {e}")));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let steps = NICE.load(Ordering::Relaxed);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_priority(steps);
            let _ = tx.send(f());
        })
        .map_err(Error::io(format!("start thread {name}")))?;
    rx.await
        .map_err(|_| Error::Internal(format!("background thread {name} panicked")))
}

/// Raises the calling thread's `nice` value by `steps` (best effort).
fn lower_priority(steps: i32) {
    if steps == 0 {
        return;
    }
    // Linux: PRIO_PROCESS with who = 0 is the calling thread alone.
    if let Ok(now) = rustix::process::getpriority_process(None) {
        let _ = rustix::process::setpriority_process(None, (now + steps).min(19));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_the_work_at_a_lower_priority_and_returns_its_result() {
        let here = rustix::process::getpriority_process(None).unwrap();
        let (there, answer) = run("strata-test-merge", || {
            (rustix::process::getpriority_process(None).unwrap(), 6 * 7)
        })
        .await
        .unwrap();
        assert_eq!(answer, 42);
        let steps = NICE.load(Ordering::Relaxed);
        assert_eq!(there, (here + steps).min(19), "the work's thread is niced");
        assert_eq!(
            rustix::process::getpriority_process(None).unwrap(),
            here,
            "the caller's thread is not"
        );
        let err = run("strata-test-panic", || -> u32 { panic!("boom") })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
    }
}
