//! PostgreSQL's session functions that drivers call while they connect, as the PostgreSQL
//! port's sessions answer them.
//!
//! - `version()`: `PostgreSQL 16.6 (Strata x.y.z) ...`. Drivers and ORMs read the server's
//!   major version from it (SQLAlchemy's PostgreSQL dialect refuses to connect when the
//!   text does not start `PostgreSQL <n>.<m>`), so the session's `version()` replaces
//!   DataFusion's, which names DataFusion.
//! - `current_setting(name [, missing_ok])`: the value `SHOW name` answers: the
//!   connection's own for a setting it set or sent at startup ([`connection_settings`]),
//!   else the server's ([`server_setting`]); an unknown name fails with SQLSTATE 42704, or
//!   gives NULL with `missing_ok`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility, create_udf,
};
use pgwire::api::Type;
use pgwire::types::format::FormatOptions;

use super::startup::server_version;
use crate::error::{QueryError, QueryErrorKind};

/// The functions a PostgreSQL session has besides DataFusion's and `pg_catalog`'s.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        version_udf(),
        ScalarUDF::new_from_impl(CurrentSetting::new()),
        to_regtype_udf(),
        like_escape_udf(),
        pg_size_pretty_udf(),
        nothing("obj_description", 1, ScalarValue::Utf8(None)),
        nothing("obj_description", 2, ScalarValue::Utf8(None)),
        nothing("col_description", 2, ScalarValue::Utf8(None)),
        nothing("shobj_description", 2, ScalarValue::Utf8(None)),
        nothing("pg_table_size", 1, ScalarValue::Int64(None)),
        nothing("pg_indexes_size", 1, ScalarValue::Int64(None)),
        always_true("pg_function_is_visible"),
        always_true("pg_type_is_visible"),
        // Strata's tables have no sequences (SQLAlchemy's column reflection asks).
        nothing("pg_get_serial_sequence", 2, ScalarValue::Utf8(None)),
        // Function signatures: Strata has no functions of its own to describe (`psql`'s
        // `\df` and the JDBC driver's `getFunctions` list those outside `pg_catalog`).
        nothing("pg_get_function_result", 1, ScalarValue::Utf8(None)),
        nothing("pg_get_function_arguments", 1, ScalarValue::Utf8(None)),
        nothing(
            "pg_get_function_identity_arguments",
            1,
            ScalarValue::Utf8(None),
        ),
        ScalarUDF::new_from_impl(JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Immutable),
        }),
    ]
}

/// `name(any, ...)` of `arity` arguments answering NULL (`null`, of the function's type):
/// comments (`obj_description`, `col_description`; Strata keeps none) and sizes it does
/// not know (`pg_table_size`), which `psql`'s `\d+` and `\dt+` read.
fn nothing(name: &'static str, arity: usize, null: ScalarValue) -> ScalarUDF {
    ScalarUDF::new_from_impl(Constant {
        name,
        signature: Signature::any(arity, Volatility::Stable),
        value: null,
    })
}

/// `name(oid)` answering true: every object Strata describes is visible on the search path
/// (`psql`'s `\df` and `\dT` filter with these).
fn always_true(name: &'static str) -> ScalarUDF {
    ScalarUDF::new_from_impl(Constant {
        name,
        signature: Signature::any(1, Volatility::Stable),
        value: ScalarValue::Boolean(Some(true)),
    })
}

/// A function of any arguments with one answer.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    signature: Signature,
    value: ScalarValue,
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(self.value.data_type())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            return Ok(ColumnarValue::Scalar(self.value.clone()));
        }
        Ok(ColumnarValue::Array(
            self.value.to_array_of_size(args.number_rows)?,
        ))
    }
}

/// PostgreSQL's `json_build_object(key, value, ...)`: the JSON object of the pairs, as
/// PostgreSQL writes it (`{"a" : 1, "b" : "x"}`). Numbers and booleans stay JSON numbers
/// and booleans, NULL is `null`, anything else is its text as a JSON string.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        if !args.args.len().is_multiple_of(2) {
            return Err(DataFusionError::External(Box::new(
                QueryError::new(
                    QueryErrorKind::Invalid,
                    "argument list must have even number of elements",
                )
                .with_sqlstate("22023"),
            )));
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = arrays.first().map_or(args.number_rows, |a| a.len());
        let text: Vec<ArrayRef> = arrays
            .iter()
            .map(|a| arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<_, _>>()?;
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let mut object = String::from("{");
            for (i, (text, given)) in text.chunks(2).zip(arrays.chunks(2)).enumerate() {
                let (key, value, given) = (
                    text[0].as_string::<i32>(),
                    text[1].as_string::<i32>(),
                    &given[1],
                );
                if key.is_null(row) {
                    return Err(DataFusionError::External(Box::new(
                        QueryError::new(
                            QueryErrorKind::Invalid,
                            "null value not allowed for object key",
                        )
                        .with_sqlstate("22004"),
                    )));
                }
                if i > 0 {
                    object.push_str(", ");
                }
                object.push_str(&serde_json::Value::from(key.value(row)).to_string());
                object.push_str(" : ");
                if given.logical_nulls().is_some_and(|n| n.is_null(row)) {
                    object.push_str("null");
                } else if given.data_type().is_numeric() || *given.data_type() == DataType::Boolean
                {
                    object.push_str(value.value(row));
                } else {
                    object.push_str(&serde_json::Value::from(value.value(row)).to_string());
                }
            }
            object.push('}');
            out.append_value(object);
        }
        answer(&args.args, Arc::new(out.finish()))
    }
}

/// PostgreSQL's `pg_size_pretty(bigint)`: `512 bytes`, `10 kB`, `3 MB`, ... (units of 1024,
/// rounded half up, a unit taken once the size reaches 10240 of the one below).
pub fn size_pretty(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["kB", "MB", "GB", "TB", "PB"];
    // Wide enough for `i64::MIN`'s magnitude.
    let mut size = i128::from(bytes);
    if size.abs() < 10 * 1024 {
        return format!("{size} bytes");
    }
    let mut unit = 0;
    // PostgreSQL halves, rounds, and keeps going while the rounded value is 10240 or more.
    size /= 512;
    let half_round = |s: i128| (s + s.signum()) / 2;
    while half_round(size).abs() >= 10 * 1024 && unit + 1 < UNITS.len() {
        size /= 1024;
        unit += 1;
    }
    format!("{} {}", half_round(size), UNITS[unit])
}

fn pg_size_pretty_udf() -> ScalarUDF {
    create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let sizes = arrays[0].as_primitive::<arrow::datatypes::Int64Type>();
            let out: arrow::array::StringArray = sizes.iter().map(|s| s.map(size_pretty)).collect();
            answer(args, Arc::new(out))
        }),
    )
}

/// A function's answer: a scalar when every argument was one (`SELECT f('x')`), else
/// the array of one value per row.
fn answer(args: &[ColumnarValue], array: ArrayRef) -> Result<ColumnarValue, DataFusionError> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) && array.len() == 1 {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
            &array, 0,
        )?));
    }
    Ok(ColumnarValue::Array(array))
}

/// The name of the function [`like_escape`] is called by in rewritten statements.
pub const LIKE_ESCAPE: &str = "pg_like_escape";

/// A `LIKE` pattern written with the escape character `escape` (`''`: none), as the same
/// pattern escaped with the backslash, the only escape DataFusion's `LIKE` takes.
pub fn like_escape(pattern: &str, escape: &str) -> Result<String, QueryError> {
    let mut chars = escape.chars();
    let escape = match (chars.next(), chars.next()) {
        (None, _) => None,
        (Some(c), None) => Some(c),
        _ => {
            return Err(QueryError::new(
                QueryErrorKind::Invalid,
                "invalid escape string: it must be empty or one character",
            )
            .with_sqlstate("22019"));
        }
    };
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            let Some(next) = chars.next() else {
                return Err(QueryError::new(
                    QueryErrorKind::Invalid,
                    "LIKE pattern must not end with escape character",
                )
                .with_sqlstate("22025"));
            };
            out.push('\\');
            out.push(next);
        } else if c == '\\' {
            // A backslash that is not the escape stands for itself.
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn like_escape_udf() -> ScalarUDF {
    create_udf(
        LIKE_ESCAPE,
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let patterns = arrays[0].as_string::<i32>();
            let escapes = arrays[1].as_string::<i32>();
            let mut out = StringBuilder::new();
            for i in 0..patterns.len() {
                if patterns.is_null(i) || escapes.is_null(i) {
                    out.append_null();
                    continue;
                }
                let p = like_escape(patterns.value(i), escapes.value(i))
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                out.append_value(p);
            }
            answer(args, Arc::new(out.finish()))
        }),
    )
}

/// The built-in types `to_regtype` knows, by every name PostgreSQL accepts for them.
const TYPE_NAMES: &[(&[&str], Type)] = &[
    (&["bool", "boolean"], Type::BOOL),
    (&["int2", "smallint"], Type::INT2),
    (&["int4", "integer", "int"], Type::INT4),
    (&["int8", "bigint"], Type::INT8),
    (&["float4", "real"], Type::FLOAT4),
    (&["float8", "double precision"], Type::FLOAT8),
    (&["numeric", "decimal"], Type::NUMERIC),
    (&["text"], Type::TEXT),
    (&["varchar", "character varying"], Type::VARCHAR),
    (&["bpchar", "character", "char"], Type::BPCHAR),
    (&["name"], Type::NAME),
    (&["bytea"], Type::BYTEA),
    (&["date"], Type::DATE),
    (&["time", "time without time zone"], Type::TIME),
    (&["timetz", "time with time zone"], Type::TIMETZ),
    (
        &["timestamp", "timestamp without time zone"],
        Type::TIMESTAMP,
    ),
    (
        &["timestamptz", "timestamp with time zone"],
        Type::TIMESTAMPTZ,
    ),
    (&["interval"], Type::INTERVAL),
    (&["json"], Type::JSON),
    (&["jsonb"], Type::JSONB),
    (&["uuid"], Type::UUID),
    (&["oid"], Type::OID),
];

/// The oid of the type named `name` (`int8`, `bigint`, `pg_catalog.int8`, `bigint[]`),
/// `None`: no such built-in type (Strata has no user-defined types, `hstore` among them).
pub fn type_oid(name: &str) -> Option<u32> {
    let name = name.trim().trim_matches('"').to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let (element, array) = match name.strip_suffix("[]") {
        Some(e) => (e.trim(), true),
        None => match name.strip_prefix('_') {
            Some(e) => (e, true),
            None => (name, false),
        },
    };
    let (_, ty) = TYPE_NAMES
        .iter()
        .find(|(names, _)| names.contains(&element))?;
    if !array {
        return Some(ty.oid());
    }
    let array_name = format!("_{}", ty.name());
    ARRAY_TYPES
        .iter()
        .find(|t| t.name() == array_name)
        .map(|t| t.oid())
}

/// The array types of [`TYPE_NAMES`].
const ARRAY_TYPES: &[Type] = &[
    Type::BOOL_ARRAY,
    Type::INT2_ARRAY,
    Type::INT4_ARRAY,
    Type::INT8_ARRAY,
    Type::FLOAT4_ARRAY,
    Type::FLOAT8_ARRAY,
    Type::NUMERIC_ARRAY,
    Type::TEXT_ARRAY,
    Type::VARCHAR_ARRAY,
    Type::BPCHAR_ARRAY,
    Type::NAME_ARRAY,
    Type::BYTEA_ARRAY,
    Type::DATE_ARRAY,
    Type::TIME_ARRAY,
    Type::TIMETZ_ARRAY,
    Type::TIMESTAMP_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
    Type::INTERVAL_ARRAY,
    Type::JSON_ARRAY,
    Type::JSONB_ARRAY,
    Type::UUID_ARRAY,
    Type::OID_ARRAY,
];

/// `to_regtype(name)`: the type's oid, or NULL when there is no such type (psycopg looks
/// types up so while it connects through SQLAlchemy).
fn to_regtype_udf() -> ScalarUDF {
    create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrays[0].as_string::<i32>();
            let oids: Int32Array = names
                .iter()
                .map(|n| n.and_then(type_oid).and_then(|o| i32::try_from(o).ok()))
                .collect();
            answer(args, Arc::new(oids))
        }),
    )
}

/// The text `version()` answers.
pub fn version_text() -> String {
    format!(
        "PostgreSQL {} on {}-{}, compiled by rustc, 64-bit",
        server_version(),
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

fn version_udf() -> ScalarUDF {
    let text = version_text();
    create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))
        }),
    )
}

/// The server's value of the setting `name` (lowercase), as `SHOW` and `current_setting`
/// answer it where the connection did not set it; `None`: no such setting.
pub fn server_setting(name: &str) -> Option<String> {
    let defaults = FormatOptions::default();
    let value = match name {
        "server_version" => server_version(),
        "server_version_num" => "160006".to_string(),
        "server_encoding" | "client_encoding" => "UTF8".to_string(),
        "datestyle" => defaults.date_style,
        "intervalstyle" => defaults.interval_style,
        "timezone" | "time zone" => defaults.time_zone,
        "extra_float_digits" => defaults.extra_float_digits.to_string(),
        "bytea_output" => defaults.bytea_output,
        "standard_conforming_strings" | "integer_datetimes" => "on".to_string(),
        "transaction_isolation"
        | "transaction isolation level"
        | "default_transaction_isolation" => "read committed".to_string(),
        "transaction_read_only" | "default_transaction_read_only" | "is_superuser" => {
            "off".to_string()
        }
        "search_path" => crate::auth::DEFAULT_NAMESPACE.to_string(),
        "max_identifier_length" => "63".to_string(),
        "lc_collate" | "lc_ctype" => "C".to_string(),
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => {
            "0".to_string()
        }
        "application_name" => String::new(),
        _ => return None,
    };
    Some(value)
}

/// The error for a setting PostgreSQL would not know either.
pub fn unknown_setting(name: &str) -> QueryError {
    QueryError::new(
        QueryErrorKind::NotFound,
        format!("unrecognized configuration parameter \"{name}\""),
    )
    .with_sqlstate("42704")
}

/// `text` with each `current_setting('name' [, missing_ok])` of a setting the connection has
/// (`connection(name)`: set with `SET`, or sent at startup) replaced by the connection's
/// value, as PostgreSQL answers it; `None` when there is none to replace. The function
/// itself (`CurrentSetting`) knows the server's values only.
pub fn connection_settings(
    text: &str,
    connection: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{
        Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, visit_expressions_mut,
    };
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    if !text.to_ascii_lowercase().contains("current_setting") {
        return None;
    }
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, text).ok()?;
    let mut changed = false;
    for statement in &mut statements {
        let _ = visit_expressions_mut(statement, |expr| {
            let Expr::Function(f) = expr else {
                return std::ops::ControlFlow::<()>::Continue(());
            };
            let named = f
                .name
                .0
                .last()
                .is_some_and(|p| p.to_string().eq_ignore_ascii_case("current_setting"));
            let FunctionArguments::List(list) = &f.args else {
                return std::ops::ControlFlow::Continue(());
            };
            let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(name)))) =
                list.args.first()
            else {
                return std::ops::ControlFlow::Continue(());
            };
            let Value::SingleQuotedString(name) = &name.value else {
                return std::ops::ControlFlow::Continue(());
            };
            if named && let Some(value) = connection(&name.to_ascii_lowercase()) {
                *expr = Expr::value(Value::SingleQuotedString(value));
                changed = true;
            }
            std::ops::ControlFlow::Continue(())
        });
    }
    changed.then(|| crate::service::sql_text(&statements))
}

/// `current_setting(name [, missing_ok])`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
}

impl CurrentSetting {
    fn new() -> Self {
        Self {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrays[0].as_string::<i32>();
        let missing_ok = arrays.get(1).map(|a| a.as_boolean().clone());
        let mut out = StringBuilder::new();
        for i in 0..names.len() {
            if names.is_null(i) {
                out.append_null();
                continue;
            }
            let name = names.value(i);
            match server_setting(&name.to_ascii_lowercase()) {
                Some(v) => out.append_value(v),
                None if missing_ok
                    .as_ref()
                    .is_some_and(|m| m.is_valid(i) && m.value(i)) =>
                {
                    out.append_null()
                }
                None => return Err(DataFusionError::External(Box::new(unknown_setting(name)))),
            }
        }
        answer(&args.args, Arc::new(out.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn one(ctx: &SessionContext, sql: &str) -> Result<Option<String>, DataFusionError> {
        let batches = ctx.sql(sql).await?.collect().await?;
        let column = batches[0].column(0).as_string::<i32>().clone();
        Ok((!column.is_null(0)).then(|| column.value(0).to_string()))
    }

    #[test]
    fn sizes_print_as_postgresql_prints_them() {
        for (bytes, text) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (1_000_000, "977 kB"),
            (10_485_760, "10 MB"),
            (123_456_789_012, "115 GB"),
            (-20_480, "-20 kB"),
            (i64::MIN, "-8192 PB"),
        ] {
            assert_eq!(size_pretty(bytes), text, "{bytes}");
        }
    }

    #[test]
    fn like_patterns_are_rewritten_to_the_backslash_escape() {
        assert_eq!(like_escape("pg/_%", "/").unwrap(), "pg\\_%");
        assert_eq!(like_escape("a//b", "/").unwrap(), "a\\/b");
        assert_eq!(like_escape("c:\\x_", "/").unwrap(), "c:\\\\x_");
        assert_eq!(like_escape("c:\\x_", "").unwrap(), "c:\\\\x_");
        assert_eq!(like_escape("50#%", "#").unwrap(), "50\\%");
        assert!(like_escape("x/", "/").is_err());
        assert!(like_escape("x", "ab").is_err());
    }

    #[tokio::test]
    async fn drivers_read_postgresql_from_version_and_settings() {
        let ctx = SessionContext::new();
        for f in udfs() {
            ctx.register_udf(f);
        }
        let version = one(&ctx, "SELECT version()").await.unwrap().unwrap();
        assert!(version.starts_with("PostgreSQL 16.6 (Strata "), "{version}");
        let setting = |name: &str| format!("SELECT current_setting('{name}')");
        assert_eq!(
            one(&ctx, &setting("server_version_num")).await.unwrap(),
            Some("160006".into())
        );
        assert_eq!(
            one(&ctx, &setting("search_path")).await.unwrap(),
            Some(crate::auth::DEFAULT_NAMESPACE.into())
        );
        assert_eq!(
            one(&ctx, &setting("Standard_Conforming_Strings"))
                .await
                .unwrap(),
            Some("on".into())
        );
        let oid = |sql: &str| {
            let ctx = &ctx;
            let sql = sql.to_string();
            async move {
                let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                let c = batches[0]
                    .column(0)
                    .as_primitive::<arrow::datatypes::Int32Type>()
                    .clone();
                (!c.is_null(0)).then(|| c.value(0))
            }
        };
        assert_eq!(oid("SELECT to_regtype('bigint')").await, Some(20));
        assert_eq!(oid("SELECT to_regtype('pg_catalog.int8')").await, Some(20));
        assert_eq!(oid("SELECT to_regtype('text[]')").await, Some(1009));
        assert_eq!(oid("SELECT to_regtype('_int4')").await, Some(1007));
        assert_eq!(oid("SELECT to_regtype('hstore')").await, None);
        let err = one(&ctx, &setting("no_such_thing")).await.unwrap_err();
        let err = QueryError::from(err);
        assert_eq!(super::super::handler::sqlstate(&err), "42704", "{err:?}");
        assert_eq!(
            one(&ctx, "SELECT current_setting('no_such_thing', true)")
                .await
                .unwrap(),
            None
        );
    }
}
