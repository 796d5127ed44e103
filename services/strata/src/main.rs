//! The `strata` command line. Until the services land, it offers `quickstart`: create a
//! table in a local directory, write, read, reopen from the bucket and read again.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use clap::{Parser, Subcommand};
use strata_engine::{Db, DbConfig, EngineConfig, ScanOptions, Value};
use strata_objstore::ObjectStoreConfig;

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

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Quickstart { dir } => quickstart(dir).await,
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
