//! `strata-query`: a stateless query service. It reads the bucket alone (manifests, WAL
//! tails, SSTs, Parquet levels) and answers SQL over HTTP (`POST /sql`) and Arrow Flight SQL.
//! It never writes table data: INSERT / UPDATE / DELETE go to the ingest node
//! (`strata serve` runs both roles in one process).

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use strata_engine::{Db, DbConfig, EngineConfig};
use strata_objstore::{ObjectStoreConfig, S3Config};
use strata_query::{QueryConfig, QueryService};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StoreKind {
    /// A local directory (the embedded default).
    Local,
    /// S3 or an S3-compatible endpoint (credentials from the AWS default chain).
    S3,
}

/// Answers SQL over every Strata table in a bucket.
#[derive(Parser, Debug)]
#[command(name = "strata-query", version)]
struct Args {
    /// Object store backend.
    #[arg(long, value_enum, default_value = "local", env = "STRATA_STORE")]
    store: StoreKind,
    /// Bucket directory (`--store local`).
    #[arg(
        long,
        default_value = "./strata-data/bucket",
        env = "STRATA_LOCAL_BUCKET_DIR"
    )]
    dir: PathBuf,
    /// Bucket name (`--store s3`).
    #[arg(long, env = "STRATA_S3_BUCKET")]
    bucket: Option<String>,
    /// Endpoint override (LocalStack, MinIO).
    #[arg(long, env = "STRATA_S3_ENDPOINT")]
    endpoint: Option<String>,
    /// Region (else from the AWS chain).
    #[arg(long, env = "STRATA_S3_REGION")]
    region: Option<String>,
    /// Prefix of every Strata object in the bucket.
    #[arg(long, default_value = "strata", env = "STRATA_ROOT_PREFIX")]
    root_prefix: String,
    /// Local cache directory (downloaded SSTs, Parquet blocks); disposable.
    #[arg(
        long,
        default_value = "./strata-data/query-cache",
        env = "STRATA_QUERY_CACHE_DIR"
    )]
    cache_dir: PathBuf,
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:8081", env = "STRATA_QUERY_HTTP")]
    http: SocketAddr,
    /// Arrow Flight SQL listen address.
    #[arg(long, default_value = "127.0.0.1:8082", env = "STRATA_QUERY_FLIGHT")]
    flight: SocketAddr,
    /// PostgreSQL wire protocol listen address (off without it).
    #[arg(long, env = "STRATA_QUERY_POSTGRES")]
    postgres: Option<SocketAddr>,
    /// Memory limit of one query.
    #[arg(long, default_value_t = 1 << 30, env = "STRATA_QUERY_MEMORY_LIMIT_BYTES")]
    memory_limit_bytes: usize,
    /// Timeout of one query.
    #[arg(long, default_value_t = 300_000, env = "STRATA_QUERY_TIMEOUT_MS")]
    timeout_ms: u64,
    /// API keys file (see `strata_query::auth`); without it every caller may read every
    /// table.
    #[arg(long, env = "STRATA_AUTH_KEYS")]
    auth_keys: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata-query: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), strata_query::server::ServeError> {
    let auth = match &args.auth_keys {
        Some(path) => {
            strata_query::auth::Authenticator::with_keys(strata_query::auth::Auth::load(path)?)
        }
        None => strata_query::auth::Authenticator::open(),
    };
    let store = match args.store {
        StoreKind::Local => ObjectStoreConfig::local(&args.dir),
        StoreKind::S3 => ObjectStoreConfig::s3(S3Config {
            bucket: args
                .bucket
                .clone()
                .ok_or("--bucket (or STRATA_S3_BUCKET) is required with --store s3")?,
            region: args.region.clone(),
            endpoint: args.endpoint.clone(),
            request_timeout_ms: 30_000,
        }),
    };
    let mut engine = EngineConfig {
        root_prefix: args.root_prefix.clone(),
        ..Default::default()
    };
    // A reader: no compaction workers, no GC of its own.
    engine.jobs.inprocess_workers = 0;
    engine.gc.interval_ms = 0;
    let db = Db::open(DbConfig {
        store,
        local_dir: args.cache_dir.clone(),
        engine,
    })
    .await?;
    let q = QueryService::new(
        db,
        QueryConfig {
            memory_limit_bytes: args.memory_limit_bytes,
            timeout_ms: args.timeout_ms,
            ..Default::default()
        },
        false,
    );
    let http = tokio::net::TcpListener::bind(args.http).await?;
    let flight = tokio::net::TcpListener::bind(args.flight).await?;
    // Tests and scripts read the bound addresses from these lines.
    println!("http listening on {}", http.local_addr()?);
    println!("flight listening on {}", flight.local_addr()?);
    let postgres = match args.postgres {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await?;
            println!("postgres listening on {}", l.local_addr()?);
            Some(l)
        }
        None => None,
    };
    let listeners = strata_query::server::Listeners {
        http,
        flight,
        postgres,
    };
    strata_query::server::serve_tls(
        q,
        auth,
        axum::Router::new(),
        listeners,
        None,
        None,
        None,
        strata_query::server::stop_on_signal(),
    )
    .await?;
    Ok(())
}
