//! The `strata` command line.
//!
//! - `strata serve`: every role in one process on the embedded default (a local directory
//!   as the bucket, the NVMe tier under it): the ingest writer with its in-process
//!   compaction worker and GC, and the query service with writes enabled, over HTTP
//!   (`POST /sql`, the data API under `/v1` (see [`api`]), `/health`, `/ready`) and Arrow
//!   Flight SQL on 127.0.0.1.
//! - `strata sql`: SQL against a running server over Arrow Flight SQL, one-shot or
//!   interactive (see [`cli`]).
//! - `strata quickstart`: create a table in a local directory, write, read, reopen from the
//!   bucket and read again (the embedded API, no server).

mod api;
mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use clap::{Parser, Subcommand};
use strata_engine::{Db, DbConfig, EngineConfig, ScanOptions, Value};
use strata_objstore::ObjectStoreConfig;
use strata_query::auth::{Auth, Authenticator};
use strata_query::{QueryConfig, QueryService};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: HTAP storage on object storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every role (ingest, compaction, query) in one process over a local directory,
    /// answering SQL over HTTP (`POST /sql`) and Arrow Flight SQL. Ctrl-C or SIGTERM stops
    /// it; every acknowledged write is in the directory's bucket.
    Serve {
        /// Data directory: the bucket is `<dir>/bucket`, the NVMe tier `<dir>/nvme`.
        #[arg(long, default_value = "./strata-data", env = "STRATA_DATA_DIR")]
        dir: PathBuf,
        /// HTTP listen address (port 0 picks a free port; the bound address is printed).
        #[arg(long, default_value = "127.0.0.1:8080", env = "STRATA_HTTP")]
        http: SocketAddr,
        /// Arrow Flight SQL listen address.
        #[arg(long, default_value = "127.0.0.1:8081", env = "STRATA_FLIGHT")]
        flight: SocketAddr,
        /// Memory limit of one query.
        #[arg(long, default_value_t = 1 << 30, env = "STRATA_QUERY_MEMORY_LIMIT_BYTES")]
        query_memory_limit_bytes: usize,
        /// Timeout of one query.
        #[arg(long, default_value_t = 300_000, env = "STRATA_QUERY_TIMEOUT_MS")]
        query_timeout_ms: u64,
        /// API keys (TOML: `[[keys]]` with name, sha256, namespace, scope = read | write |
        /// admin). Without it every caller may do everything: keep the listeners on
        /// 127.0.0.1.
        #[arg(long, env = "STRATA_AUTH_KEYS")]
        auth_keys: Option<PathBuf>,
    },
    /// Runs SQL against a running Strata over Arrow Flight SQL: the statement given, or
    /// statements read from stdin (interactive on a terminal; end each with ';', \q quits).
    /// Exits non-zero when a statement fails.
    Sql {
        /// Flight SQL address of `strata serve` or `strata-query`.
        #[arg(long, default_value = "127.0.0.1:8081", env = "STRATA_FLIGHT")]
        flight: String,
        /// API key, when the server requires one.
        #[arg(long, env = "STRATA_API_KEY", hide_env_values = true)]
        key: Option<String>,
        /// How results are printed.
        #[arg(long, value_enum, default_value = "table")]
        format: cli::Output,
        /// One statement; without it, statements come from stdin.
        statement: Option<String>,
    },
    /// Creates a table in a local directory (the embedded default bucket), writes rows,
    /// reads them back, reopens from the bucket alone and reads again.
    Quickstart {
        /// Directory standing in for the bucket; the NVMe tier lives under `<dir>/nvme`.
        #[arg(long, default_value = "./strata-data", env = "STRATA_DATA_DIR")]
        dir: PathBuf,
    },
}

fn batch(ids: &[i64], names: &[&str], scores: &[f64]) -> anyhow_free::Result<RecordBatch> {
    let schema = Arc::new(schema());
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(names.to_vec())),
            Arc::new(Float64Array::from(scores.to_vec())),
        ],
    )?)
}

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ])
}

mod anyhow_free {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

async fn open(dir: &std::path::Path) -> anyhow_free::Result<Db> {
    Ok(Db::open(DbConfig {
        store: ObjectStoreConfig::local(dir.join("bucket")),
        local_dir: dir.join("nvme"),
        engine: EngineConfig::default(),
    })
    .await?)
}

async fn quickstart(dir: PathBuf) -> anyhow_free::Result<()> {
    let db = open(&dir).await?;
    if db.table("players").await.is_err() {
        db.create_table("players", schema(), &["id"]).await?;
        println!("created table players (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE)");
    }
    let t = db.table("players").await?;
    let seq = t
        .upsert(batch(
            &[1, 2, 3],
            &["ada", "grace", "edsger"],
            &[9.5, 8.0, 7.25],
        )?)
        .await?;
    println!(
        "upserted 3 rows at sequence {seq} (durable in {})",
        dir.join("bucket").display()
    );
    let update = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            schema().field(0).clone(),
            schema().field(2).clone(),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![2])) as ArrayRef,
            Arc::new(Float64Array::from(vec![9.75])),
        ],
    )?;
    t.update(update).await?;
    println!("partially updated id=2 (score only)");
    if let Some(row) = t.get(&[Value::Int(2)], None, None).await? {
        println!(
            "get id=2:\n{}",
            arrow::util::pretty::pretty_format_batches(&[row])?
        );
    }
    db.close().await;

    // Reopen from the bucket alone: the NVMe directory is disposable.
    std::fs::remove_dir_all(dir.join("nvme"))?;
    let db = open(&dir).await?;
    let t = db.table("players").await?;
    let all = t.scan(&ScanOptions::default(), None).await?;
    println!(
        "after reopening from the bucket alone:\n{}",
        arrow::util::pretty::pretty_format_batches(&[all])?
    );
    db.close().await;
    Ok(())
}

async fn serve(
    dir: PathBuf,
    http: SocketAddr,
    flight: SocketAddr,
    query: QueryConfig,
    auth_keys: Option<PathBuf>,
) -> anyhow_free::Result<()> {
    let auth = match &auth_keys {
        Some(path) => Authenticator::with_keys(Auth::load(path)?),
        None => Authenticator::open(),
    };
    let db = open(&dir).await?;
    let q = QueryService::new(db.clone(), query, true);
    let http = tokio::net::TcpListener::bind(http).await?;
    let flight = tokio::net::TcpListener::bind(flight).await?;
    // Scripts and tests read the bound addresses from these lines.
    println!("http listening on {}", http.local_addr()?);
    println!("flight listening on {}", flight.local_addr()?);
    tracing::info!(dir = %dir.display(), auth = auth.enabled(), "strata serve ready");
    let result = strata_query::server::serve_with(
        q,
        auth.clone(),
        api::router(db.clone(), auth),
        http,
        flight,
        strata_query::server::stop_on_signal(),
    )
    .await;
    db.close().await;
    result
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Quickstart { dir } => quickstart(dir).await,
        Command::Sql {
            flight,
            key,
            format,
            statement,
        } => cli::sql(&flight, key.as_deref(), format, statement).await,
        Command::Serve {
            dir,
            http,
            flight,
            query_memory_limit_bytes,
            query_timeout_ms,
            auth_keys,
        } => {
            serve(
                dir,
                http,
                flight,
                QueryConfig {
                    memory_limit_bytes: query_memory_limit_bytes,
                    timeout_ms: query_timeout_ms,
                    ..Default::default()
                },
                auth_keys,
            )
            .await
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
