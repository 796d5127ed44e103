//! The extended query protocol's replies (Parse, Bind, Describe, Execute, Close), queued
//! on the connection rather than each written on its own: they leave together when the
//! client asks for them (Sync, which answers ReadyForQuery, or Flush), as PostgreSQL sends
//! them.
//!
//! pgwire's default handlers `send` each of these replies, and a `send` flushes the
//! connection: a driver's Parse, Bind, Describe, Execute and Sync, which arrive in one
//! packet, were answered in five writes (with `TCP_NODELAY`, five packets and as many
//! wake-ups of the client). Here they are fed, so one write answers them. Rows of an
//! Execute without a row limit (what drivers send unless a fetch size is set) stream to
//! the connection as the statement makes them, instead of being gathered first.
//!
//! What a statement means and how it runs is [`super::handler`]'s; this module only
//! answers the protocol's messages.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::portal::{Portal, PortalExecutionState};
use pgwire::api::query::{ExtendedQueryHandler, send_execution_response};
use pgwire::api::results::{DescribeResponse, QueryResponse, Response, Tag};
use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Parse, ParseComplete,
    PortalSuspended, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::EmptyQueryResponse;

use super::handler::{Prepared, Queries};

/// Parse: the statement stored under its name (an empty one for an empty query, as
/// PostgreSQL does), answered ParseComplete.
pub async fn parse<C>(q: &Queries, client: &mut C, message: Parse) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = Prepared>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let name = message.name.as_deref().unwrap_or(DEFAULT_NAME).to_owned();
    match StoredStatement::parse(client, &message, q.query_parser()).await? {
        Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
        None => client.portal_store().put_empty_statement(&name),
    }
    client
        .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
        .await?;
    Ok(())
}

/// Bind: a portal of a stored statement and its parameters, answered BindComplete.
pub async fn bind<C>(client: &mut C, message: Bind) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = Prepared>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let statement = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
    let portal = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
    match client.portal_store().get_statement(statement) {
        Some(Entry::Value(stmt)) => {
            let portal = Portal::try_new(&message, stmt)?;
            client.portal_store().put_portal(Arc::new(portal));
        }
        Some(Entry::Empty) => {
            if !message.parameters.is_empty() {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_owned(),
                    "08P01".to_owned(),
                    format!(
                        "bind message supplies {} parameters, but prepared statement {statement:?} requires 0",
                        message.parameters.len()
                    ),
                ))));
            }
            client.portal_store().put_empty_portal(portal);
        }
        None => return Err(PgWireError::StatementNotFound(statement.to_owned())),
    }
    client
        .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
        .await?;
    Ok(())
}

/// Describe of a statement (its parameters' types, then its rows') or of a portal (its
/// rows'). A statement or portal without rows is answered NoData, as PostgreSQL does:
/// an empty row description (pgwire's answer for an INSERT with `$1`) is taken by the
/// JDBC driver for a result ("A result was returned when none was expected").
pub async fn describe<C>(q: &Queries, client: &mut C, message: Describe) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = Prepared>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
    let (parameters, fields) = match message.target_type {
        TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
            Some(Entry::Value(stmt)) => {
                let d = q.do_describe_statement(client, &stmt).await?;
                (d.parameters().map(<[_]>::to_vec), d.fields().to_vec())
            }
            Some(Entry::Empty) => (Some(Vec::new()), Vec::new()),
            None => return Err(PgWireError::StatementNotFound(name.to_owned())),
        },
        TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
            Some(Entry::Value(portal)) => {
                let d = q.do_describe_portal(client, &portal).await?;
                (None, d.fields().to_vec())
            }
            Some(Entry::Empty) => (None, Vec::new()),
            None => return Err(PgWireError::PortalNotFound(name.to_owned())),
        },
        other => return Err(PgWireError::InvalidTargetType(other)),
    };
    if let Some(types) = parameters {
        let oids = types.iter().map(|t| t.oid()).collect();
        client
            .feed(PgWireBackendMessage::ParameterDescription(
                ParameterDescription::new(oids),
            ))
            .await?;
    }
    let reply = if fields.is_empty() {
        PgWireBackendMessage::NoData(NoData::new())
    } else {
        PgWireBackendMessage::RowDescription(RowDescription::new(
            fields.iter().map(Into::into).collect(),
        ))
    };
    client.feed(reply).await?;
    Ok(())
}

/// Execute: runs the portal's statement the first time (through
/// [`Queries::do_query`]), then answers up to the message's row limit (none when 0) and
/// CommandComplete, or PortalSuspended when rows are left for a later Execute.
pub async fn execute<C>(q: &Queries, client: &mut C, message: Execute) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = Prepared>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
        return Err(PgWireError::NotReadyForQuery);
    }
    let mut tx = client.transaction_status();
    client.set_state(PgWireConnectionState::QueryInProgress);
    let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
    let limit = usize::try_from(message.max_rows).unwrap_or(0);
    let portal = match client.portal_store().get_portal(name) {
        Some(Entry::Value(portal)) => portal,
        Some(Entry::Empty) => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
            client.set_state(PgWireConnectionState::ReadyForQuery);
            return Ok(());
        }
        None => return Err(PgWireError::PortalNotFound(name.to_owned())),
    };
    let state = portal.state();
    let started = !matches!(*state.lock().await, PortalExecutionState::Initial);
    if started {
        let fetched = portal.fetch(limit).await?;
        rows(client, fetched.response, fetched.suspended).await?;
    } else {
        match q.do_query(client, &portal, limit).await? {
            Response::Query(response) if limit == 0 => {
                // Every row now: sent as made, none gathered.
                *state.lock().await = PortalExecutionState::Finished;
                rows(client, response, false).await?;
            }
            Response::Query(response) => {
                portal.start(response).await;
                let fetched = portal.fetch(limit).await?;
                rows(client, fetched.response, fetched.suspended).await?;
            }
            Response::EmptyQuery => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
            }
            Response::Execution(tag) => send_execution_response(client, tag).await?,
            Response::TransactionStart(tag) => {
                send_execution_response(client, tag).await?;
                tx = tx.to_in_transaction_state();
            }
            Response::TransactionEnd(tag) => {
                send_execution_response(client, tag).await?;
                tx = tx.to_idle_state();
                client.portal_store().rm_portal(DEFAULT_NAME);
            }
            Response::Error(e) => {
                client
                    .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                    .await?;
                tx = tx.to_error_state();
            }
            Response::CopyIn(_) | Response::CopyOut(_) | Response::CopyBoth(_) => {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_owned(),
                    "0A000".to_owned(),
                    "COPY is not supported".to_owned(),
                ))));
            }
        }
    }
    client.set_state(PgWireConnectionState::ReadyForQuery);
    client.set_transaction_status(tx);
    Ok(())
}

/// A response's rows, then PortalSuspended when `suspended` (rows are left), else
/// CommandComplete with the count sent.
async fn rows<C>(client: &mut C, mut response: QueryResponse, suspended: bool) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let tag = response.command_tag().to_owned();
    let mut count = 0;
    let data = response.data_rows();
    while let Some(row) = data.next().await {
        client.feed(PgWireBackendMessage::DataRow(row?)).await?;
        count += 1;
    }
    let done = if suspended {
        PgWireBackendMessage::PortalSuspended(PortalSuspended::new())
    } else {
        PgWireBackendMessage::CommandComplete(Tag::new(&tag).with_rows(count).into())
    };
    client.feed(done).await?;
    Ok(())
}

/// Close of a statement or portal, answered CloseComplete (also when there was none).
pub async fn close<C>(client: &mut C, message: Close) -> PgWireResult<()>
where
    C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::PortalStore: PortalStore<Statement = Prepared>,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
    match message.target_type {
        TARGET_TYPE_BYTE_STATEMENT => client.portal_store().rm_statement(name),
        TARGET_TYPE_BYTE_PORTAL => client.portal_store().rm_portal(name),
        _ => {}
    }
    client
        .feed(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
        .await?;
    Ok(())
}
