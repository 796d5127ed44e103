//! `strata-compactor`: a stateless compaction worker. It finds the jobs shard writers
//! publish under `<root>/jobs/` in the bucket, claims the smallest with a lease, merges
//! its inputs into new Parquet files, and hands the result back for the writer to commit.
//! Run any number of them; a killed worker's job is reclaimed when its lease expires.

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use strata_engine::jobs::{Worker, WorkerConfig};
use strata_manifest::Layout;
use strata_objstore::{ObjectStoreConfig, ObjectStoreMetrics, S3Config};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StoreKind {
    /// A local directory (the embedded default).
    Local,
    /// S3 or an S3-compatible endpoint (credentials from the AWS default chain).
    S3,
}

/// Runs S3-level compaction jobs published in the bucket.
#[derive(Parser, Debug)]
#[command(name = "strata-compactor", version)]
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
    /// Worker name in leases and logs (default: host process id).
    #[arg(long, env = "STRATA_WORKER_NAME")]
    name: Option<String>,
    /// Lease length.
    #[arg(long, default_value_t = 30_000, env = "STRATA_LEASE_MS")]
    lease_ms: u64,
    /// Lease renewal period.
    #[arg(long, default_value_t = 5_000, env = "STRATA_HEARTBEAT_MS")]
    heartbeat_ms: u64,
    /// Idle polling period: the first wait after a look that found no job; each further
    /// empty look doubles it, up to --idle-poll-max-ms.
    #[arg(long, default_value_t = 500, env = "STRATA_POLL_MS")]
    poll_ms: u64,
    /// The longest wait between looks when there is nothing to do (one LIST of `jobs/` per
    /// period when idle).
    #[arg(long, default_value_t = 20_000, env = "STRATA_IDLE_POLL_MAX_MS")]
    idle_poll_max_ms: u64,
    /// Scratch directory for downloaded inputs.
    #[arg(
        long,
        default_value = "./strata-data/compactor-scratch",
        env = "STRATA_SCRATCH_DIR"
    )]
    scratch: PathBuf,
    /// Fault injection for tests: pause this long after each output file is written.
    #[arg(long, default_value_t = 0, hide = true)]
    debug_pause_per_file_ms: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    strata_common::process::huge_pages_from_env();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata-compactor: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store_config = match args.store {
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
    let (store, _) = strata_objstore::build(&store_config, &ObjectStoreMetrics::default()).await?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("compactor-{}", std::process::id()));
    let worker = Worker::new(
        store,
        Layout::new(&args.root_prefix),
        WorkerConfig {
            name: name.clone(),
            lease_ms: args.lease_ms,
            heartbeat_ms: args.heartbeat_ms,
            poll_ms: args.poll_ms,
            idle_poll_max_ms: args.idle_poll_max_ms,
            scratch: args.scratch.clone(),
            debug_pause_per_file_ms: args.debug_pause_per_file_ms,
        },
        strata_common::clock::system(),
    );
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    tracing::info!(worker = %name, root = %args.root_prefix, "compactor started");
    worker.run(cancel).await;
    tracing::info!(worker = %name, "compactor stopped");
    Ok(())
}
