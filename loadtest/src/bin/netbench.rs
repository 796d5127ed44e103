//! `netbench`: YCSB workloads A (50% read / 50% update), B (95/5) and C (100% read) over
//! the network, side by side with the embedded engine, in one run:
//!
//! - `embedded`: `Table::get` / `Table::upsert` in this process;
//! - `http`: the data API of a `strata serve` process (`GET .../rows/get`, `POST .../rows`
//!   with one JSON row), keep-alive connections;
//! - `grpc`: the same server's gRPC data API (`Get`, `Write` with one row as Arrow IPC),
//!   one HTTP/2 channel per client.
//!
//! Every target gets a fresh table `usertable(k BIGINT PRIMARY KEY, v VARCHAR)` in its own
//! directory, loaded with the same records (100 rows per write), then runs each workload
//! with the same seeds. Closed loop; latency per operation from the client's side, and for
//! the server's targets its own mean time per read and per write (from its `/metrics`:
//! `strata_http_request_seconds` or `strata_grpc_request_seconds` of the operation), so the
//! network path's share is the difference. `--clients 1` measures single-operation latency.

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_engine::{Db, DbConfig, EngineConfig, Table, Value};
use strata_loadtest::{Dist, KeyChooser, Zipf};
use strata_objstore::ObjectStoreConfig;

mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("strata.v1");
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Target {
    Embedded,
    Http,
    Grpc,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Workload {
    A,
    B,
    C,
}

#[derive(Parser, Debug, Clone)]
#[command(name = "netbench")]
struct Args {
    /// Records loaded per target.
    #[arg(long, default_value_t = 20_000)]
    records: u64,
    /// Operations per workload.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Bytes of the value column.
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Key distribution.
    #[arg(long, value_enum, default_value = "zipfian")]
    distribution: Dist,
    /// Targets, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "embedded,http,grpc"
    )]
    targets: Vec<Target>,
    /// Workloads, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a,b,c")]
    workloads: Vec<Workload>,
    /// The `strata` binary (default: next to this one).
    #[arg(long)]
    strata: Option<PathBuf>,
    /// Work directory (a temporary one if unset).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// RNG seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Durability of the run's writes (the load is always `remote`): `remote` (acknowledged
    /// once in the bucket) or `local` (once synced to the node's disk).
    #[arg(long, value_enum, default_value = "remote")]
    durability: DurabilityArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DurabilityArg {
    Remote,
    Local,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

fn value(rng: &mut StdRng, len: usize) -> String {
    (0..len)
        .map(|_| rng.random_range(b'a'..=b'z') as char)
        .collect()
}

fn batch(keys: &[i64], values: &[String]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(keys.to_vec())) as ArrayRef,
            Arc::new(StringArray::from_iter_values(values)),
        ],
    )
    .expect("batch")
}

fn ipc(b: &RecordBatch) -> Result<Vec<u8>, BoxError> {
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &b.schema())?;
    w.write(b)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// One client's connection to a target.
#[derive(Clone)]
enum Client {
    Embedded(Table),
    Http {
        client: reqwest::Client,
        base: String,
    },
    Grpc(pb::data_client::DataClient<tonic::transport::Channel>),
}

impl Client {
    async fn read(&mut self, k: i64) -> Result<(), BoxError> {
        match self {
            Client::Embedded(t) => {
                t.get(&[Value::Int(k)], None, None).await?;
            }
            Client::Http { client, base } => {
                let r = client
                    .get(format!("{base}/v1/tables/usertable/rows/get?key={k}"))
                    .send()
                    .await?;
                let status = r.status();
                r.bytes().await?;
                if !status.is_success() && status.as_u16() != 404 {
                    return Err(format!("read: HTTP {status}").into());
                }
            }
            Client::Grpc(c) => {
                let r = c
                    .get(pb::GetRequest {
                        table: "usertable".into(),
                        key: vec![k.to_string()],
                        columns: vec![],
                    })
                    .await;
                if let Err(e) = r
                    && e.code() != tonic::Code::NotFound
                {
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    async fn write(
        &mut self,
        keys: &[i64],
        values: &[String],
        durability: DurabilityArg,
    ) -> Result<(), BoxError> {
        let local = durability == DurabilityArg::Local;
        match self {
            Client::Embedded(t) => {
                let durability = if local {
                    strata_engine::Durability::Local
                } else {
                    strata_engine::Durability::Remote
                };
                let opts = strata_engine::WriteOptions { durability };
                t.write(
                    &[strata_engine::Mutation::Upsert(batch(keys, values))],
                    opts,
                )
                .await?;
            }
            Client::Http { client, base } => {
                let rows: Vec<serde_json::Value> = keys
                    .iter()
                    .zip(values)
                    .map(|(k, v)| serde_json::json!({"k": k, "v": v}))
                    .collect();
                let query = if local { "?durability=local" } else { "" };
                let r = client
                    .post(format!("{base}/v1/tables/usertable/rows{query}"))
                    .json(&rows)
                    .send()
                    .await?;
                let status = r.status();
                let body = r.bytes().await?;
                if !status.is_success() {
                    return Err(format!(
                        "write: HTTP {status}: {}",
                        String::from_utf8_lossy(&body)
                    )
                    .into());
                }
            }
            Client::Grpc(c) => {
                c.write(pb::WriteRequest {
                    table: "usertable".into(),
                    kind: pb::WriteKind::Upsert as i32,
                    arrow_ipc: ipc(&batch(keys, values))?,
                    durability: if local {
                        pb::Durability::Local as i32
                    } else {
                        pb::Durability::Remote as i32
                    },
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// A `strata serve` process (killed when dropped).
struct Server {
    child: Child,
    http: String,
    flight: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(bin: &PathBuf, dir: &std::path::Path) -> Result<Server, BoxError> {
    use std::io::BufRead;
    let mut child = Command::new(bin)
        .args(["serve", "--dir"])
        .arg(dir)
        .args([
            "--http",
            "127.0.0.1:0",
            "--flight",
            "127.0.0.1:0",
            "--postgres",
            "",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("stdout")?).lines();
    let mut addr = |prefix: &str| -> Result<String, BoxError> {
        let line = lines.next().ok_or("server exited")??;
        Ok(line
            .strip_prefix(prefix)
            .ok_or("unexpected line")?
            .to_string())
    };
    let http = addr("http listening on ")?;
    let flight = addr("flight listening on ")?;
    Ok(Server {
        child,
        http,
        flight,
    })
}

/// Clients of `target`, with the table created; the server and database they need alive.
async fn connect(
    target: Target,
    args: &Args,
    dir: &std::path::Path,
) -> Result<(Vec<Client>, Option<Server>, Option<Db>), BoxError> {
    let n = args.clients.max(1);
    match target {
        Target::Embedded => {
            let db = Db::open(DbConfig {
                store: ObjectStoreConfig::local(dir.join("bucket")),
                local_dir: dir.join("nvme"),
                engine: EngineConfig::default(),
            })
            .await?;
            db.create_table("usertable", (*schema()).clone(), &["k"])
                .await?;
            let t = db.table("usertable").await?;
            Ok((
                (0..n).map(|_| Client::Embedded(t.clone())).collect(),
                None,
                Some(db),
            ))
        }
        Target::Http | Target::Grpc => {
            let bin = match &args.strata {
                Some(b) => b.clone(),
                None => std::env::current_exe()?
                    .parent()
                    .ok_or("no directory")?
                    .join("strata"),
            };
            let server = start_server(&bin, dir)?;
            let base = format!("http://{}", server.http);
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(n)
                .build()?;
            let r = http
                .post(format!("{base}/v1/tables"))
                .json(&serde_json::json!({"name": "usertable", "columns": [
                    {"name": "k", "type": "int64", "nullable": false},
                    {"name": "v", "type": "string"}], "primary_key": ["k"]}))
                .send()
                .await?;
            if !r.status().is_success() {
                return Err(format!("create table: {}", r.text().await?).into());
            }
            let mut clients = Vec::with_capacity(n);
            for _ in 0..n {
                clients.push(match target {
                    Target::Http => Client::Http {
                        client: http.clone(),
                        base: base.clone(),
                    },
                    _ => Client::Grpc(
                        pb::data_client::DataClient::connect(format!("http://{}", server.flight))
                            .await?,
                    ),
                });
            }
            Ok((clients, Some(server), None))
        }
    }
}

struct Outcome {
    ops_per_sec: f64,
    read: Histogram<u64>,
    update: Histogram<u64>,
    errors: u64,
}

async fn run(clients: &[Client], args: &Args, w: Workload) -> Result<Outcome, BoxError> {
    let read_share = match w {
        Workload::A => 0.5,
        Workload::B => 0.95,
        Workload::C => 1.0,
    };
    let chooser = Arc::new(KeyChooser {
        dist: args.distribution,
        zipf: (args.distribution == Dist::Zipfian).then(|| Zipf::new(args.records, 0.99)),
        hot_fraction: 0.05,
        hot_op_fraction: 0.95,
    });
    let issued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let (mut c, chooser, issued, args) =
            (c.clone(), chooser.clone(), issued.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(args.seed * 1000 + i as u64);
            let mut read = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut update = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut errors = 0u64;
            while issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < args.ops {
                let k = chooser.next(&mut rng, args.records) as i64;
                let t0 = Instant::now();
                let (r, h) = if rng.random::<f64>() < read_share {
                    (c.read(k).await, &mut read)
                } else {
                    let v = value(&mut rng, args.value_bytes);
                    (c.write(&[k], &[v], args.durability).await, &mut update)
                };
                match r {
                    Ok(()) => h.record(t0.elapsed().as_micros().max(1) as u64)?,
                    Err(e) => {
                        errors += 1;
                        if errors <= 3 {
                            eprintln!("operation failed: {e}");
                        }
                    }
                }
            }
            Ok::<_, BoxError>((read, update, errors))
        }));
    }
    let mut out = Outcome {
        ops_per_sec: 0.0,
        read: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        update: Histogram::new_with_bounds(1, 60_000_000, 3)?,
        errors: 0,
    };
    for t in tasks {
        let (r, u, e) = t.await??;
        out.read.add(r)?;
        out.update.add(u)?;
        out.errors += e;
    }
    out.ops_per_sec = (out.read.len() + out.update.len()) as f64 / started.elapsed().as_secs_f64();
    Ok(out)
}

/// (seconds, count) of the server's own time for reads and for writes of `target`, from its
/// `/metrics`.
async fn server_times(base: &str, target: Target) -> Result<[(f64, f64); 2], BoxError> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await?
        .text()
        .await?;
    let ops = match target {
        Target::Http => [
            (
                "strata_http_request_seconds",
                "GET /v1/tables/{table}/rows/get",
            ),
            (
                "strata_http_request_seconds",
                "POST /v1/tables/{table}/rows",
            ),
        ],
        _ => [
            ("strata_grpc_request_seconds", "/strata.v1.Data/Get"),
            ("strata_grpc_request_seconds", "/strata.v1.Data/Write"),
        ],
    };
    let value = |family: &str, op: &str, kind: &str| -> f64 {
        let prefix = format!("{family}_{kind}{{op=\"{op}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok(ops.map(|(family, op)| (value(family, op, "sum"), value(family, op, "count"))))
}

/// Mean microseconds per request between two [`server_times`] readings.
fn server_mean(before: (f64, f64), after: (f64, f64)) -> String {
    let n = after.1 - before.1;
    if n <= 0.0 {
        return "-".into();
    }
    format!("{:.0}", (after.0 - before.0) / n * 1e6)
}

fn pct(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "-".into();
    }
    format!(
        "{} / {} / {}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999)
    )
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let root = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    println!(
        "netbench: {} records x {} B values, {} ops per workload, {} clients, {:?} keys",
        args.records, args.value_bytes, args.ops, args.clients, args.distribution
    );
    println!(
        "\n| target | workload | ops/s | read p50 / p99 / p99.9 (µs) | update p50 / p99 / p99.9 (µs) | server mean read / update (µs) | errors |"
    );
    println!("|---|---|---|---|---|---|---|");
    for target in &args.targets {
        let dir = root.join(format!("{target:?}").to_lowercase());
        std::fs::create_dir_all(&dir)?;
        let (clients, server, db) = connect(*target, &args, &dir).await?;
        let base = server.as_ref().map(|s| format!("http://{}", s.http));
        // Load: 100 rows per write, from every client.
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let t0 = Instant::now();
        let mut loaders = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            let (mut c, next, args) = (c.clone(), next.clone(), args.clone());
            loaders.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(args.seed + i as u64);
                loop {
                    let start = next.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
                    if start >= args.records {
                        return Ok::<_, BoxError>(());
                    }
                    let end = (start + 100).min(args.records);
                    let keys: Vec<i64> = (start as i64..end as i64).collect();
                    let values: Vec<String> = keys
                        .iter()
                        .map(|_| value(&mut rng, args.value_bytes))
                        .collect();
                    c.write(&keys, &values, DurabilityArg::Remote).await?;
                }
            }));
        }
        for l in loaders {
            l.await??;
        }
        let load = args.records as f64 / t0.elapsed().as_secs_f64();
        println!("| {target:?} | load (100 rows per write) | {load:.0} rows/s | | | | |");
        for w in &args.workloads {
            let before = match &base {
                Some(b) => Some(server_times(b, *target).await?),
                None => None,
            };
            let o = run(&clients, &args, *w).await?;
            let server = match (&base, before) {
                (Some(b), Some(before)) => {
                    let after = server_times(b, *target).await?;
                    format!(
                        "{} / {}",
                        server_mean(before[0], after[0]),
                        server_mean(before[1], after[1])
                    )
                }
                _ => "-".into(),
            };
            println!(
                "| {target:?} | {w:?} | {:.0} | {} | {} | {server} | {} |",
                o.ops_per_sec,
                pct(&o.read),
                pct(&o.update),
                o.errors
            );
        }
        drop(server);
        drop(clients);
        if let Some(db) = db {
            db.close().await;
        }
    }
    Ok(())
}
