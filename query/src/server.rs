//! Running the endpoints: HTTP (`POST /sql`, `/health`, `/ready`, `/metrics`), Arrow
//! Flight SQL and the PostgreSQL wire protocol on bound listeners until a stop signal, shared by `strata-query` and
//! `strata serve`; both over TLS (rustls) when a certificate is configured.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::QueryService;
use crate::auth::Authenticator;

/// An error starting or running a server.
pub type ServeError = Box<dyn std::error::Error + Send + Sync>;

/// Serves `q` on `http` and `flight` until `stop` is cancelled, then lets in-flight requests
/// finish.
pub async fn serve(
    q: QueryService,
    http: TcpListener,
    flight: TcpListener,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    serve_with(
        q,
        Authenticator::open(),
        axum::Router::new(),
        http,
        flight,
        stop,
    )
    .await
}

/// [`serve`] with API keys (`auth`) and more HTTP routes next to the query service's (e.g.
/// the data API of `strata serve`).
pub async fn serve_with(
    q: QueryService,
    auth: Authenticator,
    extra: axum::Router,
    http: TcpListener,
    flight: TcpListener,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let listeners = Listeners {
        http,
        flight,
        postgres: None,
    };
    serve_tls(q, auth, extra, listeners, None, None, None, stop).await
}

/// The bound listeners of a server: HTTP, Arrow Flight SQL and, when on, the PostgreSQL
/// wire protocol.
#[derive(Debug)]
pub struct Listeners {
    /// HTTP (SQL, health, metrics and any routes the server adds).
    pub http: TcpListener,
    /// Arrow Flight SQL and any more gRPC services.
    pub flight: TcpListener,
    /// The PostgreSQL wire protocol ([`crate::postgres`]), when on.
    pub postgres: Option<TcpListener>,
}

/// A server certificate chain and its private key (PEM), for both listeners.
#[derive(Clone)]
pub struct TlsIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity(..)")
    }
}

/// rustls is built with two crypto providers in this process (ring here and in tonic,
/// aws-lc through the AWS SDK); servers use ring, installed once as the default.
fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let _ = rustls::crypto::CryptoProvider::install_default((*ring).clone());
    ring
}

impl TlsIdentity {
    /// Reads and checks a PEM certificate chain (leaf first) and private key.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, ServeError> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| format!("reading the TLS {what} {}: {e}", p.display()))
        };
        let id = Self {
            cert_pem: read(cert, "certificate")?,
            key_pem: read(key, "key")?,
        };
        id.server_config(Vec::new()).map_err(|e| {
            format!(
                "TLS certificate {} with key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
        Ok(id)
    }

    fn server_config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<rustls::ServerConfig>, ServeError> {
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("certificate: {e}"))?;
        if certs.is_empty() {
            return Err("the certificate file holds no PEM certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| format!("key: {e}"))?;
        let mut config = rustls::ServerConfig::builder_with_provider(crypto())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        config.alpn_protocols = alpn;
        Ok(Arc::new(config))
    }
}

/// Serves an axum app over TLS on `listener` (HTTP/1.1 and HTTP/2 by ALPN) until `stop`,
/// then lets open connections finish their requests.
async fn serve_https(
    listener: TcpListener,
    app: axum::Router,
    config: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
) -> Result<(), std::io::Error> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    continue;
                }
            },
            _ = stop.cancelled() => return Ok(()),
        };
        let (acceptor, app, stop) = (acceptor.clone(), app.clone(), stop.clone());
        tokio::spawn(async move {
            let handshake =
                tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp));
            let tls = match handshake.await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let service = hyper_util::service::TowerToHyperService::new(app);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// Wraps the whole HTTP application (every route, SQL included) in more layers.
pub type AppWrap = Box<dyn FnOnce(axum::Router) -> axum::Router + Send>;

/// [`serve_with`], over TLS with `tls` when given, with more gRPC services (`grpc`) next
/// to Flight SQL, and the HTTP application wrapped by `wrap` (e.g. forwarding requests to
/// another ingest node).
#[allow(clippy::too_many_arguments)]
pub async fn serve_tls(
    q: QueryService,
    auth: Authenticator,
    extra: axum::Router,
    listeners: Listeners,
    tls: Option<TlsIdentity>,
    grpc: Option<crate::flight::ExtraGrpc>,
    wrap: Option<AppWrap>,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let Listeners {
        http,
        flight,
        postgres,
    } = listeners;
    let (s1, s2) = (stop.clone(), stop.clone());
    let postgres_task = match postgres {
        Some(listener) => {
            // ALPN `postgresql`: libpq 17+ opening TLS directly (`sslnegotiation=direct`)
            // requires the server to select it; clients that send no ALPN are unaffected.
            let config = tls
                .as_ref()
                .map(|id| id.server_config(vec![b"postgresql".to_vec()]))
                .transpose()?;
            Some(tokio::spawn(crate::postgres::serve(
                q.clone(),
                auth.clone(),
                listener,
                config,
                stop.clone(),
            )))
        }
        None => None,
    };
    let metrics =
        crate::metrics::ServiceMetrics::new(q.db().clone(), auth.clone(), q.plan_counts());
    let app = crate::http::router(q.clone(), auth.clone())
        .merge(extra)
        .merge(
            axum::Router::new()
                .route("/metrics", axum::routing::get(crate::metrics::handler))
                .with_state(metrics.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            metrics.clone(),
            crate::metrics::track,
        ));
    let app = match wrap {
        Some(w) => w(app),
        None => app,
    };
    let http_task = match &tls {
        Some(id) => {
            let config = id.server_config(vec![b"h2".to_vec(), b"http/1.1".to_vec()])?;
            tokio::spawn(serve_https(http, app, config, s1))
        }
        None => tokio::spawn(async move {
            axum::serve(http, app)
                .with_graceful_shutdown(async move { s1.cancelled().await })
                .await
        }),
    };
    let flight_tls = match &tls {
        Some(id) => {
            crypto();
            Some(tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&id.cert_pem, &id.key_pem),
            ))
        }
        None => None,
    };
    let flight_task = tokio::spawn(crate::flight::serve_tls(
        q,
        auth,
        flight,
        flight_tls,
        grpc,
        Some(metrics),
        async move { s2.cancelled().await },
    ));
    let (http_abort, flight_abort) = (http_task.abort_handle(), flight_task.abort_handle());
    let postgres_abort = postgres_task.as_ref().map(|t| t.abort_handle());
    let finished = async move {
        http_task.await??;
        flight_task.await??;
        if let Some(t) = postgres_task {
            t.await??;
        }
        Ok::<(), ServeError>(())
    };
    tokio::pin!(finished);
    tokio::select! {
        r = &mut finished => return r,
        _ = stop.cancelled() => {}
    }
    // Stopping: listeners are closed and idle connections dropped; requests in flight
    // (a long query, a Flight stream, a bulk ingest) get SHUTDOWN_GRACE to finish.
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut finished).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(
                grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
                "requests still running after the shutdown grace period: cut off"
            );
            http_abort.abort();
            flight_abort.abort();
            if let Some(a) = postgres_abort {
                a.abort();
            }
            Ok(())
        }
    }
}

/// How long requests in flight may run on after a stop signal (SIGTERM, Ctrl-C) before
/// they are cut off: the HTTP and Flight listeners stop accepting at once.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A token cancelled on Ctrl-C or SIGTERM.
pub fn stop_on_signal() -> CancellationToken {
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        s.cancel();
    });
    stop
}
