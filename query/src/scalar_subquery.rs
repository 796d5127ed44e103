//! Scalar subqueries as PostgreSQL runs them: `(SELECT e FROM ... WHERE <correlated>)` is
//! one value per outer row, NULL when the subquery finds no row, and an error (SQLSTATE
//! 21000) when it finds more than one.
//!
//! DataFusion plans a correlated scalar subquery only when it is aggregated (it refuses
//! the rest: "Correlated scalar subquery must be aggregated to return at most one row"),
//! and catalog queries of ORMs are full of unaggregated ones (SQLAlchemy's column
//! reflection reads each column's default and collation so). [`one_row`] wraps such a
//! subquery's one expression in [`SCALAR_SUBQUERY`], an aggregate that keeps PostgreSQL's
//! meaning exactly: the value of the only row, NULL for none, the PostgreSQL error for
//! more. Every SQL path does so ([`rewrite`] for HTTP and Flight SQL, the PostgreSQL
//! port's statement rewrites for its own).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, GroupByExpr, Ident, ObjectName, SelectItem, SetExpr, Statement, Value,
    visit_expressions_mut,
};

use crate::error::{QueryError, QueryErrorKind};

/// The aggregate the rewrite calls.
pub const SCALAR_SUBQUERY: &str = "pg_scalar_subquery";

/// The aggregate [`SCALAR_SUBQUERY`].
pub fn udaf() -> AggregateUDF {
    AggregateUDF::new_from_impl(ScalarSubquery {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ScalarSubquery {
    signature: Signature,
}

impl AggregateUDFImpl for ScalarSubquery {
    fn name(&self) -> &str {
        SCALAR_SUBQUERY
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn is_nullable(&self) -> bool {
        true
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>, DataFusionError> {
        Ok(Box::new(OneRow {
            value: ScalarValue::try_from(args.return_field.data_type())?,
            rows: 0,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>, DataFusionError> {
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "value"),
                args.return_field.data_type().clone(),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "rows"),
                DataType::UInt64,
                false,
            )),
        ])
    }
}

/// The value of the one row seen, and how many rows were.
#[derive(Debug)]
struct OneRow {
    value: ScalarValue,
    rows: u64,
}

impl OneRow {
    fn add(
        &mut self,
        rows: u64,
        value: impl FnOnce() -> Result<ScalarValue, DataFusionError>,
    ) -> Result<(), DataFusionError> {
        if rows == 0 {
            return Ok(());
        }
        self.rows += rows;
        if self.rows > 1 {
            return Err(DataFusionError::External(Box::new(
                QueryError::new(
                    QueryErrorKind::Invalid,
                    "more than one row returned by a subquery used as an expression",
                )
                .with_sqlstate("21000"),
            )));
        }
        self.value = value()?;
        Ok(())
    }
}

impl Accumulator for OneRow {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<(), DataFusionError> {
        let Some(values) = values.first() else {
            return Ok(());
        };
        self.add(values.len() as u64, || {
            ScalarValue::try_from_array(values, 0)
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<(), DataFusionError> {
        let [values, rows] = states else {
            return Err(DataFusionError::Internal(format!(
                "{SCALAR_SUBQUERY}: {} state columns, not 2",
                states.len()
            )));
        };
        let rows = rows.as_primitive::<UInt64Type>();
        for i in 0..rows.len() {
            self.add(rows.value(i), || ScalarValue::try_from_array(values, i))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>, DataFusionError> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue, DataFusionError> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

/// Wraps the one expression of each scalar subquery in `statement` that does not
/// aggregate, `(SELECT e FROM ... WHERE ...)`, as `(SELECT pg_scalar_subquery(e) FROM ...
/// WHERE ...)`. Subqueries that aggregate, group, are DISTINCT, ordered, limited or set
/// operations are left as they are. Whether it changed anything.
pub fn one_row(statement: &mut Statement) -> bool {
    let mut changed = false;
    let _ = visit_expressions_mut(statement, |expr| {
        let SqlExpr::Subquery(query) = expr else {
            return ControlFlow::<()>::Continue(());
        };
        if query.order_by.is_some()
            || query.limit_clause.is_some()
            || query.fetch.is_some()
            || query.with.is_some()
        {
            return ControlFlow::Continue(());
        }
        let SetExpr::Select(select) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let grouped = match &select.group_by {
            GroupByExpr::Expressions(e, _) => !e.is_empty(),
            GroupByExpr::All(_) => true,
        };
        if select.distinct.is_some() || select.having.is_some() || grouped {
            return ControlFlow::Continue(());
        }
        let [item] = select.projection.as_mut_slice() else {
            return ControlFlow::Continue(());
        };
        let element = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => return ControlFlow::Continue(()),
        };
        if aggregates(element) {
            return ControlFlow::Continue(());
        }
        let inner = std::mem::replace(element, SqlExpr::value(Value::Null));
        *element = SqlExpr::Function(Function {
            name: ObjectName::from(vec![Ident::new(SCALAR_SUBQUERY)]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(inner))],
                clauses: vec![],
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: vec![],
        });
        changed = true;
        ControlFlow::Continue(())
    });
    changed
}

/// `sql` with [`one_row`] applied to each of its statements, as HTTP and Flight SQL plan
/// it; `None` when there is nothing to rewrite (no select inside another), or the text
/// does not parse (the planner then says what is wrong with it).
pub fn rewrite(sql: &str) -> Option<String> {
    use datafusion::sql::parser::{DFParser, Statement as DFStatement};
    if sql.to_ascii_lowercase().matches("select").count() < 2 {
        return None;
    }
    let parsed = DFParser::parse_sql(sql).ok()?;
    let mut statements = Vec::with_capacity(parsed.len());
    for statement in parsed {
        // Only plain SQL statements print back as they came.
        let DFStatement::Statement(s) = statement else {
            return None;
        };
        statements.push(*s);
    }
    let mut changed = false;
    for statement in &mut statements {
        changed |= one_row(statement);
    }
    changed.then(|| crate::service::sql_text(&statements))
}

/// Whether `expr` calls an aggregate or window function (by the names PostgreSQL and
/// DataFusion give them), so that a subquery selecting it answers one row already.
fn aggregates(expr: &SqlExpr) -> bool {
    use datafusion::sql::sqlparser::ast::visit_expressions;
    const AGGREGATES: &[&str] = &[
        "count",
        "sum",
        "min",
        "max",
        "avg",
        "mean",
        "median",
        "array_agg",
        "string_agg",
        "bool_and",
        "bool_or",
        "every",
        "first_value",
        "last_value",
        "nth_value",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "variance",
        "var_pop",
        "var_samp",
        "var",
        "corr",
        "covar",
        "covar_pop",
        "covar_samp",
        "bit_and",
        "bit_or",
        "bit_xor",
        "json_agg",
        "jsonb_agg",
        "json_object_agg",
        "jsonb_object_agg",
        "xmlagg",
        "mode",
        "percentile_cont",
        "percentile_disc",
        "approx_distinct",
        "approx_median",
        "approx_percentile_cont",
        "approx_percentile_cont_with_weight",
        "grouping",
    ];
    visit_expressions(expr, |e| {
        if let SqlExpr::Function(f) = e {
            let name = f.name.0.last().map(|p| p.to_string().to_ascii_lowercase());
            let named = name.is_some_and(|n| {
                AGGREGATES.contains(&n.as_str()) || n.starts_with("regr_") || n == SCALAR_SUBQUERY
            });
            if named || f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
                return std::ops::ControlFlow::Break(());
            }
        }
        std::ops::ControlFlow::Continue(())
    })
    .is_break()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[Option<i64>]) -> ArrayRef {
        Arc::new(arrow::array::Int64Array::from(values.to_vec()))
    }

    fn accumulator() -> OneRow {
        OneRow {
            value: ScalarValue::Int64(None),
            rows: 0,
        }
    }

    #[test]
    fn one_row_gives_its_value_none_gives_null_more_fail() {
        let mut none = accumulator();
        none.update_batch(&[rows(&[])]).unwrap();
        assert_eq!(none.evaluate().unwrap(), ScalarValue::Int64(None));

        let mut one = accumulator();
        one.update_batch(&[rows(&[])]).unwrap();
        one.update_batch(&[rows(&[Some(7)])]).unwrap();
        assert_eq!(one.evaluate().unwrap(), ScalarValue::Int64(Some(7)));

        let mut two = accumulator();
        two.update_batch(&[rows(&[Some(7)])]).unwrap();
        let err = two.update_batch(&[rows(&[None])]).unwrap_err();
        let err = QueryError::from(err);
        assert_eq!(crate::postgres::handler::sqlstate(&err), "21000", "{err:?}");
    }

    #[test]
    fn partial_states_merge_to_the_same_answer() {
        let mut a = accumulator();
        a.update_batch(&[rows(&[Some(3)])]).unwrap();
        let mut b = accumulator();
        b.update_batch(&[rows(&[])]).unwrap();
        let state = |acc: &mut OneRow| -> Vec<ArrayRef> {
            acc.state()
                .unwrap()
                .into_iter()
                .map(|s| s.to_array().unwrap())
                .collect()
        };
        let (sa, sb) = (state(&mut a), state(&mut b));
        let mut merged = accumulator();
        merged.merge_batch(&sb).unwrap();
        merged.merge_batch(&sa).unwrap();
        assert_eq!(merged.evaluate().unwrap(), ScalarValue::Int64(Some(3)));
        let mut again = accumulator();
        again.merge_batch(&sa).unwrap();
        assert!(again.merge_batch(&sa).is_err());
    }
}
