//! The local directory's file operations for async code: `std::fs` on the blocking pool
//! through `strata_common::exec` (inline in a deterministic simulation), in place of
//! `tokio::fs`, whose operations always take the pool and so would let a simulation's
//! tasks interleave by the disk's timing.
//!
//! Owns nothing; calls nothing in the engine.

use std::io;
use std::path::{Path, PathBuf};

async fn io<R: Send + 'static>(
    f: impl FnOnce() -> io::Result<R> + Send + 'static,
) -> io::Result<R> {
    strata_common::exec::blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// `std::fs::create_dir_all`.
pub(crate) async fn create_dir_all(p: impl AsRef<Path>) -> io::Result<()> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::create_dir_all(p)).await
}

/// `std::fs::remove_dir_all`.
pub(crate) async fn remove_dir_all(p: impl AsRef<Path>) -> io::Result<()> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::remove_dir_all(p)).await
}

/// `std::fs::remove_file`.
pub(crate) async fn remove_file(p: impl AsRef<Path>) -> io::Result<()> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::remove_file(p)).await
}

/// `std::fs::metadata`.
pub(crate) async fn metadata(p: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::metadata(p)).await
}

/// `std::fs::read`.
pub(crate) async fn read(p: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::read(p)).await
}

/// `std::fs::write`.
pub(crate) async fn write(
    p: impl AsRef<Path>,
    data: impl AsRef<[u8]> + Send + 'static,
) -> io::Result<()> {
    let p = p.as_ref().to_owned();
    io(move || std::fs::write(p, data)).await
}

/// `std::fs::rename`.
pub(crate) async fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref().to_owned(), to.as_ref().to_owned());
    io(move || std::fs::rename(from, to)).await
}

/// The paths of a directory's entries, in name order (an order that does not depend on the
/// file system's).
pub(crate) async fn list_dir(p: impl AsRef<Path>) -> io::Result<Vec<PathBuf>> {
    let p = p.as_ref().to_owned();
    io(move || {
        let mut out = std::fs::read_dir(p)?
            .map(|e| e.map(|e| e.path()))
            .collect::<io::Result<Vec<_>>>()?;
        out.sort();
        Ok(out)
    })
    .await
}
