//! `strata load`: CSV, NDJSON and Parquet files into tables over Flight SQL bulk ingest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use common::{request, run, start};

fn load(flight: &str, args: &[&str]) -> (bool, String, String) {
    let mut a = vec!["load", "--flight", flight];
    a.extend_from_slice(args);
    run(&a, &[])
}

fn sql(http: &str, q: &str) -> serde_json::Value {
    let (st, body) = request(
        http,
        "POST",
        "/sql",
        &serde_json::json!({"sql": q}).to_string(),
    );
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn csv_ndjson_and_parquet_files_load_into_tables() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let (h, f) = (server.http.clone(), server.flight.clone());
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };

    // A missing table needs --create-key.
    let csv = file(
        "players.csv",
        "score,id,name\n9.5,1,ada\n8,2,\"grace, rear admiral\"\n7.25,3,edsger\n",
    );
    let (ok, _, err) = load(&f, &["--table", "players", &csv]);
    assert!(!ok);
    assert!(err.contains("--create-key"), "{err}");
    let (ok, out, err) = load(&f, &["--table", "players", "--create-key", "id", &csv]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("loaded 3 rows") && out.contains("(created)"),
        "{out}"
    );
    assert_eq!(
        sql(&h, "SELECT id, name, score FROM players ORDER BY id"),
        serde_json::json!([
            {"id": 1, "name": "ada", "score": 9.5},
            {"id": 2, "name": "grace, rear admiral", "score": 8.0},
            {"id": 3, "name": "edsger", "score": 7.25}
        ])
    );

    // NDJSON into the existing table: upserts by key, fields by name, types the table's.
    let nd = file(
        "more.ndjson",
        "{\"id\": 3, \"name\": \"dijkstra\", \"score\": 7.5}\n{\"name\": \"barbara\", \"id\": 4}\n",
    );
    let (ok, out, err) = load(&f, &["--table", "players", &nd]);
    assert!(ok, "{err}");
    assert!(out.starts_with("loaded 2 rows"), "{out}");
    assert_eq!(
        sql(
            &h,
            "SELECT id, name, score FROM players WHERE id >= 3 ORDER BY id"
        ),
        serde_json::json!([
            {"id": 3, "name": "dijkstra", "score": 7.5},
            {"id": 4, "name": "barbara"}
        ])
    );

    // Parquet: columns by name, cast to the table's types (INT32 -> BIGINT), many batches.
    let n = 20_000;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("id", DataType::Int32, false),
        ])),
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("p{i}")),
            )) as ArrayRef,
            Arc::new(Int32Array::from_iter_values(100..100 + n)),
        ],
    )
    .unwrap();
    let pq = dir.path().join("bulk.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&pq).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let (ok, out, err) = load(
        &f,
        &[
            "--table",
            "players",
            "--batch-rows",
            "3000",
            pq.to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with(&format!("loaded {n} rows")), "{out}");
    assert_eq!(
        sql(
            &h,
            "SELECT count(*) AS n, max(name) AS m FROM players WHERE id >= 100"
        ),
        serde_json::json!([{"n": n, "m": "p9999"}])
    );

    // Bad input fails with the place named; nothing of a failing batch is written.
    let bad = file("bad.csv", "id,name,score\n10,x,1\n11,y,lots\n");
    let (ok, _, err) = load(&f, &["--table", "players", &bad]);
    assert!(!ok);
    assert!(err.contains("bad.csv") && err.contains("lots"), "{err}");
    assert_eq!(
        sql(&h, "SELECT count(*) AS n FROM players WHERE id IN (10, 11)"),
        serde_json::json!([{"n": 0}])
    );
    let unknown = file("unknown.csv", "id,nickname\n12,z\n");
    let (ok, _, err) = load(&f, &["--table", "players", &unknown]);
    assert!(!ok);
    assert!(err.contains("nickname"), "{err}");
    let strict = file("strict.ndjson", "{\"id\": 13, \"nickname\": \"z\"}\n");
    let (ok, _, err) = load(&f, &["--table", "players", &strict]);
    assert!(!ok);
    assert!(err.contains("nickname"), "{err}");
    let nokey = file("nokey.ndjson", "{\"name\": \"z\"}\n");
    let (ok, _, err) = load(&f, &["--table", "players", &nokey]);
    assert!(!ok);
    assert!(
        err.contains("nokey.ndjson") && err.contains("\"id\""),
        "{err}"
    );
    let (ok, _, err) = load(&f, &["--table", "players", &file("x.txt", "id\n1\n")]);
    assert!(!ok);
    assert!(err.contains("--format"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn one_flight_message_larger_than_grpc_default_ingests() {
    // ADBC's Flight SQL driver sends a whole batch as one message: 150,000 rows of about 60
    // bytes are 9 MB, over tonic's default limit of 4 MiB.
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("data"));
    let n = 150_000;
    ingest_one_message(&server, n).await.unwrap();
    assert_eq!(
        sql(&server.http, "SELECT count(*) AS n FROM big"),
        serde_json::json!([{"n": n}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_message_limit_is_a_setting() {
    // 50,000 rows (3 MB) in one message: refused under a 1 MB limit, with the size in the
    // error, and nothing written.
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_with(
        &dir.path().join("data"),
        &["--set", "query.message_bytes_max=1000000"],
    );
    let err = ingest_one_message(&server, 50_000).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(
        err.message().contains("message length too large") && err.message().contains("1000000"),
        "{err}"
    );
    assert_eq!(
        sql(&server.http, "SELECT count(*) AS n FROM big"),
        serde_json::json!([{"n": 0}])
    );
}

/// Creates table `big` and bulk-ingests `n` rows into it as one Flight message.
async fn ingest_one_message(server: &common::Server, n: i32) -> Result<(), tonic::Status> {
    use arrow_flight::encode::FlightDataEncoderBuilder;
    use arrow_flight::flight_service_client::FlightServiceClient;
    use arrow_flight::sql::{CommandStatementIngest, ProstMessageExt};
    use arrow_flight::{FlightData, FlightDescriptor};
    use futures::TryStreamExt;
    use prost::Message;

    sql(
        &server.http,
        "CREATE TABLE big (id INT NOT NULL, name VARCHAR, PRIMARY KEY (id))",
    );
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int32Array::from_iter_values(0..n)) as ArrayRef,
            Arc::new(StringArray::from_iter_values((0..n).map(|i| {
                format!("a-rather-long-name-to-fill-the-message-{i:016}")
            }))),
        ],
    )
    .unwrap();
    let cmd = CommandStatementIngest {
        table: "big".into(),
        ..Default::default()
    };
    let data: Vec<FlightData> = FlightDataEncoderBuilder::new()
        .with_max_flight_data_size(usize::MAX)
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(
            cmd.as_any().encode_to_vec(),
        )))
        .build(futures::stream::iter([Ok(batch)]))
        .try_collect()
        .await
        .unwrap();
    let largest = data.iter().map(|d| d.encoded_len()).max().unwrap();
    assert!(largest > (n as usize) * 50, "{largest}");
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.flight))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightServiceClient::new(channel);
    let results: Vec<_> = client
        .do_put(futures::stream::iter(data))
        .await?
        .into_inner()
        .try_collect()
        .await?;
    assert!(!results.is_empty());
    Ok(())
}
