//! `slatebench`: the `strata-loadtest` load and point-read phases run against SlateDB, the
//! peer issue 22 measures Strata's point reads against, with the same keys, values, key
//! choosers and latency accounting, over a local-directory object store. Built only with
//! `loadtest/slatebench.sh` (a package of its own; CI does not build it):
//!
//! ```sh
//! cargo build --release --manifest-path loadtest/slatebench/Cargo.toml
//! slatebench --records 1000000 --ops 1000000 --record-bytes 200 --clients 8 --distribution uniform
//! ```
//!
//! SlateDB runs at its defaults; each load batch awaits durability in the object store
//! (its `WriteHandle::await_durable`), as Strata's remote durability does. After the load
//! it flushes its memtable and waits for its compactor, as `strata-loadtest
//! --flush-after-load` waits for Strata's tree to settle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use slatedb::object_store::ObjectStore;
use slatedb::object_store::local::LocalFileSystem;
use strata_ycsb::{Dist, KeyChooser, Zipf, key, value};

#[derive(Parser, Debug, Clone, Serialize)]
struct Args {
    /// Records loaded before the run.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Point reads in the run phase.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 200)]
    record_bytes: usize,
    /// Concurrent clients (closed loop), for the load and the reads.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Key distribution of the reads.
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    distribution: Dist,
    /// Working directory (default: temporary).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Seconds to wait after the load's flush for SlateDB's compactor.
    #[arg(long, default_value_t = 20)]
    settle_s: u64,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Serialize)]
struct Report {
    args: Args,
    load_seconds: f64,
    load_records_per_sec: f64,
    run_seconds: f64,
    throughput_ops_per_sec: f64,
    found: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Res<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let bucket = dir.join("bucket");
    std::fs::create_dir_all(&bucket)?;
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(&bucket)?);
    let db = Arc::new(slatedb::Db::open("ycsb", store).await?);

    // Load phase: batches of 100 records from `clients` concurrent loaders.
    let load_started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut loaders = Vec::new();
    for c in 0..args.clients.max(1) {
        let (db, next, args) = (db.clone(), next.clone(), args.clone());
        loaders.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(args.seed + c as u64);
            loop {
                let start = next.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
                if start >= args.records {
                    return Ok::<_, slatedb::Error>(());
                }
                let mut batch = slatedb::WriteBatch::new();
                for i in start..(start + 100).min(args.records) {
                    batch.put(key(i), value(&mut rng, args.record_bytes));
                }
                // SlateDB's `write` returns once the batch is in its in-memory WAL; a
                // durable load (as Strata's remote durability) waits for the object store.
                db.write(batch).await?.await_durable().await?;
            }
        }));
    }
    for l in loaders {
        l.await??;
    }
    let load_seconds = load_started.elapsed().as_secs_f64();
    db.flush().await?;
    tokio::time::sleep(Duration::from_secs(args.settle_s)).await;
    eprintln!("loaded in {load_seconds:.1} s, settled {} s", args.settle_s);

    // Run phase: closed-loop point reads, each client recording its own latencies.
    let chooser = Arc::new(KeyChooser {
        dist: args.distribution,
        zipf: matches!(args.distribution, Dist::Zipfian).then(|| Zipf::new(args.records, 0.99)),
        hot_fraction: 0.05,
        hot_op_fraction: 0.95,
    });
    let issued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let run_started = Instant::now();
    let mut workers = Vec::new();
    for c in 0..args.clients.max(1) {
        let (db, args, chooser, issued) =
            (db.clone(), args.clone(), chooser.clone(), issued.clone());
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(args.seed * 1000 + c as u64);
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut found = 0u64;
            loop {
                let i = issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= args.ops {
                    return Ok::<_, slatedb::Error>((h, found));
                }
                let k = key(chooser.next(&mut rng, args.records));
                let t = Instant::now();
                if db.get(&k).await?.is_some() {
                    found += 1;
                }
                h.saturating_record((t.elapsed().as_micros() as u64).max(1));
            }
        }));
    }
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut found = 0;
    for w in workers {
        let (h, f) = w.await??;
        all.add(&h)?;
        found += f;
    }
    let run_seconds = run_started.elapsed().as_secs_f64();
    db.close().await?;
    let report = Report {
        load_seconds,
        load_records_per_sec: args.records as f64 / load_seconds,
        run_seconds,
        throughput_ops_per_sec: all.len() as f64 / run_seconds,
        found,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        p999_us: all.value_at_quantile(0.999),
        max_us: all.max(),
        args,
    };
    println!(
        "slatedb load: {:.0} records/s   run: {:.0} reads/s   found {} of {}   p50 {} us  p99 {} us  p99.9 {} us  max {} us",
        report.load_records_per_sec,
        report.throughput_ops_per_sec,
        report.found,
        report.args.ops,
        report.p50_us,
        report.p99_us,
        report.p999_us,
        report.max_us
    );
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
