//! Flight SQL's prepared statements: a statement checked once
//! (`CreatePreparedStatement`), its parameters bound by `DoPut`, run any number of times,
//! each run planned on the data as it is then, and closed by `ClosePreparedStatement`.
//!
//! A statement belongs to the caller that prepared it: another key's handle is unknown. At
//! most [`PREPARED_MAX`] statements are open per server (the least recently used goes
//! first), and one unused for [`PREPARED_IDLE`] is forgotten, so that clients that never
//! close theirs cannot grow the server without bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use datafusion::common::ScalarValue;

use crate::auth::Principal;
use crate::error::{QueryError, QueryErrorKind};
use crate::service::Checked;

/// Open prepared statements per server, at most.
pub const PREPARED_MAX: usize = 4096;
/// A prepared statement unused for this long is forgotten.
pub const PREPARED_IDLE: Duration = Duration::from_secs(3600);
const TAG: &str = "strata-prepared/";

/// One prepared statement.
#[derive(Debug, Clone)]
struct Statement {
    who: Principal,
    sql: String,
    /// The parameter rows bound last (none bound: no parameters).
    params: Option<RecordBatch>,
    used: Instant,
    /// The plan checked when it was prepared, for a first run that follows at once
    /// ([`Checked::fresh`]): that run does not parse and plan the statement again.
    first: Option<Checked>,
}

/// The prepared statements of a server.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    next: AtomicU64,
    open: parking_lot::Mutex<HashMap<u64, Statement>>,
}

fn unknown(handle: &[u8]) -> QueryError {
    QueryError::new(
        QueryErrorKind::NotFound,
        format!(
            "no prepared statement {}: it was closed, or forgotten after an hour unused (prepare it again)",
            String::from_utf8_lossy(handle)
        ),
    )
}

fn parse(handle: &[u8]) -> Option<u64> {
    std::str::from_utf8(handle)
        .ok()?
        .strip_prefix(TAG)?
        .parse()
        .ok()
}

impl Statements {
    /// Opens a statement for `who`; its handle.
    pub(crate) fn open(&self, who: Principal, sql: String, checked: Option<Checked>) -> Vec<u8> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock();
        open.retain(|_, s| s.used.elapsed() < PREPARED_IDLE);
        while open.len() >= PREPARED_MAX {
            let Some(oldest) = open.iter().min_by_key(|(_, s)| s.used).map(|(id, _)| *id) else {
                break;
            };
            open.remove(&oldest);
        }
        open.insert(
            id,
            Statement {
                who,
                sql,
                params: None,
                used: Instant::now(),
                first: checked,
            },
        );
        format!("{TAG}{id}").into_bytes()
    }

    /// Binds parameter rows to the statement `handle` of `who`.
    pub(crate) fn bind(
        &self,
        handle: &[u8],
        who: &Principal,
        params: RecordBatch,
    ) -> Result<(), QueryError> {
        let mut open = self.open.lock();
        let s = parse(handle)
            .and_then(|id| open.get_mut(&id))
            .filter(|s| &s.who == who)
            .ok_or_else(|| unknown(handle))?;
        s.params = Some(params);
        s.used = Instant::now();
        Ok(())
    }

    /// The SQL of statement `handle` of `who` and its bound parameter rows, one list of
    /// values per row (one empty row when none are bound).
    pub(crate) fn get(
        &self,
        handle: &[u8],
        who: &Principal,
    ) -> Result<(String, Vec<Vec<ScalarValue>>), QueryError> {
        let (sql, params) = {
            let mut open = self.open.lock();
            let s = parse(handle)
                .and_then(|id| open.get_mut(&id))
                .filter(|s| &s.who == who)
                .ok_or_else(|| unknown(handle))?;
            s.used = Instant::now();
            (s.sql.clone(), s.params.clone())
        };
        Ok((sql, rows(params.as_ref())?))
    }

    /// The plan statement `handle` of `who` was checked with, once, if it is still fresh
    /// ([`Checked::fresh`]); later runs plan the statement afresh.
    pub(crate) fn take_first(&self, handle: &[u8], who: &Principal) -> Option<Checked> {
        let mut open = self.open.lock();
        let s = parse(handle)
            .and_then(|id| open.get_mut(&id))
            .filter(|s| &s.who == who)?;
        s.first.take().and_then(Checked::fresh)
    }

    /// Closes statement `handle` of `who` (closing one already gone is not an error).
    pub(crate) fn close(&self, handle: &[u8], who: &Principal) {
        let mut open = self.open.lock();
        if let Some(id) = parse(handle)
            && open.get(&id).is_some_and(|s| &s.who == who)
        {
            open.remove(&id);
        }
    }
}

/// The rows of a parameter batch as lists of values (one empty row for none).
fn rows(params: Option<&RecordBatch>) -> Result<Vec<Vec<ScalarValue>>, QueryError> {
    let Some(b) = params.filter(|b| b.num_columns() > 0) else {
        return Ok(vec![Vec::new()]);
    };
    (0..b.num_rows())
        .map(|r| {
            b.columns()
                .iter()
                .map(|c| {
                    ScalarValue::try_from_array(c, r).map_err(|e| {
                        QueryError::new(
                            QueryErrorKind::Invalid,
                            format!("reading parameter row {r}: {e}"),
                        )
                    })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn params() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("$1", DataType::Int64, true),
                Field::new("$2", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![Some(7), None])),
                Arc::new(StringArray::from(vec!["a", "b"])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_statement_binds_runs_and_closes_for_its_caller_only() {
        let s = Statements::default();
        let me = Principal::unrestricted();
        let h = s.open(me.clone(), "SELECT $1, $2".into(), None);
        // Nothing bound: one run without parameters.
        assert_eq!(
            s.get(&h, &me).unwrap(),
            ("SELECT $1, $2".into(), vec![vec![]])
        );
        s.bind(&h, &me, params()).unwrap();
        let (_, rows) = s.get(&h, &me).unwrap();
        assert_eq!(
            rows,
            vec![
                vec![ScalarValue::Int64(Some(7)), ScalarValue::from("a")],
                vec![ScalarValue::Int64(None), ScalarValue::from("b")],
            ]
        );
        // Another caller's handle is unknown to it, and it cannot close it.
        let mut other = me.clone();
        other.name = "other".into();
        assert_eq!(
            s.get(&h, &other).unwrap_err().kind,
            QueryErrorKind::NotFound
        );
        s.close(&h, &other);
        assert!(s.get(&h, &me).is_ok());
        s.close(&h, &me);
        assert_eq!(s.get(&h, &me).unwrap_err().kind, QueryErrorKind::NotFound);
        // Not a handle of ours.
        assert!(s.get(b"SELECT 1", &me).is_err());
    }

    #[tokio::test]
    async fn the_plan_checked_at_prepare_serves_one_run_of_its_caller() {
        let ctx = datafusion::prelude::SessionContext::new();
        let plan = ctx.state().create_logical_plan("SELECT 1").await.unwrap();
        let s = Statements::default();
        let me = Principal::unrestricted();
        let mut other = me.clone();
        other.name = "other".into();
        let h = s.open(
            me.clone(),
            "SELECT 1".into(),
            Some(Checked::new(ctx.state(), plan, None)),
        );
        assert!(s.take_first(&h, &other).is_none());
        assert!(s.take_first(&h, &me).is_some());
        // Later runs plan afresh.
        assert!(s.take_first(&h, &me).is_none());
        // None kept: nothing to take.
        let h = s.open(me.clone(), "SELECT 1".into(), None);
        assert!(s.take_first(&h, &me).is_none());
    }
}
