//! Arrow Flight SQL over gRPC: `GetFlightInfo(CommandStatementQuery)` plans a query and
//! returns a ticket carrying the SQL; `DoGet` runs it (a fresh snapshot) and streams Arrow
//! batches; `DoPut(CommandStatementUpdate)` runs INSERT / UPDATE / DELETE / CREATE / DROP and
//! returns the row count; `DoPut(CommandStatementIngest)` bulk-loads a stream of Arrow
//! batches into a table ([`crate::ingest`]: upserts; `TABLE_NOT_EXIST_OPTION_CREATE` with a
//! `primary_key` option of comma-separated columns creates it). Errors map to gRPC statuses
//! in [`crate::error`].
//!
//! Not yet: prepared statements, catalog metadata commands (`GetTables`, ...), Substrait,
//! transactions.

use std::net::SocketAddr;
use std::pin::Pin;

use arrow::array::UInt64Array;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    Any, CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate, ProstMessageExt,
    SqlInfo, TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
    flight_service_server::FlightService,
};
use futures::{Stream, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{Authenticator, Principal};

use crate::error::{QueryError, QueryErrorKind};
use crate::ingest::{IfExists, IfMissing, IngestRequest};
use crate::service::{QueryService, query_error};

/// The Flight SQL service.
#[derive(Debug, Clone)]
pub struct FlightSql {
    q: QueryService,
    auth: Authenticator,
}

impl FlightSql {
    /// Serves `q` to callers `auth` lets in.
    pub fn new(q: QueryService, auth: Authenticator) -> Self {
        Self { q, auth }
    }

    /// The caller of a request: its `authorization: Bearer <key>` metadata.
    fn caller<T>(&self, request: &Request<T>) -> Result<Principal, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        self.auth.principal(header).map_err(status)
    }

    /// The tonic service.
    pub fn into_server(self) -> FlightServiceServer<Self> {
        FlightServiceServer::new(self)
    }
}

/// Serves Flight SQL on `listener` until `shutdown` resolves.
pub async fn serve(
    q: QueryService,
    auth: Authenticator,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    serve_tls(q, auth, listener, None, None, None, shutdown).await
}

/// [`serve`] over TLS when `tls` is given, with more gRPC services (`extra`, e.g. the
/// data API of `strata serve`) on the same port.
pub async fn serve_tls(
    q: QueryService,
    auth: Authenticator,
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
    extra: Option<tonic::service::Routes>,
    metrics: Option<crate::metrics::ServiceMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream_from(listener);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let mut routes = extra
        .unwrap_or_default()
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
) -> impl Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let r = l.accept().await.map(|(s, _addr): (_, SocketAddr)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((r, l))
    })
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
        // The key travels as `authorization: Bearer <key>` on every call; a handshake only
        // checks it early.
        self.caller(&request)?;
        let out = futures::stream::once(async {
            Ok(HandshakeResponse {
                protocol_version: 0,
                payload: Default::default(),
            })
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let who = self.caller(&request)?;
        let schema = self
            .q
            .describe_as(&query.query, &who)
            .await
            .map_err(status)?;
        let ticket = TicketStatementQuery {
            statement_handle: query.query.clone().into_bytes().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let who = self.caller(&request)?;
        let sql = sql_of_ticket(&ticket.statement_handle)?;
        let (schema, stream) = self.q.stream_as(&sql, &who).await.map_err(status)?;
        let batches = stream.map_err(|e| FlightError::Tonic(Box::new(status(query_error(e)))));
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(|e| match e {
                FlightError::Tonic(s) => *s,
                other => Status::internal(other.to_string()),
            });
        Ok(Response::new(Box::pin(data)))
    }

    async fn do_put_statement_update(
        &self,
        ticket: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.caller(&request)?;
        let (_, batches) = self
            .q
            .collect_as(&ticket.query, &who)
            .await
            .map_err(status)?;
        let count = batches
            .first()
            .and_then(|b| b.column_by_name("count"))
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .map_or(0, |a| a.value(0));
        Ok(count as i64)
    }

    async fn do_put_statement_ingest(
        &self,
        cmd: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let who = self.caller(&request)?;
        let req = ingest_request(&cmd)?;
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

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
