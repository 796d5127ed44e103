//! The engine's detailed error and its coarse kind.

use strata_common::ErrorKind;

/// Result with the engine's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is invalid; nothing was changed.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A table does not exist.
    #[error("table not found: {0}")]
    TableNotFound(String),
    /// A table already exists.
    #[error("table already exists: {0}")]
    TableExists(String),
    /// A newer writer owns the shard; this writer must stop.
    #[error(
        "fenced: shard {shard} is owned by writer epoch {newer} (this writer has epoch {mine})"
    )]
    Fenced {
        /// The shard.
        shard: String,
        /// This writer's epoch.
        mine: u64,
        /// The newer epoch (0 if only known to be newer).
        newer: u64,
    },
    /// Sequence number requested is older than what is retained.
    #[error(
        "snapshot too old: sequence {requested} is below the oldest retained sequence {floor} (compaction keeps history for history_retention_ms while it is under history_bytes_ratio of the shard, and for pinned snapshots)"
    )]
    SnapshotTooOld {
        /// Requested sequence number.
        requested: u64,
        /// Oldest readable sequence number.
        floor: u64,
    },
    /// Too much compaction work is pending: the write was refused and changed nothing.
    /// Retry after a short wait.
    #[error(
        "overloaded: shard {shard} has {runs} sorted runs (limit {limit}) or {frozen} memtables waiting for flush; retry later"
    )]
    Overloaded {
        /// The shard.
        shard: String,
        /// Sorted runs now.
        runs: usize,
        /// The limit.
        limit: usize,
        /// Frozen memtables.
        frozen: usize,
    },
    /// Another ingest node owns the shard, or is expected to take it: send the request
    /// there (the services forward it).
    #[error("{}", not_owner_message(table, *shard, owner.as_ref()))]
    NotOwner {
        /// The table.
        table: String,
        /// The shard.
        shard: u32,
        /// The owner (or the node expected to become it), when known.
        owner: Option<crate::node::NodeInfo>,
    },
    /// The database or shard was closed.
    #[error("closed: {0}")]
    Closed(String),
    /// Stored data is corrupt.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// Local I/O failed.
    #[error("local i/o ({context}): {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The object store failed.
    #[error("object store ({context}): {source}")]
    Store {
        /// What we were doing.
        context: String,
        /// The cause.
        source: object_store::Error,
    },
    /// A versioned chain failed.
    #[error(transparent)]
    Manifest(#[from] strata_manifest::Error),
    /// Building the object store failed.
    #[error(transparent)]
    ObjectStore(#[from] strata_objstore::Error),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

fn not_owner_message(table: &str, shard: u32, owner: Option<&crate::node::NodeInfo>) -> String {
    match owner {
        Some(o) => format!(
            "not the owner: shard {shard} of table {table} is served by ingest node {} (http {}, grpc {})",
            o.name, o.http, o.flight
        ),
        None => format!(
            "not the owner: no ingest node serves shard {shard} of table {table} right now; retry shortly"
        ),
    }
}

impl Error {
    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::TableNotFound(_) => ErrorKind::NotFound,
            Error::TableExists(_) => ErrorKind::AlreadyExists,
            Error::Fenced { .. } => ErrorKind::Fenced,
            Error::SnapshotTooOld { .. } => ErrorKind::SnapshotTooOld,
            Error::Closed(_) => ErrorKind::Closed,
            Error::NotOwner { .. } => ErrorKind::Unavailable,
            Error::Overloaded { .. } => ErrorKind::Overloaded,
            Error::Corrupt(_) => ErrorKind::Data,
            Error::Io { .. } => ErrorKind::Unavailable,
            Error::Store { source, .. } => strata_objstore::error::store_error_kind(source),
            Error::Manifest(e) => e.kind(),
            Error::ObjectStore(e) => e.kind(),
            Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// Names the object a corrupt-data error was found in (other errors as they are).
    pub(crate) fn in_object(self, object: &dyn std::fmt::Display) -> Error {
        match self {
            Error::Corrupt(m) => Error::Corrupt(format!("{object}: {m}")),
            e => e,
        }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    pub(crate) fn store(context: impl Into<String>) -> impl FnOnce(object_store::Error) -> Error {
        let context = context.into();
        move |source| Error::Store { context, source }
    }
}
