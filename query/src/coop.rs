//! A query that runs out its timeout stops using the CPU: operators that turn one input
//! batch into many output batches yield to the scheduler between them.
//!
//! A query's timeout drops its stream, and dropping a stream stops operators only where
//! they yield. DataFusion's `EnsureCooperative` makes leaves (scans) and exchanges yield
//! through tokio's cooperative budget, so a plan yields whenever it reads input. A join
//! may produce millions of rows from one probe batch without reading anything (a nested
//! loop or cross join, a many-to-many hash join); an aggregate above it then consumes them
//! in one poll that never yields, and the timed-out query keeps a core busy until its join
//! finishes (minutes, for a large non-equi join). [`YieldAboveJoins`] puts a
//! `CooperativeExec` above every operator with more than one input, so each output batch
//! spends a unit of the task's budget and the task yields every 128 batches, where
//! cancellation takes effect. The wrapper only counts batches; results are unchanged.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;

/// Puts a `CooperativeExec` above every operator with two or more inputs (joins, unions):
/// see the module documentation.
#[derive(Debug, Default)]
pub struct YieldAboveJoins;

impl PhysicalOptimizerRule for YieldAboveJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if node.children().len() >= 2 {
                Ok(Transformed::yes(
                    Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>
                ))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "YieldAboveJoins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    /// Every join in a plan the rule has seen has a `CooperativeExec` right above it, and
    /// the rule changes no result.
    #[tokio::test]
    async fn joins_get_a_cooperative_parent_and_results_hold() {
        let ctx = SessionContext::new();
        let sql = "SELECT count(*) AS n FROM (VALUES (1), (2), (3)) a(x) \
                   JOIN (VALUES (1), (2), (3)) b(y) ON a.x < b.y";
        let df = ctx.sql(sql).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let before = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
            .await
            .unwrap();
        let wrapped = YieldAboveJoins
            .optimize(plan.clone(), &ConfigOptions::default())
            .unwrap();
        let text = datafusion::physical_plan::displayable(wrapped.as_ref())
            .indent(false)
            .to_string();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let joins: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("JoinExec"))
            .collect();
        assert!(!joins.is_empty(), "{text}");
        for i in joins {
            assert!(
                i > 0 && lines[i - 1].starts_with("CooperativeExec"),
                "{text}"
            );
        }
        let after = datafusion::physical_plan::collect(wrapped, ctx.task_ctx())
            .await
            .unwrap();
        let pretty = |b: &[datafusion::arrow::record_batch::RecordBatch]| {
            datafusion::arrow::util::pretty::pretty_format_batches(b)
                .unwrap()
                .to_string()
        };
        assert_eq!(pretty(&before), pretty(&after));
        assert!(pretty(&after).contains("| 3 |"), "{}", pretty(&after));
    }
}
