//! The local-directory backend: `object_store`'s `LocalFileSystem` plus conditional
//! overwrite (If-Match), which the upstream backend does not implement.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

use crate::error::Error;

const LOCK_STRIPES: usize = 64;

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
            let opts = PutOptions {
                mode: PutMode::Overwrite,
                ..opts
            };
            self.inner.put_opts(location, payload, opts).await
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
                self.conditional_update(location, payload, opts, expected)
                    .await
            }
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
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
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
