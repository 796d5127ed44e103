//! Deleting local files no view uses any more, and closing SST files, off the threads that
//! serve requests.
//!
//! Deleting a large file is not free: the file system frees its extents and the kernel
//! drops its cached pages (about 20 ms for a 64 MiB SST on ext4 with online discard, and
//! an L0 -> L1 compaction retires a gigabyte of them at once). That work happens at the
//! unlink, or, for a file still open, at its last close. The last reader of a shard state
//! is often a runtime thread, the write path's among them, so a file deleted in `Drop`
//! there held every write behind it for hundreds of milliseconds. Here a retired file is
//! renamed out of the way at once (a metadata operation, so a new copy of the same SST can
//! be fetched to its name meanwhile), and both its unlink and the close of every SST
//! reader's file happen on one background thread, in the order they were handed over. A
//! file whose unlink a crash interrupts is a leftover the next open of its shard removes,
//! as it removes every file no manifest references.
//!
//! Under a deterministic simulation (`strata_common::exec::inline`) the work is done at
//! once on the caller's thread.
//!
//! Owns nothing but that thread; calls nothing in the engine.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

/// The suffix of a file waiting for the reclaimer.
const RETIRED_SUFFIX: &str = ".retired";

enum Work {
    Unlink(PathBuf),
    Close(std::fs::File),
}

static QUEUE: OnceLock<Mutex<mpsc::Sender<Work>>> = OnceLock::new();
/// Work handed over, and work finished, in the queue's order (one thread takes it).
static SUBMITTED: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicU64 = AtomicU64::new(0);
static NEXT: AtomicU64 = AtomicU64::new(0);

fn sender() -> Option<mpsc::Sender<Work>> {
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Work>();
        let spawned = std::thread::Builder::new()
            .name("strata-reclaim".into())
            .spawn(move || {
                for work in rx {
                    match work {
                        Work::Unlink(path) => unlink(&path),
                        Work::Close(file) => drop(file),
                    }
                    DONE.fetch_add(1, Ordering::AcqRel);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the file reclaimer; deleting in place");
        }
        Mutex::new(tx)
    });
    queue.lock().ok().map(|tx| tx.clone())
}

fn unlink(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not delete an obsolete local file");
    }
}

/// Deletes `path` soon, on the reclaimer's thread: renamed now, unlinked there. Falls back
/// to deleting in place if the file cannot be renamed or the thread is not running.
pub(crate) fn delete_later(path: &Path) {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut retired = path.as_os_str().to_owned();
    retired.push(format!(".{n}{RETIRED_SUFFIX}"));
    let retired = PathBuf::from(retired);
    match std::fs::rename(path, &retired) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(_) => return unlink(path),
    }
    if let Err(Work::Unlink(path)) = hand_over(Work::Unlink(retired)) {
        unlink(&path);
    }
}

/// Closes `file` soon, on the reclaimer's thread (for a file already unlinked, the close is
/// what frees it).
pub(crate) fn close_later(file: std::fs::File) {
    let _ = hand_over(Work::Close(file));
}

fn hand_over(work: Work) -> std::result::Result<(), Work> {
    if strata_common::exec::inline() {
        // A simulation: done here, so no wait for it depends on another thread's speed.
        match work {
            Work::Unlink(path) => unlink(&path),
            Work::Close(file) => drop(file),
        }
        return Ok(());
    }
    let Some(tx) = sender() else {
        return Err(work);
    };
    SUBMITTED.fetch_add(1, Ordering::AcqRel);
    tx.send(work).map_err(|e| {
        SUBMITTED.fetch_sub(1, Ordering::AcqRel);
        e.0
    })
}

/// Waits until every file handed over before the call is unlinked or closed (work handed
/// over meanwhile, by other shards of the process, is not waited for).
pub(crate) async fn settle() {
    let target = SUBMITTED.load(Ordering::Acquire);
    while DONE.load(Ordering::Acquire) < target {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_retired_file_leaves_its_name_at_once_and_the_disk_soon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.sst");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        delete_later(&path);
        // The name is free at once: a new copy can take it.
        assert!(!path.exists());
        std::fs::write(&path, b"new copy").unwrap();
        settle().await;
        assert_eq!(std::fs::read(&path).unwrap(), b"new copy");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("1.sst")]);
        // A file already gone is no error.
        delete_later(&dir.path().join("2.sst"));
    }
}
