//! Running the endpoints: HTTP (`POST /sql`, `/health`, `/ready`, `/metrics`) and Arrow
//! Flight SQL on bound listeners until a stop signal, shared by `strata-query` and
//! `strata serve`.

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
    let (s1, s2) = (stop.clone(), stop.clone());
    let metrics = crate::metrics::ServiceMetrics::new(q.db().clone(), auth.clone());
    let app = crate::http::router(q.clone(), auth.clone())
        .merge(extra)
        .merge(
            axum::Router::new()
                .route("/metrics", axum::routing::get(crate::metrics::handler))
                .with_state(metrics.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            metrics,
            crate::metrics::track,
        ));
    let http_task = tokio::spawn(async move {
        axum::serve(http, app)
            .with_graceful_shutdown(async move { s1.cancelled().await })
            .await
    });
    let flight_task = tokio::spawn(crate::flight::serve(q, auth, flight, async move {
        s2.cancelled().await
    }));
    http_task.await??;
    flight_task.await??;
    Ok(())
}

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
