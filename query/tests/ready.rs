//! `GET /ready` says whether the service can answer: ready while the bucket answers, 503
//! with the reason while it does not, ready again when it is back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::sync::Arc;

use strata_objstore::{FaultConfig, FaultInjectingStore, StoreRef};
use strata_query::auth::Authenticator;

/// `GET path` on `addr`: the status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultInjectingStore::new(
        common::local_store(&dir.path().join("bucket")),
        FaultConfig::default(),
    ));
    let store: StoreRef = faults.clone();
    let db = common::open(&store, &dir.path().join("local"), common::small_config()).await;
    let q = common::service(&db, false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = strata_query::http::router(q, Authenticator::open());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || get(&a, "/ready"))
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "ready"));

    faults.set_config(FaultConfig {
        error_rate: 1.0,
        ..Default::default()
    });
    let a = addr.clone();
    let (status, body) = tokio::task::spawn_blocking(move || get(&a, "/ready"))
        .await
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("not ready: the bucket"), "{body}");
    // The process is alive all the same.
    let a = addr.clone();
    let (status, _) = tokio::task::spawn_blocking(move || get(&a, "/health"))
        .await
        .unwrap();
    assert_eq!(status, 200);

    faults.set_config(FaultConfig::default());
    let (status, body) = tokio::task::spawn_blocking(move || get(&addr, "/ready"))
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "ready"));
}
