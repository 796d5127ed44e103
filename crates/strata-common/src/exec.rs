//! Where blocking work runs and how long a wait inside it lasts: the one seam a
//! deterministic simulation turns.
//!
//! In a server, [`blocking`] hands a closure to tokio's blocking pool ([`blocking_brief`]
//! runs a short one in place while that leaves a runtime worker free), [`wait`] drives a
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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

static INLINE: AtomicBool = AtomicBool::new(false);

/// Closures [`blocking_brief`] is running in place on runtime threads right now.
static IN_PLACE: AtomicUsize = AtomicUsize::new(0);

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

/// Runs short blocking work `f` (a local log's append and sync) on this thread when that
/// leaves at least one other worker of a multi-threaded runtime free, else as [`blocking`]
/// does. On the latency path of a request the hand-off to the blocking pool and the wake-up
/// back cost a good part of the work itself (two thread switches and wake-ups, 30-60 µs
/// beside a 125 µs sync here); PostgreSQL's backends sync their WAL themselves. At most
/// `workers - 1` such closures block runtime threads at once, so the rest of the process
/// always has a worker; on a runtime with one worker, or outside one, `f` goes to the pool.
/// Tasks woken onto this worker run first (one yield), not after `f`.
pub async fn blocking_brief<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Panicked> {
    if inline() {
        return blocking(f).await;
    }
    let workers = tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        .map_or(0, |h| h.metrics().num_workers());
    let free = IN_PLACE
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n + 1 < workers).then_some(n + 1)
        })
        .is_ok();
    if !free {
        return blocking(f).await;
    }
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            IN_PLACE.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let _release = Release;
    tokio::task::yield_now().await;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|p| Panicked(panic_message(&p)))
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

    /// Where `blocking_brief` ran `f` when called from a spawned task: on the thread the
    /// task goes on with right after (in place), or elsewhere (the pool, whose threads
    /// never poll tasks). Compared after the call, not before: the task may move to the
    /// other worker at the yield.
    async fn brief_in_place(f: impl FnOnce() + Send + 'static) -> bool {
        tokio::spawn(async move {
            let ran_on = blocking_brief(move || {
                f();
                std::thread::current().id()
            })
            .await
            .unwrap();
            ran_on == std::thread::current().id()
        })
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn brief_work_runs_in_place_while_another_worker_stays_free() {
        assert!(brief_in_place(|| {}).await);
        // While one closure blocks a worker, a second one goes to the pool (with two
        // workers, one stays free); once the first is done, in place again.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let first = tokio::spawn(brief_in_place(move || {
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        }));
        blocking(move || started_rx.recv().unwrap()).await.unwrap();
        assert!(!brief_in_place(|| {}).await, "the second went to the pool");
        go_tx.send(()).unwrap();
        assert!(first.await.unwrap(), "the first ran in place");
        assert!(brief_in_place(|| {}).await);
        let err = blocking_brief(|| -> u32 { panic!("boom") })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert_eq!(
            IN_PLACE.load(Ordering::Acquire),
            0,
            "a panic releases its place"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn brief_work_goes_to_the_pool_with_one_worker() {
        assert!(!brief_in_place(|| {}).await);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn brief_work_goes_to_the_pool_on_a_current_thread_runtime() {
        assert!(!brief_in_place(|| {}).await);
    }
}
