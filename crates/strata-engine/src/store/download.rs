//! Copies an SST object from the bucket into a local file.
//!
//! An SST is tens of megabytes. Read whole into memory and then written out, the copies
//! (and the page faults of a fresh buffer that size) ran on a runtime thread for tens of
//! milliseconds, holding up every task queued behind it, write acknowledgements among
//! them. A local-directory bucket hands over its file, copied file to file on the blocking
//! pool (by the kernel where it can); any other store's byte stream is written through a
//! 1 MiB buffer, the file writes on the blocking pool.
//!
//! A job's merge only reads its input SSTs ([`open_object`]): a local-directory bucket's
//! file is read where it lies, the object being immutable, and only another store's
//! object is copied into scratch space first.

use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetResultPayload, ObjectStoreExt};
use strata_objstore::StoreRef;

use crate::error::{Error, Result};

/// Bytes gathered before each file write of a streamed object.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Writes `object` to `local` (created or truncated) and returns its length. When
/// `expected` is given, a length that differs is an error naming the object, and the file
/// is removed.
pub async fn download(
    store: &StoreRef,
    object: &Path,
    local: &std::path::Path,
    expected: Option<u64>,
) -> Result<u64> {
    let got = store
        .get(object)
        .await
        .map_err(Error::store(format!("download {object}")))?;
    let copied = match got.payload {
        GetResultPayload::File(file, _) => {
            let (local, object, range) = (local.to_path_buf(), object.clone(), got.range);
            strata_common::exec::blocking(move || copy_file(file, range, &local, &object))
                .await
                .map_err(|e| Error::Internal(e.to_string()))
                .and_then(|copied| copied)
        }
        GetResultPayload::Stream(stream) => copy_stream(stream, local, object).await,
    };
    let checked = copied.and_then(|len| match expected {
        Some(expected) if expected != len => Err(Error::Corrupt(format!(
            "{object} is {len} bytes in the bucket, the manifest says {expected}"
        ))),
        _ => Ok(len),
    });
    if checked.is_err() {
        let _ = crate::localfs::remove_file(local).await;
    }
    checked
}

/// Opens the SST `object` for reading. A local-directory bucket hands over its file, read
/// in place (the object is never written again, and the open handle outlives a delete);
/// any other store's object is downloaded to `scratch` first, then unlinked there while
/// the reader keeps it open.
pub async fn open_object(
    store: &StoreRef,
    object: &Path,
    scratch: &std::path::Path,
) -> Result<crate::sst::SstReader> {
    let got = store
        .get(object)
        .await
        .map_err(Error::store(format!("get {object}")))?;
    let name = object.to_string();
    let opened = match got.payload {
        GetResultPayload::File(file, _) => {
            strata_common::exec::blocking(move || crate::sst::SstReader::open_handle(file, &name))
                .await
        }
        GetResultPayload::Stream(stream) => {
            copy_stream(stream, scratch, object).await?;
            let local = scratch.to_path_buf();
            strata_common::exec::blocking(move || {
                let opened = crate::sst::SstReader::open_handle(
                    std::fs::File::open(&local)
                        .map_err(Error::io(format!("open {}", local.display())))?,
                    &name,
                );
                let _ = std::fs::remove_file(&local);
                opened
            })
            .await
        }
    };
    opened.map_err(|e| Error::Internal(e.to_string()))?
}

fn copy_file(
    mut file: std::fs::File,
    range: std::ops::Range<u64>,
    local: &std::path::Path,
    object: &Path,
) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(range.start))
        .map_err(Error::io(format!("download {object}")))?;
    let mut out =
        std::fs::File::create(local).map_err(Error::io(format!("create {}", local.display())))?;
    std::io::copy(&mut file.take(range.end - range.start), &mut out).map_err(Error::io(format!(
        "download {object} to {}",
        local.display()
    )))
}

async fn copy_stream(
    mut stream: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    local: &std::path::Path,
    object: &Path,
) -> Result<u64> {
    let path = local.to_path_buf();
    let mut file = strata_common::exec::blocking(move || std::fs::File::create(path))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(Error::io(format!("create {}", local.display())))?;
    // Whole buffers written on the blocking pool, one at a time.
    let mut buf = Vec::with_capacity(WRITE_BUFFER_BYTES);
    let mut len = 0u64;
    loop {
        let next = stream.next().await;
        let done = next.is_none();
        if let Some(chunk) = next {
            let chunk = chunk.map_err(Error::store(format!("download {object}")))?;
            len += chunk.len() as u64;
            buf.extend_from_slice(&chunk);
        }
        if buf.len() >= WRITE_BUFFER_BYTES || (done && !buf.is_empty()) {
            let data = std::mem::replace(&mut buf, Vec::with_capacity(WRITE_BUFFER_BYTES));
            file = strata_common::exec::blocking(move || {
                use std::io::Write;
                file.write_all(&data).map(|()| file)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(Error::io(format!("write {}", local.display())))?;
        }
        if done {
            return Ok(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    async fn store_with(path: &Path, bytes: &[u8]) -> StoreRef {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        store.put(path, bytes.to_vec().into()).await.unwrap();
        store
    }

    /// A local-directory bucket's SST is read where it lies (its scratch directory does not
    /// even exist, so a copy would fail); a memory store's is copied to scratch space and
    /// unlinked there, the reader keeping it open. Both read the same entries; a damaged
    /// object's error names it.
    #[tokio::test]
    async fn a_job_reads_a_local_buckets_sst_in_place_and_copies_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let built = crate::testkit::sst(dir.path(), 7, b'a', b'z', 3);
        let bytes = std::fs::read(dir.path().join("7.sst")).unwrap();
        let object = Path::from("t/s/sst/7.sst");
        let local: StoreRef =
            Arc::new(strata_objstore::LocalDirStore::new(&dir.path().join("bucket")).unwrap());
        local.put(&object, bytes.clone().into()).await.unwrap();
        let memory = store_with(&object, &bytes).await;
        for (store, what, copies) in [(local, "local directory", false), (memory, "memory", true)] {
            let scratch = dir.path().join(format!("scratch-{what}"));
            if copies {
                std::fs::create_dir_all(&scratch).unwrap();
            }
            let reader = open_object(&store, &object, &scratch.join("job-7.sst"))
                .await
                .unwrap();
            if copies {
                assert_eq!(
                    std::fs::read_dir(&scratch).unwrap().count(),
                    0,
                    "{what}: nothing left in scratch space"
                );
            } else {
                assert!(!scratch.exists(), "{what}: no scratch space touched");
            }
            let got = reader.get(b"q", 10).unwrap();
            assert_eq!(got.len(), 1, "{what}");
            assert_eq!(got[0].seq, 3, "{what}");
            assert_eq!(reader.entries(), built.reader.entries(), "{what}");
        }
        let damaged = Path::from("t/s/sst/8.sst");
        let store = store_with(&damaged, &bytes[..bytes.len() - 3]).await;
        let err = open_object(&store, &damaged, &dir.path().join("scratch-8.sst"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("t/s/sst/8.sst"), "{err}");
    }

    #[tokio::test]
    async fn an_object_larger_than_the_buffer_arrives_whole() {
        let bytes: Vec<u8> = (0..(3 * WRITE_BUFFER_BYTES + 17))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let object = Path::from("t/sst/1.sst");
        let store = store_with(&object, &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("1.sst");
        let len = download(&store, &object, &local, Some(bytes.len() as u64))
            .await
            .unwrap();
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(std::fs::read(&local).unwrap(), bytes);
    }

    #[tokio::test]
    async fn a_length_other_than_the_manifests_is_corrupt_and_leaves_no_file() {
        let object = Path::from("t/sst/2.sst");
        let store = store_with(&object, b"short").await;
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("2.sst");
        let err = download(&store, &object, &local, Some(6))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("t/sst/2.sst") && msg.contains("5 bytes"),
            "{msg}"
        );
        assert!(!local.exists());
    }

    #[tokio::test]
    async fn a_local_directory_bucket_hands_over_its_file() {
        let bucket = tempfile::tempdir().unwrap();
        let store: StoreRef =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(bucket.path()).unwrap());
        let bytes: Vec<u8> = (0..(2 * WRITE_BUFFER_BYTES + 5)).map(|i| i as u8).collect();
        let object = Path::from("t/sst/4.sst");
        store.put(&object, bytes.clone().into()).await.unwrap();
        // The case this test is for: the store gives a file, not a byte stream.
        let got = store.get(&object).await.unwrap();
        assert!(matches!(got.payload, GetResultPayload::File(..)));
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("4.sst");
        assert_eq!(
            download(&store, &object, &local, Some(bytes.len() as u64))
                .await
                .unwrap(),
            bytes.len() as u64
        );
        assert_eq!(std::fs::read(&local).unwrap(), bytes);
        let err = download(&store, &object, &local, Some(1))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{err}");
        assert!(!local.exists());
    }

    #[tokio::test]
    async fn a_missing_object_is_an_error_naming_it() {
        let store: StoreRef = Arc::new(object_store::memory::InMemory::new());
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("3.sst");
        let err = download(&store, &Path::from("t/sst/3.sst"), &local, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("t/sst/3.sst"), "{err}");
        assert!(!local.exists());
    }
}
