//! A PostgreSQL connection's start: who the caller is.
//!
//! With API keys configured the server asks for a password (PostgreSQL's cleartext password
//! message) and takes it as the key: `psql "postgresql://any@host:5433/strata"` with
//! `PGPASSWORD=<key>`, psycopg's `password=`, JDBC's `password` property. The user name is
//! not checked. Without keys every connection is let in with every scope, as HTTP and
//! Flight SQL are. The caller ([`Session`]) is kept with the connection for its statements.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    DefaultServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::{
    ClientInfo, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Semaphore;

use super::handler::Cancellation;
use crate::auth::{Authenticator, Principal};

/// The caller of a connection, known once it has started.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who the caller is: its scopes and namespaces.
    pub who: Principal,
    /// Its credentials as an `Authorization` header value, passed on when a write goes to
    /// the ingest node owning the table.
    pub authorization: Option<String>,
}

/// The PostgreSQL version clients are told (drivers pick their catalog queries by it);
/// Strata's own follows in brackets.
pub fn server_version() -> String {
    format!("16.6 (Strata {})", env!("CARGO_PKG_VERSION"))
}

/// Starts connections: negotiates the protocol, authenticates, reports the server's
/// parameters.
pub struct Startup {
    auth: Authenticator,
    /// Whether connections must use TLS (the server has a certificate).
    tls: bool,
    parameters: DefaultServerParameterProvider,
    pids: RandomPidSecretKeyGenerator,
    /// Where each connection's cancel key is registered.
    connections: Arc<ConnectionManager>,
    /// One permit per open connection (`query.postgres_connections_max`).
    slots: Arc<Semaphore>,
    slots_max: usize,
}

impl Startup {
    /// Connections authenticated by `auth`; with `tls`, only over TLS (as HTTP and Flight
    /// SQL answer only TLS when the node has a certificate); their cancel keys registered
    /// with `connections`; at most `slots_max` open at once.
    pub fn new(
        auth: Authenticator,
        tls: bool,
        connections: Arc<ConnectionManager>,
        slots_max: usize,
    ) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = server_version();
        parameters.search_path = crate::auth::DEFAULT_NAMESPACE.to_string();
        parameters.is_superuser = false;
        Self {
            auth,
            tls,
            parameters,
            pids: RandomPidSecretKeyGenerator::default(),
            connections,
            slots: Arc::new(Semaphore::new(slots_max)),
            slots_max,
        }
    }

    async fn admit<C>(&self, client: &mut C, session: Session) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // The permit and the cancel key live in the connection's extensions: both are
        // given back when the connection ends.
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".to_string(),
                "53300".to_string(),
                format!(
                    "sorry, too many clients already: this server takes {} PostgreSQL connections at most (query.postgres_connections_max)",
                    self.slots_max
                ),
            ))));
        };
        client.session_extensions().insert(slot);
        client.session_extensions().insert(session);
        let (pid, secret) = self.pids.generate(client);
        let (handle, guard) = self.connections.register(pid, secret.clone());
        client
            .session_extensions()
            .insert(Cancellation { handle, guard });
        client.set_pid_and_secret_key(pid, secret);
        finish_authentication(client, &self.parameters).await
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                if self.tls && !client.is_secure() {
                    return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                        "FATAL".to_string(),
                        "28000".to_string(),
                        "this server accepts TLS connections only: connect with sslmode=require (or verify-full)".to_string(),
                    ))));
                }
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if self.auth.enabled() {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    client
                        .send(PgWireBackendMessage::Authentication(
                            Authentication::CleartextPassword,
                        ))
                        .await?;
                } else {
                    let session = Session {
                        who: Principal::unrestricted(),
                        authorization: None,
                    };
                    self.admit(client, session).await?;
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let key = password.into_password()?.password;
                let authorization = format!("Bearer {key}");
                match self.auth.principal(Some(&authorization)) {
                    Ok(who) => {
                        let session = Session {
                            who,
                            authorization: Some(authorization),
                        };
                        self.admit(client, session).await?;
                    }
                    Err(e) => {
                        // 28P01 invalid_password, as PostgreSQL answers a wrong password.
                        return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                            "FATAL".to_string(),
                            "28P01".to_string(),
                            format!(
                                "{}: the password must be a Strata API key ({})",
                                e.code(),
                                e.message
                            ),
                        ))));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}
