//! The shard's SST files: new ids (never reused: the writer's epoch and a counter), their
//! paths in the local directory, and their upload into the bucket. Every task that writes
//! an SST (flush, compaction, promotion, retention) names and uploads it here.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use object_store::{PutMode, PutOptions, PutPayload};
use strata_manifest::{ShardPaths, SstId};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// Where the shard's SSTs live: the local directory and the bucket.
#[derive(Debug)]
pub(crate) struct Files {
    pub(crate) store: StoreRef,
    pub(crate) paths: ShardPaths,
    pub(crate) local_dir: PathBuf,
    epoch: u64,
    next_sst: AtomicU64,
    /// The bucket is a local directory: an upload names the file in place of a payload.
    local_bucket: bool,
}

impl Files {
    pub(crate) fn new(
        store: StoreRef,
        paths: ShardPaths,
        local_dir: PathBuf,
        epoch: u64,
        local_bucket: bool,
    ) -> Self {
        Self {
            store,
            paths,
            local_dir,
            epoch,
            next_sst: AtomicU64::new(1),
            local_bucket,
        }
    }

    pub(crate) fn new_sst_id(&self) -> SstId {
        SstId {
            epoch: self.epoch,
            n: self.next_sst.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn local_sst_path(&self, id: &SstId) -> PathBuf {
        self.local_dir.join(format!("{id}.sst"))
    }

    /// Uploads a finished local SST (create-if-absent: names are never reused). The file is
    /// named as the payload's source, so a local-directory bucket on the same disk links it
    /// rather than writing and syncing a second copy (local SSTs are never written through
    /// again: a new copy is renamed over the name). On the configured local-directory
    /// bucket the file stands for the payload, which is not read back into memory at all.
    pub(crate) async fn upload_sst(&self, id: &SstId, path: &Path) -> Result<()> {
        let mut opts = PutOptions::from(PutMode::Create);
        let payload = if self.local_bucket {
            // The bucket takes the file itself: no read of tens of megabytes back.
            let len = crate::localfs::metadata(path)
                .await
                .map_err(Error::io(format!("stat {}", path.display())))?
                .len();
            opts.extensions
                .insert(strata_objstore::LocalSource::instead_of_payload(path, len));
            PutPayload::new()
        } else {
            let data = crate::localfs::read(path)
                .await
                .map_err(Error::io(format!("read {}", path.display())))?;
            opts.extensions
                .insert(strata_objstore::LocalSource::new(path));
            Bytes::from(data).into()
        };
        crate::store::objects::put_opts(&self.store, &self.paths.sst(id), payload, opts)
            .await
            .map_err(Error::store(format!("upload sst {id}")))?;
        Ok(())
    }
}
