//! Hot records as the shard serves them (HotRAP §3.3-§3.4): the accesses point reads report
//! to the hotness tracker, the promotion cache they fill, and promotion by flush, which
//! commits the cache's still-hot records as an L0 SST through the commit point.

use std::sync::Arc;

use crate::config::EngineConfig;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::hotness::HotnessTracker;
use crate::metrics::{ReadSource, ShardStats};
use crate::shard::commit::Tree;
use crate::shard::files::Files;
use crate::shard::signals::Signals;
use crate::state::{ShardState, SstHandle};
use crate::version::Edit;

/// What hot-record tracking and promotion touch: the process's hotness tracker, the
/// promotion cache and commit point (through the tree), and the SST files.
pub(crate) struct Promoter {
    pub(crate) name: String,
    /// The tracker's keys of this shard begin with this: table id, shard id.
    pub(crate) key_prefix: Vec<u8>,
    pub(crate) hotness: Option<Arc<HotnessTracker>>,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) stats: Arc<ShardStats>,
    pub(crate) files: Arc<Files>,
    pub(crate) tree: Arc<Tree>,
    pub(crate) signals: Arc<Signals>,
}

/// The hotness tracker's key prefix of a shard: table id, shard id.
pub(crate) fn hotness_prefix(table_id: u64, shard_id: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&table_id.to_be_bytes());
    k.extend_from_slice(&shard_id.to_be_bytes());
    k
}

/// `key` as the hotness tracker knows it, after its shard's [`hotness_prefix`].
pub(crate) fn hotness_key(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + key.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(key);
    k
}

impl Promoter {
    /// A key as the process-wide hotness tracker knows it: table id, shard id, key.
    pub(crate) fn hotness_key(&self, key: &[u8]) -> Vec<u8> {
        hotness_key(&self.key_prefix, key)
    }

    /// Records a point read that found `key` (its newest version `value_len` bytes) in the
    /// hotness tracker, when there is one; returns the tracker when its buffer is full and
    /// must be flushed (blocking work: the caller's to place).
    pub(crate) fn note_access(
        &self,
        key: &[u8],
        value_len: u32,
    ) -> Option<Arc<crate::hotness::HotnessTracker>> {
        let t = self.hotness.as_ref()?;
        t.buffer_access(&self.hotness_key(key), value_len)
            .then(|| t.clone())
    }

    /// Whether point reads at the latest sequence number go through the promotion cache
    /// (HotRAP §3.3): hot-record tracking and promotion both on.
    pub(crate) fn promotes(&self) -> bool {
        self.hotness.is_some() && self.config.hotness.promotion
    }

    /// The versions of `key` the promotion cache holds for a read at `seq`.
    pub(crate) fn promoted(&self, key: &[u8], seq: u64) -> Option<Vec<Entry>> {
        self.tree
            .promotion
            .lock()
            .get(key, seq)
            .map(|c| c.versions.clone())
    }

    /// Offers `versions` of `key`, read from the columnar levels at `seq`, to the promotion
    /// cache. `epoch` is the promotion epoch taken before the state they were read from:
    /// a cross-tier commit since then makes them stale, and the cache refuses them. A cache
    /// that fills starts promotion by flush (one round at a time) on `runtime`.
    pub(crate) fn offer_promotion(
        self: &Arc<Self>,
        key: &[u8],
        versions: Vec<Entry>,
        seq: u64,
        epoch: u64,
        runtime: &tokio::runtime::Handle,
    ) {
        let read = crate::promotion::Cached {
            versions,
            read_seq: seq,
        };
        let full = {
            let mut pc = self.tree.promotion.lock();
            if pc.insert(key, read, epoch) {
                pc.bytes() >= self.config.hotness.promotion_cache_bytes
                    && !std::mem::replace(&mut pc.flushing, true)
            } else {
                self.stats.record_promotion_abort();
                false
            }
        };
        if !full {
            return;
        }
        let p = self.clone();
        runtime.spawn(async move {
            // Reads during a round refill the cache without starting another (one round at
            // a time), and reads the cache answers insert nothing: a cache full again when
            // a round ends is flushed again. Each round empties it.
            loop {
                if let Err(e) = p.promote_by_flush().await {
                    tracing::warn!(shard = %p.name, "promotion by flush: {e}");
                    p.tree.promotion.lock().flushing = false;
                    break;
                }
                let mut pc = p.tree.promotion.lock();
                if pc.bytes() < p.config.hotness.promotion_cache_bytes {
                    pc.flushing = false;
                    break;
                }
            }
        });
    }
}

impl crate::read::view::PointReadSink for Promoter {
    fn name(&self) -> &str {
        &self.name
    }

    fn record_point_read(&self, source: ReadSource) {
        self.stats.record_point_read(source);
    }

    fn note_access(
        &self,
        key: &[u8],
        value_len: u32,
    ) -> Option<Arc<crate::hotness::HotnessTracker>> {
        Promoter::note_access(self, key, value_len)
    }

    fn promotes(&self) -> bool {
        Promoter::promotes(self)
    }

    fn promoted(&self, key: &[u8], seq: u64) -> Option<Vec<Entry>> {
        Promoter::promoted(self, key, seq)
    }

    fn offer_promotion(
        self: Arc<Self>,
        key: &[u8],
        versions: Vec<Entry>,
        seq: u64,
        epoch: u64,
        runtime: &tokio::runtime::Handle,
    ) {
        Promoter::offer_promotion(&self, key, versions, seq, epoch, runtime)
    }
}

/// Promotion by flush (HotRAP §3.4): the promotion cache's hot records that have no version
/// in the memtables or NVMe levels become an SST at the oldest end of L0. The SST is written
/// and uploaded first; the check is repeated under the manifest lock right before the
/// commit, so no flush or compaction moves a newer version below L0 in between; writes arriving meanwhile land in the memtable, above L0. Records
/// cached before an NVMe→S3 commit are dropped (the epoch moved: a newer version may have
/// reached S3).
impl Promoter {
    pub(crate) async fn promote_by_flush(&self) -> Result<()> {
        let (taken, epoch) = self.tree.promotion.lock().take_all();
        let tracker = self.hotness.clone();
        let check = self.config.hotness.check;
        let hot: Vec<(Vec<u8>, crate::promotion::Cached)> = taken
            .into_iter()
            .filter(|(k, _)| {
                !check
                    || tracker
                        .as_ref()
                        .is_some_and(|t| t.is_hot(&self.hotness_key(k)))
            })
            .collect();
        if hot.is_empty() {
            return Ok(());
        }
        // Built and uploaded without the manifest lock; the check that decides is repeated
        // under it, just before the commit.
        let id = self.files.new_sst_id();
        let path = self.files.local_sst_path(&id);
        let (block, bloom) = (self.config.sst_block_bytes, self.config.bloom_bits_per_key);
        let (p, state) = (path.clone(), self.tree.current());
        let built = strata_common::exec::blocking(
            move || -> Result<Option<(crate::compaction::Output, Vec<Vec<u8>>)>> {
                let mut builder: Option<crate::sst::SstBuilder> = None;
                let mut keys = Vec::new();
                for (key, cached) in hot {
                    if has_version(&state, &key) {
                        continue;
                    }
                    if builder.is_none() {
                        builder = Some(crate::sst::SstBuilder::create(&p, block, bloom)?);
                    }
                    if let Some(b) = builder.as_mut() {
                        for e in &cached.versions {
                            b.add(e)?;
                        }
                    }
                    keys.push(key);
                }
                match builder {
                    Some(b) => Ok(Some((crate::compaction::finish(id, p, b)?, keys))),
                    None => Ok(None),
                }
            },
        )
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        let Some((o, keys)) = built else {
            return Ok(());
        };
        let files = self.tree.reserve([id]);
        let bytes = o.info.size_bytes;
        let committed = async {
            self.files.upload_sst(&id, &path).await?;
            let editor = self.tree.editor().await;
            // No NVMe→S3 commit since the records were cached, and still no version of any of
            // their keys above S3 (a write may have arrived and been flushed meanwhile): else
            // the promotion is dropped whole.
            let state = editor.current();
            let stale = self.tree.promotion.lock().epoch != epoch
                || strata_common::exec::blocking(move || {
                    keys.iter().any(|k| has_version(&state, k))
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
            if stale {
                return Ok(false);
            }
            editor
                .commit(
                    Edit::Promote {
                        sst: Arc::new(SstHandle::new(o.info, o.reader, o.path)),
                    },
                    files,
                )
                .await?;
            Ok(true)
        }
        .await;
        match committed {
            Ok(true) => {}
            Ok(false) => {
                self.stats.record_promotion_abort();
                let _ = std::fs::remove_file(&path);
                return Ok(());
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        }
        self.stats.record_promoted(true, bytes);
        // A read-only workload flushes no memtable: L0 grows by promotions alone, and they
        // must start compactions as flushes do.
        self.signals.compaction_wanted.notify_one();
        tracing::debug!(shard = %self.name, bytes, "promoted hot records to L0");
        Ok(())
    }
}

/// Whether a key has any version in the memtables or NVMe levels of `state`.
pub(super) fn has_version(state: &ShardState, key: &[u8]) -> bool {
    state.memtables().any(|m| !m.get(key, u64::MAX).is_empty())
        || state
            .levels
            .iter()
            .flatten()
            .any(|h| h.covers(key) && h.reader.get(key, u64::MAX).is_ok_and(|v| !v.is_empty()))
}
