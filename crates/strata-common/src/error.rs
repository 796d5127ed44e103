//! The coarse error kind every crate's detailed error maps onto. Services translate kinds
//! to HTTP/gRPC statuses in one place; callers decide to retry by kind.

use serde::{Deserialize, Serialize};

/// What a caller can do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or violates the schema; retrying it unchanged fails again.
    Invalid,
    /// The named table, key or object does not exist.
    NotFound,
    /// The object or table being created already exists.
    AlreadyExists,
    /// This writer was superseded by a newer writer epoch; it must stop writing.
    Fenced,
    /// Too much work is queued; retry later.
    Overloaded,
    /// A dependency (the object store) failed transiently; retry later.
    Unavailable,
    /// Stored data failed a checksum or invariant.
    Data,
    /// The requested snapshot is no longer retained.
    SnapshotTooOld,
    /// The component was closed.
    Closed,
    /// A bug.
    Internal,
}

impl ErrorKind {
    /// Whether retrying the same request later can succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Overloaded | ErrorKind::Unavailable)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Data => "data",
            ErrorKind::SnapshotTooOld => "snapshot_too_old",
            ErrorKind::Closed => "closed",
            ErrorKind::Internal => "internal",
        };
        f.write_str(s)
    }
}
