//! Query errors with a stable code and the HTTP / gRPC status they map to (one place).

use datafusion::error::DataFusionError;

/// Why a query failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryErrorKind {
    /// Bad SQL, unknown column, type error, unsupported statement.
    Invalid,
    /// No API key, or one that is not configured.
    Unauthenticated,
    /// The statement is not allowed here (DDL, COPY, file access, writes on a read-only
    /// service).
    Forbidden,
    /// An unknown table.
    NotFound,
    /// A time-travel snapshot older than the retained history.
    SnapshotTooOld,
    /// The query needed more memory than its limit.
    ResourcesExhausted,
    /// The query ran past its timeout.
    Timeout,
    /// The engine refused a write for now (too much compaction debt); retry.
    Overloaded,
    /// Anything else: a bug or an unavailable store.
    Internal,
}

/// A failed query.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    /// The class of failure.
    pub kind: QueryErrorKind,
    /// What went wrong, for people.
    pub message: String,
}

impl QueryError {
    /// A new error.
    pub fn new(kind: QueryErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self.kind {
            QueryErrorKind::Invalid => "invalid_query",
            QueryErrorKind::Unauthenticated => "unauthenticated",
            QueryErrorKind::Forbidden => "forbidden",
            QueryErrorKind::NotFound => "not_found",
            QueryErrorKind::SnapshotTooOld => "snapshot_too_old",
            QueryErrorKind::ResourcesExhausted => "resources_exhausted",
            QueryErrorKind::Timeout => "timeout",
            QueryErrorKind::Overloaded => "overloaded",
            QueryErrorKind::Internal => "internal",
        }
    }

    /// The HTTP status.
    pub fn http_status(&self) -> u16 {
        match self.kind {
            QueryErrorKind::Invalid => 400,
            QueryErrorKind::Unauthenticated => 401,
            QueryErrorKind::Forbidden => 403,
            QueryErrorKind::NotFound => 404,
            QueryErrorKind::Timeout => 408,
            QueryErrorKind::SnapshotTooOld => 410,
            QueryErrorKind::ResourcesExhausted => 413,
            QueryErrorKind::Overloaded => 503,
            QueryErrorKind::Internal => 500,
        }
    }

    /// The gRPC status.
    pub fn grpc_status(&self) -> tonic::Status {
        let m = format!("{}: {}", self.code(), self.message);
        match self.kind {
            QueryErrorKind::Invalid => tonic::Status::invalid_argument(m),
            QueryErrorKind::Unauthenticated => tonic::Status::unauthenticated(m),
            QueryErrorKind::Forbidden => tonic::Status::permission_denied(m),
            QueryErrorKind::NotFound => tonic::Status::not_found(m),
            QueryErrorKind::SnapshotTooOld => tonic::Status::failed_precondition(m),
            QueryErrorKind::ResourcesExhausted => tonic::Status::resource_exhausted(m),
            QueryErrorKind::Timeout => tonic::Status::deadline_exceeded(m),
            QueryErrorKind::Overloaded => tonic::Status::unavailable(m),
            QueryErrorKind::Internal => tonic::Status::internal(m),
        }
    }
}

fn engine_kind(e: &strata_engine::Error) -> QueryErrorKind {
    use strata_engine::Error as E;
    match e {
        E::Invalid(_) => QueryErrorKind::Invalid,
        E::TableNotFound(_) => QueryErrorKind::NotFound,
        E::SnapshotTooOld { .. } => QueryErrorKind::SnapshotTooOld,
        E::Overloaded { .. } => QueryErrorKind::Overloaded,
        _ => QueryErrorKind::Internal,
    }
}

impl From<strata_engine::Error> for QueryError {
    fn from(e: strata_engine::Error) -> Self {
        Self::new(engine_kind(&e), e.to_string())
    }
}

impl From<DataFusionError> for QueryError {
    fn from(e: DataFusionError) -> Self {
        let root = e.find_root();
        if let DataFusionError::External(inner) = root
            && let Some(engine) = inner.downcast_ref::<strata_engine::Error>()
        {
            return Self::new(engine_kind(engine), engine.to_string());
        }
        let kind = match root {
            DataFusionError::Plan(m) if m.starts_with("table '") && m.ends_with("not found") => {
                QueryErrorKind::NotFound
            }
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::Configuration(_) => QueryErrorKind::Invalid,
            DataFusionError::ResourcesExhausted(_) => QueryErrorKind::ResourcesExhausted,
            DataFusionError::ArrowError(a, _)
                if matches!(
                    **a,
                    arrow::error::ArrowError::DivideByZero
                        | arrow::error::ArrowError::CastError(_)
                        | arrow::error::ArrowError::ComputeError(_)
                        | arrow::error::ArrowError::InvalidArgumentError(_)
                ) =>
            {
                QueryErrorKind::Invalid
            }
            DataFusionError::Execution(_) => QueryErrorKind::Invalid,
            _ => QueryErrorKind::Internal,
        };
        let message = match root {
            // Strip DataFusion's variant prefixes for people; keep the text.
            DataFusionError::Plan(m)
            | DataFusionError::NotImplemented(m)
            | DataFusionError::Execution(m)
            | DataFusionError::ResourcesExhausted(m) => m.clone(),
            other => other.to_string(),
        };
        Self::new(kind, message)
    }
}
