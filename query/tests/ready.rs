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

/// `GET /ready` on `addr` from a blocking thread.
async fn probe(addr: &str) -> (u16, String) {
    let a = addr.to_string();
    tokio::task::spawn_blocking(move || get(&a, "/ready"))
        .await
        .unwrap()
}

/// A writer is not ready, in `/ready` and in the gRPC health service, until it has opened
/// the tables it writes: while a table will not open (the bucket failing), `/ready` says
/// which and why and health answers NOT_SERVING; once the bucket answers again the table
/// opens on a retry and both turn ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_ready_once_its_tables_are_open() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultInjectingStore::new(
        common::local_store(&dir.path().join("bucket")),
        FaultConfig::default(),
    ));
    let store: StoreRef = faults.clone();
    // A table with rows, written by an earlier process.
    {
        let db = common::open(&store, &dir.path().join("first"), common::small_config()).await;
        let q = common::service(&db, true);
        for sql in [
            "CREATE TABLE t (k BIGINT, v VARCHAR, PRIMARY KEY (k))",
            "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
        ] {
            q.collect(sql).await.unwrap();
        }
        db.close().await;
    }
    // A new process over the bucket, which now fails every request (the catalog it read at
    // open is its own for a minute).
    let config = strata_engine::EngineConfig {
        catalog_refresh_ms: 60_000,
        ..common::small_config()
    };
    let db = common::open(&store, &dir.path().join("second"), config).await;
    assert_eq!(db.list_tables().await.unwrap().len(), 1);
    faults.set_config(FaultConfig {
        error_rate: 1.0,
        ..Default::default()
    });
    let startup = strata_query::ready::Startup::pending("opening tables");
    let q = common::service(&db, true).with_startup(startup.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = strata_query::http::router(q.clone(), Authenticator::open());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = format!("http://{}", grpc.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(strata_query::flight::serve(
        q,
        Authenticator::open(),
        grpc,
        async move {
            let _ = stopped.await;
        },
    ));
    let channel = tonic::transport::Channel::from_shared(grpc_addr)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = HealthClient::new(channel);
    let status = || {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap()
                .into_inner()
                .status
        }
    };

    assert_eq!(
        probe(&addr).await,
        (503, "not ready: opening tables".into())
    );
    assert_eq!(status().await, ServingStatus::NotServing as i32);
    tokio::spawn(strata_query::ready::open_tables(db.clone(), startup));
    // The table cannot open while the bucket fails: /ready says so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let body = loop {
        let (code, body) = probe(&addr).await;
        assert_eq!(code, 503, "{body}");
        if body.contains("did not open") {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(body.contains("table t did not open"), "{body}");
    assert_eq!(status().await, ServingStatus::NotServing as i32);
    assert!(db.open_tables().await.is_empty());

    // The bucket answers again: the table opens on a retry, and the node turns ready.
    faults.set_config(FaultConfig::default());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, body) = probe(&addr).await;
        if code == 200 {
            assert_eq!(body, "ready");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(db.open_tables().await.len(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while status().await != ServingStatus::Serving as i32 {
        assert!(
            std::time::Instant::now() < deadline,
            "health still NOT_SERVING"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A client watching health (as gRPC load balancers do) sees NOT_SERVING as soon as
    // the server starts stopping, before its connections drain.
    let mut watch = health
        .clone()
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    stop.send(()).unwrap();
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), watch.message())
        .await
        .expect("a status within 10 s of the stop")
        .unwrap()
        .unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    drop(health);
}
