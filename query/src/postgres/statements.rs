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
    Savepoint(Savepoint),
    /// `ROLLBACK TO [SAVEPOINT] name`: the transaction goes on, out of an error.
    RollbackToSavepoint(String),
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

/// `SAVEPOINT name` or `RELEASE [SAVEPOINT] name`, the name as PostgreSQL folds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Savepoint {
    /// `SAVEPOINT name`.
    Set(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
}

/// An identifier as PostgreSQL names it: folded to lower case unless quoted.
fn folded(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
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
    parse_declared(parser, text, &[])
}

/// [`parse`] for a statement the client prepares with the types of some of its
/// parameters declared (`declared[i]` for `$i+1`; `None`: left to the server), as
/// PostgreSQL's Parse message does.
pub fn parse_declared(
    parser: &PostgresCompatibilityParser,
    text: &str,
    declared: &[Option<pgwire::api::Type>],
) -> Result<Vec<Command>, QueryError> {
    let text = super::client_queries::rewrite(text);
    let text = match scalar_subqueries(&text) {
        Some(rewritten) => std::borrow::Cow::Owned(rewritten),
        None => text,
    };
    let statements = parser
        .parse(&text)
        .map_err(|e| QueryError::new(QueryErrorKind::Invalid, format!("SQL syntax error: {e}")))?;
    Ok(statements
        .into_iter()
        .map(|mut s| {
            like_escapes(&mut s);
            array_subqueries(&mut s);
            duplicate_items(&mut s);
            declared_arguments(&mut s, declared);
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

/// Scalar subqueries as PostgreSQL runs them, rewritten before `datafusion-pg-catalog`'s
/// parser sees the text (`None`: nothing to rewrite, or text it alone can parse).
///
/// That parser replaces a correlated subquery that is a whole select item with NULL, and
/// limits an uncorrelated one to its first row: a user's
/// `SELECT t.id, (SELECT max(n) FROM l WHERE l.k = t.k) FROM t` answered NULLs, and
/// `(SELECT n FROM l)` over two rows answered one of them, where PostgreSQL fails.
/// Here every scalar subquery that does not aggregate has its one expression wrapped in
/// the aggregate that gives PostgreSQL's meaning (the only row's value, NULL for none,
/// SQLSTATE 21000 for more: see [`crate::scalar_subquery`]), which also lets DataFusion
/// plan it correlated: `(SELECT pg_scalar_subquery(e) FROM ... WHERE ...)`. A subquery
/// that is a whole select item is then parenthesized once more, which that parser leaves
/// alone, so DataFusion plans it or says why it cannot; except in statements that read the
/// catalog (`pg_catalog`, `information_schema`), where clients such as `psql` ask for
/// details Strata does not keep (a column's collation) through correlations DataFusion
/// cannot plan, and a NULL is the answer they can use. Subqueries that aggregate, group,
/// are DISTINCT, ordered, limited or set operations keep their expression.
fn scalar_subqueries(text: &str) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{
        Expr, Query, SelectItem, SetExpr, Value, VisitMut, VisitorMut,
    };
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    /// Parenthesizes the subqueries that are whole select items.
    struct Items(bool);
    impl VisitorMut for Items {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> std::ops::ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } =
                        item
                        && matches!(e, Expr::Subquery(_))
                    {
                        let subquery = std::mem::replace(e, Expr::value(Value::Null));
                        *e = Expr::Nested(Box::new(subquery));
                        self.0 = true;
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }

    // Only a text with a select inside another can have a scalar subquery.
    let lower = text.to_ascii_lowercase();
    if lower.matches("select").count() < 2 {
        return None;
    }
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, text).ok()?;
    let mut changed = false;
    for statement in &mut statements {
        changed |= crate::scalar_subquery::one_row(statement);
        if !reads_catalog(statement) {
            let mut items = Items(false);
            let _ = statement.visit(&mut items);
            changed |= items.0;
        }
    }
    changed.then(|| crate::service::sql_text(&statements))
}

/// Names the repeats of an unnamed select item (`SELECT NULL AS a, NULL, NULL`, as the JDBC
/// driver's `getProcedures` writes its reserved columns): PostgreSQL names each
/// `?column?` and allows the same name twice, DataFusion refuses two items of one name.
/// The second and later get `?column?2`, `?column?3`, ... (positions in the select list).
fn duplicate_items(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        Ident, Query, SelectItem, SetExpr, VisitMut, VisitorMut,
    };
    struct Items;
    impl VisitorMut for Items {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> std::ops::ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                let mut seen = std::collections::HashSet::new();
                for (i, item) in select.projection.iter_mut().enumerate() {
                    let SelectItem::UnnamedExpr(e) = item else {
                        continue;
                    };
                    if !seen.insert(e.to_string()) {
                        let expr = e.clone();
                        *item = SelectItem::ExprWithAlias {
                            expr,
                            alias: Ident::with_quote('"', format!("?column?{}", i + 1)),
                        };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Items);
}

/// Whether `statement` reads a table of `pg_catalog` or `information_schema` (by its
/// qualified name, or a `pg_` name PostgreSQL finds on its search path).
fn reads_catalog(statement: &Statement) -> bool {
    use datafusion::sql::sqlparser::ast::visit_relations;
    visit_relations(statement, |name| {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| p.to_string().to_ascii_lowercase())
            .collect();
        let catalog = match parts.as_slice() {
            [table] => table.starts_with("pg_"),
            [schema, ..] => schema == "pg_catalog" || schema == "information_schema",
            [] => false,
        };
        if catalog {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// Gives a parameter passed straight to a function (`pg_get_constraintdef(oid, $2)`) the
/// type the client declared for it in its Parse, as PostgreSQL does:
/// `pg_get_constraintdef(oid, CAST($2 AS BOOLEAN))`. DataFusion cannot infer a
/// parameter's type from a function's arguments and takes it as text, which a function
/// of another type refuses. Only booleans and numbers are given so (their text reads back
/// exactly); parameters elsewhere are typed by where they stand, as before.
fn declared_arguments(statement: &mut Statement, declared: &[Option<pgwire::api::Type>]) {
    use datafusion::sql::sqlparser::ast::{
        CastKind, DataType as SqlType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
        Value, visit_expressions_mut,
    };
    use pgwire::api::Type;
    if declared.iter().all(Option::is_none) {
        return;
    }
    let sql_type = |n: &str| -> Option<SqlType> {
        let i = n.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)?;
        match declared.get(i)?.as_ref()? {
            t if *t == Type::BOOL => Some(SqlType::Boolean),
            t if *t == Type::INT2 => Some(SqlType::SmallInt(None)),
            t if *t == Type::INT4 => Some(SqlType::Integer(None)),
            t if *t == Type::INT8 => Some(SqlType::BigInt(None)),
            t if *t == Type::FLOAT4 => Some(SqlType::Real),
            t if *t == Type::FLOAT8 => Some(SqlType::DoublePrecision),
            _ => None,
        }
    };
    let _ = visit_expressions_mut(statement, |expr| {
        let Expr::Function(f) = expr else {
            return std::ops::ControlFlow::<()>::Continue(());
        };
        let FunctionArguments::List(list) = &mut f.args else {
            return std::ops::ControlFlow::Continue(());
        };
        for arg in &mut list.args {
            let (FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
            | FunctionArg::Named {
                arg: FunctionArgExpr::Expr(e),
                ..
            }) = arg
            else {
                continue;
            };
            let Expr::Value(v) = e else { continue };
            let Value::Placeholder(name) = &v.value else {
                continue;
            };
            if let Some(data_type) = sql_type(name) {
                let placeholder = std::mem::replace(e, Expr::value(Value::Null));
                *e = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(placeholder),
                    data_type,
                    array: false,
                    format: None,
                };
            }
        }
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
            savepoint: Some(name),
            ..
        } => return Command::RollbackToSavepoint(folded(name)),
        Statement::Rollback { .. } => return Command::Rollback,
        Statement::Savepoint { name } => return Command::Savepoint(Savepoint::Set(folded(name))),
        Statement::ReleaseSavepoint { name } => {
            return Command::Savepoint(Savepoint::Release(folded(name)));
        }
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
            (
                "SAVEPOINT \"_pg3_1\"",
                Command::Savepoint(Savepoint::Set("_pg3_1".into())),
            ),
            (
                "RELEASE SAVEPOINT SA_1",
                Command::Savepoint(Savepoint::Release("sa_1".into())),
            ),
            (
                "RELEASE sa_1",
                Command::Savepoint(Savepoint::Release("sa_1".into())),
            ),
            (
                "ROLLBACK TO SAVEPOINT sa_1",
                Command::RollbackToSavepoint("sa_1".into()),
            ),
            (
                "ROLLBACK TO sa_1",
                Command::RollbackToSavepoint("sa_1".into()),
            ),
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
    fn scalar_subqueries_that_do_not_aggregate_answer_one_row_each() {
        let text = |sql: &str| match one(sql) {
            Command::Sql(s) => s.text,
            other => panic!("{other:?}"),
        };
        let correlated = text(
            "SELECT (SELECT l.n FROM lines l WHERE l.region = t.name) AS n, (SELECT max(n) FROM lines) FROM ticks t",
        );
        assert!(
            correlated.contains(
                "((SELECT pg_scalar_subquery(l.n) FROM lines l WHERE l.region = t.name)) AS n"
            ),
            "{correlated}"
        );
        // Aggregated already: kept, and not limited to its first row.
        assert!(
            correlated.contains("((SELECT max(n) FROM lines))"),
            "{correlated}"
        );
        // In a catalog query, the parser's NULL for a whole select item is kept.
        let catalog = text(
            "SELECT a.attname, (SELECT c.collname FROM pg_catalog.pg_collation c WHERE c.oid = a.attcollation) FROM pg_catalog.pg_attribute a",
        );
        assert!(
            catalog.starts_with("SELECT a.attname, NULL FROM"),
            "{catalog}"
        );
        for kept in [
            "SELECT (SELECT n FROM lines ORDER BY n LIMIT 1)",
            "SELECT (SELECT DISTINCT n FROM lines)",
            "SELECT (SELECT n FROM lines GROUP BY n)",
            "SELECT (SELECT n FROM a UNION SELECT n FROM b)",
            "SELECT (SELECT row_number() OVER () FROM lines)",
            "SELECT (SELECT count(*) + 1 FROM lines)",
        ] {
            assert!(!text(kept).contains("pg_scalar_subquery"), "{kept}");
        }
    }

    #[test]
    fn repeated_unnamed_items_are_named_apart() {
        let Command::Sql(s) = one("SELECT NULL AS a, NULL, NULL, 1, x FROM t") else {
            panic!("not SQL")
        };
        assert_eq!(
            s.text,
            "SELECT NULL AS a, NULL, NULL AS \"?column?3\", 1, x FROM t"
        );
    }

    #[test]
    fn several_statements_split() {
        let parser = PostgresCompatibilityParser::new();
        let all = parse(&parser, "BEGIN; SELECT 1; COMMIT").expect("parses");
        assert_eq!(all.len(), 3);
        assert!(parse(&parser, "SELEC 1").is_err());
    }
}
