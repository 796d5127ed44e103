//! The data API over HTTP (under `/v1`): tables and rows, next to SQL (`POST /sql`).
//!
//! | method and path | does |
//! |---|---|
//! | `POST /v1/tables` | create a table: `{"name", "columns": [{"name", "type", "nullable"}], "primary_key": [...]}` |
//! | `GET /v1/tables` | list tables |
//! | `GET /v1/tables/{t}` | describe a table |
//! | `DELETE /v1/tables/{t}` | drop a table |
//! | `POST /v1/tables/{t}/rows` | upsert whole rows (missing nullable columns are NULL) |
//! | `PATCH /v1/tables/{t}/rows` | partial update: each row carries its key and the columns it changes |
//! | `POST /v1/tables/{t}/delete` | delete rows by key (objects holding the key columns) |
//! | `GET /v1/tables/{t}/rows/get?key=..&columns=..` | point read (one `key` per key column, in key order) |
//! | `GET /v1/tables/{t}/rows?start=..&end=..&limit=..&after=..&columns=..` | key-range scan, one page |
//! | `GET /v1/admin/tables/{t}` | operator view of a table: shards (key range, writer epoch, manifest version, NVMe levels, S3 runs, backlog), manifest versions, snapshots, outstanding jobs (admin scope) |
//! | `POST /v1/admin/tables/{t}/gc?dry_run=true` | garbage collection now, or what it would delete (admin scope) |
//! | `GET /v1/admin/jobs` | S3 compaction jobs in the bucket with their leases (admin scope on every namespace) |
//! | `GET /openapi.json` | the OpenAPI document of every HTTP route (`docs/openapi.json`) |
//!
//! Row bodies are a JSON array of objects (`application/json`), one object per line
//! (`application/x-ndjson`) or an Arrow IPC stream (`application/vnd.apache.arrow.stream`).
//! In JSON, integers, dates (days) and timestamps (in the column's unit) are numbers, dates
//! and timestamps may also be ISO 8601 strings, and binary values are hex strings. One
//! request is one atomic write: a rejected request changes nothing. Reads answer in the
//! format `Accept` asks for (as `/sql` does). A scan page answers JSON
//! `{"rows": [...], "next": cursor or null}`; pass `after=<cursor>` for the next page (each
//! page reads the latest state).
//!
//! Errors are `{"error": {"code", "message"}}`: 400 with the field path for bad input, 401
//! without a valid API key (when keys are configured), 403 when the key lacks the scope on
//! the table's namespace (read: list, describe, get, scan; write: upsert, update, delete;
//! admin: create, drop; see [`strata_query::auth`]), 404 for an unknown table, 409 for a
//! table that exists, 503 with `Retry-After` when overloaded.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value as Json, json};
use strata_engine::value::build_array;
use strata_engine::{
    Db, Durability, Error as EngineError, Mutation, ScanOptions, Table, Value, WriteOptions,
};
use strata_query::auth::{Authenticator, Principal, Scope, split_name};
use strata_query::error::{QueryError, QueryErrorKind};
use strata_query::http::{Format, encode, error_response};

/// The OpenAPI document of the HTTP API (`docs/openapi.json`, served at `/openapi.json`).
pub const OPENAPI_JSON: &str = include_str!("../../../docs/openapi.json");

/// Most rows a scan page returns.
pub const PAGE_ROWS_MAX: usize = 10_000;

/// An API error: status, stable code, message.
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// Another ingest node owns the table's shard: its (HTTP, gRPC) addresses.
    pub(crate) owner: Option<(String, String)>,
}

pub use strata_query::http::OWNER_HEADER;
/// Marks a request one ingest node forwarded to another (it is never forwarded again).
pub const FORWARDED_HEADER: &str = "x-strata-forwarded-by";

impl ApiError {
    fn bad(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid",
            message: message.into(),
            owner: None,
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match &e {
            EngineError::TableExists(_) => Self {
                status: StatusCode::CONFLICT,
                code: "already_exists",
                message: e.to_string(),
                owner: None,
            },
            EngineError::NotOwner { owner, .. } => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "not_owner",
                message: e.to_string(),
                owner: owner.as_ref().map(|o| (o.http.clone(), o.flight.clone())),
            },
            _ => query_error(QueryError::from(e)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.code == "not_owner" {
            let body = json!({"error": {"code": self.code, "message": self.message}});
            let mut r = (self.status, axum::Json(body)).into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            if let Some(v) = self
                .owner
                .and_then(|(http, _)| header::HeaderValue::from_str(&http).ok())
            {
                r.headers_mut().insert(OWNER_HEADER, v);
            }
            return r;
        }
        // Same shape and headers (Retry-After, WWW-Authenticate) as the SQL endpoint.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            return error_response(&QueryError::new(QueryErrorKind::Overloaded, self.message));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            return error_response(&QueryError::new(
                QueryErrorKind::Unauthenticated,
                self.message,
            ));
        }
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// What the handlers share: the database and who may call.
pub struct ApiState {
    db: Db,
    auth: Authenticator,
}

/// The caller of a request, from its `Authorization: Bearer <key>` header (401 without a
/// valid key when keys are configured).
struct Caller(Principal);

impl axum::extract::FromRequestParts<Arc<ApiState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &Arc<ApiState>,
    ) -> ApiResult<Self> {
        let header = strata_query::http::authorization(&parts.headers);
        Ok(Caller(st.auth.principal(header).map_err(query_error)?))
    }
}

impl Caller {
    /// 403 unless the caller has `scope` on `table`'s namespace (checked before the table
    /// is looked up, so a key cannot learn which tables other namespaces hold).
    fn check(&self, table: &str, scope: Scope) -> ApiResult<()> {
        self.0
            .check(split_name(table).0, scope)
            .map_err(query_error)
    }
}

/// The data API's routes: the database, callers authenticated by `auth`.
/// Bodies over `body_bytes_max` are refused with 413.
pub fn router(db: Db, auth: Authenticator, body_bytes_max: usize) -> Router {
    let state = Arc::new(ApiState { db, auth });
    Router::new()
        .route("/v1/tables", post(create_table).get(list_tables))
        .route("/v1/tables/{table}", get(describe).delete(drop_table))
        .route(
            "/v1/tables/{table}/rows",
            post(upsert).patch(update).get(scan),
        )
        .route("/v1/tables/{table}/rows/get", get(point_get))
        .route("/v1/tables/{table}/delete", post(delete))
        .route("/v1/admin/tables/{table}", get(admin_table))
        .route("/v1/admin/tables/{table}/gc", post(admin_gc))
        .route("/v1/admin/jobs", get(admin_jobs))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON) }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(body_bytes_max))
        .with_state(state)
}

/// Who forwards requests to the ingest node owning their shard.
pub struct Forwarder {
    db: Db,
    /// None: answer `503 not_owner` with the owner's address instead (TLS: forwarding is
    /// plain HTTP).
    client: Option<reqwest::Client>,
    /// The largest body forwarded.
    body_bytes_max: usize,
}

/// Wraps the whole HTTP application (data API and SQL) of an ingest node: a request the
/// handler answers `not_owner` goes on to the owner (see [`forward_to_owner`]) when
/// `forward`, else back to the caller with the owner's address.
pub fn forwarding(app: Router, db: Db, forward: bool, body_bytes_max: usize) -> Router {
    let client = forward.then(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .expect("an HTTP client with default settings")
    });
    app.layer(axum::middleware::from_fn_with_state(
        Arc::new(Forwarder {
            db,
            client,
            body_bytes_max,
        }),
        forward_to_owner,
    ))
}

/// Sends a statement that changes another ingest node's table (Flight SQL's writes, which
/// the HTTP forwarding layer does not see) to that node's `POST /sql`, once (marked as
/// forwarded, so it is never forwarded again), with the caller's credentials: the row count
/// it answers, or its error.
pub fn sql_forwarder(db: Db) -> strata_query::service::Forward {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .expect("an HTTP client with default settings");
    Arc::new(move |f: strata_query::service::Forwarded| {
        let (client, node) = (client.clone(), db.cluster_node().unwrap_or_default());
        Box::pin(async move {
            let req = client
                .post(format!("http://{}/sql", f.owner))
                .header(FORWARDED_HEADER, node)
                .header(header::ACCEPT, "application/json")
                .json(&serde_json::json!({ "sql": f.sql }));
            let body = owner_answer(req, &f.owner, f.authorization.as_deref(), "statement").await?;
            Ok(body[0]["count"].as_i64().unwrap_or(0))
        })
    })
}

/// Sends `req` (a write forwarded to the shard owner `owner`) with the caller's
/// `authorization`, and reads the owner's JSON answer. An owner that cannot be reached, or
/// answers without a verdict of its own, gives `not_owner` (the caller may retry); the
/// owner's own error (a missing table, a refused key, ...) comes back as it gave it.
async fn owner_answer(
    req: reqwest::RequestBuilder,
    owner: &str,
    authorization: Option<&str>,
    what: &str,
) -> Result<serde_json::Value, strata_query::QueryError> {
    use strata_query::{QueryError, QueryErrorKind};
    let unavailable = |m: String| {
        let mut e = QueryError::new(QueryErrorKind::NotOwner, m);
        e.owner = Some(owner.to_string());
        e
    };
    let req = match authorization {
        Some(a) => req.header(header::AUTHORIZATION, a),
        None => req,
    };
    let resp = req
        .send()
        .await
        .map_err(|e| unavailable(format!("forwarding to the shard owner {owner}: {e}")))?;
    let status = resp.status();
    let body: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| unavailable(format!("reading the shard owner's answer: {e}")))?;
    if status.is_success() {
        return Ok(body);
    }
    let message = body["error"]["message"].as_str().map_or_else(
        || format!("the shard owner refused the {what}"),
        str::to_string,
    );
    let kind = body["error"]["code"]
        .as_str()
        .and_then(QueryError::kind_of_code)
        .unwrap_or(QueryErrorKind::NotOwner);
    let mut e = QueryError::new(kind, message);
    e.owner = Some(owner.to_string());
    Err(e)
}

/// Sends a bulk ingest's rows for another ingest node's table to that node's data API
/// (`POST /v1/tables/{table}/rows`, one Arrow IPC stream per slice), for Flight SQL's
/// `CommandStatementIngest` ([`strata_query::QueryService::with_forward_rows`]).
pub fn rows_forwarder(db: Db) -> strata_query::service::ForwardRows {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(300))
        .build()
        .expect("an HTTP client with default settings");
    Arc::new(move |f: strata_query::service::ForwardedRows| {
        let (client, node) = (client.clone(), db.cluster_node().unwrap_or_default());
        Box::pin(async move {
            use strata_query::{QueryError, QueryErrorKind};
            let mut body = Vec::new();
            {
                let schema = f.batches.first().map(|b| b.schema()).ok_or_else(|| {
                    QueryError::new(QueryErrorKind::Internal, "a forwarded slice without rows")
                })?;
                let encode = |e: arrow::error::ArrowError| {
                    QueryError::new(QueryErrorKind::Internal, format!("encoding rows: {e}"))
                };
                let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut body, &schema)
                    .map_err(encode)?;
                for b in &f.batches {
                    w.write(b).map_err(encode)?;
                }
                w.finish().map_err(encode)?;
            }
            let req = client
                .post(format!("http://{}/v1/tables/{}/rows", f.owner, f.table))
                .header(FORWARDED_HEADER, node)
                .header(header::CONTENT_TYPE, "application/vnd.apache.arrow.stream")
                .header(header::ACCEPT, "application/json")
                .body(body);
            let body = owner_answer(req, &f.owner, f.authorization.as_deref(), "rows").await?;
            Ok(body["rows"].as_u64().unwrap_or(0))
        })
    })
}

/// In a cluster, a request the handler answers `not_owner` is sent on to the owning node
/// (once: a forwarded request is never forwarded again) and its answer returned. The body
/// is buffered for that (it is at most `query.message_bytes_max`, and the handlers buffer it
/// anyway). When the owner cannot be reached (it died and its lease has not lapsed yet),
/// the `503 not_owner` with `Retry-After` goes back to the caller.
async fn forward_to_owner(
    State(st): State<Arc<Forwarder>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(client) = st.client.clone().filter(|_| st.db.in_cluster()) else {
        return next.run(req).await;
    };
    let forwarded = req.headers().contains_key(FORWARDED_HEADER);
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, st.body_bytes_max).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "too_large",
                message: format!("request body: {e}"),
                owner: None,
            }
            .into_response();
        }
    };
    let (method, uri, headers) = (
        parts.method.clone(),
        parts.uri.clone(),
        parts.headers.clone(),
    );
    let resp = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(body.clone()),
        ))
        .await;
    let Some(owner) = resp
        .headers()
        .get(OWNER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return resp;
    };
    if forwarded {
        return resp;
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = client
        .request(method, format!("http://{owner}{path}"))
        .body(body)
        .header(FORWARDED_HEADER, st.db.cluster_node().unwrap_or_default());
    for (name, value) in &headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    match out.send().await {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            match r.bytes().await {
                Ok(bytes) => {
                    let mut reply = (status, bytes).into_response();
                    for (name, value) in &headers {
                        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
                            reply.headers_mut().insert(name, value.clone());
                        }
                    }
                    reply
                }
                Err(e) => {
                    tracing::warn!(owner, "reading a forwarded answer: {e}");
                    resp
                }
            }
        }
        Err(e) => {
            tracing::warn!(owner, "forwarding to the shard owner: {e}");
            resp
        }
    }
}

type Shared = State<Arc<ApiState>>;

/// A column's type by its API name.
pub fn parse_type(name: &str) -> Option<DataType> {
    Some(match name.to_ascii_lowercase().as_str() {
        "bool" | "boolean" => DataType::Boolean,
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" | "int" => DataType::Int32,
        "int64" | "bigint" => DataType::Int64,
        "uint8" => DataType::UInt8,
        "uint16" => DataType::UInt16,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "float32" | "float" => DataType::Float32,
        "float64" | "double" => DataType::Float64,
        "string" | "utf8" | "text" => DataType::Utf8,
        "binary" | "bytes" => DataType::Binary,
        "date" | "date32" => DataType::Date32,
        "timestamp_s" => DataType::Timestamp(TimeUnit::Second, None),
        "timestamp_ms" => DataType::Timestamp(TimeUnit::Millisecond, None),
        "timestamp" | "timestamp_us" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "timestamp_ns" => DataType::Timestamp(TimeUnit::Nanosecond, None),
        _ => return None,
    })
}

/// The API name of a column type.
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Boolean => "boolean".into(),
        DataType::Utf8 | DataType::LargeUtf8 => "string".into(),
        DataType::Binary | DataType::LargeBinary => "binary".into(),
        DataType::Date32 => "date".into(),
        DataType::Timestamp(u, _) => match u {
            TimeUnit::Second => "timestamp_s".into(),
            TimeUnit::Millisecond => "timestamp_ms".into(),
            TimeUnit::Microsecond => "timestamp".into(),
            TimeUnit::Nanosecond => "timestamp_ns".into(),
        },
        other => other.to_string().to_ascii_lowercase(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ColumnDef {
    name: String,
    #[serde(rename = "type")]
    data_type: String,
    #[serde(default = "yes")]
    nullable: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTable {
    name: String,
    columns: Vec<ColumnDef>,
    primary_key: Vec<String>,
}

fn describe_json(entry: &strata_manifest::TableEntry) -> Json {
    let schema = &entry.schema;
    json!({
        "name": entry.name,
        "columns": schema.fields().iter().map(|f| json!({
            "name": f.name(),
            "type": type_name(f.data_type()),
            "nullable": f.is_nullable(),
        })).collect::<Vec<_>>(),
        "primary_key": entry.primary_key,
        "shards": entry.shards.len(),
        "created_at_ms": entry.created_at_ms,
    })
}

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes, what: &str) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("{what}: {e}")))
}

async fn create_table(State(st): Shared, who: Caller, body: Bytes) -> ApiResult<Response> {
    let db = &st.db;
    let req: CreateTable = json_body(&body, "table definition")?;
    who.check(&req.name, Scope::Admin)?;
    let mut fields = Vec::with_capacity(req.columns.len());
    for (i, c) in req.columns.iter().enumerate() {
        let dt = parse_type(&c.data_type).ok_or_else(|| {
            ApiError::bad(format!(
                "columns[{i}].type: unknown type {:?} (boolean, int8..int64, uint8..uint64, float32, float64, string, binary, date, timestamp_s/_ms/_ns, timestamp)",
                c.data_type
            ))
        })?;
        fields.push(Field::new(&c.name, dt, c.nullable));
    }
    let pk: Vec<&str> = req.primary_key.iter().map(|s| s.as_str()).collect();
    // The entry, not the opened table: in a cluster another node may be the shard's owner.
    let entry = db.create_table(&req.name, Schema::new(fields), &pk).await?;
    Ok((StatusCode::CREATED, axum::Json(describe_json(&entry))).into_response())
}

async fn list_tables(State(st): Shared, who: Caller) -> ApiResult<Response> {
    let tables = st.db.list_tables().await?;
    // Only the namespaces the caller may read.
    let names: Vec<&str> = tables
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| who.0.can_read(split_name(n).0))
        .collect();
    Ok(axum::Json(json!({ "tables": names })).into_response())
}

async fn describe(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Read)?;
    let entry = st.db.describe(&table).await?;
    Ok(axum::Json(describe_json(&entry)).into_response())
}

async fn drop_table(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Admin)?;
    st.db.drop_table(&table).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// How a request body encodes rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyFormat {
    Json,
    NdJson,
    Arrow,
}

fn body_format(headers: &HeaderMap) -> ApiResult<BodyFormat> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let mime = ct.split(';').next().unwrap_or("").trim();
    match mime {
        // `curl -d` declares a form: its body is the JSON the user typed, so it is read as
        // JSON (a form-encoded body fails as JSON, with the position of the error).
        "application/json" | "application/x-www-form-urlencoded" | "text/plain" | "" => {
            Ok(BodyFormat::Json)
        }
        "application/x-ndjson" | "application/jsonl" => Ok(BodyFormat::NdJson),
        "application/vnd.apache.arrow.stream" => Ok(BodyFormat::Arrow),
        other => Err(ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            message: format!(
                "content type {other:?}: rows are application/json, application/x-ndjson or application/vnd.apache.arrow.stream"
            ),
            owner: None,
        }),
    }
}

/// JSON rows of a body: objects, with their positions for error paths.
fn json_rows(format: BodyFormat, body: &Bytes) -> ApiResult<Vec<Map<String, Json>>> {
    let values: Vec<Json> = match format {
        BodyFormat::Json => match serde_json::from_slice::<Json>(body) {
            Ok(Json::Array(a)) => a,
            Ok(_) => return Err(ApiError::bad("rows: expected a JSON array of objects")),
            Err(e) => return Err(ApiError::bad(format!("rows: {e}"))),
        },
        _ => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad("rows: the body is not UTF-8"))?;
            let mut out = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                out.push(
                    serde_json::from_str(line)
                        .map_err(|e| ApiError::bad(format!("line {}: {e}", i + 1)))?,
                );
            }
            out
        }
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Json::Object(m) => Ok(m),
            _ => Err(ApiError::bad(format!("rows[{i}]: expected an object"))),
        })
        .collect()
}

/// One JSON value as an engine value of type `dt`; `path` names it in errors.
fn to_value(dt: &DataType, v: &Json, path: &str) -> ApiResult<Value> {
    let wrong = |what: &str| ApiError::bad(format!("{path}: expected {what}, got {v}"));
    if v.is_null() {
        return Ok(Value::Null);
    }
    let int_in = |lo: i64, hi: i64| -> ApiResult<Value> {
        match v.as_i64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Value::Int(x)),
            _ => Err(wrong(&format!("an integer in {lo}..={hi}"))),
        }
    };
    let uint_to = |hi: u64| -> ApiResult<Value> {
        match v.as_u64() {
            Some(x) if x <= hi => Ok(Value::UInt(x)),
            _ => Err(wrong(&format!("an integer in 0..={hi}"))),
        }
    };
    match dt {
        DataType::Boolean => v
            .as_bool()
            .map(Value::Bool)
            .ok_or_else(|| wrong("a boolean")),
        DataType::Int8 => int_in(i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => int_in(i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => int_in(i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => int_in(i64::MIN, i64::MAX),
        DataType::UInt8 => uint_to(u8::MAX.into()),
        DataType::UInt16 => uint_to(u16::MAX.into()),
        DataType::UInt32 => uint_to(u32::MAX.into()),
        DataType::UInt64 => uint_to(u64::MAX),
        DataType::Float32 | DataType::Float64 => v
            .as_f64()
            .map(Value::Float)
            .ok_or_else(|| wrong("a number")),
        DataType::Utf8 | DataType::LargeUtf8 => v
            .as_str()
            .map(|s| Value::Bytes(s.as_bytes().to_vec()))
            .ok_or_else(|| wrong("a string")),
        DataType::Binary | DataType::LargeBinary => v
            .as_str()
            .and_then(|s| hex::decode(s).ok())
            .map(Value::Bytes)
            .ok_or_else(|| wrong("a hex string")),
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            if let Some(x) = v.as_i64() {
                return Ok(Value::Int(x));
            }
            let Some(s) = v.as_str() else {
                return Err(wrong("an integer or an ISO 8601 string"));
            };
            // Arrow's string casts parse ISO 8601 dates and timestamps.
            let a = cast(&StringArray::from(vec![s]), dt)
                .ok()
                .filter(|a| !a.is_null(0))
                .ok_or_else(|| wrong("an ISO 8601 date or timestamp"))?;
            strata_engine::value::value_at(a.as_ref(), 0).map_err(|e| ApiError::bad(e.to_string()))
        }
        other => Err(ApiError::bad(format!(
            "{path}: type {other} is not writable"
        ))),
    }
}

/// A JSON row and its position in the request.
type Indexed<'a> = (usize, &'a Map<String, Json>);

/// Builds a batch of `columns` (names of the table's columns) from JSON objects.
fn build_batch(schema: &Schema, columns: &[String], rows: &[Indexed]) -> ApiResult<RecordBatch> {
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for name in columns {
        let f = schema
            .field_with_name(name)
            .map_err(|_| ApiError::bad(format!("unknown column {name:?}")))?;
        let mut values = Vec::with_capacity(rows.len());
        for (i, row) in rows {
            let path = format!("rows[{i}].{name}");
            let v = match row.get(name) {
                Some(v) => to_value(f.data_type(), v, &path)?,
                None => Value::Null,
            };
            if v == Value::Null && !f.is_nullable() {
                return Err(ApiError::bad(format!("{path}: required (not nullable)")));
            }
            values.push(v);
        }
        arrays.push(build_array(f.data_type(), &values).map_err(ApiError::from)?);
        fields.push(f.clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| ApiError::bad(format!("rows: {e}")))
}

/// Rejects columns the table does not have, naming the first.
fn check_columns(schema: &Schema, rows: &[Map<String, Json>]) -> ApiResult<()> {
    for (i, r) in rows.iter().enumerate() {
        for k in r.keys() {
            if schema.field_with_name(k).is_err() {
                return Err(ApiError::bad(format!("rows[{i}].{k}: unknown column")));
            }
        }
    }
    Ok(())
}

/// Decodes an Arrow IPC stream from an untrusted body.
///
/// arrow-rs's IPC reader trusts the lengths and offsets inside a stream: a corrupted one
/// can make it allocate what a message header claims (up to exabytes, which aborts the
/// process) or panic slicing a buffer (found by the property tests below). So the stream's
/// framing is checked first (every message's flatbuffer verified, its body within the
/// request), which bounds allocations by the request size, and the decoding runs under
/// `catch_unwind`, so a buffer the reader mis-slices is a 400, not a dead connection.
pub(crate) fn arrow_batches(body: &Bytes) -> ApiResult<Vec<RecordBatch>> {
    let bad = |m: String| ApiError::bad(format!("Arrow IPC stream: {m}"));
    check_ipc_framing(body).map_err(bad)?;
    let decode = || -> Result<Vec<RecordBatch>, arrow::error::ArrowError> {
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body.as_ref()), None)?
            .collect()
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)) {
        Ok(r) => r.map_err(|e| bad(e.to_string())),
        Err(_) => Err(bad(
            "malformed buffers (lengths or offsets out of range)".into()
        )),
    }
}

/// Walks an IPC stream's messages (optional `0xFFFFFFFF` continuation, metadata length,
/// flatbuffer `Message`, body) and checks each lies within `body`.
fn check_ipc_framing(body: &[u8]) -> Result<(), String> {
    let i32_at = |p: usize| -> Option<i32> {
        body.get(p..p + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_le_bytes)
    };
    let mut pos = 0usize;
    while pos < body.len() {
        let mut len = i32_at(pos).ok_or("truncated message length")?;
        pos += 4;
        if len == -1 {
            len = i32_at(pos).ok_or("truncated message length")?;
            pos += 4;
        }
        if len == 0 {
            return Ok(()); // end-of-stream marker
        }
        let len = usize::try_from(len).map_err(|_| format!("negative message length {len}"))?;
        let meta = pos
            .checked_add(len)
            .and_then(|end| body.get(pos..end))
            .ok_or("message metadata runs past the end of the body")?;
        let message = arrow::ipc::root_as_message(meta)
            .map_err(|e| format!("invalid message metadata: {e}"))?;
        pos += len;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| "negative message body length".to_string())?;
        if body_len > body.len() - pos {
            return Err(format!(
                "message body of {body_len} bytes runs past the end of the request"
            ));
        }
        pos += body_len;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Upsert,
    Update,
    Delete,
}

/// Decodes a body into the mutations of one atomic write.
fn mutations(
    t: &Table,
    kind: WriteKind,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<Vec<Mutation>> {
    let wrap = |b: RecordBatch| match kind {
        WriteKind::Upsert => Mutation::Upsert(b),
        WriteKind::Update => Mutation::Update(b),
        WriteKind::Delete => Mutation::Delete(b),
    };
    let format = body_format(headers)?;
    if format == BodyFormat::Arrow {
        return Ok(arrow_batches(body)?.into_iter().map(wrap).collect());
    }
    let schema = t.schema();
    let rows = json_rows(format, body)?;
    check_columns(&schema, &rows)?;
    let keys: Vec<String> = t.table_schema().entry.primary_key.clone();
    let all: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    match kind {
        WriteKind::Upsert => {
            let indexed: Vec<_> = rows.iter().enumerate().collect();
            Ok(vec![wrap(build_batch(&schema, &all, &indexed)?)])
        }
        WriteKind::Delete => {
            for (i, r) in rows.iter().enumerate() {
                if let Some(k) = r.keys().find(|k| !keys.contains(k)) {
                    return Err(ApiError::bad(format!(
                        "rows[{i}].{k}: a delete carries only the key columns {keys:?}"
                    )));
                }
            }
            let indexed: Vec<_> = rows.iter().enumerate().collect();
            Ok(vec![wrap(build_batch(&schema, &keys, &indexed)?)])
        }
        WriteKind::Update => {
            // Rows changing different columns go in separate batches of the same write.
            let mut groups: Vec<(Vec<String>, Vec<Indexed>)> = Vec::new();
            for (i, r) in rows.iter().enumerate() {
                let set: BTreeSet<&String> = r.keys().collect();
                let cols: Vec<String> = all
                    .iter()
                    .filter(|c| keys.contains(c) || set.contains(c))
                    .cloned()
                    .collect();
                match groups.iter_mut().find(|(c, _)| *c == cols) {
                    Some((_, g)) => g.push((i, r)),
                    None => groups.push((cols, vec![(i, r)])),
                }
            }
            groups
                .iter()
                .map(|(cols, g)| build_batch(&schema, cols, g).map(wrap))
                .collect()
        }
    }
}

/// A write's query parameters: `durability=remote` (the default: acknowledged once the WAL
/// segment is in the bucket) or `durability=local` (once it is synced to this node's disk,
/// uploaded with the interval's other local writes, `engine.wal_local_upload_delay_ms`).
#[derive(Deserialize)]
struct WriteParams {
    durability: Option<String>,
}

impl WriteParams {
    fn options(&self) -> ApiResult<WriteOptions> {
        let durability = match self.durability.as_deref() {
            None | Some("remote") => Durability::Remote,
            Some("local") => Durability::Local,
            Some(other) => {
                return Err(ApiError::bad(format!(
                    "durability: {other:?} is not a durability (remote or local)"
                )));
            }
        };
        Ok(WriteOptions { durability })
    }
}

async fn write(
    db: &Db,
    who: &Caller,
    table: &str,
    (kind, params): (WriteKind, WriteParams),
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<Response> {
    let options = params.options()?;
    who.check(table, Scope::Write)?;
    let t = db.table(table).await?;
    let ms = mutations(&t, kind, headers, body)?;
    let rows: usize = ms
        .iter()
        .map(|m| match m {
            Mutation::Upsert(b) | Mutation::Update(b) | Mutation::Delete(b) => b.num_rows(),
        })
        .sum();
    let seq = if rows == 0 {
        0
    } else {
        t.write(&ms, options).await?
    };
    Ok(axum::Json(json!({"rows": rows, "seq": seq})).into_response())
}

async fn upsert(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    Query(params): Query<WriteParams>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = (WriteKind::Upsert, params);
    write(&st.db, &who, &table, kind, &headers, &body).await
}

async fn update(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    Query(params): Query<WriteParams>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = (WriteKind::Update, params);
    write(&st.db, &who, &table, kind, &headers, &body).await
}

async fn delete(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    Query(params): Query<WriteParams>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let kind = (WriteKind::Delete, params);
    write(&st.db, &who, &table, kind, &headers, &body).await
}

/// Key values from query parameters (one per key column, or a prefix), by key type.
pub(crate) fn key_values(t: &Table, texts: &[&str], what: &str) -> ApiResult<Vec<Value>> {
    let ks = t.table_schema();
    if texts.len() > ks.key_types.len() {
        return Err(ApiError::bad(format!(
            "{what}: {} values for {} key columns",
            texts.len(),
            ks.key_types.len()
        )));
    }
    texts
        .iter()
        .zip(&ks.key_types)
        .enumerate()
        .map(|(i, (s, dt))| {
            // Numbers parse as JSON; anything else is taken as a string.
            let j = match dt {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                    Json::String(s.to_string())
                }
                _ => serde_json::from_str(s).unwrap_or_else(|_| Json::String(s.to_string())),
            };
            to_value(dt, &j, &format!("{what}[{i}]"))
        })
        .collect()
}

fn projection(pairs: &[(String, String)]) -> Option<Vec<String>> {
    pairs.iter().find(|(k, _)| k == "columns").map(|(_, v)| {
        v.split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    })
}

async fn point_get(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Read)?;
    let t = st.db.table(&table).await?;
    let key: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "key")
        .map(|(_, v)| v.as_str())
        .collect();
    if key.len() != t.table_schema().key_types.len() {
        return Err(ApiError::bad(format!(
            "key: give one key= parameter per key column {:?}",
            t.table_schema().entry.primary_key
        )));
    }
    let key = key_values(&t, &key, "key")?;
    let cols = projection(&pairs);
    let cols_ref: Option<Vec<&str>> = cols
        .as_ref()
        .map(|c| c.iter().map(|s| s.as_str()).collect());
    let row = t.get(&key, cols_ref.as_deref(), None).await?;
    let Some(row) = row else {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: "no row with this key".into(),
            owner: None,
        });
    };
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    if format == Format::Json {
        // One row: an object rather than an array of one, which is the one line of its
        // line-delimited encoding (columns in the table's order).
        let mut out = encode(Format::NdJson, &row.schema(), &[row]).map_err(query_error)?;
        if out.last() == Some(&b'\n') {
            out.pop();
        }
        return Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response());
    }
    let out = encode(format, &row.schema(), &[row]).map_err(query_error)?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], out).into_response())
}

fn query_error(e: QueryError) -> ApiError {
    ApiError {
        status: StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        code: e.code(),
        message: e.message,
        owner: None,
    }
}

async fn scan(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    Query(p): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Read)?;
    let t = st.db.table(&table).await?;
    let get_all = |name: &str| -> Vec<&str> {
        p.iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let limit: usize = match get_all("limit").first() {
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad(format!("limit: expected a number, got {s:?}")))?,
        None => 100,
    };
    if limit == 0 || limit > PAGE_ROWS_MAX {
        return Err(ApiError::bad(format!(
            "limit: between 1 and {PAGE_ROWS_MAX}"
        )));
    }
    let ks = t.table_schema().clone();
    let start = get_all("start");
    let end = get_all("end");
    let mut start = (!start.is_empty())
        .then(|| key_values(&t, &start, "start"))
        .transpose()?;
    let end = (!end.is_empty())
        .then(|| key_values(&t, &end, "end"))
        .transpose()?;
    // The cursor is the hex-encoded last key of the previous page: start there and skip it.
    let mut skip_key: Option<Vec<u8>> = None;
    if let Some(c) = get_all("after").first() {
        let encoded = hex::decode(c)
            .map_err(|_| ApiError::bad("after: not a cursor from a previous page"))?;
        let values = strata_engine::keycodec::decode_key(&ks.key_types, &encoded)
            .map_err(|_| ApiError::bad("after: not a cursor from a previous page"))?;
        start = Some(values);
        skip_key = Some(encoded);
    }
    let cols = projection(&p);
    // Key columns are always read (the cursor needs them); the projection applies after.
    let mut read: Option<Vec<String>> = cols.clone();
    if let Some(r) = read.as_mut() {
        for k in ks.entry.primary_key.iter().rev() {
            if !r.contains(k) {
                r.insert(0, k.clone());
            }
        }
    }
    let read_ref: Option<Vec<&str>> = read
        .as_ref()
        .map(|c| c.iter().map(|s| s.as_str()).collect());
    let batch = t
        .scan(
            &ScanOptions {
                start,
                end,
                limit: limit + 2,
                projection: read_ref.as_deref(),
            },
            None,
        )
        .await?;
    let schema = batch.schema();
    let key_cols: Vec<usize> = ks
        .entry
        .primary_key
        .iter()
        .map(|k| schema.index_of(k).map_err(|e| ApiError::bad(e.to_string())))
        .collect::<ApiResult<_>>()?;
    let key_of = |row: usize| -> ApiResult<Vec<u8>> {
        let vals = key_cols
            .iter()
            .map(|c| strata_engine::value::value_at(batch.column(*c).as_ref(), row))
            .collect::<strata_engine::Result<Vec<_>>>()?;
        Ok(ks.encode_key(&vals)?)
    };
    let mut first = 0;
    if let Some(s) = &skip_key
        && batch.num_rows() > 0
        && key_of(0)? == *s
    {
        first = 1;
    }
    let n = (batch.num_rows() - first).min(limit);
    let page = batch.slice(first, n);
    let more = batch.num_rows() - first > limit;
    let next = if more && n > 0 {
        Some(hex::encode(key_of(first + n - 1)?))
    } else {
        None
    };
    let page = match &cols {
        Some(c) => {
            let idx = c
                .iter()
                .map(|name| {
                    page.schema()
                        .index_of(name)
                        .map_err(|_| ApiError::bad(format!("columns: unknown column {name:?}")))
                })
                .collect::<ApiResult<Vec<_>>>()?;
            page.project(&idx)
                .map_err(|e| ApiError::bad(e.to_string()))?
        }
        None => page,
    };
    let rows = encode(Format::Json, &page.schema(), &[page]).map_err(query_error)?;
    let rows: Json = serde_json::from_slice(&rows).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(axum::Json(json!({"rows": rows, "next": next})).into_response())
}

/// Property tests of the request decoders: malformed JSON, NDJSON and Arrow IPC bodies
/// (random bytes, random JSON shapes, valid streams with flipped, cut or inserted bytes)
/// are refused with an error, never a panic; whatever decodes goes through the engine's
/// write validation, which must not panic either. `STRATA_PROPTEST_CASES` sets the cases.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod fuzz {
    use super::*;
    use arrow::array::{BooleanArray, Float64Array, Int64Array, TimestampMillisecondArray};
    use proptest::prelude::*;
    use strata_engine::{DbConfig, EngineConfig};
    use strata_objstore::ObjectStoreConfig;

    struct Fixture {
        rt: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
        table: Table,
    }

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("blob", DataType::Binary, true),
            Field::new("day", DataType::Date32, true),
        ])
    }

    fn fixture() -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let table = rt.block_on(async {
            let db = Db::open(DbConfig {
                store: ObjectStoreConfig::local(dir.path().join("bucket")),
                local_dir: dir.path().join("nvme"),
                engine: EngineConfig::default(),
            })
            .await
            .unwrap();
            db.create_table("t", schema(), &["id"]).await.unwrap();
            db.table("t").await.unwrap()
        });
        Fixture {
            rt,
            _dir: dir,
            table,
        }
    }

    fn headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
        h
    }

    /// Decodes and, if that succeeds, writes: both may refuse, neither may panic.
    fn exercise(f: &Fixture, ct: &str, body: &[u8]) {
        let body = Bytes::copy_from_slice(body);
        for kind in [WriteKind::Upsert, WriteKind::Update, WriteKind::Delete] {
            if let Ok(ms) = mutations(&f.table, kind, &headers(ct), &body) {
                let _ = f.rt.block_on(f.table.write(&ms, WriteOptions::default()));
            }
        }
    }

    fn valid_ipc() -> Vec<u8> {
        let b = RecordBatch::try_new(
            Arc::new(schema()),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])),
                Arc::new(Float64Array::from(vec![1.5, -2.0, f64::NAN])),
                Arc::new(TimestampMillisecondArray::from(vec![
                    Some(0),
                    None,
                    Some(i64::MAX),
                ])),
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
                Arc::new(arrow::array::BinaryArray::from(vec![
                    Some(b"x".as_ref()),
                    None,
                    Some(b"yz".as_ref()),
                ])),
                Arc::new(arrow::array::Date32Array::from(vec![
                    Some(1),
                    None,
                    Some(-1),
                ])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &b.schema()).unwrap();
        w.write(&b).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(|v| json!(v)),
            any::<u64>().prop_map(|v| json!(v)),
            any::<f64>().prop_map(|v| json!(v)),
            ".{0,12}".prop_map(Json::String),
            Just(json!("2026-11-22T01:02:03Z")),
            Just(json!("ff00")),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    fn row() -> impl Strategy<Value = Json> {
        let names = prop_oneof![
            Just("id".to_string()),
            Just("name".to_string()),
            Just("score".to_string()),
            Just("at".to_string()),
            Just("ok".to_string()),
            Just("blob".to_string()),
            Just("day".to_string()),
            "[a-z]{1,4}",
        ];
        prop::collection::btree_map(names, json_value(), 0..8)
            .prop_map(|m| Json::Object(m.into_iter().collect()))
    }

    /// Proptest cases per decoder test (`STRATA_PROPTEST_CASES`, default 128).
    pub(crate) fn cases() -> u32 {
        std::env::var("STRATA_PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128)
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: cases(),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn json_bodies_never_panic(
            rows in prop::collection::vec(row(), 0..6),
            top in json_value(),
            raw in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let f = fixture();
            let array = serde_json::to_vec(&Json::Array(rows.clone())).unwrap();
            exercise(&f, "application/json", &array);
            exercise(&f, "application/json", &serde_json::to_vec(&top).unwrap());
            exercise(&f, "application/json", &raw);
            let nd: Vec<u8> = rows
                .iter()
                .flat_map(|r| {
                    let mut l = serde_json::to_vec(r).unwrap();
                    l.push(b'\n');
                    l
                })
                .collect();
            exercise(&f, "application/x-ndjson", &nd);
            exercise(&f, "application/x-ndjson", &raw);
            // Cut anywhere.
            let cut = raw.len() % (array.len() + 1);
            exercise(&f, "application/json", &array[..cut]);
        }

        #[test]
        fn arrow_ipc_bodies_never_panic(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
            insert in prop::collection::vec(any::<u8>(), 0..16),
            at in any::<prop::sample::Index>(),
        ) {
            let f = fixture();
            let ipc = valid_ipc();
            let ct = "application/vnd.apache.arrow.stream";
            let mut flipped = ipc.clone();
            for (i, b) in &flips {
                let i = i.index(flipped.len());
                flipped[i] ^= b;
            }
            exercise(&f, ct, &flipped);
            exercise(&f, ct, &ipc[..cut.index(ipc.len() + 1)]);
            let mut inserted = ipc.clone();
            let at = at.index(inserted.len() + 1);
            inserted.splice(at..at, insert.iter().copied());
            exercise(&f, ct, &inserted);
        }
    }
}

// --- Operator endpoints (`strata admin`). ---

fn now_ms() -> u64 {
    strata_common::clock::system().now_ms()
}

async fn admin_table(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Admin)?;
    let t = st.db.table(&table).await?;
    let entry = &t.table_schema().entry;
    let now = now_ms();
    let leases = st.db.shard_leases(entry).await?;
    let mut shards = Vec::new();
    for (i, s) in t.shards().enumerate() {
        let lease = leases.as_ref().and_then(|l| l.get(i).cloned().flatten());
        let m = s.manifest();
        let stats = s.stats();
        let range = entry.shards.get(i);
        let nvme: Vec<Json> = m
            .value
            .levels
            .iter()
            .enumerate()
            .map(|(l, lv)| {
                json!({
                    "level": l,
                    "ssts": lv.ssts.len(),
                    "bytes": lv.ssts.iter().map(|x| x.size_bytes).sum::<u64>(),
                    "entries": lv.ssts.iter().map(|x| x.entries).sum::<u64>(),
                })
            })
            .collect();
        let s3: Vec<Json> = m
            .value
            .s3_levels
            .iter()
            .enumerate()
            .map(|(l, lv)| {
                let groups: Vec<Json> = lv
                    .groups
                    .iter()
                    .enumerate()
                    .map(|(g, run)| {
                        json!({
                            "group": g,
                            "columns": entry.column_groups.get(l).and_then(|c| c.get(g)),
                            "files": run.files.len(),
                            "rows": run.files.iter().map(|f| f.rows).sum::<u64>(),
                            "bytes": run.files.iter().map(|f| f.size_bytes).sum::<u64>(),
                        })
                    })
                    .collect();
                json!({"level": l + 1, "groups": groups})
            })
            .collect();
        let versions: Vec<Json> = s
            .manifest_versions()
            .await?
            .into_iter()
            .map(|(v, bytes, modified)| {
                json!({"version": v, "bytes": bytes, "age_ms": now.saturating_sub(modified)})
            })
            .collect();
        let pins: Vec<Json> = s
            .pins()
            .await?
            .into_iter()
            .map(|(reader, p)| {
                json!({
                    "reader": reader,
                    "manifest_version": p.manifest_version,
                    "expires_at_ms": p.expires_at_ms,
                    "live": p.expires_at_ms >= now,
                })
            })
            .collect();
        shards.push(json!({
            "shard": s.name(),
            "key_start": range.map(|r| hex::encode(&r.key_start)),
            "key_end": range.and_then(|r| r.key_end.as_ref().map(hex::encode)),
            "writer_epoch": m.value.writer_epoch,
            "lease": lease.map(|l| json!({
                "owner": l.owner.name,
                "http": l.owner.http,
                "grpc": l.owner.flight,
                "expires_at_ms": l.expires_at_ms,
                "generation": l.generation,
            })),
            "manifest_version": m.version,
            "last_seq": s.last_seq(),
            "seq_flushed": m.value.seq_flushed,
            "wal_replay_after": m.value.wal_replay_after,
            "compaction_floor_seq": m.value.compaction_floor_seq,
            "manifest_written_at_ms": m.value.written_at_ms,
            "nvme_levels": nvme,
            "s3_levels": s3,
            "backlog": {
                "memtables_frozen": stats.memtables_frozen,
                "sorted_runs": stats.sorted_runs,
                "s3_jobs_outstanding": stats.jobs_outstanding,
                "s3_jobs_committed": stats.s3_jobs,
                "stalls": stats.stalls,
            },
            "manifest_versions": versions,
            "snapshots": {
                "in_process": s.local_snapshots(),
                "durable_pins": pins,
            },
            "jobs_outstanding": s.outstanding_jobs(),
        }));
    }
    Ok(axum::Json(json!({"table": entry.name, "id": entry.id, "shards": shards})).into_response())
}

#[derive(Deserialize)]
struct GcParams {
    #[serde(default)]
    dry_run: bool,
}

async fn admin_gc(
    State(st): Shared,
    who: Caller,
    Path(table): Path<String>,
    Query(p): Query<GcParams>,
) -> ApiResult<Response> {
    who.check(&table, Scope::Admin)?;
    let t = st.db.table(&table).await?;
    let mut shards = Vec::new();
    for s in t.shards() {
        let shard = if p.dry_run {
            let plan = s.gc_plan().await?;
            fn paths<T: ToString>(v: &[T]) -> Vec<String> {
                v.iter().map(ToString::to_string).collect()
            }
            json!({
                "shard": s.name(),
                "ssts": paths(&plan.ssts),
                "wal_segments": paths(&plan.wal_segments),
                "parquet": paths(&plan.parquet),
                "jobs": plan.jobs,
                "manifests": plan.manifests,
                "manifests_retained": plan.manifests_retained,
            })
        } else {
            let r = s.gc().await?;
            json!({
                "shard": s.name(),
                "ssts": r.ssts_deleted,
                "wal_segments": r.wal_segments_deleted,
                "parquet": r.parquet_deleted,
                "jobs": r.jobs_deleted,
                "manifests": r.manifests_deleted,
            })
        };
        shards.push(shard);
    }
    Ok(axum::Json(json!({"dry_run": p.dry_run, "shards": shards})).into_response())
}

async fn admin_jobs(State(st): Shared, who: Caller) -> ApiResult<Response> {
    if !who.0.all_namespaces() || !who.0.allows("*", Scope::Admin) {
        return Err(query_error(QueryError::new(
            QueryErrorKind::Forbidden,
            format!(
                "key {} cannot list compaction jobs: that needs admin scope on every namespace (\"*\")",
                who.0.name
            ),
        )));
    }
    let store = st.db.store();
    let layout = st.db.layout().clone();
    let now = now_ms();
    let mut jobs = Vec::new();
    for id in strata_engine::jobs::list(store, &layout, "").await? {
        let Some(spec) = strata_engine::jobs::spec(store, &layout, &id).await? else {
            continue;
        };
        let lease = strata_engine::jobs::lease(store, &layout, &id).await?;
        let done = strata_engine::jobs::result(store, &layout, &id).await?;
        jobs.push(json!({
            "id": id,
            "table": spec.table.name,
            "shard_dir": spec.shard_dir,
            "target_level": spec.target_level,
            "input_bytes": spec.input_bytes,
            "age_ms": now.saturating_sub(spec.created_at_ms),
            "state": match (&done, &lease) {
                (Some(_), _) => "done",
                (None, Some(l)) if l.expires_at_ms >= now => "running",
                (None, Some(_)) => "lease_expired",
                (None, None) => "waiting",
            },
            "worker": lease.as_ref().map(|l| l.worker.clone()),
            "attempt": lease.as_ref().map(|l| l.attempt),
            "lease_expires_in_ms": lease.as_ref().map(|l| l.expires_at_ms as i64 - now as i64),
        }));
    }
    Ok(axum::Json(json!({"jobs": jobs})).into_response())
}
