//! The `strata-query` binary as a separate process over a bucket another process writes:
//! freshness (every acknowledged write, WAL tail included), HTTP formats and errors, and a
//! real Arrow Flight SQL client.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use strata_engine::Table;

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

fn start(bucket: &std::path::Path, cache: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata-query"))
        .args(["--store", "local", "--dir"])
        .arg(bucket)
        .arg("--cache-dir")
        .arg(cache)
        .args(["--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"])
        .args(["--timeout-ms", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start strata-query");
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

/// A minimal HTTP/1.1 POST (Connection: close): status, content type, body.
fn post(
    addr: &str,
    path: &str,
    accept: &str,
    content_type: &str,
    body: &str,
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("status");
    let header = |name: &str| {
        head.lines()
            .find(|l| l.to_lowercase().starts_with(&format!("{name}:")))
            .map(|l| l[name.len() + 1..].trim().to_string())
    };
    if header("transfer-encoding").is_some_and(|v| v == "chunked") {
        body = dechunk(&body);
    }
    (status, header("content-type").unwrap_or_default(), body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n").expect("chunk size");
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..line_end]).expect("hex").trim(), 16)
                .expect("chunk size");
        b = &b[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

fn sql(addr: &str, text: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = post(addr, "/sql", "application/json", "text/plain", text);
    (status, serde_json::from_slice(&body).expect("json body"))
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

async fn put(t: &Table, ids: std::ops::Range<i64>, tag: &str) {
    let names: Vec<String> = ids.clone().map(|i| format!("{tag}{i}")).collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.collect::<Vec<_>>())),
            Arc::new(StringArray::from(names)),
        ],
    )
    .expect("batch");
    t.upsert(batch).await.expect("upsert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_query_process_sees_every_acknowledged_write() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bucket = tmp.path().join("bucket");
    let store = common::local_store(&bucket);
    let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
    db.create_table("people", schema().as_ref().clone(), &["id"])
        .await
        .expect("create");
    let t = db.table("people").await.expect("table");
    // S3 levels, then NVMe SSTs, then rows only in the WAL (and the writer's memtable).
    put(&t, 0..100, "s3-").await;
    t.flush().await.expect("flush");
    t.drain_to_bucket().await.expect("drain");
    t.wait_jobs().await.expect("jobs");
    put(&t, 50..120, "sst-").await;
    t.flush().await.expect("flush");
    put(&t, 110..130, "wal-").await;

    let server = start(&bucket, &tmp.path().join("query-cache"));
    let (status, v) = sql(
        &server.http,
        "SELECT count(*) AS n, max(id) AS top FROM people",
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, serde_json::json!([{"n": 130, "top": 129}]));
    let (_, v) = sql(
        &server.http,
        "SELECT name FROM people WHERE id IN (10, 60, 115) ORDER BY id",
    );
    assert_eq!(
        v,
        serde_json::json!([{"name": "s3-10"}, {"name": "sst-60"}, {"name": "wal-115"}])
    );

    // Freshness: acknowledged now, visible to the next query of the other process.
    put(&t, 500..501, "fresh-").await;
    let (_, v) = sql(&server.http, "SELECT name FROM people WHERE id = 500");
    assert_eq!(v, serde_json::json!([{"name": "fresh-500"}]));

    // Formats by Accept.
    let q = "SELECT id, name FROM people WHERE id < 2 ORDER BY id";
    let (s, ct, body) = post(
        &server.http,
        "/sql",
        "application/x-ndjson",
        "text/plain",
        q,
    );
    assert_eq!((s, ct.as_str()), (200, "application/x-ndjson"));
    assert_eq!(
        String::from_utf8(body).expect("utf8"),
        "{\"id\":0,\"name\":\"s3-0\"}\n{\"id\":1,\"name\":\"s3-1\"}\n"
    );
    let (s, ct, body) = post(&server.http, "/sql", "text/csv", "text/plain", q);
    assert_eq!((s, ct.as_str()), (200, "text/csv"));
    assert_eq!(
        String::from_utf8(body).expect("utf8"),
        "id,name\n0,s3-0\n1,s3-1\n"
    );
    let (s, ct, body) = post(
        &server.http,
        "/sql",
        "application/vnd.apache.arrow.stream",
        "application/json",
        &serde_json::json!({"sql": q}).to_string(),
    );
    assert_eq!(
        (s, ct.as_str()),
        (200, "application/vnd.apache.arrow.stream")
    );
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).expect("ipc");
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
    assert_eq!(
        common::rows(&batches),
        vec![
            vec!["0".to_string(), "s3-0".into()],
            vec!["1".into(), "s3-1".into()]
        ]
    );

    // Errors: status and stable code, never a panic.
    let (s, v) = sql(&server.http, "SELECT * FROM nope");
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
    let (s, v) = sql(&server.http, "SELEC 1");
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (s, v) = sql(&server.http, "INSERT INTO people VALUES (1, 'x')");
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    let (s, v) = sql(
        &server.http,
        "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/passwd'",
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    let (s, _, body) = post(
        &server.http,
        "/sql",
        "application/json",
        "application/json",
        "{\"sq\": 1}",
    );
    assert_eq!(s, 400, "{}", String::from_utf8_lossy(&body));

    // Arrow Flight SQL with the arrow-flight client.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.flight))
        .expect("uri")
        .connect()
        .await
        .expect("connect flight");
    let mut client = FlightSqlServiceClient::new(channel);
    let info = client
        .execute(
            "SELECT id, name FROM people WHERE id >= 108 AND id < 112 ORDER BY id".into(),
            None,
        )
        .await
        .expect("get flight info");
    // GetFlightInfo planned the statement for its DoGet; a ticket without a waiting plan
    // (another server's, an expired one, or plain SQL) is planned from its SQL.
    let ticket_of = |handle: &str| {
        use arrow_flight::sql::{ProstMessageExt, TicketStatementQuery};
        use prost::Message;
        let t = TicketStatementQuery {
            statement_handle: handle.as_bytes().to_vec().into(),
        };
        arrow_flight::Ticket::new(t.as_any().encode_to_vec())
    };
    let fallback = "SELECT name FROM people WHERE id = 109";
    for (ticket, want) in [
        (
            info.endpoint[0].ticket.clone().expect("ticket"),
            vec!["sst-108", "sst-109", "wal-110", "wal-111"],
        ),
        (
            ticket_of(&format!("strata-plan/987654\n{fallback}")),
            vec!["sst-109"],
        ),
        (ticket_of(fallback), vec!["sst-109"]),
    ] {
        let batches: Vec<RecordBatch> = client
            .do_get(ticket)
            .await
            .expect("do_get")
            .try_collect()
            .await
            .expect("batches");
        let got: Vec<String> = common::rows(&batches)
            .into_iter()
            .filter_map(|r| r.last().cloned())
            .collect();
        assert_eq!(got, want);
    }
    let err = client
        .execute("SELECT * FROM missing".into(), None)
        .await
        .expect_err("unknown table");
    assert!(err.to_string().contains("not found"), "{err}");
    let err = client
        .execute_update("DELETE FROM people".into(), None)
        .await
        .expect_err("read-only");
    assert!(err.to_string().contains("forbidden"), "{err}");

    // Metrics of a reader: its requests and the bucket's, and no engine gauges, because it
    // writes no shard; scraping must not open a table as its writer (which would fence the
    // ingest writer), so the writer still writes and the reader still sees it.
    let mut s = TcpStream::connect(&server.http).expect("connect");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(
        raw.contains(r#"strata_http_requests_total{op="POST /sql",status="200"}"#),
        "{raw}"
    );
    assert!(raw.contains("strata_object_store_requests_total"), "{raw}");
    assert!(!raw.contains(r#"table="people""#), "{raw}");
    put(&t, 600..601, "after-metrics-").await;
    let (_, v) = sql(&server.http, "SELECT name FROM people WHERE id = 600");
    assert_eq!(v, serde_json::json!([{"name": "after-metrics-600"}]));
    db.close().await;
}
