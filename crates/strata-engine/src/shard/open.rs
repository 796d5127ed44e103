//! Opening a shard as its writer: the writer epoch bumped in the manifest (CAS), the WAL
//! fenced where the previous writer would write next, the WAL replayed, the row-level SSTs fetched
//! (missing ones downloaded, a few at a time), the epoch re-checked, and the background
//! tasks started.

use std::collections::HashSet;

use crate::store::objects;
use futures::{StreamExt, TryStreamExt};
use strata_common::ids::parse_id;

use super::*;

/// SSTs a shard's open downloads at once (a replacement node with an empty directory).
const SST_DOWNLOADS_CONCURRENT: usize = 8;

impl Shard {
    /// Opens `table`'s shard `shard_id` as its writer, fencing any previous writer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn open(
        table: Arc<TableSchema>,
        shard_id: u32,
        paths: ShardPaths,
        store: StoreRef,
        local_root: PathBuf,
        config: EngineConfig,
        clock: ClockRef,
        process: crate::context::ProcessContext,
    ) -> Result<Shard> {
        let name = format!("{}/{}", table.name(), shard_id);
        let group_counts: Vec<usize> = table.groups.iter().map(|g| g.len()).collect();
        let manifests = VersionedStore::<Manifest>::new(store.clone(), paths.manifest_dir());

        // 1. Bump the writer epoch.
        let manifest = loop {
            let latest = manifests.latest().await?;
            let mut next = match &latest {
                Some(v) => v.value.clone(),
                None => Manifest::empty(config.levels),
            };
            next.writer_epoch += 1;
            next.written_at_ms = clock.now_ms();
            crate::version::shape_levels(&mut next, &group_counts).map_err(|e| match &latest {
                Some(v) => e.in_object(&manifests.path(v.version)),
                None => e,
            })?;
            match manifests.commit(latest.as_ref(), next).await {
                Ok(v) => break v,
                Err(strata_manifest::Error::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let epoch = manifest.value.writer_epoch;
        tracing::info!(shard = %name, epoch, version = manifest.version, "opening shard writer");

        // 1b. Segments a previous process on this node acknowledged after the local fsync
        // (`Durability::Local`) and did not upload: uploaded now, in order, before the fence.
        writer::upload_local_segments(
            &store,
            &paths,
            &local_root,
            &name,
            manifest.value.wal_replay_after,
        )
        .await?;

        // 2. Fence the WAL where the previous writer would write next: from the end of the
        // consecutive run (a hole its uploads in flight left, or after the last id), one
        // fence per id until the last `UPLOADS_IN_FLIGHT` ids are ours. An id taken meanwhile is
        // the previous writer's upload landing now: replayed below (acknowledged or not, it
        // is whole), the run of fences starting again after it. After the run that writer
        // can land nothing, and acknowledges nothing past its first fenced id.
        let mut wal_ids: Vec<u64> = objects::list(&store, &paths.wal_dir(), "list wal")
            .await?
            .iter()
            .filter_map(|m| parse_id(m.location.as_ref()))
            .collect();
        wal_ids.sort_unstable();
        let replay_from = manifest.value.wal_replay_after + 1;
        let mut next_id = crate::wal::contiguous(replay_from, &wal_ids).map_err(|id| {
            Error::Corrupt(format!(
                "shard {name}: WAL segment {id} is missing from the bucket, with \
                 {} or more segments after it; replay needs it (acknowledged writes would \
                 be lost)",
                crate::wal::UPLOADS_IN_FLIGHT
            ))
        })?;
        // The fences of a run are created together, a run at a time: a previous writer
        // still busy lands up to its uploads in flight per round trip, and probing one id
        // per round trip behind it could chase it for as long as it keeps writing.
        let fence = bytes::Bytes::from(crate::wal::fence(epoch));
        let run = crate::wal::UPLOADS_IN_FLIGHT;
        let mut ours = 0;
        // The fences this writer created: replay knows them without reading them back.
        let mut own = HashSet::new();
        while ours < run {
            let created = futures::future::join_all((next_id..next_id + run).map(|id| {
                let (store, path, fence) = (&store, paths.wal(id), fence.clone());
                async move { objects::create(store, &path, fence.into()).await }
            }))
            .await;
            for (id, result) in (next_id..).zip(created) {
                match result {
                    Ok(_) => {
                        ours += 1;
                        own.insert(id);
                    }
                    Err(object_store::Error::AlreadyExists { .. }) => ours = 0,
                    Err(e) => return Err(Error::store("write wal fence")(e)),
                }
            }
            next_id += run;
        }

        // 3. Replay every segment between the manifest's replay point and the fences, in id
        // order, skipping a deposed writer's uploads that landed after a newer fence.
        let active = Arc::new(Memtable::new());
        let mut last_seq = manifest.value.seq_flushed;
        let mut epochs = crate::wal::EpochFilter::default();
        // Segments are fetched REPLAY_READS at a time and applied in id order: a tail of
        // thousands of small group commits replays in a few round trips' time, not one
        // round trip per segment.
        let own_fence = Segment {
            writer_epoch: epoch,
            records: Vec::new(),
        };
        let mut segments = futures::stream::iter(replay_from..next_id)
            .map(|id| {
                let (store, path, mine) = (store.clone(), paths.wal(id), own.contains(&id));
                async move {
                    if mine {
                        return (id, path, None);
                    }
                    let got = objects::read(&store, &path).await;
                    (id, path, Some(got))
                }
            })
            .buffered(REPLAY_READS);
        while let Some((id, path, got)) = segments.next().await {
            let Some(got) = got else {
                epochs.admit(&own_fence);
                continue;
            };
            let data = match got {
                Ok(data) => data,
                // Every id up to the fences was listed, fenced or found taken, and fences
                // are never collected, nor is a segment above the oldest retained
                // manifest's replay point: a missing one held acknowledged writes.
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::Corrupt(format!(
                        "shard {name}: WAL segment {id} is missing from the bucket; replay \
                         from {replay_from} to {next_id} needs it (acknowledged writes would be lost)"
                    )));
                }
                Err(e) => return Err(Error::store(format!("read {path}"))(e)),
            };
            if data.is_empty() {
                continue; // a fence written before fences carried epochs
            }
            let segment = Segment::decode(&data).map_err(|e| e.in_object(&path))?;
            if !epochs.admit(&segment) {
                tracing::info!(shard = %name, id, epoch = segment.writer_epoch, "skipping a deposed writer's unacknowledged WAL segment");
                continue;
            }
            for record in segment.records {
                if record.seq <= manifest.value.seq_flushed {
                    continue;
                }
                active.insert(record.seq, id, &record.entries);
                last_seq = last_seq.max(record.seq);
            }
        }
        drop(segments);
        // The byte count continues from the last committed entry (writes replayed above
        // are not counted again: an undercount only keeps more history).
        let written_bytes = manifest.value.seq_times.last().map_or(0, |t| t.bytes);

        // 4. Still the owner? (A newer writer may have fenced us while we replayed.)
        if let Some(latest) = manifests.latest().await?
            && latest.value.writer_epoch != epoch
        {
            return Err(Error::Fenced {
                shard: name,
                mine: epoch,
                newer: latest.value.writer_epoch,
            });
        }

        // 5. Bring the referenced SSTs to the local directory.
        let local_dir = local_root;
        crate::localfs::create_dir_all(&local_dir)
            .await
            .map_err(Error::io(format!("create {}", local_dir.display())))?;
        // Several at once: a replacement node's time to first read is this download (the
        // row levels are small and bounded at default settings, so it is too).
        let mut levels = Vec::with_capacity(manifest.value.levels.len());
        let mut referenced = HashSet::new();
        for level in &manifest.value.levels {
            for info in &level.ssts {
                referenced.insert(local_dir.join(format!("{}.sst", info.id)));
            }
            // The futures are made first: a stream holding the closure that makes them is
            // not `Send` for every lifetime, which the spawned open needs.
            let mut downloads = Vec::with_capacity(level.ssts.len());
            for info in &level.ssts {
                downloads.push(crate::read::view::fetch_sst(
                    &store, &paths, info, &local_dir,
                ));
            }
            let handles: Vec<_> = futures::stream::iter(downloads)
                .buffered(SST_DOWNLOADS_CONCURRENT)
                .try_collect()
                .await?;
            levels.push(handles);
        }
        // Local files no manifest references are leftovers of a previous process.
        if let Ok(entries) = crate::localfs::list_dir(&local_dir).await {
            for path in entries {
                if !referenced.contains(&path) {
                    let _ = crate::localfs::remove_file(path).await;
                }
            }
        }

        let state = ShardState {
            active,
            frozen: Vec::new(),
            levels,
            manifest: Arc::new(manifest),
        };
        let (tx, rx) = mpsc::channel(config.write_queue_max.max(1));
        let config = Arc::new(config);
        let stats = Arc::new(crate::metrics::ShardStats::default());
        let signals = Arc::new(signals::Signals::new(name.clone(), epoch));
        let files = Arc::new(files::Files::new(
            store,
            paths,
            local_dir,
            epoch,
            process.local_bucket,
        ));
        let tree = Arc::new(commit::Tree::new(
            config.clone(),
            clock.clone(),
            signals.clone(),
            manifests,
            state,
            last_seq,
            written_bytes,
        ));
        let compaction_lock = Arc::new(tokio::sync::Mutex::new(()));
        let compactor = Arc::new(compact::Compactor {
            name: name.clone(),
            table: table.clone(),
            config: config.clone(),
            clock: clock.clone(),
            stats: stats.clone(),
            files: files.clone(),
            tree: tree.clone(),
            signals: signals.clone(),
            lock: compaction_lock.clone(),
        });
        let table_id = table.entry.id;
        let job_prefix = offload::job_prefix(table_id, shard_id);
        let hotness_prefix = promote::hotness_prefix(table_id, shard_id);
        let offloader = Arc::new(offload::Offloader {
            name: name.clone(),
            table: table.clone(),
            config: config.clone(),
            clock: clock.clone(),
            stats: stats.clone(),
            epoch,
            job_prefix: job_prefix.clone(),
            layout: process.layout.clone(),
            jobs_published: process.jobs_published.clone(),
            hotness: process.hotness.clone(),
            hotness_prefix: hotness_prefix.clone(),
            files: files.clone(),
            tree: tree.clone(),
            signals: signals.clone(),
            compaction_lock,
            next_job: AtomicU64::new(1),
        });
        let promoter = Arc::new(promote::Promoter {
            name: name.clone(),
            key_prefix: hotness_prefix,
            hotness: process.hotness.clone(),
            config: config.clone(),
            stats: stats.clone(),
            files: files.clone(),
            tree: tree.clone(),
            signals: signals.clone(),
        });
        let collector = Arc::new(gc::Collector {
            name: name.clone(),
            config: config.clone(),
            clock: clock.clone(),
            epoch,
            layout: process.layout.clone(),
            job_prefix,
            files: files.clone(),
            tree: tree.clone(),
            signals: signals.clone(),
            sightings: Mutex::new(crate::gc::Sightings::default()),
        });
        let flusher = flush::Flusher {
            name: name.clone(),
            config: config.clone(),
            stats: stats.clone(),
            files: files.clone(),
            tree: tree.clone(),
            signals: signals.clone(),
        };
        let inner = Arc::new(ShardInner {
            name,
            table,
            config,
            epoch,
            process,
            stats,
            signals: signals.clone(),
            files,
            tree,
            compactor: compactor.clone(),
            offloader: offloader.clone(),
            promoter,
            collector: collector.clone(),
            overloaded_since: Mutex::new(None),
        });
        offloader.clear_stale_jobs().await?;
        tokio::spawn(offload::job_loop(offloader));
        tokio::spawn(writer::writer_loop(
            Arc::new(writer::GroupCommit {
                name: inner.name.clone(),
                config: inner.config.clone(),
                epoch,
                stats: inner.stats.clone(),
                files: inner.files.clone(),
                tree: inner.tree.clone(),
                signals: signals.clone(),
                local_log: Arc::new(std::sync::Mutex::new(crate::wal::local::LocalLog::new(
                    inner.files.local_dir.clone(),
                    crate::wal::local::LOG_FILE_BYTES,
                ))),
            }),
            rx,
            next_id,
            last_seq + 1,
        ));
        tokio::spawn(flush::flush_loop(flusher));
        tokio::spawn(compact::compaction_loop(compactor));
        if inner.config.gc.interval_ms > 0 {
            tokio::spawn(gc::gc_loop(collector));
        }
        signals.compaction_wanted.notify_one();
        Ok(Shard { inner, tx })
    }
}
