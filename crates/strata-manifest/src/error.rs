//! Errors of versioned chains.

use strata_common::ErrorKind;

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why reading or committing a version failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another writer committed this version (or a later one) first.
    #[error("conflict: version {version} of {dir} was committed by another writer")]
    Conflict {
        /// The chain directory.
        dir: String,
        /// The version we tried to create.
        version: u64,
    },
    /// The proposed version breaks an invariant; nothing was written.
    #[error("invariant violated in {dir} version {version}: {reason}")]
    Invariant {
        /// The chain directory.
        dir: String,
        /// The version checked.
        version: u64,
        /// What is wrong.
        reason: String,
    },
    /// A stored version could not be decoded.
    #[error("corrupt version object {path}: {reason}")]
    Corrupt {
        /// The object.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The object store failed.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
}

impl Error {
    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Conflict { .. } => ErrorKind::AlreadyExists,
            Error::Invariant { .. } => ErrorKind::Internal,
            Error::Corrupt { .. } => ErrorKind::Data,
            Error::Store(e) => strata_objstore::error::store_error_kind(e),
        }
    }
}
