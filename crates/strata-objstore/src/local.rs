//! The local-directory backend: `object_store`'s `LocalFileSystem` for reads, listings and
//! deletes, with writes of its own that are durable when they return (the upstream backend
//! renames an unsynced file into place, so an acknowledged object could be lost, or left
//! empty, by an operating-system crash), and conditional overwrite (If-Match), which the
//! upstream backend does not implement.
//!
//! A write goes to a staging file beside the object (`name#N`, which listings skip), is
//! `fsync`ed, moved into place (a rename, or a hard link when the object must not exist
//! yet), and the directory holding it is `fsync`ed, as is every directory the write created.
//! So an object a put, a completed multipart upload, a copy or a rename has answered for is
//! on the disk whole, under its name; one not answered for is either absent or whole.
//!
//! A create-only put whose payload is a local file that will not change (a [`LocalSource`],
//! an SST the engine has just written and synced on the same disk) is a hard link of that
//! file instead of a second copy: the object is durable after the link and a directory
//! `fsync`, without writing and syncing tens of megabytes again.
//!
//! A small create-only put (a WAL segment, a job's spec or result) fills a spare: an
//! unnamed file (Linux's `O_TMPFILE`) made ahead of time in the root directory, then
//! `fsync`ed and given its name with one link. Creating a named file in a directory a sync
//! has just committed costs 50-350 µs on ext4 here, which a durable one-row write would
//! otherwise pay on its critical path. A spare has no name until its put links it, so a
//! crash leaves nothing of it behind and listings never see one; where the file system
//! cannot make or link unnamed files, puts stage named files as above.
//!
//! Large writes (multipart parts, payloads over [`BULK_SLICE_BYTES`]) reach the disk a
//! slice at a time: each slice is written and `fdatasync`ed during a [`bulk_turn`], the
//! process's one turn at the disk for bulk data (the engine's SST builder takes it too),
//! so at most about one slice of bulk data is queued at the device when a small durable
//! write (a WAL segment, a manifest) syncs. Up to eight 10 MiB parts of a job's Parquet
//! output used to be synced at once, and a WAL segment synced meanwhile waited behind
//! 80 MiB of writes (about 200 ms on a disk writing 380 MB/s).

use std::io::ErrorKind;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result, UploadPart,
};

use crate::error::Error;

const LOCK_STRIPES: usize = 64;

/// Bytes of a large write synced at a time (see the module doc). Payloads no larger are
/// written whole and synced once, without a [`bulk_turn`]: a WAL segment never waits for
/// one.
pub const BULK_SLICE_BYTES: usize = 2 << 20;

static BULK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The process's turn at the disk for bulk data: held while one slice (at most
/// [`BULK_SLICE_BYTES`]) of a large file is written and synced, so slices of several files
/// (a job's Parquet parts, a flush's or a compaction's SST) never queue at the device
/// together ahead of a small durable write. Call it on a blocking thread.
pub fn bulk_turn() -> parking_lot::MutexGuard<'static, ()> {
    BULK.lock()
}

/// A directory standing in for a bucket.
///
/// `PutMode::Update` is implemented as: take an exclusive lock (an in-process mutex for the
/// object's stripe plus an OS file lock shared by every process using the same directory),
/// compare the current e-tag, then write through the atomic rename of `LocalFileSystem`.
#[derive(Debug)]
pub struct LocalDirStore {
    inner: LocalFileSystem,
    root: std::path::PathBuf,
    stripes: Arc<Vec<tokio::sync::Mutex<()>>>,
    lock_file: std::path::PathBuf,
    syncs: Arc<AtomicU64>,
    spares: Arc<Spares>,
}

impl LocalDirStore {
    /// Opens (creating if needed) the directory `root`.
    pub fn new(root: &std::path::Path) -> crate::Result<Self> {
        std::fs::create_dir_all(root).map_err(|source| Error::Io {
            path: root.display().to_string(),
            source,
        })?;
        let root = root.canonicalize().map_err(|source| Error::Io {
            path: root.display().to_string(),
            source,
        })?;
        let inner = LocalFileSystem::new_with_prefix(&root)?.with_automatic_cleanup(true);
        // The lock file lives outside the root so it never shows up in listings.
        let lock_dir = std::env::temp_dir().join("strata-locks");
        std::fs::create_dir_all(&lock_dir).map_err(|source| Error::Io {
            path: lock_dir.display().to_string(),
            source,
        })?;
        let tag = xxhash_rust::xxh3::xxh3_64(root.to_string_lossy().as_bytes());
        Ok(Self {
            inner,
            lock_file: lock_dir.join(format!("{tag:016x}.lock")),
            root,
            syncs: Arc::default(),
            spares: Arc::default(),
            stripes: Arc::new(
                (0..LOCK_STRIPES)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
            ),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// How many `fsync`s of files and directories this store's writes have made.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// How many puts took a spare unnamed file (see the module doc), refused ones included.
    pub fn spares_taken(&self) -> u64 {
        self.spares.taken.load(Ordering::Relaxed)
    }

    /// Spare unnamed files ready for the next small create-only puts.
    pub fn spares_ready(&self) -> usize {
        self.spares.files.lock().len()
    }

    /// Writes `payload` at `location`, durably (see the module doc); `create_only` refuses
    /// an existing object with `AlreadyExists`.
    async fn durable_put(
        &self,
        location: &Path,
        payload: PutPayload,
        create_only: bool,
        source: Option<LocalSource>,
    ) -> Result<PutResult> {
        let dest = self.inner.path_to_filesystem(location)?;
        let syncs = self.syncs.clone();
        let root = self.root.clone();
        let spares = self.spares.clone();
        let put = blocking(move || {
            if let Some(source) = source.as_ref().filter(|_| create_only) {
                let len = source.len_with(&payload);
                if let Some(linked) = link_source(&root, source.path(), &dest, len, &syncs) {
                    return linked;
                }
            }
            // Not linked: the file's bytes when it stands for an empty payload.
            let payload = match &source {
                Some(source) => source
                    .payload_or_file(payload)
                    .map_err(|e| io_error(&dest, e))?,
                None => payload,
            };
            if create_only
                && payload.content_length() <= BULK_SLICE_BYTES
                && let Some(spare) = spares.take()
                && let Some(put) = put_unnamed(&root, spare, &payload, &dest, &syncs, &spares)?
            {
                return Ok(put);
            }
            let (file, staging) = open_staging(&root, &dest, &syncs)?;
            if let Err(e) = write_sliced(&file, &payload, 0, false, &syncs) {
                let _ = std::fs::remove_file(&staging);
                return Err(io_error(&dest, e));
            }
            publish(&file, &staging, &dest, create_only, &syncs)
        })
        .await;
        if create_only {
            self.spares.refill(&self.root);
        }
        put
    }

    /// `fsync`s the directories holding `paths` (after a copy or a rename).
    async fn sync_parents(&self, paths: Vec<Path>) -> Result<()> {
        let dirs = paths
            .iter()
            .map(|p| self.inner.path_to_filesystem(p))
            .collect::<Result<Vec<_>>>()?;
        let syncs = self.syncs.clone();
        blocking(move || {
            for dest in dirs {
                sync_parent(&dest, &syncs)?;
            }
            Ok(())
        })
        .await
    }

    async fn conditional_update(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
        expected: object_store::UpdateVersion,
    ) -> Result<PutResult> {
        let stripe =
            xxhash_rust::xxh3::xxh3_64(location.as_ref().as_bytes()) as usize % LOCK_STRIPES;
        let _in_process = self.stripes[stripe].lock().await;
        let lock_file = self.lock_file.clone();
        let os_lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_file)?;
            f.lock()?;
            Ok(f)
        })
        .await
        .map_err(|e| object_store::Error::JoinError { source: e })?
        .map_err(|e| object_store::Error::Generic {
            store: "LocalDirStore",
            source: Box::new(e),
        })?;
        let result = async {
            let current = match self.inner.head(location).await {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { path, source }) => {
                    return Err(object_store::Error::Precondition { path, source });
                }
                Err(e) => return Err(e),
            };
            if current.e_tag != expected.e_tag {
                return Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: format!(
                        "e-tag {:?} does not match expected {:?}",
                        current.e_tag, expected.e_tag
                    )
                    .into(),
                });
            }
            check_options(&opts)?;
            self.durable_put(location, payload, false, None).await
        }
        .await;
        drop(os_lock); // closing the file releases the OS lock
        result
    }
}

impl std::fmt::Display for LocalDirStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalDirStore({})", self.root.display())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for LocalDirStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        match opts.mode.clone() {
            PutMode::Update(expected) => {
                let payload = match opts.extensions.get::<LocalSource>().cloned() {
                    Some(source) => {
                        let dest = self.inner.path_to_filesystem(location)?;
                        blocking(move || {
                            source
                                .payload_or_file(payload)
                                .map_err(|e| io_error(&dest, e))
                        })
                        .await?
                    }
                    None => payload,
                };
                self.conditional_update(location, payload, opts, expected)
                    .await
            }
            PutMode::Create => {
                check_options(&opts)?;
                let source = opts.extensions.get::<LocalSource>().cloned();
                self.durable_put(location, payload, true, source).await
            }
            PutMode::Overwrite => {
                check_options(&opts)?;
                let source = opts.extensions.get::<LocalSource>().cloned();
                self.durable_put(location, payload, false, source).await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(object_store::Error::NotImplemented {
                operation: "`put_multipart_opts` with `opts.attributes` specified".into(),
                implementer: self.to_string(),
            });
        }
        let dest = self.inner.path_to_filesystem(location)?;
        let syncs = self.syncs.clone();
        let root = self.root.clone();
        let (file, staging) =
            blocking(move || open_staging(&root, &dest, &syncs).map(|s| (s, dest)))
                .await
                .map(|((file, staging), dest)| (Arc::new(file), Some((staging, dest))))?;
        Ok(Box::new(DurableUpload {
            file,
            paths: staging,
            offset: 0,
            failed: Arc::default(),
            syncs: self.syncs.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        // A hard link of an object that is already durable: only the new name needs syncing.
        self.inner.copy_opts(from, to, options).await?;
        self.sync_parents(vec![to.clone()]).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await?;
        self.sync_parents(vec![to.clone(), from.clone()]).await
    }
}

/// A put's extension (`PutOptions::extensions`) saying that the payload is also the whole
/// content of this local file, which nothing will write to again. A local-directory bucket
/// on the same file system makes a create-only put of it a hard link of the file (after
/// syncing it) instead of a second copy of the bytes; any other backend, and this one when
/// the link cannot be made (another file system, a length that differs), writes the payload
/// as usual.
///
/// Made with [`LocalSource::instead_of_payload`], the put carries no payload at all and the
/// file stands for it (the caller saves reading tens of megabytes it already wrote): only a
/// local-directory bucket under decorators that pass extensions on may be given such a put,
/// and it writes the file's bytes when it cannot link.
///
/// The file and the object then share their bytes: whoever holds the file must replace it
/// only by renaming a new file over its name, never by writing through it.
#[derive(Clone, Debug)]
pub struct LocalSource {
    path: Arc<PathBuf>,
    /// The file's length, when the put carries no payload and the file stands for it.
    omitted: Option<u64>,
}

impl LocalSource {
    /// The extension for the file at `path`, whose bytes the put's payload also carries.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: Arc::new(path.into()),
            omitted: None,
        }
    }

    /// The extension for the file at `path`, `len` bytes long, standing for a payload the
    /// put leaves empty (see the type's doc for which stores may be given it).
    pub fn instead_of_payload(path: impl Into<PathBuf>, len: u64) -> Self {
        Self {
            path: Arc::new(path.into()),
            omitted: Some(len),
        }
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The length of the object a put with these options writes: the payload's, or the
    /// file's when the file stands for an empty payload.
    pub fn put_len(opts: &PutOptions, payload: &PutPayload) -> u64 {
        match opts.extensions.get::<LocalSource>() {
            Some(source) => source.len_with(payload),
            None => payload.content_length() as u64,
        }
    }

    /// The object's length with this extension and `payload`.
    fn len_with(&self, payload: &PutPayload) -> u64 {
        match self.omitted {
            Some(len) if payload.content_length() == 0 => len,
            _ => payload.content_length() as u64,
        }
    }

    /// The bytes a put with these options writes: `payload`, or the file's bytes (checked
    /// against the length the extension gave) when the file stands for an empty payload.
    /// Blocking file I/O.
    pub fn payload_of(opts: &PutOptions, payload: PutPayload) -> std::io::Result<PutPayload> {
        match opts.extensions.get::<LocalSource>() {
            Some(source) => source.payload_or_file(payload),
            None => Ok(payload),
        }
    }

    fn payload_or_file(&self, payload: PutPayload) -> std::io::Result<PutPayload> {
        match self.omitted {
            Some(len) if payload.content_length() == 0 && len > 0 => {
                let bytes = std::fs::read(self.path.as_path())?;
                if bytes.len() as u64 != len {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        format!(
                            "{} is {} bytes, the put said {len}",
                            self.path.display(),
                            bytes.len()
                        ),
                    ));
                }
                Ok(Bytes::from(bytes).into())
            }
            _ => Ok(payload),
        }
    }
}

/// Publishes `source` at `dest` as a hard link, create-only and durable: the file is synced
/// (cheap when its writer already did), its modification time set to now (the object's age,
/// which garbage collection's minimum age counts from, starts at the put), the link made and
/// the directory synced. `None` when the link cannot stand in for writing the payload (the
/// file is missing or of another length, or on another file system): the caller writes it.
fn link_source(
    root: &std::path::Path,
    source: &std::path::Path,
    dest: &std::path::Path,
    len: u64,
    syncs: &AtomicU64,
) -> Option<Result<PutResult>> {
    let file = std::fs::File::open(source).ok()?;
    if file.metadata().ok()?.len() != len {
        return None;
    }
    file.sync_all().ok()?;
    syncs.fetch_add(1, Ordering::Relaxed);
    // The wall clock the file system stamps every other write of this backend with; no
    // engine clock has a say in an object's time.
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now();
    file.set_modified(now).ok()?;
    let mut linked = std::fs::hard_link(source, dest);
    if linked
        .as_ref()
        .is_err_and(|e| e.kind() == ErrorKind::NotFound)
    {
        if let Err(e) = create_dirs(root, dest, syncs) {
            return Some(Err(e));
        }
        linked = std::fs::hard_link(source, dest);
    }
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Some(Err(object_store::Error::AlreadyExists {
                path: dest.display().to_string(),
                source: Box::new(e),
            }));
        }
        // Another file system (EXDEV), or a file system without hard links.
        Err(_) => return None,
    }
    Some(
        sync_parent(dest, syncs)
            .and_then(|()| std::fs::metadata(dest).map_err(|e| io_error(dest, e)))
            .map(|meta| PutResult {
                e_tag: Some(e_tag(&meta)),
                version: None,
            }),
    )
}

/// A multipart upload into a staging file, each part synced as it is written, the whole made
/// durable and moved into place by
/// [`MultipartUpload::complete`]; the staging file is removed if the upload is aborted or
/// dropped unfinished.
#[derive(Debug)]
struct DurableUpload {
    file: Arc<std::fs::File>,
    /// (staging file, destination) until completed or aborted.
    paths: Option<(PathBuf, PathBuf)>,
    offset: u64,
    /// A part failed to write: completing would publish a hole.
    failed: Arc<AtomicBool>,
    syncs: Arc<AtomicU64>,
}

#[async_trait]
impl MultipartUpload for DurableUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let file = self.file.clone();
        let failed = self.failed.clone();
        let syncs = self.syncs.clone();
        let dest = self
            .paths
            .as_ref()
            .map(|(_, d)| d.clone())
            .unwrap_or_default();
        Box::pin(blocking(move || {
            // Each part on the disk as it arrives, a slice at a time under the bulk gate,
            // so the final sync carries one slice, not the whole object, and parts in
            // flight at once never queue more than a slice ahead of a WAL segment's sync.
            if let Err(e) = write_sliced(&file, &data, offset, true, &syncs) {
                failed.store(true, Ordering::Relaxed);
                return Err(io_error(&dest, e));
            }
            Ok(())
        }))
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let (staging, dest) = self.paths.take().ok_or(object_store::Error::Generic {
            store: "LocalDirStore",
            source: "multipart upload already completed or aborted".into(),
        })?;
        if self.failed.load(Ordering::Relaxed) {
            let _ = std::fs::remove_file(&staging);
            return Err(object_store::Error::Generic {
                store: "LocalDirStore",
                source: format!("a part of {} failed to write", dest.display()).into(),
            });
        }
        let file = self.file.clone();
        let syncs = self.syncs.clone();
        blocking(move || publish(&file, &staging, &dest, false, &syncs)).await
    }

    async fn abort(&mut self) -> Result<()> {
        if let Some((staging, dest)) = self.paths.take() {
            blocking(move || std::fs::remove_file(&staging).map_err(|e| io_error(&dest, e)))
                .await?;
        }
        Ok(())
    }
}

impl Drop for DurableUpload {
    fn drop(&mut self) {
        if let Some((staging, _)) = self.paths.take() {
            let _ = std::fs::remove_file(staging);
        }
    }
}

/// Spare unnamed files kept ready for small create-only puts (see the module doc).
const SPARE_FILES: usize = 2;

/// The store's spare unnamed files.
#[derive(Debug, Default)]
struct Spares {
    files: parking_lot::Mutex<Vec<std::fs::File>>,
    /// A refill is running on the blocking pool.
    refilling: AtomicBool,
    /// The file system cannot make or link unnamed files: puts stage named ones.
    unsupported: AtomicBool,
    /// Puts that took a spare.
    taken: AtomicU64,
}

impl Spares {
    fn take(&self) -> Option<std::fs::File> {
        let file = self.files.lock().pop();
        if file.is_some() {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
        file
    }

    /// Tops the spares up to [`SPARE_FILES`] on the blocking pool, unless a refill is
    /// already running or the file system has no unnamed files. Without a tokio runtime
    /// it does nothing: the next put stages a named file.
    fn refill(self: &Arc<Self>, root: &std::path::Path) {
        if self.unsupported.load(Ordering::Relaxed)
            || self.files.lock().len() >= SPARE_FILES
            || self.refilling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refilling.store(false, Ordering::Release);
            return;
        };
        let (spares, root) = (self.clone(), root.to_path_buf());
        runtime.spawn_blocking(move || {
            while spares.files.lock().len() < SPARE_FILES {
                match unnamed_file(&root) {
                    Ok(file) => spares.files.lock().push(file),
                    Err(e) => {
                        tracing::debug!(root = %root.display(), "no spare unnamed file, puts stage named ones: {e}");
                        if cannot_unnamed(&e) {
                            spares.unsupported.store(true, Ordering::Relaxed);
                        }
                        break;
                    }
                }
            }
            spares.refilling.store(false, Ordering::Release);
        });
    }
}

/// A new unnamed file in `dir` (`O_TMPFILE`): no directory entry until it is linked.
#[cfg(target_os = "linux")]
fn unnamed_file(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(target_os = "linux"))]
fn unnamed_file(_dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    Err(ErrorKind::Unsupported.into())
}

/// Gives the unnamed `file` the name `dest`; `AlreadyExists` when the name is taken.
#[cfg(target_os = "linux")]
fn link_unnamed(file: &std::fs::File, dest: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::linkat(
        rustix::fs::CWD,
        fd_path.as_str(),
        rustix::fs::CWD,
        dest,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    )?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn link_unnamed(_file: &std::fs::File, _dest: &std::path::Path) -> std::io::Result<()> {
    Err(ErrorKind::Unsupported.into())
}

/// A create-only put through a spare: `payload` written into the unnamed `file` and
/// `fsync`ed, the file linked at `dest` (creating its missing directories durably), the
/// directory `fsync`ed. `None` when the link is refused for a reason other than the name
/// being taken (the caller stages a named file instead); when the reason means unnamed
/// files cannot be linked here at all (another device, no permission, no support), later
/// puts stop taking spares.
fn put_unnamed(
    root: &std::path::Path,
    file: std::fs::File,
    payload: &PutPayload,
    dest: &std::path::Path,
    syncs: &AtomicU64,
    spares: &Spares,
) -> Result<Option<PutResult>> {
    let meta = write_sliced(&file, payload, 0, false, syncs)
        .and_then(|()| synced_meta(&file, syncs))
        .map_err(|e| io_error(dest, e))?;
    let mut linked = link_unnamed(&file, dest);
    if linked
        .as_ref()
        .is_err_and(|e| e.kind() == ErrorKind::NotFound)
    {
        create_dirs(root, dest, syncs)?;
        linked = link_unnamed(&file, dest);
    }
    match linked {
        Ok(()) => {
            sync_parent(dest, syncs)?;
            Ok(Some(PutResult {
                e_tag: Some(e_tag(&meta)),
                version: None,
            }))
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(already_exists(dest, e)),
        Err(e) => {
            if cannot_unnamed(&e) {
                spares.unsupported.store(true, Ordering::Relaxed);
            }
            tracing::debug!(dest = %dest.display(), "an unnamed file could not be linked, staging a named one: {e}");
            Ok(None)
        }
    }
}

/// Whether `e` means unnamed files cannot be made or linked here at all (another device,
/// no permission, no `O_TMPFILE` support), not that this attempt failed (a full disk, too
/// many open files, a directory removed meanwhile): then puts stop taking spares.
fn cannot_unnamed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::CrossesDevices
            | ErrorKind::PermissionDenied
            | ErrorKind::Unsupported
            | ErrorKind::InvalidInput
            | ErrorKind::IsADirectory
    )
}

/// `fsync`s a written file (counted in `syncs`); its metadata after the sync.
fn synced_meta(file: &std::fs::File, syncs: &AtomicU64) -> std::io::Result<std::fs::Metadata> {
    file.sync_all()?;
    syncs.fetch_add(1, Ordering::Relaxed);
    file.metadata()
}

fn already_exists(dest: &std::path::Path, e: std::io::Error) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: dest.display().to_string(),
        source: Box::new(e),
    }
}

/// Runs file-system work on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| object_store::Error::JoinError { source: e })?
}

/// Writes `payload` into `file` from `offset`. A payload of at most [`BULK_SLICE_BYTES`]
/// (unless `bulk_always`) is written whole and left for the caller to sync. A larger one is
/// written and synced a slice at a time, each slice during a [`bulk_turn`].
fn write_sliced(
    file: &std::fs::File,
    payload: &PutPayload,
    mut offset: u64,
    bulk_always: bool,
    syncs: &AtomicU64,
) -> std::io::Result<()> {
    if !bulk_always && payload.content_length() <= BULK_SLICE_BYTES {
        for chunk in payload.iter() {
            file.write_all_at(chunk, offset)?;
            offset += chunk.len() as u64;
        }
        return Ok(());
    }
    let mut turn = None;
    let mut unsynced = 0usize;
    for chunk in payload.iter() {
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let n = rest.len().min(BULK_SLICE_BYTES - unsynced);
            if turn.is_none() {
                turn = Some(bulk_turn());
            }
            file.write_all_at(&rest[..n], offset)?;
            offset += n as u64;
            unsynced += n;
            rest = &rest[n..];
            if unsynced == BULK_SLICE_BYTES {
                file.sync_data()?;
                syncs.fetch_add(1, Ordering::Relaxed);
                unsynced = 0;
                turn = None;
            }
        }
    }
    if unsynced > 0 {
        file.sync_data()?;
        syncs.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Makes a written staging file durable and moves it into place ([`place`]); its e-tag.
fn publish(
    file: &std::fs::File,
    staging: &std::path::Path,
    dest: &std::path::Path,
    create_only: bool,
    syncs: &AtomicU64,
) -> Result<PutResult> {
    let meta = match synced_meta(file, syncs) {
        Ok(meta) => meta,
        Err(e) => {
            let _ = std::fs::remove_file(staging);
            return Err(io_error(dest, e));
        }
    };
    place(staging, dest, create_only, syncs)?;
    Ok(PutResult {
        e_tag: Some(e_tag(&meta)),
        version: None,
    })
}

/// Refuses what this backend cannot store (object attributes), as the upstream one does.
fn check_options(opts: &PutOptions) -> Result<()> {
    if opts.attributes.is_empty() {
        Ok(())
    } else {
        Err(object_store::Error::NotImplemented {
            operation: "`put_opts` with `opts.attributes` specified".into(),
            implementer: "LocalDirStore".into(),
        })
    }
}

fn io_error(path: &std::path::Path, source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalDirStore",
        source: Box::new(Error::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// A new staging file `dest#N` (the name `LocalFileSystem`'s listings skip), creating
/// `dest`'s missing directories durably.
fn open_staging(
    root: &std::path::Path,
    dest: &std::path::Path,
    syncs: &AtomicU64,
) -> Result<(std::fs::File, PathBuf)> {
    let mut n = 1u64;
    loop {
        let mut staging = dest.as_os_str().to_owned();
        staging.push(format!("#{n}"));
        let staging = PathBuf::from(staging);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staging)
        {
            Ok(f) => return Ok((f, staging)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => create_dirs(root, dest, syncs)?,
            Err(e) => return Err(io_error(&staging, e)),
        }
    }
}

/// Creates the missing directories above `dest` (inside `root`) and makes each new entry
/// durable by syncing the directory that holds it.
fn create_dirs(root: &std::path::Path, dest: &std::path::Path, syncs: &AtomicU64) -> Result<()> {
    let Some(parent) = dest.parent() else {
        return Ok(());
    };
    let missing: Vec<&std::path::Path> = parent
        .ancestors()
        .take_while(|d| d.starts_with(root) && *d != root && !d.exists())
        .collect();
    std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    for dir in missing.iter().rev() {
        sync_parent(dir, syncs)?;
    }
    Ok(())
}

/// Moves a synced staging file to `dest` (a rename; with `create_only` a hard link, so an
/// existing object is refused) and syncs the directory, so the name is durable too.
fn place(
    staging: &std::path::Path,
    dest: &std::path::Path,
    create_only: bool,
    syncs: &AtomicU64,
) -> Result<()> {
    let moved = if create_only {
        let linked = std::fs::hard_link(staging, dest);
        let _ = std::fs::remove_file(staging);
        linked
    } else {
        std::fs::rename(staging, dest)
    };
    match moved {
        Ok(()) => sync_parent(dest, syncs),
        Err(e) => {
            let _ = std::fs::remove_file(staging);
            if e.kind() == ErrorKind::AlreadyExists {
                Err(already_exists(dest, e))
            } else {
                Err(io_error(dest, e))
            }
        }
    }
}

/// `fsync`s the directory holding `path`.
fn sync_parent(path: &std::path::Path, syncs: &AtomicU64) -> Result<()> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))?;
    syncs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// The e-tag `LocalFileSystem` gives the same file (inode, modification time in
/// microseconds, size), so a put's e-tag matches what a later HEAD or GET reports.
fn e_tag(meta: &std::fs::Metadata) -> String {
    let inode = std::os::unix::fs::MetadataExt::ino(meta);
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("{inode:x}-{mtime:x}-{:x}", meta.len())
}
