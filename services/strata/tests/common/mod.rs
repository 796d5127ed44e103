//! Running `strata serve` in tests and talking HTTP to it.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A running `strata serve` (killed with SIGKILL when dropped).
pub struct Server {
    child: Child,
    pub http: String,
    pub flight: String,
    /// The PostgreSQL wire protocol address.
    pub postgres: String,
}

impl Server {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit on its own: its status, or None.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let t = std::time::Instant::now();
        while t.elapsed() < limit {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the real binary over `dir` on free ports.
pub fn start(dir: &std::path::Path) -> Server {
    start_with(dir, &[])
}

/// [`start`] with more `strata serve` arguments.
pub fn start_with(dir: &std::path::Path, args: &[&str]) -> Server {
    start_role("serve", dir, args)
}

/// Starts `strata <role>` (serve, ingest or query) over `dir` on free ports. With
/// `--postgres ""` among `args` the PostgreSQL port is off ([`Server::postgres`] empty);
/// with a `--config` file that turns it off, pass `--postgres ""` as well.
pub fn start_role(role: &str, dir: &std::path::Path, args: &[&str]) -> Server {
    let postgres_arg = args.iter().position(|a| *a == "--postgres");
    let postgres_off = postgres_arg.is_some_and(|i| args.get(i + 1) == Some(&""));
    let default_postgres: &[&str] = match postgres_arg {
        Some(_) => &[],
        None => &["--postgres", "127.0.0.1:0"],
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg(role)
        .arg("--dir")
        .arg(dir)
        .args(["--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"])
        .args(default_postgres)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start strata {role}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut addr = |prefix: &str| -> String {
        let line = lines.next().expect("address line").expect("read");
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected line {line}"))
            .to_string()
    };
    let http = addr("http listening on ");
    let flight = addr("flight listening on ");
    let postgres = if postgres_off {
        String::new()
    } else {
        addr("postgres listening on ")
    };
    // A writer answers `/ready` 503 until it has opened its tables: wait for that, as a
    // load balancer would (a server over TLS answers no plain request: not waited for).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while let Ok((503, body)) = try_request_with(&http, "GET", "/ready", "text/plain", b"", &[]) {
        assert!(
            std::time::Instant::now() < deadline,
            "strata {role} not ready after 60 s: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Server {
        child,
        http,
        flight,
        postgres,
    }
}

/// Runs the `strata` binary to completion with `args` and extra `env` (the clients' key and
/// CA variables and `RUST_LOG` cleared): whether it succeeded, its stdout and its stderr.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .env_remove("STRATA_API_KEY")
        .env_remove("STRATA_CA_CERT")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("run strata");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `--set` flags for small memtables and NVMe levels and fast job polling, so that data
/// reaches S3-level compaction jobs within a test.
pub const SMALL_LEVELS: &[&str] = &[
    "--set",
    "engine.memtable_bytes_max=32768",
    "--set",
    "engine.levels=2",
    "--set",
    "engine.level_bytes_base=16384",
    "--set",
    "engine.l0_compaction_trigger=2",
    "--set",
    "engine.jobs.poll_ms=50",
    "--set",
    "engine.jobs.idle_poll_max_ms=500",
    // 32 KiB memtables fill faster than a busy machine flushes them; tests that do not
    // exercise overload keep writing (as the engine's small_config does).
    "--set",
    "engine.memtables_frozen_max=64",
];

/// A minimal HTTP/1.1 request (Connection: close): status and body (not chunked: the
/// bodies used here are small JSON documents).
pub fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    request_as(addr, method, path, "application/json", body.as_bytes())
}

/// A request with a body of `content_type`.
pub fn request_as(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    request_with(addr, method, path, content_type, body, &[])
}

/// A request with a body of `content_type` and more headers (`Name: value` lines).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    headers: &[String],
) -> (u16, String) {
    try_request_with(addr, method, path, content_type, body, headers)
        .unwrap_or_else(|e| panic!("{method} {path} at {addr}: {e}"))
}

/// [`request_with`] that reports a connection failure instead of panicking (for servers
/// that may have been killed).
pub fn try_request_with(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    headers: &[String],
) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .map_err(|e| format!("write: {e}"))?;
    s.write_all(body).map_err(|e| format!("write body: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {text:?}"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
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
    Ok((status, body))
}

/// Runs `sql` over Arrow Flight SQL at `flight` (with an API key, if given); the result as
/// a pretty-printed table, or the error's text.
pub async fn flight_sql(flight: &str, key: Option<&str>, sql: &str) -> Result<String, String> {
    use futures::TryStreamExt;
    let channel = tonic::transport::Channel::from_shared(format!("http://{flight}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new(channel);
    if let Some(k) = key {
        client.set_token(k.to_string());
    }
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| e.to_string())?;
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let batches: Vec<arrow::array::RecordBatch> = client
        .do_get(ticket)
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string())
}

/// A PostgreSQL connection that has started (no API keys: trusted) and is idle: its
/// startup message sent and the server's answer read up to ReadyForQuery.
pub fn idle_postgres_connection(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut body = 196_608u32.to_be_bytes().to_vec(); // protocol 3.0
    for part in ["user", "u", "database", "strata", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let mut msg = u32::try_from(body.len() + 4)
        .unwrap()
        .to_be_bytes()
        .to_vec();
    msg.extend_from_slice(&body);
    s.write_all(&msg).unwrap();
    // Messages: a type byte, a length (itself included), the body; 'Z' is ReadyForQuery.
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut rest = vec![0u8; len - 4];
        s.read_exact(&mut rest).unwrap();
        assert_ne!(head[0], b'E', "the connection was refused: {rest:?}");
        if head[0] == b'Z' {
            return s;
        }
    }
}

/// Sends one simple-protocol query on a started PostgreSQL connection and reads the
/// answer up to ReadyForQuery or the end of the stream: the messages' type bytes, and the
/// fields of the first ErrorResponse (field type byte, value).
pub fn postgres_query(s: &mut TcpStream, sql: &str) -> (Vec<u8>, Vec<(u8, String)>) {
    let mut msg = vec![b'Q'];
    msg.extend_from_slice(&u32::try_from(sql.len() + 5).unwrap().to_be_bytes());
    msg.extend_from_slice(sql.as_bytes());
    msg.push(0);
    s.write_all(&msg).unwrap();
    let (mut kinds, mut error) = (Vec::new(), Vec::new());
    loop {
        let mut head = [0u8; 5];
        if s.read_exact(&mut head).is_err() {
            return (kinds, error);
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len - 4];
        s.read_exact(&mut body).unwrap();
        kinds.push(head[0]);
        if head[0] == b'E' && error.is_empty() {
            // Fields: a type byte, a NUL-terminated value; a NUL ends the list.
            for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
                error.push((field[0], String::from_utf8_lossy(&field[1..]).into_owned()));
            }
        }
        if head[0] == b'Z' {
            return (kinds, error);
        }
    }
}
