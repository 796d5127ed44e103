//! Flight SQL's catalog metadata: `GetCatalogs`, `GetDbSchemas`, `GetTables` (with
//! `include_schema`), `GetTableTypes`, `GetPrimaryKeys`, `GetSqlInfo` and
//! `GetXdbcTypeInfo`, answered from the catalog this process caches (no bucket request).
//! Namespaces are schemas of the one catalog `strata`, and a caller sees only the
//! namespaces its key may read, as in SQL.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTableTypes,
    CommandGetTables, Nullable, Searchable, SqlInfo, XdbcDataType,
};
use strata_engine::Db;
use strata_engine::schema::TableSchema;

use crate::auth::{DEFAULT_NAMESPACE, Principal, split_name};
use crate::error::{QueryError, QueryErrorKind};
use crate::service::CATALOG;

/// The only table type.
const TABLE: &str = "TABLE";

/// What a caller may see: its readable namespaces and their tables.
pub(crate) struct Visible {
    namespaces: BTreeSet<String>,
    /// (namespace, table within it, schema), in name order.
    tables: Vec<(String, String, Arc<TableSchema>)>,
}

impl Visible {
    /// The namespaces and tables of the cached catalog `who` may read.
    pub(crate) async fn load(db: &Db, who: &Principal) -> Result<Self, QueryError> {
        let catalog = db.catalog().await?;
        let mut namespaces = BTreeSet::new();
        if who.can_read(DEFAULT_NAMESPACE) {
            namespaces.insert(DEFAULT_NAMESPACE.to_string());
        }
        let mut tables = Vec::new();
        for name in catalog.catalog.tables.keys() {
            let (ns, table) = split_name(name);
            if !who.can_read(ns) {
                continue;
            }
            namespaces.insert(ns.to_string());
            tables.push((ns.to_string(), table.to_string(), catalog.schema(name)?));
        }
        tables.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        Ok(Self { namespaces, tables })
    }
}

fn internal(e: impl std::fmt::Display) -> QueryError {
    QueryError::new(QueryErrorKind::Internal, e.to_string())
}

/// `GetCatalogs`: the one catalog.
pub(crate) fn catalogs(query: CommandGetCatalogs) -> Result<(SchemaRef, RecordBatch), QueryError> {
    let mut b = query.into_builder();
    b.append(CATALOG);
    let schema = b.schema();
    Ok((schema, b.build().map_err(internal)?))
}

/// `GetDbSchemas`: the namespaces the caller may read (the builder applies the catalog and
/// the schema name pattern).
pub(crate) fn schemas(
    query: CommandGetDbSchemas,
    v: &Visible,
) -> Result<(SchemaRef, RecordBatch), QueryError> {
    let mut b = query.into_builder();
    for ns in &v.namespaces {
        b.append(CATALOG, ns);
    }
    let schema = b.schema();
    Ok((schema, b.build().map_err(internal)?))
}

/// `GetTables`: the tables the caller may read, with their Arrow schemas when asked (the
/// builder applies the filters).
pub(crate) fn tables(
    query: CommandGetTables,
    v: &Visible,
) -> Result<(SchemaRef, RecordBatch), QueryError> {
    let mut b = query.into_builder();
    for (ns, table, schema) in &v.tables {
        b.append(CATALOG, ns, table, TABLE, &schema.schema)
            .map_err(internal)?;
    }
    let schema = b.schema();
    Ok((schema, b.build().map_err(internal)?))
}

/// `GetTableTypes`: `TABLE` (Strata has no views).
pub(crate) fn table_types(
    query: CommandGetTableTypes,
) -> Result<(SchemaRef, RecordBatch), QueryError> {
    let mut b = query.into_builder();
    b.append(TABLE);
    let schema = b.schema();
    Ok((schema, b.build().map_err(internal)?))
}

/// The schema of a `GetPrimaryKeys` answer (Flight SQL's `CommandGetPrimaryKeys`).
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// `GetPrimaryKeys`: the key columns of one table, in key order (`key_sequence` from 1).
/// A table the caller may not read, or that does not exist, has none.
pub(crate) fn primary_keys(
    query: CommandGetPrimaryKeys,
    v: &Visible,
) -> Result<(SchemaRef, RecordBatch), QueryError> {
    let catalog_ok = query.catalog.as_deref().is_none_or(|c| c == CATALOG);
    let ns_wanted = query.db_schema.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    let mut cols: [Vec<String>; 4] = Default::default();
    let mut seq = Vec::new();
    for (ns, table, schema) in &v.tables {
        if !catalog_ok || ns != ns_wanted || *table != query.table {
            continue;
        }
        for (i, column) in schema.entry.primary_key.iter().enumerate() {
            cols[0].push(CATALOG.to_string());
            cols[1].push(ns.clone());
            cols[2].push(table.clone());
            cols[3].push(column.clone());
            seq.push(i as i32 + 1);
        }
    }
    let schema = primary_keys_schema();
    let n = seq.len();
    let mut arrays: Vec<ArrayRef> = cols
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
        .collect();
    arrays.push(Arc::new(StringArray::from(vec![None::<&str>; n])));
    arrays.push(Arc::new(Int32Array::from(seq)));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(internal)?;
    Ok((schema, batch))
}

/// `GetSqlInfo`: what the server is and which SQL it speaks.
pub(crate) fn sql_info(read_only: bool) -> &'static SqlInfoData {
    fn build(read_only: bool) -> SqlInfoData {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "Strata");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        b.append(SqlInfo::FlightSqlServerReadOnly, read_only);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        b.append(SqlInfo::FlightSqlServerCancel, false);
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, !read_only);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlSchemaTerm, "schema");
        b.append(SqlInfo::SqlCatalogTerm, "catalog");
        b.append(SqlInfo::SqlTransactionsSupported, false);
        b.build().expect("static SQL info")
    }
    static WRITABLE: LazyLock<SqlInfoData> = LazyLock::new(|| build(false));
    static READ_ONLY: LazyLock<SqlInfoData> = LazyLock::new(|| build(true));
    if read_only { &READ_ONLY } else { &WRITABLE }
}

/// `GetXdbcTypeInfo`: the SQL types Strata's tables store.
pub(crate) fn xdbc_types() -> &'static XdbcTypeInfoData {
    static DATA: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
        let mut b = XdbcTypeInfoDataBuilder::new();
        let numeric = |name: &str, t: XdbcDataType, size: i32| XdbcTypeInfo {
            type_name: name.into(),
            data_type: t,
            column_size: Some(size),
            literal_prefix: None,
            literal_suffix: None,
            create_params: None,
            nullable: Nullable::NullabilityNullable,
            case_sensitive: false,
            searchable: Searchable::Full,
            unsigned_attribute: Some(false),
            fixed_prec_scale: false,
            auto_increment: Some(false),
            local_type_name: Some(name.into()),
            minimum_scale: None,
            maximum_scale: None,
            sql_data_type: t,
            datetime_subcode: None,
            num_prec_radix: Some(2),
            interval_precision: None,
        };
        let other = |name: &str, t: XdbcDataType, size: Option<i32>, quote: bool| XdbcTypeInfo {
            column_size: size,
            literal_prefix: quote.then(|| "'".into()),
            literal_suffix: quote.then(|| "'".into()),
            case_sensitive: t == XdbcDataType::XdbcVarchar,
            unsigned_attribute: None,
            num_prec_radix: None,
            ..numeric(name, t, 0)
        };
        // In the order JDBC expects: by data type, then closest match first.
        for info in [
            numeric("BIGINT", XdbcDataType::XdbcBigint, 64),
            numeric("TINYINT", XdbcDataType::XdbcTinyint, 8),
            other("BOOLEAN", XdbcDataType::XdbcBit, Some(1), false),
            other("BYTEA", XdbcDataType::XdbcVarbinary, None, true),
            other("VARCHAR", XdbcDataType::XdbcVarchar, None, true),
            numeric("INTEGER", XdbcDataType::XdbcInteger, 32),
            numeric("SMALLINT", XdbcDataType::XdbcSmallint, 16),
            numeric("REAL", XdbcDataType::XdbcReal, 24),
            numeric("DOUBLE", XdbcDataType::XdbcDouble, 53),
            other("DATE", XdbcDataType::XdbcDate, Some(10), true),
            other("TIMESTAMP", XdbcDataType::XdbcTimestamp, Some(26), true),
        ] {
            b.append(info);
        }
        b.build().expect("static XDBC type info")
    });
    &DATA
}
