//! Bulk ingest: a stream of Arrow batches upserted into one table, as Arrow Flight SQL's
//! `CommandStatementIngest` carries it (ADBC's bulk ingest, `strata load`).
//!
//! Each batch is one atomic write through the ingest path (the same validation, WAL and
//! durability as the data API); a stream that fails part-way leaves the batches before the
//! failure written, and loading the same rows again is harmless (upserts by key). While
//! the engine refuses writes as overloaded (compaction debt), the stream waits and retries
//! the batch instead of failing, so a bulk load slows down to what compaction sustains.
//!
//! In a cluster, an ingest for a table another ingest node owns is sent there (as HTTP
//! and SQL writes are) when the service forwards writes
//! ([`QueryService::with_forward_rows`]): the stream goes on in slices of about
//! [`FORWARD_SLICE_BYTES`], each one upsert on the owner.

use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use futures::{Stream, StreamExt};

use crate::auth::{Principal, Scope, qualified, split_name};
use crate::error::{QueryError, QueryErrorKind};
use crate::service::QueryService;

/// What to do when the table does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfMissing {
    /// Fail with `not_found` (the default).
    #[default]
    Fail,
    /// Create it from the stream's schema with the given primary key (admin scope).
    Create,
}

/// What to do when the table exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfExists {
    /// Upsert the rows (the default).
    #[default]
    Append,
    /// Fail.
    Fail,
}

/// One bulk ingest.
#[derive(Debug, Clone, Default)]
pub struct IngestRequest {
    /// The table (`ns.t` or `t`).
    pub table: String,
    /// Its namespace when given apart (Flight SQL's `schema`).
    pub namespace: Option<String>,
    /// When the table is missing.
    pub if_missing: IfMissing,
    /// When the table exists.
    pub if_exists: IfExists,
    /// Primary key columns for [`IfMissing::Create`].
    pub primary_key: Vec<String>,
    /// The caller's `Authorization` value, passed on when another ingest node owns the
    /// table and the rows are sent there.
    pub authorization: Option<String>,
}

/// The most Arrow memory a slice of a forwarded ingest holds (one request to the owner).
pub const FORWARD_SLICE_BYTES: usize = 16 << 20;

/// How long one batch may wait for an overloaded engine before the ingest fails.
const OVERLOAD_WAIT: Duration = Duration::from_secs(120);

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::new(QueryErrorKind::Invalid, m)
}

impl QueryService {
    /// Upserts every batch of `batches` into the request's table as `who`; the number of
    /// rows written.
    pub async fn ingest_as<S>(
        &self,
        req: &IngestRequest,
        batches: S,
        who: &Principal,
    ) -> Result<u64, QueryError>
    where
        S: Stream<Item = Result<RecordBatch, QueryError>> + Send,
    {
        if !self.is_writable() {
            return Err(QueryError::new(
                QueryErrorKind::Forbidden,
                "writes go to the ingest node, not to this query service",
            ));
        }
        let name = match &req.namespace {
            Some(ns) if !ns.is_empty() => qualified(ns, &req.table),
            _ => req.table.clone(),
        };
        let (ns, _) = split_name(&name);
        who.check(ns, Scope::Write)?;
        let mut batches = std::pin::pin!(batches);
        let first = batches.next().await.transpose()?;
        let db = self.db();
        let t = match db.table(&name).await {
            Ok(_) if req.if_exists == IfExists::Fail => {
                return Err(invalid(format!(
                    "table {name} exists and the ingest asks to fail if it does"
                )));
            }
            Ok(t) => t,
            Err(strata_engine::Error::TableNotFound(_)) if req.if_missing == IfMissing::Create => {
                who.check(ns, Scope::Admin)?;
                if req.primary_key.is_empty() {
                    return Err(invalid(format!(
                        "creating table {name} needs its primary key (the `primary_key` option)"
                    )));
                }
                let Some(b) = &first else {
                    return Err(invalid(format!(
                        "creating table {name} needs a schema: the stream has no batch"
                    )));
                };
                let fields: Vec<_> = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| {
                        let key = req.primary_key.iter().any(|k| k == f.name());
                        f.as_ref().clone().with_nullable(f.is_nullable() && !key)
                    })
                    .collect();
                let keys: Vec<&str> = req.primary_key.iter().map(String::as_str).collect();
                db.create_table(&name, Schema::new(fields), &keys).await?;
                tracing::info!(table = %name, who = %who.name, "table created by bulk ingest");
                db.table(&name).await?
            }
            Err(strata_engine::Error::NotOwner { owner: Some(o), .. })
                if self.forward_rows().is_some() =>
            {
                let owner = o.http.clone();
                return self.forward_ingest(&name, owner, first, batches, req).await;
            }
            Err(e) => return Err(e.into()),
        };
        let mut rows = 0u64;
        let mut next = first;
        while let Some(batch) = next {
            if batch.num_rows() > 0 {
                let started = Instant::now();
                let mut backoff = Duration::from_millis(50);
                loop {
                    match t.upsert(batch.clone()).await {
                        Ok(_) => break,
                        Err(e @ strata_engine::Error::Overloaded { .. })
                            if started.elapsed() < OVERLOAD_WAIT =>
                        {
                            tracing::debug!(table = %name, reason = %e, "ingest waits for compaction");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(2));
                        }
                        Err(e) => {
                            let e = QueryError::from(e);
                            return Err(QueryError::new(
                                e.kind,
                                format!(
                                    "{} ({rows} rows were written to {name} before)",
                                    e.message
                                ),
                            ));
                        }
                    }
                }
                rows += batch.num_rows() as u64;
            }
            next = batches.next().await.transpose()?;
        }
        Ok(rows)
    }

    /// Sends `first` and the rest of `batches` to `owner`, the ingest node that owns
    /// table `name`, in slices of about [`FORWARD_SLICE_BYTES`]: the rows written there.
    async fn forward_ingest<S>(
        &self,
        name: &str,
        owner: String,
        first: Option<RecordBatch>,
        mut batches: std::pin::Pin<&mut S>,
        req: &IngestRequest,
    ) -> Result<u64, QueryError>
    where
        S: Stream<Item = Result<RecordBatch, QueryError>> + Send,
    {
        let Some(forward) = self.forward_rows().cloned() else {
            return Err(QueryError::new(
                QueryErrorKind::NotOwner,
                format!("table {name} is written by the ingest node at {owner}"),
            ));
        };
        let mut rows = 0u64;
        let mut slice: Vec<RecordBatch> = Vec::new();
        let mut bytes = 0usize;
        let mut next = first;
        loop {
            let done = next.is_none();
            if let Some(b) = next.take().filter(|b| b.num_rows() > 0) {
                bytes += b.get_array_memory_size();
                slice.push(b);
            }
            if !slice.is_empty() && (done || bytes >= FORWARD_SLICE_BYTES) {
                let sent = forward(crate::service::ForwardedRows {
                    owner: owner.clone(),
                    table: name.to_string(),
                    batches: std::mem::take(&mut slice),
                    authorization: req.authorization.clone(),
                })
                .await
                .map_err(|e| {
                    QueryError::new(
                        e.kind,
                        format!(
                            "{} ({rows} rows were written to {name} on its owner {owner} before)",
                            e.message
                        ),
                    )
                })?;
                rows += sent;
                bytes = 0;
            }
            if done {
                return Ok(rows);
            }
            next = batches.next().await.transpose()?;
        }
    }
}
