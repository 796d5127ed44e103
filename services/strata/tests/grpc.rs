//! The gRPC data API of `strata serve` (same port as Flight SQL), with a tonic client
//! generated from the checked-in `.proto`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod pb {
    tonic::include_proto!("strata.v1");
}

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use common::{flight_sql, start};
use pb::data_client::DataClient;

fn ipc(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

fn rows(bytes: &[u8]) -> Vec<RecordBatch> {
    arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn players(ids: &[i64], names: &[&str], scores: &[f64]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ])),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(names.to_vec())),
            Arc::new(Float64Array::from(scores.to_vec())),
        ],
    )
    .unwrap()
}

fn write(table: &str, kind: pb::WriteKind, batch: &RecordBatch) -> pb::WriteRequest {
    pb::WriteRequest {
        table: table.into(),
        kind: kind as i32,
        arrow_ipc: ipc(batch),
        durability: pb::Durability::Remote as i32,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = DataClient::connect(format!("http://{}", server.flight))
        .await
        .unwrap();
    let col = |name: &str, t: &str, nullable: bool| pb::Column {
        name: name.into(),
        r#type: t.into(),
        nullable,
    };

    // Tables.
    let info = c
        .create_table(pb::CreateTableRequest {
            name: "players".into(),
            columns: vec![
                col("id", "int64", false),
                col("name", "string", true),
                col("score", "float64", true),
            ],
            primary_key: vec!["id".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.primary_key, vec!["id".to_string()]);
    let e = c
        .create_table(pb::CreateTableRequest {
            name: "bad".into(),
            columns: vec![col("id", "int128", false)],
            primary_key: vec!["id".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("columns[0].type"), "{e}");
    let e = c
        .create_table(pb::CreateTableRequest {
            name: "players".into(),
            columns: vec![col("id", "int64", false)],
            primary_key: vec!["id".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e}");
    let list = c
        .list_tables(pb::ListTablesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.tables, vec!["players".to_string()]);
    let d = c
        .describe_table(pb::TableRef {
            name: "players".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.columns[2].r#type, "float64");
    let e = c
        .describe_table(pb::TableRef {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // One write, then a stream of them.
    let r = c
        .write(write(
            "players",
            pb::WriteKind::Upsert,
            &players(&[1, 2, 3], &["ada", "grace", "edsger"], &[9.5, 8.0, 7.25]),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.rows, r.writes), (3, 1));
    let mut msgs: Vec<pb::WriteRequest> = (0..5)
        .map(|i| {
            let ids: Vec<i64> = (100 + i * 10..110 + i * 10).collect();
            let names: Vec<String> = ids.iter().map(|i| format!("p{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            write(
                "players",
                pb::WriteKind::Upsert,
                &players(&ids, &names, &[1.0; 10]),
            )
        })
        .collect();
    // A partial update and a delete in the same stream.
    let update = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("score", DataType::Float64, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![2])) as ArrayRef,
            Arc::new(Float64Array::from(vec![9.75])),
        ],
    )
    .unwrap();
    msgs.push(write("players", pb::WriteKind::Update, &update));
    let keys = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![3])) as ArrayRef],
    )
    .unwrap();
    msgs.push(write("players", pb::WriteKind::Delete, &keys));
    // One of them acknowledged once on the node's disk (`local` durability).
    msgs[1].durability = pb::Durability::Local as i32;
    let r = c
        .write_stream(futures::stream::iter(msgs))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.rows, r.writes), (52, 7));
    // A durability this server does not know is refused, nothing written.
    let mut bad = write(
        "players",
        pb::WriteKind::Upsert,
        &players(&[4], &["x"], &[1.0]),
    );
    bad.durability = 7;
    let e = c.write(bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert!(e.message().contains("durability"), "{e}");

    // Point reads with a projection.
    let got = c
        .get(pb::GetRequest {
            table: "players".into(),
            key: vec!["2".into()],
            columns: vec!["name".into(), "score".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let b = &rows(&got.arrow_ipc)[0];
    assert_eq!(b.num_columns(), 2);
    assert_eq!(b.column(0).as_string::<i32>().value(0), "grace");
    assert_eq!(
        b.column(1)
            .as_primitive::<arrow::datatypes::Float64Type>()
            .value(0),
        9.75
    );
    let e = c
        .get(pb::GetRequest {
            table: "players".into(),
            key: vec!["3".into()],
            columns: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "deleted: {e}");
    let e = c
        .get(pb::GetRequest {
            table: "players".into(),
            key: vec!["two".into()],
            columns: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");

    // A key-range scan streamed back.
    let mut scan = c
        .scan(pb::ScanRequest {
            table: "players".into(),
            start: vec!["100".into()],
            end: vec!["130".into()],
            limit: 0,
            columns: vec!["id".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    while let Some(m) = scan.message().await.unwrap() {
        for b in rows(&m.arrow_ipc) {
            ids.extend(
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .iter()
                    .copied(),
            );
        }
    }
    assert_eq!(ids, (100..130).collect::<Vec<i64>>());

    // A scan larger than a message is read page by page at one snapshot: every row once,
    // in key order, with and without a limit; rows written meanwhile are not seen.
    c.create_table(pb::CreateTableRequest {
        name: "big".into(),
        columns: vec![col("id", "int64", false), col("name", "string", true)],
        primary_key: vec!["id".into()],
    })
    .await
    .unwrap();
    let n = 20_000i64;
    let big_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let big = |ids: std::ops::Range<i64>| {
        RecordBatch::try_new(
            big_schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids.clone().collect::<Vec<_>>())) as ArrayRef,
                Arc::new(StringArray::from(
                    ids.map(|i| format!("n{i}")).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    };
    c.write(write("big", pb::WriteKind::Upsert, &big(0..n)))
        .await
        .unwrap();
    for (limit, want) in [(0u64, n), (10_000, 10_000), (8192, 8192), (8193, 8193)] {
        let mut scan = c
            .scan(pb::ScanRequest {
                table: "big".into(),
                start: vec![],
                end: vec![],
                limit,
                columns: vec!["name".into()],
            })
            .await
            .unwrap()
            .into_inner();
        let mut names = Vec::new();
        let mut messages = 0;
        while let Some(m) = scan.message().await.unwrap() {
            messages += 1;
            if messages == 1 && limit == 0 {
                // Written after the scan started: not in it.
                c.write(write("big", pb::WriteKind::Upsert, &big(n..n + 10)))
                    .await
                    .unwrap();
            }
            for b in rows(&m.arrow_ipc) {
                assert_eq!(b.num_columns(), 1);
                names.extend(
                    b.column(0)
                        .as_string::<i32>()
                        .iter()
                        .map(|v| v.unwrap().to_string()),
                );
            }
        }
        let expected: Vec<String> = (0..want).map(|i| format!("n{i}")).collect();
        assert_eq!(names.len(), expected.len(), "limit {limit}");
        assert!(names == expected, "limit {limit}: rows differ");
        assert!(messages >= (want as usize).div_ceil(8192), "limit {limit}");
    }

    // A bad message stops a stream; what came before it stays written.
    let bad = pb::WriteRequest {
        table: "players".into(),
        kind: pb::WriteKind::Upsert as i32,
        arrow_ipc: b"not arrow".to_vec(),
        durability: pb::Durability::Remote as i32,
    };
    let e = c
        .write_stream(futures::stream::iter(vec![
            write(
                "players",
                pb::WriteKind::Upsert,
                &players(&[7], &["x"], &[1.0]),
            ),
            bad,
        ]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("write 2 of the stream") && e.message().contains("1 writes"),
        "{e}"
    );

    // Flight SQL still answers on the same port and sees the same rows.
    let text = flight_sql(&server.flight, None, "SELECT count(*) AS n FROM players")
        .await
        .unwrap();
    assert!(text.contains("| 53 |"), "{text}");
    let r = c
        .drop_table(pb::TableRef {
            name: "players".into(),
        })
        .await
        .unwrap();
    drop(r);
    let list = c
        .list_tables(pb::ListTablesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.tables, vec!["big".to_string()]);

    // Every call is counted by method and status code (NotFound = 5), Flight SQL's too.
    let (st, text) = common::request(&server.http, "GET", "/metrics", "");
    assert_eq!(st, 200);
    for line in [
        r#"strata_grpc_requests_total{op="/strata.v1.Data/Write",code="0"}"#,
        r#"strata_grpc_requests_total{op="/strata.v1.Data/Get",code="5"}"#,
        r#"strata_grpc_request_seconds_count{op="/strata.v1.Data/Scan"}"#,
        r#"strata_grpc_requests_total{op="/arrow.flight.protocol.FlightService/GetFlightInfo",code="0"}"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

/// Object-store requests under `catalog/` so far, from the server's `/metrics`: (HEADs,
/// every other kind).
fn catalog_requests(http: &str) -> (u64, u64) {
    let (st, body) = common::request(http, "GET", "/metrics", "");
    assert_eq!(st, 200);
    let mut out = (0, 0);
    for l in body.lines().filter(|l| {
        l.starts_with("strata_object_store_requests_total{") && l.contains(r#"prefix="catalog""#)
    }) {
        let n = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        if l.contains(r#"op="head""#) {
            out.0 += n;
        } else {
            out.1 += n;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_point_gets_and_writes_make_no_catalog_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let h = server.http.clone();
    let def = r#"{"name": "players", "columns": [
        {"name": "id", "type": "int64", "nullable": false},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "float64"}], "primary_key": ["id"]}"#;
    let (st, body) = common::request(&h, "POST", "/v1/tables", def);
    assert_eq!(st, 201, "{body}");
    let mut c = DataClient::connect(format!("http://{}", server.flight))
        .await
        .unwrap();
    // Warm: the first write opens the table.
    let row = |i: i64| format!(r#"[{{"id": {i}, "name": "p{i}", "score": 1.5}}]"#);
    let (st, body) = common::request(&h, "POST", "/v1/tables/players/rows", &row(0));
    assert_eq!(st, 200, "{body}");

    let before = catalog_requests(&h);
    assert!(
        before.1 > 0,
        "creating the table read and wrote the catalog"
    );
    let started = std::time::Instant::now();
    for i in 1..=50i64 {
        let (st, body) = common::request(&h, "POST", "/v1/tables/players/rows", &row(i));
        assert_eq!(st, 200, "{body}");
        let (st, body) = common::request(
            &h,
            "GET",
            &format!("/v1/tables/players/rows/get?key={i}"),
            "",
        );
        assert_eq!(st, 200, "{body}");
        c.write(write(
            "players",
            pb::WriteKind::Upsert,
            &players(&[1000 + i], &["g"], &[2.0]),
        ))
        .await
        .unwrap();
        let got = c
            .get(pb::GetRequest {
                table: "players".into(),
                key: vec![(1000 + i).to_string()],
                columns: vec![],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(rows(&got.arrow_ipc)[0].num_rows(), 1);
    }
    // No LIST or GET of the catalog; at most one HEAD (the version check) per
    // `catalog_refresh_ms` (1 s) of the loop, whatever the number of requests.
    let after = catalog_requests(&h);
    let seconds = started.elapsed().as_secs();
    assert_eq!(
        after.1, before.1,
        "warm point gets and writes over HTTP and gRPC must not read the catalog from the bucket"
    );
    assert!(
        after.0 - before.0 <= seconds + 1,
        "{} version checks in {seconds} s",
        after.0 - before.0
    );
}

/// The data service takes messages as large as `query.message_bytes_max` (tonic's own
/// default is 4 MiB): a 6 MB write goes through, one over the limit is refused with a
/// message naming the size and the limit, and the server goes on answering.
#[tokio::test(flavor = "multi_thread")]
async fn writes_larger_than_grpcs_default_message_size() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 8 << 20;
    let server = common::start_with(
        dir.path(),
        &["--set", &format!("query.message_bytes_max={limit}")],
    );
    let mut c = DataClient::connect(format!("http://{}", server.flight))
        .await
        .unwrap();
    c.create_table(pb::CreateTableRequest {
        name: "wide".into(),
        columns: vec![
            pb::Column {
                name: "id".into(),
                r#type: "int64".into(),
                nullable: false,
            },
            pb::Column {
                name: "body".into(),
                r#type: "string".into(),
                nullable: true,
            },
        ],
        primary_key: vec!["id".into()],
    })
    .await
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("body", DataType::Utf8, true),
    ]));
    let batch = |rows: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>())) as ArrayRef,
                Arc::new(StringArray::from(
                    (0..rows).map(|i| format!("{i:0>120}")).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    };

    // 50,000 rows, about 6.4 MB of Arrow IPC: over 4 MiB, under the limit.
    let fits = write("wide", pb::WriteKind::Upsert, &batch(50_000));
    assert!(fits.arrow_ipc.len() > 6_000_000, "{}", fits.arrow_ipc.len());
    c.write(fits).await.unwrap();

    // Over the limit: refused, with the sizes in the message.
    let too_big = write("wide", pb::WriteKind::Upsert, &batch(70_000));
    assert!(too_big.arrow_ipc.len() > limit);
    let e = c.write(too_big).await.unwrap_err();
    assert!(
        e.message().contains("too large") && e.message().contains(&limit.to_string()),
        "{e:?}"
    );

    // The server answers on: the first write is whole, the refused one left nothing.
    let (status, body) = common::request_as(
        &server.http,
        "POST",
        "/sql",
        "text/plain",
        b"SELECT count(*) AS n FROM wide",
    );
    assert_eq!((status, body.as_str()), (200, r#"[{"n":50000}]"#));
}
