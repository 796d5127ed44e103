//! `strata load`: bulk import of a CSV, NDJSON or Parquet file into a table over Arrow
//! Flight SQL's bulk ingest (`CommandStatementIngest`), with a progress bar and the
//! throughput at the end.
//!
//! The file is parsed into the table's own column types (asked from the server), so a
//! value that does not fit fails the load with the column and line named before anything
//! is sent for that batch. CSV columns are matched by the header's names, NDJSON fields by
//! name (unknown fields are an error), Parquet columns by name and cast; columns the file
//! lacks are null (a load writes whole rows). Each batch is one
//! atomic upsert; loading the same file again is harmless. With `--create-key` a missing
//! table is created from the file's inferred schema with that primary key.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, new_null_array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow_flight::error::FlightError;
use arrow_flight::sql::{
    CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::SqlClient;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Input file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Ndjson,
    /// Apache Parquet.
    Parquet,
}

impl InputFormat {
    /// The format a file name implies.
    fn of(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(Self::Csv),
            "ndjson" | "jsonl" | "json" => Some(Self::Ndjson),
            "parquet" | "pq" => Some(Self::Parquet),
            _ => None,
        }
    }
}

/// What `strata load` was asked to do.
#[derive(Debug, Clone)]
pub struct LoadArgs {
    pub flight: String,
    pub key: Option<String>,
    pub ca_cert: Option<PathBuf>,
    pub table: String,
    pub file: PathBuf,
    pub format: Option<InputFormat>,
    pub batch_rows: usize,
    pub create_key: Vec<String>,
}

/// Counts the bytes read through it (progress of text formats).
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The CSV header's column names (the first line, parsed with the CSV quoting rules).
fn csv_header(path: &Path) -> Result<Vec<String>, BoxError> {
    let mut line = String::new();
    std::io::BufRead::read_line(&mut BufReader::new(File::open(path)?), &mut line)?;
    if line.trim().is_empty() {
        return Err(format!("{}: no header row", path.display()).into());
    }
    let (schema, _) = arrow::csv::reader::Format::default()
        .with_header(true)
        .infer_schema(std::io::Cursor::new(line.as_bytes()), Some(0))?;
    Ok(schema.fields().iter().map(|f| f.name().clone()).collect())
}

/// The table's columns in `names` order (the file's), refusing unknown names.
fn by_names(table: &Schema, names: &[String], what: &str) -> Result<SchemaRef, BoxError> {
    let fields = names
        .iter()
        .map(|n| {
            table.field_with_name(n).cloned().map_err(|_| -> BoxError {
                format!(
                    "{what}: column {n:?} is not in the table (columns: {})",
                    table
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .into()
            })
        })
        .collect::<Result<Vec<Field>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// The schema a new table gets from the file: inferred (CSV, NDJSON) or the file's
/// (Parquet), key columns not nullable.
fn inferred(path: &Path, format: InputFormat, key: &[String]) -> Result<SchemaRef, BoxError> {
    let schema = match format {
        InputFormat::Csv => {
            arrow::csv::reader::Format::default()
                .with_header(true)
                .infer_schema(File::open(path)?, Some(10_000))?
                .0
        }
        InputFormat::Ndjson => {
            let mut r = BufReader::new(File::open(path)?);
            arrow::json::reader::infer_json_schema(&mut r, Some(10_000))?.0
        }
        InputFormat::Parquet => {
            let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(path)?,
            )?;
            b.schema().as_ref().clone()
        }
    };
    for k in key {
        if schema.field_with_name(k).is_err() {
            return Err(format!("--create-key {k}: the file has no column {k:?}").into());
        }
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let is_key = key.iter().any(|k| k == f.name());
            f.as_ref().clone().with_nullable(!is_key)
        })
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// Reads the file in batches of the table's types, sending each to `tx`; the bytes or rows
/// done go to `done` for the progress bar.
fn read_file(
    path: &Path,
    format: InputFormat,
    table: &Schema,
    batch_rows: usize,
    done: Arc<AtomicU64>,
    tx: tokio::sync::mpsc::Sender<Result<RecordBatch, FlightError>>,
) -> Result<(), BoxError> {
    let what = path.display().to_string();
    // A load writes whole rows: columns the file lacks are null.
    let send = |b: RecordBatch| -> Result<bool, BoxError> {
        let columns: Vec<ArrayRef> = table
            .fields()
            .iter()
            .map(|f| {
                b.column_by_name(f.name())
                    .cloned()
                    .unwrap_or_else(|| new_null_array(f.data_type(), b.num_rows()))
            })
            .collect();
        let full = RecordBatch::try_new_with_options(
            Arc::new(table.clone()),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
        );
        // A null in a non-nullable column is the server's to report, with the row.
        let full = match full {
            Ok(f) => f,
            Err(_) => b,
        };
        Ok(tx.blocking_send(Ok(full)).is_ok())
    };
    match format {
        InputFormat::Csv => {
            let schema = by_names(table, &csv_header(path)?, &what)?;
            let reader = Counting {
                inner: File::open(path)?,
                read: done,
            };
            let csv = arrow::csv::ReaderBuilder::new(schema)
                .with_header(true)
                .with_batch_size(batch_rows)
                .build(reader)?;
            for b in csv {
                let b = b.map_err(|e| format!("{what}: {e}"))?;
                if !send(b)? {
                    break;
                }
            }
        }
        InputFormat::Ndjson => {
            let reader = BufReader::new(Counting {
                inner: File::open(path)?,
                read: done,
            });
            let json = arrow::json::ReaderBuilder::new(Arc::new(table.clone()))
                .with_batch_size(batch_rows)
                .with_strict_mode(true)
                .build(reader)?;
            for b in json {
                let b = b.map_err(|e| format!("{what}: {e}"))?;
                if !send(b)? {
                    break;
                }
            }
        }
        InputFormat::Parquet => {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(path)?,
            )?
            .with_batch_size(batch_rows)
            .build()?;
            for b in reader {
                let b = b.map_err(|e| format!("{what}: {e}"))?;
                let names: Vec<String> = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let schema = by_names(table, &names, &what)?;
                let columns = b
                    .columns()
                    .iter()
                    .zip(schema.fields())
                    .map(|(c, f)| {
                        arrow::compute::cast(c, f.data_type()).map_err(|e| -> BoxError {
                            format!("{what}: column {}: {e}", f.name()).into()
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                done.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                if !send(RecordBatch::try_new(schema, columns)?)? {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// `strata load`.
pub async fn load(args: LoadArgs) -> Result<(), BoxError> {
    let format = match args.format.or_else(|| InputFormat::of(&args.file)) {
        Some(f) => f,
        None => {
            return Err(format!(
                "{}: cannot tell the format from the name; pass --format csv|ndjson|parquet",
                args.file.display()
            )
            .into());
        }
    };
    let f = File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let file_bytes = f.metadata()?.len();
    let mut client =
        SqlClient::connect(&args.flight, args.key.as_deref(), args.ca_cert.as_deref()).await?;
    let (schema, create) = match client.table_schema(&args.table).await? {
        Some(s) => (s, false),
        None if !args.create_key.is_empty() => {
            (inferred(&args.file, format, &args.create_key)?, true)
        }
        None => {
            return Err(format!(
                "no table {}; create it first, or pass --create-key COLUMN to create it from the file",
                args.table
            )
            .into());
        }
    };
    // Progress: bytes of text files, rows of Parquet files.
    let total = match format {
        InputFormat::Parquet => {
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(File::open(
                &args.file,
            )?)?
            .metadata()
            .file_metadata()
            .num_rows() as u64
        }
        _ => file_bytes,
    };
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(match format {
            InputFormat::Parquet => {
                "{spinner} [{elapsed_precise}] [{bar:40}] {pos}/{len} rows ({per_sec}, {eta} left)"
            }
            _ => "{spinner} [{elapsed_precise}] [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        })?
        .progress_chars("=> "),
    );
    let done = Arc::new(AtomicU64::new(0));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, FlightError>>(4);
    let rows_sent = Arc::new(AtomicU64::new(0));
    let reader = {
        let (path, done, schema) = (args.file.clone(), done.clone(), schema.clone());
        let batch_rows = args.batch_rows.max(1);
        tokio::task::spawn_blocking(move || {
            let r = read_file(&path, format, &schema, batch_rows, done, tx.clone());
            if let Err(e) = &r {
                let _ = tx.blocking_send(Err(FlightError::ExternalError(e.to_string().into())));
            }
            r
        })
    };
    let stream = {
        let (bar, done, rows_sent) = (bar.clone(), done.clone(), rows_sent.clone());
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .inspect(move |r| {
                if let Ok(b) = r {
                    rows_sent.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                }
                bar.set_position(done.load(Ordering::Relaxed));
            })
    };
    let started = Instant::now();
    let mut options = std::collections::HashMap::new();
    if create {
        options.insert("primary_key".to_string(), args.create_key.join(","));
    }
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: if create {
                TableNotExistOption::Create as i32
            } else {
                TableNotExistOption::Fail as i32
            },
            if_exists: TableExistsOption::Append as i32,
        }),
        table: args.table.clone(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options,
    };
    let result = client.ingest(command, stream).await;
    let read = reader.await?;
    bar.finish_and_clear();
    read?;
    let written = result?;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let rows = written.max(0) as u64;
    println!(
        "loaded {rows} rows ({:.1} MiB of {}) into {}{} in {secs:.2} s: {:.0} rows/s, {:.1} MiB/s",
        file_bytes as f64 / (1 << 20) as f64,
        args.file.display(),
        args.table,
        if create { " (created)" } else { "" },
        rows as f64 / secs,
        file_bytes as f64 / (1 << 20) as f64 / secs,
    );
    let sent = rows_sent.load(Ordering::Relaxed);
    if sent != rows {
        return Err(format!("the server wrote {rows} rows of the {sent} sent").into());
    }
    Ok(())
}
