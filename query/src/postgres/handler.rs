//! The simple and extended query protocols over [`QueryService`].
//!
//! A statement runs once, when the client executes it (simple query: when sent; extended:
//! at Execute), at one snapshot. Parameters (`$1`, `$2`, ...) are decoded by the types the
//! client declared, else by the types the statement gives them, and cast to the latter.
//! Results are encoded by `arrow-pg` in the formats the client asked for (text or binary),
//! honouring its `DateStyle`, `extra_float_digits` and `bytea_output`. An INSERT, UPDATE
//! or DELETE for a table another ingest node owns is sent there, as HTTP and Flight SQL
//! do.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::{Array, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::{FutureExt, Sink, SinkExt, StreamExt, future, stream};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    ExtendedQueryHandler, SimpleQueryHandler, send_execution_response, send_query_response,
    send_ready_for_query,
};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::{Bind, Close, Describe, Execute, Parse};
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::simplequery::Query;
use pgwire::types::format::FormatOptions;
use tokio_util::sync::CancellationToken;

use super::extended;
use super::startup::Session;
use super::statements::{Command, Kind, Savepoint, Sql, one_transaction, parse, parse_declared};
use crate::QueryService;
use crate::error::{QueryError, QueryErrorKind};
use crate::service::{Checked, Forwarded, with_literals, writes};

/// A statement prepared by the extended protocol's Parse: what it is, the schema of its
/// rows (none for statements that answer a command tag) and its parameters' types.
#[derive(Debug, Clone)]
pub struct Prepared {
    command: Command,
    results: SchemaRef,
    params: Vec<DataType>,
    /// The plan checked at Parse, for an Execute that follows at once ([`Checked::fresh`];
    /// drivers send Parse, Bind and Execute together for every parameterized statement):
    /// that run does not plan the statement again.
    first: Arc<parking_lot::Mutex<Option<Checked>>>,
}

/// Prepares statements for the extended protocol (pgwire's `QueryParser`).
pub struct Preparer {
    q: QueryService,
    sql: PostgresCompatibilityParser,
}

/// Answers both query protocols.
pub struct Queries {
    preparer: Arc<Preparer>,
    running: Arc<Running>,
    stopping: CancellationToken,
}

/// How many statements the port's connections are running (a query string, an Execute, and
/// the rows they answer until sent): on shutdown the server waits until none is, then
/// closes every connection, idle ones included.
#[derive(Debug, Default)]
pub struct Running(AtomicUsize);

impl Running {
    fn enter(self: &Arc<Self>) -> RunningGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        RunningGuard(self.clone())
    }

    /// Whether no statement is running.
    pub fn none(&self) -> bool {
        self.0.load(Ordering::SeqCst) == 0
    }
}

/// One running statement, counted while it lives.
struct RunningGuard(Arc<Running>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Queries {
    /// Statements run by `q` (a service [`QueryService::for_postgres`] made), counted in
    /// `running`; once `stopping` fires, a new statement closes its connection (57P01).
    pub fn new(q: QueryService, running: Arc<Running>, stopping: CancellationToken) -> Self {
        Self {
            preparer: Arc::new(Preparer {
                q,
                sql: PostgresCompatibilityParser::new(),
            }),
            running,
            stopping,
        }
    }

    /// Counts a statement as running, unless the server is stopping.
    fn start(&self) -> PgWireResult<RunningGuard> {
        if self.stopping.is_cancelled() {
            // What PostgreSQL sends its sessions on a fast shutdown; FATAL closes the
            // connection.
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".to_string(),
                "57P01".to_string(),
                "terminating connection due to administrator command: the server is shutting down"
                    .to_string(),
            ))));
        }
        Ok(self.running.enter())
    }

    fn q(&self) -> &QueryService {
        &self.preparer.q
    }

    /// Runs one command for `client`; `tx` is the transaction state before it, updated
    /// after.
    async fn run<C>(
        &self,
        client: &mut C,
        command: &Command,
        params: Vec<ScalarValue>,
        tx: &mut TransactionStatus,
        how: How<'_>,
    ) -> Result<Response, QueryError>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let aborted = matches!(tx, TransactionStatus::Error);
        let sql = match command {
            Command::Commit | Command::Rollback => {
                let tag = if aborted || matches!(command, Command::Rollback) {
                    "ROLLBACK"
                } else {
                    "COMMIT"
                };
                *tx = TransactionStatus::Idle;
                savepoints(client).lock().clear();
                return Ok(Response::TransactionEnd(Tag::new(tag)));
            }
            Command::Savepoint(_) | Command::RollbackToSavepoint(_)
                if matches!(tx, TransactionStatus::Idle) =>
            {
                return Err(QueryError::new(
                    QueryErrorKind::Invalid,
                    "savepoints can only be used in transaction blocks",
                )
                .with_sqlstate("25P01"));
            }
            Command::RollbackToSavepoint(name) => {
                // The savepoint stays; those set after it go.
                savepoints(client).back_to(name, true)?;
                *tx = TransactionStatus::Transaction;
                return Ok(Response::Execution(Tag::new("ROLLBACK")));
            }
            _ if aborted => {
                return Err(QueryError::new(
                    QueryErrorKind::Invalid,
                    "current transaction is aborted, commands ignored until end of transaction block",
                )
                .with_sqlstate("25P02"));
            }
            Command::Begin => {
                *tx = TransactionStatus::Transaction;
                savepoints(client).lock().clear();
                return Ok(Response::TransactionStart(Tag::new("BEGIN")));
            }
            Command::Set { name, value } => {
                client.metadata_mut().insert(name.clone(), value.clone());
                return Ok(Response::Execution(Tag::new("SET")));
            }
            Command::Done(tag) => {
                return Ok(Response::Execution(Tag::new(tag)));
            }
            Command::Savepoint(Savepoint::Set(name)) => {
                savepoints(client).lock().push(name.clone());
                return Ok(Response::Execution(Tag::new("SAVEPOINT")));
            }
            Command::Savepoint(Savepoint::Release(name)) => {
                // It goes, with those set after it.
                savepoints(client).back_to(name, false)?;
                return Ok(Response::Execution(Tag::new("RELEASE")));
            }
            Command::Show(name) => {
                let value = show(client, name)?;
                let schema = show_schema(name);
                let batch = RecordBatch::try_new(
                    schema,
                    vec![Arc::new(arrow::array::StringArray::from(vec![value]))],
                )
                .map_err(|e| QueryError::new(QueryErrorKind::Internal, e.to_string()))?;
                let fields = Arc::new(pg_fields(&batch.schema(), how.format, client)?);
                let rows: Vec<_> = encode_recordbatch(fields.clone(), batch).collect();
                return Ok(Response::Query(QueryResponse::new(
                    fields,
                    stream::iter(rows),
                )));
            }
            Command::Sql(sql) => sql,
        };
        if sql.changes && matches!(tx, TransactionStatus::Transaction) {
            let what = if sql.kind.changes() {
                sql.kind.tag()
            } else {
                "EXPLAIN ANALYZE (which runs its statement) of a change"
            };
            return Err(QueryError::new(
                QueryErrorKind::Invalid,
                format!(
                    "{what} inside a transaction block is not supported: Strata runs each statement as its own transaction, and ROLLBACK could not undo it. Run it outside BEGIN ... COMMIT (autocommit: psycopg's autocommit=True, JDBC's setAutoCommit(true))"
                ),
            )
            .with_sqlstate("0A000"));
        }
        self.sql(client, sql, params, how).await
    }

    /// Runs a SQL statement: rows for a query, a command tag for the rest.
    async fn sql<C>(
        &self,
        client: &C,
        sql: &Sql,
        params: Vec<ScalarValue>,
        how: How<'_>,
    ) -> Result<Response, QueryError>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let How {
            format,
            cancel,
            described,
            mut first,
        } = how;
        // `current_setting` of a setting this connection set reads the connection's value.
        let settings;
        let sql = match super::functions::connection_settings(&sql.text, |name| {
            client.metadata().get(name).cloned()
        }) {
            Some(text) => {
                // The plan made at Parse read the server's values.
                first = None;
                settings = Sql {
                    text,
                    ..sql.clone()
                };
                &settings
            }
            None => sql,
        };
        let session = session(client)?;
        let q = self.q();
        let deadline = q.deadline();
        let prepared = cancel
            .unless(async {
                Ok(
                    q.prepare_checked_as(&sql.text, first, &params, &session.who)
                        .await,
                )
            })
            .await?;
        let (_, planned, ran) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let rows = cancel
                    .unless(self.forward_or(e, sql, &params, &session))
                    .await?;
                return Ok(Response::Execution(tag(sql.kind, rows)));
            }
        };
        if !sql.kind.changes() && !ran {
            let (schema, batches) = cancel.unless(q.stream_planned(planned, deadline)).await?;
            if let Some(described) = described
                && !same_columns(described, &schema)
            {
                // PostgreSQL's answer when a prepared statement's tables changed shape
                // between its Parse and its Execute.
                return Err(QueryError::new(
                    QueryErrorKind::Invalid,
                    "cached plan must not change result type: the statement's tables changed since it was prepared; prepare it again",
                )
                .with_sqlstate("0A000"));
            }
            let fields = Arc::new(pg_fields(&schema, format, client)?);
            let encode = fields.clone();
            // The statement runs while its rows are sent, after the handler has returned.
            let running = self.running.enter();
            let rows = batches
                .map(
                    move |batch| -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> {
                        let _running = &running;
                        match batch {
                            Ok(b) => encode_recordbatch(encode.clone(), b),
                            Err(e) => Box::new(std::iter::once(Err(pg_error(&df_error(e))))),
                        }
                    },
                )
                .flat_map(stream::iter);
            return Ok(Response::Query(QueryResponse::new(
                fields,
                cancel.rows(rows),
            )));
        }
        let (_, batches) = cancel.unless(q.collect_planned(planned, deadline)).await?;
        Ok(Response::Execution(tag(sql.kind, changed_rows(&batches))))
    }

    /// The row count of `sql` run on the ingest node owning its table, when `e` says
    /// another node owns it and this service forwards writes (INSERT / UPDATE / DELETE,
    /// parameters written in as literals); else `e`.
    async fn forward_or(
        &self,
        e: QueryError,
        sql: &Sql,
        params: &[ScalarValue],
        session: &Session,
    ) -> Result<usize, QueryError> {
        match (self.q().forward(), &e.owner) {
            (Some(forward), Some(owner))
                if e.kind == QueryErrorKind::NotOwner && writes(&sql.text) =>
            {
                let text = if params.is_empty() {
                    sql.text.clone()
                } else {
                    with_literals(&sql.text, params)?
                };
                let rows = forward(Forwarded {
                    owner: owner.clone(),
                    sql: text,
                    authorization: session.authorization.clone(),
                })
                .await?;
                Ok(usize::try_from(rows).unwrap_or(0))
            }
            _ => Err(e),
        }
    }
}

/// How a statement runs.
struct How<'a> {
    /// The formats (text or binary) the client wants its columns in.
    format: &'a Format,
    /// Fires if the client cancels the query string or Execute the statement is part of.
    cancel: &'a Cancel,
    /// For a prepared statement, the rows it was described with at Parse, which the rows it
    /// answers must fit.
    described: Option<&'a SchemaRef>,
    /// The plan checked at Parse, when this Execute may reuse it.
    first: Option<Checked>,
}

/// A connection's cancel key, kept with it while it lives: a CancelRequest naming the key
/// interrupts the statements the connection is running. Kept under this type, not as the
/// bare `Arc<ConnectionHandle>` pgwire's default handlers look for: pgwire would then watch
/// only the handler's call, not the rows streamed after it (`Cancel` watches both).
pub struct Cancellation {
    /// Fired by [`ConnectionManager::cancel`](pgwire::api::ConnectionManager::cancel).
    pub handle: Arc<pgwire::api::ConnectionHandle>,
    /// Unregisters the key when the connection ends.
    pub guard: pgwire::api::ConnectionGuard,
}

/// Resolves when the client cancels what the connection is running (one query string of
/// the simple protocol, or one Execute); never otherwise.
#[derive(Clone)]
struct Cancel(future::Shared<future::BoxFuture<'static, ()>>);

impl Cancel {
    /// Watches for a cancel of the statements `client` is about to run.
    async fn start<C: ClientInfo>(client: &C) -> Cancel {
        let fired: future::BoxFuture<'static, ()> =
            match client.session_extensions().get::<Cancellation>() {
                Some(c) => {
                    let rx = c.handle.start_query().await;
                    Box::pin(async move {
                        // Err: the next statement took over the key, or the connection ended.
                        if rx.await.is_err() {
                            future::pending::<()>().await;
                        }
                    })
                }
                None => Box::pin(future::pending()),
            };
        Cancel(fired.shared())
    }

    /// `f`'s result, or [`cancelled`] if the client cancels first (`f` is dropped).
    async fn unless<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, QueryError>>,
    ) -> Result<T, QueryError> {
        tokio::select! {
            r = f => r,
            () = self.0.clone() => Err(cancelled()),
        }
    }

    /// `rows` until the client cancels, then the cancel's error.
    fn rows(
        &self,
        rows: impl futures::Stream<Item = PgWireResult<DataRow>> + Send + 'static,
    ) -> impl futures::Stream<Item = PgWireResult<DataRow>> + Send + 'static {
        let fired = self.0.clone();
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stopped.clone();
        let until = async move {
            fired.await;
            flag.store(true, std::sync::atomic::Ordering::Release);
        };
        rows.take_until(until).chain(
            stream::once(async move {
                stopped
                    .load(std::sync::atomic::Ordering::Acquire)
                    .then(|| Err(pg_error(&cancelled())))
            })
            .filter_map(future::ready),
        )
    }
}

/// PostgreSQL's answer to a cancelled statement.
fn cancelled() -> QueryError {
    QueryError::new(
        QueryErrorKind::Cancelled,
        "canceling statement due to user request",
    )
}

/// Whether rows of schema `b` fit the description `a`: the same columns, by name and type,
/// in the same order.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields()).all(|(x, y)| {
            // A column typed by a parameter is Null until the parameter is bound.
            x.name() == y.name() && (x.data_type() == y.data_type() || x.data_type().is_null())
        })
}

/// The command tag of a statement that changed `rows` rows.
fn tag(kind: Kind, rows: usize) -> Tag {
    match kind {
        Kind::Insert => Tag::new("INSERT").with_oid(0).with_rows(rows),
        Kind::Update | Kind::Delete => Tag::new(kind.tag()).with_rows(rows),
        Kind::Query | Kind::CreateTable | Kind::DropTable => Tag::new(kind.tag()),
    }
}

/// The rows a DML statement changed: its `count` column.
fn changed_rows(batches: &[RecordBatch]) -> usize {
    batches
        .iter()
        .filter_map(|b| b.column_by_name("count"))
        .filter_map(|c| c.as_any().downcast_ref::<UInt64Array>())
        .map(|a| a.iter().flatten().sum::<u64>())
        .sum::<u64>() as usize
}

/// The connection's caller (set when it started).
/// The savepoints set in a connection's transaction block, oldest first (a name may repeat:
/// the newest is the one named).
#[derive(Debug, Default)]
struct Savepoints(parking_lot::Mutex<Vec<String>>);

fn savepoints<C: ClientInfo>(client: &C) -> Arc<Savepoints> {
    client
        .session_extensions()
        .get_or_insert_with(Savepoints::default)
}

impl Savepoints {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<String>> {
        self.0.lock()
    }

    /// Forgets the savepoints set after the newest one named `name`, and that one too
    /// unless `keep`; SQLSTATE 3B001 when none is named so.
    fn back_to(&self, name: &str, keep: bool) -> Result<(), QueryError> {
        let mut held = self.lock();
        let at = held
            .iter()
            .rposition(|s| s == name)
            .ok_or_else(|| no_savepoint(name))?;
        held.truncate(if keep { at + 1 } else { at });
        Ok(())
    }
}

/// `RELEASE` or `ROLLBACK TO` a savepoint the transaction has not set.
fn no_savepoint(name: &str) -> QueryError {
    QueryError::new(
        QueryErrorKind::Invalid,
        format!("savepoint \"{name}\" does not exist"),
    )
    .with_sqlstate("3B001")
}

fn session<C: ClientInfo>(client: &C) -> Result<Arc<Session>, QueryError> {
    client.session_extensions().get::<Session>().ok_or_else(|| {
        QueryError::new(
            QueryErrorKind::Unauthenticated,
            "the connection has not authenticated",
        )
    })
}

/// Row descriptions for `schema` in `format`, with the client's output settings.
fn pg_fields<C: ClientInfo>(
    schema: &Schema,
    format: &Format,
    client: &C,
) -> Result<Vec<FieldInfo>, QueryError> {
    let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
    arrow_schema_to_pg_fields(schema, format, Some(options)).map_err(unsupported_type)
}

fn unsupported_type(e: PgWireError) -> QueryError {
    QueryError::new(
        QueryErrorKind::Invalid,
        format!("a result column has a type PostgreSQL clients cannot receive: {e}"),
    )
}

fn show_schema(name: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        name.replace(' ', "_"),
        DataType::Utf8,
        false,
    )]))
}

/// The value `SHOW name` answers: what the connection set, else the server's.
fn show<C: ClientInfo>(client: &C, name: &str) -> Result<String, QueryError> {
    if let Some(v) = client.metadata().get(name) {
        return Ok(v.clone());
    }
    super::functions::server_setting(name).ok_or_else(|| super::functions::unknown_setting(name))
}

/// A DataFusion error from a running query, with the service's error inside it if it
/// holds one (a timeout).
fn df_error(e: DataFusionError) -> QueryError {
    if let DataFusionError::External(inner) = e.find_root()
        && let Some(q) = inner.downcast_ref::<QueryError>()
    {
        return q.clone();
    }
    QueryError::from(e)
}

/// The SQLSTATE code of an error: the one it carries, else its kind's.
pub fn sqlstate(e: &QueryError) -> &'static str {
    if let Some(code) = e.sqlstate {
        return code;
    }
    match e.kind {
        QueryErrorKind::Invalid => {
            let m = e.message.as_str();
            if m.contains("syntax error") || m.contains("ParserError") {
                "42601"
            } else if m.contains("No field named") || m.contains("Schema error") {
                "42703"
            } else if m.contains("Invalid function") {
                "42883"
            } else if m.contains("Divide by zero") || m.contains("Division by zero") {
                "22012"
            } else if m.contains("Cast error") || m.contains("Cannot cast") {
                "22P02"
            } else {
                "42000"
            }
        }
        QueryErrorKind::Unauthenticated => "28000",
        QueryErrorKind::Forbidden => "42501",
        QueryErrorKind::NotFound => "42P01",
        QueryErrorKind::AlreadyExists => "42P07",
        QueryErrorKind::SnapshotTooOld => "72000",
        QueryErrorKind::ResourcesExhausted => "53200",
        QueryErrorKind::Timeout | QueryErrorKind::Cancelled => "57014",
        QueryErrorKind::Overloaded => "53000",
        QueryErrorKind::NotOwner => "25006",
        QueryErrorKind::Internal => "XX000",
    }
}

/// An error as PostgreSQL clients receive it: SQLSTATE, and the message led by Strata's
/// own stable code (as HTTP and Flight SQL give it).
pub fn error_info(e: &QueryError) -> ErrorInfo {
    ErrorInfo::new(
        "ERROR".to_string(),
        sqlstate(e).to_string(),
        format!("{}: {}", e.code(), e.message),
    )
}

fn pg_error(e: &QueryError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    /// A query string's statements one at a time, each answered before the next runs (as
    /// PostgreSQL does): a `SELECT` before an `INSERT` in the same string reads without
    /// the insert, and the first results reach the client while later statements run.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let _running = self.start()?;
        client.set_state(PgWireConnectionState::QueryInProgress);
        let mut tx = client.transaction_status();
        let commands =
            parse(&self.preparer.sql, &query.query).and_then(|c| one_transaction(&c).map(|()| c));
        match commands {
            Err(e) => {
                client
                    .feed(PgWireBackendMessage::ErrorResponse(error_info(&e).into()))
                    .await?;
                tx = tx.to_error_state();
            }
            Ok(commands) if commands.is_empty() => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
            }
            Ok(commands) => {
                let cancel = Cancel::start(client).await;
                for command in &commands {
                    let how = How {
                        format: &Format::UnifiedText,
                        cancel: &cancel,
                        described: None,
                        first: None,
                    };
                    match self.run(client, command, Vec::new(), &mut tx, how).await {
                        Ok(Response::Query(rows)) => {
                            send_query_response(client, rows, true).await?;
                        }
                        Ok(
                            Response::Execution(tag)
                            | Response::TransactionStart(tag)
                            | Response::TransactionEnd(tag),
                        ) => send_execution_response(client, tag).await?,
                        Ok(_) => {}
                        Err(e) => {
                            // PostgreSQL skips the rest of a query string after an error.
                            client
                                .feed(PgWireBackendMessage::ErrorResponse(error_info(&e).into()))
                                .await?;
                            tx = tx.to_error_state();
                            break;
                        }
                    }
                }
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(tx);
        send_ready_for_query(client, tx).await
    }

    /// Not called: pgwire calls `do_query` only from its own `on_query`, which
    /// [`Self::on_query`] replaces (a collecting form would run every statement before
    /// answering any).
    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(PgWireError::ApiError(
            "simple queries are answered by Queries::on_query, one statement at a time".into(),
        ))
    }
}

#[async_trait]
impl QueryParser for Preparer {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut commands = parse_declared(&self.sql, sql, types).map_err(|e| pg_error(&e))?;
        if commands.len() > 1 {
            return Err(pg_error(
                &QueryError::new(
                    QueryErrorKind::Invalid,
                    "cannot insert multiple commands into a prepared statement",
                )
                .with_sqlstate("42601"),
            ));
        }
        let Some(command) = commands.pop() else {
            return Ok(None);
        };
        let none = || Arc::new(Schema::empty());
        let (results, params, first) = match &command {
            Command::Sql(s) => {
                let session = session(client).map_err(|e| pg_error(&e))?;
                let (results, params, _, checked) = self
                    .q
                    .check_statement_as(&s.text, &session.who)
                    .await
                    .map_err(|e| pg_error(&e))?;
                let params = params.fields().iter().map(|f| f.data_type().clone());
                let results = if s.kind.changes() { none() } else { results };
                (results, params.collect(), Some(checked))
            }
            Command::Show(name) => (show_schema(name), Vec::new(), None),
            _ => (none(), Vec::new(), None),
        };
        Ok(Some(Prepared {
            command,
            results,
            params,
            first: Arc::new(parking_lot::Mutex::new(first)),
        }))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        stmt.params.iter().map(into_pg_type).collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        arrow_schema_to_pg_fields(
            &stmt.results,
            column_format.unwrap_or(&Format::UnifiedText),
            None,
        )
    }
}

/// The values bound to a portal, as the statement's parameter types.
///
/// Where the planner knows no type for a parameter and took it as text (`$1` in
/// `$1::BIGINT`), a value the client declared another type for in its Parse (psycopg and
/// JDBC do: an `int8`) is read as that type and then cast to text, which the statement
/// casts on; `numeric` excepted, which arrow-pg reads exactly only into a known decimal
/// type. Every other value is read as the statement's type.
fn parameters(portal: &Portal<Prepared>) -> Result<Vec<ScalarValue>, QueryError> {
    let types = &portal.statement.statement.params;
    let declared = &portal.statement.parameter_types;
    let inferred: Vec<Option<&DataType>> = types
        .iter()
        .enumerate()
        .map(|(i, t)| match declared.get(i) {
            Some(Some(d))
                if *t == DataType::Utf8
                    && ![
                        Type::UNKNOWN,
                        Type::TEXT,
                        Type::VARCHAR,
                        Type::NUMERIC,
                        Type::NUMERIC_ARRAY,
                    ]
                    .contains(d) =>
            {
                None
            }
            _ => Some(t),
        })
        .collect();
    let values = arrow_pg::datatypes::df::deserialize_parameters(portal, &inferred)
        .map_err(|e| QueryError::new(QueryErrorKind::Invalid, format!("parameters: {e}")))?;
    let datafusion::common::ParamValues::List(values) = values else {
        return Err(QueryError::new(
            QueryErrorKind::Invalid,
            "only positional parameters ($1, $2, ...) are supported",
        ));
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v.value;
            match types.get(i) {
                Some(t) if v.data_type() != *t => v.cast_to(t).map_err(|e| {
                    QueryError::new(
                        QueryErrorKind::Invalid,
                        format!("parameter ${}: {e}", i + 1),
                    )
                    .with_sqlstate("22P02")
                }),
                _ => Ok(v),
            }
        })
        .collect()
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = Prepared;
    type QueryParser = Preparer;

    fn query_parser(&self) -> Arc<Preparer> {
        self.preparer.clone()
    }

    // pgwire's defaults `send` (write and flush) each reply; these feed them, so that the
    // replies to a driver's Parse, Bind, Describe, Execute and Sync leave in one write.
    // See [`super::extended`].

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        extended::parse(self, client, message).await
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        extended::bind(client, message).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        extended::describe(self, client, message).await
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        extended::execute(self, client, message).await
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        extended::close(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let _running = self.start()?;
        let mut tx = client.transaction_status();
        let cancel = Cancel::start(client).await;
        let prepared = &portal.statement.statement;
        let first = prepared.first.lock().take().and_then(Checked::fresh);
        let result = match parameters(portal) {
            Ok(params) => {
                self.run(
                    client,
                    &prepared.command,
                    params,
                    &mut tx,
                    How {
                        format: &portal.result_column_format,
                        cancel: &cancel,
                        described: Some(&prepared.results),
                        first,
                    },
                )
                .await
            }
            Err(e) => Err(e),
        };
        result.map_err(|e| pg_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_a_sqlstate() {
        for k in QueryErrorKind::ALL {
            let code = sqlstate(&QueryError::new(k, "x"));
            assert_eq!(code.len(), 5, "{k:?}");
        }
        let parse = QueryError::new(QueryErrorKind::Invalid, "SQL syntax error: near FROM");
        assert_eq!(sqlstate(&parse), "42601");
        let missing = QueryError::new(QueryErrorKind::NotFound, "table 'x' not found");
        assert_eq!(sqlstate(&missing), "42P01");
        let own = QueryError::new(QueryErrorKind::Invalid, "x").with_sqlstate("0A000");
        assert_eq!(sqlstate(&own), "0A000");
    }

    #[test]
    fn dml_counts_add_up() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "count",
            DataType::UInt64,
            false,
        )]));
        let batch = |n: u64| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(vec![n]))])
                .expect("batch")
        };
        assert_eq!(changed_rows(&[batch(2), batch(3)]), 5);
        assert_eq!(changed_rows(&[]), 0);
        assert_eq!(
            tag(Kind::Insert, 2),
            Tag::new("INSERT").with_oid(0).with_rows(2)
        );
    }
}
