//! Shutdown and idle (issue 20, item 9): after a run of malformed requests, timed-out and
//! abandoned queries and Flight SQL calls, an idle `strata serve` uses next to no CPU;
//! and on SIGTERM with a query, a slow bulk ingest and a Flight stream in flight it exits
//! within its documented bound (the requests' grace period, then the shards' close).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    Server, flight_sql, idle_postgres_connection, postgres_query, request, request_as, start_with,
    try_request_with,
};

/// CPU time (user + system) the process has used so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = &stat[stat.rfind(") ").unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 after the name).
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let hz: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100);
    Duration::from_millis(ticks * 1000 / hz)
}

/// Creates table `name` (`k BIGINT` key, `v STRING`) over HTTP.
fn create_kv_table(h: &str, name: &str) {
    let spec = format!(
        r#"{{"name": "{name}", "columns": [{{"name": "k", "type": "int64", "nullable": false}},
            {{"name": "v", "type": "string"}}], "primary_key": ["k"]}}"#
    );
    let (st, body) = request(h, "POST", "/v1/tables", &spec);
    assert_eq!(st, 201, "{body}");
}

fn sql(s: &Server, q: &str) -> (u16, String) {
    request_as(&s.http, "POST", "/sql", "text/plain", q.as_bytes())
}

/// Sends raw bytes and closes without reading the answer.
fn raw(addr: &str, bytes: &[u8]) {
    if let Ok(mut s) = TcpStream::connect(addr) {
        let _ = s.write_all(bytes);
    }
}

/// A self-join long enough to outlive the timeout set here (0.3 s). A query that times out
/// stops at its operators' next batch boundary (a CPU-bound poll cannot be preempted), so
/// the table is small enough that one poll of this join is short even in a debug build.
/// A non-equi self-join of the 20,000-row table: 400 million comparisons, seconds even on a
/// fast machine in an optimized build, far past the 300 ms timeout the server runs with.
/// (A 3,000-row self-join once finished inside it on a fast CI machine.) Timed out, it must
/// stop using the CPU: the idle check below fails if the join runs on after its timeout.
const HEAVY: &str = "SELECT count(*) AS n FROM kv a JOIN kv b ON a.v < b.v";

/// Waits (up to 60 s) for a 1 s window in which the process uses under 5% of a core: the
/// timed-out and abandoned queries have wound down.
fn settle(pid: u32) -> Duration {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        let before = cpu(pid);
        std::thread::sleep(Duration::from_secs(1));
        if cpu(pid) - before < Duration::from_millis(50) {
            return t.elapsed();
        }
    }
    panic!("the server never went idle: CPU still busy 60 s after the last request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_after_abuse_and_bounded_exit_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_with(dir.path(), &["--set", "query.timeout_ms=300"]);
    let h = server.http.clone();
    for name in ["kv", "small"] {
        create_kv_table(&h, name);
    }
    let rows: String = (0..3000i64)
        .map(|i| {
            format!(
                "{{\"k\": {i}, \"v\": \"value-{:08}\"}}\n",
                (i * 7919) % 3000
            )
        })
        .collect();
    let (st, body) = request_as(
        &h,
        "POST",
        "/v1/tables/small/rows",
        "application/x-ndjson",
        rows.as_bytes(),
    );
    assert_eq!(st, 200, "{body}");
    for chunk in (0..20_000i64).collect::<Vec<_>>().chunks(5000) {
        let rows: String = chunk
            .iter()
            .map(|i| {
                format!(
                    "{{\"k\": {i}, \"v\": \"value-{:08}\"}}\n",
                    (i * 7919) % 20_000
                )
            })
            .collect();
        let (st, body) = request_as(
            &h,
            "POST",
            "/v1/tables/kv/rows",
            "application/x-ndjson",
            rows.as_bytes(),
        );
        assert_eq!(st, 200, "{body}");
    }

    // Malformed requests of every kind: each answered with a client error, nothing kept
    // running.
    for (method, path, ctype, body) in [
        (
            "POST",
            "/v1/tables/kv/rows",
            "application/x-ndjson",
            "{not json",
        ),
        (
            "POST",
            "/v1/tables/kv/rows",
            "application/x-ndjson",
            "{\"k\": \"x\"}\n",
        ),
        (
            "POST",
            "/v1/tables/missing/rows",
            "application/x-ndjson",
            "{\"k\": 1}\n",
        ),
        ("POST", "/sql", "text/plain", "SELEC 1"),
        ("POST", "/sql", "text/plain", "SELECT * FROM missing"),
        ("POST", "/sql", "application/json", "{\"sql\": 5}"),
        ("POST", "/v1/tables", "application/json", "[]"),
        ("GET", "/v1/nothing-here", "text/plain", ""),
    ] {
        let (st, body) = request_as(&h, method, path, ctype, body.as_bytes());
        assert!((400..500).contains(&st), "{method} {path}: {st} {body}");
    }
    raw(&h, b"GARBAGE / HTTP/1.1\r\n\r\n");
    raw(
        &h,
        b"POST /sql HTTP/1.1\r\nContent-Length: 100000\r\n\r\nSELECT",
    );
    raw(&h, &[0u8, 159, 146, 150, 255, 0, 1]);
    raw(&server.flight, b"not http/2 at all");

    // Queries that time out, and one abandoned by its client mid-run.
    for _ in 0..2 {
        let (st, body) = sql(&server, HEAVY);
        assert!(st >= 400 && body.contains("timeout"), "{st} {body}");
    }
    raw(
        &h,
        format!(
            "POST /sql HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{HEAVY}",
            HEAVY.len()
        )
        .as_bytes(),
    );
    // Flight SQL: a good query, a bad one, and one that times out.
    let text = flight_sql(&server.flight, None, "SELECT count(*) AS n FROM kv")
        .await
        .unwrap();
    assert!(text.contains("20000"), "{text}");
    assert!(flight_sql(&server.flight, None, "SELEC").await.is_err());
    assert!(flight_sql(&server.flight, None, HEAVY).await.is_err());

    // Idle: once the timed-out and abandoned queries have wound down, background loops
    // only (GC, job polling, memtable settling) for 5 s.
    let settled = settle(server.pid());
    eprintln!(
        "went idle {} ms after the last request",
        settled.as_millis()
    );
    let before = cpu(server.pid());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let used = cpu(server.pid()) - before;
    eprintln!("idle CPU over 5 s: {} ms", used.as_millis());
    assert!(
        used < Duration::from_millis(400),
        "an idle server used {} ms of CPU in 5 s",
        used.as_millis()
    );

    // In flight at SIGTERM: a query (its 300 ms timeout not yet run out), a bulk ingest whose client
    // sends its body slowly (never finishing), and a Flight SQL stream.
    let q = std::thread::spawn({
        let h = h.clone();
        move || {
            try_request_with(&h, "POST", "/sql", "text/plain", HEAVY.as_bytes(), &[]).map(|r| r.0)
        }
    });
    let mut slow = TcpStream::connect(&h).unwrap();
    slow.write_all(
        b"POST /v1/tables/kv/rows HTTP/1.1\r\nContent-Type: application/x-ndjson\r\nContent-Length: 10000000\r\n\r\n{\"k\": 1, \"v\": \"a\"}\n",
    )
    .unwrap();
    let flight = server.flight.clone();
    let f = tokio::spawn(async move { flight_sql(&flight, None, HEAVY).await.is_ok() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    sigterm(&server);
    let exited = server.wait_exit(Duration::from_secs(40));
    let took = t.elapsed();
    eprintln!("exit {} ms after SIGTERM: {exited:?}", took.as_millis());
    let exited = exited.expect("strata serve still running 40 s after SIGTERM");
    assert!(exited.success(), "{exited:?}");
    assert!(
        took < Duration::from_secs(30),
        "exit took {} ms (bound: 10 s grace + 15 s close)",
        took.as_millis()
    );
    let _ = slow.write_all(b"{\"k\": 2}\n");
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let _ = q.join();
    let _ = f.await;
}

/// Idle PostgreSQL connections do not hold a stopping server for the grace period that
/// running statements get: with nothing running, SIGTERM closes them and the process exits
/// at once.
#[test]
fn idle_postgres_connections_do_not_hold_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_with(dir.path(), &[]);
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| idle_postgres_connection(&server.postgres))
        .collect();
    let t = Instant::now();
    sigterm(&server);
    let exited = server
        .wait_exit(Duration::from_secs(30))
        .expect("strata serve still running 30 s after SIGTERM");
    let took = t.elapsed();
    assert!(exited.success(), "{exited:?}");
    // The grace for running statements is 10 s; closing the shards of an empty database
    // takes well under a second.
    assert!(
        took < Duration::from_secs(5),
        "exit took {} ms with idle PostgreSQL connections",
        took.as_millis()
    );
    // Closed by the server (end of stream), not left to time out.
    for s in &mut idle {
        let mut rest = Vec::new();
        assert!(
            s.read_to_end(&mut rest).is_ok(),
            "an idle connection was not closed"
        );
    }
}

/// Sends SIGTERM to the server.
fn sigterm(server: &Server) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

const CROSS: &str = "SELECT count(*) FROM small a, small b, small c, small d, small e, small f";

/// While a stopping server lets a running statement finish (its grace period), a new
/// statement on another connection is refused with FATAL 57P01 (`admin_shutdown`, what
/// PostgreSQL sends when it is shut down) and its connection is closed; the process still
/// exits once the grace has passed.
#[test]
fn a_statement_sent_while_stopping_is_refused_with_57p01() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_with(dir.path(), &[]);
    let h = server.http.clone();
    create_kv_table(&h, "small");
    let rows: String = (0..40i64)
        .map(|i| format!("{{\"k\": {i}, \"v\": \"v{i}\"}}\n"))
        .collect();
    let (st, body) = request_as(
        &h,
        "POST",
        "/v1/tables/small/rows",
        "application/x-ndjson",
        rows.as_bytes(),
    );
    assert_eq!(st, 200, "{body}");

    // A cross join of 40^6 rows: minutes, in short polls (so the runtime threads stay
    // free to answer other connections meanwhile).
    let mut busy = idle_postgres_connection(&server.postgres);
    busy.set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let running = std::thread::spawn(move || postgres_query(&mut busy, CROSS));
    let mut late = idle_postgres_connection(&server.postgres);
    std::thread::sleep(Duration::from_millis(500));
    if running.is_finished() {
        let (kinds, error) = running.join().unwrap();
        panic!("the self-join ended before SIGTERM: {kinds:?} {error:?}");
    }
    let t = Instant::now();
    sigterm(&server);
    std::thread::sleep(Duration::from_millis(500));
    let (kinds, error) = postgres_query(&mut late, "SELECT 1");
    assert_eq!(
        kinds.first(),
        Some(&b'E'),
        "answered {kinds:?} while stopping"
    );
    let field = |t: u8| error.iter().find(|(k, _)| *k == t).map(|(_, v)| v.as_str());
    assert_eq!(field(b'C'), Some("57P01"), "{error:?}");
    assert_eq!(field(b'S'), Some("FATAL"), "{error:?}");
    assert!(
        field(b'M').is_some_and(|m| m.contains("shutting down")),
        "{error:?}"
    );
    // FATAL closes the connection: after the error (and the ReadyForQuery pgwire sends
    // with it) nothing follows but the end of the stream.
    let mut rest = Vec::new();
    assert!(
        late.read_to_end(&mut rest).is_ok() && rest.is_empty(),
        "{rest:?}"
    );

    let exited = server
        .wait_exit(Duration::from_secs(40))
        .expect("strata serve still running 40 s after SIGTERM");
    assert!(exited.success(), "{exited:?}");
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "exit took {} ms (bound: 10 s grace + 15 s close)",
        took.as_millis()
    );
    // The running statement either finished within the grace or had its connection
    // closed after it; either way its client is not left waiting.
    running.join().unwrap();
}
