//! Prometheus metrics at `GET /metrics` (OpenMetrics text):
//!
//! - `strata_http_requests_total{op, status}` and `strata_http_request_seconds{op}`: every
//!   HTTP request by operation (`POST /sql`, `POST /v1/tables/{table}/rows`, ...);
//! - `strata_grpc_requests_total{op, code}` and `strata_grpc_request_seconds{op}`: every
//!   gRPC call (Flight SQL and the data API) by method (`/strata.v1.Data/Write`, ...) and
//!   status code; the latency is until the response starts (a streamed answer's end and an
//!   error reported in its trailers are not seen: those count as code 0);
//! - `strata_object_store_{requests,bytes,errors}_total{op, prefix}` and
//!   `strata_object_store_latency_seconds`: requests to the bucket by kind (get, put, list,
//!   ...) and by directory (`wal`, `sst`, `manifest`, ...);
//! - per table and shard this process writes (read from the engine at scrape time, no
//!   object-store request): the write path's backlog
//!   (`strata_memtables_frozen`: memtables waiting for their flush, i.e. WAL not yet in an
//!   SST), compaction backlog (`strata_pending_compaction_bytes`,
//!   `strata_compaction_jobs_outstanding`, `strata_sorted_runs`), bytes per tier,
//!   write stalls and overload refusals, flushes and compactions, writes acknowledged and
//!   the WAL segments that carried them (`strata_writes_total`,
//!   `strata_wal_segments_total`), and point reads by the
//!   tier that answered them
//!   (`strata_point_reads_total{source = memtable | nvme | promotion_cache | s3}`), bytes
//!   retained and promoted, promotion-cache size and aborts;
//! - with `engine.hotness.enabled`, the hotness tracker's size, hot set, limits and
//!   evictions (`strata_hotness_*`).
//!
//! With API keys configured, `/metrics` needs a key for every namespace (`namespace = "*"`,
//! any scope): the metrics name every table.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use strata_engine::Db;

use crate::auth::Authenticator;
use crate::error::{QueryError, QueryErrorKind};
use crate::http::{authorization, error_response};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    op: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrpcLabels {
    op: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~6.5 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// The service's metrics: request counters and histograms, the bucket's, the engine's.
#[derive(Clone)]
pub struct ServiceMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<OpLabel, Histogram, fn() -> Histogram>,
    grpc_requests: Family<GrpcLabels, Counter>,
    grpc_latency: Family<OpLabel, Histogram, fn() -> Histogram>,
    db: Db,
    auth: Authenticator,
}

impl std::fmt::Debug for ServiceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceMetrics")
    }
}

impl ServiceMetrics {
    /// Metrics of a service over `db` (and how its SQL statements were planned);
    /// `/metrics` callers are checked by `auth`.
    pub fn new(db: Db, auth: Authenticator, plans: &crate::shapes::PlanCounts) -> Self {
        let mut registry = Registry::default();
        plans.register(&mut registry);
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<OpLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "strata_http_requests",
            "HTTP requests by operation and status",
            requests.clone(),
        );
        registry.register(
            "strata_http_request_seconds",
            "HTTP request latency by operation",
            latency.clone(),
        );
        let grpc_requests = Family::<GrpcLabels, Counter>::default();
        let grpc_latency: Family<OpLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "strata_grpc_requests",
            "gRPC calls by method and status code",
            grpc_requests.clone(),
        );
        registry.register(
            "strata_grpc_request_seconds",
            "gRPC call latency until the response starts, by method",
            grpc_latency.clone(),
        );
        db.object_store_metrics().register(&mut registry);
        Self {
            inner: Arc::new(Inner {
                registry,
                requests,
                latency,
                grpc_requests,
                grpc_latency,
                db,
                auth,
            }),
        }
    }

    /// Counts a request and its latency.
    pub fn observe(&self, op: &str, status: u16, seconds: f64) {
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                op: op.to_string(),
                status: status.to_string(),
            })
            .inc();
        self.inner
            .latency
            .get_or_create(&OpLabel { op: op.to_string() })
            .observe(seconds);
    }

    /// The OpenMetrics text of every metric.
    pub async fn render(&self) -> Result<String, QueryError> {
        let internal =
            |e: std::fmt::Error| QueryError::new(QueryErrorKind::Internal, e.to_string());
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.inner.registry)
            .map_err(internal)?;
        self.engine_metrics(&mut out).await?;
        prometheus_client::encoding::text::encode_eof(&mut out).map_err(internal)?;
        Ok(out)
    }

    async fn engine_metrics(&self, out: &mut String) -> Result<(), QueryError> {
        // Only shards this process writes: no object-store request per scrape, and a
        // reader (the query service) never opens a table as its writer to report on it.
        let mut rows: Vec<(String, usize, strata_engine::metrics::ShardStatsSnapshot)> = Vec::new();
        for t in self.inner.db.open_tables().await {
            for (i, shard) in t.shards().enumerate() {
                rows.push((t.name().to_string(), i, shard.stats()));
            }
        }
        type Get = fn(&strata_engine::metrics::ShardStatsSnapshot) -> u64;
        let families: [(&str, &str, &str, Get); 19] = [
            (
                "strata_writes",
                "counter",
                "Writes (write batches) acknowledged, each carried by a WAL segment: with strata_object_store_requests_total, the requests per 1,000 writes",
                |s| s.writes_in_segments,
            ),
            (
                "strata_wal_segments",
                "counter",
                "WAL segments stored (group commits)",
                |s| s.wal_segments,
            ),
            (
                "strata_memtables_frozen",
                "gauge",
                "Frozen memtables waiting for their flush (WAL not yet in an SST)",
                |s| s.memtables_frozen as u64,
            ),
            (
                "strata_pending_compaction_bytes",
                "gauge",
                "Bytes compaction still has to rewrite to bring the tree to its shape",
                |s| s.pending_compaction_bytes,
            ),
            (
                "strata_compaction_jobs_outstanding",
                "gauge",
                "S3 compaction jobs published and not yet committed",
                |s| s.jobs_outstanding as u64,
            ),
            (
                "strata_sorted_runs",
                "gauge",
                "Sorted runs a read may merge",
                |s| s.sorted_runs as u64,
            ),
            (
                "strata_nvme_bytes",
                "gauge",
                "Bytes in the NVMe-tier levels",
                |s| s.bytes_per_level.iter().sum(),
            ),
            (
                "strata_s3_level_bytes",
                "gauge",
                "Bytes in the S3 levels",
                |s| s.s3_bytes.iter().flatten().sum(),
            ),
            (
                "strata_write_stalls",
                "counter",
                "Periods in which writes were refused as overloaded",
                |s| s.stalls,
            ),
            (
                "strata_writes_overloaded",
                "counter",
                "Writes refused as overloaded",
                |s| s.overloaded,
            ),
            ("strata_flushes", "counter", "Memtable flushes", |s| {
                s.flushes
            }),
            (
                "strata_compactions",
                "counter",
                "NVMe-tier compactions",
                |s| s.compactions,
            ),
            (
                "strata_compaction_s3_bytes_read",
                "counter",
                "Bytes S3 compaction jobs read",
                |s| s.s3_bytes_read,
            ),
            (
                "strata_compaction_s3_bytes_written",
                "counter",
                "Bytes S3 compaction jobs wrote",
                |s| s.s3_bytes_written,
            ),
            (
                "strata_retained_bytes",
                "counter",
                "Bytes of hot records kept on NVMe by NVMe-to-S3 jobs (retention)",
                |s| s.retained_bytes,
            ),
            (
                "strata_promoted_flush_bytes",
                "counter",
                "Bytes of hot records promoted from the promotion cache to L0",
                |s| s.promoted_flush_bytes,
            ),
            (
                "strata_promoted_compaction_bytes",
                "counter",
                "Bytes of cached records promoted into NVMe-to-S3 jobs' retained records",
                |s| s.promoted_compaction_bytes,
            ),
            (
                "strata_promotion_aborts",
                "counter",
                "Promotion-cache inserts and flushes aborted by an NVMe-to-S3 commit",
                |s| s.promotion_aborts,
            ),
            (
                "strata_promotion_cache_bytes",
                "gauge",
                "Bytes in the promotion cache",
                |s| s.promotion_cache_bytes,
            ),
        ];
        let internal =
            |e: std::fmt::Error| QueryError::new(QueryErrorKind::Internal, e.to_string());
        writeln!(
            out,
            "# HELP strata_point_reads Point reads by the tier that answered them (memtable, nvme, promotion_cache, s3); the NVMe hit rate is (memtable + nvme + promotion_cache) / all."
        )
        .map_err(internal)?;
        writeln!(out, "# TYPE strata_point_reads counter").map_err(internal)?;
        for (table, shard, s) in &rows {
            for (source, n) in [
                ("memtable", s.point_reads_memtable),
                ("nvme", s.point_reads_nvme),
                ("promotion_cache", s.point_reads_promotion_cache),
                ("s3", s.point_reads_s3),
            ] {
                writeln!(
                    out,
                    "strata_point_reads_total{{table=\"{}\",shard=\"{shard}\",source=\"{source}\"}} {n}",
                    escape(table)
                )
                .map_err(internal)?;
            }
        }
        let (page_bytes, pages, page_hits, page_misses) = self.inner.db.page_cache_stats();
        let (row_bytes, row_blocks, row_hits, row_misses) = self.inner.db.row_block_cache_stats();
        let (col_bytes, cols, col_hits, col_misses) = self.inner.db.scan_cache_stats();
        let (block_bytes, blocks, block_hits, block_misses) = self.inner.db.block_cache_stats();
        for (name, kind, help, v) in [
            (
                "strata_block_cache_bytes",
                "gauge",
                "Bytes of columnar files' data blocks and tails held on the local disk (at most engine.cache_bytes_max; none for a local-directory bucket, read in place)",
                block_bytes,
            ),
            (
                "strata_block_cache_files",
                "gauge",
                "Data blocks and file tails of columnar files held on the local disk",
                blocks as u64,
            ),
            (
                "strata_block_cache_hits",
                "counter",
                "Blocks and tails of columnar files read from the local disk cache",
                block_hits,
            ),
            (
                "strata_block_cache_misses",
                "counter",
                "Blocks and tails of columnar files fetched from the bucket",
                block_misses,
            ),
            (
                "strata_scan_cache_bytes",
                "gauge",
                "Bytes of decoded column chunks held for scans (at most engine.scan_cache_bytes)",
                col_bytes,
            ),
            (
                "strata_scan_cache_chunks",
                "gauge",
                "Decoded column chunks (one column of one row group) held for scans",
                cols as u64,
            ),
            (
                "strata_scan_cache_hits",
                "counter",
                "Column chunks scans took decoded from memory",
                col_hits,
            ),
            (
                "strata_scan_cache_misses",
                "counter",
                "Column chunks scans read and decoded",
                col_misses,
            ),
            (
                "strata_page_cache_bytes",
                "gauge",
                "Bytes of decoded Parquet pages held for point lookups (at most engine.page_cache_bytes)",
                page_bytes,
            ),
            (
                "strata_page_cache_pages",
                "gauge",
                "Decoded Parquet page spans held for point lookups",
                pages as u64,
            ),
            (
                "strata_page_cache_hits",
                "counter",
                "Point lookups into columnar levels answered from decoded pages",
                page_hits,
            ),
            (
                "strata_page_cache_misses",
                "counter",
                "Point lookups into columnar levels that read and decoded pages",
                page_misses,
            ),
            (
                "strata_row_block_cache_bytes",
                "gauge",
                "Bytes of decoded row-SST data blocks held for point reads (at most engine.row_block_cache_bytes)",
                row_bytes,
            ),
            (
                "strata_row_block_cache_blocks",
                "gauge",
                "Decoded row-SST data blocks held for point reads",
                row_blocks as u64,
            ),
            (
                "strata_row_block_cache_hits",
                "counter",
                "Row-SST data blocks point reads found decoded in memory",
                row_hits,
            ),
            (
                "strata_row_block_cache_misses",
                "counter",
                "Row-SST data blocks point reads read from their files and decoded",
                row_misses,
            ),
        ] {
            let suffix = if kind == "counter" { "_total" } else { "" };
            writeln!(out, "# HELP {name} {help}.").map_err(internal)?;
            writeln!(out, "# TYPE {name} {kind}").map_err(internal)?;
            writeln!(out, "{name}{suffix} {v}").map_err(internal)?;
        }
        if let Some(h) = self.inner.db.hotness_stats() {
            let gauges: [(&str, &str, f64); 7] = [
                (
                    "strata_hotness_tracker_disk_bytes",
                    "The hotness tracker's bytes on the local directory",
                    h.disk_bytes as f64,
                ),
                (
                    "strata_hotness_tracker_memory_bytes",
                    "The hotness tracker's memory (buffer, Bloom filters, block indexes)",
                    h.memory_bytes as f64,
                ),
                (
                    "strata_hotness_tracker_records",
                    "Access records the hotness tracker holds",
                    h.records as f64,
                ),
                (
                    "strata_hotness_hot_bytes",
                    "Key and value bytes of the records the tracker calls hot",
                    h.hot_bytes as f64,
                ),
                (
                    "strata_hotness_hot_limit_bytes",
                    "The hot-set size limit (auto-tuned)",
                    h.hot_limit as f64,
                ),
                (
                    "strata_hotness_physical_limit_bytes",
                    "The tracker's own size limit (auto-tuned)",
                    h.physical_limit as f64,
                ),
                (
                    "strata_hotness_tick",
                    "The tracker's time slice (advances every 10% of the NVMe budget read)",
                    h.tick as f64,
                ),
            ];
            for (name, help, v) in gauges {
                writeln!(out, "# HELP {name} {help}.").map_err(internal)?;
                writeln!(out, "# TYPE {name} gauge").map_err(internal)?;
                writeln!(out, "{name} {v}").map_err(internal)?;
            }
            writeln!(out, "# HELP strata_hotness_evictions Evictions of the hotness tracker (a tenth of its records each).").map_err(internal)?;
            writeln!(out, "# TYPE strata_hotness_evictions counter").map_err(internal)?;
            writeln!(out, "strata_hotness_evictions_total {}", h.evictions).map_err(internal)?;
        }
        for (name, kind, help, get) in families {
            writeln!(out, "# HELP {name} {help}.").map_err(internal)?;
            writeln!(out, "# TYPE {name} {kind}").map_err(internal)?;
            let suffix = if kind == "counter" { "_total" } else { "" };
            for (table, shard, s) in &rows {
                writeln!(
                    out,
                    "{name}{suffix}{{table=\"{}\",shard=\"{shard}\"}} {}",
                    escape(table),
                    get(s)
                )
                .map_err(internal)?;
            }
        }
        Ok(())
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Middleware counting each matched request by its route.
pub async fn track(State(m): State<ServiceMetrics>, req: Request, next: Next) -> Response {
    let op = match req.extensions().get::<MatchedPath>() {
        Some(p) => format!("{} {}", req.method(), p.as_str()),
        None => format!("{} other", req.method()),
    };
    let t0 = Instant::now();
    let response = next.run(req).await;
    m.observe(&op, response.status().as_u16(), t0.elapsed().as_secs_f64());
    response
}

/// Middleware counting each gRPC call by its method and status code (`grpc-status` of a
/// trailers-only answer, else 0).
pub async fn track_grpc(State(m): State<ServiceMetrics>, req: Request, next: Next) -> Response {
    let op = req.uri().path().to_string();
    let t0 = Instant::now();
    let response = next.run(req).await;
    let code = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("0")
        .to_string();
    m.inner
        .grpc_requests
        .get_or_create(&GrpcLabels {
            op: op.clone(),
            code,
        })
        .inc();
    m.inner
        .grpc_latency
        .get_or_create(&OpLabel { op })
        .observe(t0.elapsed().as_secs_f64());
    response
}

/// `GET /metrics`.
pub async fn handler(State(m): State<ServiceMetrics>, headers: axum::http::HeaderMap) -> Response {
    let run = async {
        let who = m.inner.auth.principal(authorization(&headers))?;
        if !who.all_namespaces() {
            return Err(QueryError::new(
                QueryErrorKind::Forbidden,
                format!(
                    "key {:?} is for one namespace; /metrics needs a key for every namespace (namespace = \"*\")",
                    who.name
                ),
            ));
        }
        m.render().await
    };
    match run.await {
        Ok(text) => {
            let mut r = text.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        Err(e) => error_response(&e),
    }
}
