//! Multi-node: two ingest nodes, two compactors and a query service share one LocalStack
//! bucket. Shards are owned through leases, requests for the other node's shards are
//! forwarded, and when an ingest node is killed mid-load the survivor takes its shards over
//! after the lease lapses, with every acknowledged write intact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, request, start_role, try_request_with};

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// The node owning table `t`'s shard, asked through `via` (forwarded to the owner).
fn owner(via: &str, t: &str) -> Option<String> {
    let (st, body) = try_request_with(
        via,
        "GET",
        &format!("/v1/admin/tables/{t}"),
        "application/json",
        b"",
        &[],
    )
    .ok()?;
    if st != 200 {
        return None;
    }
    json(&body)["shards"][0]["lease"]["owner"]
        .as_str()
        .map(str::to_string)
}

const ROWS_PER_BATCH: i64 = 200;
const ROUNDS: i64 = 12;

fn batch(round: i64) -> String {
    (round * ROWS_PER_BATCH..(round + 1) * ROWS_PER_BATCH)
        .map(|i| format!("{{\"id\": {i}, \"v\": {}}}\n", i * 3))
        .collect()
}

#[test]
fn ingest_nodes_share_shards_and_survive_a_killed_node() {
    let Ok(endpoint) = std::env::var("STRATA_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("STRATA_REQUIRE_S3").is_err(),
            "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
        );
        eprintln!("skipping: STRATA_TEST_S3_ENDPOINT unset (run ci/test.sh)");
        return;
    };
    let bucket = std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into());
    let tmp = tempfile::tempdir().unwrap();
    let prefix = format!(
        "test-cluster-{}-{}",
        std::process::id(),
        strata_common::clock::system().now_ms()
    );
    let store: Vec<String> = [
        "store.kind=s3".to_string(),
        format!("store.bucket={bucket}"),
        format!("store.endpoint={endpoint}"),
        "store.region=us-east-1".to_string(),
        format!("engine.root_prefix={prefix}"),
        "engine.jobs.poll_ms=50".to_string(),
        "engine.jobs.idle_poll_max_ms=500".to_string(),
    ]
    .into_iter()
    .flat_map(|s| ["--set".to_string(), s])
    .collect();
    let ingest = |name: &str| -> Server {
        let mut args: Vec<String> = store.clone();
        for s in [
            format!("cluster.node={name}"),
            "cluster.lease_ms=3000".into(),
            "cluster.renew_ms=500".into(),
            "engine.memtable_bytes_max=16384".into(),
        ] {
            args.extend(["--set".to_string(), s]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        start_role("ingest", &tmp.path().join(name), &args)
    };
    let a = ingest("node-a");
    let b = ingest("node-b");
    let mut compactors = Vec::new();
    for name in ["worker-1", "worker-2"] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("compactor")
            .arg("--dir")
            .arg(tmp.path().join(name))
            .args(&store)
            .args(["--set", &format!("compactor.name={name}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let line = BufReader::new(c.stdout.take().unwrap())
            .lines()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(line, format!("compactor {name} running"));
        compactors.push(Process(c));
    }
    let store_args: Vec<&str> = store.iter().map(String::as_str).collect();
    let query = start_role("query", &tmp.path().join("query"), &store_args);
    // Both nodes have published their liveness records.
    std::thread::sleep(Duration::from_millis(1500));

    // Tables until each node owns at least one (rendezvous hashing spreads them).
    let nodes = [("node-a", &a), ("node-b", &b)];
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..20 {
        let t = format!("t{i}");
        let (st, body) = request(
            &a.http,
            "POST",
            "/v1/tables",
            &format!(
                r#"{{"name": "{t}", "columns": [{{"name": "id", "type": "int64", "nullable": false}}, {{"name": "v", "type": "int64"}}], "primary_key": ["id"]}}"#
            ),
        );
        assert_eq!(st, 201, "{body}");
        // The preferred node claims it within a round or two.
        let deadline = Instant::now() + Duration::from_secs(10);
        let o = loop {
            if let Some(o) = owner(&a.http, &t) {
                break o;
            }
            assert!(Instant::now() < deadline, "nobody claimed {t}");
            std::thread::sleep(Duration::from_millis(200));
        };
        owners.insert(t, o);
        let distinct: std::collections::BTreeSet<&String> = owners.values().collect();
        if owners.len() >= 4 && distinct.len() == 2 {
            break;
        }
    }
    let distinct: std::collections::BTreeSet<&String> = owners.values().collect();
    assert_eq!(distinct.len(), 2, "one node owns every table: {owners:?}");
    // Each node answers for every table: its own directly, the other's forwarded.
    for (t, o) in &owners {
        for (name, n) in nodes {
            let (st, body) = request(&n.http, "GET", &format!("/v1/admin/tables/{t}"), "");
            assert_eq!(st, 200, "{body}");
            assert_eq!(
                json(&body)["shards"][0]["lease"]["owner"],
                o.as_str(),
                "{name}"
            );
        }
    }

    // SQL writes are forwarded too: an INSERT through the node that does not own the table.
    let (first, first_owner) = owners.iter().next().unwrap();
    let (_, other) = nodes.iter().find(|(name, _)| name != first_owner).unwrap();
    let (st, body) = request(
        &other.http,
        "POST",
        "/sql",
        &format!(r#"{{"sql": "INSERT INTO {first} VALUES (999999, 0)"}}"#),
    );
    assert_eq!(st, 200, "{body}");
    // And over Flight SQL (ADBC's and JDBC's writes): sent with GetFlightInfo, an INSERT
    // into the other node's table runs there, once, and answers its count.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counted = rt
        .block_on(common::flight_sql(
            &other.flight,
            None,
            &format!("INSERT INTO {first} VALUES (999998, 0)"),
        ))
        .unwrap();
    assert!(counted.contains("| 1 "), "{counted}");
    let found = rt
        .block_on(common::flight_sql(
            &query.flight,
            None,
            &format!("SELECT count(*) AS n FROM {first} WHERE id >= 999998"),
        ))
        .unwrap();
    assert!(found.contains("| 2 "), "{found}");
    // A bulk ingest (ADBC's `adbc_ingest`, `strata load`) through the node that does not own
    // the table is sent on to its owner, and counted.
    let ingested = rt
        .block_on(async {
            use arrow::array::{Int64Array, RecordBatch};
            use arrow::datatypes::{DataType, Field, Schema};
            let schema = std::sync::Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("v", DataType::Int64, true),
            ]));
            let rows = RecordBatch::try_new(
                schema,
                vec![
                    std::sync::Arc::new(Int64Array::from(vec![999_990, 999_991, 999_992])),
                    std::sync::Arc::new(Int64Array::from(vec![1, 2, 3])),
                ],
            )
            .unwrap();
            let channel =
                tonic::transport::Channel::from_shared(format!("http://{}", other.flight))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
            let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new(channel);
            let command = arrow_flight::sql::CommandStatementIngest {
                table: first.clone(),
                ..Default::default()
            };
            client
                .execute_ingest(command, futures::stream::iter([Ok(rows)]))
                .await
        })
        .unwrap();
    assert_eq!(ingested, 3);
    // And an INSERT over the PostgreSQL protocol.
    let mut pg = common::idle_postgres_connection(&other.postgres);
    let (kinds, error) =
        common::postgres_query(&mut pg, &format!("INSERT INTO {first} VALUES (999997, 0)"));
    assert!(error.is_empty() && kinds.contains(&b'C'), "{error:?}");
    let found = rt
        .block_on(common::flight_sql(
            &query.flight,
            None,
            &format!("SELECT count(*) AS n FROM {first} WHERE id >= 999990"),
        ))
        .unwrap();
    assert!(found.contains("| 6 "), "{found}");
    drop(rt);
    let sql_table = first.clone();

    // The victim owns t0; the survivor takes every request (forwarding the victim's).
    let victim_name = owners["t0"].clone();
    let (mut victim, survivor) = if victim_name == "node-a" {
        (Some(a), b)
    } else {
        (Some(b), a)
    };
    let mut killed_at = None;
    let mut stalled = Duration::ZERO;
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            victim = None; // SIGKILL
            killed_at = Some(Instant::now());
        }
        for (ti, t) in owners.keys().enumerate() {
            let body = batch(round);
            // Before the kill, alternate the entry node; after it, only the survivor.
            let first = match &victim {
                Some(v) if (round as usize + ti).is_multiple_of(2) => v.http.clone(),
                _ => survivor.http.clone(),
            };
            let started = Instant::now();
            let deadline = started + Duration::from_secs(60);
            let mut target = first;
            loop {
                match try_request_with(
                    &target,
                    "POST",
                    &format!("/v1/tables/{t}/rows"),
                    "application/x-ndjson",
                    body.as_bytes(),
                    &[],
                ) {
                    Ok((200, _)) => break,
                    Ok((503, _)) | Err(_) => {}
                    Ok((st, body)) => panic!("{t} round {round}: {st} {body}"),
                }
                assert!(
                    Instant::now() < deadline,
                    "{t} round {round}: no node took the write"
                );
                target = survivor.http.clone();
                std::thread::sleep(Duration::from_millis(200));
            }
            stalled = stalled.max(started.elapsed());
        }
    }
    let killed_at = killed_at.unwrap();
    eprintln!(
        "longest write stall {:?} (lease 3 s), load finished {:?} after the kill",
        stalled,
        killed_at.elapsed()
    );

    // The survivor owns every table now; the victim's changed hands.
    for (t, o) in &owners {
        let (st, body) = request(&survivor.http, "GET", &format!("/v1/admin/tables/{t}"), "");
        assert_eq!(st, 200, "{body}");
        let lease = &json(&body)["shards"][0]["lease"];
        assert_ne!(lease["owner"], victim_name.as_str(), "{t}: {body}");
        if *o == victim_name {
            assert!(lease["generation"].as_u64().unwrap() >= 2, "{t}: {lease}");
        }
    }
    // Every acknowledged row, through the query service reading the bucket.
    let n = ROUNDS * ROWS_PER_BATCH;
    let sum: i64 = (0..n).map(|i| i * 3).sum();
    for t in owners.keys() {
        let (st, body) = request(
            &query.http,
            "POST",
            "/sql",
            &format!(r#"{{"sql": "SELECT count(*) AS n, sum(v) AS s FROM {t}"}}"#),
        );
        assert_eq!(st, 200, "{body}");
        let rows = json(&body);
        let row = rows
            .as_array()
            .and_then(|r| r.first())
            .or_else(|| rows["rows"].as_array().and_then(|r| r.first()))
            .unwrap_or_else(|| panic!("{body}"))
            .clone();
        // Plus the rows written through the other node above (SQL over HTTP, Flight SQL
        // and PostgreSQL, all with v = 0; a bulk ingest of three with v = 1, 2, 3).
        let (rows_written, sum) = if *t == sql_table {
            (n + 6, sum + 6)
        } else {
            (n, sum)
        };
        assert_eq!(row["n"].as_i64(), Some(rows_written), "{t}: {body}");
        assert_eq!(row["s"].as_i64(), Some(sum), "{t}: {body}");
    }
    drop(compactors);
}
