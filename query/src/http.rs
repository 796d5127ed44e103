//! SQL over HTTP: `POST /sql` with the statement as the body (`text/plain`) or as
//! `{"sql": "..."}` (`application/json`). The result format follows `Accept`:
//!
//! | Accept | body |
//! |---|---|
//! | `application/json` (default) | a JSON array of row objects |
//! | `application/x-ndjson` | one JSON object per line |
//! | `text/csv` | CSV with a header row |
//! | `application/vnd.apache.arrow.stream` | Arrow IPC stream |
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with the status of
//! [`crate::error::QueryError::http_status`]. `GET /health` answers `ok` while the process
//! runs; `GET /ready` answers `ready` once the service is open and the bucket answers, 503
//! with the reason otherwise.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::auth::Authenticator;
use crate::error::{QueryError, QueryErrorKind};
use crate::service::QueryService;

/// Result encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON array of objects.
    Json,
    /// Newline-delimited JSON objects.
    NdJson,
    /// CSV with a header.
    Csv,
    /// Arrow IPC stream.
    Arrow,
}

impl Format {
    /// The format an `Accept` header asks for (the first one known; JSON by default).
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Json;
        };
        for part in accept.split(',') {
            let mime = part.split(';').next().unwrap_or("").trim();
            match mime {
                "application/json" | "*/*" | "application/*" => return Format::Json,
                "application/x-ndjson" | "application/jsonl" => return Format::NdJson,
                "text/csv" => return Format::Csv,
                "application/vnd.apache.arrow.stream" => return Format::Arrow,
                _ => {}
            }
        }
        Format::Json
    }

    /// The MIME type of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::NdJson => "application/x-ndjson",
            Format::Csv => "text/csv",
            Format::Arrow => "application/vnd.apache.arrow.stream",
        }
    }
}

/// Encodes batches in `format`.
pub fn encode(
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Vec<u8>, QueryError> {
    let internal = |e: arrow::error::ArrowError| {
        QueryError::new(QueryErrorKind::Internal, format!("encoding results: {e}"))
    };
    let mut out = Vec::new();
    match format {
        Format::Json => {
            let mut w = arrow::json::ArrayWriter::new(&mut out);
            for b in batches {
                w.write(b).map_err(internal)?;
            }
            w.finish().map_err(internal)?;
            drop(w);
            if out.is_empty() {
                out.extend_from_slice(b"[]");
            }
        }
        Format::NdJson => {
            let mut w = arrow::json::LineDelimitedWriter::new(&mut out);
            for b in batches {
                w.write(b).map_err(internal)?;
            }
            w.finish().map_err(internal)?;
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            if batches.is_empty() {
                w.write(&RecordBatch::new_empty(schema.clone()))
                    .map_err(internal)?;
            }
            for b in batches {
                w.write(b).map_err(internal)?;
            }
        }
        Format::Arrow => {
            let mut w =
                arrow::ipc::writer::StreamWriter::try_new(&mut out, schema).map_err(internal)?;
            for b in batches {
                w.write(b).map_err(internal)?;
            }
            w.finish().map_err(internal)?;
        }
    }
    Ok(out)
}

/// Names the owning ingest node's HTTP address on a `not_owner` answer (the services
/// forward such requests there).
pub const OWNER_HEADER: &str = "x-strata-owner";

/// An error as an HTTP response: JSON with its stable code, the status, and `Retry-After`,
/// `WWW-Authenticate` or `x-strata-owner` where they apply.
pub fn error_response(e: &QueryError) -> Response {
    let body = serde_json::json!({"error": {"code": e.code(), "message": e.message}});
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(body)).into_response();
    if matches!(
        e.kind,
        QueryErrorKind::Overloaded | QueryErrorKind::NotOwner
    ) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(v) = e
        .owner
        .as_deref()
        .and_then(|o| HeaderValue::from_str(o).ok())
    {
        r.headers_mut().insert(OWNER_HEADER, v);
    }
    if e.kind == QueryErrorKind::Unauthenticated {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

fn statement(headers: &HeaderMap, body: &Bytes) -> Result<String, QueryError> {
    let invalid = |m: String| QueryError::new(QueryErrorKind::Invalid, m);
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Req {
            sql: String,
        }
        let r: Req = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("request body: expected {{\"sql\": \"...\"}}: {e}")))?;
        Ok(r.sql)
    } else {
        String::from_utf8(body.to_vec()).map_err(|_| invalid("the SQL text is not UTF-8".into()))
    }
}

/// The `Authorization` header of a request, if it is text.
pub fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

struct SqlState {
    q: QueryService,
    auth: Authenticator,
}

async fn sql(State(st): State<Arc<SqlState>>, headers: HeaderMap, body: Bytes) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let run = async {
        let who = st.auth.principal(authorization(&headers))?;
        let text = statement(&headers, &body)?;
        let (schema, batches) = st.q.collect_as(&text, &who).await?;
        encode(format, &schema, &batches)
    };
    match run.await {
        Ok(bytes) => ([(header::CONTENT_TYPE, format.content_type())], bytes).into_response(),
        Err(e) => error_response(&e),
    }
}

/// `GET /ready`: 200 `ready` once the node has opened the tables it writes (see
/// [`crate::ready`]) and the bucket answers; else 503 with the reason. One HEAD request per
/// probe, bounded by [`READY_PROBE_TIMEOUT`].
async fn ready(State(st): State<Arc<SqlState>>) -> Response {
    if let Some(why) = st.q.startup().waiting() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")).into_response();
    }
    match tokio::time::timeout(READY_PROBE_TIMEOUT, st.q.db().probe_store()).await {
        Ok(Ok(())) => "ready".into_response(),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the bucket does not answer: {e}"),
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the bucket did not answer within {} ms",
                READY_PROBE_TIMEOUT.as_millis()
            ),
        )
            .into_response(),
    }
}

/// How long `/ready` waits for the bucket.
pub const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The HTTP routes of the query service. `/health` and `/ready` need no key (load
/// balancers probe them); `/sql` runs as the caller of the request's key.
pub fn router(q: QueryService, auth: Authenticator) -> Router {
    Router::new()
        .route("/sql", post(sql))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .with_state(Arc::new(SqlState { q, auth }))
}
