//! The requests themselves: every GET, HEAD, PUT, LIST and DELETE the engine sends to the
//! bucket leaves through one of these functions. They add no policy (retries, timeouts and
//! fault injection are the store's decorators, below); they are the one seam where a
//! request is made, so that the rest of the engine names what it wants (a WAL segment, an
//! SST, a job's lease) and this module alone knows it is an object-store request.
//!
//! Errors stay `object_store`'s where callers tell them apart (not found, already exists,
//! precondition failed); listings, which callers never tell apart, map to the engine's
//! error with the caller's context.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    GetResult, ObjectMeta, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult,
};
use strata_objstore::{Created, StoreRef};

use crate::error::{Error, Result};

/// Every object under `dir`, with its size, ETag and time of last write. `what` names the
/// listing in an error.
pub(crate) async fn list(store: &StoreRef, dir: &Path, what: &str) -> Result<Vec<ObjectMeta>> {
    store
        .list(Some(dir))
        .try_collect()
        .await
        .map_err(Error::store(what.to_string()))
}

/// An object's metadata.
pub(crate) async fn head(store: &StoreRef, path: &Path) -> object_store::Result<ObjectMeta> {
    store.head(path).await
}

/// An object, with its metadata (ETag and version for a later conditional write).
pub(crate) async fn get(store: &StoreRef, path: &Path) -> object_store::Result<GetResult> {
    store.get(path).await
}

/// A whole object's bytes.
pub(crate) async fn read(store: &StoreRef, path: &Path) -> object_store::Result<Bytes> {
    store.get(path).await?.bytes().await
}

/// One byte range of an object.
pub(crate) async fn read_range(
    store: &StoreRef,
    path: &Path,
    range: std::ops::Range<u64>,
) -> object_store::Result<Bytes> {
    store.get_range(path, range).await
}

/// Several byte ranges of one object (the store may coalesce nearby ones).
pub(crate) async fn read_ranges(
    store: &StoreRef,
    path: &Path,
    ranges: &[std::ops::Range<u64>],
) -> object_store::Result<Vec<Bytes>> {
    store.get_ranges(path, ranges).await
}

/// Writes an object, replacing any there.
pub(crate) async fn put(
    store: &StoreRef,
    path: &Path,
    payload: PutPayload,
) -> object_store::Result<PutResult> {
    store.put(path, payload).await
}

/// Writes an object under a condition (create-if-absent, or replace a known version) and
/// extensions (a local source file).
pub(crate) async fn put_opts(
    store: &StoreRef,
    path: &Path,
    payload: PutPayload,
    opts: PutOptions,
) -> object_store::Result<PutResult> {
    store.put_opts(path, payload, opts).await
}

/// Creates an object if no object has its name (`AlreadyExists` otherwise).
pub(crate) async fn create(
    store: &StoreRef,
    path: &Path,
    payload: PutPayload,
) -> object_store::Result<PutResult> {
    put_opts(store, path, payload, PutOptions::from(PutMode::Create)).await
}

/// Creates an object, or finds it already holding exactly `data` (an earlier attempt of
/// ours whose response was lost): whose the object is.
pub(crate) async fn create_idempotent(
    store: &StoreRef,
    path: &Path,
    data: &Bytes,
) -> object_store::Result<Created> {
    strata_objstore::create_or_match(store.as_ref(), path, data).await
}

/// A streaming upload (multipart past its buffer) for a file written as it is encoded.
pub(crate) fn upload(store: &StoreRef, path: Path) -> object_store::buffered::BufWriter {
    object_store::buffered::BufWriter::new(store.clone(), path)
}

/// Deletes an object (deleting one already gone is `NotFound`, which callers ignore).
pub(crate) async fn delete(store: &StoreRef, path: &Path) -> object_store::Result<()> {
    store.delete(path).await
}

/// Deletes `paths` through one `delete_stream` (the store deletes them concurrently, in
/// any order; what is already gone counts as deleted); how many.
pub(crate) async fn delete_all(store: &StoreRef, paths: Vec<Path>) -> Result<u64> {
    if paths.is_empty() {
        return Ok(0);
    }
    let mut done = store.delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
    let mut deleted = 0;
    while let Some(r) = done.next().await {
        match r {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
            Err(e) => return Err(Error::store("delete unreferenced objects")(e)),
        }
    }
    Ok(deleted)
}
