//! A Strata table as a DataFusion table: scans at a consistent snapshot, writes through the
//! ingest path.

use std::fmt;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, TableProviderFilterPushDown, col};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use strata_engine::schema::TableSchema;
use strata_engine::{AsOf, Db, Mutation, TableView, WriteOptions};
use tokio::sync::OnceCell;

use crate::pushdown::{is_exact_key_filter, is_key_filter, key_range, sampled};
use crate::scan::StrataScanExec;

/// Settings shared by every table of a query.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Rows per batch a scan produces.
    pub batch_rows: usize,
    /// Key-range partitions a scan is split into at most.
    pub partitions: usize,
    /// Whether INSERT / UPDATE / DELETE are allowed (the process is the tables' writer).
    pub writable: bool,
}

/// A Strata table seen by one query: every scan of it in the query reads the same
/// snapshot, pinned when the first scan is planned.
pub struct StrataTable {
    db: Db,
    name: String,
    table: Arc<TableSchema>,
    schema: SchemaRef,
    as_of: Option<AsOf>,
    options: TableOptions,
    view: Arc<OnceCell<Arc<TableView>>>,
}

impl fmt::Debug for StrataTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StrataTable({}, as of {:?})", self.name, self.as_of)
    }
}

fn engine_err(e: strata_engine::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl StrataTable {
    /// The table `table`, read at `as_of` (None = latest).
    pub fn new(
        db: Db,
        table: Arc<TableSchema>,
        as_of: Option<AsOf>,
        options: TableOptions,
    ) -> Self {
        Self {
            db,
            name: table.name().to_string(),
            schema: table.read_schema.clone(),
            table,
            as_of,
            options,
            view: Arc::new(OnceCell::new()),
        }
    }

    /// The snapshot this query reads (opened on first use).
    ///
    /// On the tables' ingest node (a writable service) the table is opened as its writer
    /// first, as the data API's first read or write opens it, so that every query reads
    /// the writer's state in memory: a view built from the bucket costs a manifest read, a
    /// WAL listing and a durable pin per query. In a cluster only shards this node holds
    /// are read that way; the others are read from the bucket without taking them.
    pub async fn view(&self) -> Result<Arc<TableView>> {
        self.view
            .get_or_try_init(|| async {
                if self.options.writable && self.holds_its_shards() {
                    // A table this process cannot open (another writer fenced it) is still
                    // read, from the bucket.
                    if let Err(e) = self.db.table(&self.name).await {
                        tracing::debug!(table = %self.name, error = %e, "reading the bucket: the table did not open as its writer");
                    }
                }
                self.db
                    .view_of(self.table.clone(), self.as_of)
                    .await
                    .map(Arc::new)
                    .map_err(engine_err)
            })
            .await
            .cloned()
    }

    /// Whether the table is read at its latest state (not a time-travel snapshot).
    pub(crate) fn is_latest(&self) -> bool {
        self.as_of.is_none()
    }

    /// Whether this process is the writer of every shard of the table: always outside a
    /// cluster; in one, when it holds each shard's lease.
    fn holds_its_shards(&self) -> bool {
        if !self.db.in_cluster() {
            return true;
        }
        let held = self.db.held_shards();
        self.table
            .entry
            .shards
            .iter()
            .all(|s| held.contains(&(self.table.entry.id, s.id)))
    }

    fn check_writable(&self, what: &str) -> Result<()> {
        if self.as_of.is_some() {
            return Err(DataFusionError::Plan(format!(
                "{what} cannot target a time-travel snapshot of {}",
                self.name
            )));
        }
        if !self.options.writable {
            return Err(DataFusionError::Plan(format!(
                "{what} is not available on this query service: it reads the bucket only; send writes to the ingest node (strata serve runs both)"
            )));
        }
        Ok(())
    }

    async fn writer(&self) -> Result<strata_engine::Table> {
        self.db.table(&self.name).await.map_err(engine_err)
    }

    /// Plans `SELECT <key columns>, <extra> FROM self WHERE <filters>` for UPDATE / DELETE.
    async fn select_keys(
        self: &Arc<Self>,
        state: &dyn Session,
        extra: Vec<Expr>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let view = self.view().await?;
        let mut exprs: Vec<Expr> = view
            .schema
            .key_indices
            .iter()
            .map(|i| col(view.schema.schema.field(*i).name()))
            .collect();
        exprs.extend(extra);
        let source = provider_as_source(self.clone() as Arc<dyn TableProvider>);
        let mut b = LogicalPlanBuilder::scan(self.name.as_str(), source, None)?;
        if let Some(f) = filters.into_iter().reduce(Expr::and) {
            b = b.filter(f)?;
        }
        let plan = b.project(exprs)?.build()?;
        state.create_physical_plan(&plan).await
    }
}

#[async_trait]
impl TableProvider for StrataTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Key predicates narrow the key range; DataFusion re-applies those the range does
        // not express exactly. Everything else runs after reconciliation, above the scan.
        // A typed parameter (`a0 >= $1`, a plan kept by its shape) is judged as a value of
        // its type; the plan cache checks each run's values are judged the same.
        Ok(filters
            .iter()
            .map(|f| {
                let f = sampled(f);
                let f = f.as_ref();
                if is_exact_key_filter(&self.table, f) {
                    TableProviderFilterPushDown::Exact
                } else if is_key_filter(&self.table, f) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let view = self.view().await?;
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let range = key_range(&view.schema, filters);
        // A limit is only exact without pushed filters (they are re-applied above).
        let limit = if filters.is_empty() { limit } else { None };
        let mut cuts = Vec::new();
        if limit.is_none() && self.options.partitions > 1 {
            for s in &view.shards {
                cuts.extend(s.split_keys().await.map_err(crate::scan::engine_err)?);
            }
        }
        Ok(Arc::new(StrataScanExec::new(
            view,
            projection,
            range,
            limit,
            self.options.partitions,
            self.options.batch_rows,
            cuts,
        )?))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("INSERT")?;
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} is not supported; INSERT INTO upserts rows by primary key"
            )));
        }
        Ok(Arc::new(WriteExec::new(
            self.writer().await?,
            input,
            WriteKind::Upsert,
        )))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("DELETE")?;
        let me = Arc::new(self.shallow_clone());
        let input = me.select_keys(state, Vec::new(), filters).await?;
        Ok(Arc::new(WriteExec::new(
            self.writer().await?,
            input,
            WriteKind::Delete,
        )))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.check_writable("UPDATE")?;
        let view = self.view().await?;
        let mut extra = Vec::new();
        for (name, e) in assignments {
            let i = view.schema.schema.index_of(&name)?;
            if view.schema.key_indices.contains(&i) {
                return Err(DataFusionError::Plan(format!(
                    "UPDATE cannot change primary-key column {name}; delete the row and insert it under the new key"
                )));
            }
            let dt = view.schema.schema.field(i).data_type().clone();
            extra.push(datafusion::logical_expr::cast(e, dt).alias(name));
        }
        let me = Arc::new(self.shallow_clone());
        let input = me.select_keys(state, extra, filters).await?;
        Ok(Arc::new(WriteExec::new(
            self.writer().await?,
            input,
            WriteKind::Update,
        )))
    }
}

impl StrataTable {
    /// The same table sharing this query's snapshot.
    fn shallow_clone(&self) -> Self {
        Self {
            db: self.db.clone(),
            name: self.name.clone(),
            table: self.table.clone(),
            schema: self.schema.clone(),
            as_of: self.as_of,
            options: self.options.clone(),
            view: self.view.clone(),
        }
    }
}

/// What a [`WriteExec`] does with its input rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Whole rows (INSERT).
    Upsert,
    /// Key columns plus the assigned ones (UPDATE).
    Update,
    /// Key columns (DELETE).
    Delete,
}

/// Applies its input to a table through the ingest path (validation, WAL, durability) one
/// batch at a time (each batch is atomic), then returns the row count.
pub struct WriteExec {
    table: strata_engine::Table,
    input: Arc<dyn ExecutionPlan>,
    kind: WriteKind,
    props: Arc<PlanProperties>,
}

impl fmt::Debug for WriteExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteExec({:?} {})", self.kind, self.table.name())
    }
}

fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

impl WriteExec {
    fn new(table: strata_engine::Table, input: Arc<dyn ExecutionPlan>, kind: WriteKind) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            table,
            input,
            kind,
            props,
        }
    }
}

impl DisplayAs for WriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StrataWriteExec: {:?} into {}",
            self.kind,
            self.table.name()
        )
    }
}

impl ExecutionPlan for WriteExec {
    fn name(&self) -> &str {
        "StrataWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
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
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("WriteExec takes one child".into()))?;
        Ok(Arc::new(Self::new(self.table.clone(), input, self.kind)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "WriteExec has one partition, asked for {partition}"
            )));
        }
        let input = datafusion::physical_plan::execute_stream(self.input.clone(), context)?;
        let (table, kind) = (self.table.clone(), self.kind);
        let fut = async move {
            let mut input = input;
            let mut count = 0u64;
            while let Some(batch) = input.next().await {
                let batch = batch?;
                if batch.num_rows() == 0 {
                    continue;
                }
                let n = batch.num_rows() as u64;
                let batch = strip_metadata(batch)?;
                let m = match kind {
                    WriteKind::Upsert => Mutation::Upsert(batch),
                    WriteKind::Update => Mutation::Update(batch),
                    WriteKind::Delete => Mutation::Delete(batch),
                };
                table
                    .write(&[m], WriteOptions::default())
                    .await
                    .map_err(engine_err)?;
                count += n;
            }
            let out = RecordBatch::try_new(
                count_schema(),
                vec![Arc::new(UInt64Array::from(vec![count]))],
            )?;
            Ok(out)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Input batches carry DataFusion's field metadata and qualifiers-free names already; drop
/// metadata so the engine compares only names, types and nullability.
fn strip_metadata(batch: RecordBatch) -> Result<RecordBatch> {
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), f.is_nullable()))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        batch.columns().to_vec(),
    )?)
}
