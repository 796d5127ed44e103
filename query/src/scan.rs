//! The scan operator: streams a table view's live rows as Arrow batches.
//!
//! Each partition is a key range; a blocking task merges the tiers of every shard overlapping
//! it (memtables / WAL tail, NVMe-tier SSTs, S3 levels) by primary key, newest version per
//! column wins and tombstones hide older versions. On a multi-thread runtime the merge runs
//! on the consuming task's thread (`block_in_place`), a few batches per blocking section (at
//! most 8 batches or 2 MiB of arrays) handed out one per poll; otherwise on a blocking
//! thread feeding a channel of two batches (bounded memory either way).

use std::fmt;
use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use strata_engine::{ScanPaths, TableView, ViewBatches};
use tokio::runtime::RuntimeFlavor;

use crate::pushdown::{KeyRange, describe};

/// Scans a consistent view of a table.
#[derive(Debug)]
pub struct StrataScanExec {
    view: Arc<TableView>,
    /// Columns returned (indices into the table schema).
    projection: Vec<usize>,
    /// Non-key columns the projection needs (indices into the value columns).
    needed: Vec<usize>,
    /// One key range per partition, ascending and disjoint.
    ranges: Vec<KeyRange>,
    /// The range the key predicates allow (for EXPLAIN).
    range: KeyRange,
    limit: Option<usize>,
    batch_rows: usize,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// How the scan's rows were produced (`EXPLAIN ANALYZE`).
    metrics: ExecutionPlanMetricsSet,
}

impl StrataScanExec {
    /// A scan of `view` over `range`, split into at most `partitions` key ranges.
    pub fn new(
        view: Arc<TableView>,
        projection: Vec<usize>,
        range: KeyRange,
        limit: Option<usize>,
        partitions: usize,
        batch_rows: usize,
        cuts: Vec<Vec<u8>>,
    ) -> Result<Self> {
        let table = &view.schema;
        let schema = Arc::new(table.read_schema.project(&projection)?);
        let needed: Vec<usize> = projection
            .iter()
            .filter_map(|c| table.value_indices.iter().position(|v| v == c))
            .collect();
        let ranges = if range.is_empty() {
            Vec::new()
        } else if limit.is_some() {
            vec![range.clone()] // in key order, stop early
        } else {
            split(cuts, &range, partitions.max(1))
        };
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new_with_orderings(
                schema.clone(),
                key_ordering(table, &projection),
            ),
            Partitioning::UnknownPartitioning(ranges.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            view,
            projection,
            needed,
            ranges,
            range,
            limit,
            batch_rows: batch_rows.max(1),
            schema,
            props,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

/// The order each partition's rows come in, as DataFusion sees it: by the leading key
/// columns the projection holds (a partition yields its key range in encoded-key order,
/// shard after shard, and the key encoding keeps the order of these types), so that an
/// `ORDER BY` on the key merges the partitions' streams instead of sorting every row.
/// Float keys are left out: their encoded order puts -0 before +0 and NaN by its bits,
/// which a sort on the column need not agree with.
fn key_ordering(
    table: &strata_engine::schema::TableSchema,
    projection: &[usize],
) -> Vec<Vec<PhysicalSortExpr>> {
    use arrow::datatypes::DataType as T;
    let mut ordering = Vec::new();
    for &k in &table.key_indices {
        let Some(at) = projection.iter().position(|c| *c == k) else {
            break;
        };
        let field = table.read_schema.field(k);
        let ordered = matches!(
            field.data_type(),
            T::Boolean
                | T::Int8
                | T::Int16
                | T::Int32
                | T::Int64
                | T::UInt8
                | T::UInt16
                | T::UInt32
                | T::UInt64
                | T::Date32
                | T::Date64
                | T::Timestamp(_, _)
                | T::Utf8
                | T::LargeUtf8
                | T::Binary
                | T::LargeBinary
        );
        if !ordered {
            break;
        }
        ordering.push(PhysicalSortExpr::new(
            Arc::new(Column::new(field.name(), at)),
            SortOptions::default(),
        ));
    }
    if ordering.is_empty() {
        Vec::new()
    } else {
        vec![ordering]
    }
}

/// Splits `range` into about `n` parts at some of `cuts` (keys where the data can be
/// divided: row-group and file starts, see `ShardView::split_keys`).
fn split(mut cuts: Vec<Vec<u8>>, range: &KeyRange, n: usize) -> Vec<KeyRange> {
    cuts.retain(|c| {
        c.as_slice() > range.start.as_slice()
            && range.end.as_deref().is_none_or(|e| c.as_slice() < e)
    });
    cuts.sort();
    cuts.dedup();
    let mut chosen = Vec::new();
    if n > 1 && !cuts.is_empty() {
        for i in 1..n {
            let at = i * cuts.len() / n;
            if let Some(c) = cuts.get(at)
                && chosen.last() != Some(c)
            {
                chosen.push(c.clone());
            }
        }
    }
    let mut out = Vec::with_capacity(chosen.len() + 1);
    let mut start = range.start.clone();
    for c in chosen {
        out.push(KeyRange {
            start: std::mem::replace(&mut start, c.clone()),
            end: Some(c),
        });
    }
    out.push(KeyRange {
        start,
        end: range.end.clone(),
    });
    out
}

impl DisplayAs for StrataScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let table = &self.view.schema;
        let cols: Vec<&str> = self
            .projection
            .iter()
            .map(|i| table.schema.field(*i).name().as_str())
            .collect();
        write!(
            f,
            "StrataScanExec: table={}, projection=[{}], key_range={}",
            table.name(),
            cols.join(", "),
            if self.range == KeyRange::all() {
                "all".to_string()
            } else {
                describe(table, &self.range)
            }
        )?;
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        for (i, s) in self.view.shards.iter().enumerate() {
            let sum = s.summary(
                &self.range.start,
                self.range.end.as_deref(),
                Some(&self.needed),
            );
            write!(
                f,
                ", shard{i}=[seq={} manifest=v{} memtables={} ssts={} (pruned {}) parquet={} (pruned {}) groups={:?}]",
                s.seq(),
                s.manifest_version(),
                sum.memtables,
                sum.ssts_read,
                sum.ssts_pruned,
                sum.parquet_read,
                sum.parquet_pruned,
                sum.groups_read
            )?;
        }
        write!(f, ", partitions={}", self.ranges.len())
    }
}

impl ExecutionPlan for StrataScanExec {
    fn name(&self) -> &str {
        "StrataScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "StrataScanExec has no children".into(),
            ))
        }
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema.clone();
        let Some(range) = self.ranges.get(partition).cloned() else {
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )));
        };
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| DataFusionError::Execution(format!("no runtime: {e}")))?;
        let inline = handle.runtime_flavor() == RuntimeFlavor::MultiThread;
        let mut producer = Producer {
            view: self.view.clone(),
            range,
            projection: self.projection.clone(),
            limit: self.limit.unwrap_or(usize::MAX),
            batch_rows: self.batch_rows,
            handle,
            shard: 0,
            batches: None,
            sent: 0,
            paths: PathMetrics::new(&self.metrics, partition),
        };
        if inline {
            // Decode on the consumer's thread (the batches are still in its cache when the
            // operator above reads them), letting the runtime move its other tasks away: a
            // few batches per blocking section, since each section hands the thread's
            // runtime work to another thread.
            let stream = futures::stream::unfold(
                (producer, Section::default()),
                |(mut p, mut section)| async move {
                    if section.ready.is_empty() && !section.done {
                        tokio::task::block_in_place(|| section.fill(&mut p));
                    }
                    section.ready.pop_front().map(|b| (b, (p, section)))
                },
            );
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)));
        }
        // A current-thread runtime cannot block its only thread: decode on a blocking
        // thread and hand batches over through a channel of two (bounded memory: a slow
        // consumer stops the merge).
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        tokio::task::spawn_blocking(move || {
            while let Some(b) = producer.next() {
                let failed = b.is_err();
                if tx.blocking_send(b).is_err() || failed {
                    return; // the consumer went away (LIMIT satisfied, cancelled)
                }
            }
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

pub(crate) fn engine_err(e: strata_engine::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The batches one blocking section of a scan produced, handed out one per poll.
#[derive(Default)]
struct Section {
    ready: std::collections::VecDeque<Result<RecordBatch>>,
    /// The producer ended or failed: no more sections.
    done: bool,
}

impl Section {
    /// Batches one section produces at most.
    const BATCHES: usize = 8;
    /// Bytes of Arrow arrays after which a section ends (about what a core's cache holds).
    const BYTES: usize = 2 << 20;

    /// Runs `p` until it has made [`Section::BATCHES`] batches or [`Section::BYTES`] bytes
    /// of them, or ended.
    fn fill(&mut self, p: &mut Producer) {
        let mut bytes = 0;
        while self.ready.len() < Self::BATCHES && bytes < Self::BYTES {
            match p.next() {
                Some(Ok(b)) => {
                    bytes += b.get_array_memory_size();
                    self.ready.push_back(Ok(b));
                }
                Some(Err(e)) => {
                    self.ready.push_back(Err(e));
                    self.done = true;
                    return;
                }
                None => {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// One partition's batches: the shards overlapping its key range, one after the other.
struct Producer {
    view: Arc<TableView>,
    range: KeyRange,
    projection: Vec<usize>,
    limit: usize,
    batch_rows: usize,
    handle: tokio::runtime::Handle,
    /// The next shard to open.
    shard: usize,
    batches: Option<ViewBatches>,
    sent: usize,
    paths: PathMetrics,
}

/// Rows by the path that produced them (see `strata_engine::ScanPaths`): deep-level rows
/// handed on as they are, rows resolved row by row, whole rows spliced from the scan
/// overlay (the upper tiers folded), and rows of chunks merged row by row; and deep-level
/// rows read by row position (no key column read or searched). Brought up to date after
/// every batch, so that they are complete when the last batch reaches the consumer
/// (`EXPLAIN ANALYZE` reads them then), whichever thread decodes.
struct PathMetrics {
    passed: Count,
    patched: Count,
    overlaid: Count,
    merged: Count,
    positioned: Count,
    superseded: Count,
    /// What the current shard's scan had counted when last reported.
    reported: ScanPaths,
}

impl PathMetrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let count = |name: &'static str| MetricBuilder::new(set).counter(name, partition);
        Self {
            passed: count("rows_passed"),
            patched: count("rows_patched"),
            overlaid: count("rows_overlaid"),
            merged: count("rows_merged"),
            positioned: count("rows_positioned"),
            superseded: count("rows_superseded"),
            reported: ScanPaths::default(),
        }
    }

    /// Adds what `b` counted since the last report.
    fn update(&mut self, b: &ViewBatches) {
        let (p, r) = (b.paths(), self.reported);
        self.passed.add((p.passed - r.passed) as usize);
        self.patched.add((p.patched - r.patched) as usize);
        self.overlaid.add((p.overlaid - r.overlaid) as usize);
        self.merged.add((p.merged - r.merged) as usize);
        self.positioned.add((p.positioned - r.positioned) as usize);
        self.superseded.add((p.superseded - r.superseded) as usize);
        self.reported = p;
    }
}

impl Producer {
    /// The next batch, None at the end (or once the limit is reached).
    fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.step().transpose()
    }

    fn step(&mut self) -> Result<Option<RecordBatch>> {
        while self.sent < self.limit {
            if let Some(batches) = self.batches.as_mut() {
                let next = batches.next_batch().map_err(engine_err);
                self.paths.update(batches);
                if let Some(mut batch) = next? {
                    if self.sent + batch.num_rows() > self.limit {
                        batch = batch.slice(0, self.limit - self.sent);
                    }
                    self.sent += batch.num_rows();
                    return Ok(Some(batch));
                }
                self.batches = None;
                self.paths.reported = ScanPaths::default();
            }
            let view = &self.view;
            let Some((entry, shard)) = view.entry.shards.iter().zip(&view.shards).nth(self.shard)
            else {
                return Ok(None);
            };
            self.shard += 1;
            let r = self.range.clamp(&entry.key_start, entry.key_end.as_deref());
            if r.is_empty() {
                continue;
            }
            self.batches = Some(
                shard
                    .batches(
                        &r.start,
                        r.end.as_deref(),
                        &self.projection,
                        self.batch_rows,
                        &self.handle,
                    )
                    .map_err(engine_err)?,
            );
        }
        Ok(None)
    }
}
