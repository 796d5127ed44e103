//! `strata serve` as a user runs it: the real binary on 127.0.0.1, tables created and
//! written through SQL over HTTP, read over HTTP and Arrow Flight SQL, and every
//! acknowledged write still there after the process is killed and started again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, flight_sql, request, request_as, start};

fn sql(s: &Server, q: &str) -> (u16, String) {
    request_as(&s.http, "POST", "/sql", "text/plain", q.as_bytes())
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
    // The same query again: its plan was kept by its shape.
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv WHERE k < 3 ORDER BY k");
    assert_eq!((status, body.trim()), (200, want));
    let (status, body) = sql(&server, "SELECT k, v, n FROM kv WHERE k < 2 ORDER BY k");
    assert_eq!(
        (status, body.trim()),
        (200, r#"[{"k":1,"v":"one","n":10}]"#)
    );

    // Errors are JSON with a stable code.
    let (status, body) = sql(&server, "SELECT * FROM missing");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"code\""), "{body}");

    // Prometheus metrics: requests per operation, the bucket's requests, the engine's
    // backlog per table.
    let (status, text) = request(&server.http, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    for want in [
        r#"strata_http_requests_total{op="POST /sql",status="200"} 7"#,
        r#"strata_http_requests_total{op="POST /sql",status="404"} 1"#,
        "strata_http_request_seconds_bucket{",
        r#"strata_object_store_requests_total{op="put",prefix="wal"}"#,
        r#"strata_pending_compaction_bytes{table="kv",shard="0"}"#,
        r#"strata_write_stalls_total{table="kv",shard="0"} 0"#,
        // The INSERT, the UPDATE and the DELETE: one write each.
        r#"strata_writes_total{table="kv",shard="0"} 3"#,
        r#"strata_wal_segments_total{table="kv",shard="0"}"#,
        r#"strata_point_reads_total{table="kv",shard="0",source="memtable"}"#,
        r#"strata_point_reads_total{table="kv",shard="0",source="s3"}"#,
        // How the SQL statements were planned: CREATE, INSERT, UPDATE, DELETE and the
        // query of a missing table afresh; the two shapes of SELECT made once each, and
        // `k < 2` answered from the plan `k < 3` made.
        r#"strata_sql_plans_total{plan="fresh"} 5"#,
        r#"strata_sql_plans_total{plan="made"} 2"#,
        r#"strata_sql_plans_total{plan="kept"} 1"#,
        "# EOF",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }

    // Arrow Flight SQL on the same process.
    let text = flight_sql(&server.flight, None, "SELECT sum(n) AS s FROM kv")
        .await
        .unwrap();
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

/// A PostgreSQL frontend message: its type byte, its length (itself included), `body`.
fn pg_message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&u32::try_from(body.len() + 4).unwrap().to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Parse of the unnamed statement `sql` (parameter types left to the server).
fn pg_parse(sql: &str) -> Vec<u8> {
    let mut b = vec![0u8];
    b.extend_from_slice(sql.as_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    pg_message(b'P', &b)
}

/// Bind of the unnamed portal to the unnamed statement, `params` in text.
fn pg_bind(params: &[&str]) -> Vec<u8> {
    let mut b = vec![0u8, 0, 0, 0];
    b.extend_from_slice(&u16::try_from(params.len()).unwrap().to_be_bytes());
    for p in params {
        b.extend_from_slice(&u32::try_from(p.len()).unwrap().to_be_bytes());
        b.extend_from_slice(p.as_bytes());
    }
    b.extend_from_slice(&[0, 0]);
    pg_message(b'B', &b)
}

/// Execute of the unnamed portal, at most `rows` rows (0: all).
fn pg_execute(rows: u32) -> Vec<u8> {
    let mut b = vec![0u8];
    b.extend_from_slice(&rows.to_be_bytes());
    pg_message(b'E', &b)
}

/// The backend's messages (type byte, body) up to and including the first `until`.
fn pg_read_until(s: &mut std::net::TcpStream, until: u8) -> Vec<(u8, Vec<u8>)> {
    use std::io::Read;
    let mut got = Vec::new();
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len - 4];
        s.read_exact(&mut body).unwrap();
        got.push((head[0], body));
        if head[0] == until {
            return got;
        }
    }
}

/// Whether the backend sends anything within `wait`.
fn pg_sends_within(s: &mut std::net::TcpStream, wait: std::time::Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    let sent = match s.peek(&mut byte) {
        Ok(n) => n > 0,
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "{e}"
            );
            false
        }
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    sent
}

/// The extended query protocol as PostgreSQL answers it: replies to Parse, Bind, Describe
/// and Execute are held until the client's Sync (or Flush) and then leave together, rows
/// of an Execute with a row limit come a limit at a time (PortalSuspended), and a portal
/// without rows is described with NoData.
#[test]
fn postgres_replies_wait_for_the_clients_sync_or_flush() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    for q in [
        "CREATE TABLE kv (k BIGINT, v VARCHAR, PRIMARY KEY (k))",
        "INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    ] {
        let (status, body) = sql(&server, q);
        assert_eq!(status, 200, "{q}: {body}");
    }
    let mut pg = common::idle_postgres_connection(&server.postgres);
    let kinds = |m: &[(u8, Vec<u8>)]| m.iter().map(|(k, _)| *k as char).collect::<String>();
    let describe_portal = pg_message(b'D', b"P\0");
    let sync = pg_message(b'S', b"");

    // A driver's round trip: nothing is sent before the Sync, then every reply at once.
    let round = [
        pg_parse("SELECT v FROM kv WHERE k = $1"),
        pg_bind(&["2"]),
        describe_portal.clone(),
        pg_execute(0),
    ]
    .concat();
    pg.write_all(&round).unwrap();
    assert!(
        !pg_sends_within(&mut pg, std::time::Duration::from_millis(300)),
        "replies were sent before the client's Sync"
    );
    pg.write_all(&sync).unwrap();
    let got = pg_read_until(&mut pg, b'Z');
    assert_eq!(kinds(&got), "12TDCZ");
    assert!(got[3].1.ends_with(b"b"), "{:?}", got[3]);
    assert!(got[4].1.starts_with(b"SELECT 1"), "{:?}", got[4]);

    // A row limit: one row, PortalSuspended, then the rest; Flush sends what is queued.
    let limited = [
        pg_parse("SELECT k FROM kv ORDER BY k"),
        pg_bind(&[]),
        pg_execute(1),
        pg_message(b'H', b""),
    ]
    .concat();
    pg.write_all(&limited).unwrap();
    assert_eq!(kinds(&pg_read_until(&mut pg, b's')), "12Ds");
    pg.write_all(&[pg_execute(0), sync.clone()].concat())
        .unwrap();
    let rest = pg_read_until(&mut pg, b'Z');
    assert_eq!(kinds(&rest), "DDCZ");
    assert!(rest[2].1.starts_with(b"SELECT 2"), "{:?}", rest[2]);

    // A change with a parameter is described with NoData and answers its command tag.
    pg.write_all(
        &[
            pg_parse("INSERT INTO kv VALUES ($1, 'd')"),
            pg_bind(&["4"]),
            describe_portal,
            pg_execute(0),
            sync,
        ]
        .concat(),
    )
    .unwrap();
    let insert = pg_read_until(&mut pg, b'Z');
    assert_eq!(kinds(&insert), "12nCZ");
    assert!(insert[3].1.starts_with(b"INSERT 0 1"), "{:?}", insert[3]);
}

/// The TCP ports process `pid` listens on, from Linux's `/proc` (its socket inodes matched
/// against the listening sockets in `/proc/net/tcp`).
fn listening_ports(pid: u32) -> std::collections::BTreeSet<u16> {
    let inodes: std::collections::BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, state (0A: LISTEN), ..., inode
            let listening = f.get(3) == Some(&"0A") && inodes.contains(*f.get(9)?);
            let port = f.get(1)?.rsplit_once(':')?.1;
            listening.then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect()
}

fn port(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// The PostgreSQL port is on by default and off with `postgres = ""` in the configuration
/// file: the node then listens on HTTP and Flight SQL only and answers SQL there.
#[test]
fn the_postgres_port_is_off_when_configured_empty() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let on = start(&dir.path().join("on"));
    assert_eq!(
        listening_ports(on.pid()),
        [port(&on.http), port(&on.flight), port(&on.postgres)]
            .into_iter()
            .collect()
    );
    drop(on);

    let config = dir.path().join("strata.toml");
    std::fs::write(&config, "postgres = \"\"\n").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("serve")
        .arg("--dir")
        .arg(dir.path().join("off"))
        .args(["--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut next = |prefix: &str| {
        let line = lines.next().unwrap().unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line}"))
            .to_string()
    };
    let http = next("http listening on ");
    let flight = next("flight listening on ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while request(&http, "GET", "/ready", "").0 != 200 {
        assert!(std::time::Instant::now() < deadline, "not ready");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, body) = request_as(&http, "POST", "/sql", "text/plain", b"SELECT 41 + 1 AS n");
    assert_eq!((status, body.as_str()), (200, r#"[{"n":42}]"#));
    assert_eq!(
        listening_ports(child.id()),
        [port(&http), port(&flight)].into_iter().collect()
    );
    let _ = child.kill();
    let _ = child.wait();
    // Nothing more was printed: no PostgreSQL listener line.
    assert!(lines.next().is_none());
}
