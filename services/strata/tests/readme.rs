//! The README's first commands, pasted as a new user would: every `curl` and `psql` line of
//! its "Two commands" section runs, in order, against a fresh `strata serve`, and none
//! answers an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

/// The shell commands of the README's first section, continuation lines joined.
fn readme_commands() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("## Two commands")
        .expect("a 'Two commands' section");
    let rest = &readme[start + 3..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut commands = Vec::new();
    let mut pending = String::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.trim_end();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        if command.starts_with("curl ") || command.starts_with("psql ") {
            commands.push(command);
        }
    }
    commands
}

#[test]
fn every_readme_command_works_when_pasted() {
    let commands = readme_commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let psql = std::env::var("STRATA_CLIENT_PSQL").ok();
    assert!(
        psql.is_some() || std::env::var("STRATA_REQUIRE_CLIENTS").as_deref() != Ok("1"),
        "STRATA_CLIENT_PSQL is not set: run `eval \"$(bash ci/clients.sh)\"`"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path());
    let pg_port = server.postgres.rsplit(':').next().unwrap().to_string();
    let mut outputs = Vec::new();
    for command in &commands {
        if command.starts_with("psql ") && psql.is_none() {
            eprintln!("skipped (no STRATA_CLIENT_PSQL): {command}");
            continue;
        }
        let command = command
            .replace("localhost:8080", &server.http)
            .replace("-p 5433", &format!("-p {pg_port}"));
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run sh");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}\n{stdout}\n{stderr}");
        assert!(
            !stdout.contains("\"error\"") && !stderr.contains("ERROR"),
            "{command}\n{stdout}\n{stderr}"
        );
        outputs.push((command, stdout));
    }
    let answer = |needle: &str| {
        outputs
            .iter()
            .find(|(c, _)| c.contains(needle))
            .map(|(_, out)| out.clone())
            .unwrap_or_else(|| panic!("no README command with {needle}"))
    };
    // What the section says the commands do.
    let rows = answer("SELECT * FROM players ORDER BY id\"");
    assert!(
        rows.contains(r#"{"id":1,"name":"ada","score":9.5}"#)
            && rows.contains(r#"{"id":2,"name":"grace","score":9.75}"#),
        "{rows}"
    );
    let got = answer("rows/get?key=3");
    assert!(got.contains("7.5") && got.contains("edsger"), "{got}");
    // The delete took effect.
    let (status, gone) =
        common::request(&server.http, "GET", "/v1/tables/players/rows/get?key=3", "");
    assert!(status == 404 || !gone.contains("edsger"), "{status} {gone}");

    // The query node of the README's SQL section, over the bucket `strata serve` writes,
    // answers its `curl` line with every acknowledged write.
    let readme = include_str!("../../../README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("curl ") && l.contains(":8090/sql"))
        .expect("the README's query-node curl line");
    assert!(
        readme.contains("query --dir ./query-node --set store.dir=./strata-data/bucket"),
        "the README's query node reads another bucket than `strata serve --dir ./strata-data` writes"
    );
    let query_dir = tempfile::tempdir().unwrap();
    let bucket = format!("store.dir={}", dir.path().join("bucket").display());
    let query = common::start_role("query", query_dir.path(), &["--set", &bucket]);
    let out = Command::new("sh")
        .arg("-c")
        .arg(line.replace("127.0.0.1:8090", &query.http))
        .output()
        .expect("run sh");
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}\n{csv}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines,
        ["name,score", "grace,9.75", "ada,9.5"],
        "{line}\n{csv}"
    );
}
