//! Physical plans kept by statement shape, for the shapes whose runs differ only in what
//! their one table scan reads.
//!
//! A kept shape ([`crate::shapes`]) skips DataFusion's SQL planner and optimizer, but each
//! run still made its physical plan: the physical planner and its optimizer rules took
//! 11-13% of the server's CPU for LASER's Q3 and Q4 (a MAX and a SUM over a key range,
//! section "physical plans kept by shape" of docs/BENCHMARKS.md). When every parameter of
//! a shape sits in the filters of its single table scan, and the table takes each of them
//! exactly, a run's values change nothing above the scan: the kept physical plan is rebuilt
//! around the run's own scan (its snapshot and key ranges), and only the operators above it
//! are made again, from the kept ones (`with_new_children`, no planner, no rule).
//!
//! What keeps a kept physical plan right:
//! - The shape's plan has one table scan, a Strata table's, every filter in it taken
//!   exactly, and no parameter anywhere else (checked on the optimized logical plan, once
//!   per shape: [`Physical::for_plan`]).
//! - The kept physical plan is a chain of operators that hold no state between runs
//!   (aggregates, projections, filters, sorts without a limit, merges, repartitions,
//!   limits, the cooperative wrapper) over one `StrataScanExec`, with no dynamic filter:
//!   a TopK sort's or a join's build side would carry a run's state into the next.
//! - The run's scan has the kept scan's columns, ordering and number of partitions (the
//!   key ranges a scan is split into depend on the data): the operators above were chosen
//!   for those. A scan that differs is planned afresh, and its plan kept beside the others
//!   (at most [`PLANS`] per shape).
//! - A kept plan holds no scan, only a stand-in with the scan's properties ([`ScanSlot`]):
//!   a scan holds its table view, which would keep the first run's memtables and files
//!   alive for as long as the shape is kept. Each run's operators are made again over its
//!   scan and their state reset (DataFusion's `reset_state`, its way of running a plan
//!   again), so runs share no metrics or channels with each other or the first run.
//! - A scan whose partition count no kept plan has is planned afresh (its scan made twice:
//!   once to learn the count); the newest [`PLANS`] counts are kept.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::scan::StrataScanExec;
use crate::shapes::PlanCounts;

/// Physical plans kept per shape at most (one per partition count of its scan; a scan is
/// split into at most `query.scan_partitions` key ranges, one per core by default).
const PLANS: usize = 4;

/// Operators a kept physical plan may hold above its scan: none keeps state from one
/// execution to the next once made again over a new child.
const STATELESS: &[&str] = &[
    "AggregateExec",
    "ProjectionExec",
    "FilterExec",
    "CoalescePartitionsExec",
    "CoalesceBatchesExec",
    "CooperativeExec",
    "RepartitionExec",
    "SortExec",
    "SortPreservingMergeExec",
    "GlobalLimitExec",
    "LocalLimitExec",
];

/// The physical plans kept for one shape.
pub(crate) struct Physical {
    /// Whether the shape's runs differ only in what its one table scan reads.
    eligible: bool,
    plans: parking_lot::Mutex<Vec<Arc<dyn ExecutionPlan>>>,
    counts: PlanCounts,
}

impl Physical {
    /// For a shape with the optimized logical plan `plan` (parameters unbound), whose table
    /// scans took their filters as `pushed` says.
    pub(crate) fn for_plan(
        plan: &LogicalPlan,
        pushed: &[Vec<TableProviderFilterPushDown>],
        counts: PlanCounts,
    ) -> Self {
        let exact = pushed.len() == 1
            && pushed[0]
                .iter()
                .all(|p| *p == TableProviderFilterPushDown::Exact);
        let mut eligible = exact;
        let _ = plan.apply(|node| {
            if !matches!(node, LogicalPlan::TableScan(_)) {
                let _ = node.apply_expressions(|e| {
                    e.apply(|e| {
                        if matches!(e, Expr::Placeholder(_)) {
                            eligible = false;
                        }
                        Ok(TreeNodeRecursion::Continue)
                    })
                });
            }
            Ok(TreeNodeRecursion::Continue)
        });
        Self {
            eligible,
            plans: parking_lot::Mutex::new(Vec::new()),
            counts,
        }
    }

    /// The physical plan of `plan` (this shape's, bound to a run's values) from a kept
    /// one, with the run's own scan; None: plan it (and [`Physical::keep`] the result).
    pub(crate) async fn plan(
        &self,
        state: &SessionState,
        plan: &LogicalPlan,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if !self.eligible || self.plans.lock().is_empty() {
            return Ok(None);
        }
        let Some(scan) = run_scan(state, plan).await? else {
            return Ok(None);
        };
        let kept = self
            .plans
            .lock()
            .iter()
            .find(|p| slot_of(p.as_ref()).is_some_and(|s| fits(s, scan.as_ref())))
            .cloned();
        let Some(kept) = kept else {
            return Ok(None);
        };
        // Every operator above is made again over the new scan, then has its state reset
        // (`reset_state`: a sort's metrics are otherwise shared by every copy).
        let plan = kept
            .transform_up(|node| {
                Ok(Transformed::yes(if node.is::<ScanSlot>() {
                    scan.clone()
                } else {
                    node.reset_state()?
                }))
            })?
            .data;
        self.counts.physical("kept");
        Ok(Some(plan))
    }

    /// Keeps `plan`, made for a run of this shape, for later runs whose scan has its
    /// partitions, if it is a plan this module keeps (see the module doc).
    pub(crate) fn keep(&self, plan: &Arc<dyn ExecutionPlan>) {
        if !self.eligible || !keepable(plan.as_ref()) {
            return;
        }
        let Ok(kept) = plan.clone().transform_up(|node| {
            Ok(Transformed::yes(if node.is::<StrataScanExec>() {
                Arc::new(ScanSlot(node.properties().clone())) as _
            } else {
                node.reset_state()?
            }))
        }) else {
            return;
        };
        let kept = kept.data;
        let Some(slot) = slot_of(kept.as_ref()) else {
            return;
        };
        let partitions = slot.properties().partitioning.partition_count();
        let mut plans = self.plans.lock();
        plans.retain(|p| {
            slot_of(p.as_ref())
                .is_some_and(|s| s.properties().partitioning.partition_count() != partitions)
        });
        if plans.len() == PLANS {
            plans.remove(0);
        }
        plans.push(kept);
        self.counts.physical("made");
    }
}

#[cfg(test)]
impl Physical {
    /// How many plans are kept, and whether any of them holds a scan (a table view) or
    /// an operator that has recorded metrics (state shared with a run).
    pub(crate) fn kept(&self) -> (usize, bool) {
        let plans = self.plans.lock();
        let shared = plans.iter().any(|p| {
            p.exists(|n| {
                let metrics = n.metrics().is_some_and(|m| m.iter().next().is_some());
                Ok(n.is::<StrataScanExec>() || metrics)
            })
            .unwrap_or(true)
        });
        (plans.len(), shared)
    }
}

/// The scan a run of `plan` reads, made as DataFusion's planner makes it; None when `plan`
/// does not have one Strata table scan.
async fn run_scan(
    state: &SessionState,
    plan: &LogicalPlan,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut scans = Vec::new();
    plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            scans.push(scan.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let [scan] = scans.as_slice() else {
        return Ok(None);
    };
    let Ok(table) = source_as_provider(&scan.source) else {
        return Ok(None);
    };
    let filters =
        datafusion::logical_expr::expr_rewriter::unnormalize_cols(scan.filters.iter().cloned());
    let exec = table
        .scan(state, scan.projection.as_ref(), &filters, scan.fetch)
        .await?;
    Ok(exec.is::<StrataScanExec>().then_some(exec))
}

/// The stand-in for the scan of a kept plan.
fn slot_of(plan: &dyn ExecutionPlan) -> Option<&dyn ExecutionPlan> {
    if plan.is::<ScanSlot>() {
        return Some(plan);
    }
    match plan.children()[..] {
        [child] => slot_of(child.as_ref()),
        _ => None,
    }
}

/// Whether `run`, a run's scan, can take the place of `kept` in a kept plan: the same
/// columns, ordering, number of partitions and manner of output, and neither claims any
/// column constant or equal to another (a scan does not today; such a claim could carry
/// a run's values, so it is never taken on trust).
fn fits(kept: &dyn ExecutionPlan, run: &dyn ExecutionPlan) -> bool {
    let (k, r) = (kept.properties(), run.properties());
    kept.schema() == run.schema()
        && k.partitioning.partition_count() == r.partitioning.partition_count()
        && k.output_ordering() == r.output_ordering()
        && k.eq_properties.eq_group().is_empty()
        && r.eq_properties.eq_group().is_empty()
        && k.emission_type == r.emission_type
        && k.boundedness == r.boundedness
        && k.evaluation_type == r.evaluation_type
        && k.scheduling_type == r.scheduling_type
}

/// Whether `plan` is a chain of [`STATELESS`] operators over one Strata scan, with no
/// sort that keeps only its top rows and no dynamic filter.
fn keepable(plan: &dyn ExecutionPlan) -> bool {
    if plan.is::<StrataScanExec>() {
        return true;
    }
    let mut dynamic = false;
    let _ = plan.apply_expressions(&mut |e| {
        e.apply(|e| {
            dynamic |= e.is::<DynamicFilterPhysicalExpr>();
            Ok(TreeNodeRecursion::Continue)
        })
    });
    let topk = plan.name() == "SortExec" && plan.fetch().is_some();
    match plan.children().as_slice() {
        [child] if STATELESS.contains(&plan.name()) && !dynamic && !topk => {
            keepable(child.as_ref())
        }
        _ => false,
    }
}

/// Where a kept plan's scan goes: the properties of the scan it was planned over, and
/// nothing to run (each run puts its own scan in its place).
#[derive(Debug)]
struct ScanSlot(Arc<PlanProperties>);

impl DisplayAs for ScanSlot {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ScanSlot")
    }
}

impl ExecutionPlan for ScanSlot {
    fn name(&self) -> &str {
        "ScanSlot"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.0
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
            Err(DataFusionError::Internal("ScanSlot has no children".into()))
        }
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "a kept plan runs with its run's own scan in place of ScanSlot".into(),
        ))
    }
}
