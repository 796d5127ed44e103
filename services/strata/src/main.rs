//! The `strata` command line.
//!
//! - `strata serve`: every role in one process on the embedded default (a local directory
//!   as the bucket, the NVMe tier under it): the ingest writer with its in-process
//!   compaction worker and GC, and the query service with writes enabled, over HTTP
//!   (`POST /sql`, the data API under `/v1` (see [`api`]), `/health`, `/ready`) and Arrow
//!   Flight SQL on 127.0.0.1.
//! - `strata ingest`, `strata compactor`, `strata query`: the roles alone, sharing a bucket
//!   (a local directory or S3). Every role reads one configuration ([`config`]).
//! - `strata config`: prints a role's effective configuration.
//! - `strata sql`: SQL against a running server over Arrow Flight SQL, one-shot or
//!   interactive (see [`cli`]).
//! - `strata quickstart`: create a table in a local directory, write, read, reopen from the
//!   bucket and read again (the embedded API, no server).

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin;
mod api;
mod cli;
mod config;
mod grpc;
mod load;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use clap::{Parser, Subcommand};
use config::{Config, LogFormat, Role};
use strata_engine::jobs::{Worker, WorkerConfig};
use strata_engine::{Db, DbConfig, EngineConfig, ScanOptions, Value};
use strata_manifest::Layout;
use strata_objstore::ObjectStoreConfig;
use strata_query::QueryService;
use strata_query::auth::{Auth, Authenticator};

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

/// Where a role's settings come from (see `docs/configuration.md`): defaults, the role's
/// defaults, `--config`, `STRATA_*` variables, then these flags.
#[derive(clap::Args, Debug, Clone)]
struct Settings {
    /// TOML configuration file (every setting and its default: docs/configuration.md).
    #[arg(long, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// Sets one setting, e.g. `--set engine.memtable_bytes_max=1048576` (repeatable; wins
    /// over the file and the environment).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// Local directory of this node (`data_dir`): NVMe tier, caches and, with the local
    /// store, the bucket (`<dir>/bucket`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// HTTP listen address (`http`; port 0 picks a free port, the bound address is printed).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Arrow Flight SQL listen address (`flight`).
    #[arg(long)]
    flight: Option<SocketAddr>,
    /// PostgreSQL wire protocol listen address (`postgres`; empty: off).
    #[arg(long)]
    postgres: Option<String>,
    /// API keys file (`auth.keys`; TOML `[[keys]]` with name, sha256, namespace, scope =
    /// read | write | admin). Without keys every caller may do everything: keep the
    /// listeners on 127.0.0.1.
    #[arg(long)]
    auth_keys: Option<PathBuf>,
}

impl Settings {
    /// Loads the configuration of `role`; logging starts here (its format is a setting).
    fn load(&self, role: Role) -> Result<Config, config::ConfigError> {
        let mut sets = Vec::new();
        let mut shortcut = |path: &str, v: Option<String>| {
            if let Some(v) = v {
                sets.push(format!("{path}={v}"));
            }
        };
        shortcut(
            "data_dir",
            self.dir.as_ref().map(|d| d.display().to_string()),
        );
        shortcut("http", self.http.map(|a| a.to_string()));
        shortcut("flight", self.flight.map(|a| a.to_string()));
        shortcut("postgres", self.postgres.clone());
        shortcut(
            "auth.keys",
            self.auth_keys.as_ref().map(|d| d.display().to_string()),
        );
        sets.extend(self.sets.iter().cloned());
        let sources = config::Sources::from_process(self.config.clone(), sets);
        let (c, unknown) = config::load(role, &sources)?;
        init_logs(c.log.format, &c.log.filter);
        for name in unknown {
            tracing::warn!(variable = %name, "STRATA_* variable names no setting; ignored");
        }
        Ok(c)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Runs every role (ingest, compaction, query) in one process over a local directory,
    /// answering the data API and SQL over HTTP and Arrow Flight SQL. Ctrl-C or SIGTERM
    /// stops it; every acknowledged write is in the directory's bucket.
    Serve {
        #[command(flatten)]
        settings: Settings,
    },
    /// Runs the ingest role against a shared bucket (`store.*`: a local directory or S3):
    /// it owns the tables' shards, takes writes (data API, SQL INSERT / UPDATE / DELETE,
    /// Arrow Flight SQL), keeps the upper levels on its NVMe directory and publishes S3
    /// compaction jobs for `strata compactor` processes (none run in-process unless
    /// `engine.jobs.inprocess_workers` says so).
    Ingest {
        #[command(flatten)]
        settings: Settings,
    },
    /// Runs a compaction worker against a shared bucket: it claims the S3-level jobs ingest
    /// nodes publish (with a lease in the bucket), merges their inputs into Parquet and
    /// hands the result back. Run any number; a killed worker's job is taken over when its
    /// lease (`engine.jobs.lease_ms`) expires. Listens on nothing.
    Compactor {
        #[command(flatten)]
        settings: Settings,
    },
    /// Runs a read-only query service against a shared bucket: SQL over HTTP and Arrow
    /// Flight SQL at consistent snapshots, reading WAL tails, SSTs and Parquet levels from
    /// the bucket. It never writes table data. Listens on 127.0.0.1:8090 / 8091 by default.
    Query {
        #[command(flatten)]
        settings: Settings,
    },
    /// Prints the effective configuration of a role as TOML (after the file, `STRATA_*`
    /// variables and flags), or the error that would stop it from starting.
    Config {
        /// The role whose defaults apply.
        #[arg(long, value_enum, default_value = "serve")]
        role: RoleArg,
        #[command(flatten)]
        settings: Settings,
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
        /// CA certificate (PEM) to check the server's TLS certificate with (`https://`
        /// addresses); default: the system's roots.
        #[arg(long, env = "STRATA_CA_CERT")]
        ca_cert: Option<PathBuf>,
        /// How results are printed.
        #[arg(long, value_enum, default_value = "table")]
        format: cli::Output,
        /// One statement; without it, statements come from stdin.
        statement: Option<String>,
    },
    /// Bulk-loads a CSV (with a header row), NDJSON or Parquet file into a table over Arrow
    /// Flight SQL, showing progress and printing the throughput. Values are parsed into the
    /// table's column types; columns are matched by name. Each batch is one atomic upsert,
    /// so loading a file again is harmless.
    Load {
        /// The table (`ns.table` for a namespace).
        #[arg(long)]
        table: String,
        /// The file; its format comes from the extension (.csv, .ndjson/.jsonl/.json,
        /// .parquet) unless --format says.
        file: PathBuf,
        /// The file's format.
        #[arg(long, value_enum)]
        format: Option<load::InputFormat>,
        /// Rows per batch (one atomic write each).
        #[arg(long, default_value_t = 8192)]
        batch_rows: usize,
        /// Create the table if it does not exist, from the file's columns (types inferred
        /// from CSV and NDJSON, Parquet's own), with this primary key (comma-separated;
        /// needs admin scope).
        #[arg(long, value_delimiter = ',')]
        create_key: Vec<String>,
        /// Flight SQL address of the ingest node (`strata serve` or `strata ingest`).
        #[arg(long, default_value = "127.0.0.1:8081", env = "STRATA_FLIGHT")]
        flight: String,
        /// API key (write scope on the table's namespace).
        #[arg(long, env = "STRATA_API_KEY", hide_env_values = true)]
        key: Option<String>,
        /// CA certificate (PEM) to check the server's TLS certificate with (`https://`
        /// addresses); default: the system's roots.
        #[arg(long, env = "STRATA_CA_CERT")]
        ca_cert: Option<PathBuf>,
    },
    /// Operator commands against a running ingest node (`strata serve` or `strata ingest`)
    /// over HTTP, with an admin key when keys are configured: tables, shards and their
    /// writer epochs, manifest versions, snapshots, compaction jobs and leases, and garbage
    /// collection (with a dry run).
    Admin {
        /// HTTP address of the ingest node.
        #[arg(
            long,
            default_value = "127.0.0.1:8080",
            env = "STRATA_HTTP",
            global = true
        )]
        http: String,
        /// API key (admin scope).
        #[arg(long, env = "STRATA_API_KEY", hide_env_values = true, global = true)]
        key: Option<String>,
        /// CA certificate (PEM) to check the server's TLS certificate with (`https://`
        /// addresses); default: the system's roots.
        #[arg(long, env = "STRATA_CA_CERT", global = true)]
        ca_cert: Option<PathBuf>,
        /// Print the server's JSON answer instead of text.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: admin::AdminCommand,
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

/// Starts logging to stderr: `RUST_LOG` when set, else `filter`.
fn init_logs(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

fn tls(c: &Config) -> anyhow_free::Result<Option<strata_query::server::TlsIdentity>> {
    Ok(match c.tls_files() {
        Some((cert, key)) => Some(strata_query::server::TlsIdentity::load(cert, key)?),
        None => None,
    })
}

fn authenticator(c: &Config) -> anyhow_free::Result<Authenticator> {
    Ok(match c.keys_file() {
        Some(path) => Authenticator::with_keys(Auth::load(path)?),
        None => Authenticator::open(),
    })
}

/// Binds both listeners and prints their addresses (scripts and tests read these lines).
async fn listen(c: &Config) -> anyhow_free::Result<strata_query::server::Listeners> {
    let http = tokio::net::TcpListener::bind(c.http).await?;
    let flight = tokio::net::TcpListener::bind(c.flight).await?;
    println!("http listening on {}", http.local_addr()?);
    println!("flight listening on {}", flight.local_addr()?);
    let postgres = if c.postgres.is_empty() {
        None
    } else {
        let l = tokio::net::TcpListener::bind(&c.postgres)
            .await
            .map_err(|e| format!("postgres listen address {}: {e}", c.postgres))?;
        println!("postgres listening on {}", l.local_addr()?);
        Some(l)
    };
    Ok(strata_query::server::Listeners {
        http,
        flight,
        postgres,
    })
}

/// `strata serve` and `strata ingest`: the shard writer with the data API and SQL (writes
/// enabled) over HTTP and Flight SQL.
async fn writer(c: Config, role: &str) -> anyhow_free::Result<()> {
    let auth = authenticator(&c)?;
    let tls = tls(&c)?;
    let db = Db::open(DbConfig {
        store: c.object_store(),
        local_dir: c.local("nvme"),
        engine: c.engine.clone(),
    })
    .await?;
    // Not ready (`/ready`, gRPC health) until the tables this node writes are open.
    let startup = strata_query::ready::Startup::pending("opening tables");
    let mut q = QueryService::new(db.clone(), c.query.clone(), true).with_startup(startup.clone());
    if tls.is_none() {
        // Flight SQL's writes for another ingest node's tables go there as the HTTP API's do.
        q = q
            .with_forward(api::sql_forwarder(db.clone()))
            .with_forward_rows(api::rows_forwarder(db.clone()));
    }
    let listeners = listen(&c).await?;
    if role == "ingest" && c.cluster.enabled {
        let cluster = cluster_config(
            &c,
            listeners.http.local_addr()?,
            listeners.flight.local_addr()?,
        );
        tracing::info!(
            node = cluster.node,
            http = cluster.http,
            "joining the ingest cluster"
        );
        db.join_cluster(cluster).await?;
    }
    tokio::spawn(strata_query::ready::open_tables(db.clone(), startup));
    tracing::info!(
        role,
        data_dir = %c.data_dir.display(),
        store = ?c.store.kind,
        auth = auth.enabled(),
        compaction_workers = c.engine.jobs.inprocess_workers,
        tls = tls.is_some(),
        "strata {role} ready"
    );
    // Forwarding to other ingest nodes is plain HTTP: with TLS, callers get the owner's
    // address in a 503 instead.
    let forward = tls.is_none();
    let forward_db = db.clone();
    let body_bytes_max = c.query.message_bytes_max;
    let result = strata_query::server::serve_tls(
        q,
        auth.clone(),
        api::router(db.clone(), auth.clone(), c.query.message_bytes_max),
        listeners,
        tls,
        Some(strata_query::flight::ExtraGrpc {
            routes: tonic::service::Routes::new(
                grpc::DataService::new(db.clone(), auth, c.query.message_bytes_max).into_server(),
            ),
            names: vec![grpc::DataService::NAME],
        }),
        Some(Box::new(move |app| {
            api::forwarding(app, forward_db, forward, body_bytes_max)
        })),
        strata_query::server::stop_on_signal(),
    )
    .await;
    // Uploads of locally acknowledged WAL segments get their own bounded wait inside close;
    // background jobs are cancelled. Past CLOSE_WAIT the process exits regardless: every
    // remotely acknowledged write is in the bucket already.
    tracing::info!(role, "stopping: closing shards");
    if tokio::time::timeout(CLOSE_WAIT, db.close()).await.is_err() {
        tracing::warn!(
            role,
            wait_ms = CLOSE_WAIT.as_millis() as u64,
            "shards did not close in time; exiting"
        );
    }
    result
}

/// How long a stopping writer waits for its shards to close (after the requests' grace
/// period, `strata_query::server::SHUTDOWN_GRACE`): with it, `strata serve` and `strata
/// ingest` exit within about 25 s of SIGTERM whatever is in flight.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// This ingest node's identity and addresses in the cluster.
fn cluster_config(
    c: &Config,
    http: std::net::SocketAddr,
    flight: std::net::SocketAddr,
) -> strata_engine::ClusterConfig {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let advertise = |set: &str, bound: std::net::SocketAddr| {
        if !set.is_empty() {
            set.to_string()
        } else if bound.ip().is_unspecified() {
            format!("{host}:{}", bound.port())
        } else {
            bound.to_string()
        }
    };
    let node = if c.cluster.node.is_empty() {
        let clean: String = host
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || "-_.".contains(ch) {
                    ch
                } else {
                    '-'
                }
            })
            .collect();
        format!("{clean}-{}", http.port())
    } else {
        c.cluster.node.clone()
    };
    strata_engine::ClusterConfig {
        node,
        http: advertise(&c.cluster.advertise_http, http),
        flight: advertise(&c.cluster.advertise_flight, flight),
        lease_ms: c.cluster.lease_ms,
        renew_ms: c.cluster.renew_ms,
    }
}

/// `strata query`: a reader of the bucket (no compaction, no GC, no writes).
async fn reader(mut c: Config) -> anyhow_free::Result<()> {
    let auth = authenticator(&c)?;
    let tls = tls(&c)?;
    c.engine.jobs.inprocess_workers = 0;
    c.engine.gc.interval_ms = 0;
    let db = Db::open(DbConfig {
        store: c.object_store(),
        local_dir: c.local("query-cache"),
        engine: c.engine.clone(),
    })
    .await?;
    let q = QueryService::new(db, c.query.clone(), false);
    let listeners = listen(&c).await?;
    tracing::info!(data_dir = %c.data_dir.display(), store = ?c.store.kind, auth = auth.enabled(), tls = tls.is_some(), "strata query ready");
    strata_query::server::serve_tls(
        q,
        auth,
        axum::Router::new(),
        listeners,
        tls,
        None,
        None,
        strata_query::server::stop_on_signal(),
    )
    .await
}

/// `strata compactor`: runs published S3-level compaction jobs until stopped.
async fn compactor(c: Config) -> anyhow_free::Result<()> {
    let (store, _) = strata_objstore::build(
        &c.object_store(),
        &strata_objstore::ObjectStoreMetrics::default(),
    )
    .await?;
    let name = if c.compactor.name.is_empty() {
        format!("compactor-{}", std::process::id())
    } else {
        c.compactor.name.clone()
    };
    let jobs = &c.engine.jobs;
    let worker = Worker::new(
        store,
        Layout::new(&c.engine.root_prefix),
        WorkerConfig {
            name: name.clone(),
            lease_ms: jobs.lease_ms,
            heartbeat_ms: jobs.heartbeat_ms,
            poll_ms: jobs.poll_ms,
            idle_poll_max_ms: jobs.idle_poll_max_ms,
            scratch: c.local("compactor-scratch"),
            debug_pause_per_file_ms: 0,
        },
        strata_common::clock::system(),
    );
    let stop = strata_query::server::stop_on_signal();
    println!("compactor {name} running");
    tracing::info!(worker = %name, root = %c.engine.root_prefix, store = ?c.store.kind, "strata compactor ready");
    worker.run(stop).await;
    tracing::info!(worker = %name, "compactor stopped");
    Ok(())
}

/// A role on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum RoleArg {
    Serve,
    Ingest,
    Compactor,
    Query,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Serve => Role::Serve,
            RoleArg::Ingest => Role::Ingest,
            RoleArg::Compactor => Role::Compactor,
            RoleArg::Query => Role::Query,
        }
    }
}

#[tokio::main]
async fn main() {
    // Before the first large allocation (strata_common::process: cold columnar reads).
    strata_common::process::huge_pages_from_env();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Quickstart { dir } => {
            init_logs(LogFormat::Text, "warn");
            quickstart(dir).await
        }
        Command::Sql {
            flight,
            key,
            ca_cert,
            format,
            statement,
        } => {
            init_logs(LogFormat::Text, "warn");
            cli::sql(
                &flight,
                key.as_deref(),
                ca_cert.as_deref(),
                format,
                statement,
            )
            .await
        }
        Command::Load {
            table,
            file,
            format,
            batch_rows,
            create_key,
            flight,
            key,
            ca_cert,
        } => {
            init_logs(LogFormat::Text, "warn");
            load::load(load::LoadArgs {
                flight,
                key,
                ca_cert,
                table,
                file,
                format,
                batch_rows,
                create_key,
            })
            .await
        }
        Command::Admin {
            http,
            key,
            ca_cert,
            json,
            command,
        } => {
            init_logs(LogFormat::Text, "warn");
            admin::admin(&http, key.as_deref(), ca_cert.as_deref(), json, command).await
        }
        Command::Serve { settings } => match settings.load(Role::Serve) {
            Ok(c) => writer(c, "serve").await,
            Err(e) => Err(e.into()),
        },
        Command::Ingest { settings } => match settings.load(Role::Ingest) {
            Ok(c) => writer(c, "ingest").await,
            Err(e) => Err(e.into()),
        },
        Command::Query { settings } => match settings.load(Role::Query) {
            Ok(c) => reader(c).await,
            Err(e) => Err(e.into()),
        },
        Command::Compactor { settings } => match settings.load(Role::Compactor) {
            Ok(c) => compactor(c).await,
            Err(e) => Err(e.into()),
        },
        Command::Config { role, settings } => settings
            .load(role.into())
            .map(|c| {
                print!("{}", c.to_toml());
            })
            .map_err(Into::into),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    // Exit now rather than drop the runtime: dropping it waits for every blocking task
    // (a scan cut off by the shutdown grace period) however long it runs.
    std::process::exit(0);
}
