//! Optimized plans of read-only statements, kept by the statement's shape, so that a
//! statement seen before skips DataFusion's SQL planner, analyzer and optimizer (together
//! about a quarter of a short query's server CPU) and goes straight to physical planning
//! (none at all for a plan that is one table scan: `service::table_scan_only`).
//!
//! A statement's shape is its text with the literals it compares columns with (`a0 >=
//! 250000`, `name = 'x'`, `a0 BETWEEN 1 AND 9`) taken out as parameters `$1`, `$2`, ...; a
//! statement with parameters of its own (`$1`, or JDBC's `?`) is its own shape. Clients
//! that send the same query with other values (dashboards, LASER's Q2-Q4, a point read per
//! request) hit the same plan; each run binds its own values into a copy of it.
//!
//! What keeps a kept plan right:
//! - Only queries over Strata tables at their latest state are kept: no INSERT, UPDATE,
//!   DELETE or DDL, no `EXPLAIN`, no time travel (`as_of`), no catalog tables
//!   (`information_schema`, `pg_catalog`), no subqueries, and no function whose value may
//!   change between runs (`now()`, `random()`: DataFusion's optimizer folds them into
//!   constants). Every parameter must have a type DataFusion inferred from a column, and
//!   sit where it only chooses or orders rows (a filter, a join condition, a sort key): a
//!   literal in the select list, a grouping or an aggregate is part of what an output
//!   column computes, and such statements are planned afresh rather than reasoned about.
//! - The kept plan holds no table, only stand-ins with the tables' columns: each run looks
//!   its tables up in its own session (the catalog and the caller's namespaces as of then)
//!   and takes its own snapshot. A table the caller cannot see, or whose columns differ from
//!   the plan's, makes the run plan afresh.
//! - Filters the plan hands to a table scan must be taken by the table exactly as they
//!   were when the plan was made (a table recreated with another key), and with this run's
//!   values (a NULL parameter): a key predicate the scan takes as exact is no longer
//!   applied above it. Otherwise the run plans afresh.
//! - A value is bound at the type DataFusion inferred for its parameter, and only when it
//!   converts without loss and with the meaning the literal had: an integer literal binds
//!   to a numeric column's type, a string literal to a string column's (for `a1 = '05'`
//!   on an INT column DataFusion's coercion decides the meaning, so it is not kept); a
//!   client's parameter value binds when its type is the parameter's. Otherwise the run
//!   plans afresh.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::{TableProvider, provider_as_source, source_as_provider};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{
    Expr, LogicalPlan, TableProviderFilterPushDown, TableScan, Volatility,
};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, Expr as SqlExpr, Value, visit_expressions, visit_expressions_mut,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::physical::Physical;
use crate::provider::StrataTable;

/// Shapes kept at most (least recently used go first).
const CAPACITY: usize = 1024;

/// Longer statements are not kept (a long literal list is rarely sent twice).
const TEXT_MAX: usize = 16 << 10;

/// What the cache knows of a shape.
#[derive(Clone)]
enum Entry {
    /// Its optimized plan.
    Plan(Arc<Kept>),
    /// A shape whose plan is not kept (see the module doc): planned afresh every time.
    Never,
}

/// An optimized plan with stand-ins for its tables.
struct Kept {
    plan: LogicalPlan,
    /// Per table scan, in the plan's order: how the table took each filter pushed into it.
    pushed: Vec<Vec<TableProviderFilterPushDown>>,
    /// Its physical plans, where runs may share them.
    physical: Arc<Physical>,
}

/// A statement's shape: the cache key, the statement with its literals taken out, and the
/// values of its parameters (those taken out, or the client's).
struct Shape {
    key: String,
    statement: ast::Statement,
    values: Vec<ScalarValue>,
    /// Whether the parameters are the client's own (else taken out of literals).
    clients: bool,
}

/// How a statement's plan was had: from a kept plan (`kept`), made and kept (`made`), or
/// made for this run only (`fresh`: not a read-only query the cache keeps, or values that
/// do not bind). Shared by a service and its PostgreSQL sessions; `/metrics` reports it as
/// `strata_sql_plans_total{plan}`.
#[derive(Clone, Debug, Default)]
pub struct PlanCounts {
    by: Family<PlanLabel, Counter>,
    /// Physical plans of kept shapes ([`crate::physical`]): `kept` (a run served from a
    /// kept physical plan), `made` (planned and kept for later runs).
    physical: Family<PlanLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabel {
    plan: &'static str,
}

impl PlanCounts {
    fn inc(&self, plan: &'static str) {
        self.by.get_or_create(&PlanLabel { plan }).inc();
    }

    /// Statements answered from a kept plan, and statements whose plan was made and
    /// kept, since the service started.
    pub fn kept_and_made(&self) -> (u64, u64) {
        let get = |plan| self.by.get_or_create(&PlanLabel { plan }).get();
        (get("kept"), get("made"))
    }

    /// A statement planned without the cache.
    pub(crate) fn fresh(&self) {
        self.inc("fresh");
    }

    /// A physical plan kept (`made`) or served from one kept (`kept`).
    pub(crate) fn physical(&self, plan: &'static str) {
        self.physical.get_or_create(&PlanLabel { plan }).inc();
    }

    /// Runs served from a kept physical plan, and physical plans made and kept, since the
    /// service started.
    pub fn physical_kept_and_made(&self) -> (u64, u64) {
        let get = |plan| self.physical.get_or_create(&PlanLabel { plan }).get();
        (get("kept"), get("made"))
    }

    /// Adds the counts to `registry`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "strata_sql_plans",
            "SQL statements by how their plan was had: kept (by the statement's shape), made (and kept), fresh (not kept)",
            self.by.clone(),
        );
        registry.register(
            "strata_sql_physical_plans",
            "Physical plans of kept shapes: kept (a run's plan made from a kept one around the run's own scan), made (planned and kept)",
            self.physical.clone(),
        );
    }
}

/// The plans of one query service's statements, by shape.
pub(crate) struct PlanCache {
    entries: quick_cache::sync::Cache<String, Entry>,
    counts: PlanCounts,
}

impl PlanCache {
    /// An empty cache counting into `counts`.
    pub(crate) fn new(counts: PlanCounts) -> Self {
        Self {
            entries: quick_cache::sync::Cache::new(CAPACITY),
            counts,
        }
    }
}

/// Why the cache gave no plan; the caller plans the statement as it was sent.
pub(crate) struct Miss {
    /// The shape that failed to plan, when it did (a literal DataFusion needs to see: the
    /// caller marks it [`PlanCache::never`] if the statement itself plans).
    pub(crate) failed: Option<String>,
}

impl Miss {
    fn skip() -> Self {
        Self { failed: None }
    }
}

impl PlanCache {
    /// Marks a shape as not kept: its plan failed where the statement's did not.
    pub(crate) fn never(&self, key: String) {
        self.entries.insert(key, Entry::Never);
    }

    /// The optimized plan of `sql` in session `state`, its parameters bound to `params` (or,
    /// for a statement with parameters of its own and no `params`, left for a later
    /// [`bind_clients`]), when the statement is one the cache keeps.
    pub(crate) async fn plan(
        &self,
        state: &SessionState,
        sql: &str,
        params: &[ScalarValue],
    ) -> Result<(LogicalPlan, Arc<Physical>), Miss> {
        let shape = shape(state, sql, params).ok_or_else(Miss::skip)?;
        match self.entries.get(&shape.key) {
            Some(Entry::Never) => Err(Miss::skip()),
            Some(Entry::Plan(kept)) if let Some(plan) = with_tables(state, &kept).await => {
                let plan = shape.bind(plan).ok_or_else(Miss::skip)?;
                self.counts.inc("kept");
                Ok((plan, kept.physical.clone()))
            }
            // No entry, or a plan for tables that have changed since (another key or
            // other columns): planned again, and kept in its place.
            _ => {
                let key = shape.key.clone();
                let plan = match state
                    .statement_to_plan(DFStatement::Statement(Box::new(shape.statement.clone())))
                    .await
                {
                    Ok(p) => p,
                    Err(_) => return Err(Miss { failed: Some(key) }),
                };
                if !keepable(&plan) {
                    self.never(key);
                    return Err(Miss::skip());
                }
                let plan = state.optimize(&plan).map_err(|_| Miss::skip())?;
                let Some(kept) = detached(&plan, &self.counts) else {
                    self.never(key);
                    return Err(Miss::skip());
                };
                let kinds_fit = shape.kinds_fit(&plan);
                match shape.bind(plan) {
                    Some(bound) => {
                        let physical = kept.physical.clone();
                        self.entries.insert(key, Entry::Plan(Arc::new(kept)));
                        self.counts.inc("made");
                        Ok((bound, physical))
                    }
                    // Only this run's values do not bind (a NULL key, a number too large
                    // for its column): the plan is kept for the next run.
                    None if kinds_fit => {
                        self.entries.insert(key, Entry::Plan(Arc::new(kept)));
                        self.counts.inc("made");
                        Err(Miss::skip())
                    }
                    // Its literals never bind as they were written (a string compared
                    // with a number column): the statement is planned as sent, always.
                    None => {
                        self.never(key);
                        Err(Miss::skip())
                    }
                }
            }
        }
    }
}

impl Shape {
    /// `plan` (this shape's, with the run's tables) with this shape's values bound; a
    /// statement with parameters of its own and no values yet stays unbound.
    fn bind(&self, plan: LogicalPlan) -> Option<LogicalPlan> {
        if self.clients && self.values.is_empty() {
            return Some(plan);
        }
        bind(plan, &self.values, self.clients)
    }

    /// Whether each literal taken out is of a kind its parameter's type takes (see
    /// [`kind_fits`]); a client's values may differ from run to run, so they always do.
    fn kinds_fit(&self, plan: &LogicalPlan) -> bool {
        if self.clients {
            return true;
        }
        let Ok(types) = plan.get_parameter_types() else {
            return false;
        };
        types.iter().all(|(id, t)| {
            let value = id
                .strip_prefix('$')
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| self.values.get(i.checked_sub(1)?));
            matches!((value, t), (Some(v), Some(t)) if kind_fits(v, t))
        })
    }
}

/// `plan`, a kept plan with parameters of the client's own, bound to `values` (a prepared
/// statement's run); None: plan the statement afresh.
pub(crate) fn bind_clients(plan: LogicalPlan, values: &[ScalarValue]) -> Option<LogicalPlan> {
    bind(plan, values, true)
}

/// The shape of `sql` (see the module doc); None for a statement the cache does not keep
/// (not a single query, or values given for a statement without parameters).
fn shape(state: &SessionState, sql: &str, params: &[ScalarValue]) -> Option<Shape> {
    if sql.len() > TEXT_MAX || !reads(sql) {
        return None;
    }
    let dialect = state.config().options().sql_parser.dialect;
    let DFStatement::Statement(statement) = state.sql_to_statement(sql, &dialect).ok()? else {
        return None;
    };
    let mut statement = *statement;
    if !matches!(statement, ast::Statement::Query(_)) {
        return None;
    }
    let clients = visit_expressions(&statement, |e| match e {
        SqlExpr::Value(v) if matches!(v.value, Value::Placeholder(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    let values = if clients {
        params.to_vec()
    } else {
        if !params.is_empty() {
            return None;
        }
        let mut values = Vec::new();
        let _ = visit_expressions_mut(&mut statement, |e| {
            take_literals(e, &mut values);
            ControlFlow::<()>::Continue(())
        });
        values
    };
    Some(Shape {
        key: statement.to_string(),
        statement,
        values,
        clients,
    })
}

/// Whether `sql` starts as a query does (`SELECT`, `WITH`, `VALUES`, `(`): anything else
/// (INSERT, UPDATE, DDL, ...) is not parsed twice.
fn reads(sql: &str) -> bool {
    let head = sql.trim_start();
    let word: String = head
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .take(7)
        .collect::<String>()
        .to_ascii_uppercase();
    head.starts_with('(') || matches!(word.as_str(), "SELECT" | "WITH" | "VALUES")
}

/// Takes the literals `e` compares a column with out as parameters (numbered in the order
/// taken), recording their values.
fn take_literals(e: &mut SqlExpr, values: &mut Vec<ScalarValue>) {
    fn column(e: &SqlExpr) -> bool {
        matches!(e, SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_))
    }
    fn take(e: &mut SqlExpr, values: &mut Vec<ScalarValue>) {
        let (value, minus) = match &*e {
            SqlExpr::Value(v) => (&v.value, ""),
            SqlExpr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => match &**expr {
                SqlExpr::Value(v) if matches!(v.value, Value::Number(..)) => (&v.value, "-"),
                _ => return,
            },
            _ => return,
        };
        let value = match value {
            Value::Number(n, false) => match format!("{minus}{n}").parse::<i64>() {
                Ok(i) => ScalarValue::Int64(Some(i)),
                Err(_) => return,
            },
            Value::SingleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
            _ => return,
        };
        values.push(value);
        *e = SqlExpr::value(Value::Placeholder(format!("${}", values.len())));
    }
    match e {
        SqlExpr::BinaryOp {
            left,
            op:
                BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq,
            right,
        } => {
            if column(left) {
                take(right, values);
            } else if column(right) {
                take(left, values);
            }
        }
        SqlExpr::Between {
            expr, low, high, ..
        } if column(expr) => {
            take(low, values);
            take(high, values);
        }
        _ => {}
    }
}

/// Whether an unoptimized plan may be kept (see the module doc).
fn keepable(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply(|node| {
        ok &= match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Sort(_)
            | LogicalPlan::Limit(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Window(_)
            | LogicalPlan::Distinct(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::EmptyRelation(_) => true,
            LogicalPlan::TableScan(scan) => strata_table(scan).is_some_and(|t| {
                t.downcast_ref::<StrataTable>()
                    .is_some_and(|t| t.is_latest())
            }),
            _ => false,
        };
        // Parameters only where they choose or order rows (see the module doc).
        let chooses_rows = matches!(
            node,
            LogicalPlan::Filter(_) | LogicalPlan::Join(_) | LogicalPlan::Sort(_)
        );
        let _ = node.apply_expressions(|e| {
            e.apply(|e| {
                ok &= match e {
                    Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::SetComparison(_)
                    | Expr::OuterReferenceColumn(..) => false,
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    Expr::Placeholder(Placeholder { field, .. }) => chooses_rows && field.is_some(),
                    _ => true,
                };
                Ok(if ok {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        });
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

/// The Strata table a scan reads, if it reads one.
fn strata_table(scan: &TableScan) -> Option<Arc<dyn TableProvider>> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.is::<StrataTable>().then_some(provider)
}

/// How `table` takes each of `filters` (parameters judged by their types).
fn pushed(table: &dyn TableProvider, filters: &[Expr]) -> Option<Vec<TableProviderFilterPushDown>> {
    let filters: Vec<&Expr> = filters.iter().collect();
    table.supports_filters_pushdown(&filters).ok()
}

/// `plan` with its tables replaced by stand-ins (their columns, no data), and how each
/// scan's table took its filters; None if a scan reads anything but a Strata table.
fn detached(plan: &LogicalPlan, counts: &PlanCounts) -> Option<Kept> {
    let mut takes = Vec::new();
    let plan = plan
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(mut scan) => {
                let Some(table) = strata_table(&scan) else {
                    return Err(datafusion::error::DataFusionError::Plan(
                        "not a Strata table".into(),
                    ));
                };
                takes.push(pushed(table.as_ref(), &scan.filters).ok_or_else(|| {
                    datafusion::error::DataFusionError::Plan("filters not judged".into())
                })?);
                scan.source = provider_as_source(Arc::new(EmptyTable::new(table.schema())));
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            }
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    let physical = Arc::new(Physical::for_plan(&plan, &takes, counts.clone()));
    Some(Kept {
        plan,
        pushed: takes,
        physical,
    })
}

/// The kept plan with the tables of session `state` in place of its stand-ins; None when a
/// table is not there for the caller, has other columns, or takes its filters otherwise.
async fn with_tables(state: &SessionState, kept: &Kept) -> Option<LogicalPlan> {
    let mut names: Vec<TableReference> = Vec::new();
    let _ = kept.plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && !names.contains(&scan.table_name)
        {
            names.push(scan.table_name.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut tables: HashMap<TableReference, Arc<dyn TableProvider>> = HashMap::new();
    for name in names {
        let table = state
            .schema_for_ref(name.clone())
            .ok()?
            .table(name.table())
            .await
            .ok()??;
        tables.insert(name, table);
    }
    let mut n = 0;
    let plan = kept
        .plan
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(mut scan) => {
                let bad = || datafusion::error::DataFusionError::Plan("table changed".into());
                let table = tables.get(&scan.table_name).ok_or_else(bad)?.clone();
                let fits = table.is::<StrataTable>()
                    && table.schema() == scan.source.schema()
                    && kept.pushed.get(n) == pushed(table.as_ref(), &scan.filters).as_ref();
                if !fits {
                    return Err(bad());
                }
                n += 1;
                scan.source = provider_as_source(table);
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            }
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    Some(plan)
}

/// `plan` with parameter `$i` replaced by `values[i - 1]` at the parameter's type; None if
/// a value does not bind (see the module doc) or a scan would take its filters otherwise
/// with the values than with the parameters.
fn bind(plan: LogicalPlan, values: &[ScalarValue], clients: bool) -> Option<LogicalPlan> {
    let value_of = |p: &Placeholder| -> Option<Expr> {
        let i: usize = p.id.strip_prefix('$')?.parse().ok()?;
        let v = values.get(i.checked_sub(1)?)?;
        let to = p.field.as_ref()?.data_type();
        Some(Expr::Literal(bound(v, to, clients)?, None))
    };
    let out = plan.transform_up(|node| {
        let before = match &node {
            LogicalPlan::TableScan(scan) => Some(scan.filters.clone()),
            _ => None,
        };
        let node = node.map_expressions(|e| {
            e.transform_up(|e| match &e {
                Expr::Placeholder(p) => match value_of(p) {
                    Some(v) => Ok(Transformed::yes(v)),
                    None => Err(datafusion::error::DataFusionError::Plan(format!(
                        "parameter {} does not bind",
                        p.id
                    ))),
                },
                _ => Ok(Transformed::no(e)),
            })
        })?;
        if let (Some(before), LogicalPlan::TableScan(scan)) = (before, &node.data) {
            let table = source_as_provider(&scan.source)?;
            let same = pushed(table.as_ref(), &before)
                .is_some_and(|b| pushed(table.as_ref(), &scan.filters).is_some_and(|a| a == b));
            if !same {
                return Err(datafusion::error::DataFusionError::Plan(
                    "a filter is taken otherwise with its value".into(),
                ));
            }
        }
        Ok(node)
    });
    out.ok().map(|t| t.data)
}

/// Whether a literal taken out as `v` means at type `to` what it meant as written: an
/// integer for a numeric column, a string for a string column.
fn kind_fits(v: &ScalarValue, to: &DataType) -> bool {
    match v {
        _ if &v.data_type() == to => true,
        ScalarValue::Int64(Some(_)) => to.is_numeric(),
        ScalarValue::Utf8(Some(_)) => {
            matches!(
                to,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        }
        _ => false,
    }
}

/// `v` as a value of a parameter of type `to`, when it binds (see the module doc).
fn bound(v: &ScalarValue, to: &DataType, clients: bool) -> Option<ScalarValue> {
    if &v.data_type() == to {
        return Some(v.clone());
    }
    if clients || !kind_fits(v, to) {
        // A client's value of another type, or a literal of another kind: DataFusion's
        // coercion decides what it means.
        return None;
    }
    let cast = v.cast_to(to).ok()?;
    // Without loss: back to the literal's type, the same value.
    (!cast.is_null() && cast.cast_to(&v.data_type()).ok()? == *v).then_some(cast)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use datafusion::common::ScalarValue;
    use datafusion::physical_plan::displayable;
    use strata_engine::{Db, EngineConfig};
    use strata_objstore::ObjectStoreMetrics;

    use crate::auth::Principal;
    use crate::{QueryConfig, QueryService};

    async fn service(dir: &std::path::Path) -> (Db, QueryService) {
        let store: strata_objstore::StoreRef =
            Arc::new(strata_objstore::LocalDirStore::new(&dir.join("bucket")).unwrap());
        let db = Db::open_with_store(
            store,
            None,
            ObjectStoreMetrics::default(),
            dir.join("nvme"),
            EngineConfig::default(),
            strata_common::clock::system(),
        )
        .await
        .unwrap();
        let q = QueryService::new(
            db.clone(),
            QueryConfig {
                scan_partitions: 2,
                ..Default::default()
            },
            true,
        );
        (db, q)
    }

    async fn rows(q: &QueryService, sql: &str) -> Vec<Vec<String>> {
        rows_bound(q, sql, &[]).await
    }

    async fn rows_bound(q: &QueryService, sql: &str, params: &[ScalarValue]) -> Vec<Vec<String>> {
        let (_, batches) = q
            .collect_bound_as(sql, params, &Principal::unrestricted())
            .await
            .unwrap();
        let opts = FormatOptions::default().with_null("NULL");
        let mut out = Vec::new();
        for b in &batches {
            let fmts: Vec<ArrayFormatter> = b
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
                .collect();
            for r in 0..b.num_rows() {
                out.push(fmts.iter().map(|f| f.value(r).to_string()).collect());
            }
        }
        out
    }

    fn one(v: impl ToString) -> Vec<Vec<String>> {
        vec![vec![v.to_string()]]
    }

    /// The physical plan of `sql` as this service would run it.
    async fn physical(q: &QueryService, sql: &str) -> String {
        let planned = q.plan(sql).await.unwrap();
        let plan = crate::service::physical_plan(planned.df, planned.optimized)
            .await
            .unwrap();
        displayable(plan.as_ref()).indent(false).to_string()
    }

    async fn table(q: &QueryService) {
        rows(
            q,
            "CREATE TABLE t (id BIGINT NOT NULL, a INT, s VARCHAR, PRIMARY KEY (id))",
        )
        .await;
        let values: Vec<String> = (0..200)
            .map(|i| format!("({i}, {}, 'x{}')", i % 7, i % 5))
            .collect();
        rows(q, &format!("INSERT INTO t VALUES {}", values.join(", "))).await;
    }

    #[test]
    fn only_statements_that_start_as_queries_are_shaped() {
        for q in [
            "SELECT 1",
            "  select 1",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "(SELECT 1)",
            "values (1)",
        ] {
            assert!(super::reads(q), "{q}");
        }
        for s in [
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "DELETE FROM t",
            "EXPLAIN SELECT 1",
            "-- c\nSELECT 1",
            "SELECTED",
        ] {
            assert!(!super::reads(s), "{s}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_of_one_shape_share_a_plan_and_answer_with_their_own_values() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        let (hits0, misses0) = q.plan_counts().kept_and_made();
        for (lo, hi) in [
            (0, 200),
            (10, 20),
            (150, 400),
            (-5, 3),
            (199, 200),
            (50, 50),
        ] {
            let want: i64 = (lo.max(0)..hi.min(200)).map(|i: i64| i % 7).sum();
            let got = rows(
                &q,
                &format!("SELECT coalesce(sum(a), 0) FROM t WHERE id >= {lo} AND id < {hi}"),
            )
            .await;
            assert_eq!(got, one(want), "ids {lo}..{hi}");
        }
        for s in ["x0", "x3", "nothing"] {
            let want = (0..200).filter(|i| format!("x{}", i % 5) == s).count();
            let got = rows(&q, &format!("SELECT count(*) FROM t WHERE s = '{s}'")).await;
            assert_eq!(got, one(want), "s = {s}");
        }
        for (lo, hi) in [(3, 9), (100, 101)] {
            let got = rows(
                &q,
                &format!("SELECT count(*) FROM t WHERE id BETWEEN {lo} AND {hi} AND a <> 1"),
            )
            .await;
            let want = (lo..=hi).filter(|i| i % 7 != 1).count();
            assert_eq!(got, one(want));
        }
        let (hits, misses) = q.plan_counts().kept_and_made();
        // Three shapes: planned once each, then answered from the kept plan.
        assert_eq!(misses - misses0, 3);
        assert_eq!(hits - hits0, 5 + 2 + 1);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_plan_reads_only_the_key_range_of_its_own_values() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        let first = physical(&q, "SELECT sum(a) FROM t WHERE id >= 10 AND id < 20").await;
        let (hits0, _) = q.plan_counts().kept_and_made();
        let second = physical(&q, "SELECT sum(a) FROM t WHERE id >= 120 AND id < 180").await;
        assert_eq!(q.plan_counts().kept_and_made().0, hits0 + 1, "{second}");
        assert!(
            first.contains("key_range=id: [Int(10) .. Int(20))"),
            "{first}"
        );
        assert!(
            second.contains("key_range=id: [Int(120) .. Int(180))"),
            "{second}"
        );
        // Exact key filters are not applied again above the scan, as when planned afresh.
        assert!(!second.contains("FilterExec"), "{second}");
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_of_a_one_scan_shape_share_its_physical_plan_and_read_their_own_rows() {
        use std::collections::BTreeMap;
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        // id -> (a, s), as `table` wrote them; rows change between runs below.
        let mut data: BTreeMap<i64, (i64, String)> = (0..200)
            .map(|i| (i, (i % 7, format!("x{}", i % 5))))
            .collect();
        let text = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
        let mut runs = 0;
        for (lo, hi) in [(10, 50), (20, 60), (0, 200), (150, 400), (60, 61), (70, 70)] {
            // The kept plan must read each run's own snapshot: a row of the range changes,
            // one appears past the table's end, one goes.
            rows(
                &q,
                &format!("UPDATE t SET a = a + 10 WHERE id = {}", lo + 1),
            )
            .await;
            if let Some(v) = data.get_mut(&(lo + 1)) {
                v.0 += 10;
            }
            let new = 200 + runs;
            rows(&q, &format!("INSERT INTO t VALUES ({new}, 1, 'new')")).await;
            data.insert(new, (1, "new".into()));
            rows(&q, &format!("DELETE FROM t WHERE id = {}", lo + 2)).await;
            data.remove(&(lo + 2));
            let range: Vec<(i64, &(i64, String))> =
                data.range(lo..hi).map(|(k, v)| (*k, v)).collect();

            let got = rows(
                &q,
                &format!("SELECT SUM(a + a), COUNT(*) FROM t WHERE id >= {lo} AND id < {hi}"),
            )
            .await;
            let sum = (!range.is_empty()).then(|| range.iter().map(|(_, v)| 2 * v.0).sum());
            assert_eq!(
                got,
                vec![vec![text(sum), range.len().to_string()]],
                "{lo}..{hi}"
            );

            let got = rows(&q, &format!("SELECT MAX(a), MIN(s) FROM t WHERE id < {hi}")).await;
            let below: Vec<&(i64, String)> = data.range(..hi).map(|(_, v)| v).collect();
            let max = below.iter().map(|v| v.0).max();
            let min = below.iter().map(|v| v.1.clone()).min();
            assert_eq!(
                got,
                vec![vec![text(max), min.unwrap_or_else(|| "NULL".into())]],
                "..{hi}"
            );

            let got = rows(
                &q,
                &format!(
                    "SELECT a, COUNT(*) FROM t WHERE id >= {lo} AND id < {hi} GROUP BY a ORDER BY a"
                ),
            )
            .await;
            let mut groups: BTreeMap<i64, usize> = BTreeMap::new();
            for (_, v) in &range {
                *groups.entry(v.0).or_default() += 1;
            }
            let want: Vec<Vec<String>> = groups
                .iter()
                .map(|(a, n)| vec![a.to_string(), n.to_string()])
                .collect();
            assert_eq!(got, want, "{lo}..{hi} grouped");
            runs += 1;
        }
        // Three shapes, six runs each: each made its physical plan once per partition count
        // of its scan (at most `PLANS`), every other run reused one.
        let (kept, made) = q.plan_counts().physical_kept_and_made();
        assert!((3..=3 * 4).contains(&made), "made {made}");
        assert_eq!(kept + made, 3 * runs as u64, "kept {kept}, made {made}");

        // A run's plan from a kept one is the plan DataFusion would make for it.
        let sql = "SELECT SUM(a + a), COUNT(*) FROM t WHERE id >= 5 AND id < 9";
        let planned = q.plan(sql).await.unwrap();
        let physical = planned.optimized.clone().unwrap();
        let (plans, shared) = physical.kept();
        assert!(
            plans >= 1 && !shared,
            "kept plans hold no scan (no table view)"
        );
        // Nor do they share a run's state: the grouped shape's sort recorded no metrics
        // into its kept plan (it would grow with every run).
        let grouped = q
            .plan("SELECT a, COUNT(*) FROM t WHERE id >= 1 AND id < 9 GROUP BY a ORDER BY a")
            .await
            .unwrap();
        let sorted = grouped.optimized.clone().unwrap();
        crate::service::physical_plan(grouped.df, grouped.optimized)
            .await
            .unwrap();
        let (plans, shared) = sorted.kept();
        assert!(
            plans >= 1 && !shared,
            "a kept plan shares no state with its runs"
        );
        let (state, plan) = planned.df.clone().into_parts();
        let full = state.query_planner().create_physical_plan(&plan, &state);
        let full = displayable(full.await.unwrap().as_ref())
            .indent(false)
            .to_string();
        let ours = crate::service::physical_plan(planned.df, planned.optimized)
            .await
            .unwrap();
        assert_eq!(displayable(ours.as_ref()).indent(false).to_string(), full);
        // This run and the grouped one above, each from a kept plan.
        assert_eq!(q.plan_counts().physical_kept_and_made().0, kept + 2);

        // A parameter above the scan (a filter on a column the table does not take
        // exactly), or a sort that keeps its top rows: planned every run.
        let before = q.plan_counts().physical_kept_and_made();
        for v in [1, 2, 3] {
            let got = rows(
                &q,
                &format!("SELECT id FROM t WHERE id < 30 AND a = {v} ORDER BY id"),
            )
            .await;
            let want: Vec<Vec<String>> = data
                .range(..30)
                .filter(|(_, r)| r.0 == v)
                .map(|(k, _)| vec![k.to_string()])
                .collect();
            assert_eq!(got, want, "a = {v}");
            let got = rows(
                &q,
                &format!("SELECT a FROM t WHERE id >= {v} ORDER BY a DESC LIMIT 2"),
            )
            .await;
            let mut all: Vec<i64> = data.range(v..).map(|(_, r)| r.0).collect();
            all.sort_unstable_by(|x, y| y.cmp(x));
            let want: Vec<Vec<String>> = all.iter().take(2).map(|a| vec![a.to_string()]).collect();
            assert_eq!(got, want, "top 2 from {v}");
        }
        assert_eq!(q.plan_counts().physical_kept_and_made(), before);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_plan_of_one_table_scan_is_the_scan_datafusion_would_plan() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        for (first, second, want) in [
            // A point read.
            (
                "SELECT * FROM t WHERE id = 5",
                "SELECT * FROM t WHERE id = 17",
                vec![vec!["17", "3", "x2"]],
            ),
            // Some columns, the key not among them.
            (
                "SELECT a, s FROM t WHERE id = 5",
                "SELECT a, s FROM t WHERE id = 33",
                vec![vec!["5", "x3"]],
            ),
            // A key range.
            (
                "SELECT id, a FROM t WHERE id >= 1 AND id < 3",
                "SELECT id, a FROM t WHERE id >= 3 AND id < 6",
                vec![vec!["3", "3"], vec!["4", "4"], vec!["5", "5"]],
            ),
        ] {
            rows(&q, first).await;
            let (hits0, _) = q.plan_counts().kept_and_made();
            let kept = q.plan(second).await.unwrap();
            assert!(kept.optimized.is_some(), "{second}");
            assert_eq!(q.plan_counts().kept_and_made().0, hits0 + 1, "{second}");
            // The same statement through DataFusion's planner and its optimizer rules.
            let (state, plan) = kept.df.clone().into_parts();
            let scan_only = crate::service::table_scan_only(&state, &plan).await;
            assert!(scan_only.unwrap().is_some(), "{second}");
            let planner = state.query_planner().create_physical_plan(&plan, &state);
            let full = displayable(planner.await.unwrap().as_ref())
                .indent(false)
                .to_string();
            let ours = crate::service::physical_plan(kept.df, kept.optimized)
                .await
                .unwrap();
            let ours = displayable(ours.as_ref()).indent(false).to_string();
            assert!(ours.starts_with("CooperativeExec"), "{ours}");
            assert_eq!(ours, full, "{second}");
            let want: Vec<Vec<String>> = want
                .into_iter()
                .map(|r| r.into_iter().map(String::from).collect())
                .collect();
            assert_eq!(rows(&q, second).await, want, "{second}");
        }
        // Anything above the scan (columns in another order, a filter the table does not
        // take exactly, a limit) is planned as usual.
        for (first, second) in [
            (
                "SELECT s, a FROM t WHERE id = 5",
                "SELECT s, a FROM t WHERE id = 33",
            ),
            ("SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = 2"),
            (
                "SELECT * FROM t WHERE id > 1 LIMIT 2",
                "SELECT * FROM t WHERE id > 5 LIMIT 2",
            ),
        ] {
            rows(&q, first).await;
            let kept = q.plan(second).await.unwrap();
            let (state, plan) = kept.df.clone().into_parts();
            let scan_only = crate::service::table_scan_only(&state, &plan).await;
            assert!(scan_only.unwrap().is_none(), "{second}");
            let ours = crate::service::physical_plan(kept.df, kept.optimized)
                .await
                .unwrap();
            let ours = displayable(ours.as_ref()).indent(false).to_string();
            assert!(ours.lines().count() > 2, "{ours}");
        }
        assert_eq!(
            rows(&q, "SELECT * FROM t WHERE id > 5 LIMIT 2").await,
            vec![vec!["6", "6", "x1"], vec!["7", "0", "x2"]]
        );
        assert_eq!(
            rows(&q, "SELECT s, a FROM t WHERE id = 33").await,
            vec![vec!["x3", "5"]]
        );
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_that_change_how_a_filter_is_taken_are_planned_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        // A shape whose first run does not bind (too large for the INT column) is still
        // kept for later runs.
        let (hits0, made0) = q.plan_counts().kept_and_made();
        assert_eq!(
            rows(&q, "SELECT count(*) FROM t WHERE a > 5000000000").await,
            one(0)
        );
        assert_eq!(
            rows(&q, "SELECT count(*) FROM t WHERE a > 5").await,
            one((0..200).filter(|i| i % 7 > 5).count())
        );
        assert_eq!(q.plan_counts().kept_and_made(), (hits0 + 1, made0 + 1));
        let sql = "SELECT count(*) FROM t WHERE id = $1";
        assert_eq!(
            rows_bound(&q, sql, &[ScalarValue::Int64(Some(5))]).await,
            one(1)
        );
        // NULL: the key range of `id = NULL` is no range; the kept plan would read every row.
        let (hits0, _) = q.plan_counts().kept_and_made();
        assert_eq!(
            rows_bound(&q, sql, &[ScalarValue::Int64(None)]).await,
            one(0)
        );
        assert_eq!(rows_bound(&q, sql, &[ScalarValue::Null]).await, one(0));
        assert_eq!(q.plan_counts().kept_and_made().0, hits0);
        assert_eq!(
            rows_bound(&q, sql, &[ScalarValue::Int64(Some(7))]).await,
            one(1)
        );
        assert_eq!(q.plan_counts().kept_and_made().0, hits0 + 1);
        // A literal too large for the INT column's type compares as DataFusion would.
        assert_eq!(
            rows(&q, "SELECT count(*) FROM t WHERE a < 3").await,
            one((0..200).filter(|i| i % 7 < 3).count())
        );
        assert_eq!(
            rows(&q, "SELECT count(*) FROM t WHERE a < 5000000000").await,
            one(200)
        );
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_recreated_with_another_key_is_planned_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        let create = |key: &str| {
            format!("CREATE TABLE k (id BIGINT NOT NULL, v BIGINT NOT NULL, PRIMARY KEY ({key}))")
        };
        rows(&q, &create("id")).await;
        rows(
            &q,
            "INSERT INTO k VALUES (1, 50), (2, 40), (3, 30), (4, 20), (5, 10)",
        )
        .await;
        assert_eq!(
            rows(&q, "SELECT count(*) FROM k WHERE id >= 4").await,
            one(2)
        );
        rows(&q, "DROP TABLE k").await;
        rows(&q, &create("v")).await;
        rows(
            &q,
            "INSERT INTO k VALUES (1, 50), (2, 40), (3, 30), (4, 20), (5, 10)",
        )
        .await;
        // The kept plan dropped `id >= ...` above the scan (the key range held it); with
        // `v` the key, the filter must be applied again: the table's columns and the way
        // it takes the filter both tell the plan is not this table's.
        let (hits0, made0) = q.plan_counts().kept_and_made();
        assert_eq!(
            rows(&q, "SELECT count(*) FROM k WHERE id >= 3").await,
            one(3)
        );
        // Planned again for the table as it is now, and kept in the old plan's place.
        assert_eq!(q.plan_counts().kept_and_made(), (hits0, made0 + 1));
        assert_eq!(
            rows(&q, "SELECT count(*) FROM k WHERE id >= 4").await,
            one(2)
        );
        assert_eq!(q.plan_counts().kept_and_made(), (hits0 + 1, made0 + 1));
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_whose_plans_depend_on_more_than_their_shape_are_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, q) = service(tmp.path()).await;
        table(&q).await;
        let before = q.plan_counts().kept_and_made();
        for _ in 0..2 {
            // Folded into a constant by the optimizer.
            rows(
                &q,
                "SELECT count(*) FROM t WHERE id < 10 AND now() IS NOT NULL",
            )
            .await;
            // A string compared with a number column: DataFusion compares strings.
            rows(&q, "SELECT count(*) FROM t WHERE a = '05'").await;
            // A literal the grouping must see in the select list too.
            let got = rows(
                &q,
                "SELECT id > 100, count(*) FROM t GROUP BY id > 100 ORDER BY 1",
            )
            .await;
            assert_eq!(
                got,
                vec![
                    vec!["false".to_string(), "101".to_string()],
                    vec!["true".to_string(), "99".to_string()]
                ]
            );
            // Time travel and catalog tables.
            rows(&q, "SELECT count(*) FROM as_of('t', 1) WHERE id < 5").await;
            rows(
                &q,
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 't'",
            )
            .await;
            // A comparison in the select list (its column keeps the name the statement
            // gives it).
            let (schema, _) = q
                .collect_as(
                    "SELECT id, a > 3 FROM t WHERE id = 1",
                    &Principal::unrestricted(),
                )
                .await
                .unwrap();
            let name = schema.field(1).name();
            assert!(!name.contains('$') && name.contains('3'), "{name}");
            // Writes.
            rows(&q, "UPDATE t SET a = 1 WHERE id = 3").await;
        }
        assert_eq!(q.plan_counts().kept_and_made(), before);
        db.close().await;
    }
}
