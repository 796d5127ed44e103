//! Views built from the bucket alone, for readers that are not a shard's writer (query
//! services, other nodes): the newest manifest, pinned durably while the view lives, its
//! row-level SSTs fetched (and cached) locally, and the WAL tail past the manifest folded
//! into a memtable (reused while the tail's segments are unchanged).

use super::*;
use crate::store::objects;

/// Builds views of shards from the bucket alone (query services and other readers that are
/// not the shard's writer). Caches downloaded SSTs and decoded WAL segments.
pub(crate) struct RemoteViews {
    pub(crate) store: StoreRef,
    pub(crate) reads: ReadContext,
    pub(crate) clock: ClockRef,
    pub(crate) local_dir: PathBuf,
    pub(crate) pin_lease_ms: u64,
    ssts: Mutex<HashMap<(String, SstId), Weak<SstHandle>>>,
    wal: Mutex<HashMap<(String, u64), Arc<Segment>>>,
    /// Each shard's last folded WAL tail, reused while the tail's segments are unchanged
    /// (a query service answering many queries between two flushes folds the tail once).
    tails: Mutex<HashMap<String, Arc<Tail>>>,
}

/// A shard's WAL tail folded into a memtable: its identity (`origin`), its newest sequence
/// number and when its segments were written.
struct Tail {
    origin: String,
    mem: Arc<Memtable>,
    seq: u64,
    times: Vec<SeqTime>,
}

impl RemoteViews {
    pub(crate) fn new(
        store: StoreRef,
        reads: ReadContext,
        clock: ClockRef,
        local_dir: PathBuf,
        pin_lease_ms: u64,
    ) -> Self {
        Self {
            store,
            reads,
            clock,
            local_dir,
            pin_lease_ms,
            ssts: Mutex::new(HashMap::new()),
            wal: Mutex::new(HashMap::new()),
            tails: Mutex::new(HashMap::new()),
        }
    }

    /// A view of the shard at `paths` with every acknowledged write.
    pub(crate) async fn open(
        &self,
        table: Arc<TableSchema>,
        paths: ShardPaths,
    ) -> Result<ShardView> {
        let manifests = VersionedStore::<Manifest>::new(self.store.clone(), paths.manifest_dir());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some(manifest) = manifests.latest().await? else {
                // A table created but never written: its writer commits the shard's first
                // manifest when it opens the shard for a write, and nothing is acknowledged
                // before that. The view is empty.
                let state = ShardState {
                    active: Arc::new(Memtable::new()),
                    frozen: Vec::new(),
                    levels: Vec::new(),
                    manifest: Arc::new(Versioned {
                        version: 0,
                        value: Manifest::empty(0),
                    }),
                };
                return Ok(ShardView::new(
                    table,
                    Arc::new(state),
                    0,
                    self.store.clone(),
                    paths,
                    self.reads.clone(),
                    Vec::new(),
                    Vec::new(),
                ));
            };
            let groups: Vec<usize> = table.groups.iter().map(|g| g.len()).collect();
            crate::version::check_shape(&manifest.value, &groups).map_err(|e| match e {
                Error::Corrupt(m) => {
                    Error::Corrupt(format!("{}: {m}", manifests.path(manifest.version)))
                }
                e => e,
            })?;
            let pin = crate::store::pins::pin_version(
                &self.store,
                &paths,
                manifest.version,
                &self.clock,
                self.pin_lease_ms,
            )
            .await?;
            match self.tail(&paths, &manifest.value).await {
                Ok(tail) => {
                    let levels = self.levels(&paths, &manifest.value).await?;
                    let mut seq_times = manifest.value.seq_times.clone();
                    seq_times.extend(tail.times.iter().cloned());
                    let seq = tail.seq;
                    let state = ShardState {
                        active: tail.mem.clone(),
                        frozen: Vec::new(),
                        levels,
                        manifest: Arc::new(manifest),
                    };
                    return Ok(ShardView::new(
                        table,
                        Arc::new(state),
                        seq,
                        self.store.clone(),
                        paths,
                        self.reads.clone(),
                        seq_times,
                        vec![Box::new(pin)],
                    ));
                }
                // A segment was collected after a flush committed a newer manifest version:
                // start over from it.
                Err(Error::Store {
                    context,
                    source: object_store::Error::NotFound { .. },
                }) if attempt < 8 => {
                    tracing::debug!(shard = %paths.dir(), %context, "wal moved on; reopening view");
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The WAL tail after the manifest's replay point, as a memtable; its newest sequence
    /// number; and when its segments were written.
    async fn tail(&self, paths: &ShardPaths, m: &Manifest) -> Result<Arc<Tail>> {
        let mut ids: Vec<(u64, object_store::ObjectMeta)> =
            objects::list(&self.store, &paths.wal_dir(), "list wal")
                .await?
                .into_iter()
                .filter_map(|meta| parse_id(meta.location.as_ref()).map(|id| (id, meta)))
                .collect();
        ids.retain(|(id, _)| *id > m.wal_replay_after);
        ids.sort_by_key(|(id, _)| *id);
        // Only the consecutive run from the replay point is readable: ids past a hole are a
        // writer's uploads still in flight, not acknowledged yet. Too many past it means
        // segments this manifest needs were collected after a newer one moved the replay
        // point: the caller starts over from the newer manifest.
        let listed: Vec<u64> = ids.iter().map(|(id, _)| *id).collect();
        let end = crate::wal::contiguous(m.wal_replay_after + 1, &listed).map_err(|id| {
            Error::store(format!("read {}", paths.wal(id)))(object_store::Error::NotFound {
                path: paths.wal(id).to_string(),
                source: "a WAL segment below later ones is gone".into(),
            })
        })?;
        ids.retain(|(id, _)| *id < end);
        let dir = paths.dir().to_string();
        {
            // Segments at or before the replay point are never read again.
            let mut cache = self.wal.lock();
            cache.retain(|(d, id), _| d != &dir || *id > m.wal_replay_after);
        }
        // WAL segments are written once and never change (a conditional create), so the
        // segments read and the replay point fix the tail's content: views of the same
        // tail share the cached fold of it.
        use std::fmt::Write;
        let mut origin = format!("wal:{dir}>{}:", m.seq_flushed);
        for (id, meta) in &ids {
            let _ = write!(
                origin,
                "{id}/{}/{},",
                meta.size,
                meta.e_tag.as_deref().unwrap_or("")
            );
        }
        if let Some(t) = self.tails.lock().get(&dir)
            && t.origin == origin
        {
            return Ok(t.clone());
        }
        // Segments not cached yet (all of them, for a node's first query of the shard) are
        // fetched 32 at a time, not one round trip after another.
        let fetch = |id: u64| async move {
            let path = paths.wal(id);
            let data = objects::read(&self.store, &path)
                .await
                .map_err(Error::store(format!("read {path}")))?;
            let s = Segment::decode(&data).map_err(|e| e.in_object(&path))?;
            Ok::<_, Error>((id, Arc::new(s)))
        };
        let missing: Vec<u64> = {
            let cache = self.wal.lock();
            ids.iter()
                .filter(|(id, meta)| meta.size > 0 && !cache.contains_key(&(dir.clone(), *id)))
                .map(|(id, _)| *id)
                .collect()
        };
        let fetched: HashMap<u64, Arc<Segment>> = futures::stream::iter(missing)
            .map(fetch)
            .buffered(32)
            .try_collect()
            .await?;
        {
            let mut cache = self.wal.lock();
            for (id, s) in &fetched {
                cache.insert((dir.clone(), *id), s.clone());
            }
        }
        let mem = Memtable::with_origin(origin.clone());
        let mut seq = m.seq_flushed;
        let mut times = Vec::new();
        let mut epochs = crate::wal::EpochFilter::default();
        for (id, meta) in ids {
            if meta.size == 0 {
                continue; // a fence written before fences carried epochs
            }
            let known = fetched
                .get(&id)
                .cloned()
                .or_else(|| self.wal.lock().get(&(dir.clone(), id)).cloned());
            let segment = match known {
                Some(s) => s,
                // Evicted meanwhile by a view of a newer manifest: read it again.
                None => fetch(id).await?.1,
            };
            if !epochs.admit(&segment) {
                continue; // a deposed writer's upload that landed after a newer fence
            }
            let mut top = 0;
            for record in &segment.records {
                if record.seq <= m.seq_flushed {
                    continue;
                }
                mem.insert(record.seq, id, &record.entries);
                top = top.max(record.seq);
            }
            if top > 0 {
                seq = seq.max(top);
                times.push(SeqTime {
                    ms: meta.last_modified.timestamp_millis().max(0) as u64,
                    seq: top,
                    bytes: 0, // a reader resolves times; only the writer bounds history
                });
            }
        }
        let tail = Arc::new(Tail {
            origin,
            mem: Arc::new(mem),
            seq,
            times,
        });
        self.tails.lock().insert(dir, tail.clone());
        Ok(tail)
    }

    /// Open handles of the SSTs `m` lists, downloading what the local directory lacks.
    async fn levels(&self, paths: &ShardPaths, m: &Manifest) -> Result<Vec<Vec<Arc<SstHandle>>>> {
        let dir = paths.dir().to_string();
        let local = self.local_dir.join(dir.replace('/', "_"));
        crate::localfs::create_dir_all(&local)
            .await
            .map_err(Error::io(format!("create {}", local.display())))?;
        let mut levels = Vec::with_capacity(m.levels.len());
        for level in &m.levels {
            let mut handles = Vec::with_capacity(level.ssts.len());
            for info in &level.ssts {
                let key = (dir.clone(), info.id);
                let cached = self.ssts.lock().get(&key).and_then(Weak::upgrade);
                let h = match cached {
                    Some(h) => h,
                    None => {
                        let h = fetch_sst(&self.store, paths, info, &local).await?;
                        self.ssts.lock().insert(key, Arc::downgrade(&h));
                        h
                    }
                };
                handles.push(h);
            }
            levels.push(handles);
        }
        // SSTs no longer listed: their local copies go once no view uses them.
        let listed: std::collections::HashSet<SstId> = m.ssts().map(|s| s.id).collect();
        let mut cache = self.ssts.lock();
        cache.retain(|(d, id), weak| {
            if d != &dir || listed.contains(id) {
                return true;
            }
            match weak.upgrade() {
                Some(h) => h.mark_obsolete(),
                None => crate::reclaim::delete_later(&local.join(format!("{id}.sst"))),
            }
            false
        });
        Ok(levels)
    }
}

/// Opens the SST `info` from `dir`, downloading it from the bucket first when the local copy
/// is missing or has the wrong size.
pub(crate) async fn fetch_sst(
    store: &StoreRef,
    paths: &ShardPaths,
    info: &SstInfo,
    dir: &std::path::Path,
) -> Result<Arc<SstHandle>> {
    let path = dir.join(format!("{}.sst", info.id));
    let local_ok = crate::localfs::metadata(&path)
        .await
        .is_ok_and(|m| m.len() == info.size_bytes);
    if !local_ok {
        // Unique per download: concurrent views may fetch the same SST at once.
        static DOWNLOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = DOWNLOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("sst.download-{}-{n}", std::process::id()));
        crate::store::download::download(store, &paths.sst(&info.id), &tmp, Some(info.size_bytes))
            .await?;
        crate::localfs::rename(&tmp, &path)
            .await
            .map_err(Error::io("rename downloaded sst"))?;
    }
    let p = path.clone();
    let reader = strata_common::exec::blocking(move || SstReader::open(&p))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    Ok(Arc::new(SstHandle::new(info.clone(), reader, path)))
}
