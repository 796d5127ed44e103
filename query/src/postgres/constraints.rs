//! `pg_catalog.pg_constraint` as Strata's tables have it: one primary-key constraint per
//! table the caller may read (`<table>_pkey`, `contype` `p`, `conkey` the key columns'
//! numbers as `int2[]`), which DBeaver's Keys tab and other tools read directly.
//!
//! `datafusion-pg-catalog` serves a fixed copy of a PostgreSQL server's own constraints
//! there, describing system tables Strata's `pg_catalog` does not list, with the arrays as
//! text. [`WithKeys`] wraps its `pg_catalog` schema and answers `pg_constraint` itself;
//! every other table is the wrapped schema's. Object ids come from the wrapped schema's
//! `pg_namespace`, `pg_class` and `pg_attribute`, so joins between them hold.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int16Array, Int16Builder, Int32Array, ListBuilder,
    RecordBatch, StringArray, new_null_array,
};
use arrow::datatypes::{DataType, Field, Int16Type, Int32Type, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{ExecutionPlan, collect};
use strata_engine::Db;

use crate::auth::Principal;

/// The `pg_catalog` schema of one caller, its `pg_constraint` listing the caller's tables'
/// primary keys.
#[derive(Debug)]
pub struct WithKeys {
    inner: Arc<dyn SchemaProvider>,
    db: Db,
    who: Principal,
}

impl WithKeys {
    /// `inner` (a caller's `pg_catalog`) with the primary keys of the tables `who` may read
    /// in `db` as its constraints.
    pub fn new(inner: Arc<dyn SchemaProvider>, db: Db, who: Principal) -> Self {
        Self { inner, db, who }
    }
}

#[async_trait]
impl SchemaProvider for WithKeys {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if name.eq_ignore_ascii_case("pg_constraint") {
            return Ok(Some(Arc::new(Constraints {
                inner: self.inner.clone(),
                db: self.db.clone(),
                who: self.who.clone(),
            })));
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// PostgreSQL 16's `pg_constraint` columns (ids as `Int32`, as the rest of the catalog
/// has them; the column-number arrays as `int2[]`).
static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let int2_array = || DataType::List(Arc::new(Field::new("item", DataType::Int16, true)));
    Arc::new(Schema::new(vec![
        Field::new("oid", DataType::Int32, false),
        Field::new("conname", DataType::Utf8, false),
        Field::new("connamespace", DataType::Int32, false),
        Field::new("contype", DataType::Utf8, false),
        Field::new("condeferrable", DataType::Boolean, false),
        Field::new("condeferred", DataType::Boolean, false),
        Field::new("convalidated", DataType::Boolean, false),
        Field::new("conrelid", DataType::Int32, false),
        Field::new("contypid", DataType::Int32, false),
        Field::new("conindid", DataType::Int32, false),
        Field::new("conparentid", DataType::Int32, false),
        Field::new("confrelid", DataType::Int32, false),
        Field::new("confupdtype", DataType::Utf8, false),
        Field::new("confdeltype", DataType::Utf8, false),
        Field::new("confmatchtype", DataType::Utf8, false),
        Field::new("conislocal", DataType::Boolean, false),
        Field::new("coninhcount", DataType::Int16, false),
        Field::new("connoinherit", DataType::Boolean, false),
        Field::new("conkey", int2_array(), true),
        Field::new("confkey", int2_array(), true),
        Field::new("conpfeqop", DataType::Utf8, true),
        Field::new("conppeqop", DataType::Utf8, true),
        Field::new("conffeqop", DataType::Utf8, true),
        Field::new("confdelsetcols", int2_array(), true),
        Field::new("conexclop", DataType::Utf8, true),
        Field::new("conbin", DataType::Utf8, true),
    ]))
});

/// Constraint ids: the table's id in a range of their own, so they meet no other object's.
const CONSTRAINT_OIDS: i32 = 1 << 30;

#[derive(Debug)]
struct Constraints {
    inner: Arc<dyn SchemaProvider>,
    db: Db,
    who: Principal,
}

impl Constraints {
    /// Every row of the wrapped catalog's table `name`.
    async fn read(
        &self,
        state: &dyn Session,
        name: &str,
    ) -> Result<Vec<RecordBatch>, DataFusionError> {
        let table = self
            .inner
            .table(name)
            .await?
            .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no {name}")))?;
        let plan = table.scan(state, None, &[], None).await?;
        collect(plan, state.task_ctx()).await
    }

    async fn rows(&self, state: &dyn Session) -> Result<RecordBatch, DataFusionError> {
        let keys = super::information_schema::caller_keys(&self.db, &self.who).await?;
        if keys.is_empty() {
            return Ok(RecordBatch::new_empty(SCHEMA.clone()));
        }
        let column = |b: &RecordBatch, name: &str| -> Result<ArrayRef, DataFusionError> {
            b.column_by_name(name)
                .cloned()
                .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: no column {name}")))
        };
        let mut namespaces: HashMap<String, i32> = HashMap::new();
        for b in self.read(state, "pg_namespace").await? {
            let (oids, names) = (column(&b, "oid")?, column(&b, "nspname")?);
            let (oids, names) = (oids.as_primitive::<Int32Type>(), names.as_string::<i32>());
            for i in 0..b.num_rows() {
                namespaces.insert(names.value(i).to_string(), oids.value(i));
            }
        }
        let mut relations: HashMap<(i32, String), i32> = HashMap::new();
        for b in self.read(state, "pg_class").await? {
            let (oids, names, spaces) = (
                column(&b, "oid")?,
                column(&b, "relname")?,
                column(&b, "relnamespace")?,
            );
            let oids = oids.as_primitive::<Int32Type>();
            let names = names.as_string::<i32>();
            let spaces = spaces.as_primitive::<Int32Type>();
            for i in 0..b.num_rows() {
                relations.insert((spaces.value(i), names.value(i).to_string()), oids.value(i));
            }
        }
        let mut numbers: HashMap<(i32, String), i16> = HashMap::new();
        for b in self.read(state, "pg_attribute").await? {
            let (rels, names, nums) = (
                column(&b, "attrelid")?,
                column(&b, "attname")?,
                column(&b, "attnum")?,
            );
            let rels = rels.as_primitive::<Int32Type>();
            let names = names.as_string::<i32>();
            let nums = nums.as_primitive::<Int16Type>();
            for i in 0..b.num_rows() {
                numbers.insert((rels.value(i), names.value(i).to_string()), nums.value(i));
            }
        }

        let (mut oid, mut name, mut namespace, mut relid) = (vec![], vec![], vec![], vec![]);
        let mut conkey = ListBuilder::new(Int16Builder::new()).with_field(Arc::new(Field::new(
            "item",
            DataType::Int16,
            true,
        )));
        for (ns, table, key) in keys {
            let Some(&space) = namespaces.get(&ns) else {
                continue;
            };
            let Some(&rel) = relations.get(&(space, table.clone())) else {
                continue;
            };
            let Some(columns) = key
                .iter()
                .map(|c| numbers.get(&(rel, c.clone())).copied())
                .collect::<Option<Vec<i16>>>()
            else {
                continue;
            };
            oid.push(CONSTRAINT_OIDS.saturating_add(rel));
            name.push(format!("{table}_pkey"));
            namespace.push(space);
            relid.push(rel);
            conkey.append_value(columns.into_iter().map(Some));
        }
        let n = oid.len();
        let text = |v: &str| -> ArrayRef { Arc::new(StringArray::from(vec![v; n])) };
        let flag = |v: bool| -> ArrayRef { Arc::new(BooleanArray::from(vec![v; n])) };
        let zero = || -> ArrayRef { Arc::new(Int32Array::from(vec![0; n])) };
        let null = |i: usize| new_null_array(SCHEMA.field(i).data_type(), n);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(oid)),
            Arc::new(StringArray::from(name)),
            Arc::new(Int32Array::from(namespace)),
            text("p"),
            flag(false),
            flag(false),
            flag(true),
            Arc::new(Int32Array::from(relid)),
            zero(),
            zero(),
            zero(),
            zero(),
            text(" "),
            text(" "),
            text(" "),
            flag(true),
            Arc::new(Int16Array::from(vec![0; n])),
            flag(true),
            Arc::new(conkey.finish()),
            null(19),
            null(20),
            null(21),
            null(22),
            null(23),
            null(24),
            null(25),
        ];
        Ok(RecordBatch::try_new(SCHEMA.clone(), columns)?)
    }
}

#[async_trait]
impl TableProvider for Constraints {
    fn schema(&self) -> SchemaRef {
        SCHEMA.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>, DataFusionError> {
        let batch = self.rows(state).await?;
        let exec =
            MemorySourceConfig::try_new_exec(&[vec![batch]], SCHEMA.clone(), projection.cloned())?;
        Ok(exec)
    }
}
