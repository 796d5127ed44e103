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
    /// A table that exists already (CREATE TABLE without IF NOT EXISTS).
    AlreadyExists,
    /// A time-travel snapshot older than the retained history.
    SnapshotTooOld,
    /// The query needed more memory than its limit.
    ResourcesExhausted,
    /// The query ran past its timeout.
    Timeout,
    /// The client cancelled the statement while it ran (a PostgreSQL CancelRequest).
    Cancelled,
    /// The engine refused a write for now (too much compaction debt); retry.
    Overloaded,
    /// Another ingest node owns the table's shard (the HTTP layer forwards the request
    /// there; the owner's address is in [`QueryError::owner`]); retry there or later.
    NotOwner,
    /// Anything else: a bug or an unavailable store.
    Internal,
}

impl QueryErrorKind {
    /// Every kind.
    pub const ALL: [QueryErrorKind; 12] = [
        Self::Invalid,
        Self::Unauthenticated,
        Self::Forbidden,
        Self::NotFound,
        Self::AlreadyExists,
        Self::SnapshotTooOld,
        Self::ResourcesExhausted,
        Self::Timeout,
        Self::Cancelled,
        Self::Overloaded,
        Self::NotOwner,
        Self::Internal,
    ];
}

/// A failed query.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    /// The class of failure.
    pub kind: QueryErrorKind,
    /// What went wrong, for people.
    pub message: String,
    /// For [`QueryErrorKind::NotOwner`]: the owning ingest node's HTTP address, if known.
    pub owner: Option<String>,
    /// The PostgreSQL SQLSTATE code, where it says more than the kind's (see
    /// [`crate::postgres::handler::sqlstate`]).
    pub sqlstate: Option<&'static str>,
}

impl QueryError {
    /// A new error.
    pub fn new(kind: QueryErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            owner: None,
            sqlstate: None,
        }
    }

    /// This error, with the SQLSTATE code PostgreSQL clients receive.
    pub fn with_sqlstate(mut self, code: &'static str) -> Self {
        self.sqlstate = Some(code);
        self
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self.kind {
            QueryErrorKind::Invalid => "invalid_query",
            QueryErrorKind::Unauthenticated => "unauthenticated",
            QueryErrorKind::Forbidden => "forbidden",
            QueryErrorKind::NotFound => "not_found",
            QueryErrorKind::AlreadyExists => "already_exists",
            QueryErrorKind::SnapshotTooOld => "snapshot_too_old",
            QueryErrorKind::ResourcesExhausted => "resources_exhausted",
            QueryErrorKind::Timeout => "timeout",
            QueryErrorKind::Cancelled => "cancelled",
            QueryErrorKind::Overloaded => "overloaded",
            QueryErrorKind::NotOwner => "not_owner",
            QueryErrorKind::Internal => "internal",
        }
    }

    /// The kind an error code names (what [`QueryError::code`] answers), as a node that
    /// received another's error over HTTP reads it.
    pub fn kind_of_code(code: &str) -> Option<QueryErrorKind> {
        QueryErrorKind::ALL
            .into_iter()
            .find(|k| QueryError::new(*k, "").code() == code)
    }

    /// The HTTP status.
    pub fn http_status(&self) -> u16 {
        match self.kind {
            QueryErrorKind::Invalid => 400,
            QueryErrorKind::Unauthenticated => 401,
            QueryErrorKind::Forbidden => 403,
            QueryErrorKind::NotFound => 404,
            QueryErrorKind::AlreadyExists => 409,
            QueryErrorKind::Timeout => 408,
            // nginx's "client closed request": the client gave up on the answer.
            QueryErrorKind::Cancelled => 499,
            QueryErrorKind::SnapshotTooOld => 410,
            QueryErrorKind::ResourcesExhausted => 413,
            QueryErrorKind::Overloaded | QueryErrorKind::NotOwner => 503,
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
            QueryErrorKind::AlreadyExists => tonic::Status::already_exists(m),
            QueryErrorKind::SnapshotTooOld => tonic::Status::failed_precondition(m),
            QueryErrorKind::ResourcesExhausted => tonic::Status::resource_exhausted(m),
            QueryErrorKind::Timeout => tonic::Status::deadline_exceeded(m),
            QueryErrorKind::Cancelled => tonic::Status::cancelled(m),
            QueryErrorKind::Overloaded | QueryErrorKind::NotOwner => tonic::Status::unavailable(m),
            QueryErrorKind::Internal => tonic::Status::internal(m),
        }
    }
}

fn engine_kind(e: &strata_engine::Error) -> QueryErrorKind {
    use strata_engine::Error as E;
    match e {
        E::Invalid(_) => QueryErrorKind::Invalid,
        E::TableNotFound(_) => QueryErrorKind::NotFound,
        E::TableExists(_) => QueryErrorKind::AlreadyExists,
        E::SnapshotTooOld { .. } => QueryErrorKind::SnapshotTooOld,
        E::Overloaded { .. } => QueryErrorKind::Overloaded,
        E::NotOwner { .. } => QueryErrorKind::NotOwner,
        _ => QueryErrorKind::Internal,
    }
}

fn engine_error(e: &strata_engine::Error) -> QueryError {
    let mut q = QueryError::new(engine_kind(e), e.to_string());
    if let strata_engine::Error::NotOwner { owner: Some(o), .. } = e {
        q.owner = Some(o.http.clone());
    }
    q
}

impl From<strata_engine::Error> for QueryError {
    fn from(e: strata_engine::Error) -> Self {
        engine_error(&e)
    }
}

impl From<DataFusionError> for QueryError {
    fn from(e: DataFusionError) -> Self {
        let root = e.find_root();
        if let DataFusionError::External(inner) = root
            && let Some(engine) = inner.downcast_ref::<strata_engine::Error>()
        {
            return engine_error(engine);
        }
        // The service's own error, raised inside a query (a timeout, a session function's).
        if let DataFusionError::External(inner) = root
            && let Some(q) = inner.downcast_ref::<QueryError>()
        {
            return q.clone();
        }
        let kind = match root {
            // A pattern that does not compile (`regexp_like(s, '(')`, `~ '['`): the user's.
            DataFusionError::External(inner) if is_regex_error(inner.as_ref()) => {
                QueryErrorKind::Invalid
            }
            DataFusionError::ArrowError(a, _) if matches!(&**a, arrow::error::ArrowError::ExternalError(inner) if is_regex_error(inner.as_ref())) => {
                QueryErrorKind::Invalid
            }
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
                        | arrow::error::ArrowError::ParseError(_)
                        | arrow::error::ArrowError::ArithmeticOverflow(_)
                        | arrow::error::ArrowError::SchemaError(_)
                        | arrow::error::ArrowError::NotYetImplemented(_)
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

/// Whether `e` is a regular expression that did not compile.
fn is_regex_error(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<regex::Error>().is_some() || e.downcast_ref::<regex_syntax::Error>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_names_its_kind() {
        for k in QueryErrorKind::ALL {
            let code = QueryError::new(k, "").code();
            assert_eq!(QueryError::kind_of_code(code), Some(k), "{code}");
        }
        assert_eq!(QueryError::kind_of_code("no_such_code"), None);
    }
}
