//! The one commit point of a shard's tree. Every change (flush, compaction, promotion,
//! a job's result with HotRAP's retained copies) is a typed [`Edit`] committed here, in
//! this order and under the manifest lock: the manifest by CAS, then the new in-memory
//! state, then the protections released (the edit's files in flight, the job it settles).
//! Nothing else commits a manifest or swaps the state. A caller that must check the tree
//! before deciding (a job whose inputs may have moved, a promotion that may be stale)
//! takes an [`Editor`], checks under its lock, then commits through it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::jobs::JobSource;
use crate::shard::ShardInner;
use crate::state::ShardState;
use crate::version::Edit;

/// The manifest lock, held: no other edit commits until it drops.
pub(crate) struct Editor<'a> {
    inner: &'a ShardInner,
    _lock: tokio::sync::MutexGuard<'a, ()>,
}

impl ShardInner {
    /// Takes the manifest lock for an edit.
    pub(crate) async fn editor(&self) -> Editor<'_> {
        Editor {
            inner: self,
            _lock: self.manifest_lock.lock().await,
        }
    }

    /// Commits `edit` on its own (see [`Editor::commit`]).
    pub(crate) async fn commit(&self, edit: Edit) -> Result<()> {
        self.editor().await.commit(edit).await
    }
}

impl Editor<'_> {
    /// The shard's state; no other edit changes it while the editor is held.
    pub(crate) fn current(&self) -> Arc<ShardState> {
        self.inner.current()
    }

    /// Commits `edit`: the manifest by CAS (a lost race fences the shard), then the state
    /// with the edit applied, the files it removed marked obsolete; then, whether or not the
    /// commit succeeded, the edit's new files leave `in_flight` (GC must not see them
    /// outside it before the state holds them) and a settled job leaves the outstanding
    /// ones.
    pub(crate) async fn commit(&self, edit: Edit) -> Result<()> {
        let inner = self.inner;
        let committed = inner.commit_manifest(|m| edit.apply_to_manifest(m)).await;
        let result = committed.map(|manifest| {
            let mut guard = inner.state.write();
            let mut next = (**guard).clone();
            let removed = edit.apply_to_state(&mut next);
            next.manifest = manifest;
            match &edit {
                Edit::Flush { sst: Some(_), .. } => inner
                    .l0_grown_ms
                    .store(inner.clock.now_ms(), Ordering::Release),
                Edit::Job { spec, retained, .. }
                    if matches!(spec.source, JobSource::CrossTier { .. }) =>
                {
                    let last = next.levels.len() - 1;
                    let mut kept = inner.retained_ssts.lock();
                    kept.extend(retained.iter().map(|h| h.info.id));
                    kept.retain(|id| next.levels[last].iter().any(|h| h.info.id == *id));
                }
                _ => {}
            }
            *guard = Arc::new(next);
            drop(guard);
            for h in removed {
                h.mark_obsolete();
            }
        });
        {
            let mut in_flight = inner.in_flight.lock();
            for id in edit.new_ssts() {
                in_flight.remove(&id);
            }
        }
        if result.is_ok()
            && let Edit::Job { spec, .. } = &edit
        {
            inner.forget_job(&spec.id);
        }
        result
    }
}
