//! What a statement from a PostgreSQL client is, before anything runs: a session command
//! the connection answers itself, or SQL for the query service (rewritten from
//! PostgreSQL's dialect by `datafusion-pg-catalog`'s compatibility parser: `OPERATOR(pg_catalog.~)`,
//! `COLLATE`, `::regclass` and the other forms `psql` and drivers send).

use datafusion::sql::sqlparser::ast::Statement;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::error::{QueryError, QueryErrorKind};

/// One statement, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SAVEPOINT name` / `RELEASE [SAVEPOINT] name` (their command tag), as drivers
    /// nest transactions (psycopg's `conn.transaction()` inside one, SQLAlchemy's
    /// `begin_nested`). Nothing inside a transaction changes data, so a savepoint has
    /// nothing to keep.
    Savepoint(&'static str),
    /// `ROLLBACK TO [SAVEPOINT] name`: the transaction goes on, out of an error.
    RollbackToSavepoint,
    /// `SET name = value` (also `TO`, `SESSION`, `LOCAL`, `SET TIME ZONE`): kept with the
    /// connection, where `SHOW` and the result encoding (`DateStyle`,
    /// `extra_float_digits`, `bytea_output`) read it.
    Set {
        /// The parameter, lower case.
        name: String,
        /// Its value, unquoted.
        value: String,
    },
    /// `SHOW name`.
    Show(String),
    /// A command accepted with nothing to do (`DISCARD ALL`, `DEALLOCATE`, `SET` forms
    /// without a value): its command tag.
    Done(&'static str),
    /// SQL for the query service.
    Sql(Sql),
}

/// A SQL statement for the query service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sql {
    /// The statement as DataFusion reads it.
    pub text: String,
    /// What it does, for its command tag.
    pub kind: Kind,
    /// Whether running it changes data or tables: its kind's, or an `EXPLAIN ANALYZE` of
    /// such a statement (which runs it).
    pub changes: bool,
}

/// What a SQL statement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Answers rows (SELECT, VALUES, EXPLAIN, SHOW TABLES, ...).
    Query,
    /// INSERT: tag `INSERT 0 <rows>`.
    Insert,
    /// UPDATE: tag `UPDATE <rows>`.
    Update,
    /// DELETE: tag `DELETE <rows>`.
    Delete,
    /// CREATE TABLE.
    CreateTable,
    /// DROP TABLE.
    DropTable,
}

impl Kind {
    /// Whether the statement changes data or tables (refused inside an explicit
    /// transaction: see the module doc of [`crate::postgres`]).
    pub fn changes(self) -> bool {
        !matches!(self, Kind::Query)
    }

    /// The command tag's word.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Query => "SELECT",
            Kind::Insert => "INSERT",
            Kind::Update => "UPDATE",
            Kind::Delete => "DELETE",
            Kind::CreateTable => "CREATE TABLE",
            Kind::DropTable => "DROP TABLE",
        }
    }
}

/// Splits and classifies a query string (one or more statements separated by `;`).
pub fn parse(parser: &PostgresCompatibilityParser, text: &str) -> Result<Vec<Command>, QueryError> {
    let jdbc = jdbc_primary_keys(text)
        .or_else(|| jdbc_index_info(text))
        .or_else(|| jdbc_foreign_keys(text));
    let mut text = match jdbc {
        Some(sql) => std::borrow::Cow::Owned(sql),
        None => std::borrow::Cow::Borrowed(text),
    };
    for (from, to) in CLIENT_FRAGMENTS {
        if text.contains(from) {
            text = std::borrow::Cow::Owned(text.replace(from, to));
        }
    }
    let statements = parser
        .parse(&text)
        .map_err(|e| QueryError::new(QueryErrorKind::Invalid, format!("SQL syntax error: {e}")))?;
    Ok(statements
        .into_iter()
        .map(|mut s| {
            like_escapes(&mut s);
            array_subqueries(&mut s);
            classify(s)
        })
        .collect())
}

/// Rewrites `LIKE pattern ESCAPE 'c'` with an escape character other than the backslash
/// (SQLAlchemy escapes with `/`), which DataFusion refuses, into the backslash form:
/// `LIKE pg_like_escape(pattern, 'c') ESCAPE '\'` (see
/// [`super::functions::like_escape`]), for literal and bound patterns alike.
fn like_escapes(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, Value, visit_expressions_mut};
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Like {
            pattern,
            escape_char: Some(escape),
            ..
        }
        | Expr::ILike {
            pattern,
            escape_char: Some(escape),
            ..
        } = expr
        {
            let given = match &escape.value {
                Value::SingleQuotedString(c) | Value::EscapedStringLiteral(c) => c.clone(),
                _ => return std::ops::ControlFlow::<()>::Continue(()),
            };
            if given == "\\" {
                return std::ops::ControlFlow::Continue(());
            }
            let inner = std::mem::replace(pattern.as_mut(), Expr::value(Value::Null));
            **pattern = call(
                super::functions::LIKE_ESCAPE,
                vec![inner, Expr::value(Value::SingleQuotedString(given))],
            );
            *escape = Value::SingleQuotedString("\\".to_string()).with_empty_span();
        }
        std::ops::ControlFlow::Continue(())
    });
}

/// Fragments of clients' catalog queries that read what Strata's `pg_catalog` does not
/// have, and what they read instead.
const CLIENT_FRAGMENTS: &[(&str, &str)] = &[
    // psql's `\d+`: a table's storage options (`pg_class.reloptions`, and its TOAST
    // table's). Strata's tables have none.
    (
        "pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ')",
        "''",
    ),
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
    // The statement keeps the parameters the driver binds.
    let params = regex::Regex::new(r"\$(\d+)").ok()?;
    let count = params
        .captures_iter(text)
        .filter_map(|c| c.get(1)?.as_str().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    for i in 1..=count {
        sql.push_str(&format!(" AND CAST(${i} AS TEXT) IS NULL"));
    }
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

/// The call `name(args...)`.
fn call(
    name: &str,
    args: Vec<datafusion::sql::sqlparser::ast::Expr>,
) -> datafusion::sql::sqlparser::ast::Expr {
    use datafusion::sql::sqlparser::ast::{
        Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
        Ident, ObjectName,
    };
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Rewrites PostgreSQL's array constructor over a subquery, `ARRAY(SELECT e FROM ...)`,
/// which DataFusion does not have, into the aggregate it means,
/// `(SELECT array_agg(e) FROM ...)` (a correlated one too: `psql`'s `\du` lists each role's
/// memberships so).
fn array_subqueries(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        Expr, FunctionArguments, GroupByExpr, SelectItem, SetExpr, Value, visit_expressions_mut,
    };
    let _ = visit_expressions_mut(statement, |expr| {
        let Expr::Function(f) = expr else {
            return std::ops::ControlFlow::<()>::Continue(());
        };
        let FunctionArguments::Subquery(query) = &f.args else {
            return std::ops::ControlFlow::Continue(());
        };
        if !f.name.to_string().eq_ignore_ascii_case("array")
            || query.order_by.is_some()
            || query.limit_clause.is_some()
            || query.with.is_some()
        {
            return std::ops::ControlFlow::Continue(());
        }
        let mut query = query.clone();
        let SetExpr::Select(select) = query.body.as_mut() else {
            return std::ops::ControlFlow::Continue(());
        };
        // DISTINCT, grouping and HAVING do not carry over into one aggregate: left as they
        // are (and refused by DataFusion, as before).
        let grouped = match &select.group_by {
            GroupByExpr::Expressions(e, _) => !e.is_empty(),
            GroupByExpr::All(_) => true,
        };
        if select.distinct.is_some() || select.having.is_some() || grouped {
            return std::ops::ControlFlow::Continue(());
        }
        let [item] = select.projection.as_mut_slice() else {
            return std::ops::ControlFlow::Continue(());
        };
        let element = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => return std::ops::ControlFlow::Continue(()),
        };
        let inner = std::mem::replace(element, Expr::value(Value::Null));
        *item = SelectItem::UnnamedExpr(call("array_agg", vec![inner]));
        *expr = Expr::Subquery(query);
        std::ops::ControlFlow::Continue(())
    });
}

/// Refuses a query string in which a statement that changes data is followed by one that
/// could fail (a query or another change; `SET`, `COMMIT` and the like cannot), before any
/// of it runs.
///
/// PostgreSQL runs a query string of several statements as one transaction: when a later
/// statement fails, an earlier INSERT is undone. Strata runs each statement as its own
/// transaction and could not undo it, so such a string is refused (SQLSTATE 0A000) rather
/// than half applied. A change that is the string's last statement that could fail keeps
/// PostgreSQL's outcome: reads before it never need undoing, and if it fails it wrote
/// nothing.
pub fn one_transaction(commands: &[Command]) -> Result<(), QueryError> {
    let may_fail = |c: &Command| matches!(c, Command::Sql(_) | Command::Show(_));
    let first_change = commands.iter().position(|c| match c {
        Command::Sql(s) => s.changes,
        _ => false,
    });
    let Some(at) = first_change else {
        return Ok(());
    };
    let Some(Command::Sql(change)) = commands.get(at) else {
        return Ok(());
    };
    if !commands[at + 1..].iter().any(may_fail) {
        return Ok(());
    }
    let what = if change.kind.changes() {
        change.kind.tag()
    } else {
        "EXPLAIN ANALYZE"
    };
    Err(QueryError::new(
        QueryErrorKind::Invalid,
        format!(
            "{what} followed by other statements in one query string is not supported: PostgreSQL runs such a string as one transaction, while Strata runs each statement as its own and could not undo the {what} if a later statement failed. Send the statements one at a time"
        ),
    )
    .with_sqlstate("0A000"))
}

fn classify(statement: Statement) -> Command {
    match &statement {
        Statement::StartTransaction { .. } => return Command::Begin,
        Statement::Commit { .. } => return Command::Commit,
        Statement::Rollback {
            savepoint: Some(_), ..
        } => return Command::RollbackToSavepoint,
        Statement::Rollback { .. } => return Command::Rollback,
        Statement::Savepoint { .. } => return Command::Savepoint("SAVEPOINT"),
        Statement::ReleaseSavepoint { .. } => return Command::Savepoint("RELEASE"),
        Statement::Discard { .. } => return Command::Done("DISCARD ALL"),
        Statement::Deallocate { .. } => return Command::Done("DEALLOCATE"),
        Statement::Set { .. } => return set(&statement.to_string()),
        Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|i| i.value.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(" ");
            return Command::Show(name);
        }
        _ => {}
    }
    let kind = kind(&statement);
    let changes = match &statement {
        Statement::Explain {
            analyze: true,
            statement: inner,
            ..
        } => kind.changes() || kind_of_run(inner).changes(),
        _ => kind.changes(),
    };
    Command::Sql(Sql {
        text: statement.to_string(),
        kind,
        changes,
    })
}

fn kind(statement: &Statement) -> Kind {
    match statement {
        Statement::Insert { .. } => Kind::Insert,
        Statement::Update { .. } => Kind::Update,
        Statement::Delete { .. } => Kind::Delete,
        Statement::CreateTable { .. } => Kind::CreateTable,
        Statement::Drop { .. } => Kind::DropTable,
        _ => Kind::Query,
    }
}

/// What running `statement` does, through nested `EXPLAIN ANALYZE`s.
fn kind_of_run(statement: &Statement) -> Kind {
    match statement {
        Statement::Explain {
            analyze: true,
            statement: inner,
            ..
        } => kind_of_run(inner),
        other => kind(other),
    }
}

/// `SET [SESSION | LOCAL] name {= | TO} value`, `SET TIME ZONE value`.
fn set(text: &str) -> Command {
    let rest = text.trim();
    let rest = strip_word(rest, "SET").unwrap_or(rest);
    let rest = strip_word(rest, "SESSION")
        .or_else(|| strip_word(rest, "LOCAL"))
        .unwrap_or(rest);
    let (name, value) = if let Some(v) = strip_word(rest, "TIME ZONE") {
        ("timezone".to_string(), v)
    } else {
        // The name is the first word; `=` or `TO` follows (a value may hold either).
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let after = rest[end..].trim_start();
        let Some(v) = after.strip_prefix('=').or_else(|| strip_word(after, "TO")) else {
            return Command::Done("SET");
        };
        (rest[..end].to_ascii_lowercase(), v)
    };
    let value = value.trim();
    let value = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value)
        .to_string();
    Command::Set {
        name: name.trim_matches('"').to_string(),
        value,
    }
}

/// `text` after the leading words `word` (any case), if it starts with them.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    let rest = &text[word.len()..];
    (head.eq_ignore_ascii_case(word) && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| rest.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Command {
        let parser = PostgresCompatibilityParser::new();
        let mut all = parse(&parser, sql).expect("parses");
        assert_eq!(all.len(), 1, "{sql}");
        all.remove(0)
    }

    #[test]
    fn a_change_may_only_end_a_query_string() {
        let parser = PostgresCompatibilityParser::new();
        let check = |sql: &str| one_transaction(&parse(&parser, sql).expect("parses"));
        for ok in [
            "INSERT INTO t VALUES (1)",
            "SELECT 1; SELECT 2",
            "SELECT * FROM t; INSERT INTO t VALUES (1)",
            "SET application_name = 'x'; UPDATE t SET a = 1",
            "INSERT INTO t VALUES (1); COMMIT",
            "DELETE FROM t WHERE a = 1; SET extra_float_digits = 3; DISCARD ALL",
            "",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for refused in [
            "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
            "INSERT INTO t VALUES (1); SELECT 1/0",
            "CREATE TABLE t (a BIGINT PRIMARY KEY); INSERT INTO t VALUES (1)",
            "DELETE FROM t; SHOW DateStyle",
            "EXPLAIN ANALYZE INSERT INTO t VALUES (1); SELECT 1",
            "SELECT 1; UPDATE t SET a = 2; SELECT 2",
        ] {
            let e = check(refused).expect_err(refused);
            assert_eq!(e.sqlstate, Some("0A000"), "{refused}");
            assert!(e.message.contains("one at a time"), "{}", e.message);
        }
    }

    #[test]
    fn session_commands_are_answered_by_the_connection() {
        let set = |n: &str, v: &str| Command::Set {
            name: n.to_string(),
            value: v.to_string(),
        };
        let table: &[(&str, Command)] = &[
            ("BEGIN", Command::Begin),
            ("START TRANSACTION", Command::Begin),
            ("COMMIT", Command::Commit),
            ("ROLLBACK", Command::Rollback),
            ("SAVEPOINT \"_pg3_1\"", Command::Savepoint("SAVEPOINT")),
            ("RELEASE SAVEPOINT sa_1", Command::Savepoint("RELEASE")),
            ("RELEASE sa_1", Command::Savepoint("RELEASE")),
            ("ROLLBACK TO SAVEPOINT sa_1", Command::RollbackToSavepoint),
            ("ROLLBACK TO sa_1", Command::RollbackToSavepoint),
            ("SET extra_float_digits = 3", set("extra_float_digits", "3")),
            (
                "SET application_name = 'PostgreSQL JDBC Driver'",
                set("application_name", "PostgreSQL JDBC Driver"),
            ),
            ("SET DateStyle TO 'ISO'", set("datestyle", "ISO")),
            (
                "SET SESSION statement_timeout = 0",
                set("statement_timeout", "0"),
            ),
            ("SET TIME ZONE 'UTC'", set("timezone", "UTC")),
            (
                "SET application_name TO 'a=b'",
                set("application_name", "a=b"),
            ),
            ("SET search_path = 'x TO y'", set("search_path", "x TO y")),
            (
                "SHOW transaction_isolation",
                Command::Show("transaction_isolation".into()),
            ),
            (
                "SHOW TRANSACTION ISOLATION LEVEL",
                Command::Show("transaction isolation level".into()),
            ),
            ("DISCARD ALL", Command::Done("DISCARD ALL")),
        ];
        for (sql, want) in table {
            assert_eq!(&one(sql), want, "{sql}");
        }
    }

    #[test]
    fn sql_is_tagged_by_what_it_does() {
        let table = [
            ("SELECT 1", Kind::Query),
            ("EXPLAIN SELECT 1", Kind::Query),
            ("INSERT INTO t VALUES (1)", Kind::Insert),
            ("UPDATE t SET a = 1 WHERE k = 2", Kind::Update),
            ("DELETE FROM t WHERE k = 2", Kind::Delete),
            ("CREATE TABLE t (k BIGINT PRIMARY KEY)", Kind::CreateTable),
            ("DROP TABLE t", Kind::DropTable),
        ];
        for (sql, want) in table {
            match one(sql) {
                Command::Sql(s) => {
                    assert_eq!(s.kind, want, "{sql}");
                    assert_eq!(s.changes, want.changes(), "{sql}");
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
        // EXPLAIN ANALYZE runs its statement: rows for the client, a change for the
        // transaction rules. Plain EXPLAIN runs nothing.
        for (sql, changes) in [
            ("EXPLAIN ANALYZE INSERT INTO t VALUES (1)", true),
            ("EXPLAIN ANALYZE DELETE FROM t WHERE k = 2", true),
            ("EXPLAIN ANALYZE SELECT 1", false),
            ("EXPLAIN INSERT INTO t VALUES (1)", false),
        ] {
            match one(sql) {
                Command::Sql(s) => {
                    assert_eq!(s.kind, Kind::Query, "{sql}");
                    assert_eq!(s.changes, changes, "{sql}");
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    #[test]
    fn psql_catalog_forms_are_rewritten_for_datafusion() {
        let Command::Sql(s) = one(
            "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default",
        ) else {
            panic!("not SQL")
        };
        assert!(!s.text.contains("OPERATOR"), "{}", s.text);
        assert!(!s.text.contains("COLLATE"), "{}", s.text);
    }

    #[test]
    fn like_escapes_other_than_the_backslash_are_rewritten() {
        let Command::Sql(s) = one(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE $1::VARCHAR || '%' ESCAPE '/'",
        ) else {
            panic!("not SQL")
        };
        assert!(
            s.text.contains("pg_like_escape($1::VARCHAR || '%', '/')"),
            "{}",
            s.text
        );
        assert!(s.text.contains("ESCAPE '\\'"), "{}", s.text);
        let Command::Sql(s) = one("SELECT 1 WHERE 'a' LIKE 'a' ESCAPE '\\'") else {
            panic!("not SQL")
        };
        assert!(!s.text.contains("pg_like_escape"), "{}", s.text);
    }

    #[test]
    fn array_constructors_over_subqueries_become_aggregates() {
        let Command::Sql(s) = one(
            "SELECT r.rolname, ARRAY(SELECT b.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid) WHERE m.member = r.oid) AS memberof FROM pg_catalog.pg_roles r",
        ) else {
            panic!("not SQL")
        };
        assert!(
            s.text.contains("(SELECT array_agg(b.rolname) FROM"),
            "{}",
            s.text
        );
        let Command::Sql(s) = one(
            "SELECT c.relkind, pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ')\n, c.reltablespace FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)",
        ) else {
            panic!("not SQL")
        };
        assert!(
            s.text.contains("c.relkind, '', c.reltablespace"),
            "{}",
            s.text
        );
        // DISTINCT and grouping are left alone.
        let Command::Sql(s) = one("SELECT ARRAY(SELECT DISTINCT x FROM t)") else {
            panic!("not SQL")
        };
        assert!(!s.text.contains("array_agg"), "{}", s.text);
        let Command::Sql(s) = one("SELECT ARRAY(SELECT x FROM t GROUP BY x)") else {
            panic!("not SQL")
        };
        assert!(!s.text.contains("array_agg"), "{}", s.text);
        // An array literal is left alone.
        let Command::Sql(s) = one("SELECT ARRAY[1, 2]") else {
            panic!("not SQL")
        };
        assert!(!s.text.contains("array_agg"), "{}", s.text);
    }

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
        let Command::Sql(s) = one(jdbc) else {
            panic!("not SQL")
        };
        assert!(s.text.contains("key_column_usage"), "{}", s.text);
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
            sql.ends_with("AND CAST($1 AS TEXT) IS NULL AND CAST($2 AS TEXT) IS NULL"),
            "{sql}"
        );
        assert_eq!(jdbc_foreign_keys("SELECT 1"), None);
        // A statement that only quotes the text is not taken for it.
        let quoted = format!("INSERT INTO log VALUES ('{}')", jdbc.replace('\'', "''"));
        assert_eq!(jdbc_foreign_keys(&quoted), None);
        assert_eq!(jdbc_index_info("SELECT 1"), None);
    }

    #[test]
    fn several_statements_split() {
        let parser = PostgresCompatibilityParser::new();
        let all = parse(&parser, "BEGIN; SELECT 1; COMMIT").expect("parses");
        assert_eq!(all.len(), 3);
        assert!(parse(&parser, "SELEC 1").is_err());
    }
}
