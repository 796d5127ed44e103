//! Flight SQL beyond plain statements, with the arrow-flight client over gRPC: the catalog
//! metadata commands (filtered by the caller's key) and prepared statements with bound
//! parameters (queries and updates, JDBC-style batches).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::FlightInfo;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, ProstMessageExt, SqlInfo,
};
use futures::TryStreamExt;
use sha2::{Digest, Sha256};
use strata_query::auth::{Auth, Authenticator};
use tonic::transport::Channel;

/// A Flight SQL server over a fresh writable database, with two keys: `root` (admin of
/// every namespace) and `sales` (read on namespace `sales` only).
async fn server() -> (String, tempfile::TempDir, strata_engine::Db) {
    let dir = tempfile::tempdir().unwrap();
    let store = common::local_store(&dir.path().join("bucket"));
    let db = common::open(&store, &dir.path().join("nvme"), common::small_config()).await;
    let sha = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let auth = Auth::from_toml(&format!(
        "[[keys]]\nname = \"root\"\nsha256 = \"{}\"\nnamespace = \"*\"\nscope = \"admin\"\n\n\
         [[keys]]\nname = \"sales\"\nsha256 = \"{}\"\nnamespace = \"sales\"\nscope = \"read\"\n",
        sha("root-key"),
        sha("sales-key")
    ))
    .unwrap();
    let q = common::service(&db, true);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(strata_query::flight::serve(
        q,
        Authenticator::with_keys(auth),
        listener,
        std::future::pending(),
    ));
    (format!("http://{addr}"), dir, db)
}

async fn client(addr: &str, key: &str) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(addr.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = FlightSqlServiceClient::new(channel);
    c.set_token(key.to_string());
    c
}

async fn fetch(c: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for e in info.endpoint {
        let batches: Vec<RecordBatch> = c
            .do_get(e.ticket.unwrap())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        out.extend(batches);
    }
    out
}

/// The values of column `name` over `batches`, as strings.
fn column(batches: &[RecordBatch], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let i = b.schema().index_of(name).unwrap();
        let one = RecordBatch::try_new(
            Arc::new(Schema::new(vec![b.schema().field(i).clone()])),
            vec![b.column(i).clone()],
        )
        .unwrap();
        out.extend(common::rows(&[one]).into_iter().map(|r| r[0].clone()));
    }
    out
}

/// GetFlightInfo of a Flight SQL command, as `key`.
async fn info_of(
    c: &mut FlightSqlServiceClient<Channel>,
    key: &str,
    cmd: &impl ProstMessageExt,
) -> Result<FlightInfo, tonic::Status> {
    use prost::Message;
    let mut req = tonic::Request::new(arrow_flight::FlightDescriptor::new_cmd(
        cmd.as_any().encode_to_vec(),
    ));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    c.inner_mut()
        .get_flight_info(req)
        .await
        .map(|r| r.into_inner())
}

async fn run(c: &mut FlightSqlServiceClient<Channel>, sql: &str) {
    c.execute_update(sql.to_string(), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_commands_list_what_the_key_may_read() {
    let (addr, _dir, _db) = server().await;
    let mut root = client(&addr, "root-key").await;
    run(
        &mut root,
        "CREATE TABLE sales.orders (id BIGINT, region VARCHAR, qty INT, PRIMARY KEY (region, id))",
    )
    .await;
    run(
        &mut root,
        "CREATE TABLE hr.people (id BIGINT, name VARCHAR, PRIMARY KEY (id))",
    )
    .await;
    run(
        &mut root,
        "CREATE TABLE notes (id BIGINT, PRIMARY KEY (id))",
    )
    .await;

    // Catalogs: one.
    let info = root.get_catalogs().await.unwrap();
    assert_eq!(
        column(&fetch(&mut root, info).await, "catalog_name"),
        ["strata"]
    );
    // Schemas: the namespaces, all of them for root, only `sales` for its reader.
    let info = root
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    assert_eq!(
        column(&fetch(&mut root, info).await, "db_schema_name"),
        ["hr", "public", "sales"]
    );
    let mut sales = client(&addr, "sales-key").await;
    let info = sales
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    assert_eq!(
        column(&fetch(&mut sales, info).await, "db_schema_name"),
        ["sales"]
    );
    // Tables, with a name pattern, and with their Arrow schemas.
    let info = root
        .get_tables(CommandGetTables {
            table_name_filter_pattern: Some("%o%".into()),
            include_schema: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let tables = fetch(&mut root, info).await;
    assert_eq!(column(&tables, "table_name"), ["people", "notes", "orders"]);
    assert_eq!(column(&tables, "table_type"), ["TABLE", "TABLE", "TABLE"]);
    let schema_bytes = tables[0]
        .column_by_name("table_schema")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::BinaryArray>()
        .unwrap()
        .value(2)
        .to_vec();
    let orders = Schema::try_from(arrow_flight::IpcMessage(schema_bytes.into())).unwrap();
    let names: Vec<&str> = orders.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["id", "region", "qty"]);
    let info = sales.get_tables(CommandGetTables::default()).await.unwrap();
    assert_eq!(
        column(&fetch(&mut sales, info).await, "table_name"),
        ["orders"]
    );
    // Table types.
    let info = root.get_table_types().await.unwrap();
    assert_eq!(
        column(&fetch(&mut root, info).await, "table_type"),
        ["TABLE"]
    );
    // Primary keys in key order; none for a table the key may not read.
    let pk = |schema: &str, table: &str| CommandGetPrimaryKeys {
        catalog: None,
        db_schema: Some(schema.into()),
        table: table.into(),
    };
    let info = root.get_primary_keys(pk("sales", "orders")).await.unwrap();
    let keys = fetch(&mut root, info).await;
    assert_eq!(column(&keys, "column_name"), ["region", "id"]);
    assert_eq!(column(&keys, "key_sequence"), ["1", "2"]);
    let info = sales.get_primary_keys(pk("hr", "people")).await.unwrap();
    assert!(column(&fetch(&mut sales, info).await, "column_name").is_empty());
    // SQL info: the server's name and version, that it takes writes, and SQL dialect facts
    // (the identifier quote, no transactions).
    let info = root
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerVersion,
            SqlInfo::FlightSqlServerReadOnly,
            SqlInfo::SqlIdentifierQuoteChar,
            SqlInfo::SqlTransactionsSupported,
        ])
        .await
        .unwrap();
    let got = fetch(&mut root, info).await;
    assert_eq!(got[0].num_rows(), 5, "{got:?}");
    let names: Vec<u32> = got[0]
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::UInt32Array>()
        .expect("info_name")
        .values()
        .to_vec();
    let union = got[0]
        .column(1)
        .as_any()
        .downcast_ref::<arrow::array::UnionArray>()
        .expect("value");
    let value = |info: SqlInfo| -> String {
        let row = names
            .iter()
            .position(|n| *n == info as u32)
            .unwrap_or_else(|| panic!("{info:?} not answered"));
        let v = union.value(row);
        if let Some(s) = v.as_any().downcast_ref::<StringArray>() {
            s.value(0).to_string()
        } else if let Some(b) = v.as_any().downcast_ref::<arrow::array::BooleanArray>() {
            b.value(0).to_string()
        } else {
            format!("{v:?}")
        }
    };
    assert_eq!(value(SqlInfo::FlightSqlServerName), "Strata");
    assert_eq!(
        value(SqlInfo::FlightSqlServerVersion),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(SqlInfo::FlightSqlServerReadOnly), "false");
    assert_eq!(value(SqlInfo::SqlIdentifierQuoteChar), "\"");
    assert_eq!(value(SqlInfo::SqlTransactionsSupported), "false");
    // XDBC types: the types tables store, BIGINT among them.
    let info = root.get_xdbc_type_info(Default::default()).await.unwrap();
    let types = column(&fetch(&mut root, info).await, "type_name");
    assert!(
        types.contains(&"BIGINT".to_string()) && types.contains(&"VARCHAR".to_string()),
        "{types:?}"
    );
    // Without a key: refused.
    let mut nobody = client(&addr, "wrong").await;
    assert!(nobody.get_catalogs().await.is_err());
}

fn params(ids: &[i64], names: &[&str]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Int64, true),
            Field::new("$2", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(names.to_vec())),
        ],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_bind_parameters_and_run_on_fresh_data() {
    let (addr, _dir, _db) = server().await;
    let mut c = client(&addr, "root-key").await;
    run(
        &mut c,
        "CREATE TABLE people (id BIGINT, name VARCHAR, PRIMARY KEY (id))",
    )
    .await;

    // An insert prepared once, run with a batch of parameter rows (a JDBC batch).
    let mut insert = c
        .prepare("INSERT INTO people VALUES ($1, $2)".into(), None)
        .await
        .unwrap();
    let ps = insert.parameter_schema().unwrap();
    let types: Vec<(&str, &DataType)> = ps
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type()))
        .collect();
    assert_eq!(types, [("$1", &DataType::Int64), ("$2", &DataType::Utf8)]);
    insert
        .set_parameters(params(&[1, 2, 3], &["ann", "bob", "cy"]))
        .unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 3);
    insert.set_parameters(params(&[4], &["dee"])).unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 1);
    insert.close().await.unwrap();

    // A query prepared once: its result schema up front, then runs with new parameters,
    // each on the data as it is at the run.
    let mut query = c
        .prepare(
            "SELECT name FROM people WHERE id >= $1 AND id < $1 + 2 ORDER BY id".into(),
            None,
        )
        .await
        .unwrap();
    let ds = query.dataset_schema().unwrap();
    assert_eq!(ds.field(0).name(), "name");
    let one = |id: i64| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![id])) as ArrayRef],
        )
        .unwrap()
    };
    query.set_parameters(one(1)).unwrap();
    let info = query.execute().await.unwrap();
    assert_eq!(column(&fetch(&mut c, info).await, "name"), ["ann", "bob"]);
    query.set_parameters(one(3)).unwrap();
    let info = query.execute().await.unwrap();
    assert_eq!(column(&fetch(&mut c, info).await, "name"), ["cy", "dee"]);
    run(&mut c, "UPDATE people SET name = 'CY' WHERE id = 3").await;
    let info = query.execute().await.unwrap();
    assert_eq!(column(&fetch(&mut c, info).await, "name"), ["CY", "dee"]);

    // Another key cannot use the handle; after closing, nobody can.
    let mut sales = client(&addr, "sales-key").await;
    let stolen = arrow_flight::sql::CommandPreparedStatementQuery {
        prepared_statement_handle: b"strata-prepared/1".to_vec().into(),
    };
    let err = info_of(&mut sales, "sales-key", &stolen).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    assert!(info_of(&mut c, "root-key", &stolen).await.is_ok());
    query.close().await.unwrap();
    let err = info_of(&mut c, "root-key", &stolen).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");

    // The first run follows its prepare at once and reuses the plan checked then, but
    // reads the data as of the run: a row written in between is counted.
    let mut count = c
        .prepare("SELECT count(*) AS n FROM people".into(), None)
        .await
        .unwrap();
    run(&mut c, "INSERT INTO people VALUES (5, 'eve')").await;
    let info = count.execute().await.unwrap();
    assert_eq!(column(&fetch(&mut c, info).await, "n"), ["5"]);
    run(&mut c, "INSERT INTO people VALUES (6, 'fay')").await;
    let info = count.execute().await.unwrap();
    assert_eq!(column(&fetch(&mut c, info).await, "n"), ["6"]);
    count.close().await.unwrap();

    // A statement that does not plan is refused at prepare time, with the reason.
    let err = c
        .prepare("SELECT nope FROM people".into(), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

/// A statement sent with GetFlightInfo (ADBC's `cursor.execute`, JDBC's `execute`) takes
/// effect then, once, whether or not its result is ever fetched; fetching it does not run
/// it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_take_effect_once_when_sent() {
    let (addr, _dir, _db) = server().await;
    let mut c = client(&addr, "root-key").await;
    // CREATE TABLE and INSERT, never fetched.
    c.execute(
        "CREATE TABLE counters (id BIGINT, n BIGINT, PRIMARY KEY (id))".into(),
        None,
    )
    .await
    .unwrap();
    c.execute("INSERT INTO counters VALUES (1, 0), (2, 0)".into(), None)
        .await
        .unwrap();
    let value = |c: &mut FlightSqlServiceClient<Channel>| {
        let mut c = c.clone();
        async move {
            let info = c
                .execute("SELECT n FROM counters ORDER BY id".into(), None)
                .await
                .unwrap();
            column(&fetch(&mut c, info).await, "n")
        }
    };
    assert_eq!(value(&mut c).await, ["0", "0"]);
    // An increment, fetched twice: applied once, its count answered once.
    let info = c
        .execute("UPDATE counters SET n = n + 1 WHERE id = 1".into(), None)
        .await
        .unwrap();
    assert_eq!(value(&mut c).await, ["1", "0"]);
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let first: Vec<RecordBatch> = c
        .do_get(ticket.clone())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(column(&first, "count"), ["1"]);
    let again = c.do_get(ticket).await;
    assert!(again.is_err(), "a second fetch must not run it again");
    assert_eq!(value(&mut c).await, ["1", "0"]);
    // The same through a prepared statement with a parameter.
    let mut bump = c
        .prepare("UPDATE counters SET n = n + 10 WHERE id = $1".into(), None)
        .await
        .unwrap();
    bump.set_parameters(
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![2])) as ArrayRef],
        )
        .unwrap(),
    )
    .unwrap();
    let info = bump.execute().await.unwrap();
    assert_eq!(value(&mut c).await, ["1", "10"]);
    let counted = fetch(&mut c, info).await;
    assert_eq!(column(&counted, "count"), ["1"]);
    assert_eq!(value(&mut c).await, ["1", "10"]);
}

/// Clients that log in with a user and password (JDBC tools) pass the key as the password:
/// the handshake answers with the bearer token they send from then on, with the key's
/// scopes and namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_with_the_key_as_password_returns_a_bearer_token() {
    let (addr, _dir, _db) = server().await;
    let mut root = client(&addr, "root-key").await;
    run(
        &mut root,
        "CREATE TABLE sales.orders (id BIGINT, PRIMARY KEY (id))",
    )
    .await;
    let channel = Channel::from_shared(addr.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = FlightSqlServiceClient::new(channel.clone());
    c.handshake("bi-tool", "sales-key").await.unwrap();
    assert_eq!(c.token().map(String::as_str), Some("sales-key"));
    let info = c
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    assert_eq!(
        column(&fetch(&mut c, info).await, "db_schema_name"),
        ["sales"]
    );
    // A read key cannot write, whichever way it logged in.
    let err = c
        .execute_update("INSERT INTO sales.orders VALUES (1)".into(), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("write"), "{err}");
    // A wrong password is refused at the handshake.
    let mut bad = FlightSqlServiceClient::new(channel);
    assert!(bad.handshake("bi-tool", "nope").await.is_err());
}

/// The standard gRPC health service answers on the Flight SQL port, without a key (load
/// balancers and `grpc_health_probe` ask it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_health_service_answers_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let (addr, _dir, _db) = server().await;
    let channel = Channel::from_shared(addr).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "arrow.flight.protocol.FlightService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}
