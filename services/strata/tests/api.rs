//! The data API of `strata serve` (`/v1`): tables and rows over HTTP with the real binary,
//! success and error paths, and rows still there after a kill and restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use common::{request, request_as, start};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[test]
fn tables_and_rows_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let h = server.http.clone();

    // Tables.
    let def = r#"{"name": "users", "columns": [
        {"name": "id", "type": "int64", "nullable": false},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "float64"},
        {"name": "born", "type": "date"}], "primary_key": ["id"]}"#;
    let (st, body) = request(&h, "POST", "/v1/tables", def);
    assert_eq!(st, 201, "{body}");
    assert_eq!(json(&body)["primary_key"], serde_json::json!(["id"]));
    let (st, body) = request(&h, "POST", "/v1/tables", def);
    assert_eq!(st, 409, "{body}");
    assert_eq!(json(&body)["error"]["code"], "already_exists");
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables",
        r#"{"name": "x", "columns": [{"name": "id", "type": "int128"}], "primary_key": ["id"]}"#,
    );
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("columns[0].type"), "{body}");
    let (st, body) = request(&h, "GET", "/v1/tables", "");
    assert_eq!(
        (st, json(&body)),
        (200, serde_json::json!({"tables": ["users"]}))
    );
    let (st, body) = request(&h, "GET", "/v1/tables/users", "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body)["columns"][3]["type"], "date");
    let (st, body) = request(&h, "GET", "/v1/tables/nope", "");
    assert_eq!(st, 404, "{body}");

    // Upserts: JSON array, NDJSON, Arrow IPC.
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables/users/rows",
        r#"[{"id": 1, "name": "ada", "score": 9.5, "born": "1815-12-10"}, {"id": 2, "name": "grace", "score": 8}]"#,
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body)["rows"], 2);
    let (st, body) = request_as(
        &h,
        "POST",
        "/v1/tables/users/rows",
        "application/x-ndjson",
        b"{\"id\": 3, \"name\": \"edsger\"}\n{\"id\": 4, \"name\": \"barbara\", \"score\": 7}\n",
    );
    assert_eq!(st, 200, "{body}");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![5, 6])),
            Arc::new(StringArray::from(vec!["ken", "dennis"])),
        ],
    )
    .unwrap();
    let mut ipc = Vec::new();
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
    }
    let (st, body) = request_as(
        &h,
        "PATCH",
        "/v1/tables/users/rows",
        "application/vnd.apache.arrow.stream",
        &ipc,
    );
    assert_eq!(st, 200, "{body}");

    // Durability per request: `local` acknowledges once on this node's disk; anything but
    // `local` or `remote` is refused before anything is written.
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables/users/rows?durability=local",
        r#"[{"id": 9, "name": "local"}]"#,
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows/get?key=9", "");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("local"), "{body}");
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables/users/delete?durability=eventually",
        r#"[{"id": 9}]"#,
    );
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("durability"), "{body}");
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows/get?key=9", "");
    assert_eq!(st, 200, "the refused delete changed nothing: {body}");
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables/users/delete?durability=remote",
        r#"[{"id": 9}]"#,
    );
    assert_eq!(st, 200, "{body}");

    // Bad input: the field path, and nothing written.
    for (rows, path) in [
        (
            r#"[{"id": 7, "name": "x"}, {"id": 8, "score": "high"}]"#,
            "rows[1].score",
        ),
        (r#"[{"id": 7, "nmae": "x"}]"#, "rows[0].nmae"),
        (r#"[{"name": "no key"}]"#, "rows[0].id"),
        (r#"[{"id": 7, "born": "not a date"}]"#, "rows[0].born"),
        (r#"{"id": 7}"#, "expected a JSON array"),
        (r#"[{"id": 7"#, "rows:"),
    ] {
        let (st, body) = request(&h, "POST", "/v1/tables/users/rows", rows);
        assert_eq!(st, 400, "{rows}: {body}");
        assert_eq!(json(&body)["error"]["code"], "invalid", "{body}");
        assert!(body.contains(path), "{rows}: {body}");
    }
    let (st, body) = request_as(&h, "POST", "/v1/tables/users/rows", "text/csv", b"id\n1\n");
    assert_eq!(st, 415, "{body}");
    let (st, body) = request_as(
        &h,
        "POST",
        "/v1/tables/users/rows",
        "application/vnd.apache.arrow.stream",
        b"garbage",
    );
    assert_eq!(st, 400, "{body}");
    let (st, body) = request(&h, "POST", "/v1/tables/nope/rows", "[]");
    assert_eq!(st, 404, "{body}");

    // Partial updates (rows changing different columns in one request) and deletes.
    let (st, body) = request(
        &h,
        "PATCH",
        "/v1/tables/users/rows",
        r#"[{"id": 2, "score": 8.5}, {"id": 3, "name": "dijkstra"}]"#,
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = request(&h, "POST", "/v1/tables/users/delete", r#"[{"id": 4}]"#);
    assert_eq!(st, 200, "{body}");
    let (st, body) = request(
        &h,
        "POST",
        "/v1/tables/users/delete",
        r#"[{"id": 4, "name": "x"}]"#,
    );
    assert_eq!(st, 400, "{body}");

    // Point reads.
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows/get?key=2", "");
    assert_eq!(
        (st, json(&body)),
        (
            200,
            serde_json::json!({"id": 2, "name": "grace", "score": 8.5})
        )
    );
    let (st, body) = request(
        &h,
        "GET",
        "/v1/tables/users/rows/get?key=1&columns=name,born",
        "",
    );
    assert_eq!(
        (st, json(&body)),
        (
            200,
            serde_json::json!({"name": "ada", "born": "1815-12-10"})
        )
    );
    let (st, _) = request(&h, "GET", "/v1/tables/users/rows/get?key=4", "");
    assert_eq!(st, 404);
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows/get?key=abc", "");
    assert_eq!(st, 400, "{body}");

    // Scans with paging: every live row once, in key order.
    let mut seen = Vec::new();
    let mut path = "/v1/tables/users/rows?limit=2&columns=name".to_string();
    loop {
        let (st, body) = request(&h, "GET", &path, "");
        assert_eq!(st, 200, "{body}");
        let page = json(&body);
        for r in page["rows"].as_array().unwrap() {
            assert_eq!(r.as_object().unwrap().len(), 1, "projection: {r}");
            seen.push(r["name"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(c) => path = format!("/v1/tables/users/rows?limit=2&columns=name&after={c}"),
            None => break,
        }
    }
    assert_eq!(seen, ["ada", "grace", "dijkstra", "ken", "dennis"]);
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows?start=2&end=4", "");
    assert_eq!(st, 200, "{body}");
    assert_eq!(json(&body)["rows"].as_array().unwrap().len(), 2, "{body}");
    let (st, body) = request(&h, "GET", "/v1/tables/users/rows?limit=0", "");
    assert_eq!(st, 400, "{body}");

    // SQL sees the same rows.
    let (st, body) = request_as(
        &h,
        "POST",
        "/sql",
        "text/plain",
        b"SELECT count(*) AS c FROM users",
    );
    assert_eq!((st, body.trim()), (200, r#"[{"c":5}]"#));
    // A table created but never written reads as empty, not as an error; creating it
    // again is a conflict, not an internal error.
    let create = b"CREATE TABLE fresh (id BIGINT, v VARCHAR, PRIMARY KEY (id))";
    let (st, body) = request_as(&h, "POST", "/sql", "text/plain", create);
    assert_eq!(st, 200, "{body}");
    let (st, body) = request_as(&h, "POST", "/sql", "text/plain", b"SELECT * FROM fresh");
    assert_eq!((st, body.trim()), (200, "[]"));
    let (st, body) = request_as(&h, "POST", "/sql", "text/plain", create);
    assert_eq!(
        (st, json(&body)["error"]["code"].clone()),
        (409, "already_exists".into())
    );

    // Kill -9 and restart: acknowledged writes are there.
    drop(server);
    let server = start(dir.path());
    let (st, body) = request(&server.http, "GET", "/v1/tables/users/rows/get?key=3", "");
    assert_eq!(
        (st, json(&body)["name"].clone()),
        (200, serde_json::json!("dijkstra"))
    );

    // Drop.
    let (st, _) = request(&server.http, "DELETE", "/v1/tables/users", "");
    assert_eq!(st, 204);
    let (st, _) = request(&server.http, "GET", "/v1/tables/users", "");
    assert_eq!(st, 404);
}

/// The OpenAPI document is served, is the checked-in file, and every operation it lists
/// is a route of the server (not axum's bare 404 or 405), so the two cannot drift apart
/// silently; every route the server has is in the document.
#[test]
fn openapi_document_matches_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let (status, body) = request(&s.http, "GET", "/openapi.json", "");
    assert_eq!(status, 200);
    let served = json(&body);
    let file = json(include_str!("../../../docs/openapi.json"));
    assert_eq!(served, file);
    let mut ops = Vec::new();
    for (path, item) in file["paths"].as_object().unwrap() {
        for method in ["get", "post", "patch", "delete", "put"] {
            if item.get(method).is_some() {
                ops.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    ops.sort();
    let mut want = vec![
        "GET /health",
        "GET /ready",
        "GET /metrics",
        "GET /openapi.json",
        "POST /sql",
        "GET /v1/tables",
        "POST /v1/tables",
        "GET /v1/tables/{table}",
        "DELETE /v1/tables/{table}",
        "POST /v1/tables/{table}/rows",
        "PATCH /v1/tables/{table}/rows",
        "GET /v1/tables/{table}/rows",
        "GET /v1/tables/{table}/rows/get",
        "POST /v1/tables/{table}/delete",
        "GET /v1/admin/tables/{table}",
        "POST /v1/admin/tables/{table}/gc",
        "GET /v1/admin/jobs",
    ];
    want.sort();
    assert_eq!(ops, want);
    for op in &ops {
        let (method, path) = op.split_once(' ').unwrap();
        let path = path.replace("{table}", "no_such_table");
        let (status, body) = request(&s.http, method, &path, "[]");
        assert_ne!(status, 405, "{op}: method not routed");
        if status == 404 {
            assert_eq!(json(&body)["error"]["code"], "not_found", "{op}: {body}");
        }
    }
    // And a route that is not in the document is not served.
    assert_eq!(request(&s.http, "PUT", "/v1/tables", "[]").0, 405);
}
