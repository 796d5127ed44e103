//! The query service: one DataFusion session per query over the Strata catalog, with the
//! safety rules (no file or URL access, no DDL, a memory limit and a timeout per query).

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::information_schema::{INFORMATION_SCHEMA, InformationSchemaProvider};
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    MemorySchemaProvider, SchemaProvider,
};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::{DataFrame, SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use strata_engine::Db;

use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{
    PgCatalogSchemaProvider, PgCatalogStaticTables, setup_pg_catalog,
};

use crate::auth::{DEFAULT_NAMESPACE, Principal, Scope, qualified, split_name};
use crate::catalog::{AsOfFunction, StrataSchema};
use crate::error::{QueryError, QueryErrorKind};
use crate::physical::Physical;
use crate::postgres::information_schema::PgInformationSchema;
use crate::provider::TableOptions;
use crate::shapes::{PlanCache, PlanCounts};

/// Query service settings (serde; every field has a default).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Memory one query may use for its operators (sorts, joins, aggregates); over it the
    /// query fails with `resources_exhausted` (nothing spills to the server's disk).
    pub memory_limit_bytes: usize,
    /// A query running longer fails with `timeout`.
    pub timeout_ms: u64,
    /// Rows per batch a scan produces.
    pub batch_rows: usize,
    /// Key-range partitions a scan is split into at most (0 = the number of cores).
    pub scan_partitions: usize,
    /// Bytes of results the HTTP endpoint buffers for one response at most.
    pub result_bytes_max: usize,
    /// The largest request message the server accepts: one Flight SQL message (an Arrow
    /// batch of a bulk ingest or a DoPut), one message of the gRPC data API, one data-API
    /// HTTP body. Larger ones are refused with a size error (gRPC `INVALID_ARGUMENT` naming the size and the limit, HTTP 413).
    pub message_bytes_max: usize,
    /// PostgreSQL-protocol connections open at once at most (PostgreSQL's
    /// `max_connections`); one more is refused with SQLSTATE 53300.
    pub postgres_connections_max: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            memory_limit_bytes: 1 << 30,
            timeout_ms: 300_000,
            batch_rows: 8192,
            scan_partitions: 0,
            result_bytes_max: 256 << 20,
            message_bytes_max: crate::flight::MESSAGE_BYTES_MAX,
            postgres_connections_max: 100,
        }
    }
}

/// A statement that changes data, sent on to the ingest node owning its table: `owner` (an
/// HTTP address), the SQL, and the caller's `Authorization` header value.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// The owning ingest node's HTTP address.
    pub owner: String,
    /// The statement (no parameters).
    pub sql: String,
    /// The caller's credentials, passed on as they came.
    pub authorization: Option<String>,
}

/// Runs a [`Forwarded`] statement on its owner: the row count it answers.
pub type Forward = Arc<
    dyn Fn(Forwarded) -> futures::future::BoxFuture<'static, Result<i64, QueryError>> + Send + Sync,
>;

/// Rows of a bulk ingest for a table another ingest node owns, sent on to it: `owner` (an
/// HTTP address), the table, the rows, and the caller's `Authorization` header value.
#[derive(Debug, Clone)]
pub struct ForwardedRows {
    /// The owning ingest node's HTTP address.
    pub owner: String,
    /// The table's full name.
    pub table: String,
    /// The rows (at least one batch, all of one schema).
    pub batches: Vec<RecordBatch>,
    /// The caller's credentials, passed on as they came.
    pub authorization: Option<String>,
}

/// Upserts [`ForwardedRows`] on their owner: the rows it wrote.
pub type ForwardRows = Arc<
    dyn Fn(ForwardedRows) -> futures::future::BoxFuture<'static, Result<u64, QueryError>>
        + Send
        + Sync,
>;

/// Answers SQL over every table of a Strata database.
#[derive(Clone)]
pub struct QueryService {
    db: Db,
    config: QueryConfig,
    writable: bool,
    /// Where Flight SQL's writes for another ingest node's tables go (see
    /// [`QueryService::with_forward`]).
    forward: Option<Forward>,
    /// Where bulk ingests for another ingest node's tables go (see
    /// [`QueryService::with_forward_rows`]).
    forward_rows: Option<ForwardRows>,
    /// The session every query's session is cloned from: settings, built-in functions,
    /// planners and rules, built once (building them took about a twentieth of the server's
    /// CPU under LASER's HTAP mix). Each query adds its own catalog, `as_of` and, at
    /// execution, its own memory-limited runtime.
    base: Arc<std::sync::OnceLock<SessionState>>,
    /// Sessions for PostgreSQL clients (see [`QueryService::for_postgres`]): the tables of
    /// `pg_catalog` (read once) and PostgreSQL's catalog functions.
    postgres: Option<Arc<PostgresCatalogs>>,
    /// Optimized plans of the read-only statements seen, by shape (see [`crate::shapes`]).
    shapes: Arc<PlanCache>,
    /// How statements' plans were had, this service's and its PostgreSQL sessions'.
    plan_counts: PlanCounts,
    /// What the node still has to do before it answers (`/ready`, gRPC health).
    startup: Arc<crate::ready::Startup>,
}

/// The `pg_catalog` schemas of PostgreSQL sessions: one per caller, kept for the service's
/// life, so that the object ids a client reads in one statement name the same objects in
/// the next (see [`crate::postgres::catalog`]).
#[derive(Default)]
struct PostgresCatalogs {
    /// PostgreSQL's own catalog rows (types, functions, ...), read once.
    tables: std::sync::OnceLock<Arc<PgCatalogStaticTables>>,
    /// By caller.
    by_caller: parking_lot::Mutex<std::collections::HashMap<String, Arc<dyn SchemaProvider>>>,
}

impl PostgresCatalogs {
    /// The `pg_catalog` schema of `who`'s sessions.
    fn for_caller(&self, db: &Db, who: &Principal) -> Result<Arc<dyn SchemaProvider>, QueryError> {
        let key = format!("{who:?}");
        if let Some(p) = self.by_caller.lock().get(&key) {
            return Ok(p.clone());
        }
        let tables = match self.tables.get() {
            Some(t) => t.clone(),
            None => {
                let t = Arc::new(PgCatalogStaticTables::try_new()?);
                self.tables.get_or_init(|| t).clone()
            }
        };
        let provider: Arc<dyn SchemaProvider> = Arc::new(PgCatalogSchemaProvider::try_new(
            crate::postgres::catalog::CallerCatalog::new(db.clone(), who.clone()),
            tables,
            EmptyContextProvider,
        )?);
        let provider: Arc<dyn SchemaProvider> = Arc::new(
            crate::postgres::constraints::WithKeys::new(provider, db.clone(), who.clone()),
        );
        Ok(self.by_caller.lock().entry(key).or_insert(provider).clone())
    }
}

impl std::fmt::Debug for QueryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryService")
            .field("config", &self.config)
            .field("writable", &self.writable)
            .field("forward", &self.forward.is_some())
            .finish_non_exhaustive()
    }
}

/// The catalog every session's tables are in (its schemas are the namespaces; unqualified
/// names are in [`DEFAULT_NAMESPACE`]).
pub(crate) const CATALOG: &str = "strata";

/// A runtime that reads no files and never spills, with a memory pool of `memory_limit`
/// bytes when given (a query's operators) or none (the shared base session, which only
/// plans).
fn runtime(memory_limit: Option<usize>) -> Result<Arc<RuntimeEnv>, QueryError> {
    let mut builder = RuntimeEnvBuilder::new();
    if let Some(limit) = memory_limit {
        builder = builder.with_memory_limit(limit, 1.0);
    }
    Ok(builder
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .with_object_store_registry(Arc::new(NoFiles))
        .build_arc()?)
}

/// Refuses every URL: SQL reads Strata tables only, never the server's files or the web.
#[derive(Debug)]
struct NoFiles;

impl ObjectStoreRegistry for NoFiles {
    fn register_store(
        &self,
        _url: &url::Url,
        _store: Arc<dyn object_store::ObjectStore>,
    ) -> Option<Arc<dyn object_store::ObjectStore>> {
        None
    }

    fn get_store(
        &self,
        url: &url::Url,
    ) -> datafusion::error::Result<Arc<dyn object_store::ObjectStore>> {
        Err(datafusion::error::DataFusionError::Plan(format!(
            "access to {url} is not allowed: SQL reads Strata tables only"
        )))
    }
}

/// A planned query: its session (keeps the snapshot alive) and its data frame. Run it with
/// [`QueryService::stream_planned`], which gives its operators the query's memory limit
/// (the session's own runtime has none: it is shared by every session).
pub struct Planned {
    /// The plan, with the session it belongs to.
    pub(crate) df: DataFrame,
    /// Whether `df`'s plan is optimized already (kept by its shape; `Some`): only physical
    /// planning remains, from the shape's kept physical plans where they serve.
    pub(crate) optimized: Option<Arc<Physical>>,
}

/// The physical plan of `df`; `optimized`: its logical plan is optimized already (kept by
/// its shape), so the analyzer and optimizer do not run again, and the shape's kept
/// physical plans ([`crate::physical`]) serve where they fit.
pub(crate) async fn physical_plan(
    df: DataFrame,
    optimized: Option<Arc<Physical>>,
) -> datafusion::error::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    if let Some(physical) = optimized {
        let (state, plan) = df.into_parts();
        if let Some(scan) = table_scan_only(&state, &plan).await? {
            return Ok(scan);
        }
        if let Some(kept) = physical.plan(&state, &plan).await? {
            return Ok(kept);
        }
        let made = state
            .query_planner()
            .create_physical_plan(&plan, &state)
            .await?;
        physical.keep(&made);
        Ok(made)
    } else {
        df.create_physical_plan().await
    }
}

/// The physical plan of an optimized `plan` that is one scan of a Strata table and nothing
/// else (a point read or a key range: every filter taken exactly by the table, no limit,
/// no operator above): the table's own scan under the cooperative wrapper, as DataFusion's
/// planner makes it, without running its physical optimizer rules over a one-node plan.
/// For a SQL point read those rules cost more of the server's CPU than the read (8.5%
/// against 2.3%, section "a SQL statement's fixed cost" of docs/BENCHMARKS.md). `None`
/// for any other plan, or a scan whose columns are not the plan's: planned as usual.
pub(crate) async fn table_scan_only(
    state: &SessionState,
    plan: &LogicalPlan,
) -> datafusion::error::Result<Option<Arc<dyn datafusion::physical_plan::ExecutionPlan>>> {
    use datafusion::logical_expr::TableProviderFilterPushDown;
    let LogicalPlan::TableScan(scan) = plan else {
        return Ok(None);
    };
    let Ok(table) = datafusion::datasource::source_as_provider(&scan.source) else {
        return Ok(None);
    };
    if scan.fetch.is_some() || !table.is::<crate::provider::StrataTable>() {
        return Ok(None);
    }
    let filters =
        datafusion::logical_expr::expr_rewriter::unnormalize_cols(scan.filters.iter().cloned());
    // A lone scan implies it (a filter taken inexactly keeps a Filter above the scan); checked
    // anyway, as it is what makes the scan alone the whole answer.
    let taken = table.supports_filters_pushdown(&filters.iter().collect::<Vec<_>>())?;
    if taken
        .iter()
        .any(|t| *t != TableProviderFilterPushDown::Exact)
    {
        return Ok(None);
    }
    let exec = table
        .scan(state, scan.projection.as_ref(), &filters, None)
        .await?;
    let (got, wanted) = (exec.schema(), plan.schema().fields());
    let same = got.fields().len() == wanted.len()
        && got
            .fields()
            .iter()
            .zip(wanted.iter())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if !same {
        return Ok(None);
    }
    Ok(Some(Arc::new(
        datafusion::physical_plan::coop::CooperativeExec::new(exec),
    )))
}

impl Planned {
    /// A plan still to be optimized.
    pub(crate) fn new(df: DataFrame) -> Self {
        Self {
            df,
            optimized: None,
        }
    }
}

/// A run this soon after its statement was checked reuses the plan checked then (ADBC,
/// JDBC and PostgreSQL drivers prepare every statement they send, then run it at once): its
/// tables as the catalog had them then, their data as of the run.
pub const FIRST_RUN_WITHIN: Duration = Duration::from_secs(1);

/// A statement parsed, planned and checked for a caller, not yet run: the session it was
/// planned in (with the catalog as of then) and its logical plan, parameters unbound. No
/// table snapshot is taken until it runs.
#[derive(Clone)]
pub struct Checked {
    /// Shared, not copied, by clones of this: the run that takes the last one moves it.
    state: Arc<SessionState>,
    plan: LogicalPlan,
    /// Whether `plan` is optimized already (see [`Planned::optimized`]).
    optimized: Option<Arc<Physical>>,
    at: std::time::Instant,
}

impl Checked {
    /// `plan`, checked now in session `state`.
    pub(crate) fn new(
        state: SessionState,
        plan: LogicalPlan,
        optimized: Option<Arc<Physical>>,
    ) -> Self {
        Self {
            state: Arc::new(state),
            plan,
            optimized,
            at: std::time::Instant::now(),
        }
    }

    /// This plan, if it was checked within [`FIRST_RUN_WITHIN`]; otherwise the statement
    /// is planned afresh.
    pub(crate) fn fresh(self) -> Option<Self> {
        (self.at.elapsed() < FIRST_RUN_WITHIN).then_some(self)
    }
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("plan", &self.plan.display().to_string())
            .finish()
    }
}

impl QueryService {
    /// A service over `db`. `writable`: INSERT / UPDATE / DELETE go through `db` (only where
    /// this process is the ingest node of the tables, as in `strata serve`).
    pub fn new(db: Db, config: QueryConfig, writable: bool) -> Self {
        let plan_counts = PlanCounts::default();
        Self {
            db,
            config,
            writable,
            forward: None,
            forward_rows: None,
            base: Arc::default(),
            postgres: None,
            shapes: Arc::new(PlanCache::new(plan_counts.clone())),
            plan_counts,
            startup: crate::ready::Startup::ready(),
        }
    }

    /// This service with bulk ingests (Flight SQL's `CommandStatementIngest`) for a table
    /// another ingest node owns sent there by `forward`, instead of failing with
    /// `not_owner`.
    pub fn with_forward_rows(mut self, forward: ForwardRows) -> Self {
        self.forward_rows = Some(forward);
        self
    }

    /// Where bulk ingests for another ingest node's tables go, if anywhere.
    pub(crate) fn forward_rows(&self) -> Option<&ForwardRows> {
        self.forward_rows.as_ref()
    }

    /// This service, not ready (`/ready`, gRPC health) until `startup` says so (see
    /// [`crate::ready::open_tables`]).
    pub fn with_startup(mut self, startup: Arc<crate::ready::Startup>) -> Self {
        self.startup = startup;
        self
    }

    /// What the node still has to do before it answers.
    pub fn startup(&self) -> &Arc<crate::ready::Startup> {
        &self.startup
    }

    /// This service with sessions as PostgreSQL clients expect them: a `pg_catalog` schema
    /// (`pg_class`, `pg_namespace`, `pg_attribute`, `pg_type`, ...) describing the tables
    /// the caller may read, and PostgreSQL's catalog functions (`pg_table_is_visible`,
    /// `format_type`, `current_schema`, ...), which `psql`'s `\dt` / `\d` and drivers'
    /// startup and metadata queries use.
    pub fn for_postgres(&self) -> Self {
        Self {
            base: Arc::default(),
            postgres: Some(Arc::default()),
            shapes: Arc::new(PlanCache::new(self.plan_counts.clone())),
            ..self.clone()
        }
    }

    /// This service, sending statements that change another ingest node's tables (which it
    /// answers `not_owner`) to that node with `forward`, as the HTTP API forwards requests.
    pub fn with_forward(mut self, forward: Forward) -> Self {
        self.forward = Some(forward);
        self
    }

    /// Where writes for another ingest node's tables go, when anywhere.
    pub(crate) fn forward(&self) -> Option<&Forward> {
        self.forward.as_ref()
    }

    /// The settings.
    pub fn config(&self) -> &QueryConfig {
        &self.config
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Whether writes go through this service (it is the tables' writer).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// When a query started now must end.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout()
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms.max(1))
    }

    fn timed_out(&self) -> QueryError {
        QueryError::new(
            QueryErrorKind::Timeout,
            format!(
                "the query ran longer than its timeout of {} ms",
                self.config.timeout_ms
            ),
        )
    }

    /// A fresh session with the catalog as of now, holding only the namespaces `who` may
    /// read: tables of other namespaces do not exist for the session.
    ///
    /// The session is built once per statement from a state made once per service: a
    /// `SessionState` copies its function registries (hundreds of named entries) when
    /// cloned, so each statement clones it once, here, and moves it on from then on.
    pub(crate) async fn state_for(&self, who: &Principal) -> Result<SessionState, QueryError> {
        let options = TableOptions {
            batch_rows: self.config.batch_rows,
            partitions: self.partitions(),
            writable: self.writable,
        };
        let namespaces = StrataSchema::load(self.db.clone(), options, who).await?;
        let mut state = self.base_state()?;
        let catalog = Arc::new(MemoryCatalogProvider::new());
        catalog.register_schema(DEFAULT_NAMESPACE, Arc::new(MemorySchemaProvider::new()))?;
        for (ns, schema) in &namespaces {
            catalog.register_schema(ns, schema.clone())?;
        }
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        catalogs.register_catalog(CATALOG.to_string(), catalog.clone());
        state.register_catalog_list(catalogs.clone());
        state.register_udtf("as_of", Arc::new(AsOfFunction { namespaces }));
        if let Some(pg) = &self.postgres {
            catalog.register_schema("pg_catalog", pg.for_caller(&self.db, who)?)?;
            // `information_schema` the PostgreSQL way (type names, 1-based positions), in
            // place of DataFusion's, which the session then no longer intercepts.
            let inner = InformationSchemaProvider::new(catalogs.clone())
                .with_table_functions(state.table_functions().clone());
            catalog.register_schema(
                INFORMATION_SCHEMA,
                Arc::new(PgInformationSchema::new(
                    catalogs.clone(),
                    inner,
                    self.db.clone(),
                    who.clone(),
                )),
            )?;
            state.config_mut().options_mut().catalog.information_schema = false;
        }
        Ok(state)
    }

    /// Scan partitions per table.
    fn partitions(&self) -> usize {
        if self.config.scan_partitions == 0 {
            cores()
        } else {
            self.config.scan_partitions
        }
    }

    /// A copy of the base session (built at the first query).
    fn base_state(&self) -> Result<SessionState, QueryError> {
        if let Some(base) = self.base.get() {
            return Ok(base.clone());
        }
        // No memory limit here: a query's operators run under the runtime of
        // `query_runtime`, with the limit. Planning reads no files and spills nothing.
        let runtime = runtime(None)?;
        let config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG, DEFAULT_NAMESPACE)
            .with_create_default_catalog_and_schema(false)
            .with_information_schema(true)
            .with_target_partitions(self.partitions())
            .with_batch_size(self.config.batch_rows)
            // Strata stores Utf8; `VARCHAR` in CREATE TABLE maps to it.
            .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false);
        let config = if self.postgres.is_some() {
            // Statements arrive as PostgreSQL clients write them.
            config.set_str("datafusion.sql_parser.dialect", "PostgreSQL")
        } else {
            config
        };
        let mut built = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            // A timed-out query stops where its joins yield (see `crate::coop`).
            .with_physical_optimizer_rule(Arc::new(crate::coop::YieldAboveJoins))
            .build();
        // Scalar subqueries with PostgreSQL's meaning, on every path (see `checked_plan`).
        datafusion::execution::FunctionRegistry::register_udaf(
            &mut built,
            Arc::new(crate::scalar_subquery::udaf()),
        )?;
        if self.postgres.is_some() {
            // PostgreSQL's functions and type names (`regclass`, ...), installed by the
            // crate on a session with the catalog it names; each query's session then
            // brings its own catalogs and `pg_catalog` (see `context_for`).
            let ctx = SessionContext::new_with_state(built);
            ctx.register_catalog(CATALOG, Arc::new(MemoryCatalogProvider::new()));
            setup_pg_catalog(&ctx, CATALOG, EmptyContextProvider).map_err(|e| *e)?;
            for f in crate::postgres::functions::udfs() {
                ctx.register_udf(f);
            }
            built = ctx.state();
        }
        Ok(self.base.get_or_init(|| built).clone())
    }

    /// The runtime one query's operators run under: its own memory pool of
    /// `memory_limit_bytes`, no spilling, no files.
    fn query_runtime(&self) -> Result<Arc<RuntimeEnv>, QueryError> {
        runtime(Some(self.config.memory_limit_bytes))
    }

    /// Plans one SQL statement, refusing what SQL over Strata must not do.
    pub async fn plan(&self, sql: &str) -> Result<Planned, QueryError> {
        self.plan_as(sql, &Principal::unrestricted()).await
    }

    /// [`QueryService::plan`] for a caller: it sees the namespaces it may read, writes need
    /// its `write` scope and CREATE / DROP TABLE its `admin` scope on the table's namespace.
    pub async fn plan_as(&self, sql: &str, who: &Principal) -> Result<Planned, QueryError> {
        self.plan_bound_as(sql, &[], who).await
    }

    /// [`QueryService::plan_as`] with the values of the statement's parameters (`$1`, `$2`,
    /// ... in order; none: the statement has none).
    pub async fn plan_bound_as(
        &self,
        sql: &str,
        params: &[ScalarValue],
        who: &Principal,
    ) -> Result<Planned, QueryError> {
        let fut = async {
            let (state, plan, optimized) = self.checked_plan(sql, params, who).await?;
            if optimized.is_some() {
                let df = DataFrame::new(state, plan);
                return Ok(Planned { df, optimized });
            }
            let ctx = SessionContext::new_with_state(state);
            if let Some(done) = self.table_ddl(&plan, who).await? {
                let df = ctx.read_batch(done)?;
                return Ok(Planned::new(df));
            }
            let df = ctx.execute_logical_plan(plan).await?;
            Ok(Planned::new(df))
        };
        tokio::time::timeout(self.timeout(), fut)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// How statements' plans were had (see [`crate::shapes`]; on `/metrics`).
    pub fn plan_counts(&self) -> &PlanCounts {
        &self.plan_counts
    }

    /// A fresh session for `who` and the statement's logical plan, refused if it does what
    /// SQL over Strata must not; CREATE / DROP TABLE pass through for
    /// [`QueryService::table_ddl`] to check and run. A read-only statement whose shape was
    /// seen before gets its kept plan, optimized already, and the shape's kept physical
    /// plans (`Some`).
    async fn checked_plan(
        &self,
        sql: &str,
        params: &[ScalarValue],
        who: &Principal,
    ) -> Result<(SessionState, LogicalPlan, Option<Arc<Physical>>), QueryError> {
        let state = self.state_for(who).await?;
        let sql = numbered_placeholders(sql);
        // Scalar subqueries with PostgreSQL's meaning (see `scalar_subquery`); the
        // PostgreSQL port's statements have been rewritten so already.
        let rewritten = match self.postgres {
            None => crate::scalar_subquery::rewrite(&sql),
            Some(_) => None,
        };
        let sql = match rewritten {
            Some(rewritten) => std::borrow::Cow::Owned(rewritten),
            None => sql,
        };
        let failed = match self.shapes.plan(&state, &sql, params).await {
            Ok((plan, physical)) => {
                check_plan(&plan, self.writable, who)?;
                return Ok((state, plan, Some(physical)));
            }
            Err(miss) => miss.failed,
        };
        self.plan_counts.fresh();
        let mut plan = state.create_logical_plan(&sql).await?;
        if let Some(shape) = failed {
            // The statement plans where its shape did not: plan it as sent from now on.
            self.shapes.never(shape);
        }
        if !params.is_empty() {
            plan = plan.with_param_values(params.to_vec())?;
        }
        if !is_table_ddl(&plan) {
            SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_statements(false)
                .with_allow_dml(true)
                .verify_plan(&plan)
                .map_err(forbid)?;
            check_plan(&plan, self.writable, who)?;
        }
        Ok((state, plan, None))
    }

    /// `CREATE TABLE t (... PRIMARY KEY (...))` and `DROP TABLE t` on Strata tables, where
    /// the service is writable; other DDL (views, external tables on files) is refused.
    async fn table_ddl(
        &self,
        plan: &LogicalPlan,
        who: &Principal,
    ) -> Result<Option<RecordBatch>, QueryError> {
        use datafusion::common::Constraint;
        use datafusion::logical_expr::DdlStatement;
        let LogicalPlan::Ddl(ddl) = plan else {
            return Ok(None);
        };
        if !is_table_ddl(plan) {
            return Ok(None);
        }
        if !self.writable {
            return Err(QueryError::new(
                QueryErrorKind::Forbidden,
                "tables are created and dropped on the ingest node, not on this query service",
            ));
        }
        let done = |what: String| -> Result<Option<RecordBatch>, QueryError> {
            let schema = Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new("result", arrow::datatypes::DataType::Utf8, false),
            ]));
            let array = Arc::new(arrow::array::StringArray::from(vec![what]));
            Ok(Some(RecordBatch::try_new(schema, vec![array]).map_err(
                |e| QueryError::new(QueryErrorKind::Internal, e.to_string()),
            )?))
        };
        match ddl {
            DdlStatement::CreateMemoryTable(c) => {
                let invalid = |m: &str| QueryError::new(QueryErrorKind::Invalid, m.to_string());
                if c.or_replace || c.temporary || !c.column_defaults.is_empty() {
                    return Err(invalid(
                        "CREATE TABLE supports column definitions and a PRIMARY KEY only (no OR REPLACE, TEMPORARY or DEFAULT)",
                    ));
                }
                if !matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row)
                {
                    return Err(invalid(
                        "CREATE TABLE ... AS SELECT is not supported; create the table, then INSERT INTO it",
                    ));
                }
                let mut schema = c.input.schema().as_arrow().clone();
                let pk = c
                    .constraints
                    .iter()
                    .find_map(|k| match k {
                        Constraint::PrimaryKey(cols) => Some(cols.clone()),
                        Constraint::Unique(_) => None,
                    })
                    .ok_or_else(|| invalid("a Strata table needs a PRIMARY KEY"))?;
                // Key columns are never NULL.
                schema = arrow::datatypes::Schema::new(
                    schema
                        .fields()
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            let f = f.as_ref().clone();
                            if pk.contains(&i) {
                                f.with_nullable(false)
                            } else {
                                f
                            }
                        })
                        .collect::<Vec<_>>(),
                );
                let pk: Vec<&str> = pk
                    .iter()
                    .map(|i| schema.field(*i).name().as_str())
                    .collect();
                let name = strata_name(&c.name);
                who.check(split_name(&name).0, Scope::Admin)?;
                match self.db.create_table(&name, schema.clone(), &pk).await {
                    Ok(_) => done(format!("created table {name}")),
                    Err(strata_engine::Error::TableExists(_)) if c.if_not_exists => {
                        done(format!("table {name} exists"))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            DdlStatement::DropTable(d) => {
                let name = strata_name(&d.name);
                who.check(split_name(&name).0, Scope::Admin)?;
                match self.db.drop_table(&name).await {
                    Ok(()) => done(format!("dropped table {name}")),
                    Err(strata_engine::Error::TableNotFound(_)) if d.if_exists => {
                        done(format!("table {name} does not exist"))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            _ => Ok(None),
        }
    }

    /// The schema of a statement's results, without running it (nothing is written, no
    /// table created).
    pub async fn describe(&self, sql: &str) -> Result<SchemaRef, QueryError> {
        self.describe_as(sql, &Principal::unrestricted()).await
    }

    /// [`QueryService::describe`] for a caller (see [`QueryService::plan_as`]).
    pub async fn describe_as(&self, sql: &str, who: &Principal) -> Result<SchemaRef, QueryError> {
        Ok(self.prepare_statement_as(sql, who).await?.0)
    }

    /// A statement a client sends to have its results fetched later (Flight SQL's
    /// GetFlightInfo, whose DoGet follows): the schema of its results and the plan the
    /// fetch runs, so that it does not parse and plan the statement again. A statement that
    /// changes data or tables (INSERT / UPDATE / DELETE, CREATE / DROP TABLE) runs here,
    /// exactly once, and the plan only hands its result on (true): clients may never fetch
    /// it (ADBC's `cursor.execute` followed by `close`), and a fetch must not run it again.
    pub async fn prepare_as(
        &self,
        sql: &str,
        params: &[ScalarValue],
        who: &Principal,
    ) -> Result<(SchemaRef, Planned, bool), QueryError> {
        self.prepare_checked_as(sql, None, params, who).await
    }

    /// [`QueryService::prepare_as`] from the plan [`QueryService::check_statement_as`]
    /// made of `sql` for `who` moments before, when given, instead of parsing and planning
    /// the statement again. Its tables' snapshots are taken when it runs, as for a
    /// statement planned now.
    pub async fn prepare_checked_as(
        &self,
        sql: &str,
        checked: Option<Checked>,
        params: &[ScalarValue],
        who: &Principal,
    ) -> Result<(SchemaRef, Planned, bool), QueryError> {
        let deadline = self.deadline();
        let fut = async {
            let kept = match checked {
                Some(Checked {
                    state,
                    plan,
                    optimized,
                    ..
                }) => {
                    let plan = if params.is_empty() {
                        Some(plan)
                    } else if optimized.is_some() {
                        // None: the values do not bind to the kept plan; plan afresh.
                        crate::shapes::bind_clients(plan, params)
                    } else {
                        Some(plan.with_param_values(params.to_vec())?)
                    };
                    plan.map(|plan| (Arc::unwrap_or_clone(state), plan, optimized))
                }
                None => None,
            };
            let (state, plan, optimized) = match kept {
                Some(k) => k,
                None => self.checked_plan(sql, params, who).await?,
            };
            let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
            if optimized.is_some() {
                let df = DataFrame::new(state, plan);
                return Ok((schema, Planned { df, optimized }, false));
            }
            let ctx = SessionContext::new_with_state(state);
            if let Some(done) = self.table_ddl(&plan, who).await? {
                let schema = done.schema();
                let df = ctx.read_batch(done)?;
                return Ok((schema, Planned::new(df), true));
            }
            let dml = changes_data(&plan);
            let df = ctx.execute_logical_plan(plan).await?;
            let planned = Planned::new(df);
            if !dml {
                return Ok((schema, planned, false));
            }
            let (_, batches) = self.collect_planned(planned, deadline).await?;
            let df = ctx.read_batches(batches)?;
            Ok((schema, Planned::new(df), true))
        };
        tokio::time::timeout(self.timeout(), fut)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// Checks a statement for later runs with parameters (Flight SQL's prepared
    /// statements): the schema of its results, that of its parameters (`$1`, `$2`, ... in
    /// order, typed as the statement uses them; `Utf8` where it does not tell), and whether
    /// it changes data or tables (INSERT / UPDATE / DELETE, CREATE / DROP TABLE). Nothing
    /// runs.
    pub async fn prepare_statement_as(
        &self,
        sql: &str,
        who: &Principal,
    ) -> Result<(SchemaRef, SchemaRef, bool), QueryError> {
        let (results, params, changes, _) = self.check_statement_as(sql, who).await?;
        Ok((results, params, changes))
    }

    /// [`QueryService::prepare_statement_as`], and the checked plan, for a first run that
    /// follows at once ([`QueryService::prepare_checked_as`]).
    pub async fn check_statement_as(
        &self,
        sql: &str,
        who: &Principal,
    ) -> Result<(SchemaRef, SchemaRef, bool, Checked), QueryError> {
        let fut = async {
            let (state, plan, optimized) = self.checked_plan(sql, &[], who).await?;
            let changes = changes_data(&plan);
            let results = if is_table_ddl(&plan) {
                ddl_result_schema()
            } else {
                Arc::new(plan.schema().as_arrow().clone())
            };
            let mut params: Vec<(usize, String, DataType)> = plan
                .get_parameter_types()?
                .into_iter()
                .map(|(id, t)| {
                    let n = id
                        .strip_prefix('$')
                        .and_then(|n| n.parse::<usize>().ok())
                        .ok_or_else(|| {
                            QueryError::new(
                                QueryErrorKind::Invalid,
                                format!(
                                    "parameter {id}: only positional parameters ($1, $2, ...) are supported"
                                ),
                            )
                        })?;
                    Ok((n, id, t.unwrap_or(DataType::Utf8)))
                })
                .collect::<Result<_, QueryError>>()?;
            params.sort();
            let fields: Vec<Field> = params
                .into_iter()
                .map(|(_, id, t)| Field::new(id, t, true))
                .collect();
            Ok((
                results,
                Arc::new(Schema::new(fields)),
                changes,
                Checked::new(state, plan, optimized),
            ))
        };
        tokio::time::timeout(self.timeout(), fut)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// Runs one statement and streams its results under the query's deadline.
    pub async fn stream(
        &self,
        sql: &str,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        self.stream_as(sql, &Principal::unrestricted()).await
    }

    /// [`QueryService::stream`] for a caller (see [`QueryService::plan_as`]).
    pub async fn stream_as(
        &self,
        sql: &str,
        who: &Principal,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        let deadline = self.deadline();
        let planned = self.plan_as(sql, who).await?;
        self.stream_planned(planned, deadline).await
    }

    /// Runs a statement [`QueryService::prepare_as`] planned, streaming its results until
    /// `deadline`.
    pub async fn stream_planned(
        &self,
        planned: Planned,
        deadline: tokio::time::Instant,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        let Planned { df, optimized } = planned;
        let task = Arc::new(df.task_ctx().with_runtime(self.query_runtime()?));
        let plan = tokio::time::timeout_at(deadline, physical_plan(df, optimized))
            .await
            .map_err(|_| self.timed_out())??;
        let stream = datafusion::physical_plan::execute_stream(plan, task)?;
        let schema = stream.schema();
        let timeout_ms = self.config.timeout_ms;
        // `live` turns false once the deadline has passed: the timeout error ends the stream.
        let s = futures::stream::unfold((stream, true), move |(mut stream, live)| async move {
            if !live {
                return None;
            }
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(item)) => Some((item, (stream, live))),
                Ok(None) => None,
                Err(_) => Some((
                    Err(datafusion::error::DataFusionError::External(Box::new(
                        QueryError::new(
                            QueryErrorKind::Timeout,
                            format!("the query ran longer than its timeout of {timeout_ms} ms"),
                        ),
                    ))),
                    (stream, false),
                )),
            }
        });
        Ok((
            schema.clone(),
            Box::pin(RecordBatchStreamAdapter::new(schema, s)),
        ))
    }

    /// Runs one statement to completion.
    pub async fn collect(&self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        self.collect_as(sql, &Principal::unrestricted()).await
    }

    /// [`QueryService::collect`] for a caller (see [`QueryService::plan_as`]).
    pub async fn collect_as(
        &self,
        sql: &str,
        who: &Principal,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        self.collect_bound_as(sql, &[], who).await
    }

    /// [`QueryService::collect_as`] with parameter values (see
    /// [`QueryService::plan_bound_as`]).
    pub async fn collect_bound_as(
        &self,
        sql: &str,
        params: &[ScalarValue],
        who: &Principal,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        let deadline = self.deadline();
        let planned = self.plan_bound_as(sql, params, who).await?;
        self.collect_planned(planned, deadline).await
    }

    /// Runs a planned statement to completion (see [`QueryService::collect_as`]).
    pub(crate) async fn collect_planned(
        &self,
        planned: Planned,
        deadline: tokio::time::Instant,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
        let (schema, mut stream) = self.stream_planned(planned, deadline).await?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while let Some(b) = stream.next().await {
            let b = b.map_err(query_error)?;
            bytes += b.get_array_memory_size();
            if bytes > self.config.result_bytes_max {
                return Err(QueryError::new(
                    QueryErrorKind::ResourcesExhausted,
                    format!(
                        "the result is larger than result_bytes_max ({} bytes); add a LIMIT or use the Arrow Flight SQL endpoint",
                        self.config.result_bytes_max
                    ),
                ));
            }
            out.push(b);
        }
        Ok((schema, out))
    }
}

/// `sql` with JDBC's `?` parameter markers numbered as DataFusion's `$1`, `$2`, ... (in
/// order; markers inside string literals, quoted names and comments are not markers). The
/// JDBC drivers send statements with `?` as the application wrote them.
pub(crate) fn numbered_placeholders(sql: &str) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    if !sql.contains('?') {
        return sql.into();
    }
    // Unparsable text goes to the planner as it is, which says what is wrong with it.
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location() else {
        return sql.into();
    };
    // Only the markers are replaced, in place: the rest of the text stays byte for byte as
    // it came (printing tokens back would unescape quotes: `'it''s'` would become `'it's'`).
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> Option<usize> {
        let start = *line_starts.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        sql[start..]
            .char_indices()
            .nth(column)
            .map(|(i, _)| start + i)
    };
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut copied, mut n) = (0, 0);
    for t in tokens {
        if !matches!(&t.token, Token::Placeholder(p) if p == "?") {
            continue;
        }
        let at = offset(t.span.start.line, t.span.start.column);
        let Some(at) = at.filter(|&at| at >= copied && sql.as_bytes().get(at) == Some(&b'?'))
        else {
            return sql.into();
        };
        n += 1;
        out.push_str(&sql[copied..at]);
        out.push_str(&format!("${n}"));
        copied = at + 1;
    }
    out.push_str(&sql[copied..]);
    out.into()
}

/// `sql` with its parameters (`$1`, `$2`, ... or `?`) written in as SQL literals: a write
/// with parameters sent on to the ingest node owning its table, whose SQL endpoint takes
/// text. Strings are quoted and escaped by the SQL printer, not spliced.
pub(crate) fn with_literals(sql: &str, params: &[ScalarValue]) -> Result<String, QueryError> {
    use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, Value, visit_expressions_mut};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    use std::ops::ControlFlow;
    let invalid = |m: String| QueryError::new(QueryErrorKind::Invalid, m);
    let sql = numbered_placeholders(sql);
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|e| invalid(format!("SQL syntax error: {e}")))?;
    let unparser = datafusion::sql::unparser::Unparser::default();
    let mut bad = None;
    let _ = visit_expressions_mut(&mut statements, |e| {
        let SqlExpr::Value(v) = e else {
            return ControlFlow::Continue(());
        };
        let Value::Placeholder(name) = &v.value else {
            return ControlFlow::Continue(());
        };
        let value = name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| params.get(n.checked_sub(1)?));
        let Some(value) = value else {
            bad = Some(invalid(format!(
                "parameter {name}: the statement has {} parameter values",
                params.len()
            )));
            return ControlFlow::Break(());
        };
        // NaN and the infinities have no literal: a cast from their text.
        let expr = match value {
            ScalarValue::Float64(Some(f)) if !f.is_finite() => datafusion::logical_expr::cast(
                datafusion::logical_expr::lit(f.to_string()),
                DataType::Float64,
            ),
            ScalarValue::Float32(Some(f)) if !f.is_finite() => datafusion::logical_expr::cast(
                datafusion::logical_expr::lit(f.to_string()),
                DataType::Float32,
            ),
            // A decimal's text would be read back as a double (digits past the 16th lost):
            // a cast from its exact text to its own type.
            ScalarValue::Decimal128(Some(_), p, s) => datafusion::logical_expr::cast(
                datafusion::logical_expr::lit(value.to_string()),
                DataType::Decimal128(*p, *s),
            ),
            ScalarValue::Decimal256(Some(_), p, s) => datafusion::logical_expr::cast(
                datafusion::logical_expr::lit(value.to_string()),
                DataType::Decimal256(*p, *s),
            ),
            v => datafusion::logical_expr::lit(v.clone()),
        };
        match unparser.expr_to_sql(&expr) {
            Ok(literal) => {
                *e = literal;
                ControlFlow::Continue(())
            }
            Err(err) => {
                bad = Some(invalid(format!("parameter {name}: {err}")));
                ControlFlow::Break(())
            }
        }
    });
    if let Some(e) = bad {
        return Err(e);
    }
    Ok(sql_text(&statements))
}

/// `statements` as SQL text, `;` between them.
pub(crate) fn sql_text(statements: &[datafusion::sql::sqlparser::ast::Statement]) -> String {
    statements
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether `sql` is one INSERT, UPDATE or DELETE: the statements whose `not_owner` answer
/// is forwarded (a read's is not: its count would stand in for its rows).
pub(crate) fn writes(sql: &str) -> bool {
    use datafusion::sql::parser::{DFParser, Statement};
    use datafusion::sql::sqlparser::ast::Statement as Sql;
    let Ok(mut parsed) = DFParser::parse_sql(sql) else {
        return false;
    };
    parsed.len() == 1
        && matches!(
            parsed.pop_front(),
            Some(Statement::Statement(s))
                if matches!(*s, Sql::Insert(_) | Sql::Update { .. } | Sql::Delete(_))
        )
}

/// CREATE TABLE or DROP TABLE: Strata's own DDL, run by [`QueryService::table_ddl`].
fn is_table_ddl(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(
            datafusion::logical_expr::DdlStatement::CreateMemoryTable(_)
                | datafusion::logical_expr::DdlStatement::DropTable(_)
        )
    )
}

/// Whether a statement changes data or tables (INSERT / UPDATE / DELETE, CREATE / DROP
/// TABLE): Flight SQL runs these when they are sent (see [`QueryService::prepare_as`]) and
/// prepares them as updates.
pub(crate) fn changes_data(plan: &LogicalPlan) -> bool {
    is_table_ddl(plan) || matches!(plan, LogicalPlan::Dml(_))
}

/// What CREATE / DROP TABLE answer: one `result` row.
fn ddl_result_schema() -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("result", arrow::datatypes::DataType::Utf8, false),
    ]))
}

/// The cores this process may use, read once (`available_parallelism` reads the cgroup's
/// files on every call: 5% of the server's CPU at a few hundred small queries a second).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// A DataFusion error as a query error (timeouts raised inside streams included).
pub fn query_error(e: datafusion::error::DataFusionError) -> QueryError {
    if let datafusion::error::DataFusionError::External(inner) = e.find_root()
        && let Some(q) = inner.downcast_ref::<QueryError>()
    {
        return q.clone();
    }
    QueryError::from(e)
}

fn forbid(e: datafusion::error::DataFusionError) -> QueryError {
    QueryError::new(
        QueryErrorKind::Forbidden,
        format!(
            "not allowed: {}. SQL reads and writes Strata tables only (CREATE TABLE ... PRIMARY KEY and DROP TABLE where the service is writable; no external tables, views, COPY or session settings)",
            QueryError::from(e).message
        ),
    )
}

/// Rules DataFusion's own options do not express: no COPY (it writes files), and writes
/// only where the service is writable.
/// The Strata table name of a SQL table reference (`ns.t` -> `ns.t`, `t` and `public.t`
/// -> `t`).
fn strata_name(r: &datafusion::common::TableReference) -> String {
    qualified(r.schema().unwrap_or(DEFAULT_NAMESPACE), r.table())
}

fn check_plan(plan: &LogicalPlan, writable: bool, who: &Principal) -> Result<(), QueryError> {
    let mut bad: Option<QueryError> = None;
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Copy(_) => {
                bad = Some(QueryError::new(
                    QueryErrorKind::Forbidden,
                    "COPY is not allowed: SQL cannot write files on the server",
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
            LogicalPlan::Dml(d) if !writable => {
                bad = Some(QueryError::new(
                    QueryErrorKind::Forbidden,
                    format!(
                        "{} is not available on this query service: it reads the bucket only; send writes to the ingest node (strata serve runs both)",
                        d.op
                    ),
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
            LogicalPlan::Dml(d) => {
                let name = strata_name(&d.table_name);
                if let Err(e) = who.check(split_name(&name).0, Scope::Write) {
                    bad = Some(e);
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match bad {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{Checked, FIRST_RUN_WITHIN, numbered_placeholders, with_literals};
    use datafusion::common::ScalarValue;

    #[tokio::test]
    async fn a_checked_plan_serves_only_a_run_that_follows_at_once() {
        let ctx = datafusion::prelude::SessionContext::new();
        let plan = ctx.state().create_logical_plan("SELECT 1").await.unwrap();
        let now = Checked::new(ctx.state(), plan, None);
        let mut old = now.clone();
        old.at = std::time::Instant::now()
            .checked_sub(FIRST_RUN_WITHIN * 2)
            .unwrap();
        assert!(now.fresh().is_some());
        assert!(old.fresh().is_none());
    }

    #[test]
    fn jdbc_markers_are_numbered_outside_literals_names_and_comments() {
        for (sql, want) in [
            ("SELECT 1", "SELECT 1"),
            (
                "INSERT INTO t VALUES (?, ?, ?)",
                "INSERT INTO t VALUES ($1, $2, $3)",
            ),
            (
                "SELECT '?' AS q, \"a?\" FROM t WHERE id = ? -- why?\n AND x > ?",
                "SELECT '?' AS q, \"a?\" FROM t WHERE id = $1 -- why?\n AND x > $2",
            ),
            ("SELECT $1", "SELECT $1"),
            // Quotes stay escaped: a value such as `?' OR 'a'='a` sent inside a literal by a
            // client that fills parameters in itself must stay one string.
            (
                "DELETE FROM t WHERE name = '?'' OR ''a''=''a' AND id = ?",
                "DELETE FROM t WHERE name = '?'' OR ''a''=''a' AND id = $1",
            ),
            (
                "SELECT \"a\"\"b?\" FROM t WHERE s = 'é''?' AND\n  k = ?",
                "SELECT \"a\"\"b?\" FROM t WHERE s = 'é''?' AND\n  k = $1",
            ),
        ] {
            assert_eq!(numbered_placeholders(sql), want, "{sql}");
        }
    }

    #[test]
    fn parameters_are_written_in_as_literals() {
        let sql = with_literals(
            "INSERT INTO t VALUES ($1, $2, $3)",
            &[
                ScalarValue::Int64(Some(7)),
                ScalarValue::Utf8(Some("it's".into())),
                ScalarValue::Null,
            ],
        )
        .unwrap();
        assert_eq!(sql, "INSERT INTO t VALUES (7, 'it''s', NULL)");
        let sql = with_literals(
            "UPDATE t SET a = ? WHERE id = ?",
            &[ScalarValue::Float64(Some(1.5)), ScalarValue::Int32(Some(2))],
        )
        .unwrap();
        assert_eq!(sql, "UPDATE t SET a = 1.5 WHERE id = 2");
        assert!(
            with_literals(
                "DELETE FROM t WHERE id = $2",
                &[ScalarValue::Int64(Some(1))]
            )
            .is_err()
        );
        // A value that looks like SQL stays a string through the forwarded text, and through
        // the owner numbering `?` markers in it again.
        let sql = with_literals(
            "DELETE FROM t WHERE name = ?",
            &[ScalarValue::Utf8(Some("?' OR 'a'='a".into()))],
        )
        .unwrap();
        assert_eq!(sql, "DELETE FROM t WHERE name = '?'' OR ''a''=''a'");
        assert_eq!(numbered_placeholders(&sql), sql);
        let sql = with_literals(
            "INSERT INTO t VALUES ($1, $2)",
            &[
                ScalarValue::Float64(Some(f64::NAN)),
                ScalarValue::Float64(Some(f64::NEG_INFINITY)),
            ],
        )
        .unwrap();
        assert_eq!(
            sql,
            "INSERT INTO t VALUES (CAST('NaN' AS DOUBLE), CAST('-inf' AS DOUBLE))"
        );
        // 21 digits: a double keeps about 16.
        let sql = with_literals(
            "INSERT INTO t VALUES ($1, $2)",
            &[
                ScalarValue::Decimal128(Some(123_456_789_012_345_678_901), 38, 2),
                ScalarValue::Decimal128(Some(-5), 10, 3),
            ],
        )
        .unwrap();
        assert_eq!(
            sql,
            "INSERT INTO t VALUES (CAST('1234567890123456789.01' AS DECIMAL(38,2)), CAST('-0.005' AS DECIMAL(10,3)))"
        );
    }

    /// What DataFusion reads `sql` (a forwarded statement's literals) as.
    async fn read_back(sql: &str) -> Vec<arrow::array::RecordBatch> {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.sql(sql).await.unwrap().collect().await.unwrap()
    }

    #[tokio::test]
    async fn decimal_literals_read_back_exactly() {
        let batches = read_back(
            "SELECT CAST('1234567890123456789.01' AS DECIMAL(38,2)) AS a, CAST('-0.005' AS DECIMAL(10,3)) AS b",
        )
        .await;
        let col = |i: usize| {
            let a = batches[0]
                .column(i)
                .as_any()
                .downcast_ref::<arrow::array::Decimal128Array>()
                .unwrap();
            (a.value(0), a.precision(), a.scale())
        };
        assert_eq!(col(0), (123_456_789_012_345_678_901, 38, 2));
        assert_eq!(col(1), (-5, 10, 3));
    }

    #[tokio::test]
    async fn non_finite_literals_read_back() {
        let batches =
            read_back("SELECT CAST('NaN' AS DOUBLE) AS a, CAST('-inf' AS DOUBLE) AS b").await;
        let col = |i: usize| {
            batches[0]
                .column(i)
                .as_any()
                .downcast_ref::<arrow::array::Float64Array>()
                .unwrap()
                .value(0)
        };
        assert!(col(0).is_nan());
        assert_eq!(col(1), f64::NEG_INFINITY);
    }
}
