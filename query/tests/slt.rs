//! sqllogictest files (`query/slt/*.slt`) against a fresh database each, on a local
//! directory bucket, with the data spread over all tiers by `strata <command> <table>`
//! statements the harness runs on the engine:
//! `flush` (memtable -> L0), `compact` (NVMe levels), `drain` (NVMe -> S3 level 1 and down
//! to the last S3 level), `gc` (collect unreferenced objects).
//!
//! Every query is also asked as the PostgreSQL port asks it (its statement rewrites, its
//! sessions with `pg_catalog`), and must answer the same rows: the port's rewrites of
//! PostgreSQL's dialect must never change what a user's query means.

mod common;

use std::path::PathBuf;

use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use strata_engine::Db;
use strata_query::{QueryError, QueryService};

struct Strata {
    db: Db,
    q: QueryService,
    /// The same service as the PostgreSQL port's sessions see it.
    pg: QueryService,
    parser: datafusion_pg_catalog::sql::PostgresCompatibilityParser,
}

#[async_trait::async_trait]
impl AsyncDB for Strata {
    type Error = QueryError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let words: Vec<&str> = sql.split_whitespace().collect();
        if words.first() == Some(&"strata") {
            self.command(&words[1..]).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let (schema, batches) = self.q.collect(sql).await?;
        let is_count = schema.fields().len() == 1 && schema.field(0).name() == "count";
        // sqllogictest convention: an empty string shows as (empty).
        let rows = shown(&batches);
        if is_count && rows.len() == 1 && !sql.trim_start().to_lowercase().starts_with("select") {
            let n = rows[0][0].parse::<u64>().unwrap_or(0);
            return Ok(DBOutput::StatementComplete(n));
        }
        self.same_over_postgres(sql, &rows).await?;
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; schema.fields().len()],
            rows,
        })
    }

    async fn shutdown(&mut self) {
        self.db.close().await;
    }
}

/// The rows of `batches` as sqllogictest shows them (an empty string as `(empty)`).
fn shown(batches: &[arrow::array::RecordBatch]) -> Vec<Vec<String>> {
    common::rows(batches)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| if v.is_empty() { "(empty)".into() } else { v })
                .collect()
        })
        .collect()
}

impl Strata {
    /// Runs the query `sql`, which answered `rows`, as the PostgreSQL port runs it, and
    /// fails unless it answers the same.
    async fn same_over_postgres(&self, sql: &str, rows: &[Vec<String>]) -> Result<(), QueryError> {
        use strata_query::postgres::statements::{Command, parse};
        let commands = parse(&self.parser, sql)?;
        let [Command::Sql(s)] = commands.as_slice() else {
            return Ok(());
        };
        if s.changes {
            return Ok(());
        }
        let fail = |what: String| {
            QueryError::new(
                strata_query::QueryErrorKind::Internal,
                format!(
                    "over the PostgreSQL port, {sql}\n(asked as {}): {what}",
                    s.text
                ),
            )
        };
        let (_, batches) = self
            .pg
            .collect(&s.text)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let got = shown(&batches);
        if got != rows {
            return Err(fail(format!("answered {got:?}, not {rows:?}")));
        }
        Ok(())
    }

    async fn command(&self, words: &[&str]) -> Result<(), QueryError> {
        let [cmd, table] = words else {
            return Err(QueryError::new(
                strata_query::QueryErrorKind::Invalid,
                format!("harness command: strata <flush|compact|drain|gc> <table>, got {words:?}"),
            ));
        };
        let t = self.db.table(table).await?;
        match *cmd {
            "flush" => t.flush().await?,
            "compact" => {
                t.flush().await?;
                t.compact().await?
            }
            "drain" => {
                t.flush().await?;
                t.drain_to_bucket().await?;
                let levels = t.table_schema().groups.len();
                for level in 0..levels.saturating_sub(1) {
                    for g in 0..t.table_schema().groups[level].len() {
                        t.compact_column_group(level, g).await?;
                    }
                }
                t.wait_jobs().await?
            }
            "gc" => {
                t.gc().await?;
            }
            other => {
                return Err(QueryError::new(
                    strata_query::QueryErrorKind::Invalid,
                    format!("unknown harness command {other}"),
                ));
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("slt dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let only = std::env::var("SLT").ok();
    for file in files {
        if only
            .as_deref()
            .is_some_and(|o| !file.to_string_lossy().contains(o))
        {
            continue;
        }
        let tmp = tempfile::tempdir().expect("tmp");
        let store = common::local_store(&tmp.path().join("bucket"));
        let db = common::open(&store, &tmp.path().join("nvme"), common::small_config()).await;
        let q = common::service(&db, true);
        let pg = q.for_postgres();
        let mut runner = sqllogictest::Runner::new(move || {
            let (db, q, pg) = (db.clone(), q.clone(), pg.clone());
            async move {
                Ok(Strata {
                    db,
                    q,
                    pg,
                    parser: datafusion_pg_catalog::sql::PostgresCompatibilityParser::new(),
                })
            }
        });
        if let Err(e) = runner.run_file_async(&file).await {
            panic!("{}: {e}", file.display());
        }
    }
}
