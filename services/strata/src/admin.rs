//! `strata admin`: the operator's view of a running ingest node (`strata serve` or `strata
//! ingest`) over its HTTP admin endpoints (`/v1/admin/...`, admin scope): tables, shards
//! with their writer epoch (the fencing token a new owner bumps), levels and backlog,
//! manifest versions, snapshots, compaction jobs with their leases, and garbage collection
//! (with a dry run).

use serde_json::Value as Json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What to show or do.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AdminCommand {
    /// Lists the tables the key may read.
    Tables,
    /// A table's shards: key range, writer epoch, manifest version, sequence numbers,
    /// NVMe levels, S3 levels per column group, and write / compaction backlog.
    Shards {
        /// The table.
        table: String,
    },
    /// A table's manifest versions in the bucket (newest last) with their age.
    Manifests {
        /// The table.
        table: String,
    },
    /// Snapshots holding old versions: this node's own and durable pins of readers in
    /// other processes (query services), with their expiry.
    Snapshots {
        /// The table.
        table: String,
    },
    /// S3 compaction jobs in the bucket: state (waiting, running, lease_expired, done), the
    /// worker holding the lease and when it expires.
    Jobs,
    /// Garbage collection of a table's unreferenced objects: what it would delete with
    /// --dry-run (nothing is deleted), else runs it and reports what it deleted.
    Gc {
        /// The table.
        table: String,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Calls one admin endpoint; the JSON answer or the server's error message.
async fn call(
    http: &str,
    key: Option<&str>,
    ca: Option<&std::path::Path>,
    method: reqwest::Method,
    path: &str,
) -> Result<Json, BoxError> {
    let base = if http.contains("://") {
        http.to_string()
    } else {
        format!("http://{http}")
    };
    let mut client = reqwest::Client::builder();
    if let Some(path) = ca {
        let pem = std::fs::read(path)
            .map_err(|e| format!("reading --ca-cert {}: {e}", path.display()))?;
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
    }
    let mut req = client.build()?.request(method, format!("{base}{path}"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("calling {base}: {e}"))?;
    let status = resp.status();
    let body: Json = resp
        .json()
        .await
        .map_err(|e| format!("{base}{path}: not a JSON answer ({status}): {e}"))?;
    if !status.is_success() {
        let msg = body["error"]["message"].as_str().unwrap_or("unknown error");
        let code = body["error"]["code"].as_str().unwrap_or("error");
        return Err(format!("{code}: {msg}").into());
    }
    Ok(body)
}

fn enc(table: &str) -> String {
    table
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn u(v: &Json) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn ms(v: &Json) -> String {
    let n = v.as_i64().unwrap_or(0);
    if n.abs() >= 60_000 {
        format!("{:.1} min", n as f64 / 60_000.0)
    } else {
        format!("{:.1} s", n as f64 / 1000.0)
    }
}

/// Renders an answer for people.
fn render(cmd: &AdminCommand, v: &Json) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let shards = || v["shards"].as_array().cloned().unwrap_or_default();
    match cmd {
        AdminCommand::Tables => {
            for t in v["tables"].as_array().into_iter().flatten() {
                line(t.as_str().unwrap_or_default().to_string());
            }
        }
        AdminCommand::Shards { table } => {
            for s in shards() {
                line(format!(
                    "{table} shard {}: keys [{}, {}) writer epoch {} manifest v{} last seq {} flushed to {}",
                    s["shard"].as_str().unwrap_or("?"),
                    s["key_start"].as_str().unwrap_or(""),
                    s["key_end"].as_str().unwrap_or("end"),
                    u(&s["writer_epoch"]),
                    u(&s["manifest_version"]),
                    u(&s["last_seq"]),
                    u(&s["seq_flushed"]),
                ));
                for l in s["nvme_levels"].as_array().into_iter().flatten() {
                    line(format!(
                        "  NVMe L{}: {} SSTs, {}, {} entries",
                        u(&l["level"]),
                        u(&l["ssts"]),
                        bytes(u(&l["bytes"])),
                        u(&l["entries"])
                    ));
                }
                for l in s["s3_levels"].as_array().into_iter().flatten() {
                    for g in l["groups"].as_array().into_iter().flatten() {
                        line(format!(
                            "  S3 L{} group {} {}: {} files, {} rows, {}",
                            u(&l["level"]),
                            u(&g["group"]),
                            g["columns"],
                            u(&g["files"]),
                            u(&g["rows"]),
                            bytes(u(&g["bytes"]))
                        ));
                    }
                }
                let b = &s["backlog"];
                line(format!(
                    "  backlog: {} frozen memtables, {} sorted runs, {} S3 jobs outstanding, {} write stalls",
                    u(&b["memtables_frozen"]),
                    u(&b["sorted_runs"]),
                    u(&b["s3_jobs_outstanding"]),
                    u(&b["stalls"])
                ));
            }
        }
        AdminCommand::Manifests { table } => {
            for s in shards() {
                line(format!(
                    "{table} shard {} (current v{}):",
                    s["shard"].as_str().unwrap_or("?"),
                    u(&s["manifest_version"])
                ));
                for m in s["manifest_versions"].as_array().into_iter().flatten() {
                    line(format!(
                        "  v{}  {}  {} old",
                        u(&m["version"]),
                        bytes(u(&m["bytes"])),
                        ms(&m["age_ms"])
                    ));
                }
            }
        }
        AdminCommand::Snapshots { table } => {
            for s in shards() {
                let snaps = &s["snapshots"];
                line(format!(
                    "{table} shard {}: {} snapshots in this process at seqs {}",
                    s["shard"].as_str().unwrap_or("?"),
                    snaps["in_process"].as_array().map_or(0, Vec::len),
                    snaps["in_process"]
                ));
                for p in snaps["durable_pins"].as_array().into_iter().flatten() {
                    line(format!(
                        "  pin {} on manifest v{} ({})",
                        p["reader"].as_str().unwrap_or("?"),
                        u(&p["manifest_version"]),
                        if p["live"].as_bool() == Some(true) {
                            "live"
                        } else {
                            "lapsed"
                        }
                    ));
                }
            }
        }
        AdminCommand::Jobs => {
            let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
            if jobs.is_empty() {
                line("no compaction jobs".into());
            }
            for j in jobs {
                let lease = match j["worker"].as_str() {
                    Some(w) => format!(
                        " worker {w} attempt {} lease expires in {}",
                        u(&j["attempt"]),
                        ms(&j["lease_expires_in_ms"])
                    ),
                    None => String::new(),
                };
                line(format!(
                    "{} {} table {} -> S3 L{} {} input, {} old{lease}",
                    j["id"].as_str().unwrap_or("?"),
                    j["state"].as_str().unwrap_or("?"),
                    j["table"].as_str().unwrap_or("?"),
                    u(&j["target_level"]),
                    bytes(u(&j["input_bytes"])),
                    ms(&j["age_ms"]),
                ));
            }
        }
        AdminCommand::Gc { table, dry_run } => {
            for s in shards() {
                let count = |k: &str| s[k].as_array().map_or_else(|| u(&s[k]), |a| a.len() as u64);
                line(format!(
                    "{table} shard {}: {} {} SSTs, {} WAL segments, {} Parquet files, {} jobs, {} manifest versions",
                    s["shard"].as_str().unwrap_or("?"),
                    if *dry_run { "would delete" } else { "deleted" },
                    count("ssts"),
                    count("wal_segments"),
                    count("parquet"),
                    count("jobs"),
                    count("manifests"),
                ));
                if *dry_run {
                    for k in ["ssts", "wal_segments", "parquet", "jobs", "manifests"] {
                        for p in s[k].as_array().into_iter().flatten() {
                            line(format!(
                                "  {k}: {}",
                                p.as_str().map_or(p.to_string(), String::from)
                            ));
                        }
                    }
                    line(format!("  manifests kept: {}", s["manifests_retained"]));
                }
            }
        }
    }
    out
}

/// `strata admin`.
pub async fn admin(
    http: &str,
    key: Option<&str>,
    ca: Option<&std::path::Path>,
    json: bool,
    cmd: AdminCommand,
) -> Result<(), BoxError> {
    use reqwest::Method;
    let (method, path) = match &cmd {
        AdminCommand::Tables => (Method::GET, "/v1/tables".to_string()),
        AdminCommand::Shards { table }
        | AdminCommand::Manifests { table }
        | AdminCommand::Snapshots { table } => {
            (Method::GET, format!("/v1/admin/tables/{}", enc(table)))
        }
        AdminCommand::Jobs => (Method::GET, "/v1/admin/jobs".to_string()),
        AdminCommand::Gc { table, dry_run } => (
            Method::POST,
            format!("/v1/admin/tables/{}/gc?dry_run={dry_run}", enc(table)),
        ),
    };
    let v = call(http, key, ca, method, &path).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(&cmd, &v));
    }
    Ok(())
}
