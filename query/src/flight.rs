//! Arrow Flight SQL over gRPC.
//!
//! - Statements: `GetFlightInfo(CommandStatementQuery)` plans a query (the plan waits for
//!   its DoGet, see `Handoff`; the ticket also carries the SQL) and `DoGet` streams its
//!   Arrow batches. A statement that changes data or tables (INSERT / UPDATE / DELETE,
//!   CREATE / DROP TABLE) runs at GetFlightInfo, exactly once, fetched or not.
//!   `DoPut(CommandStatementUpdate)` runs one and returns its row count.
//! - Bulk ingest: `DoPut(CommandStatementIngest)` loads a stream of Arrow batches into a
//!   table ([`crate::ingest`]: upserts; `TABLE_NOT_EXIST_OPTION_CREATE` with a
//!   `primary_key` option of comma-separated columns creates it).
//! - Prepared statements ([`crate::prepared`]): create, bind parameters by `DoPut`, run as
//!   a query or an update (one run per parameter row), close.
//! - Catalog metadata ([`crate::metadata`]): catalogs, schemas (namespaces), tables,
//!   table types, primary keys, SQL info and XDBC type info, filtered by the caller's key.
//!
//! - Writes for another ingest node's tables (statements without parameters) go to that
//!   node when the service has a forwarder ([`QueryService::with_forward`]), else fail with
//!   UNAVAILABLE naming the owner.
//! - Keys travel as `authorization: Bearer <key>`; a handshake with Basic credentials (the
//!   key as the password) answers with that bearer token.
//!
//! Errors map to gRPC statuses in [`crate::error`]. Not yet: Substrait, transactions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::UInt64Array;
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TableExistsOption, TableNotExistOption,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket, flight_service_server::FlightService,
};
use futures::{Stream, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{Authenticator, Principal};

use crate::error::{QueryError, QueryErrorKind};
use crate::ingest::{IfExists, IfMissing, IngestRequest};
use crate::metadata;
use crate::prepared::Statements;
use crate::service::{
    Checked, Forwarded, Planned, QueryService, query_error, with_literals, writes,
};

/// The Flight SQL service.
#[derive(Debug, Clone)]
pub struct FlightSql {
    q: QueryService,
    auth: Authenticator,
    handoff: Arc<Handoff>,
    prepared: Arc<Statements>,
}

/// Statements GetFlightInfo planned, kept for the DoGet that follows (a client asks for the
/// flight's schema, then for its data): the statement is parsed and planned once, not
/// twice. A plan waits at most [`HANDOFF_TTL`] and [`HANDOFF_MAX`] plans wait at most (the
/// oldest goes first); a DoGet that finds no plan (expired, or another server answered the
/// GetFlightInfo) plans the statement from the SQL its ticket carries, as before.
#[derive(Default)]
struct Handoff {
    next: AtomicU64,
    plans: parking_lot::Mutex<HashMap<u64, (Instant, Principal, Planned)>>,
}

/// How long a plan waits for its DoGet.
pub const HANDOFF_TTL: Duration = Duration::from_secs(30);
/// How many plans wait for their DoGet at most.
pub const HANDOFF_MAX: usize = 256;
const HANDOFF_TAG: &[u8] = b"strata-plan/";

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handoff({} plans)", self.plans.lock().len())
    }
}

impl Handoff {
    fn put(&self, who: Principal, planned: Planned) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut plans = self.plans.lock();
        plans.retain(|_, (at, _, _)| at.elapsed() < HANDOFF_TTL);
        while plans.len() >= HANDOFF_MAX {
            let Some(oldest) = plans.keys().min().copied() else {
                break;
            };
            plans.remove(&oldest);
        }
        plans.insert(id, (Instant::now(), who, planned));
        id
    }

    /// The plan `id` if it is still here and was made for `who`.
    fn take(&self, id: u64, who: &Principal) -> Option<Planned> {
        let mut plans = self.plans.lock();
        match plans.get(&id) {
            Some((at, owner, _)) if owner == who && at.elapsed() < HANDOFF_TTL => {
                plans.remove(&id).map(|(_, _, p)| p)
            }
            _ => None,
        }
    }
}

/// A statement ticket: `strata-plan/<id>\n<sql>` when a plan waits for it, else the SQL.
fn ticket_handle(plan: Option<u64>, sql: &str) -> Vec<u8> {
    match plan {
        Some(id) => [HANDOFF_TAG, format!("{id}\n").as_bytes(), sql.as_bytes()].concat(),
        None => sql.as_bytes().to_vec(),
    }
}

/// The waiting plan's id (if any) and the SQL of a statement ticket.
fn parse_ticket(handle: &[u8]) -> Result<(Option<u64>, String), Status> {
    if let Some(rest) = handle.strip_prefix(HANDOFF_TAG)
        && let Some(nl) = rest.iter().position(|b| *b == b'\n')
        && let Some(id) = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
    {
        return Ok((Some(id), sql_of_ticket(&rest[nl + 1..])?));
    }
    Ok((None, sql_of_ticket(handle)?))
}

impl FlightSql {
    /// Serves `q` to callers `auth` lets in.
    pub fn new(q: QueryService, auth: Authenticator) -> Self {
        Self {
            q,
            auth,
            handoff: Arc::default(),
            prepared: Arc::default(),
        }
    }

    /// The caller of a request: its `authorization: Bearer <key>` metadata.
    /// The row count of `sql` run on the ingest node owning its table, when `e` says
    /// another node owns it and this server forwards writes there (INSERT / UPDATE /
    /// DELETE; parameters written in as literals); else `e`.
    async fn forward_or(
        &self,
        e: QueryError,
        sql: &str,
        params: &[datafusion::common::ScalarValue],
        authorization: Option<String>,
    ) -> Result<i64, Status> {
        match (self.q.forward(), &e.owner) {
            (Some(forward), Some(owner)) if e.kind == QueryErrorKind::NotOwner && writes(sql) => {
                let sql = if params.is_empty() {
                    sql.to_string()
                } else {
                    with_literals(sql, params).map_err(status)?
                };
                forward(Forwarded {
                    owner: owner.clone(),
                    sql,
                    authorization,
                })
                .await
                .map_err(status)
            }
            _ => Err(status(e)),
        }
    }

    /// [`QueryService::prepare_checked_as`], with a statement for another ingest node's table run
    /// there (see [`FlightSql::forward_or`]) and its count handed on as the result. The
    /// third value is, for a statement that ran (it changed data or tables), the rows it
    /// changed: a FlightInfo's `total_records`, which ADBC reports as `rowcount`.
    async fn prepare_or_forward<T>(
        &self,
        sql: &str,
        checked: Option<Checked>,
        params: &[datafusion::common::ScalarValue],
        who: &Principal,
        request: &Request<T>,
    ) -> Result<(arrow::datatypes::SchemaRef, Planned, Option<i64>), Status> {
        match self.q.prepare_checked_as(sql, checked, params, who).await {
            Ok((schema, planned, false)) => Ok((schema, planned, None)),
            Ok((schema, planned, true)) => {
                // Its result is in memory: read it for the count, keep it for the DoGet.
                let batches = planned.df.clone().collect().await.map_err(|e| {
                    status(QueryError::new(QueryErrorKind::Internal, e.to_string()))
                })?;
                Ok((schema, planned, Some(update_count(&batches))))
            }
            Err(e) => {
                let count = self
                    .forward_or(e, sql, params, authorization(request))
                    .await?;
                let schema = Arc::new(arrow::datatypes::Schema::new(vec![
                    arrow::datatypes::Field::new(
                        "count",
                        arrow::datatypes::DataType::UInt64,
                        false,
                    ),
                ]));
                let batch = arrow::array::RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(UInt64Array::from(vec![count as u64]))],
                )
                .map_err(|e| Status::internal(e.to_string()))?;
                let ctx = datafusion::prelude::SessionContext::new();
                let df = ctx
                    .read_batch(batch)
                    .map_err(|e| Status::internal(e.to_string()))?;
                Ok((schema, Planned::new(df), Some(count)))
            }
        }
    }

    /// What the caller may see of the catalog (metadata commands).
    async fn visible<T>(&self, request: &Request<T>) -> Result<metadata::Visible, Status> {
        let who = self.caller(request)?;
        metadata::Visible::load(self.q.db(), &who)
            .await
            .map_err(status)
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<Principal, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        self.auth.principal(header).map_err(status)
    }

    /// The tonic service. It accepts messages of up to the service's `message_bytes_max`
    /// (by default [`MESSAGE_BYTES_MAX`]; tonic's default of 4 MiB refuses a bulk-ingest
    /// batch of 100,000 rows of 31 integers); what it sends is not limited (result batches
    /// are as large as a query's batches).
    pub fn into_server(self) -> FlightServiceServer<Self> {
        let limit = self.q.config().message_bytes_max;
        FlightServiceServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(usize::MAX)
    }
}

/// The default of the largest request message (`query.message_bytes_max`): 64 MiB.
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// Serves Flight SQL on `listener` until `shutdown` resolves.
pub async fn serve(
    q: QueryService,
    auth: Authenticator,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    serve_tls(q, auth, listener, None, None, None, shutdown).await
}

/// More gRPC services served next to Flight SQL on its port (e.g. the data API of
/// `strata serve`), and their names as the gRPC health service reports them.
pub struct ExtraGrpc {
    /// The services.
    pub routes: tonic::service::Routes,
    /// Their full names (`tonic::server::NamedService::NAME`).
    pub names: Vec<&'static str>,
}

/// [`serve`] over TLS when `tls` is given, with more gRPC services (`extra`, e.g. the
/// data API of `strata serve`) on the same port.
pub async fn serve_tls(
    q: QueryService,
    auth: Authenticator,
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
    extra: Option<ExtraGrpc>,
    metrics: Option<crate::metrics::ServiceMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream_from(listener);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let (extra, mut names) = match extra {
        Some(e) => (e.routes, e.names),
        None => (tonic::service::Routes::default(), Vec::new()),
    };
    names.extend([
        "",
        <FlightServiceServer<FlightSql> as tonic::server::NamedService>::NAME,
    ]);
    // The standard gRPC health service (grpc.health.v1.Health), as load balancers and
    // `grpc_health_probe` ask it, for the server ("") and each service: NOT_SERVING until
    // the node is ready (the tables it writes open: see [`crate::ready`]), SERVING from
    // then until the server starts stopping, NOT_SERVING after.
    let (reporter, health) = tonic_health::server::health_reporter();
    let set_all = move |status: tonic_health::ServingStatus| {
        let (reporter, names) = (reporter.clone(), names.clone());
        async move {
            for name in names {
                reporter.set_service_status(name, status).await;
            }
        }
    };
    set_all(tonic_health::ServingStatus::NotServing).await;
    let stopping = tokio_util::sync::CancellationToken::new();
    let startup = q.startup().clone();
    let reporting = tokio::spawn({
        let stopping = stopping.clone();
        async move {
            tokio::select! {
                () = startup.wait() => {}
                () = stopping.cancelled() => return,
            }
            set_all(tonic_health::ServingStatus::Serving).await;
            stopping.cancelled().await;
            set_all(tonic_health::ServingStatus::NotServing).await;
        }
    });
    let shutdown = async move {
        shutdown.await;
        stopping.cancel();
        let _ = reporting.await;
    };
    let mut routes = extra
        .add_service(health)
        .add_service(FlightSql::new(q, auth).into_server());
    if let Some(m) = metrics {
        routes = tonic::service::Routes::from(routes.into_axum_router().layer(
            axum::middleware::from_fn_with_state(m, crate::metrics::track_grpc),
        ));
    }
    builder
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl Stream<Item = std::io::Result<Gathered>> {
    futures::stream::unfold(listener, |l| async move {
        let r = l.accept().await.map(|(s, _addr): (_, SocketAddr)| {
            let _ = s.set_nodelay(true);
            Gathered(tokio::io::BufWriter::with_capacity(GATHERED_BYTES, s))
        });
        Some((r, l))
    })
}

/// What a connection gathers before a write reaches the socket: four maximum-size HTTP/2
/// frames.
const GATHERED_BYTES: usize = 64 << 10;

/// A client connection whose writes are gathered until HTTP/2 flushes them, so that a
/// response goes out in one write: its headers, data and gRPC trailers in one packet and
/// one wake-up of the client instead of two.
///
/// h2 writes a batch of frames from its own buffer, but keeps a DATA frame's payload aside
/// (over 256 bytes where the socket takes vectored writes, 1 KiB where it does not) and
/// flushes before it encodes the next frame, so a response's trailers always went out in
/// a write of their own. This connection says it takes no vectored writes, so payloads up
/// to 1 KiB are copied into h2's buffer, and gathers what h2 writes, larger payloads
/// included, until h2 flushes.
struct Gathered(tokio::io::BufWriter<tokio::net::TcpStream>);

impl tokio::io::AsyncRead for Gathered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Gathered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

impl tonic::transport::server::Connected for Gathered {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().connect_info()
    }
}

fn status(e: QueryError) -> Status {
    e.grpc_status()
}

/// The ingest a Flight SQL command asks for; what Strata does not do is refused.
fn ingest_request(cmd: &CommandStatementIngest) -> Result<IngestRequest, Status> {
    if cmd.transaction_id.is_some() {
        return Err(Status::unimplemented("Strata has no transactions"));
    }
    if cmd.temporary {
        return Err(Status::invalid_argument("Strata has no temporary tables"));
    }
    let opts = cmd.table_definition_options.unwrap_or_default();
    let if_missing = match TableNotExistOption::try_from(opts.if_not_exist) {
        Ok(TableNotExistOption::Create) => IfMissing::Create,
        _ => IfMissing::Fail,
    };
    let if_exists = match TableExistsOption::try_from(opts.if_exists) {
        Ok(TableExistsOption::Fail) => IfExists::Fail,
        Ok(TableExistsOption::Replace) => {
            return Err(Status::invalid_argument(
                "replacing a table is not supported: drop it first, or append (upsert)",
            ));
        }
        _ => IfExists::Append,
    };
    let primary_key = cmd
        .options
        .get("primary_key")
        .map(|k| {
            k.split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Ok(IngestRequest {
        table: cmd.table.clone(),
        namespace: cmd.schema.clone(),
        if_missing,
        if_exists,
        primary_key,
        authorization: None,
    })
}

fn sql_of_ticket(handle: &[u8]) -> Result<String, Status> {
    String::from_utf8(handle.to_vec())
        .map_err(|_| Status::invalid_argument("the statement handle is not UTF-8 SQL"))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        // The key travels as `authorization: Bearer <key>` on every call. A handshake checks
        // it early, and answers Basic credentials (user and password, the key as the
        // password) with the bearer token to send from then on, as Flight SQL clients that
        // log in with a user and password expect.
        self.caller(&request)?;
        let key = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::auth::key_of);
        let out = futures::stream::once(async {
            Ok(HandshakeResponse {
                protocol_version: 0,
                payload: Default::default(),
            })
        });
        let mut response = Response::new(Box::pin(out) as <Self as FlightService>::HandshakeStream);
        if let Some(token) = key.and_then(|k| format!("Bearer {k}").parse().ok()) {
            response.metadata_mut().insert("authorization", token);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let who = self.caller(&request)?;
        let (schema, planned, changed) = self
            .prepare_or_forward(&query.query, None, &[], &who, &request)
            .await?;
        let plan = self.handoff.put(who, planned);
        // A statement that ran here must not run again: its ticket carries no SQL.
        let sql = if changed.is_some() {
            ""
        } else {
            query.query.as_str()
        };
        let ticket = TicketStatementQuery {
            statement_handle: ticket_handle(Some(plan), sql).into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner())
            .with_total_records(changed.unwrap_or(-1));
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let who = self.caller(&request)?;
        let (plan, sql) = parse_ticket(&ticket.statement_handle)?;
        let (schema, stream) = match plan.and_then(|id| self.handoff.take(id, &who)) {
            Some(planned) => self.q.stream_planned(planned, self.q.deadline()).await,
            None if sql.is_empty() => return Err(already_ran()),
            None => self.q.stream_as(&sql, &who).await,
        }
        .map_err(status)?;
        Ok(results(schema, stream))
    }

    async fn do_put_statement_update(
        &self,
        ticket: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.caller(&request)?;
        match self.q.collect_as(&ticket.query, &who).await {
            Ok((_, batches)) => Ok(update_count(&batches)),
            Err(e) => {
                self.forward_or(e, &ticket.query, &[], authorization(&request))
                    .await
            }
        }
    }

    async fn do_put_statement_ingest(
        &self,
        cmd: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.caller(&request)?;
        let mut req = ingest_request(&cmd)?;
        req.authorization = authorization(&request);
        let data = request
            .into_inner()
            .map_err(|s| FlightError::Tonic(Box::new(s)));
        let batches = FlightRecordBatchStream::new_from_flight_data(data).map_err(|e| match e {
            FlightError::Tonic(s) => QueryError::new(QueryErrorKind::Invalid, s.message()),
            other => QueryError::new(
                QueryErrorKind::Invalid,
                format!("decoding the Arrow stream: {other}"),
            ),
        });
        let rows = self
            .q
            .ingest_as(&req, batches, &who)
            .await
            .map_err(status)?;
        Ok(rows as i64)
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "{} is not supported by Strata's Flight SQL endpoint",
            message.type_url
        )))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        one_batch(metadata::catalogs(query).map_err(status)?)
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let v = self.visible(&request).await?;
        one_batch(metadata::schemas(query, &v).map_err(status)?)
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let v = self.visible(&request).await?;
        one_batch(metadata::tables(query, &v).map_err(status)?)
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        one_batch(metadata::table_types(query).map_err(status)?)
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        metadata_info(&metadata::primary_keys_schema(), query.as_any(), request)
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let v = self.visible(&request).await?;
        one_batch(metadata::primary_keys(query, &v).map_err(status)?)
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let data = metadata::sql_info(!self.q.is_writable());
        let schema = query.clone().into_builder(data).schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let b = query.into_builder(metadata::sql_info(!self.q.is_writable()));
        let schema = b.schema();
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        one_batch((schema, batch))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder(metadata::xdbc_types()).schema();
        metadata_info(&schema, query.as_any(), request)
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let b = query.into_builder(metadata::xdbc_types());
        let schema = b.schema();
        let batch = b.build().map_err(|e| Status::internal(e.to_string()))?;
        one_batch((schema, batch))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let who = self.caller(&request)?;
        if query.transaction_id.is_some() {
            return Err(Status::unimplemented("Strata has no transactions"));
        }
        let (results, params, changes, checked) = self
            .q
            .check_statement_as(&query.query, &who)
            .await
            .map_err(status)?;
        let handle = self.prepared.open(who, query.query, Some(checked));
        // Flight SQL tells an update from a query by an empty dataset schema (the JDBC
        // driver then runs it with DoPut and reads the row count).
        let results = if changes {
            arrow::datatypes::Schema::empty()
        } else {
            results.as_ref().clone()
        };
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema: schema_bytes(&results)?,
            parameter_schema: schema_bytes(&params)?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let who = self.caller(&request)?;
        self.prepared.close(&query.prepared_statement_handle, &who);
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let who = self.caller(&request)?;
        let params = parameter_batch(request).await?;
        self.prepared
            .bind(&query.prepared_statement_handle, &who, params)
            .map_err(status)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let who = self.caller(&request)?;
        let (sql, rows) = self
            .prepared
            .get(&cmd.prepared_statement_handle, &who)
            .map_err(status)?;
        let [params] = rows.as_slice() else {
            return Err(Status::invalid_argument(format!(
                "a prepared query runs with one row of parameters, not {}",
                rows.len()
            )));
        };
        // Planned now (its schema, and the plan its DoGet runs), or run now when it changes
        // data or tables. A DoGet that finds no plan plans the query again with the
        // parameters bound then; one of a statement that ran here fails instead.
        let checked = self
            .prepared
            .take_first(&cmd.prepared_statement_handle, &who);
        let (schema, planned, changed) = self
            .prepare_or_forward(&sql, checked, params, &who, &request)
            .await?;
        let plan = self.handoff.put(who, planned);
        let mark = if changed.is_some() { "!" } else { "#" };
        let ticket = CommandPreparedStatementQuery {
            prepared_statement_handle: [
                &cmd.prepared_statement_handle[..],
                format!("{mark}{plan}").as_bytes(),
            ]
            .concat()
            .into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner())
            .with_total_records(changed.unwrap_or(-1));
        Ok(Response::new(info))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let who = self.caller(&request)?;
        let raw = &query.prepared_statement_handle[..];
        let (handle, plan, ran) = match raw.iter().rposition(|b| *b == b'#' || *b == b'!') {
            Some(at) => (
                &raw[..at],
                std::str::from_utf8(&raw[at + 1..])
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok()),
                raw[at] == b'!',
            ),
            None => (raw, None, false),
        };
        let planned = match plan.and_then(|id| self.handoff.take(id, &who)) {
            Some(p) => p,
            None if ran => return Err(already_ran()),
            None => {
                let (sql, rows) = self.prepared.get(handle, &who).map_err(status)?;
                let params = rows.into_iter().next().unwrap_or_default();
                self.q
                    .plan_bound_as(&sql, &params, &who)
                    .await
                    .map_err(status)?
            }
        };
        let (schema, stream) = self
            .q
            .stream_planned(planned, self.q.deadline())
            .await
            .map_err(status)?;
        Ok(results(schema, stream))
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.caller(&request)?;
        let credentials = authorization(&request);
        let params = parameter_batch(request).await?;
        let handle = &query.prepared_statement_handle;
        if params.num_columns() > 0 {
            self.prepared.bind(handle, &who, params).map_err(status)?;
        }
        let (sql, rows) = self.prepared.get(handle, &who).map_err(status)?;
        // One run per parameter row (a JDBC batch), in order; the counts add up.
        let mut total = 0i64;
        for params in rows {
            total += match self.q.collect_bound_as(&sql, &params, &who).await {
                Ok((_, batches)) => update_count(&batches),
                Err(e) => {
                    self.forward_or(e, &sql, &params, credentials.clone())
                        .await?
                }
            };
        }
        Ok(total)
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// The caller's `Authorization` header value, as it came.
fn authorization<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A DoGet for the result of a statement that ran at its GetFlightInfo, fetched already or
/// kept longer than [`HANDOFF_TTL`]: running it again would apply it twice.
fn already_ran() -> Status {
    Status::not_found(
        "this statement ran when it was sent; its result was fetched already or has expired",
    )
}

/// A schema as Flight SQL carries it in a prepared statement's description.
fn schema_bytes(schema: &arrow::datatypes::Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: arrow::error::ArrowError| {
            Status::internal(format!("encoding a schema: {e}"))
        })?;
    Ok(bytes)
}

/// The parameter rows a DoPut sends, as one batch (no columns when it sends none).
async fn parameter_batch(
    request: Request<PeekableFlightDataStream>,
) -> Result<arrow::array::RecordBatch, Status> {
    // A run of an update sends only the command, in a message with no Arrow data.
    let data = request
        .into_inner()
        .try_filter(|d| futures::future::ready(!d.data_header.is_empty()))
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    let batches: Vec<arrow::array::RecordBatch> =
        FlightRecordBatchStream::new_from_flight_data(data)
            .try_collect()
            .await
            .map_err(|e| Status::invalid_argument(format!("decoding the parameters: {e}")))?;
    let Some(first) = batches.first() else {
        return Ok(arrow::array::RecordBatch::new_empty(Arc::new(
            arrow::datatypes::Schema::empty(),
        )));
    };
    arrow::compute::concat_batches(&first.schema(), &batches)
        .map_err(|e| Status::invalid_argument(format!("the parameter batches differ: {e}")))
}

/// The row count a DML statement answers (its `count` column), 0 for anything else.
fn update_count(batches: &[arrow::array::RecordBatch]) -> i64 {
    batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .map_or(0, |a| a.value(0) as i64)
}

/// The flight of a metadata command: its result schema, and a ticket carrying the command
/// (its DoGet answers from the catalog as it is then).
fn metadata_info<T>(
    schema: &arrow::datatypes::Schema,
    command: Any,
    request: Request<T>,
) -> Result<Response<FlightInfo>, Status>
where
    T: Into<FlightDescriptor>,
{
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(command.encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(request.into_inner().into());
    Ok(Response::new(info))
}

/// A statement's results as a DoGet stream (a query error mid-stream becomes its status).
fn results(
    schema: arrow::datatypes::SchemaRef,
    stream: datafusion::physical_plan::SendableRecordBatchStream,
) -> Response<<FlightSql as FlightService>::DoGetStream> {
    let batches = stream.map_err(|e| FlightError::Tonic(Box::new(status(query_error(e)))));
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(|e| match e {
            FlightError::Tonic(s) => *s,
            other => Status::internal(other.to_string()),
        });
    Response::new(Box::pin(data))
}

/// One batch as a DoGet stream.
fn one_batch(
    (schema, batch): (arrow::datatypes::SchemaRef, arrow::array::RecordBatch),
) -> Result<Response<<FlightSql as FlightService>::DoGetStream>, Status> {
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map_err(Status::from);
    Ok(Response::new(Box::pin(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What HTTP/2 writes reaches the peer only when it flushes, in one piece: a
    /// response's frames and its trailers arrive together.
    #[tokio::test]
    async fn a_connection_sends_what_was_written_when_flushed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = Box::pin(tokio_stream_from(listener));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut conn = futures::StreamExt::next(&mut accepted)
            .await
            .unwrap()
            .unwrap();
        assert!(!tokio::io::AsyncWrite::is_write_vectored(&conn));
        assert_eq!(
            tonic::transport::server::Connected::connect_info(&conn).remote_addr,
            Some(client.local_addr().unwrap())
        );
        let frames: [&[u8]; 3] = [b"headers;", &[7u8; 5000], b";trailers"];
        for f in frames {
            conn.write_all(f).await.unwrap();
        }
        let mut buf = vec![0u8; 8192];
        let early = tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await;
        assert!(early.is_err(), "bytes reached the peer before the flush");
        conn.flush().await.unwrap();
        let want: Vec<u8> = frames.concat();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "the connection closed early");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, want);
        // And the other way: what the peer sends is read as it comes.
        client.write_all(b"request").await.unwrap();
        let mut req = [0u8; 7];
        conn.read_exact(&mut req).await.unwrap();
        assert_eq!(&req, b"request");
    }

    #[test]
    fn only_writes_are_forwarded() {
        for (sql, want) in [
            ("INSERT INTO t VALUES (1)", true),
            ("  update t SET a = 1 WHERE id = 2", true),
            ("DELETE FROM t WHERE id = 2", true),
            ("SELECT * FROM t", false),
            ("CREATE TABLE t (id BIGINT, PRIMARY KEY (id))", false),
            ("INSERT INTO t VALUES (1); SELECT 1", false),
            ("not sql", false),
        ] {
            assert_eq!(writes(sql), want, "{sql}");
        }
    }

    #[test]
    fn tickets_carry_the_plan_and_the_sql() {
        let sql = "SELECT 1\n-- two lines";
        assert_eq!(
            parse_ticket(&ticket_handle(Some(42), sql)).unwrap(),
            (Some(42), sql.to_string())
        );
        assert_eq!(
            parse_ticket(&ticket_handle(None, sql)).unwrap(),
            (None, sql.to_string())
        );
        // Not a plan id: the whole handle is SQL.
        assert!(parse_ticket(b"strata-plan/7").unwrap().0.is_none());
        assert_eq!(
            parse_ticket(b"strata-plan/x\nSELECT 1").unwrap(),
            (None, "strata-plan/x\nSELECT 1".to_string())
        );
    }

    fn planned() -> Planned {
        let ctx = datafusion::prelude::SessionContext::new();
        let df = ctx.read_empty().unwrap();
        Planned::new(df)
    }

    #[test]
    fn a_plan_is_taken_once_by_its_caller() {
        let h = Handoff::default();
        let anyone = Principal::unrestricted();
        let id = h.put(anyone.clone(), planned());
        let mut other = anyone.clone();
        other.name = "other".into();
        assert!(h.take(id, &other).is_none(), "another caller's plan");
        assert!(h.take(id, &anyone).is_some());
        assert!(h.take(id, &anyone).is_none(), "taken twice");
        for _ in 0..HANDOFF_MAX + 10 {
            h.put(anyone.clone(), planned());
        }
        assert_eq!(h.plans.lock().len(), HANDOFF_MAX);
    }
}
