//! `sqlbench`: the query service's measurements, side by side in one process and one run.
//!
//! - `analytic`: a table of `--rows` rows spread over every tier (the deepest S3 level, 1% of
//!   the keys rewritten into S3 level 0, 1% into an NVMe SST, 0.2% in the memtable) queried
//!   through Strata's SQL service, against DataFusion reading the same rows (the table's
//!   state at the snapshot, exported once) as plain Parquet files on the same local disk.
//!   Queries: a group-by aggregate, a filtered sum over a non-key column, a key-range sum.
//! - `laser`: LASER's Q3 (MAX over 3 of 30 columns, half the key range) and Q4 (sum of 10
//!   columns, 5% of the keys) on a 30-column integer table, loaded once per column-group
//!   layout (row-only, column-only, mixed), plus the same plain-Parquet baseline.
//!
//! Every query runs `--reps` times per side, alternating sides; the report gives medians and
//! the ratio of medians, and checks that both sides return the same answer.

/// mimalloc, not the system allocator: with glibc's malloc the open loop's write latency
/// was about twice as long at p50 and p99.9, and loads ran 40% slower (docs/BENCHMARKS.md,
/// "the global allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use clap::Parser;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_engine::{Db, DbConfig, EngineConfig, Table};
use strata_objstore::ObjectStoreConfig;
use strata_query::{QueryConfig, QueryService};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Which measurements: analytic, laser or all.
    #[arg(long, default_value = "all")]
    suite: String,
    /// Rows of the analytic table.
    #[arg(long, default_value_t = 10_000_000)]
    rows: i64,
    /// Rows of the LASER table (per layout).
    #[arg(long, default_value_t = 2_000_000)]
    laser_rows: i64,
    /// Runs of each query per side.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Work directory (bucket, NVMe directory, plain Parquet); a temporary one if unset.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rows per write call while loading.
    #[arg(long, default_value_t = 100_000)]
    batch: i64,
    /// Skip the updates into the upper tiers (every row only in the deepest S3 level):
    /// isolates the cost of reading the deep level from the cost of merging tiers.
    #[arg(long)]
    no_updates: bool,
    /// Scan without the overlay of the immutable upper tiers (`engine.scan_overlay_bytes`
    /// = 0): every scan merges them row by row, as before the overlay.
    #[arg(long)]
    no_overlay: bool,
    /// Run only the analytic queries whose label contains this text (for profiling one).
    #[arg(long)]
    only: Option<String>,
    /// Rows per Parquet data page in the S3 levels (the engine's default if unset).
    #[arg(long)]
    page_rows: Option<usize>,
    /// Largest Parquet dictionary page in the S3 levels (the engine's default if unset).
    #[arg(long)]
    dict_bytes: Option<usize>,
    /// Also print each side's `EXPLAIN ANALYZE` of every query (after the timed runs).
    #[arg(long)]
    explain: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROW_GROUP_ROWS: usize = 128 * 1024;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let root = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&root)?;
    println!(
        "sqlbench: {} cores, reps {}, work dir {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        args.reps,
        root.display()
    );
    if args.suite == "analytic" || args.suite == "all" {
        analytic(&args, &root.join("analytic")).await?;
    }
    if args.suite == "laser" || args.suite == "all" {
        laser(&args, &root.join("laser")).await?;
    }
    Ok(())
}

async fn open(args: &Args, dir: &Path) -> Result<Db, BoxError> {
    // Measured data must stay where the phases put it: no automatic S3 compaction. The
    // column-only layout has 30 runs per S3 level: allow them.
    let mut engine = EngineConfig {
        s3_level_bytes_base: 1 << 50,
        l0_settle_ms: 0,
        sorted_runs_max: 1000,
        ..Default::default()
    };
    if let Some(p) = args.page_rows {
        engine.parquet_page_rows = p;
    }
    if args.no_overlay {
        engine.scan_overlay_bytes = 0;
    }
    if let Some(d) = args.dict_bytes {
        engine.parquet_dictionary_page_bytes = d;
    }
    Ok(Db::open(DbConfig {
        store: ObjectStoreConfig::local(dir.join("bucket")),
        local_dir: dir.join("nvme"),
        engine,
    })
    .await?)
}

/// Writes `rows` rows made by `make(ids)` in batches.
async fn load(
    t: &Table,
    ids: &[i64],
    batch: usize,
    make: &dyn Fn(&[i64]) -> RecordBatch,
) -> Result<(), BoxError> {
    for chunk in ids.chunks(batch.max(1)) {
        t.upsert(make(chunk)).await?;
    }
    Ok(())
}

/// Loads a table and spreads it over every tier; returns seconds per phase.
async fn spread(
    args: &Args,
    t: &Table,
    rows: i64,
    batch: usize,
    groups: &[usize],
    make: &dyn Fn(&[i64]) -> RecordBatch,
) -> Result<Vec<(&'static str, f64)>, BoxError> {
    let mut phases = Vec::new();
    let mut rng = StdRng::seed_from_u64(7);
    let ids: Vec<i64> = (0..rows).collect();
    let t0 = Instant::now();
    load(t, &ids, batch, make).await?;
    t.flush().await?;
    phases.push(("load", t0.elapsed().as_secs_f64()));
    let t0 = Instant::now();
    t.drain_to_bucket().await?;
    phases.push(("drain NVMe -> S3 level 0", t0.elapsed().as_secs_f64()));
    let t0 = Instant::now();
    for g in groups {
        t.compact_column_group(0, *g).await?;
    }
    phases.push(("compact S3 level 0 -> 1", t0.elapsed().as_secs_f64()));
    if args.no_updates {
        return Ok(phases);
    }
    // 1% of the keys rewritten into S3 level 0, 1% into an SST, 0.2% (and new keys) in
    // the memtable.
    let mut some = |n: i64, extra: i64| {
        let mut v: Vec<i64> = (0..n).map(|_| rng.random_range(0..rows + extra)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let t0 = Instant::now();
    load(t, &some(rows / 100, 0), batch, make).await?;
    t.drain_to_bucket().await?;
    load(t, &some(rows / 100, 0), batch, make).await?;
    t.flush().await?;
    load(t, &some(rows / 500, rows / 100), batch, make).await?;
    phases.push((
        "updates into S3 level 0, SST, memtable",
        t0.elapsed().as_secs_f64(),
    ));
    Ok(phases)
}

/// Exports the table's rows at one snapshot to plain Parquet files under `dir`, in key
/// order, files of about 2.5M rows (like the S3 levels' files), row groups of 128K rows.
async fn export(db: &Db, table: &str, dir: &Path) -> Result<u64, BoxError> {
    std::fs::create_dir_all(dir)?;
    let view = db.view(table, None).await?;
    let handle = tokio::runtime::Handle::current();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<u64, BoxError> {
        let schema = view.schema.read_schema.clone();
        let projection: Vec<usize> = (0..schema.fields().len()).collect();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let per_file = 2_500_000u64;
        let (mut rows, mut files) = (0u64, 0usize);
        let mut writer: Option<ArrowWriter<std::fs::File>> = None;
        for shard in &view.shards {
            let mut batches = shard.batches(&[], None, &projection, 8192, &handle)?;
            while let Some(b) = batches.next_batch()? {
                if writer.is_none() {
                    let f = std::fs::File::create(dir.join(format!("part-{files:04}.parquet")))?;
                    writer = Some(ArrowWriter::try_new(
                        f,
                        schema.clone(),
                        Some(props.clone()),
                    )?);
                    files += 1;
                }
                if let Some(w) = writer.as_mut() {
                    w.write(&b)?;
                }
                rows += b.num_rows() as u64;
                if rows / per_file != (rows - b.num_rows() as u64) / per_file
                    && let Some(w) = writer.take()
                {
                    w.close()?;
                }
            }
        }
        if let Some(w) = writer.take() {
            w.close()?;
        }
        Ok(rows)
    })
    .await?
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn render(batches: &[RecordBatch]) -> Result<String, BoxError> {
    Ok(arrow::util::pretty::pretty_format_batches(batches)?.to_string())
}

/// Runs `sql` on both sides `reps` times, alternating; prints one report row.
async fn side_by_side(
    label: &str,
    sql: &str,
    strata: &QueryService,
    plain: &SessionContext,
    reps: usize,
) -> Result<(f64, f64), BoxError> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut answers = (String::new(), String::new());
    for i in 0..reps + 1 {
        let t0 = Instant::now();
        let (_, rs) = strata.collect(sql).await?;
        let ta = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let rp = plain.sql(sql).await?.collect().await?;
        let tb = t0.elapsed().as_secs_f64();
        if i == 0 {
            // The first run of each side warms caches; it is checked, not timed.
            answers = (render(&rs)?, render(&rp)?);
            continue;
        }
        a.push(ta);
        b.push(tb);
    }
    if answers.0 != answers.1 {
        return Err(format!(
            "{label}: answers differ\nstrata:\n{}\nplain:\n{}",
            answers.0, answers.1
        )
        .into());
    }
    let (ma, mb) = (median(&mut a), median(&mut b));
    println!(
        "| {label} | {:.1} | {:.1} | {:.2}x |",
        ma * 1000.0,
        mb * 1000.0,
        ma / mb
    );
    Ok((ma, mb))
}

/// Prints both sides' `EXPLAIN ANALYZE` of each query.
async fn explain(
    queries: &[(&str, String)],
    strata: &QueryService,
    plain: &SessionContext,
) -> Result<(), BoxError> {
    for (label, sql) in queries {
        let sql = format!("EXPLAIN ANALYZE {sql}");
        let (_, s) = strata.collect(&sql).await?;
        let p = plain.sql(&sql).await?.collect().await?;
        println!(
            "\n### {label}\nstrata:\n{}\nplain:\n{}",
            render(&s)?,
            render(&p)?
        );
    }
    Ok(())
}

fn analytic_schema() -> SchemaRef {
    Arc::new(Schema::new(
        ["id", "grp", "flag", "v", "w"]
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, *n != "id"))
            .collect::<Vec<_>>(),
    ))
}

fn analytic_rows(ids: &[i64]) -> RecordBatch {
    let mut rng = StdRng::seed_from_u64(ids.first().copied().unwrap_or(0) as u64 ^ 0x5eed);
    let n = ids.len();
    let col = |f: &mut dyn FnMut() -> i64| -> ArrayRef {
        Arc::new(Int64Array::from((0..n).map(|_| f()).collect::<Vec<_>>()))
    };
    let grp = col(&mut || rng.random_range(0..1000));
    let flag = col(&mut || rng.random_range(0..1000));
    let v = col(&mut || rng.random_range(0..1_000_000));
    let w = col(&mut || rng.random_range(-1000..1000));
    RecordBatch::try_new(
        analytic_schema(),
        vec![Arc::new(Int64Array::from(ids.to_vec())), grp, flag, v, w],
    )
    .expect("batch")
}

async fn analytic(args: &Args, dir: &Path) -> Result<(), BoxError> {
    println!("\n## analytic: {} rows over every tier", args.rows);
    let db = open(args, dir).await?;
    let schema = analytic_schema();
    db.create_table("events", (*schema).clone(), &["id"])
        .await?;
    let t = db.table("events").await?;
    let phases = spread(
        args,
        &t,
        args.rows,
        args.batch as usize,
        &[0],
        &analytic_rows,
    )
    .await?;
    for (p, s) in &phases {
        println!("phase {p}: {s:.1} s");
    }
    let q = QueryService::new(db.clone(), QueryConfig::default(), false);
    let plain_dir = dir.join("plain");
    let t0 = Instant::now();
    let exported = export(&db, "events", &plain_dir).await?;
    println!(
        "exported {exported} rows as plain Parquet in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let plain = SessionContext::new();
    plain
        .register_parquet(
            "events",
            plain_dir.to_str().ok_or("path")?,
            ParquetReadOptions::default(),
        )
        .await?;
    println!("\n| query | Strata median (ms) | plain Parquet median (ms) | ratio |");
    println!("|---|---|---|---|");
    let lo = args.rows / 2;
    let hi = lo + args.rows / 10;
    let queries = [
        (
            "group-by aggregate (1000 groups, all rows)",
            "SELECT grp, count(*) AS n, sum(v) AS sv, min(w) AS mw, max(flag) AS mf FROM events GROUP BY grp ORDER BY grp".to_string(),
        ),
        (
            "filtered sum (non-key predicate, 10%)",
            "SELECT count(*) AS n, sum(v) AS sv FROM events WHERE flag < 100".to_string(),
        ),
        (
            "empty key range (the fixed cost of a query)",
            "SELECT count(*) AS n FROM events WHERE id < 0".to_string(),
        ),
        (
            "key-range sum (10% of keys)",
            format!("SELECT count(*) AS n, sum(v) AS sv FROM events WHERE id >= {lo} AND id < {hi}"),
        ),
    ];
    let queries: Vec<_> = queries
        .into_iter()
        .filter(|(label, _)| args.only.as_deref().is_none_or(|o| label.contains(o)))
        .collect();
    for (label, sql) in &queries {
        side_by_side(label, sql, &q, &plain, args.reps).await?;
    }
    if args.explain {
        explain(&queries, &q, &plain).await?;
    }
    db.close().await;
    Ok(())
}

const LASER_COLS: usize = 30;

fn laser_schema() -> SchemaRef {
    let mut fields = vec![Field::new("k", DataType::Int64, false)];
    fields.extend((0..LASER_COLS).map(|i| Field::new(format!("c{i}"), DataType::Int64, true)));
    Arc::new(Schema::new(fields))
}

fn laser_rows(ids: &[i64]) -> RecordBatch {
    let mut rng = StdRng::seed_from_u64(ids.first().copied().unwrap_or(0) as u64 ^ 0x1a5e);
    let mut cols: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.to_vec()))];
    for _ in 0..LASER_COLS {
        cols.push(Arc::new(Int64Array::from(
            (0..ids.len())
                .map(|_| rng.random_range(0..1_000_000))
                .collect::<Vec<_>>(),
        )));
    }
    RecordBatch::try_new(laser_schema(), cols).expect("batch")
}

fn names(r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("c{i}")).collect()
}

async fn laser(args: &Args, dir: &Path) -> Result<(), BoxError> {
    let n = args.laser_rows;
    println!("\n## LASER Q3/Q4: {n} rows x {LASER_COLS} int columns over every tier");
    let layouts: Vec<(&str, Vec<Vec<Vec<String>>>)> = vec![
        ("row-only", vec![vec![names(0..LASER_COLS)]; 2]),
        (
            "column-only",
            vec![(0..LASER_COLS).map(|i| vec![format!("c{i}")]).collect(); 2],
        ),
        (
            "mixed (L0 row, L1 3 groups of 10)",
            vec![
                vec![names(0..LASER_COLS)],
                vec![names(0..10), names(10..20), names(20..30)],
            ],
        ),
    ];
    let q3 = format!(
        "SELECT max(c0) AS m0, max(c1) AS m1, max(c2) AS m2 FROM t WHERE k >= {} AND k < {}",
        n / 4,
        n / 4 + n / 2
    );
    let sums: Vec<String> = (0..10).map(|i| format!("sum(c{i}) AS s{i}")).collect();
    let q4 = format!(
        "SELECT {} FROM t WHERE k >= {} AND k < {}",
        sums.join(", "),
        n / 3,
        n / 3 + n / 20
    );
    let mut plain: Option<SessionContext> = None;
    let mut results = Vec::new();
    for (i, (name, layout)) in layouts.into_iter().enumerate() {
        let d = dir.join(format!("layout{i}"));
        let db = open(args, &d).await?;
        db.create_table_with_layout("t", (*laser_schema()).clone(), &["k"], layout.clone())
            .await?;
        let t = db.table("t").await?;
        let groups: Vec<usize> = (0..layout[0].len()).collect();
        let phases = spread(args, &t, n, args.batch as usize, &groups, &laser_rows).await?;
        let write_s: f64 = phases.iter().skip(1).take(2).map(|p| p.1).sum();
        println!("\n### {name}: drain + S3 compaction {write_s:.1} s ({phases:?})");
        let q = QueryService::new(db.clone(), QueryConfig::default(), false);
        if plain.is_none() {
            let pd = dir.join("plain");
            export(&db, "t", &pd).await?;
            let ctx = SessionContext::new();
            ctx.register_parquet(
                "t",
                pd.to_str().ok_or("path")?,
                ParquetReadOptions::default(),
            )
            .await?;
            plain = Some(ctx);
        }
        let ctx = plain.as_ref().ok_or("no baseline")?;
        println!("| query | Strata median (ms) | plain Parquet median (ms) | ratio |");
        println!("|---|---|---|---|");
        let a = side_by_side(&format!("Q3 {name}"), &q3, &q, ctx, args.reps).await?;
        let b = side_by_side(&format!("Q4 {name}"), &q4, &q, ctx, args.reps).await?;
        results.push((name, write_s, a, b));
        db.close().await;
    }
    println!("\n| layout | drain + S3 compaction (s) | Q3 (ms) | Q4 (ms) |");
    println!("|---|---|---|---|");
    for (name, w, a, b) in results {
        println!(
            "| {name} | {w:.1} | {:.1} | {:.1} |",
            a.0 * 1000.0,
            b.0 * 1000.0
        );
    }
    Ok(())
}
