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
}
