//! Every Strata table in a DataFusion schema per namespace (`strata.<namespace>.<table>`;
//! `public` for names without a dot), plus the `as_of` table function for time travel
//! (`as_of('sales.orders', 42)`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use parking_lot::Mutex;
use strata_engine::schema::TableSchema;
use strata_engine::{AsOf, Db};

use crate::auth::{DEFAULT_NAMESPACE, Principal, split_name};
use crate::provider::{StrataTable, TableOptions};

/// The tables of one query, loaded from the catalog when the query starts.
#[derive(Debug)]
pub struct StrataSchema {
    db: Db,
    namespace: String,
    tables: HashMap<String, Arc<TableSchema>>,
    options: TableOptions,
    providers: Mutex<HashMap<String, Arc<StrataTable>>>,
}

impl StrataSchema {
    /// The tables of every namespace `principal` may read, one schema per namespace (keyed
    /// by namespace; tables by their name within it), from the catalog as this process
    /// knows it ([`Db::catalog`]).
    pub async fn load(
        db: Db,
        options: TableOptions,
        principal: &Principal,
    ) -> strata_engine::Result<BTreeMap<String, Arc<StrataSchema>>> {
        let mut by_ns: BTreeMap<String, HashMap<String, Arc<TableSchema>>> = BTreeMap::new();
        // The catalog cached in the process: no bucket request per query.
        let catalog = db.catalog().await?;
        for name in catalog.catalog.tables.keys() {
            let (ns, table) = split_name(name);
            if !principal.can_read(ns) {
                continue;
            }
            let (ns, table) = (ns.to_string(), table.to_string());
            by_ns
                .entry(ns)
                .or_default()
                .insert(table, catalog.schema(name)?);
        }
        // The default namespace always exists (an empty `public` schema for a new service).
        if principal.can_read(DEFAULT_NAMESPACE) {
            by_ns.entry(DEFAULT_NAMESPACE.to_string()).or_default();
        }
        Ok(by_ns
            .into_iter()
            .map(|(ns, tables)| {
                let schema = StrataSchema {
                    db: db.clone(),
                    namespace: ns.clone(),
                    tables,
                    options: options.clone(),
                    providers: Mutex::new(HashMap::new()),
                };
                (ns, Arc::new(schema))
            })
            .collect())
    }

    /// A table as of a snapshot (time travel); not shared with the latest-state provider.
    pub fn table_as_of(&self, name: &str, as_of: AsOf) -> Result<Arc<StrataTable>> {
        let t = self
            .tables
            .get(name)
            .ok_or_else(|| DataFusionError::Plan(format!("table not found: {name}")))?;
        Ok(Arc::new(StrataTable::new(
            self.db.clone(),
            t.clone(),
            Some(as_of),
            self.options.clone(),
        )))
    }
}

#[async_trait]
impl SchemaProvider for StrataSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tables.keys().cloned().collect();
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let fresh;
        let t = match self.tables.get(name) {
            Some(t) => t,
            // Not in the catalog this process knew when the query started: created by
            // another process just now? The engine checks the bucket again on a miss.
            None => match self
                .db
                .table_schema(&crate::auth::qualified(&self.namespace, name))
                .await
            {
                Ok(s) => {
                    fresh = s;
                    &fresh
                }
                Err(strata_engine::Error::TableNotFound(_)) => return Ok(None),
                Err(e) => return Err(DataFusionError::External(Box::new(e))),
            },
        };
        let p = self
            .providers
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(StrataTable::new(
                    self.db.clone(),
                    t.clone(),
                    None,
                    self.options.clone(),
                ))
            })
            .clone();
        Ok(Some(p))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
}

/// `as_of('table', <sequence number>)` or `as_of('table', TIMESTAMP '...')`: the table as
/// of an earlier retained snapshot.
#[derive(Debug)]
pub struct AsOfFunction {
    /// The query's tables by namespace.
    pub namespaces: BTreeMap<String, Arc<StrataSchema>>,
}

impl TableFunctionImpl for AsOfFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(
                "as_of takes a table name and a sequence number or a timestamp: as_of('t', 42) or as_of('t', TIMESTAMP '2026-01-01T00:00:00Z')".into(),
            )
        };
        let exprs = args.exprs();
        let [name, at] = exprs else {
            return Err(usage());
        };
        let name = match name {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _)
            | Expr::Literal(ScalarValue::Utf8View(Some(s)), _)
            | Expr::Literal(ScalarValue::LargeUtf8(Some(s)), _) => s.clone(),
            _ => return Err(usage()),
        };
        let as_of = match literal_of(at).ok_or_else(usage)? {
            ScalarValue::Int64(Some(v)) if v >= 0 => AsOf::Seq(v as u64),
            ScalarValue::Int32(Some(v)) if v >= 0 => AsOf::Seq(v as u64),
            ScalarValue::UInt64(Some(v)) => AsOf::Seq(v),
            ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
                let ts = ScalarValue::Utf8(Some(s.clone()))
                    .cast_to(&arrow::datatypes::DataType::Timestamp(
                        arrow::datatypes::TimeUnit::Millisecond,
                        Some("UTC".into()),
                    ))
                    .map_err(|_| usage())?;
                timestamp_ms(&ts).ok_or_else(usage)?
            }
            v => timestamp_ms(&v).ok_or_else(usage)?,
        };
        let (ns, table) = split_name(&name);
        let schema = self
            .namespaces
            .get(ns)
            .ok_or_else(|| DataFusionError::Plan(format!("table not found: {name}")))?;
        Ok(schema.table_as_of(table, as_of)?)
    }
}

/// The literal an argument evaluates to (`TIMESTAMP '...'` arrives as a cast of a string).
fn literal_of(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => literal_of(&c.expr)?.cast_to(c.field.data_type()).ok(),
        _ => None,
    }
}

fn timestamp_ms(v: &ScalarValue) -> Option<AsOf> {
    let ms = match v {
        ScalarValue::TimestampSecond(Some(x), _) => x.checked_mul(1000)?,
        ScalarValue::TimestampMillisecond(Some(x), _) => *x,
        ScalarValue::TimestampMicrosecond(Some(x), _) => x / 1000,
        ScalarValue::TimestampNanosecond(Some(x), _) => x / 1_000_000,
        _ => return None,
    };
    (ms >= 0).then_some(AsOf::TimestampMs(ms as u64))
}
