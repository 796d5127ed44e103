//! The shard's flush task: frozen memtables written as L0 row SSTs, uploaded, then
//! committed through the commit point (an idle memtable is flushed too, so that scans read
//! columns rather than rows).

use std::sync::Arc;
use std::time::Duration;

use crate::config::EngineConfig;
use crate::error::{Error, Result};
use crate::iter::EntryIter;
use crate::memtable::{Memtable, MemtableIter};
use crate::metrics::ShardStats;
use crate::shard::commit::Tree;
use crate::shard::files::Files;
use crate::shard::signals::Signals;
use crate::sst::SstBuilder;
use crate::state::SstHandle;
use crate::version::Edit;

/// What the flush task touches: the frozen memtables (through the tree), the SST files,
/// the commit point, and the notices to and from the writer and compaction.
pub(super) struct Flusher {
    pub(super) name: String,
    pub(super) config: Arc<EngineConfig>,
    pub(super) stats: Arc<ShardStats>,
    pub(super) files: Arc<Files>,
    pub(super) tree: Arc<Tree>,
    pub(super) signals: Arc<Signals>,
}

pub(super) async fn flush_loop(f: Flusher) {
    let signals = &f.signals;
    loop {
        tokio::select! {
            biased;
            _ = signals.flush_wanted.notified() => {}
            _ = signals.cancel.cancelled() => return,
        }
        loop {
            let Some(mem) = f.tree.current().frozen.last().cloned() else {
                break;
            };
            match f.flush_one(mem).await {
                Ok(()) => {
                    signals.flushed.notify_waiters();
                    signals.compaction_wanted.notify_one();
                }
                Err(e) => {
                    if signals.stopping() {
                        signals.flushed.notify_waiters();
                        return;
                    }
                    tracing::warn!(shard = %f.name, error = %e, "flush failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

impl Flusher {
    /// Writes the oldest frozen memtable to an L0 SST, uploads it, commits the manifest,
    /// then swaps it into the readers' state.
    async fn flush_one(&self, mem: Arc<Memtable>) -> Result<()> {
        let id = self.files.new_sst_id();
        let path = self.files.local_sst_path(&id);
        let handle = if mem.is_empty() {
            None
        } else {
            let (block, bits) = (self.config.sst_block_bytes, self.config.bloom_bits_per_key);
            let (m, p) = (mem.clone(), path.clone());
            let written =
                strata_common::exec::blocking(move || -> Result<crate::compaction::Output> {
                    let mut b = SstBuilder::create(&p, block, bits)?;
                    let mut it = MemtableIter::new(m, &[]);
                    while let Some(e) = it.next_entry()? {
                        b.add(&e)?;
                    }
                    crate::compaction::finish(id, p, b)
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))??;
            let files = self.tree.reserve([id]);
            self.files.upload_sst(&id, &path).await?;
            Some((
                Arc::new(SstHandle::new(written.info, written.reader, written.path)),
                files,
            ))
        };
        let (handle, files) = match handle {
            Some((h, files)) => (Some(h), files),
            None => (None, self.tree.reserve([])),
        };
        // Commits, installs, and releases the file from `in_flight` (also on failure).
        self.tree
            .commit(
                Edit::Flush {
                    memtable: mem.clone(),
                    sst: handle,
                    seq_flushed: mem.seq_max(),
                    wal_replay_after: mem.wal_id_max(),
                },
                files,
            )
            .await?;
        self.stats.record_flush();
        Ok(())
    }
}
