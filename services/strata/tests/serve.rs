//! `strata serve` as a user runs it: the real binary on 127.0.0.1, tables created and
//! written through SQL over HTTP, read over HTTP and Arrow Flight SQL, and every
//! acknowledged write still there after the process is killed and started again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use arrow::array::RecordBatch;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;

struct Server {
    child: Child,
    http: String,
    flight: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("serve")
        .arg("--dir")
        .arg(dir)
        .args(["--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start strata serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut addr = |prefix: &str| -> String {
        let line = lines.next().expect("address line").expect("read");
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected line {line}"))
            .to_string()
    };
    let http = addr("http listening on ");
    let flight = addr("flight listening on ");
    Server {
        child,
        http,
        flight,
    }
}

/// A minimal HTTP/1.1 request (Connection: close): status and body (not chunked: the
/// bodies used here are small JSON documents).
fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("header end");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("status");
    let body = if head.to_lowercase().contains("transfer-encoding: chunked") {
        // Drop the chunk-size lines.
        body.split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, s)| s)
            .collect()
    } else {
        body.to_string()
    };
    (status, body)
}

fn sql(s: &Server, q: &str) -> (u16, String) {
    request(&s.http, "POST", "/sql", q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_sql_and_keeps_acknowledged_writes_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    assert_eq!(
        request(&server.http, "GET", "/ready", ""),
        (200, "ready".into())
    );
    assert_eq!(
        request(&server.http, "GET", "/health", ""),
        (200, "ok".into())
    );

    let (status, body) = sql(
        &server,
        "CREATE TABLE kv (k BIGINT, v VARCHAR, n BIGINT, PRIMARY KEY (k))",
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(
        &server,
        "INSERT INTO kv VALUES (1, 'one', 10), (2, 'two', 20), (3, 'three', 30)",
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "UPDATE kv SET n = 21 WHERE k = 2");
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "DELETE FROM kv WHERE k = 3");
    assert_eq!(status, 200, "{body}");
    let want = r#"[{"k":1,"v":"one","n":10},{"k":2,"v":"two","n":21}]"#;
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));

    // Errors are JSON with a stable code.
    let (status, body) = sql(&server, "SELECT * FROM missing");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"code\""), "{body}");

    // Arrow Flight SQL on the same process.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.flight))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    let info = client
        .execute("SELECT sum(n) AS s FROM kv".into(), None)
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let batches: Vec<RecordBatch> = client
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(text.contains("| 31 |"), "{text}");

    // SIGKILL: no shutdown hook runs. Every acknowledged write is in the bucket's WAL.
    drop(server);
    let server = start(dir.path());
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));
    let (status, body) = sql(&server, "INSERT INTO kv VALUES (4, 'four', 40)");
    assert_eq!(status, 200, "{body}");
    let (status, body) = sql(&server, "SELECT count(*) AS c FROM kv");
    assert_eq!((status, body.trim()), (200, r#"[{"c":3}]"#));
}
