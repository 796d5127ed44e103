//! API keys end to end: the real `strata serve` with a keys file. Missing or unknown keys
//! get 401, keys without the scope 403, a key for one namespace never reads another's
//! tables (data API, SQL over HTTP, time travel, Flight SQL), and a refused request
//! changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, flight_sql, request_with, start_with};

/// Keys and the SHA-256 the keys file holds (`printf %s KEY | sha256sum`).
const ROOT: (&str, &str) = (
    "root-key-1",
    "5930cf09a36d786f238068cb18b73fce7d57a52ab1b419ea046b29231d3682da",
);
const SALES_WRITER: (&str, &str) = (
    "sales-writer-key",
    "faa075e5e9f2f454b6aa2f432b94d1a1018c99ee2368e47f6a3cf21abde72919",
);
const SALES_READER: (&str, &str) = (
    "sales-reader-key",
    "563e1e9b1b732c74853c6e3b1e04977075fd1c328e7a6df30a24c1d4b2bae194",
);
const HR_ADMIN: (&str, &str) = (
    "hr-admin-key",
    "d6ec72f4531f49d1971b59e9a7707e76e0ef365526648994b8e4d55bc41f8402",
);

fn call(s: &Server, key: Option<&str>, method: &str, path: &str, body: &str) -> (u16, String) {
    let headers: Vec<String> = key
        .map(|k| vec![format!("Authorization: Bearer {k}")])
        .unwrap_or_default();
    request_with(
        &s.http,
        method,
        path,
        "application/json",
        body.as_bytes(),
        &headers,
    )
}

fn sql(s: &Server, key: Option<&str>, q: &str) -> (u16, String) {
    let headers: Vec<String> = key
        .map(|k| vec![format!("Authorization: Bearer {k}")])
        .unwrap_or_default();
    request_with(
        &s.http,
        "POST",
        "/sql",
        "text/plain",
        q.as_bytes(),
        &headers,
    )
}

fn code(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or("").to_string()
}

const TABLE: &str = r#"{"name": "NAME", "columns": [
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "v", "type": "string", "nullable": true}], "primary_key": ["id"]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_scope_every_endpoint_by_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let entry = |name: &str, sha: &str, ns: &str, scope: &str| {
        format!(
            "[[keys]]\nname = \"{name}\"\nsha256 = \"{sha}\"\nnamespace = \"{ns}\"\nscope = \"{scope}\"\n\n"
        )
    };
    std::fs::write(
        &keys,
        [
            entry("root", ROOT.1, "*", "admin"),
            entry("sales-writer", SALES_WRITER.1, "sales", "write"),
            entry("sales-reader", SALES_READER.1, "sales", "read"),
            entry("hr-admin", HR_ADMIN.1, "hr", "admin"),
        ]
        .concat(),
    )
    .unwrap();
    let s = start_with(
        dir.path().join("data").as_path(),
        &["--auth-keys", keys.to_str().unwrap()],
    );
    let (root, writer, reader, hr) = (
        Some(ROOT.0),
        Some(SALES_WRITER.0),
        Some(SALES_READER.0),
        Some(HR_ADMIN.0),
    );

    // Probes need no key.
    assert_eq!(call(&s, None, "GET", "/health", "").0, 200);
    assert_eq!(call(&s, None, "GET", "/ready", "").0, 200);

    // No key or an unknown one: 401, on the data API and on SQL.
    for key in [None, Some("not-a-key")] {
        let (st, body) = call(&s, key, "GET", "/v1/tables", "");
        assert_eq!(
            (st, code(&body).as_str()),
            (401, "unauthenticated"),
            "{body}"
        );
        let (st, body) = sql(&s, key, "SELECT 1");
        assert_eq!(
            (st, code(&body).as_str()),
            (401, "unauthenticated"),
            "{body}"
        );
    }

    // Creating tables needs admin on the table's namespace.
    let sales_orders = TABLE.replace("NAME", "sales.orders");
    let hr_people = TABLE.replace("NAME", "hr.people");
    for key in [writer, reader, hr] {
        let (st, body) = call(&s, key, "POST", "/v1/tables", &sales_orders);
        assert_eq!((st, code(&body).as_str()), (403, "forbidden"), "{body}");
    }
    assert_eq!(call(&s, root, "POST", "/v1/tables", &sales_orders).0, 201);
    assert_eq!(call(&s, hr, "POST", "/v1/tables", &hr_people).0, 201);

    // Writes need write scope; a refused write changes nothing.
    let rows = r#"[{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]"#;
    let (st, body) = call(&s, reader, "POST", "/v1/tables/sales.orders/rows", rows);
    assert_eq!((st, code(&body).as_str()), (403, "forbidden"), "{body}");
    let (st, body) = call(&s, reader, "GET", "/v1/tables/sales.orders/rows", "");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains(r#""rows":[]"#), "{body}");
    let (st, body) = call(&s, writer, "POST", "/v1/tables/sales.orders/rows", rows);
    assert_eq!(st, 200, "{body}");
    let (st, body) = call(
        &s,
        hr,
        "POST",
        "/v1/tables/hr.people/rows",
        r#"[{"id": 7, "v": "secret"}]"#,
    );
    assert_eq!(st, 200, "{body}");

    // Reads within the namespace work; other namespaces are refused before the table is
    // looked up (403 for an existing table and a missing one alike).
    let (st, body) = call(&s, reader, "GET", "/v1/tables/sales.orders/rows", "");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains(r#""v":"b""#), "{body}");
    for path in [
        "/v1/tables/hr.people/rows",
        "/v1/tables/hr.people",
        "/v1/tables/hr.people/rows/get?key=7",
        "/v1/tables/hr.missing",
    ] {
        let (st, body) = call(&s, reader, "GET", path, "");
        assert_eq!(
            (st, code(&body).as_str()),
            (403, "forbidden"),
            "{path}: {body}"
        );
        assert!(!body.contains("secret"), "{body}");
    }
    let (st, body) = call(&s, reader, "GET", "/v1/tables", "");
    assert_eq!(st, 200);
    assert!(
        body.contains("sales.orders") && !body.contains("hr."),
        "{body}"
    );
    let (_, body) = call(&s, root, "GET", "/v1/tables", "");
    assert!(
        body.contains("sales.orders") && body.contains("hr.people"),
        "{body}"
    );

    // SQL: namespaces are schemas; other namespaces do not exist for the key.
    let (st, body) = sql(&s, reader, "SELECT id, v FROM sales.orders ORDER BY id");
    assert_eq!(st, 200, "{body}");
    assert_eq!(body.trim(), r#"[{"id":1,"v":"a"},{"id":2,"v":"b"}]"#);
    for q in [
        "SELECT * FROM hr.people",
        "SELECT * FROM as_of('hr.people', 1)",
        "SELECT o.id FROM sales.orders o JOIN hr.people p ON o.id = p.id",
    ] {
        let (st, body) = sql(&s, reader, q);
        assert_ne!(st, 200, "{q}: {body}");
        assert!(!body.contains("secret"), "{q}: {body}");
    }
    let (st, body) = sql(
        &s,
        reader,
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema <> 'information_schema'",
    );
    assert_eq!(st, 200, "{body}");
    assert!(
        body.contains("orders") && !body.contains("people"),
        "{body}"
    );
    // Writes and DDL through SQL need write and admin.
    let (st, body) = sql(&s, reader, "INSERT INTO sales.orders VALUES (3, 'c')");
    assert_eq!((st, code(&body).as_str()), (403, "forbidden"), "{body}");
    let (st, body) = sql(&s, writer, "INSERT INTO sales.orders VALUES (3, 'c')");
    assert_eq!(st, 200, "{body}");
    let (st, body) = sql(
        &s,
        writer,
        "CREATE TABLE sales.more (k BIGINT, PRIMARY KEY (k))",
    );
    assert_eq!((st, code(&body).as_str()), (403, "forbidden"), "{body}");
    let (st, body) = sql(&s, hr, "DROP TABLE sales.orders");
    assert_eq!((st, code(&body).as_str()), (403, "forbidden"), "{body}");
    let (st, body) = sql(
        &s,
        root,
        "CREATE TABLE sales.more (k BIGINT, PRIMARY KEY (k))",
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = sql(&s, reader, "SELECT count(*) AS n FROM sales.orders");
    assert_eq!((st, body.trim()), (200, r#"[{"n":3}]"#));

    // Operator endpoints need admin: on the table's namespace, or on every namespace for
    // the bucket-wide job list; bulk ingest (Flight SQL) needs write like any write.
    let (st, body) = call(&s, writer, "GET", "/v1/admin/tables/sales.orders", "");
    assert_eq!((st, code(&body)), (403, "forbidden".to_string()), "{body}");
    let (st, body) = call(&s, hr, "GET", "/v1/admin/tables/sales.orders", "");
    assert_eq!((st, code(&body)), (403, "forbidden".to_string()), "{body}");
    let (st, body) = call(
        &s,
        hr,
        "POST",
        "/v1/admin/tables/sales.orders/gc?dry_run=true",
        "",
    );
    assert_eq!((st, code(&body)), (403, "forbidden".to_string()), "{body}");
    let (st, body) = call(&s, root, "GET", "/v1/admin/tables/sales.orders", "");
    assert_eq!(st, 200, "{body}");
    let (st, body) = call(&s, hr, "GET", "/v1/admin/jobs", "");
    assert_eq!((st, code(&body)), (403, "forbidden".to_string()), "{body}");
    assert_eq!(call(&s, root, "GET", "/v1/admin/jobs", "").0, 200);

    // Metrics name every table: they need a key for every namespace.
    assert_eq!(call(&s, None, "GET", "/metrics", "").0, 401);
    assert_eq!(call(&s, reader, "GET", "/metrics", "").0, 403);
    let (st, text) = call(&s, root, "GET", "/metrics", "");
    assert_eq!(st, 200, "{text}");
    assert!(
        text.contains(r#"strata_http_requests_total{op="POST /v1/tables",status="403"} 3"#),
        "{text}"
    );

    // Arrow Flight SQL: the same key in `authorization` metadata.
    let e = flight_sql(&s.flight, None, "SELECT 1").await.unwrap_err();
    assert!(e.contains("nauthenticated"), "{e}");
    let text = flight_sql(&s.flight, reader, "SELECT sum(id) AS s FROM sales.orders")
        .await
        .unwrap();
    assert!(text.contains("| 6 |"), "{text}");
    let e = flight_sql(&s.flight, reader, "SELECT * FROM hr.people")
        .await
        .unwrap_err();
    assert!(!e.contains("secret"), "{e}");

    // `strata sql` passes its key the same way.
    let cli = |key: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
        c.args(["sql", "--flight", &s.flight, "--format", "csv"]);
        c.env_remove("STRATA_API_KEY");
        if let Some(k) = key {
            c.args(["--key", k]);
        }
        c.arg("SELECT count(*) AS n FROM sales.orders")
            .output()
            .unwrap()
    };
    let out = cli(reader);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n3\n");
    let out = cli(None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unauthenticated"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_bad_keys_file_stops_the_server_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    std::fs::write(
        &keys,
        "[[keys]]\nname = \"x\"\nsha256 = \"abc\"\nnamespace = \"a\"\nscope = \"read\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("serve")
        .arg("--dir")
        .arg(dir.path().join("data"))
        .args(["--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"])
        .arg("--auth-keys")
        .arg(&keys)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("keys[0] (x).sha256"), "{err}");
}
