//! The catalog queries of particular clients that Strata's `pg_catalog` cannot answer as
//! written, recognized by their text and asked instead of `information_schema`, with the
//! client's filters and bound parameters kept: the PostgreSQL JDBC driver's key and index
//! metadata (DBeaver's Keys and Indexes tabs) and SQLAlchemy's constraint and index
//! reflection (`inspect().get_pk_constraint`, `Table(autoload_with=...)`, pandas'
//! `read_sql_table`). These expand `pg_index.indkey` and `pg_constraint.conkey`, arrays
//! Strata's `pg_catalog` has as text, with `_pg_expandarray`, `unnest` and
//! `generate_subscripts`. Each rewrite takes one SELECT only, so that a statement that merely
//! quotes such a text is never taken for one.

use std::borrow::Cow;

/// `text`, or the question it asks rewritten for Strata when it is one of the known
/// client queries, with the known unanswerable fragments replaced.
pub fn rewrite(text: &str) -> Cow<'_, str> {
    let whole = jdbc_primary_keys(text)
        .or_else(|| jdbc_index_info(text))
        .or_else(|| jdbc_foreign_keys(text))
        .or_else(|| sqlalchemy_constraints(text))
        .or_else(|| sqlalchemy_indexes(text));
    let mut text = match whole {
        Some(sql) => Cow::Owned(sql),
        None => Cow::Borrowed(text),
    };
    for (from, to) in FRAGMENTS {
        if text.contains(from) {
            text = Cow::Owned(text.replace(from, to));
        }
    }
    text
}

/// Fragments of clients' catalog queries that read what Strata's `pg_catalog` does not
/// have, and what they read instead.
const FRAGMENTS: &[(&str, &str)] = &[
    // psql's `\d+`: a table's storage options (`pg_class.reloptions`, and its TOAST
    // table's). Strata's tables have none.
    (
        "pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ')",
        "''",
    ),
    // `psql`'s `\dn+`: a namespace's access list (Strata's keys are not roles).
    (
        "pg_catalog.array_to_string(n.nspacl, E'\\n')",
        "CAST(NULL AS TEXT)",
    ),
    // The PostgreSQL JDBC driver's type cache (`getTypeInfo`, and a result column of a type
    // it has not seen): whether a type is an array, by its input function's name (a
    // `regproc` in PostgreSQL, its name in Strata's `pg_type`).
    (
        "typinput='pg_catalog.array_in'::regproc",
        "typinput='array_in'",
    ),
    ("typinput='array_in'::regproc", "typinput='array_in'"),
    // The PostgreSQL JDBC driver's `getMaxIndexKeys`, read before its foreign-key queries.
    (
        "SELECT setting FROM pg_catalog.pg_settings WHERE name='max_index_keys'",
        "SELECT '32' AS setting",
    ),
];

/// The PostgreSQL JDBC driver's `DatabaseMetaData.getPrimaryKeys` query, which expands
/// `pg_constraint.conkey` (`pg_index.indkey` in older drivers) with
/// `information_schema._pg_expandarray` (a set-returning function of a composite type
/// DataFusion cannot express), as the same question asked of
/// `information_schema.key_column_usage`, with the driver's schema and table filters
/// (bound parameters or literals) and its columns and order. `None`: not that query.
fn jdbc_primary_keys(text: &str) -> Option<String> {
    if !one_select(text) {
        return None;
    }
    let primary = text.contains("i.indisprimary") || text.contains("con.contype = 'p'");
    if !(text.contains("information_schema._pg_expandarray(")
        && primary
        && text.contains("result.A_ATTNUM = (result.KEYS).x")
        && !text.contains("IS_NOT_NULL"))
    {
        return None;
    }
    let mut sql = String::from(
        "SELECT current_database() AS table_cat, table_schema AS table_schem, table_name, \
         column_name, ordinal_position AS key_seq, constraint_name AS pk_name \
         FROM information_schema.key_column_usage WHERE true",
    );
    push_filters(text, &mut sql);
    sql.push_str(" ORDER BY table_name, pk_name, key_seq");
    Some(sql)
}

/// The PostgreSQL JDBC driver's `DatabaseMetaData.getIndexInfo` query (also through
/// `_pg_expandarray` over `pg_index`), answered from `information_schema.key_column_usage`:
/// a table's one index is its primary key's, unique, in key order. `None`: not that query.
fn jdbc_index_info(text: &str) -> Option<String> {
    if !one_select(text) {
        return None;
    }
    if !(text.contains("(information_schema._pg_expandarray(i.indkey)).n AS ORDINAL_POSITION")
        && text.contains(") AS tmp"))
    {
        return None;
    }
    let mut sql = String::from(
        "SELECT current_database() AS \"TABLE_CAT\", table_schema AS \"TABLE_SCHEM\", \
         table_name AS \"TABLE_NAME\", false AS \"NON_UNIQUE\", \
         CAST(NULL AS TEXT) AS \"INDEX_QUALIFIER\", constraint_name AS \"INDEX_NAME\", \
         CAST(3 AS SMALLINT) AS \"TYPE\", CAST(ordinal_position AS SMALLINT) AS \"ORDINAL_POSITION\", \
         column_name AS \"COLUMN_NAME\", 'A' AS \"ASC_OR_DESC\", CAST(0 AS BIGINT) AS \"CARDINALITY\", \
         CAST(0 AS BIGINT) AS \"PAGES\", CAST(NULL AS TEXT) AS \"FILTER_CONDITION\", \
         CAST(NULL AS TEXT) AS \"REMARKS\" \
         FROM information_schema.key_column_usage WHERE true",
    );
    push_filters(text, &mut sql);
    sql.push_str(" ORDER BY \"NON_UNIQUE\", \"TYPE\", \"INDEX_NAME\", \"ORDINAL_POSITION\"");
    Some(sql)
}

/// The PostgreSQL JDBC driver's foreign-key query (`getImportedKeys`, `getExportedKeys`,
/// `getCrossReference`): Strata has no foreign keys, so it answers no rows, with the
/// driver's columns, its bound filters kept as parameters. `None`: not that query.
fn jdbc_foreign_keys(text: &str) -> Option<String> {
    if !one_select(text) {
        return None;
    }
    if !(text.contains("AS \"FKTABLE_SCHEM\"") && text.contains("AS \"PKTABLE_SCHEM\"")) {
        return None;
    }
    let mut sql = String::from("SELECT ");
    let text_columns = [
        "PKTABLE_CAT",
        "PKTABLE_SCHEM",
        "PKTABLE_NAME",
        "PKCOLUMN_NAME",
        "FKTABLE_CAT",
        "FKTABLE_SCHEM",
        "FKTABLE_NAME",
        "FKCOLUMN_NAME",
    ];
    for c in text_columns {
        sql.push_str(&format!("CAST(NULL AS TEXT) AS \"{c}\", "));
    }
    for c in ["KEY_SEQ", "UPDATE_RULE", "DELETE_RULE"] {
        sql.push_str(&format!("CAST(NULL AS SMALLINT) AS \"{c}\", "));
    }
    sql.push_str(
        "CAST(NULL AS TEXT) AS \"FK_NAME\", CAST(NULL AS TEXT) AS \"PK_NAME\", \
         CAST(NULL AS SMALLINT) AS \"DEFERRABILITY\" WHERE false",
    );
    keep_parameters(text, &mut sql);
    Some(sql)
}

/// Whether `text` is one SELECT statement, as the JDBC driver prepares its metadata
/// queries (a change that merely quotes their text is never taken for one).
fn one_select(text: &str) -> bool {
    let t = text.trim_start();
    t.get(..6).is_some_and(|w| w.eq_ignore_ascii_case("select"))
        && !text.trim_end().trim_end_matches(';').contains(';')
}

/// The driver's schema and table filters (`n.nspname = ...`, `ct.relname = ...`, a bound
/// parameter or a literal) as filters of `key_column_usage`, appended to `sql`.
fn push_filters(text: &str, sql: &mut String) {
    let filter = |column: &str| {
        let pattern = format!(r"{} = (E?'(?:[^']|'')*'|\$\d+)", regex::escape(column));
        let re = regex::Regex::new(&pattern).ok()?;
        Some(re.captures(text)?.get(1)?.as_str().to_string())
    };
    if let Some(schema) = filter("n.nspname") {
        sql.push_str(&format!(" AND table_schema = {schema}"));
    }
    if let Some(table) = filter("ct.relname") {
        sql.push_str(&format!(" AND table_name = {table}"));
    }
}

/// SQLAlchemy's PostgreSQL dialect's primary-key and unique-constraint reflection (one
/// query for both, the constraint type bound): `(conrelid, cols, conname, description,
/// indnkeyatts, indnullsnotdistinct)` per constraint of the tables whose oids it binds,
/// answered from `key_column_usage` (a table's one constraint is its primary key).
/// `None`: not that query.
fn sqlalchemy_constraints(text: &str) -> Option<String> {
    if !one_select(text)
        || !text.contains("array_agg(CAST(attr.attname AS TEXT) ORDER BY attr.ord) AS cols")
    {
        return None;
    }
    let kind = capture(
        text,
        r"pg_catalog\.pg_constraint\.contype = (\$\d+|'(?:[^']|'')*')",
    )?;
    let oids = capture(text, r"pg_catalog\.pg_constraint\.conrelid IN \(([^)]*)\)")?;
    let mut sql = format!(
        "SELECT c.oid AS conrelid, array_agg(k.column_name ORDER BY k.ordinal_position) AS cols, \
         k.constraint_name AS conname, CAST(NULL AS TEXT) AS description, \
         CAST(count(*) AS SMALLINT) AS indnkeyatts, false AS indnullsnotdistinct \
         FROM information_schema.key_column_usage k \
         JOIN pg_catalog.pg_namespace n ON n.nspname = k.table_schema \
         JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = k.table_name \
         WHERE CAST({kind} AS TEXT) = 'p' AND c.oid IN ({oids})"
    );
    keep_parameters(text, &mut sql);
    sql.push_str(" GROUP BY c.oid, k.constraint_name ORDER BY 1, 3");
    Some(sql)
}

/// SQLAlchemy's PostgreSQL dialect's index reflection, which lists the indexes other than
/// the primary key's: Strata's tables have no other, so no rows, in the dialect's columns.
/// `None`: not that query.
fn sqlalchemy_indexes(text: &str) -> Option<String> {
    if !one_select(text)
        || !text.contains("idx_cols.elements_opdefault")
        || !text.contains("NOT pg_catalog.pg_index.indisprimary")
    {
        return None;
    }
    let mut sql = String::from(
        "SELECT CAST(NULL AS INTEGER) AS indrelid, CAST(NULL AS TEXT) AS relname, \
         false AS indisunique, false AS has_constraint, CAST(NULL AS TEXT) AS indoption, \
         CAST(NULL AS TEXT) AS reloptions, CAST(NULL AS TEXT) AS amname, \
         CAST(NULL AS TEXT) AS filter_definition, CAST(NULL AS SMALLINT) AS indnkeyatts, \
         false AS indnullsnotdistinct, CAST(NULL AS TEXT) AS elements, \
         CAST(NULL AS BOOLEAN) AS elements_is_expr, CAST(NULL AS TEXT) AS elements_opclass, \
         CAST(NULL AS BOOLEAN) AS elements_opdefault WHERE false",
    );
    keep_parameters(text, &mut sql);
    Some(sql)
}

/// The first group of `pattern`'s first match in `text`.
fn capture(text: &str, pattern: &str) -> Option<String> {
    let re = regex::Regex::new(pattern).ok()?;
    Some(re.captures(text)?.get(1)?.as_str().to_string())
}

/// Appends to `sql` (ending in its WHERE clause) a condition that holds whatever the value
/// for each parameter of `original` that `sql` does not use, so that the statement keeps
/// the parameters the client binds.
fn keep_parameters(original: &str, sql: &mut String) {
    let Ok(re) = regex::Regex::new(r"\$(\d+)") else {
        return;
    };
    let numbers = |text: &str| -> std::collections::BTreeSet<usize> {
        re.captures_iter(text)
            .filter_map(|c| c.get(1)?.as_str().parse().ok())
            .collect()
    };
    let used = numbers(sql);
    for i in numbers(original).difference(&used) {
        sql.push_str(&format!(" AND (CAST(${i} AS TEXT) IS NULL OR true)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jdbc_primary_keys_query_reads_key_column_usage() {
        // As pgjdbc 42.7 builds it for getPrimaryKeys(null, "sales", "it's").
        let jdbc = "SELECT result.TABLE_CAT, result.TABLE_SCHEM, result.TABLE_NAME, result.COLUMN_NAME, result.KEY_SEQ, result.PK_NAME FROM (SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME,   information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid)   JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true  AND n.nspname = E'sales' AND ct.relname = E'it''s' AND i.indisprimary  ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq";
        let sql = jdbc_primary_keys(jdbc).expect("recognized");
        assert!(
            sql.contains("FROM information_schema.key_column_usage"),
            "{sql}"
        );
        assert!(
            sql.contains("AND table_schema = E'sales' AND table_name = E'it''s'"),
            "{sql}"
        );
        assert!(rewrite(jdbc).contains("key_column_usage"));
        assert_eq!(jdbc_primary_keys("SELECT 1"), None);
        // As pgjdbc 42.7.14 prepares it, the filters bound.
        let jdbc = "SELECT        result.TABLE_CAT AS \"TABLE_CAT\",        result.TABLE_SCHEM AS \"TABLE_SCHEM\",        result.TABLE_NAME AS \"TABLE_NAME\",        result.COLUMN_NAME AS \"COLUMN_NAME\",        result.KEY_SEQ AS \"KEY_SEQ\",        result.PK_NAME AS \"PK_NAME\"FROM      (SELECT current_database() AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(con.conkey)).n AS KEY_SEQ, con.conname AS PK_NAME,   information_schema._pg_expandarray(con.conkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_constraint con   JOIN pg_catalog.pg_class ct ON (con.conrelid = ct.oid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_attribute a ON (a.attrelid = ct.oid) WHERE con.contype = 'p'  AND n.nspname = $1 AND ct.relname = $2 ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq";
        let sql = jdbc_primary_keys(jdbc).expect("recognized");
        assert!(
            sql.contains("AND table_schema = $1 AND table_name = $2"),
            "{sql}"
        );
    }

    #[test]
    fn the_jdbc_foreign_key_query_answers_nothing_with_its_parameters() {
        let jdbc = "SELECT current_database() AS \"PKTABLE_CAT\", pkn.nspname AS \"PKTABLE_SCHEM\", fkn.nspname AS \"FKTABLE_SCHEM\" FROM pg_catalog.pg_namespace pkn WHERE true AND fkn.nspname = $1 AND fkc.relname = $2 ORDER BY 1";
        let sql = jdbc_foreign_keys(jdbc).expect("recognized");
        assert!(sql.contains("WHERE false"), "{sql}");
        assert!(
            sql.ends_with(
                "AND (CAST($1 AS TEXT) IS NULL OR true) AND (CAST($2 AS TEXT) IS NULL OR true)"
            ),
            "{sql}"
        );
        assert_eq!(jdbc_foreign_keys("SELECT 1"), None);
        // A statement that only quotes the text is not taken for it.
        let quoted = format!("INSERT INTO log VALUES ('{}')", jdbc.replace('\'', "''"));
        assert_eq!(jdbc_foreign_keys(&quoted), None);
        assert_eq!(jdbc_index_info("SELECT 1"), None);
    }
}
