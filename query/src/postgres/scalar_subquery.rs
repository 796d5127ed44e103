//! Scalar subqueries as PostgreSQL runs them: `(SELECT e FROM ... WHERE <correlated>)` is
//! one value per outer row, NULL when the subquery finds no row, and an error (SQLSTATE
//! 21000) when it finds more than one.
//!
//! DataFusion plans a correlated scalar subquery only when it is aggregated (it refuses
//! the rest: "Correlated scalar subquery must be aggregated to return at most one row"),
//! and catalog queries of ORMs are full of unaggregated ones (SQLAlchemy's column
//! reflection reads each column's default and collation so). The statement rewrite in
//! [`super::statements`] wraps such a subquery's one expression in [`SCALAR_SUBQUERY`], an
//! aggregate that keeps PostgreSQL's meaning exactly: the value of the only row, NULL for
//! none, the PostgreSQL error for more.

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
        assert_eq!(super::super::handler::sqlstate(&err), "21000", "{err:?}");
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
