//! `strata-loadtest`: a YCSB-style driver against the embedded engine.
//!
//! Workloads A (50% read / 50% update), B (95/5), C (100% read), E (95% short scans / 5%
//! inserts), F (50% read / 50% read-modify-write); key distributions uniform, zipfian
//! (theta 0.99, scrambled) and hotspot; closed loop (N clients back to back) or open loop
//! (arrivals at a target rate, latency measured from the intended start so queueing is
//! counted). Workload W is write-only (100% updates), for Luo ch. 5's open-loop write test.
//! Writes refused as overloaded (too many sorted runs) are retried after a short sleep;
//! their latency includes the wait, and the report counts the refusals and the longest
//! stall. Reports throughput and p50/p99/p99.9 per operation as JSON and a table, with
//! samples over time of throughput, read sources and the tree (sorted runs, stalls, bytes
//! per tier) for plots (`plot_hits.py`, `plot_sustained.py`).

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use strata_engine::{
    Db, DbConfig, Durability, EngineConfig, ScanOptions, Table, Value, WriteOptions,
};
use strata_loadtest::{Dist, KeyChooser, Zipf, key, value};
use strata_objstore::{FaultConfig, ObjectStoreConfig, S3Config};

#[derive(Debug, Clone, Copy, ValueEnum, Serialize)]
enum Workload {
    A,
    B,
    C,
    E,
    F,
    W,
    /// HotRAP's read-write mix: 75% reads, 25% inserts of new keys.
    Rw,
}

#[derive(Debug, Clone, Copy, ValueEnum, Serialize)]
enum Store {
    Local,
    Memory,
    S3,
}

#[derive(Debug, Clone, Copy, ValueEnum, Serialize, PartialEq)]
enum Mode {
    Closed,
    Open,
}

#[derive(Parser, Debug, Clone, Serialize)]
#[command(about = "YCSB-style load against the embedded Strata engine")]
struct Args {
    /// Workload.
    #[arg(long, value_enum, default_value = "a")]
    workload: Workload,
    /// Key distribution.
    #[arg(long, value_enum, default_value = "zipfian")]
    distribution: Dist,
    /// Records loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Operations in the run phase.
    #[arg(long, default_value_t = 100_000)]
    ops: u64,
    /// Value size in bytes (YCSB: 1000; small records: 200).
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Concurrent clients (closed loop) or the in-flight cap (open loop).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Closed or open loop.
    #[arg(long, value_enum, default_value = "closed")]
    mode: Mode,
    /// Open loop: target operations per second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Object store backend.
    #[arg(long, value_enum, default_value = "local")]
    store: Store,
    /// Directory for the local bucket and the NVMe tier (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// S3 bucket (endpoint and credentials from the AWS SDK chain, e.g. AWS_ENDPOINT_URL).
    #[arg(long, default_value = "strata-test")]
    bucket: String,
    /// Injected first-byte latency on every object-store request, in ms.
    #[arg(long, default_value_t = 0)]
    store_latency_ms: u64,
    /// Write durability.
    #[arg(long, default_value = "remote")]
    durability: String,
    /// Hotspot: fraction of keys that are hot.
    #[arg(long, default_value_t = 0.05)]
    hot_fraction: f64,
    /// Hotspot: fraction of operations that go to hot keys.
    #[arg(long, default_value_t = 0.95)]
    hot_op_fraction: f64,
    /// After loading, flush memtables to SSTs, compact, and wait for the NVMe-to-S3 moves
    /// that are due (the NVMe levels back within their targets): the run starts from the
    /// tree a load leaves, as in HotRAP's experiments.
    #[arg(long)]
    flush_after_load: bool,
    /// After loading, move every record to the S3 levels (a tiered start: what is read
    /// from NVMe later was promoted there).
    #[arg(long)]
    drain_after_load: bool,
    /// Stages of the run (HotRAP §4.6's shifting hotspot), each an equal share of `--ops`:
    /// comma-separated `uniform`, `hotspot:F` (the first F of the keys hot) or
    /// `shifted:F` (F of the keys hot, starting half-way through the key space: no overlap
    /// with the earlier hot sets). Overrides `--distribution`.
    #[arg(long)]
    stages: Option<String>,
    /// How often the run samples throughput and the point reads' sources (ms).
    #[arg(long, default_value_t = 1000)]
    sample_ms: u64,
    /// Write the JSON report here too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// RNG seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Engine settings as JSON, merged over the defaults (e.g.
    /// `{"memtable_bytes_max":4194304,"s3_level_bytes_base":67108864}`).
    #[arg(long)]
    engine_json: Option<String>,
}

/// Retries a write refused as overloaded (the engine's backpressure) until accepted.
async fn put(
    table: &Table,
    pairs: &[(&[u8], &[u8])],
    opts: WriteOptions,
) -> Result<(), strata_engine::Error> {
    let mut wait = Duration::from_millis(1);
    loop {
        match table.kv_put(pairs, opts).await {
            Err(e) if e.kind() == strata_common::ErrorKind::Overloaded => {
                OVERLOAD_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(50));
            }
            r => return r.map(|_| ()),
        }
    }
}

static OVERLOAD_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Default)]
struct Hists {
    by_op: std::collections::BTreeMap<&'static str, Histogram<u64>>,
    errors: u64,
}

impl Hists {
    fn record(&mut self, op: &'static str, us: u64) {
        self.by_op
            .entry(op)
            .or_insert_with(|| Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"))
            .saturating_record(us.max(1));
    }
}

#[derive(Serialize)]
struct OpReport {
    op: String,
    count: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

#[derive(Serialize)]
struct Report {
    args: Args,
    load_seconds: f64,
    load_records_per_sec: f64,
    run_seconds: f64,
    throughput_ops_per_sec: f64,
    errors: u64,
    ops: Vec<OpReport>,
    object_store_puts: u64,
    wal_segments: u64,
    writes_per_wal_segment: f64,
    ssts_per_level: Vec<usize>,
    memtable_frozen_at_end: usize,
    overload_retries: u64,
    stalls: u64,
    longest_stall_us: u64,
    sorted_runs_at_end: usize,
    s3_jobs: u64,
    s3_bytes_read: u64,
    s3_bytes_written: u64,
    s3_files: Vec<Vec<usize>>,
    /// Point reads by the tier that answered them, over the whole run.
    reads_by_source: ReadSources,
    /// Share of point reads answered without S3 over the last tenth of the run's time.
    nvme_hit_rate_final: f64,
    /// Operations per second over the last tenth of the run's time.
    throughput_final: f64,
    /// Samples every `sample_ms`: seconds, operations done, reads by source (cumulative).
    samples: Vec<Sample>,
    /// The hotness tracker at the end (with `hotness.enabled`).
    tracker: Option<String>,
    /// The decoded-page cache of point lookups into columnar levels: (bytes, spans, hits,
    /// misses).
    page_cache: (u64, usize, u64, u64),
    /// Object-store requests (every attempt, retries included) and payload bytes by
    /// operation while loading, between the load and the run (`--flush-after-load`,
    /// `--drain-after-load`), and during the run, with what they cost at S3's list prices.
    requests_load: PhaseRequests,
    requests_settle: PhaseRequests,
    requests_run: PhaseRequests,
}

/// The object-store requests of one phase of `ops` operations.
#[derive(Serialize)]
struct PhaseRequests {
    by_op: std::collections::BTreeMap<&'static str, (u64, u64)>,
    requests: u64,
    ops: u64,
    requests_per_1000_ops: f64,
    s3_usd_per_million_ops: f64,
}

impl PhaseRequests {
    fn new(t: strata_objstore::RequestTotals, ops: u64) -> Self {
        let by_op = strata_objstore::instrumented::OPS
            .iter()
            .enumerate()
            .filter(|(i, _)| t.requests[*i] > 0)
            .map(|(i, op)| (*op, (t.requests[i], t.bytes[i])))
            .collect();
        let per = |x: f64| if ops == 0 { 0.0 } else { x / ops as f64 };
        PhaseRequests {
            by_op,
            requests: t.total(),
            ops,
            requests_per_1000_ops: per(t.total() as f64 * 1000.0),
            s3_usd_per_million_ops: per(t.s3_cost_usd() * 1e6),
        }
    }

    fn line(&self, what: &str) -> String {
        let kinds: Vec<String> = self
            .by_op
            .iter()
            .map(|(op, (n, _))| format!("{op} {n}"))
            .collect();
        format!(
            "{what}: {} requests ({}), {:.2} per 1,000 ops, ${:.4} per million ops at S3 list prices",
            self.requests,
            kinds.join(", "),
            self.requests_per_1000_ops,
            self.s3_usd_per_million_ops
        )
    }
}

#[derive(Serialize, Debug, Clone, Copy, Default)]
struct ReadSources {
    memtable: u64,
    nvme: u64,
    promotion_cache: u64,
    s3: u64,
}

impl ReadSources {
    fn of(t: &Table) -> Self {
        let mut r = ReadSources::default();
        for s in t.shards() {
            let s = s.stats();
            r.memtable += s.point_reads_memtable;
            r.nvme += s.point_reads_nvme;
            r.promotion_cache += s.point_reads_promotion_cache;
            r.s3 += s.point_reads_s3;
        }
        r
    }

    fn hit_rate_since(&self, earlier: &ReadSources) -> f64 {
        let fast = (self.memtable + self.nvme + self.promotion_cache)
            - (earlier.memtable + earlier.nvme + earlier.promotion_cache);
        let slow = self.s3 - earlier.s3;
        fast as f64 / ((fast + slow).max(1)) as f64
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    #[allow(
        clippy::disallowed_methods,
        reason = "samples carry wall-clock time to be lined up with other tools' records"
    )]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Serialize, Debug, Clone, Copy)]
struct Sample {
    seconds: f64,
    /// Wall-clock time of the sample (ms since the Unix epoch), to line samples up with
    /// what other tools (`perf`, `/proc` samplers) saw at the same moment.
    unix_ms: u64,
    ops: u64,
    /// Operations completed so far, and of those the ones slower than 100 ms.
    done: u64,
    slow: u64,
    reads: ReadSources,
    /// The tree at this moment: sorted runs (the most of any shard), write stalls so far,
    /// bytes in the row levels (SSTs) and in the columnar levels (Parquet), compaction debt.
    tree: TreeSample,
}

#[derive(Serialize, Debug, Clone, Copy, Default)]
struct TreeSample {
    sorted_runs: usize,
    stalls: u64,
    stall_us_max: u64,
    row_level_bytes: u64,
    columnar_level_bytes: u64,
    pending_compaction_bytes: u64,
}

impl TreeSample {
    fn of(t: &Table) -> Self {
        let mut r = TreeSample::default();
        for s in t.shards() {
            let s = s.stats();
            r.sorted_runs = r.sorted_runs.max(s.sorted_runs);
            r.stalls += s.stalls;
            r.stall_us_max = r.stall_us_max.max(s.stall_us_max);
            r.row_level_bytes += s.bytes_per_level.iter().sum::<u64>();
            r.columnar_level_bytes += s.s3_bytes.iter().flatten().sum::<u64>();
            r.pending_compaction_bytes += s.pending_compaction_bytes;
        }
        r
    }
}

fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// One stage of a run: a key chooser, and where its hot keys start (a shifted hotspot).
struct Stage {
    chooser: KeyChooser,
    offset: u64,
}

fn parse_stage(s: &str, records: u64, hot_op_fraction: f64) -> Result<Stage, String> {
    let (kind, f) = match s.split_once(':') {
        Some((k, f)) => (
            k,
            f.parse::<f64>()
                .map_err(|e| format!("stage {s:?}: hot fraction: {e}"))?,
        ),
        None => (s, 0.0),
    };
    let (dist, offset) = match kind {
        "uniform" => (Dist::Uniform, 0),
        "hotspot" => (Dist::Hotspot, 0),
        "shifted" => (Dist::Hotspot, records / 2),
        other => return Err(format!("stage {other:?}: uniform, hotspot:F or shifted:F")),
    };
    Ok(Stage {
        chooser: KeyChooser {
            dist,
            zipf: None,
            hot_fraction: f,
            hot_op_fraction,
        },
        offset,
    })
}

#[allow(clippy::too_many_arguments)]
async fn one_op(
    table: &Table,
    args: &Args,
    stages: &[Stage],
    i: u64,
    rng: &mut StdRng,
    inserted: &std::sync::atomic::AtomicU64,
    opts: WriteOptions,
) -> (&'static str, Result<(), strata_engine::Error>) {
    let n = inserted.load(std::sync::atomic::Ordering::Relaxed);
    let p: f64 = rng.random();
    let stage = &stages[((i * stages.len() as u64) / args.ops.max(1)) as usize % stages.len()];
    let k = key((stage.chooser.next(rng, n) + stage.offset) % n.max(1));
    let read = || async { table.kv_get(&k).await.map(|_| ()) };
    match args.workload {
        Workload::A | Workload::B | Workload::C => {
            let read_share = match args.workload {
                Workload::A => 0.5,
                Workload::B => 0.95,
                _ => 1.0,
            };
            if p < read_share {
                ("read", read().await)
            } else {
                let v = value(rng, args.record_bytes);
                ("update", put(table, &[(&k, &v)], opts).await)
            }
        }
        Workload::W => {
            let v = value(rng, args.record_bytes);
            ("update", put(table, &[(&k, &v)], opts).await)
        }
        Workload::Rw => {
            if p < 0.75 {
                ("read", read().await)
            } else {
                let n = inserted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (k, v) = (key(n), value(rng, args.record_bytes));
                ("insert", put(table, &[(&k, &v)], opts).await)
            }
        }
        Workload::E => {
            if p < 0.95 {
                let len = rng.random_range(1..=100);
                let r = table
                    .scan(
                        &ScanOptions {
                            start: Some(vec![Value::Bytes(k.clone())]),
                            end: None,
                            limit: len,
                            projection: None,
                        },
                        None,
                    )
                    .await
                    .map(|_| ());
                ("scan", r)
            } else {
                let i = inserted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let v = value(rng, args.record_bytes);
                ("insert", put(table, &[(&key(i), &v)], opts).await)
            }
        }
        Workload::F => {
            if p < 0.5 {
                ("read", read().await)
            } else {
                let r = async {
                    table.kv_get(&k).await?;
                    let v = value(rng, args.record_bytes);
                    put(table, &[(&k, &v)], opts).await
                }
                .await;
                ("read_modify_write", r)
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // As `strata serve` runs (strata_common::process).
    strata_common::process::huge_pages_from_env();
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let mut store = match args.store {
        Store::Local => ObjectStoreConfig::local(dir.join("bucket")),
        Store::Memory => ObjectStoreConfig::memory(),
        Store::S3 => ObjectStoreConfig::s3(S3Config {
            bucket: args.bucket.clone(),
            request_timeout_ms: 30_000,
            ..Default::default()
        }),
    };
    if args.store_latency_ms > 0 {
        store.fault = Some(FaultConfig {
            latency_ms: args.store_latency_ms,
            ..Default::default()
        });
    }
    let mut engine_value = serde_json::to_value(EngineConfig::default())?;
    if let Some(j) = &args.engine_json {
        let over: serde_json::Value = serde_json::from_str(j)?;
        merge(&mut engine_value, over);
    }
    let mut engine: EngineConfig = serde_json::from_value(engine_value)?;
    engine.root_prefix = format!("ycsb-{}", std::process::id());
    let durability = match args.durability.as_str() {
        "local" => Durability::Local,
        _ => Durability::Remote,
    };
    let opts = WriteOptions { durability };
    let db = Db::open(DbConfig {
        store,
        local_dir: dir.join("nvme"),
        engine,
    })
    .await?;
    db.create_kv_namespace("usertable").await?;
    let table = db.table("usertable").await?;

    // Load phase: batches of 100 records from `clients` concurrent loaders.
    let requests_start = db.object_store_metrics().totals();
    let load_started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut loaders = Vec::new();
    for c in 0..args.clients.max(1) {
        let (table, next, args) = (table.clone(), next.clone(), args.clone());
        loaders.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(args.seed + c as u64);
            loop {
                let start = next.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
                if start >= args.records {
                    return Ok::<_, strata_engine::Error>(());
                }
                let end = (start + 100).min(args.records);
                let kvs: Vec<(Vec<u8>, Vec<u8>)> = (start..end)
                    .map(|i| (key(i), value(&mut rng, args.record_bytes)))
                    .collect();
                let pairs: Vec<(&[u8], &[u8])> = kvs
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .collect();
                put(&table, &pairs, opts).await?;
            }
        }));
    }
    for l in loaders {
        l.await??;
    }
    let load_seconds = load_started.elapsed().as_secs_f64();
    let requests_loaded = db.object_store_metrics().totals();
    if args.flush_after_load {
        table.flush().await?;
        table.compact().await?;
        // Due S3 jobs settle (each commit may make more due); give up after ten minutes.
        let settle = std::time::Instant::now();
        let mut quiet = 0;
        while quiet < 3 && settle.elapsed() < Duration::from_secs(600) {
            let busy = table
                .shards()
                .map(|s| s.stats())
                .any(|s| s.jobs_outstanding > 0 || s.pending_compaction_bytes > 0);
            quiet = if busy { 0 } else { quiet + 1 };
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "settled after load in {:.1} s",
            settle.elapsed().as_secs_f64()
        );
    }
    if args.drain_after_load {
        table.drain_to_bucket().await?;
    }

    // Run phase.
    let stages: Vec<Stage> = match &args.stages {
        None => vec![Stage {
            chooser: KeyChooser {
                dist: args.distribution,
                zipf: matches!(args.distribution, Dist::Zipfian)
                    .then(|| Zipf::new(args.records, 0.99)),
                hot_fraction: args.hot_fraction,
                hot_op_fraction: args.hot_op_fraction,
            },
            offset: 0,
        }],
        Some(list) => list
            .split(',')
            .map(|s| parse_stage(s.trim(), args.records, args.hot_op_fraction))
            .collect::<Result<_, String>>()?,
    };
    let chooser = Arc::new(stages);
    let inserted = Arc::new(std::sync::atomic::AtomicU64::new(args.records));
    // Each client records into its own histograms, merged at the end: one shared lock
    // cost about a tenth of the CPU of a run of cached point reads (every release woke a
    // parked thread).
    let errors_printed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let issued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let requests_run_start = db.object_store_metrics().totals();
    let run_started = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let slow = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (table, issued, done, slow) =
            (table.clone(), issued.clone(), done.clone(), slow.clone());
        let every = Duration::from_millis(args.sample_ms.max(10));
        let ops_total = args.ops;
        tokio::spawn(async move {
            let mut samples = vec![Sample {
                seconds: 0.0,
                unix_ms: unix_ms(),
                ops: 0,
                done: 0,
                slow: 0,
                reads: ReadSources::of(&table),
                tree: TreeSample::of(&table),
            }];
            loop {
                tokio::time::sleep(every).await;
                let ops = issued
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .min(ops_total);
                samples.push(Sample {
                    seconds: run_started.elapsed().as_secs_f64(),
                    unix_ms: unix_ms(),
                    ops,
                    done: done.load(std::sync::atomic::Ordering::Relaxed),
                    slow: slow.load(std::sync::atomic::Ordering::Relaxed),
                    reads: ReadSources::of(&table),
                    tree: TreeSample::of(&table),
                });
                if ops >= ops_total {
                    return samples;
                }
            }
        })
    };
    let mut workers = Vec::new();
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    for c in 0..args.clients.max(1) {
        let (table, args, chooser, inserted, errors_printed, issued) = (
            table.clone(),
            args.clone(),
            chooser.clone(),
            inserted.clone(),
            errors_printed.clone(),
            issued.clone(),
        );
        let (done, slow) = (done.clone(), slow.clone());
        workers.push(tokio::spawn(async move {
            let mut h = Hists::default();
            let mut rng = StdRng::seed_from_u64(args.seed * 1000 + c as u64);
            loop {
                let i = issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= args.ops {
                    return h;
                }
                // Open loop: op i is due at i * interval; its latency counts from then.
                let intended = if args.mode == Mode::Open {
                    let due = run_started + interval * (i as u32);
                    tokio::time::sleep_until(due.into()).await;
                    due
                } else {
                    Instant::now()
                };
                let (op, r) = one_op(&table, &args, &chooser, i, &mut rng, &inserted, opts).await;
                let us = intended.elapsed().as_micros() as u64;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if us > 100_000 {
                    slow.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match r {
                    Ok(()) => h.record(op, us),
                    Err(e) => {
                        h.errors += 1;
                        if errors_printed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 5 {
                            eprintln!("{op} failed: {e}");
                        }
                    }
                }
            }
        }));
    }
    let mut hists = Hists::default();
    for w in workers {
        let h = w.await?;
        hists.errors += h.errors;
        for (op, oh) in h.by_op {
            match hists.by_op.get_mut(op) {
                Some(m) => m.add(&oh)?,
                None => {
                    hists.by_op.insert(op, oh);
                }
            }
        }
    }
    let run_seconds = run_started.elapsed().as_secs_f64();
    let requests_run_end = db.object_store_metrics().totals();
    let mut samples = sampler.await?;
    let end = Sample {
        seconds: run_seconds,
        unix_ms: unix_ms(),
        ops: args.ops,
        done: done.load(std::sync::atomic::Ordering::Relaxed),
        slow: slow.load(std::sync::atomic::Ordering::Relaxed),
        reads: ReadSources::of(&table),
        tree: TreeSample::of(&table),
    };
    samples.push(end);
    // The last tenth of the run: from the last sample at or before 90% of its time.
    let from = samples
        .iter()
        .rev()
        .find(|s| s.seconds <= run_seconds * 0.9)
        .copied()
        .unwrap_or(samples[0]);
    let nvme_hit_rate_final = end.reads.hit_rate_since(&from.reads);
    let throughput_final = (end.ops - from.ops) as f64 / (end.seconds - from.seconds).max(1e-9);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut ops = Vec::new();
    for (op, h) in &hists.by_op {
        all.add(h)?;
        ops.push(OpReport {
            op: op.to_string(),
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        });
    }
    ops.push(OpReport {
        op: "all".into(),
        count: all.len(),
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        p999_us: all.value_at_quantile(0.999),
        max_us: all.max(),
    });
    let stats = table.shards().next().map(|s| s.stats()).unwrap_or_default();
    let report = Report {
        load_seconds,
        load_records_per_sec: args.records as f64 / load_seconds,
        run_seconds,
        throughput_ops_per_sec: all.len() as f64 / run_seconds,
        errors: hists.errors,
        ops,
        object_store_puts: db.object_store_metrics().requests("put", "wal"),
        wal_segments: stats.wal_segments,
        writes_per_wal_segment: stats.writes_in_segments as f64 / stats.wal_segments.max(1) as f64,
        ssts_per_level: stats.ssts_per_level.clone(),
        memtable_frozen_at_end: stats.memtables_frozen,
        overload_retries: OVERLOAD_RETRIES.load(std::sync::atomic::Ordering::Relaxed),
        stalls: stats.stalls,
        longest_stall_us: stats.stall_us_max,
        sorted_runs_at_end: stats.sorted_runs,
        s3_jobs: stats.s3_jobs,
        s3_bytes_read: stats.s3_bytes_read,
        s3_bytes_written: stats.s3_bytes_written,
        s3_files: stats.s3_files.clone(),
        reads_by_source: end.reads,
        nvme_hit_rate_final,
        throughput_final,
        samples,
        tracker: db.hotness_stats().map(|t| format!("{t:?}")),
        page_cache: db.page_cache_stats(),
        requests_load: PhaseRequests::new(requests_loaded.since(&requests_start), args.records),
        requests_settle: PhaseRequests::new(requests_run_start.since(&requests_loaded), 0),
        requests_run: PhaseRequests::new(requests_run_end.since(&requests_run_start), all.len()),
        args: args.clone(),
    };
    println!(
        "workload {:?} {:?} {} records x {} B, {:?} loop, {} clients, store {:?}",
        args.workload,
        args.distribution,
        args.records,
        args.record_bytes,
        args.mode,
        args.clients,
        args.store
    );
    println!(
        "load: {:.0} records/s   run: {:.0} ops/s   errors: {}   ssts per level: {:?}",
        report.load_records_per_sec,
        report.throughput_ops_per_sec,
        report.errors,
        report.ssts_per_level
    );
    println!(
        "overload retries: {}   stalls: {}   longest stall: {} us   s3 jobs: {}   s3 files: {:?}",
        report.overload_retries,
        report.stalls,
        report.longest_stall_us,
        report.s3_jobs,
        report.s3_files
    );
    println!(
        "point reads: memtable {} nvme {} promotion cache {} s3 {}   NVMe hit rate (last tenth) {:.1}%   ops/s (last tenth) {:.0}",
        report.reads_by_source.memtable,
        report.reads_by_source.nvme,
        report.reads_by_source.promotion_cache,
        report.reads_by_source.s3,
        100.0 * report.nvme_hit_rate_final,
        report.throughput_final
    );
    println!(
        "object store (every attempt): {}; between load and run: {} requests",
        report.requests_load.line("load"),
        report.requests_settle.requests
    );
    println!("object store: {}", report.requests_run.line("run"));
    let (bytes, pages, hits, misses) = report.page_cache;
    println!(
        "decoded-page cache: {:.0} MB in {pages} spans, {hits} hits, {misses} misses",
        bytes as f64 / 1e6
    );
    println!(
        "{:<18} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "op", "count", "p50 us", "p99 us", "p99.9 us", "max us"
    );
    for o in &report.ops {
        println!(
            "{:<18} {:>9} {:>10} {:>10} {:>10} {:>10}",
            o.op, o.count, o.p50_us, o.p99_us, o.p999_us, o.max_us
        );
    }
    let json = serde_json::to_string_pretty(&report)?;
    println!("{json}");
    if let Some(path) = &args.json {
        std::fs::write(path, &json)?;
    }
    db.close().await;
    Ok(())
}
