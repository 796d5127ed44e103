//! `s3bench`: the S3 tier's measurements. Loads two tables with a two-level column-group
//! layout, then with N compaction workers (in this process, each a `jobs::Worker` claiming
//! from the bucket like `strata-compactor`) times the cross-tier drain (NVMe -> S3 level 1,
//! one job per table) and CG-local compaction (S3 level 1 -> 2, one job per group), and
//! reports MB/s, write amplification and object-store requests per GB moved. Then it
//! reopens with an empty local directory and injected first-byte latency and times cold
//! and warm point lookups into the S3 levels.

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use clap::Parser;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use strata_engine::jobs::{Worker, WorkerConfig};
use strata_engine::{Db, DbConfig, EngineConfig, Table, Value};
use strata_objstore::{FaultConfig, ObjectStoreConfig};

#[derive(Parser, Debug, Clone, Serialize)]
struct Args {
    /// Rows per table (two tables).
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Bytes of the payload column.
    #[arg(long, default_value_t = 200)]
    payload_bytes: usize,
    /// Compaction workers.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Injected first-byte latency for the lookup phase, ms.
    #[arg(long, default_value_t = 15)]
    lookup_latency_ms: u64,
    /// Point lookups per pass.
    #[arg(long, default_value_t = 200)]
    lookups: usize,
    /// Working directory (default: temporary).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn schema() -> Schema {
    let mut f = vec![Field::new("id", DataType::Int64, false)];
    for c in ["c0", "c1", "c2", "c3"] {
        f.push(Field::new(c, DataType::Int64, true));
    }
    f.push(Field::new("payload", DataType::Utf8, true));
    Schema::new(f)
}

fn layout() -> Vec<Vec<Vec<String>>> {
    let g = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        vec![g(&["c0", "c1"]), g(&["c2", "c3", "payload"])],
        vec![g(&["c0"]), g(&["c1"]), g(&["c2", "c3", "payload"])],
    ]
}

fn batch(ids: &[i64], rng: &mut StdRng, payload: usize) -> Res<RecordBatch> {
    let mut cols: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.to_vec()))];
    for _ in 0..4 {
        let v: Vec<i64> = ids.iter().map(|_| rng.random_range(0..1_000_000)).collect();
        cols.push(Arc::new(Int64Array::from(v)));
    }
    let p: Vec<String> = ids
        .iter()
        .map(|_| {
            (0..payload)
                .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
                .collect()
        })
        .collect();
    cols.push(Arc::new(StringArray::from(p)));
    Ok(RecordBatch::try_new(Arc::new(schema()), cols)?)
}

async fn upsert(t: &Table, b: RecordBatch) -> Res<()> {
    loop {
        match t.upsert(b.clone()).await {
            Err(e) if e.kind() == strata_common::ErrorKind::Overloaded => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            r => return Ok(r.map(|_| ())?),
        }
    }
}

fn requests(db: &Db) -> u64 {
    let m = db.object_store_metrics();
    let mut n = 0;
    for op in ["get", "head", "put", "put_multipart", "list", "delete"] {
        for prefix in ["parquet", "sst", "jobs"] {
            n += m.requests(op, prefix);
        }
    }
    n
}

#[derive(Serialize, Default)]
struct Phase {
    name: String,
    seconds: f64,
    mb_read: f64,
    mb_written: f64,
    mb_per_sec: f64,
    requests: u64,
    requests_per_gb_moved: f64,
}

fn pct(h: &Histogram<u64>) -> (f64, f64) {
    (
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
    )
}

#[tokio::main]
async fn main() -> Res<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let bucket = dir.join("bucket");
    let mut engine = EngineConfig {
        root_prefix: "bench".into(),
        ..Default::default()
    };
    engine.jobs.inprocess_workers = 0;
    engine.jobs.poll_ms = 20;
    engine.parquet_file_bytes = 32 << 20;
    engine.gc.interval_ms = 0;
    // Nothing moves down on its own: the phases below move it.
    engine.level_bytes_base = 1 << 40;
    engine.s3_level_bytes_base = 1 << 40;
    engine.sorted_runs_max = 1000;
    let db = Db::open(DbConfig {
        store: ObjectStoreConfig::local(&bucket),
        local_dir: dir.join("nvme"),
        engine: engine.clone(),
    })
    .await?;
    let mut tables = Vec::new();
    let mut rng = StdRng::seed_from_u64(7);
    let load = Instant::now();
    for name in ["t0", "t1"] {
        db.create_table_with_layout(name, schema(), &["id"], layout())
            .await?;
        let t = db.table(name).await?;
        let ids: Vec<i64> = (0..args.rows as i64).collect();
        for chunk in ids.chunks(2000) {
            upsert(&t, batch(chunk, &mut rng, args.payload_bytes)?).await?;
        }
        t.flush().await?;
        tables.push(t);
    }
    let logical_mb = 2.0 * args.rows as f64 * (8.0 * 5.0 + args.payload_bytes as f64) / 1e6;
    eprintln!(
        "loaded {logical_mb:.0} MB in {:.1}s",
        load.elapsed().as_secs_f64()
    );

    let cancel = tokio_util::sync::CancellationToken::new();
    for i in 0..args.workers {
        let w = Worker::new(
            db.store().clone(),
            strata_manifest::Layout::new("bench"),
            WorkerConfig {
                name: format!("bench-{i}"),
                lease_ms: 60_000,
                heartbeat_ms: 5_000,
                poll_ms: 20,
                idle_poll_max_ms: 200,
                scratch: dir.join(format!("scratch-{i}")),
                debug_pause_per_file_ms: 0,
            },
            strata_common::clock::system(),
        );
        let c = cancel.clone();
        tokio::spawn(async move { w.run(c).await });
    }

    let stats = |ts: &[Table]| {
        ts.iter()
            .map(|t| {
                let s = t.shards().next().map(|s| s.stats()).unwrap_or_default();
                (s.s3_bytes_read, s.s3_bytes_written)
            })
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let mut phases = Vec::new();
    for phase in ["cross-tier", "cg-local"] {
        let (r0, w0) = stats(&tables);
        let q0 = requests(&db);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for t in &tables {
            if phase == "cross-tier" {
                let t = t.clone();
                tasks.push(tokio::spawn(async move { t.drain_to_bucket().await }));
            } else {
                for g in 0..2 {
                    let t = t.clone();
                    tasks.push(tokio::spawn(
                        async move { t.compact_column_group(0, g).await },
                    ));
                }
            }
        }
        for task in tasks {
            task.await??;
        }
        let seconds = started.elapsed().as_secs_f64();
        let (r1, w1) = stats(&tables);
        let (read, written) = ((r1 - r0) as f64 / 1e6, (w1 - w0) as f64 / 1e6);
        let reqs = requests(&db) - q0;
        phases.push(Phase {
            name: phase.into(),
            seconds,
            mb_read: read,
            mb_written: written,
            mb_per_sec: read / seconds,
            requests: reqs,
            requests_per_gb_moved: reqs as f64 / (read / 1000.0).max(1e-9),
        });
    }
    let (_, total_written) = stats(&tables);
    let s3_write_amplification = total_written as f64 / 1e6 / logical_mb;
    cancel.cancel();
    db.close().await;
    drop(db);

    // Lookups: a new process's view (empty local directory) with injected latency.
    let mut store = ObjectStoreConfig::local(&bucket);
    store.fault = Some(FaultConfig {
        latency_ms: args.lookup_latency_ms,
        ..Default::default()
    });
    let db = Db::open(DbConfig {
        store,
        local_dir: dir.join("nvme-cold"),
        engine,
    })
    .await?;
    let t = db.table("t0").await?;
    let keys: Vec<i64> = (0..args.lookups)
        .map(|_| rng.random_range(0..args.rows as i64))
        .collect();
    let mut first = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut cold = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut warm = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let gets = |db: &Db| db.object_store_metrics().requests("get", "parquet");
    let g0 = gets(&db);
    for (i, k) in keys.iter().enumerate() {
        let s = Instant::now();
        t.get(&[Value::Int(*k)], None, None)
            .await?
            .ok_or("missing row")?;
        let us = s.elapsed().as_micros() as u64;
        if i == 0 {
            first.record(us)?;
        } else {
            cold.record(us)?;
        }
    }
    let cold_gets = gets(&db) - g0;
    let g1 = gets(&db);
    for k in &keys {
        let s = Instant::now();
        t.get(&[Value::Int(*k)], None, None)
            .await?
            .ok_or("missing row")?;
        warm.record(s.elapsed().as_micros() as u64)?;
    }
    let warm_gets = gets(&db) - g1;
    db.close().await;

    let (cold_p50, cold_p99) = pct(&cold);
    let (warm_p50, warm_p99) = pct(&warm);
    let report = serde_json::json!({
        "args": args,
        "logical_mb": logical_mb,
        "phases": phases,
        "s3_write_amplification": s3_write_amplification,
        "lookup_first_ms": first.max() as f64 / 1000.0,
        "lookup_cold_p50_ms": cold_p50,
        "lookup_cold_p99_ms": cold_p99,
        "lookup_cold_gets_per_lookup": cold_gets as f64 / keys.len() as f64,
        "lookup_warm_p50_ms": warm_p50,
        "lookup_warm_p99_ms": warm_p99,
        "lookup_warm_gets_per_lookup": warm_gets as f64 / keys.len() as f64,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
