//! `strata sql` against a running `strata serve`: one-shot statements in each output
//! format, a script on stdin, errors with a non-zero exit, and API keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::start;

fn strata_sql(flight: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["sql", "--flight", flight])
        .args(args)
        .env_remove("STRATA_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn sql_one_shot_and_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let f = s.flight.as_str();

    let out = strata_sql(
        f,
        &["CREATE TABLE kv (k BIGINT, v VARCHAR, PRIMARY KEY (k))"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("created table kv"));
    let out = strata_sql(f, &["INSERT INTO kv VALUES (1, 'one'), (2, 'two')"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let q = "SELECT k, v FROM kv ORDER BY k";
    let out = strata_sql(f, &["--format", "json", q], None);
    assert_eq!(
        text(&out.stdout).trim(),
        r#"[{"k":1,"v":"one"},{"k":2,"v":"two"}]"#
    );
    let out = strata_sql(f, &["--format", "csv", q], None);
    assert_eq!(text(&out.stdout), "k,v\n1,one\n2,two\n");
    let out = strata_sql(f, &[q], None);
    let table = text(&out.stdout);
    assert!(table.contains("| 2 | two |"), "{table}");

    // A script: statements across lines, each ending with ';'.
    let script = "INSERT INTO kv\n  VALUES (3, 'three');\nUPDATE kv SET v = 'TWO' WHERE k = 2;\nSELECT count(*) AS n,\n  max(v) AS m FROM kv;\n";
    let out = strata_sql(f, &["--format", "ndjson"], Some(script));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(r#"{"n":3,"m":"three"}"#), "{stdout}");

    // Errors: the server's message on stderr, a failing exit status; a script goes on
    // after a failed statement and still fails at the end.
    let out = strata_sql(f, &["SELECT * FROM nope"], None);
    assert!(!out.status.success());
    // The server's code and message, without the transport's wrapping.
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: not_found: ") && err.contains("nope"),
        "{err}"
    );
    assert!(!err.contains("Tonic") && !err.contains("status:"), "{err}");
    let out = strata_sql(f, &["--format", "csv"], Some("SELEC 1;\nSELECT 7 AS x;\n"));
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("x\n7\n"),
        "{}",
        text(&out.stdout)
    );
    let out = strata_sql(f, &[], Some("SELECT 1"));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing ';'"),
        "{}",
        text(&out.stderr)
    );

    // Nothing listening: a clear error.
    let out = strata_sql("127.0.0.1:1", &["SELECT 1"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("connecting to"),
        "{}",
        text(&out.stderr)
    );
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), `strata sql` edits lines
/// and keeps a history: the up arrow brings the last statement back, and the history file
/// holds it for the next session.
#[test]
fn interactive_sql_recalls_history_with_the_arrow_keys() {
    if Command::new("script").arg("--version").output().is_err() {
        assert!(
            std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
            "no `script` (util-linux) for a pseudo-terminal, and the test command requires it"
        );
        eprintln!("skipped: no `script` (util-linux) for a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = start(&dir.path().join("data"));
    let history = dir.path().join("history");
    let command = format!("{} sql --flight {}", env!("CARGO_BIN_EXE_strata"), s.flight);
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("STRATA_HISTORY", &history)
        .env("TERM", "xterm")
        .env_remove("STRATA_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // Typed as a person would: a statement, then the up arrow and Enter, then \q.
    for keys in ["SELECT 41 + 1 AS answer;\r", "\x1b[A\r", "\\q\r"] {
        std::thread::sleep(std::time::Duration::from_millis(700));
        input.write_all(keys.as_bytes()).unwrap();
        input.flush().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(700));
    drop(input);
    let out = child.wait_with_output().unwrap();
    let screen = text(&out.stdout);
    assert_eq!(screen.matches("| 42 ").count(), 2, "{screen}");
    let saved = std::fs::read_to_string(&history).unwrap();
    assert!(saved.contains("SELECT 41 + 1 AS answer;"), "{saved}");
}
