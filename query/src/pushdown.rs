//! Predicates on the primary key become a key range the scan reads (Luo §4: only key
//! predicates prune storage; predicates on other columns are applied by DataFusion after the
//! versions of a row are reconciled, so a stale version can never match a filter).
//!
//! Supported: comparisons (`=`, `<`, `<=`, `>`, `>=`), `BETWEEN` and `IN` lists of literals on
//! the *first* key column, and `AND` of those. Anything else is left to DataFusion.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use strata_engine::keycodec;
use strata_engine::schema::TableSchema;
use strata_engine::value::value_at;

/// A range of encoded keys: `[start, end)`; `end` None = unbounded. Empty when
/// `start >= end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// Inclusive start.
    pub start: Vec<u8>,
    /// Exclusive end.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Everything.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether no key can be in the range.
    pub fn is_empty(&self) -> bool {
        self.end
            .as_deref()
            .is_some_and(|e| e <= self.start.as_slice())
    }

    fn intersect(&mut self, other: KeyRange) {
        if other.start > self.start {
            self.start = other.start;
        }
        self.end = match (self.end.take(), other.end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The part of the range within `[lo, hi)`.
    pub fn clamp(&self, lo: &[u8], hi: Option<&[u8]>) -> KeyRange {
        let mut r = self.clone();
        r.intersect(KeyRange {
            start: lo.to_vec(),
            end: hi.map(|h| h.to_vec()),
        });
        r
    }
}

/// The smallest byte string greater than every string starting with `prefix` (None: no
/// such string, every byte is 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// `filter` with each typed parameter (`$1` in a plan kept by its shape, see
/// [`crate::shapes`]) replaced by a value of its type, so that how a filter is pushed down
/// depends on its shape, not on its values; untyped parameters stay (no pushdown).
pub fn sampled(filter: &Expr) -> std::borrow::Cow<'_, Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::expr::Placeholder;
    if !filter
        .exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(false)
    {
        return std::borrow::Cow::Borrowed(filter);
    }
    let out = filter.clone().transform(|e| match &e {
        Expr::Placeholder(Placeholder { field: Some(f), .. }) => {
            match ScalarValue::new_default(f.data_type()) {
                Ok(v) if !v.is_null() => Ok(Transformed::yes(Expr::Literal(v, None))),
                _ => Ok(Transformed::no(e)),
            }
        }
        _ => Ok(Transformed::no(e)),
    });
    match out {
        Ok(t) => std::borrow::Cow::Owned(t.data),
        Err(_) => std::borrow::Cow::Borrowed(filter),
    }
}

/// Whether `filter` can narrow the key range.
pub fn is_key_filter(table: &TableSchema, filter: &Expr) -> bool {
    range_of(table, filter).is_some()
}

/// Whether the key range of `filter` holds exactly the rows it matches, so DataFusion need
/// not apply it again (`Exact`) and the scan need not return the key column for it: an
/// `AND` of comparisons and `BETWEEN`s of the first key column with literals of its own
/// type, when that type is a fixed-width integer (whose encoding makes a prefix range of a
/// value exactly the keys with that value, whatever key columns follow).
pub fn is_exact_key_filter(table: &TableSchema, filter: &Expr) -> bool {
    use datafusion::arrow::datatypes::DataType as T;
    let dt = &table.key_types[0];
    if !matches!(
        dt,
        T::Int8 | T::Int16 | T::Int32 | T::Int64 | T::UInt8 | T::UInt16 | T::UInt32 | T::UInt64
    ) {
        return false;
    }
    let typed = |e: &Expr| literal(e).is_some_and(|v| !v.is_null() && &v.data_type() == dt);
    fn exact(table: &TableSchema, e: &Expr, typed: &dyn Fn(&Expr) -> bool) -> bool {
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                Operator::And => exact(table, left, typed) && exact(table, right, typed),
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => {
                    (is_first_key(table, left) && typed(right))
                        || (is_first_key(table, right) && typed(left))
                }
                _ => false,
            },
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => is_first_key(table, expr) && typed(low) && typed(high),
            _ => false,
        }
    }
    exact(table, filter, &typed) && range_of(table, filter).is_some()
}

/// The key range every row matching all `filters` lies in.
pub fn key_range(table: &TableSchema, filters: &[Expr]) -> KeyRange {
    let mut r = KeyRange::all();
    for f in filters {
        if let Some(x) = range_of(table, f) {
            r.intersect(x);
        }
    }
    r
}

fn first_key_name(table: &TableSchema) -> &str {
    table.schema.field(table.key_indices[0]).name()
}

fn encode(table: &TableSchema, v: &ScalarValue) -> Option<Vec<u8>> {
    let dt = &table.key_types[0];
    let v = v.cast_to(dt).ok()?;
    if v.is_null() {
        return None;
    }
    let array = v.to_array().ok()?;
    let value = value_at(array.as_ref(), 0).ok()?;
    keycodec::encode_key(std::slice::from_ref(dt), &[value]).ok()
}

fn is_first_key(table: &TableSchema, e: &Expr) -> bool {
    matches!(e, Expr::Column(c) if c.name == first_key_name(table))
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

fn cmp_range(table: &TableSchema, op: Operator, v: &ScalarValue) -> Option<KeyRange> {
    let k = encode(table, v)?;
    Some(match op {
        Operator::Eq => KeyRange {
            end: prefix_end(&k),
            start: k,
        },
        Operator::Gt => match prefix_end(&k) {
            Some(s) => KeyRange {
                start: s,
                end: None,
            },
            None => KeyRange {
                start: k.clone(),
                end: Some(k),
            },
        },
        Operator::GtEq => KeyRange {
            start: k,
            end: None,
        },
        Operator::Lt => KeyRange {
            start: Vec::new(),
            end: Some(k),
        },
        Operator::LtEq => KeyRange {
            start: Vec::new(),
            end: prefix_end(&k),
        },
        _ => return None,
    })
}

fn range_of(table: &TableSchema, e: &Expr) -> Option<KeyRange> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => {
                let (a, b) = (range_of(table, left), range_of(table, right));
                match (a, b) {
                    (Some(mut a), Some(b)) => {
                        a.intersect(b);
                        Some(a)
                    }
                    (a, b) => a.or(b),
                }
            }
            Operator::Or => {
                // The union's hull: from the smaller start to the larger end.
                let a = range_of(table, left)?;
                let b = range_of(table, right)?;
                Some(KeyRange {
                    start: a.start.clone().min(b.start.clone()),
                    end: match (a.end, b.end) {
                        (Some(x), Some(y)) => Some(x.max(y)),
                        _ => None,
                    },
                })
            }
            _ if is_first_key(table, left) => cmp_range(table, *op, literal(right)?),
            _ if is_first_key(table, right) => cmp_range(table, op.swap()?, literal(left)?),
            _ => None,
        },
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_first_key(table, expr) => {
            let mut r = cmp_range(table, Operator::GtEq, literal(low)?)?;
            r.intersect(cmp_range(table, Operator::LtEq, literal(high)?)?);
            Some(r)
        }
        Expr::InList(list) if !list.negated && is_first_key(table, &list.expr) => {
            let mut out: Option<KeyRange> = None;
            for item in &list.list {
                let r = cmp_range(table, Operator::Eq, literal(item)?)?;
                out = Some(match out {
                    None => r,
                    Some(o) => KeyRange {
                        start: o.start.min(r.start),
                        end: match (o.end, r.end) {
                            (Some(x), Some(y)) => Some(x.max(y)),
                            _ => None,
                        },
                    },
                });
            }
            out
        }
        _ => None,
    }
}

/// A readable form of an encoded range for `EXPLAIN`.
pub fn describe(table: &TableSchema, r: &KeyRange) -> String {
    let show = |k: &[u8]| -> String {
        // Bounds are prefixes of the first key column (or their successors).
        match keycodec::decode_key(&table.key_types[..1], k) {
            Ok(v) => format!("{:?}", v[0]),
            Err(_) => format!("0x{}", hex_of(k)),
        }
    };
    let lo = if r.start.is_empty() {
        "-inf".to_string()
    } else {
        format!("[{}", show(&r.start))
    };
    let hi = match &r.end {
        None => "+inf".to_string(),
        Some(e) => format!("{})", show(e)),
    };
    format!("{}: {lo} .. {hi}", first_key_name(table))
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
