//! The shard's writer task: group commit. Queued writes become one WAL segment stored in
//! the bucket with a create-if-absent PUT (a newer writer's fence makes it fail), then are
//! applied to the active memtable and acknowledged; a full memtable is frozen for the
//! flush task. Locally durable writes are appended to the shard's local log first
//! ([`crate::wal::local`]), applied and acknowledged, and uploaded after: group commits of
//! only such writes gather under one segment id for `wal_local_upload_delay_ms` (each logged
//! as a part of it), then go up as one segment, so a stream of them costs a PUT per interval,
//! not per group commit. A group with a remote write, a full segment, a new memtable, a
//! sync or the writer's end uploads what is gathered first: the bucket's segments stay in id
//! order, and a segment never spans two memtables (a flush's replay point is its memtable's
//! highest segment id).
//!
//! Up to [`crate::wal::UPLOADS_IN_FLIGHT`] segments are uploaded at once, so a group commit
//! does not wait for the previous one's round trip; segments are applied and acknowledged
//! strictly in id order, each once it and every earlier one are stored (the order readers
//! and new writers rely on, `crate::wal`). If one fails (fenced, or the shard closed),
//! neither it nor any later one is acknowledged.

use std::collections::VecDeque;

use futures::StreamExt;
use futures::stream::FuturesOrdered;

use crate::wal::local::LocalLog;

use super::*;

/// What the group-commit task touches: the WAL (through the shard's files: the bucket
/// and the local directory), the memtables and visible sequence number (through the tree),
/// and the notices to the flush task.
pub(super) struct GroupCommit {
    pub(super) name: String,
    pub(super) config: Arc<EngineConfig>,
    pub(super) epoch: u64,
    pub(super) stats: Arc<crate::metrics::ShardStats>,
    pub(super) files: Arc<files::Files>,
    pub(super) tree: Arc<commit::Tree>,
    pub(super) signals: Arc<signals::Signals>,
    /// Where locally durable segments wait for their upload (the writer task alone uses
    /// it, from the blocking pool for appends).
    pub(super) local_log: Arc<std::sync::Mutex<LocalLog>>,
}

impl GroupCommit {
    fn current(&self) -> Arc<ShardState> {
        self.tree.current()
    }
}

/// A group commit on its way to the bucket.
struct Pending {
    wal_id: u64,
    writes: Vec<PendingWrite>,
    data_len: u64,
    /// A locally durable write is in it: already applied (and its local writes already
    /// acknowledged); the local log may reuse its space once the upload lands.
    local: bool,
}

/// Locally durable group commits gathered under one segment id, not yet uploaded: each on
/// the local log as a part of the segment, applied and acknowledged.
struct Held {
    wal_id: u64,
    writes: Vec<PendingWrite>,
    bytes: usize,
    /// The memtable they were applied to.
    memtable: Arc<Memtable>,
    upload_at: tokio::time::Instant,
}

type Upload = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;

/// The uploads in flight, oldest first, and what each will acknowledge.
#[derive(Default)]
struct InFlight {
    pending: VecDeque<Pending>,
    uploads: FuturesOrdered<Upload>,
}

impl InFlight {
    fn len(&self) -> usize {
        self.pending.len()
    }

    fn push(&mut self, inner: &Arc<GroupCommit>, pending: Pending, data: Bytes) {
        let (inner, wal_id) = (inner.clone(), pending.wal_id);
        self.uploads.push_back(Box::pin(async move {
            upload_segment(&inner, wal_id, data).await
        }));
        self.pending.push_back(pending);
    }

    /// Acknowledges the oldest upload, which ended with `result`; `false` once the writer
    /// must stop (an upload failed: every write still queued or in flight has been
    /// answered).
    async fn acknowledge(
        &mut self,
        result: Result<()>,
        inner: &GroupCommit,
        rx: &mut mpsc::Receiver<Request>,
    ) -> bool {
        let mut done = self.pending.pop_front().expect("one pending per upload");
        match result {
            Ok(()) => {
                if done.local {
                    lock_log(&inner.local_log).uploaded(done.wal_id);
                } else {
                    apply(inner, done.wal_id, &done.writes);
                }
                if let Some(last) = done.writes.last() {
                    inner.tree.note_acknowledged(last.0, done.data_len);
                }
                for w in done.writes.iter_mut() {
                    if let Some(reply) = w.3.take() {
                        let _ = reply.send(Ok(w.0));
                    }
                }
                inner.stats.record_wal_segment(done.writes.len());
                freeze_if_full(inner);
                true
            }
            Err(e) => {
                // Fenced or closed: nothing more can be acknowledged by this writer, not even
                // a later segment that landed (it is past the hole a newer writer fenced).
                let error = |e: &Error| match e {
                    Error::Fenced { .. } => inner.signals.fenced_error(0),
                    _ => Error::Closed(format!("shard {} is closed", inner.name)),
                };
                self.uploads = FuturesOrdered::new();
                for p in std::iter::once(&mut done).chain(self.pending.iter_mut()) {
                    for w in p.writes.iter_mut() {
                        if let Some(reply) = w.3.take() {
                            let _ = reply.send(Err(error(&e)));
                        }
                    }
                }
                self.pending.clear();
                rx.close();
                while let Some(r) = rx.recv().await {
                    if let Request::Write { reply, .. } = r {
                        let _ = reply.send(Err(error(&e)));
                    }
                }
                false
            }
        }
    }

    /// Settles uploads in flight, oldest first, until none holds writes not yet applied;
    /// `false` if the writer must stop.
    async fn drain_unapplied(
        &mut self,
        inner: &GroupCommit,
        rx: &mut mpsc::Receiver<Request>,
    ) -> bool {
        self.settle_while(inner, rx, |f| f.pending.iter().any(|p| !p.local))
            .await
    }

    /// Settles the oldest uploads until fewer than `max` are in flight; `false` if the
    /// writer must stop.
    async fn make_room(
        &mut self,
        max: usize,
        inner: &GroupCommit,
        rx: &mut mpsc::Receiver<Request>,
    ) -> bool {
        self.settle_while(inner, rx, |f| f.len() >= max).await
    }

    /// Settles uploads in flight, oldest first, while `more` holds of what is left (and
    /// any is); `false` if the writer must stop.
    async fn settle_while(
        &mut self,
        inner: &GroupCommit,
        rx: &mut mpsc::Receiver<Request>,
        more: impl Fn(&Self) -> bool,
    ) -> bool {
        while more(self) {
            let Some(result) = self.uploads.next().await else {
                break;
            };
            if !self.acknowledge(result, inner, rx).await {
                return false;
            }
        }
        true
    }

    /// Sends the gathered locally durable group commits up as one segment (once fewer than
    /// `max` uploads are in flight); `false` if the writer must stop.
    async fn upload_held(
        &mut self,
        held: &mut Option<Held>,
        max: usize,
        inner: &Arc<GroupCommit>,
        rx: &mut mpsc::Receiver<Request>,
    ) -> bool {
        let Some(h) = held.take() else {
            return true;
        };
        if !self.make_room(max, inner, rx).await {
            return false;
        }
        let data = encode_writes(inner.epoch, &h.writes);
        let pending = Pending {
            wal_id: h.wal_id,
            data_len: data.len() as u64,
            writes: h.writes,
            local: true,
        };
        self.push(inner, pending, data);
        true
    }

    /// Settles every upload in flight, oldest first; `false` if the writer must stop.
    async fn drain(&mut self, inner: &GroupCommit, rx: &mut mpsc::Receiver<Request>) -> bool {
        self.settle_while(inner, rx, |_| true).await
    }
}

pub(super) async fn writer_loop(
    inner: Arc<GroupCommit>,
    mut rx: mpsc::Receiver<Request>,
    mut wal_id: u64,
    mut next_seq: u64,
) {
    let mut flight = InFlight::default();
    let mut held: Option<Held> = None;
    let in_flight_max = inner
        .config
        .wal_uploads_in_flight
        .clamp(1, crate::wal::UPLOADS_IN_FLIGHT as usize);
    let hold_for = Duration::from_millis(inner.config.wal_local_upload_delay_ms);
    loop {
        // A memtable left with writes and then idle for `memtable_settle_ms` is flushed.
        let settle = inner.config.memtable_settle_ms;
        let idle_flush = settle > 0 && flight.len() == 0 && !inner.current().active.is_empty();
        let upload_at = held.as_ref().map(|h| h.upload_at);
        let first = tokio::select! {
            biased;
            _ = inner.signals.cancel.cancelled() => return,
            // The oldest upload landed (or failed): acknowledge it.
            Some(result) = flight.uploads.next(), if flight.len() > 0 => {
                if !flight.acknowledge(result, &inner, &mut rx).await {
                    return;
                }
                continue;
            }
            // The gathered local group commits' interval is over: upload them, once an
            // upload can start (until then they keep gathering: a bucket that is slow or
            // down does not stop locally durable writes before the segment is full).
            _ = tokio::time::sleep_until(upload_at.unwrap_or_else(tokio::time::Instant::now)), if upload_at.is_some() && flight.len() < in_flight_max => {
                if !flight.upload_held(&mut held, in_flight_max, &inner, &mut rx).await {
                    return;
                }
                continue;
            }
            r = rx.recv() => match r {
                Some(r) => r,
                None => {
                    if flight.upload_held(&mut held, in_flight_max, &inner, &mut rx).await {
                        flight.drain(&inner, &mut rx).await;
                    }
                    return;
                }
            },
            _ = tokio::time::sleep(Duration::from_millis(settle)), if idle_flush => {
                if !inner.current().active.is_empty() {
                    tracing::debug!(shard = %inner.name, "flushing an idle memtable");
                    freeze(&inner);
                }
                continue;
            }
        };
        // Anything but a locally durable write needs an upload of its own: wait for room
        // before gathering the group, so it takes in what arrives meanwhile. A local write
        // does not wait (it may only join what is gathered, or start it).
        let local_first = matches!(
            &first,
            Request::Write {
                durability: Durability::Local,
                ..
            }
        );
        if !local_first && !flight.make_room(in_flight_max, &inner, &mut rx).await {
            return;
        }
        // Write stall: too many memtables wait for flush. What already landed is
        // acknowledged first (it does not wait out the stall), or the writer stops.
        if inner.current().frozen.len() >= inner.config.memtables_frozen_max
            && !(flight
                .upload_held(&mut held, in_flight_max, &inner, &mut rx)
                .await
                && flight.drain(&inner, &mut rx).await)
        {
            return;
        }
        while inner.current().frozen.len() >= inner.config.memtables_frozen_max {
            let stall = std::time::Instant::now();
            inner.signals.flush_wanted.notify_one();
            let notified = inner.signals.flushed.notified();
            tokio::select! {
                biased;
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = inner.signals.cancel.cancelled() => return,
            }
            inner.stats.record_stall(stall.elapsed());
        }
        let mut group = vec![first];
        let mut bytes = 0usize;
        while bytes < inner.config.wal_segment_bytes_max {
            match rx.try_recv() {
                Ok(r) => {
                    if let Request::Write { entries, .. } = &r {
                        bytes += entries
                            .iter()
                            .map(|e| e.key.len() + e.value.len() + 8)
                            .sum::<usize>();
                    }
                    group.push(r);
                }
                Err(_) => break,
            }
        }
        let mut freeze_replies = Vec::new();
        let mut sync_replies = Vec::new();
        let mut writes = Vec::new();
        for r in group {
            match r {
                Request::Write {
                    entries,
                    durability,
                    reply,
                } => {
                    if entries.is_empty() {
                        // The newest acknowledged sequence number (a later one may still be
                        // in flight, and may yet fail).
                        let _ = reply.send(Ok(inner.tree.last_seq.load(Ordering::Acquire)));
                        continue;
                    }
                    writes.push((next_seq, entries, durability, Some(reply)));
                    next_seq += 1;
                }
                Request::Freeze { reply } => freeze_replies.push(reply),
                Request::Sync { reply } => sync_replies.push(reply),
            }
        }
        if !writes.is_empty() {
            let data = encode_writes(inner.epoch, &writes);
            let data_len = data.len() as u64;
            let all_local = writes.iter().all(|w| w.2 == Durability::Local);
            // Only a group with a locally durable write leaves a local segment to remove.
            let mut local = writes.iter().any(|w| w.2 == Durability::Local);
            if local {
                // Applied now, so everything before it must be applied first (a group in
                // flight with a locally durable write already is; the others are once their
                // uploads land).
                if !flight.drain_unapplied(&inner, &mut rx).await {
                    return;
                }
            }
            // What is gathered goes up first unless this group joins it: a remote write is
            // acknowledged only after every segment before its own.
            let joins = held.as_ref().is_some_and(|h| {
                all_local
                    && Arc::ptr_eq(&h.memtable, &inner.current().active)
                    && h.bytes + data.len() <= inner.config.wal_segment_bytes_max
            });
            if !joins
                && !flight
                    .upload_held(&mut held, in_flight_max, &inner, &mut rx)
                    .await
            {
                return;
            }
            let id = held.as_ref().map_or(wal_id, |h| h.wal_id);
            if local {
                match write_local_wal(&inner, id, &data, writes.len()).await {
                    Ok(()) => {
                        apply(&inner, id, &writes);
                        for w in writes.iter_mut().filter(|w| w.2 == Durability::Local) {
                            if let Some(reply) = w.3.take() {
                                let _ = reply.send(Ok(w.0));
                            }
                        }
                    }
                    Err(e) => {
                        local = false;
                        tracing::warn!(shard = %inner.name, error = %e, "local wal write failed; waiting for the upload")
                    }
                }
            }
            if local && all_local {
                if held.is_none() {
                    held = Some(Held {
                        wal_id: id,
                        writes: Vec::new(),
                        bytes: 0,
                        memtable: inner.current().active.clone(),
                        // A delay past what the clock can add: gathered until something
                        // else uploads them (a remote write, a full segment, a close).
                        upload_at: tokio::time::Instant::now()
                            .checked_add(hold_for)
                            .unwrap_or_else(|| {
                                tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
                            }),
                    });
                    wal_id += 1;
                }
                let h = held.as_mut().expect("held just now");
                h.bytes += data.len();
                h.writes.append(&mut writes);
                if hold_for.is_zero() || h.bytes >= inner.config.wal_segment_bytes_max {
                    if !flight
                        .upload_held(&mut held, in_flight_max, &inner, &mut rx)
                        .await
                    {
                        return;
                    }
                } else {
                    freeze_if_full(&inner);
                }
            } else {
                // A failed local append leaves at most a torn part of a gathered segment,
                // which reading the log back skips; what was gathered goes up without it,
                // and this group waits for its own upload under a new id.
                if !flight
                    .upload_held(&mut held, in_flight_max, &inner, &mut rx)
                    .await
                    || !flight.make_room(in_flight_max, &inner, &mut rx).await
                {
                    return;
                }
                let pending = Pending {
                    wal_id,
                    writes,
                    data_len,
                    local,
                };
                flight.push(&inner, pending, data);
                wal_id += 1;
            }
        }
        if !freeze_replies.is_empty() || !sync_replies.is_empty() {
            // Answered once every write sent before them is acknowledged (or failed) and in
            // the bucket.
            if !flight
                .upload_held(&mut held, in_flight_max, &inner, &mut rx)
                .await
                || !flight.drain(&inner, &mut rx).await
            {
                return;
            }
            if !freeze_replies.is_empty() && !inner.current().active.is_empty() {
                freeze(&inner);
            }
            for r in freeze_replies.into_iter().chain(sync_replies) {
                let _ = r.send(());
            }
        }
    }
}

pub(super) fn apply(inner: &GroupCommit, wal_id: u64, writes: &[PendingWrite]) {
    let state = inner.current();
    let mut max = 0;
    for (seq, entries, _, _) in writes {
        state.active.insert(*seq, wal_id, entries);
        max = max.max(*seq);
    }
    inner.tree.last_seq.fetch_max(max, Ordering::AcqRel);
}

/// The WAL segment of `writes` (in sequence order) by the writer of `epoch`.
fn encode_writes(epoch: u64, writes: &[PendingWrite]) -> Bytes {
    let records: Vec<(u64, &[PreparedEntry])> = writes
        .iter()
        .map(|(seq, entries, _, _)| (*seq, entries.as_slice()))
        .collect();
    Bytes::from(Segment::encode(epoch, &records))
}

/// Freezes the active memtable once it is full (by size, or by the WAL segments a reopen
/// would replay).
fn freeze_if_full(inner: &GroupCommit) {
    let state = inner.current();
    if state.active.size_bytes() >= inner.config.memtable_bytes_max
        || state.active.wal_segments() >= inner.config.memtable_wal_segments_max.max(1)
    {
        freeze(inner);
    }
}

pub(super) fn freeze(inner: &GroupCommit) {
    inner.tree.rotate_memtable();
    inner.signals.flush_wanted.notify_one();
}

fn lock_log(log: &std::sync::Mutex<LocalLog>) -> std::sync::MutexGuard<'_, LocalLog> {
    // A panic mid-append leaves at worst a torn record, which reading back skips.
    log.lock().unwrap_or_else(|p| p.into_inner())
}

/// Appends the segment of a group of `writes` to the shard's local log and returns once it
/// is on the local disk. A lone write's brief append (an existing file, a fast disk) runs on
/// this task's thread when a runtime worker stays free: the write is answered without two
/// thread hand-offs (30-60 µs of a 210 µs insert over HTTP). A larger group means writers
/// are queueing: its append goes to the blocking pool, so both workers keep serving them
/// while it syncs (in place, 64 writers lost 10-20% of their throughput).
pub(super) async fn write_local_wal(
    inner: &GroupCommit,
    wal_id: u64,
    data: &Bytes,
    writes: usize,
) -> Result<()> {
    let (log, data) = (inner.local_log.clone(), data.clone());
    let brief = writes == 1 && lock_log(&log).append_is_brief(data.len());
    let append = move || lock_log(&log).append(wal_id, &data);
    if brief {
        strata_common::exec::blocking_brief(append).await
    } else {
        strata_common::exec::blocking(append).await
    }
    .map_err(|e| Error::Internal(e.to_string()))?
    .map_err(Error::io("local wal"))
}

/// Uploads the local WAL segments above `replay_after` that a previous process left (in its
/// local log, or an older binary's segment files: written and synced for
/// `Durability::Local`, acknowledged, perhaps not uploaded), in id order, each
/// create-if-absent at its own id (its logged parts joined), so the replay that follows
/// finds them. A segment already in the bucket with the same bytes, or with records of the
/// same writer epoch, was uploaded by that process: gathered parts are uploaded only once
/// the last of them is logged, so the bucket's copy holds every acknowledged write of the
/// id, even where the log kept fewer of its parts (a file freed once the id was uploaded)
/// or one more (a part whose sync failed, sent again under the next id). One whose id is
/// taken otherwise means another writer fenced the WAL there before this reopen: that
/// segment and every later local one are lost (an error in the log; the mode's documented
/// risk). The local log's files are removed afterwards.
pub(super) async fn upload_local_segments(
    store: &StoreRef,
    paths: &ShardPaths,
    local_dir: &std::path::Path,
    name: &str,
    replay_after: u64,
) -> Result<()> {
    let dir = local_dir.to_path_buf();
    let local = strata_common::exec::blocking(move || crate::wal::local::recover(&dir))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(Error::io(format!(
            "read the local log in {}",
            local_dir.display()
        )))?;
    let mut lost_from = None;
    for (id, parts) in local {
        if id <= replay_after || lost_from.is_some() {
            continue;
        }
        // Group commits gathered under one id were logged as parts and uploaded as one
        // segment: the same bytes here, so an upload that landed is recognised as ours.
        let parts: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
        let data = Bytes::from(
            Segment::concat(&parts)
                .map_err(|e| Error::Corrupt(format!("local wal segment {id}: {e}")))?,
        );
        let path = paths.wal(id);
        let created = crate::store::objects::create_idempotent(store, &path, &data)
            .await
            .map_err(Error::store(format!("upload local wal {id}")))?;
        if created == Created::Theirs && !uploaded_by_writer_of(store, &path, &parts).await? {
            lost_from = Some(id);
        }
    }
    if let Some(id) = lost_from {
        tracing::error!(shard = %name, from = id, "locally acknowledged WAL segments lost: another writer fenced the WAL before they were uploaded");
    }
    if let Ok(entries) = crate::localfs::list_dir(local_dir).await {
        for path in entries {
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(crate::wal::local::is_local_wal_file)
            {
                let _ = crate::localfs::remove_file(path).await;
            }
        }
    }
    Ok(())
}

/// Whether the WAL segment at `path` holds records written by the writer epoch of the
/// logged `parts` (that writer's own upload of the id, not a newer writer's fence).
async fn uploaded_by_writer_of(
    store: &StoreRef,
    path: &object_store::path::Path,
    parts: &[Bytes],
) -> Result<bool> {
    let Some(first) = parts.first() else {
        return Ok(false);
    };
    let epoch = Segment::decode(first)?.writer_epoch;
    let there = crate::store::objects::get(store, path)
        .await
        .map_err(Error::store(format!("read wal segment {path}")))?
        .bytes()
        .await
        .map_err(Error::store(format!("read wal segment {path}")))?;
    Ok(match Segment::decode(&there) {
        Ok(seg) => seg.writer_epoch == epoch && !seg.records.is_empty(),
        Err(_) => false,
    })
}

/// PUTs a segment at `wal_id`, retrying transient failures with the same id and bytes (ids
/// must stay consecutive for fencing to hold). An object already there with other bytes is
/// a newer writer's fence; one with exactly these bytes is this writer's own (an attempt
/// that landed with its response lost).
pub(super) async fn upload_segment(inner: &GroupCommit, wal_id: u64, data: Bytes) -> Result<()> {
    let path = inner.files.paths.wal(wal_id);
    let mut backoff = Duration::from_millis(50);
    loop {
        match crate::store::objects::create_idempotent(&inner.files.store, &path, &data).await {
            Ok(Created::Mine) => return Ok(()),
            Ok(Created::Theirs) => {
                let fenced = inner.signals.deposed(0);
                tracing::warn!(shard = %inner.name, epoch = inner.epoch, wal_id, "fenced by a newer writer");
                return Err(fenced);
            }
            Err(e) => {
                tracing::warn!(shard = %inner.name, wal_id, error = %e, "wal upload failed; retrying");
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(backoff) => {}
                    _ = inner.signals.cancel.cancelled() => return Err(Error::Closed(inner.name.clone())),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
