//! The data API over gRPC (`proto/strata/v1/data.proto`, served next to Arrow Flight SQL on
//! the Flight port): the same operations, checks and errors as the HTTP API under `/v1`,
//! plus a streaming write. Rows travel as Arrow IPC streams. The Rust code is generated
//! from the checked-in `.proto` by `build.rs` (protox + tonic-prost-build: no `protoc`).

use std::pin::Pin;

use arrow::array::RecordBatch;
use axum::body::Bytes;
use futures::{Stream, StreamExt};
use strata_engine::{Db, Durability, Mutation, ScanOptions, WriteOptions};
use strata_query::auth::{Authenticator, Principal, Scope, split_name};
use tonic::{Request, Response, Status, Streaming};

use crate::api::{ApiError, arrow_batches, key_values, parse_type, type_name};

/// The generated protobuf messages and service traits.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("strata.v1");
}

use pb::data_server::{Data, DataServer};

/// Rows per message of a scan (each message is read when the client wants it).
const SCAN_MESSAGE_ROWS: usize = 8192;

/// The gRPC data service over a database.
#[derive(Clone)]
pub struct DataService {
    db: Db,
    auth: Authenticator,
    /// The largest request message accepted (`query.message_bytes_max`).
    message_bytes_max: usize,
}

impl DataService {
    /// The service's full gRPC name (`strata.v1.Data`), as the health service reports it.
    pub const NAME: &'static str = <DataServer<Self> as tonic::server::NamedService>::NAME;

    /// The service, callers authenticated by `auth`, messages up to `message_bytes_max`.
    pub fn new(db: Db, auth: Authenticator, message_bytes_max: usize) -> Self {
        Self {
            db,
            auth,
            message_bytes_max,
        }
    }

    /// The tonic server of it.
    pub fn into_server(self) -> DataServer<Self> {
        let limit = self.message_bytes_max;
        DataServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(usize::MAX)
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<Principal, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        self.auth.principal(header).map_err(|e| e.grpc_status())
    }
}

/// The gRPC status of an API error (same codes as HTTP).
fn status(e: ApiError) -> Status {
    if let Some((_, flight)) = &e.owner {
        // A redirect: the caller retries at the owner's gRPC address.
        let mut s = Status::unavailable(format!("{}: {}", e.code, e.message));
        if let Ok(v) = flight.parse() {
            s.metadata_mut().insert("strata-owner", v);
        }
        return s;
    }
    let code = match e.status.as_u16() {
        400 | 413 | 422 => tonic::Code::InvalidArgument,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 => tonic::Code::NotFound,
        409 => tonic::Code::AlreadyExists,
        410 => tonic::Code::FailedPrecondition,
        408 => tonic::Code::DeadlineExceeded,
        429 | 503 => tonic::Code::Unavailable,
        _ => tonic::Code::Internal,
    };
    Status::new(code, format!("{}: {}", e.code, e.message))
}

fn engine(e: strata_engine::Error) -> Status {
    status(ApiError::from(e))
}

fn check(who: &Principal, table: &str, scope: Scope) -> Result<(), Status> {
    who.check(split_name(table).0, scope)
        .map_err(|e| e.grpc_status())
}

fn ipc(batches: &[RecordBatch], schema: &arrow::datatypes::Schema) -> Result<Vec<u8>, Status> {
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, schema)
        .map_err(|e| Status::internal(e.to_string()))?;
    for b in batches {
        w.write(b).map_err(|e| Status::internal(e.to_string()))?;
    }
    w.finish().map_err(|e| Status::internal(e.to_string()))?;
    drop(w);
    Ok(out)
}

fn info(entry: &strata_manifest::TableEntry) -> pb::TableInfo {
    pb::TableInfo {
        name: entry.name.clone(),
        columns: entry
            .schema
            .fields()
            .iter()
            .map(|f| pb::Column {
                name: f.name().clone(),
                r#type: type_name(f.data_type()),
                nullable: f.is_nullable(),
            })
            .collect(),
        primary_key: entry.primary_key.clone(),
    }
}

impl DataService {
    /// One atomic write; (rows, sequence number).
    async fn write_one(
        &self,
        who: &Principal,
        req: pb::WriteRequest,
    ) -> Result<(u64, u64), Status> {
        check(who, &req.table, Scope::Write)?;
        let t = self.db.table(&req.table).await.map_err(engine)?;
        let kind = pb::WriteKind::try_from(req.kind).map_err(|_| {
            Status::invalid_argument(format!("kind: unknown write kind {}", req.kind))
        })?;
        let durability = match pb::Durability::try_from(req.durability) {
            Ok(pb::Durability::Remote) => Durability::Remote,
            Ok(pb::Durability::Local) => Durability::Local,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "durability: unknown durability {}",
                    req.durability
                )));
            }
        };
        let batches = arrow_batches(&Bytes::from(req.arrow_ipc)).map_err(status)?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            return Ok((0, 0));
        }
        let ms: Vec<Mutation> = batches
            .into_iter()
            .map(|b| match kind {
                pb::WriteKind::Upsert => Mutation::Upsert(b),
                pb::WriteKind::Update => Mutation::Update(b),
                pb::WriteKind::Delete => Mutation::Delete(b),
            })
            .collect();
        let seq = t
            .write(&ms, WriteOptions { durability })
            .await
            .map_err(engine)?;
        Ok((rows as u64, seq))
    }
}

type RowsStream = Pin<Box<dyn Stream<Item = Result<pb::Rows, Status>> + Send>>;

#[tonic::async_trait]
impl Data for DataService {
    async fn create_table(
        &self,
        request: Request<pb::CreateTableRequest>,
    ) -> Result<Response<pb::TableInfo>, Status> {
        let who = self.caller(&request)?;
        let req = request.into_inner();
        check(&who, &req.name, Scope::Admin)?;
        let mut fields = Vec::with_capacity(req.columns.len());
        for (i, c) in req.columns.iter().enumerate() {
            let dt = parse_type(&c.r#type).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "columns[{i}].type: unknown type {:?} (boolean, int8..int64, uint8..uint64, float32, float64, string, binary, date, timestamp_s/_ms/_ns, timestamp)",
                    c.r#type
                ))
            })?;
            fields.push(arrow::datatypes::Field::new(&c.name, dt, c.nullable));
        }
        let pk: Vec<&str> = req.primary_key.iter().map(String::as_str).collect();
        let entry = self
            .db
            .create_table(&req.name, arrow::datatypes::Schema::new(fields), &pk)
            .await
            .map_err(engine)?;
        Ok(Response::new(info(&entry)))
    }

    async fn list_tables(
        &self,
        request: Request<pb::ListTablesRequest>,
    ) -> Result<Response<pb::ListTablesResponse>, Status> {
        let who = self.caller(&request)?;
        let tables = self.db.list_tables().await.map_err(engine)?;
        Ok(Response::new(pb::ListTablesResponse {
            tables: tables
                .into_iter()
                .map(|t| t.name)
                .filter(|n| who.can_read(split_name(n).0))
                .collect(),
        }))
    }

    async fn describe_table(
        &self,
        request: Request<pb::TableRef>,
    ) -> Result<Response<pb::TableInfo>, Status> {
        let who = self.caller(&request)?;
        let name = request.into_inner().name;
        check(&who, &name, Scope::Read)?;
        let entry = self.db.describe(&name).await.map_err(engine)?;
        Ok(Response::new(info(&entry)))
    }

    async fn drop_table(
        &self,
        request: Request<pb::TableRef>,
    ) -> Result<Response<pb::DropTableResponse>, Status> {
        let who = self.caller(&request)?;
        let name = request.into_inner().name;
        check(&who, &name, Scope::Admin)?;
        self.db.drop_table(&name).await.map_err(engine)?;
        Ok(Response::new(pb::DropTableResponse {}))
    }

    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let who = self.caller(&request)?;
        let (rows, seq) = self.write_one(&who, request.into_inner()).await?;
        Ok(Response::new(pb::WriteResponse {
            rows,
            seq,
            writes: 1,
        }))
    }

    async fn write_stream(
        &self,
        request: Request<Streaming<pb::WriteRequest>>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let who = self.caller(&request)?;
        let mut stream = request.into_inner();
        let mut done = pb::WriteResponse::default();
        while let Some(msg) = stream.next().await {
            let msg = msg?;
            match self.write_one(&who, msg).await {
                Ok((rows, seq)) => {
                    done.rows += rows;
                    done.seq = done.seq.max(seq);
                    done.writes += 1;
                }
                Err(e) => {
                    return Err(Status::new(
                        e.code(),
                        format!(
                            "{} (write {} of the stream; the {} writes and {} rows before it are durable)",
                            e.message(),
                            done.writes + 1,
                            done.writes,
                            done.rows
                        ),
                    ));
                }
            }
        }
        Ok(Response::new(done))
    }

    async fn get(&self, request: Request<pb::GetRequest>) -> Result<Response<pb::Rows>, Status> {
        let who = self.caller(&request)?;
        let req = request.into_inner();
        check(&who, &req.table, Scope::Read)?;
        let t = self.db.table(&req.table).await.map_err(engine)?;
        if req.key.len() != t.table_schema().key_types.len() {
            return Err(Status::invalid_argument(format!(
                "key: give one value per key column {:?}",
                t.table_schema().entry.primary_key
            )));
        }
        let texts: Vec<&str> = req.key.iter().map(String::as_str).collect();
        let key = key_values(&t, &texts, "key").map_err(status)?;
        let cols: Vec<&str> = req.columns.iter().map(String::as_str).collect();
        let row = t
            .get(&key, (!cols.is_empty()).then_some(cols.as_slice()), None)
            .await
            .map_err(engine)?
            .ok_or_else(|| Status::not_found("not_found: no row with this key"))?;
        Ok(Response::new(pb::Rows {
            arrow_ipc: ipc(std::slice::from_ref(&row), &row.schema())?,
        }))
    }

    type ScanStream = RowsStream;

    async fn scan(
        &self,
        request: Request<pb::ScanRequest>,
    ) -> Result<Response<Self::ScanStream>, Status> {
        let who = self.caller(&request)?;
        let req = request.into_inner();
        check(&who, &req.table, Scope::Read)?;
        let t = self.db.table(&req.table).await.map_err(engine)?;
        let bound =
            |v: &[String], what: &str| -> Result<Option<Vec<strata_engine::Value>>, Status> {
                if v.is_empty() {
                    return Ok(None);
                }
                let texts: Vec<&str> = v.iter().map(String::as_str).collect();
                key_values(&t, &texts, what).map(Some).map_err(status)
            };
        let (start, end) = (bound(&req.start, "start")?, bound(&req.end, "end")?);
        // Key columns are always read (each message continues after the last key); the
        // requested projection applies after.
        let keys = t.table_schema().entry.primary_key.clone();
        let read = (!req.columns.is_empty()).then(|| {
            let mut r: Vec<String> = keys
                .iter()
                .filter(|k| !req.columns.contains(k))
                .cloned()
                .collect();
            r.extend(req.columns.iter().cloned());
            r
        });
        let pager = ScanPager {
            snapshot: t.snapshot(),
            t,
            start,
            end,
            skip: None,
            remaining: if req.limit == 0 { u64::MAX } else { req.limit },
            read,
            columns: (!req.columns.is_empty()).then_some(req.columns),
            keys,
            done: false,
        };
        // The first page is read now, so that a bad projection fails the call itself.
        let mut pager = pager;
        let first = pager.next_page().await?;
        let stream = futures::stream::unfold((pager, first), |(mut pager, pending)| async move {
            let item = match pending {
                Some(rows) => rows,
                None => match pager.next_page().await {
                    Ok(Some(rows)) => rows,
                    Ok(None) => return None,
                    Err(e) => {
                        pager.done = true;
                        return Some((Err(e), (pager, None)));
                    }
                },
            };
            Some((Ok(item), (pager, None)))
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A scan read one message at a time at one snapshot: each page starts at the previous
/// page's last key (and skips it), so a client reading slowly holds no rows in the server
/// beyond one message, and a scan has no size limit.
struct ScanPager {
    t: strata_engine::Table,
    snapshot: strata_engine::Snapshot,
    start: Option<Vec<strata_engine::Value>>,
    end: Option<Vec<strata_engine::Value>>,
    /// The encoded key the next page starts with and must skip.
    skip: Option<Vec<u8>>,
    remaining: u64,
    /// Columns read (the key columns first when a projection is asked for); None = all.
    read: Option<Vec<String>>,
    /// Columns returned; None = all.
    columns: Option<Vec<String>>,
    keys: Vec<String>,
    done: bool,
}

impl ScanPager {
    async fn next_page(&mut self) -> Result<Option<pb::Rows>, Status> {
        if self.done || self.remaining == 0 {
            return Ok(None);
        }
        let want = (SCAN_MESSAGE_ROWS as u64).min(self.remaining) as usize;
        let read: Option<Vec<&str>> = self
            .read
            .as_ref()
            .map(|c| c.iter().map(String::as_str).collect());
        // The previous page's last key (skipped) and one row more than needed (proof that
        // more rows follow).
        let extra = if self.skip.is_some() { 2 } else { 1 };
        let batch = self
            .t
            .scan(
                &ScanOptions {
                    start: self.start.clone(),
                    end: self.end.clone(),
                    limit: want + extra,
                    projection: read.as_deref(),
                },
                Some(&self.snapshot),
            )
            .await
            .map_err(engine)?;
        let schema = batch.schema();
        let key_cols: Vec<usize> = self
            .keys
            .iter()
            .map(|k| {
                schema
                    .index_of(k)
                    .map_err(|e| Status::internal(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let ks = self.t.table_schema().clone();
        let key_of = |row: usize| -> Result<(Vec<strata_engine::Value>, Vec<u8>), Status> {
            let vals = key_cols
                .iter()
                .map(|c| strata_engine::value::value_at(batch.column(*c).as_ref(), row))
                .collect::<strata_engine::Result<Vec<_>>>()
                .map_err(engine)?;
            let enc = ks.encode_key(&vals).map_err(engine)?;
            Ok((vals, enc))
        };
        let mut offset = 0;
        if batch.num_rows() > 0
            && let Some(skip) = &self.skip
            && key_of(0)?.1 == *skip
        {
            offset = 1;
        }
        let available = batch.num_rows() - offset;
        let rows = available.min(want);
        if available <= want {
            self.done = true; // nothing after this page
        }
        if rows == 0 {
            self.done = true;
            return Ok(None);
        }
        let (vals, enc) = key_of(offset + rows - 1)?;
        self.start = Some(vals);
        self.skip = Some(enc);
        self.remaining -= rows as u64;
        let mut page = batch.slice(offset, rows);
        if let Some(cols) = &self.columns {
            let idx: Vec<usize> = cols
                .iter()
                .map(|c| {
                    schema
                        .index_of(c)
                        .map_err(|e| Status::internal(e.to_string()))
                })
                .collect::<Result<_, _>>()?;
            page = page
                .project(&idx)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        let schema = page.schema();
        Ok(Some(pb::Rows {
            arrow_ipc: ipc(&[page], &schema)?,
        }))
    }
}

/// Malformed protobuf never panics the decoders: random and mutated bytes decode to an
/// error or to a message whose Arrow payload then goes through the (also fuzzed) IPC
/// decoder. `STRATA_PROPTEST_CASES` sets the cases.
#[cfg(test)]
mod fuzz {
    use super::pb;
    use crate::api::fuzz::cases;
    use proptest::prelude::*;
    use prost::Message;

    fn valid_write() -> Vec<u8> {
        pb::WriteRequest {
            table: "t".into(),
            kind: pb::WriteKind::Update as i32,
            arrow_ipc: vec![0xff, 0xff, 0xff, 0xff, 8, 0, 0, 0],
            durability: pb::Durability::Local as i32,
        }
        .encode_to_vec()
    }

    fn exercise(bytes: &[u8]) {
        let _ = pb::CreateTableRequest::decode(bytes);
        let _ = pb::TableRef::decode(bytes);
        let _ = pb::GetRequest::decode(bytes);
        let _ = pb::ScanRequest::decode(bytes);
        if let Ok(w) = pb::WriteRequest::decode(bytes) {
            let _ = pb::WriteKind::try_from(w.kind);
            let _ = crate::api::arrow_batches(&axum::body::Bytes::from(w.arrow_ipc));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: cases(),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn protobuf_requests_never_panic(
            raw in prop::collection::vec(any::<u8>(), 0..256),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            exercise(&raw);
            let mut m = valid_write();
            for (i, b) in &flips {
                let at = i.index(m.len());
                m[at] = *b;
            }
            exercise(&m);
            let end = cut.index(m.len() + 1);
            exercise(&m[..end]);
        }
    }
}
