//! The shard's flush task: frozen memtables written as L0 row SSTs, uploaded, then
//! committed through the commit point (an idle memtable is flushed too, so that scans read
//! columns rather than rows).

use super::*;

pub(super) async fn flush_loop(inner: Arc<ShardInner>) {
    loop {
        tokio::select! {
            _ = inner.flush_wanted.notified() => {}
            _ = inner.cancel.cancelled() => return,
        }
        loop {
            let Some(mem) = inner.current().frozen.last().cloned() else {
                break;
            };
            match flush_one(&inner, mem).await {
                Ok(()) => {
                    inner.flushed.notify_waiters();
                    inner.compaction_wanted.notify_one();
                }
                Err(e) => {
                    if inner.fenced.load(Ordering::Acquire) || inner.cancel.is_cancelled() {
                        inner.flushed.notify_waiters();
                        return;
                    }
                    tracing::warn!(shard = %inner.name, error = %e, "flush failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// Writes the oldest frozen memtable to an L0 SST, uploads it, commits the manifest, then
/// swaps it into the readers' state.
pub(super) async fn flush_one(inner: &Arc<ShardInner>, mem: Arc<Memtable>) -> Result<()> {
    let id = inner.new_sst_id();
    let path = inner.local_sst_path(&id);
    let handle = if mem.is_empty() {
        None
    } else {
        let (block, bits) = (
            inner.config.sst_block_bytes,
            inner.config.bloom_bits_per_key,
        );
        let (m, p) = (mem.clone(), path.clone());
        let written = tokio::task::spawn_blocking(move || -> Result<crate::compaction::Output> {
            let mut b = SstBuilder::create(&p, block, bits)?;
            let mut it = MemtableIter::new(m, &[]);
            while let Some(e) = it.next_entry()? {
                b.add(&e)?;
            }
            crate::compaction::finish(id, p, b)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        let files = inner.reserve([id]);
        inner.upload_sst(&id, &path).await?;
        Some((
            Arc::new(SstHandle::new(written.info, written.reader, written.path)),
            files,
        ))
    };
    let (handle, files) = match handle {
        Some((h, files)) => (Some(h), files),
        None => (None, inner.reserve([])),
    };
    // Commits, installs, and releases the file from `in_flight` (also on failure).
    inner
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
    inner.stats.record_flush();
    Ok(())
}
