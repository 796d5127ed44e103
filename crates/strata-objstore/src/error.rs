//! Errors of the object-store seam.

use strata_common::ErrorKind;

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why building or using a store failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error("invalid object store configuration: {0}")]
    Config(String),
    /// The AWS SDK could not resolve credentials or region.
    #[error("aws configuration: {0}")]
    Aws(String),
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] object_store::Error),
    /// Local I/O failed.
    #[error("local i/o on {path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl Error {
    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config(_) => ErrorKind::Invalid,
            Error::Aws(_) => ErrorKind::Unavailable,
            Error::Store(e) => store_error_kind(e),
            Error::Io { .. } => ErrorKind::Unavailable,
        }
    }
}

/// Maps an `object_store` error onto a coarse kind.
pub fn store_error_kind(e: &object_store::Error) -> ErrorKind {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => ErrorKind::NotFound,
        E::AlreadyExists { .. } => ErrorKind::AlreadyExists,
        E::Precondition { .. } => ErrorKind::AlreadyExists,
        E::InvalidPath { .. } | E::NotSupported { .. } | E::NotImplemented { .. } => {
            ErrorKind::Invalid
        }
        _ => ErrorKind::Unavailable,
    }
}

/// Whether an `object_store` error is transient and the request may be retried.
pub fn is_transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    matches!(e, E::Generic { .. } | E::JoinError { .. })
}
