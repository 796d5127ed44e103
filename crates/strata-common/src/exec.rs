//! Where blocking work runs and how long a wait inside it lasts: the one seam a
//! deterministic simulation turns.
//!
//! In a server, [`blocking`] hands a closure to tokio's blocking pool, [`wait`] drives a
//! future to completion from such a closure on the runtime's handle, and [`sleep`] is
//! tokio's. A simulation (`crates/strata-engine/tests/sim.rs`) calls [`set_inline`] once:
//! from then on the process runs blocking closures on the caller's thread, [`wait`] polls
//! its future right there, and a [`sleep`] inside such a wait returns at once (nothing
//! else of the process can run meanwhile, so waiting could only stall it). With one
//! runtime thread and tokio's paused clock, every task of the process then runs in an
//! order fixed by the program alone, which is what lets a seed replay exactly.
//!
//! Futures driven by [`wait`] in inline mode must not wait for another task of the same
//! runtime (a lock or permit it holds across an await): nothing else runs until they
//! finish.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static INLINE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Inside [`wait`] in inline mode on this thread.
    static WAITING: Cell<bool> = const { Cell::new(false) };
}

/// Runs blocking work inline from now on, for the whole process (a simulation's choice;
/// there is no way back).
pub fn set_inline() {
    INLINE.store(true, Ordering::SeqCst);
}

/// Whether blocking work runs inline (see the module documentation).
pub fn inline() -> bool {
    INLINE.load(Ordering::Relaxed)
}

/// Blocking work that panicked (its message).
#[derive(Debug)]
pub struct Panicked(pub String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "blocking task panicked: {}", self.0)
    }
}

impl std::error::Error for Panicked {}

/// Runs `f` on tokio's blocking pool (inline, on this thread, in a simulation) and
/// returns its result; a panic in `f` is returned as [`Panicked`], as tokio returns it.
pub async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Panicked> {
    if inline() {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .map_err(|p| Panicked(panic_message(&p)));
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Panicked(e.to_string()))
}

/// Starts `f` on `handle`'s blocking pool without waiting for it (inline, to completion, in
/// a simulation).
pub fn detach(handle: &tokio::runtime::Handle, f: impl FnOnce() + Send + 'static) {
    if inline() {
        f();
    } else {
        drop(handle.spawn_blocking(f));
    }
}

/// Drives `fut` to completion from blocking code (a closure given to [`blocking`], or a
/// thread of its own): on `handle` in a server, on this thread in a simulation.
pub fn wait<F: Future>(handle: &tokio::runtime::Handle, fut: F) -> F::Output {
    if !inline() {
        return handle.block_on(fut);
    }
    let before = WAITING.with(|w| w.replace(true));
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0;
            WAITING.with(|w| w.set(before));
        }
    }
    let _restore = Restore(before);
    futures::executor::block_on(fut)
}

/// Waits `d` (tokio's clock, paused in a simulation); inside an inline [`wait`] returns
/// at once.
pub async fn sleep(d: Duration) {
    if inline() && WAITING.with(|w| w.get()) {
        return;
    }
    tokio::time::sleep(d).await;
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Inline mode is process-wide and one-way, so only the server's behaviour is tested
    // here; the simulation exercises the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn blocking_work_runs_on_the_pool_and_returns_panics() {
        let main = std::thread::current().id();
        let other = blocking(move || std::thread::current().id() != main)
            .await
            .unwrap();
        assert!(other);
        let err = blocking(|| -> u32 { panic!("boom") }).await.unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        let handle = tokio::runtime::Handle::current();
        let v = blocking(move || wait(&handle, async { 7 })).await.unwrap();
        assert_eq!(v, 7);
    }
}
