//! Counts requests, bytes, errors and latency per operation and per prefix (the name of the
//! directory an object sits in: `wal`, `sst`, `manifest`, ...), exposed as Prometheus metrics.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of every object-store metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// `get`, `put`, `list`, `delete`, `copy`, `rename`.
    pub op: &'static str,
    /// The directory name the object is in.
    pub prefix: String,
}

fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The operations counted, in the order of [`RequestTotals`].
pub const OPS: [&str; 8] = [
    "get",
    "head",
    "put",
    "put_multipart",
    "list",
    "delete",
    "copy",
    "rename",
];

/// S3 Standard's list price per 1,000 requests of `op` in US dollars (us-east-1: PUT, COPY,
/// POST and LIST $0.005, GET and HEAD $0.0004, DELETE free; a rename is a copy and a
/// delete). Data transfer and storage are not included.
pub fn s3_price_per_1000(op: &str) -> f64 {
    match op {
        "put" | "put_multipart" | "list" | "copy" | "rename" => 0.005,
        "get" | "head" => 0.0004,
        _ => 0.0,
    }
}

/// Requests and payload bytes by operation, summed over prefixes, since the process
/// started (or between two snapshots: [`RequestTotals::since`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestTotals {
    /// Requests per operation, in the order of [`OPS`].
    pub requests: [u64; OPS.len()],
    /// Payload bytes per operation, in the order of [`OPS`].
    pub bytes: [u64; OPS.len()],
}

impl RequestTotals {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &RequestTotals) -> RequestTotals {
        let mut out = *self;
        for i in 0..OPS.len() {
            out.requests[i] = out.requests[i].saturating_sub(earlier.requests[i]);
            out.bytes[i] = out.bytes[i].saturating_sub(earlier.bytes[i]);
        }
        out
    }

    /// Requests of `op`.
    pub fn of(&self, op: &str) -> u64 {
        OPS.iter()
            .position(|o| *o == op)
            .map_or(0, |i| self.requests[i])
    }

    /// Every request.
    pub fn total(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// What these requests cost at S3's list prices, in US dollars.
    pub fn s3_cost_usd(&self) -> f64 {
        OPS.iter()
            .zip(self.requests)
            .map(|(op, n)| n as f64 / 1000.0 * s3_price_per_1000(op))
            .sum()
    }
}

/// The metric families. Cheap to clone; clones share counters.
#[derive(Clone)]
pub struct ObjectStoreMetrics {
    requests: Family<OpLabels, Counter>,
    bytes: Family<OpLabels, Counter>,
    errors: Family<OpLabels, Counter>,
    latency: Family<OpLabels, Histogram, fn() -> Histogram>,
    /// Requests and bytes per operation over every prefix (what [`Self::totals`] reads).
    totals: Arc<[(AtomicU64, AtomicU64); OPS.len()]>,
}

impl std::fmt::Debug for ObjectStoreMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectStoreMetrics")
    }
}

impl Default for ObjectStoreMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            bytes: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(new_histogram),
            totals: Arc::new(Default::default()),
        }
    }
}

impl ObjectStoreMetrics {
    /// Registers the families under `strata_object_store_*`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "strata_object_store_requests",
            "Object store requests by operation and prefix",
            self.requests.clone(),
        );
        registry.register(
            "strata_object_store_bytes",
            "Object store payload bytes by operation and prefix",
            self.bytes.clone(),
        );
        registry.register(
            "strata_object_store_errors",
            "Object store failed requests by operation and prefix",
            self.errors.clone(),
        );
        registry.register(
            "strata_object_store_latency_seconds",
            "Object store request latency",
            self.latency.clone(),
        );
    }

    fn labels(op: &'static str, prefix: String) -> OpLabels {
        OpLabels { op, prefix }
    }

    /// Requests counted so far for `op` under `prefix`.
    pub fn requests(&self, op: &'static str, prefix: &str) -> u64 {
        self.requests
            .get_or_create(&Self::labels(op, prefix.to_string()))
            .get()
    }

    /// Bytes counted so far for `op` under `prefix`.
    pub fn bytes(&self, op: &'static str, prefix: &str) -> u64 {
        self.bytes
            .get_or_create(&Self::labels(op, prefix.to_string()))
            .get()
    }

    /// Errors counted so far for `op` under `prefix`.
    pub fn errors(&self, op: &'static str, prefix: &str) -> u64 {
        self.errors
            .get_or_create(&Self::labels(op, prefix.to_string()))
            .get()
    }

    /// Requests and bytes per operation so far, over every prefix.
    pub fn totals(&self) -> RequestTotals {
        let mut t = RequestTotals::default();
        for (i, (n, b)) in self.totals.iter().enumerate() {
            t.requests[i] = n.load(Ordering::Relaxed);
            t.bytes[i] = b.load(Ordering::Relaxed);
        }
        t
    }

    fn record<T>(
        &self,
        op: &'static str,
        prefix: String,
        started: Instant,
        result: &Result<T>,
        bytes: u64,
    ) {
        if let Some(i) = OPS.iter().position(|o| *o == op) {
            let (n, b) = &self.totals[i];
            n.fetch_add(1, Ordering::Relaxed);
            if result.is_ok() {
                b.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        let labels = Self::labels(op, prefix);
        self.requests.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(_) => {
                self.bytes.get_or_create(&labels).inc_by(bytes);
            }
            Err(_) => {
                self.errors.get_or_create(&labels).inc();
            }
        }
    }
}

/// The prefix label of an object: its parent directory's name (`root` at the top).
pub fn prefix_of(location: &Path) -> String {
    let parts: Vec<_> = location.parts().collect();
    if parts.len() >= 2 {
        parts[parts.len() - 2].as_ref().to_string()
    } else {
        "root".to_string()
    }
}

fn prefix_of_dir(prefix: Option<&Path>) -> String {
    prefix
        .and_then(|p| p.parts().next_back().map(|s| s.as_ref().to_string()))
        .unwrap_or_else(|| "root".to_string())
}

/// Instrumenting decorator.
#[derive(Debug)]
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    metrics: ObjectStoreMetrics,
}

impl InstrumentedStore {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: Arc<dyn ObjectStore>, metrics: ObjectStoreMetrics) -> Self {
        Self { inner, metrics }
    }
}

impl std::fmt::Display for InstrumentedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for InstrumentedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let started = Instant::now();
        let size = crate::LocalSource::put_len(&opts, &payload);
        let r = self.inner.put_opts(location, payload, opts).await;
        self.metrics
            .record("put", prefix_of(location), started, &r, size);
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let started = Instant::now();
        let r = self.inner.put_multipart_opts(location, opts).await;
        self.metrics
            .record("put_multipart", prefix_of(location), started, &r, 0);
        r
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let started = Instant::now();
        let op = if options.head { "head" } else { "get" };
        let r = self.inner.get_opts(location, options).await;
        let bytes = match (&r, op) {
            (Ok(g), "get") => g.range.end - g.range.start,
            _ => 0,
        };
        self.metrics
            .record(op, prefix_of(location), started, &r, bytes);
        r
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let started = Instant::now();
        let r = self.inner.get_ranges(location, ranges).await;
        let bytes = r
            .as_ref()
            .map(|v| v.iter().map(|b| b.len() as u64).sum())
            .unwrap_or(0);
        self.metrics
            .record("get", prefix_of(location), started, &r, bytes);
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let metrics = self.metrics.clone();
        let started = Instant::now();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| {
                let prefix = match r {
                    Ok(p) => prefix_of(p),
                    Err(_) => "unknown".to_string(),
                };
                metrics.record("delete", prefix, started, r, 0);
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let r: Result<()> = Ok(());
        self.metrics
            .record("list", prefix_of_dir(prefix), Instant::now(), &r, 0);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let r: Result<()> = Ok(());
        self.metrics
            .record("list", prefix_of_dir(prefix), Instant::now(), &r, 0);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let started = Instant::now();
        let r = self.inner.list_with_delimiter(prefix).await;
        self.metrics
            .record("list", prefix_of_dir(prefix), started, &r, 0);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let started = Instant::now();
        let r = self.inner.copy_opts(from, to, options).await;
        self.metrics.record("copy", prefix_of(to), started, &r, 0);
        r
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let started = Instant::now();
        let r = self.inner.rename_opts(from, to, options).await;
        self.metrics.record("rename", prefix_of(to), started, &r, 0);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn counts_requests_and_bytes_per_prefix() {
        let metrics = ObjectStoreMetrics::default();
        let store = InstrumentedStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            metrics.clone(),
        );
        let p = Path::from("t/wal/1");
        store
            .put(&p, Bytes::from_static(b"hello").into())
            .await
            .unwrap();
        let got = store.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"hello");
        assert!(store.get(&Path::from("t/sst/x")).await.is_err());
        store.delete(&p).await.unwrap();
        assert_eq!(metrics.requests("put", "wal"), 1);
        assert_eq!(metrics.bytes("put", "wal"), 5);
        assert_eq!(metrics.requests("get", "wal"), 1);
        assert_eq!(metrics.bytes("get", "wal"), 5);
        assert_eq!(metrics.errors("get", "sst"), 1);
        assert_eq!(metrics.requests("delete", "wal"), 1);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("strata_object_store_requests_total{op=\"put\",prefix=\"wal\"} 1"));
    }

    #[tokio::test]
    async fn totals_sum_every_prefix_and_price_requests_as_s3_does() {
        let metrics = ObjectStoreMetrics::default();
        let store = InstrumentedStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            metrics.clone(),
        );
        let before = metrics.totals();
        for p in ["t/wal/1", "t/sst/2"] {
            store
                .put(&Path::from(p), Bytes::from_static(b"abc").into())
                .await
                .unwrap();
        }
        store.head(&Path::from("t/wal/1")).await.unwrap();
        let _ = store.get(&Path::from("t/wal/9")).await;
        let t = metrics.totals().since(&before);
        assert_eq!((t.of("put"), t.of("head"), t.of("get")), (2, 1, 1));
        assert_eq!(t.total(), 4);
        assert_eq!(t.bytes[2], 6, "put bytes over both prefixes");
        // Two PUTs at $0.005 per 1,000, a HEAD and a GET at $0.0004 per 1,000.
        assert!((t.s3_cost_usd() - (2.0 * 0.005 + 2.0 * 0.0004) / 1000.0).abs() < 1e-12);
    }
}
