//! `information_schema` as PostgreSQL clients read it.
//!
//! DataFusion's own `information_schema` names column types the Arrow way (`Int64`,
//! `Timestamp(Microsecond, None)`) and numbers columns from 0. Clients of the PostgreSQL
//! port read it the PostgreSQL way: Grafana's query builder picks time and numeric columns
//! by `data_type` (`timestamp without time zone`, `bigint`), ORMs map `udt_name`, and
//! `ordinal_position` starts at 1. [`PgInformationSchema`] answers `columns` so; every
//! other view (`tables`, `schemata`, `views`, ...) is DataFusion's.
//!
//! `columns` describes the caller's tables (the namespaces its key may read), not
//! `pg_catalog`'s own. `table_constraints` and `key_column_usage` (which DataFusion does not
//! have) list each table's primary key, constraint `<table>_pkey` as PostgreSQL names it;
//! the PostgreSQL JDBC driver's `getPrimaryKeys` is answered from them (see
//! [`super::statements`]).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::information_schema::{INFORMATION_SCHEMA, InformationSchemaProvider};
use datafusion::catalog::{CatalogProviderList, MemTable, SchemaProvider, TableProvider};
use datafusion::error::DataFusionError;
use pgwire::api::Type;
use strata_engine::Db;

use crate::auth::{Principal, split_name};

/// The schema `pg_catalog` is served in: its tables are not described in `columns`.
const PG_CATALOG: &str = "pg_catalog";

/// `information_schema` for one session of the PostgreSQL port.
#[derive(Debug)]
pub struct PgInformationSchema {
    catalogs: Arc<dyn CatalogProviderList>,
    /// DataFusion's views, for every view but `columns`.
    inner: InformationSchemaProvider,
    /// The database and caller whose tables' primary keys the key views list (read when
    /// one of them is queried, not for every statement).
    db: Db,
    who: Principal,
}

/// The views `information_schema` has here besides DataFusion's.
const KEY_VIEWS: [&str; 2] = ["table_constraints", "key_column_usage"];

impl PgInformationSchema {
    /// The views over the catalogs in `catalogs`; `inner` is DataFusion's provider over
    /// the same list; the key views list the primary keys of the tables `who` may read
    /// in `db`.
    pub fn new(
        catalogs: Arc<dyn CatalogProviderList>,
        inner: InformationSchemaProvider,
        db: Db,
        who: Principal,
    ) -> Self {
        Self {
            catalogs,
            inner,
            db,
            who,
        }
    }

    /// The caller's tables' primary keys, as (namespace, table, key columns) in order.
    async fn keys(&self) -> Result<Vec<(String, String, Vec<String>)>, DataFusionError> {
        caller_keys(&self.db, &self.who).await
    }

    /// `table_constraints` (one PRIMARY KEY row per table) or `key_column_usage` (one row
    /// per key column, `ordinal_position` from 1).
    async fn key_view(&self, name: &str) -> Result<MemTable, DataFusionError> {
        let constraints = name == "table_constraints";
        let text = |n: &str| Field::new(n, DataType::Utf8, false);
        let mut fields = vec![
            text("constraint_catalog"),
            text("constraint_schema"),
            text("constraint_name"),
            text("table_catalog"),
            text("table_schema"),
            text("table_name"),
        ];
        if constraints {
            fields.extend([
                text("constraint_type"),
                text("is_deferrable"),
                text("initially_deferred"),
                text("enforced"),
            ]);
        } else {
            fields.extend([
                text("column_name"),
                Field::new("ordinal_position", DataType::Int32, false),
            ]);
        }
        // Every field but `key_column_usage`'s last (`ordinal_position`) is text.
        let texts = if constraints {
            fields.len()
        } else {
            fields.len() - 1
        };
        let mut columns: Vec<StringBuilder> = (0..texts).map(|_| StringBuilder::new()).collect();
        let mut positions = Int32Builder::new();
        let catalog = crate::service::CATALOG;
        for (ns, table, key) in &self.keys().await? {
            let pkey = format!("{table}_pkey");
            let rows: Vec<(Option<&String>, i32)> = if constraints {
                vec![(None, 0)]
            } else {
                key.iter().zip(1..).map(|(c, i)| (Some(c), i)).collect()
            };
            for (column, position) in rows {
                let mut values = vec![catalog, ns, &pkey, catalog, ns, table];
                match column {
                    None => values.extend(["PRIMARY KEY", "NO", "NO", "YES"]),
                    Some(c) => {
                        values.push(c);
                        positions.append_value(position);
                    }
                }
                for (b, v) in columns.iter_mut().zip(values) {
                    b.append_value(v);
                }
            }
        }
        let mut arrays: Vec<ArrayRef> = columns
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        if !constraints {
            arrays.push(Arc::new(positions.finish()));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        MemTable::try_new(batch.schema(), vec![vec![batch]])
    }

    /// `information_schema.columns`: one row per column of each described table.
    async fn columns(&self) -> Result<MemTable, DataFusionError> {
        let mut rows = Columns::default();
        for catalog_name in self.catalogs.catalog_names() {
            let Some(catalog) = self.catalogs.catalog(&catalog_name) else {
                continue;
            };
            let mut schemas = catalog.schema_names();
            schemas.sort();
            for schema_name in schemas {
                if schema_name == INFORMATION_SCHEMA || schema_name == PG_CATALOG {
                    continue;
                }
                let Some(schema) = catalog.schema(&schema_name) else {
                    continue;
                };
                let mut tables = schema.table_names();
                tables.sort();
                for table_name in tables {
                    let Some(table) = schema.table(&table_name).await? else {
                        continue;
                    };
                    for (i, field) in table.schema().fields().iter().enumerate() {
                        rows.add(&catalog_name, &schema_name, &table_name, i + 1, field);
                    }
                }
            }
        }
        let batch = rows.finish()?;
        MemTable::try_new(batch.schema(), vec![vec![batch]])
    }
}

#[async_trait]
impl SchemaProvider for PgInformationSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(KEY_VIEWS.iter().map(|v| v.to_string()));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let name = name.to_ascii_lowercase();
        if name == "columns" {
            return Ok(Some(Arc::new(self.columns().await?)));
        }
        if KEY_VIEWS.contains(&name.as_str()) {
            return Ok(Some(Arc::new(self.key_view(&name).await?)));
        }
        self.inner.table(&name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        KEY_VIEWS.contains(&name.to_ascii_lowercase().as_str()) || self.inner.table_exist(name)
    }
}

/// The primary keys of the tables `who` may read in `db`, as (namespace, table, key
/// columns) in order.
pub async fn caller_keys(
    db: &Db,
    who: &Principal,
) -> Result<Vec<(String, String, Vec<String>)>, DataFusionError> {
    let catalog = db
        .catalog()
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let mut keys: Vec<_> = catalog
        .catalog
        .tables
        .values()
        .filter_map(|t| {
            let (ns, table) = split_name(&t.name);
            who.can_read(ns)
                .then(|| (ns.to_string(), table.to_string(), t.primary_key.clone()))
        })
        .collect();
    keys.sort();
    Ok(keys)
}

/// PostgreSQL's name of a column type as `information_schema.columns` gives it
/// (`data_type`), and the type's own name (`udt_name`).
pub fn type_names(data_type: &DataType) -> (String, String) {
    let Ok(pg) = arrow_pg::datatypes::into_pg_type(data_type) else {
        // A type PostgreSQL clients cannot receive: named as Arrow names it.
        let name = data_type.to_string();
        return (name.clone(), name);
    };
    let udt = pg.name().to_string();
    // PostgreSQL names an array type after its element, with a leading underscore.
    if udt.starts_with('_') {
        return ("ARRAY".to_string(), udt);
    }
    let sql = match pg {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::NUMERIC => "numeric",
        Type::TEXT => "text",
        Type::VARCHAR => "character varying",
        Type::BYTEA => "bytea",
        Type::DATE => "date",
        Type::TIME => "time without time zone",
        Type::TIMESTAMP => "timestamp without time zone",
        Type::TIMESTAMPTZ => "timestamp with time zone",
        Type::INTERVAL => "interval",
        _ => return (udt.clone(), udt),
    };
    (sql.to_string(), udt)
}

/// Precision facts of a type: (numeric_precision, radix, numeric_scale, datetime_precision)
/// as PostgreSQL reports them.
fn precision(data_type: &DataType) -> (Option<i32>, Option<i32>, Option<i32>, Option<i32>) {
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => (Some(16), Some(2), Some(0), None),
        DataType::Int32 | DataType::UInt16 => (Some(32), Some(2), Some(0), None),
        DataType::Int64 | DataType::UInt32 => (Some(64), Some(2), Some(0), None),
        DataType::Float16 | DataType::Float32 => (Some(24), Some(2), None, None),
        DataType::Float64 => (Some(53), Some(2), None, None),
        DataType::Decimal128(p, s) => (Some(i32::from(*p)), Some(10), Some(i32::from(*s)), None),
        DataType::Timestamp(unit, _) | DataType::Time64(unit) | DataType::Time32(unit) => {
            use arrow::datatypes::TimeUnit;
            let digits = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                // PostgreSQL keeps microseconds at most.
                TimeUnit::Microsecond | TimeUnit::Nanosecond => 6,
            };
            (None, None, None, Some(digits))
        }
        DataType::Date32 | DataType::Date64 => (None, None, None, Some(0)),
        _ => (None, None, None, None),
    }
}

/// The rows of `information_schema.columns`, column by column.
#[derive(Default)]
struct Columns {
    table_catalog: StringBuilder,
    table_schema: StringBuilder,
    table_name: StringBuilder,
    column_name: StringBuilder,
    ordinal_position: Int32Builder,
    column_default: StringBuilder,
    is_nullable: StringBuilder,
    data_type: StringBuilder,
    character_maximum_length: Int32Builder,
    character_octet_length: Int32Builder,
    numeric_precision: Int32Builder,
    numeric_precision_radix: Int32Builder,
    numeric_scale: Int32Builder,
    datetime_precision: Int32Builder,
    udt_catalog: StringBuilder,
    udt_schema: StringBuilder,
    udt_name: StringBuilder,
    is_identity: StringBuilder,
    is_generated: StringBuilder,
    is_updatable: StringBuilder,
}

impl Columns {
    fn add(&mut self, catalog: &str, schema: &str, table: &str, position: usize, field: &Field) {
        let (sql_type, udt) = type_names(field.data_type());
        let (precision, radix, scale, datetime) = precision(field.data_type());
        self.table_catalog.append_value(catalog);
        self.table_schema.append_value(schema);
        self.table_name.append_value(table);
        self.column_name.append_value(field.name());
        self.ordinal_position
            .append_value(i32::try_from(position).unwrap_or(i32::MAX));
        self.column_default.append_null();
        self.is_nullable
            .append_value(if field.is_nullable() { "YES" } else { "NO" });
        self.data_type.append_value(sql_type);
        self.character_maximum_length.append_null();
        // PostgreSQL's largest text value, 1 GB, for types without a declared length.
        let octets = matches!(udt.as_str(), "text" | "varchar").then_some(1_073_741_824);
        self.character_octet_length.append_option(octets);
        self.numeric_precision.append_option(precision);
        self.numeric_precision_radix.append_option(radix);
        self.numeric_scale.append_option(scale);
        self.datetime_precision.append_option(datetime);
        self.udt_catalog.append_value(catalog);
        self.udt_schema.append_value(PG_CATALOG);
        self.udt_name.append_value(udt);
        self.is_identity.append_value("NO");
        self.is_generated.append_value("NEVER");
        self.is_updatable.append_value("YES");
    }

    fn finish(mut self) -> Result<RecordBatch, DataFusionError> {
        let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
        let int = |name: &str, nullable: bool| Field::new(name, DataType::Int32, nullable);
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            text("table_catalog", false),
            text("table_schema", false),
            text("table_name", false),
            text("column_name", false),
            int("ordinal_position", false),
            text("column_default", true),
            text("is_nullable", false),
            text("data_type", false),
            int("character_maximum_length", true),
            int("character_octet_length", true),
            int("numeric_precision", true),
            int("numeric_precision_radix", true),
            int("numeric_scale", true),
            int("datetime_precision", true),
            text("udt_catalog", false),
            text("udt_schema", false),
            text("udt_name", false),
            text("is_identity", false),
            text("is_generated", false),
            text("is_updatable", false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.table_catalog.finish()),
            Arc::new(self.table_schema.finish()),
            Arc::new(self.table_name.finish()),
            Arc::new(self.column_name.finish()),
            Arc::new(self.ordinal_position.finish()),
            Arc::new(self.column_default.finish()),
            Arc::new(self.is_nullable.finish()),
            Arc::new(self.data_type.finish()),
            Arc::new(self.character_maximum_length.finish()),
            Arc::new(self.character_octet_length.finish()),
            Arc::new(self.numeric_precision.finish()),
            Arc::new(self.numeric_precision_radix.finish()),
            Arc::new(self.numeric_scale.finish()),
            Arc::new(self.datetime_precision.finish()),
            Arc::new(self.udt_catalog.finish()),
            Arc::new(self.udt_schema.finish()),
            Arc::new(self.udt_name.finish()),
            Arc::new(self.is_identity.finish()),
            Arc::new(self.is_generated.finish()),
            Arc::new(self.is_updatable.finish()),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn column_types_have_their_postgresql_names() {
        let cases = [
            (DataType::Int64, "bigint", "int8"),
            (DataType::Int32, "integer", "int4"),
            (DataType::Int16, "smallint", "int2"),
            (DataType::Float64, "double precision", "float8"),
            (DataType::Float32, "real", "float4"),
            (DataType::Boolean, "boolean", "bool"),
            (DataType::Utf8, "text", "text"),
            (DataType::Binary, "bytea", "bytea"),
            (DataType::Date32, "date", "date"),
            (
                DataType::Timestamp(TimeUnit::Microsecond, None),
                "timestamp without time zone",
                "timestamp",
            ),
            (
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                "timestamp with time zone",
                "timestamptz",
            ),
            (
                DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
                "ARRAY",
                "_int8",
            ),
        ];
        for (arrow, sql, udt) in cases {
            assert_eq!(
                type_names(&arrow),
                (sql.to_string(), udt.to_string()),
                "{arrow}"
            );
        }
    }
}
