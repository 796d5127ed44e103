//! The shard's lifecycle flags and wake-ups: closed (cancelled), fenced by a newer writer,
//! and the notices that start its background tasks. Every task of the shard holds these and
//! nothing else of its neighbours' state to know when to run and when to stop.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Whether the shard still runs, and the notices between its tasks.
#[derive(Debug)]
pub(crate) struct Signals {
    /// The shard's name (`table/shard`), for errors.
    name: String,
    /// This writer's epoch, for errors.
    epoch: u64,
    /// Cancelled when the shard closes: every task stops.
    pub(crate) cancel: CancellationToken,
    fenced: AtomicBool,
    /// A frozen memtable waits for the flush task.
    pub(crate) flush_wanted: Notify,
    /// The flush task finished a round (or stopped).
    pub(crate) flushed: Notify,
    /// Something may be due for NVMe compaction.
    pub(crate) compaction_wanted: Notify,
    /// Something may be due for the job task (publish or settle).
    pub(crate) jobs_wanted: Notify,
}

impl Signals {
    pub(crate) fn new(name: String, epoch: u64) -> Self {
        Self {
            name,
            epoch,
            cancel: CancellationToken::new(),
            fenced: AtomicBool::new(false),
            flush_wanted: Notify::new(),
            flushed: Notify::new(),
            compaction_wanted: Notify::new(),
            jobs_wanted: Notify::new(),
        }
    }

    /// Whether a newer writer has fenced this one.
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Records that a newer writer (epoch `newer`, 0 if unknown) exists, and returns the
    /// error that says so.
    pub(crate) fn deposed(&self, newer: u64) -> Error {
        self.fenced.store(true, Ordering::Release);
        self.fenced_error(newer)
    }

    /// Fenced, or closed: a failed background round is not retried.
    pub(crate) fn stopping(&self) -> bool {
        self.is_fenced() || self.cancel.is_cancelled()
    }

    pub(crate) fn fenced_error(&self, newer: u64) -> Error {
        Error::Fenced {
            shard: self.name.clone(),
            mine: self.epoch,
            newer,
        }
    }

    /// The error of a request the shard can no longer take: fenced, or closed.
    pub(crate) fn closed_error(&self) -> Error {
        if self.is_fenced() {
            self.fenced_error(0)
        } else {
            Error::Closed(format!("shard {} is closed", self.name))
        }
    }

    /// Ok while the shard is open and not fenced.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_fenced() || self.cancel.is_cancelled() {
            return Err(self.closed_error());
        }
        Ok(())
    }
}
