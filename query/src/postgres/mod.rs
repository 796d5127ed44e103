//! The PostgreSQL wire protocol (protocol 3.0, through the `pgwire` crate) on its own
//! listener, so that `psql`, psycopg, the PostgreSQL JDBC driver and the tools built on
//! them run SQL over Strata as they would over PostgreSQL.
//!
//! - [`startup`]: the connection's start: with API keys, a password message whose password
//!   is the key (the user name is not checked), mapped onto the same scopes and namespaces
//!   as HTTP and Flight SQL; without keys, every connection is let in.
//! - [`statements`]: what a statement is before it is run: session commands (`SET`,
//!   `SHOW`, `BEGIN` / `COMMIT` / `ROLLBACK`, `DISCARD`) answered by the connection, and
//!   SQL, rewritten for DataFusion by `datafusion-pg-catalog`'s compatibility parser.
//! - [`handler`]: the simple and extended query protocols (parse, bind with parameters,
//!   describe, execute) over [`QueryService`], results encoded by `arrow-pg`, errors with
//!   SQLSTATE codes.
//! - [`extended`]: the extended protocol's replies, queued until the client's Sync or
//!   Flush, so a driver's round trip is answered in one write.
//!
//! Sessions see a `pg_catalog` schema describing the tables the caller may read
//! ([`QueryService::for_postgres`]). Each statement is its own transaction: reads inside
//! `BEGIN` ... `COMMIT` take a snapshot per statement (PostgreSQL's READ COMMITTED), and a
//! statement that changes data inside an explicit transaction is refused (SQLSTATE 0A000),
//! since a `ROLLBACK` could not undo it. For the same reason a query string in which a
//! change is followed by a statement that could fail (`INSERT ...; INSERT ...`), which
//! PostgreSQL runs as one transaction, is refused before any of it runs
//! ([`statements::one_transaction`]).
//!
//! The password travels as the client sends it (PostgreSQL's cleartext password message):
//! configure TLS (the same certificate as HTTP and Flight SQL) wherever the network is not
//! trusted. Strata keeps only digests of keys, so SCRAM, which needs the secret on the
//! server, is not offered.

pub mod catalog;
pub mod client_queries;
pub mod constraints;
pub mod extended;
pub mod functions;
pub mod handler;
pub mod information_schema;
pub mod startup;
pub mod statements;

use std::sync::Arc;

use pgwire::api::ConnectionManager;
use pgwire::api::cancel::DefaultCancelHandler;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::QueryService;
use crate::auth::Authenticator;

/// One connection's handlers (pgwire asks for them once per connection).
struct Handlers {
    startup: Arc<startup::Startup>,
    queries: Arc<handler::Queries>,
    cancel: Arc<DefaultCancelHandler>,
}

impl pgwire::api::PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// Serves `q` to PostgreSQL clients on `listener` until `stop`, over TLS only when `tls`
/// is given (clients ask for it with an SSLRequest, as `sslmode=require` does). When `stop`
/// fires, statements running get up to [`crate::server::SHUTDOWN_GRACE`] to finish (a new
/// one is refused with 57P01, which closes its connection); then, or as soon as none runs,
/// every connection is closed, idle ones at once.
pub async fn serve(
    q: QueryService,
    auth: Authenticator,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: CancellationToken,
) -> Result<(), std::io::Error> {
    // Cancel keys of the open connections: a CancelRequest (psql's Ctrl-C, JDBC's
    // Statement.cancel and query timeouts) comes on a connection of its own and names one.
    let connections_of = Arc::new(ConnectionManager::new());
    let running = Arc::new(handler::Running::default());
    // Fired once no statement runs after `stop` (or the grace has passed): closes them all.
    let close = CancellationToken::new();
    let handlers = Arc::new(Handlers {
        startup: Arc::new(startup::Startup::new(
            auth,
            tls.is_some(),
            connections_of.clone(),
            q.config().postgres_connections_max,
        )),
        queries: Arc::new(handler::Queries::new(
            q.for_postgres(),
            running.clone(),
            stop.clone(),
        )),
        cancel: Arc::new(DefaultCancelHandler::new(connections_of)),
    });
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (socket, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, then accept again.
                    tracing::warn!(error = %e, "PostgreSQL listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        let (handlers, tls, close) = (handlers.clone(), tls.clone(), close.clone());
        connections.spawn(async move {
            let conn = pgwire::tokio::process_socket(socket, tls, handlers);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "PostgreSQL connection ended with an error");
                },
                () = close.cancelled() => {}
            }
        });
    }
    connections.close();
    let grace = tokio::time::Instant::now() + crate::server::SHUTDOWN_GRACE;
    while !running.none() && tokio::time::Instant::now() < grace {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    close.cancel();
    connections.wait().await;
    Ok(())
}
