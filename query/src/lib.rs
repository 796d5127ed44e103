//! Strata's query service: SQL (Apache DataFusion) over every table, reading the memtable /
//! WAL tail, the NVMe-tier SSTs and the S3 Parquet levels of each shard as one consistent
//! snapshot, over HTTP and Arrow Flight SQL.
//!
//! - [`auth`]: API keys with read / write / admin scope per namespace.
//! - [`catalog`]: every table in `strata.<namespace>` (`public` for names without a dot), and `as_of(table, seq | timestamp)` for
//!   time travel.
//! - [`provider`]: a table as a DataFusion `TableProvider`; INSERT / UPDATE / DELETE go
//!   through the engine's ingest path where the service is the tables' writer.
//! - [`scan`]: the scan operator (tiers merged by key, batches streamed with bounded memory).
//! - [`pushdown`]: key predicates become a key range; other predicates run after versions
//!   are reconciled (never used to skip files by their statistics).
//! - [`coop`]: joins yield between output batches, so a timed-out query stops.
//! - [`service`]: sessions with the safety rules (no file or URL access, no DDL, memory limit
//!   and timeout per query).
//! - [`shapes`]: optimized plans of read-only statements kept by shape (literals compared
//!   with columns taken out as parameters), so a statement seen before is not planned again.
//! - [`physical`]: physical plans kept by shape, for shapes whose runs differ only in
//!   what their one table scan reads.
//! - [`ingest`]: bulk ingest of Arrow batch streams (Flight SQL `CommandStatementIngest`).
//! - [`metadata`]: Flight SQL's catalog metadata commands (`GetTables`, `GetSqlInfo`, ...).
//! - [`prepared`]: Flight SQL's prepared statements (parameters bound by `DoPut`).
//! - [`http`] and [`flight`]: the endpoints; [`server`] runs both; [`metrics`] is
//!   `GET /metrics`.
//!
//! Limits: sequence numbers are per shard (tables have one shard today); a statement's
//! writes are atomic per batch of rows, not per statement.

pub mod auth;
pub mod catalog;
pub mod coop;
pub mod error;
pub mod flight;
pub mod http;
pub mod ingest;
pub mod metadata;
pub mod metrics;
mod physical;
pub mod postgres;
pub mod prepared;
pub mod provider;
pub mod pushdown;
pub mod ready;
pub mod scalar_subquery;
pub mod scan;
pub mod server;
pub mod service;
pub mod shapes;

pub use error::{QueryError, QueryErrorKind};
pub use service::{QueryConfig, QueryService};
