//! Real processes killed (issue 20, part 3): `strata serve` under concurrent HTTP writers,
//! SIGKILLed at random moments and started again on the same directory (every few times
//! with its NVMe directory deleted, as a replacement node would start); after every
//! restart each acknowledged batch must be there and every batch must be whole or absent.
//! The same for `strata ingest` on LocalStack S3 with faults injected under the retrying
//! layer (errors and lost responses).
//!
//! `STRATA_KILL_SEED` replays one run (the kill moments); `STRATA_KILL_CYCLES` sets the
//! kills (default 20 on the local directory, 8 on LocalStack).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, request, start_role, try_request_with};

const WRITERS: u64 = 4;
const BATCH: u64 = 8;

/// A small deterministic generator (xorshift), so a seed replays the kill moments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the writers know of each batch they sent.
#[derive(Default)]
struct Ledger {
    /// Answered 200: must survive every later kill.
    acked: Vec<u64>,
    /// Sent without an answer, or refused: may or may not be there, but whole if there.
    uncertain: Vec<u64>,
    /// Answers other than 200, by status (0: no answer), with the last message.
    failures: BTreeMap<u16, (u64, String)>,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn wait_ready(s: &Server) -> Duration {
    let t = Instant::now();
    loop {
        if let Ok((200, _)) = try_request_with(&s.http, "GET", "/ready", "text/plain", b"", &[]) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "not ready after 120 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends batch `b` (`BATCH` rows, keys `b * BATCH ..`) as one request.
fn send(http: &str, b: u64) -> Result<(u16, String), String> {
    let rows: String = (0..BATCH)
        .map(|i| {
            let k = b * BATCH + i;
            format!("{{\"k\": {k}, \"b\": {b}, \"v\": \"b{b}-i{i}\"}}\n")
        })
        .collect();
    try_request_with(
        http,
        "POST",
        "/v1/tables/kv/rows",
        "application/x-ndjson",
        rows.as_bytes(),
        &[],
    )
}

/// Notes what the answer to batch `b` says.
fn record(ledger: &Mutex<Ledger>, b: u64, r: Result<(u16, String), String>) {
    let mut l = ledger.lock().unwrap();
    match r {
        Ok((200, _)) => l.acked.push(b),
        other => {
            l.uncertain.push(b);
            let (status, text) = match other {
                Ok((s, body)) => (s, body),
                Err(e) => (0, e),
            };
            let f = l.failures.entry(status).or_default();
            f.0 += 1;
            f.1 = text;
        }
    }
}

/// Writes batches until `stop` or until the server is gone; batch ids are
/// `writer << 32 | n` from `first`. Returns the next n.
fn writer(
    http: String,
    w: u64,
    first: u64,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) -> u64 {
    let mut n = first;
    while !stop.load(Ordering::Relaxed) {
        let r = send(&http, (w << 32) | n);
        let gone = r.is_err();
        record(&ledger, (w << 32) | n, r);
        n += 1;
        if gone {
            // The server is gone: stop rather than spin on refused connections.
            break;
        }
    }
    n
}

/// Row counts per batch id, read over SQL.
fn batches(s: &Server) -> BTreeMap<u64, u64> {
    let (st, body) = request(
        &s.http,
        "POST",
        "/sql",
        r#"{"sql": "SELECT b, count(*) AS n, count(DISTINCT v) AS d FROM kv GROUP BY b"}"#,
    );
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut out = BTreeMap::new();
    for r in v.as_array().unwrap() {
        let b = r["b"].as_u64().unwrap();
        let n = r["n"].as_u64().unwrap();
        assert_eq!(r["d"].as_u64().unwrap(), n, "batch {b} has repeated rows");
        out.insert(b, n);
    }
    out
}

fn check(s: &Server, ledger: &Ledger, cycle: u64) -> usize {
    let seen = batches(s);
    for (b, n) in &seen {
        assert_eq!(
            *n, BATCH,
            "after kill {cycle}: batch {b:#x} has {n} of its {BATCH} rows (a torn write)"
        );
    }
    for b in &ledger.acked {
        assert!(
            seen.contains_key(b),
            "after kill {cycle}: acknowledged batch {b:#x} is missing ({} acknowledged, {} seen)",
            ledger.acked.len(),
            seen.len()
        );
    }
    let known: std::collections::HashSet<u64> = ledger
        .acked
        .iter()
        .chain(&ledger.uncertain)
        .copied()
        .collect();
    for b in seen.keys() {
        assert!(
            known.contains(b),
            "after kill {cycle}: batch {b:#x} was never sent"
        );
    }
    seen.len()
}

/// Kills `role` `cycles` times under writers; `args` are its extra flags.
fn kill_loop(role: &str, dir: &Path, args: &[&str], cycles: u64, seed: u64, wipe_nvme: &Path) {
    let mut rng = Rng(seed.max(1));
    let mut server = start_role(role, dir, args);
    wait_ready(&server);
    let (st, body) = request(
        &server.http,
        "POST",
        "/v1/tables",
        r#"{"name": "kv", "columns": [{"name": "k", "type": "int64", "nullable": false},
            {"name": "b", "type": "int64"}, {"name": "v", "type": "string"}],
            "primary_key": ["k"]}"#,
    );
    assert_eq!(st, 201, "{body}");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut next = vec![0u64; WRITERS as usize];
    let mut ready_ms = Vec::new();
    let mut first_write_ms = Vec::new();
    let mut wiped = 0;
    for cycle in 1..=cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (http, stop, ledger) = (server.http.clone(), stop.clone(), ledger.clone());
                let first = next[w as usize];
                std::thread::spawn(move || writer(http, w, first, stop, ledger))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100 + rng.below(900)));
        // SIGKILL: no shutdown hook runs, requests in flight are cut.
        drop(server);
        stop.store(true, Ordering::Relaxed);
        for (w, t) in threads.into_iter().enumerate() {
            next[w] = t.join().unwrap();
        }
        if cycle % 5 == 0 {
            std::fs::remove_dir_all(wipe_nvme).ok();
            wiped += 1;
        }
        let started = Instant::now();
        server = start_role(role, dir, args);
        ready_ms.push(wait_ready(&server).as_secs_f64() * 1e3);
        // The first write after a restart opens the shard (fence, WAL replay): timed from
        // the process start, retried (the same batch: an upsert) until acknowledged.
        let probe = (WRITERS << 32) | cycle;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = send(&server.http, probe);
            let ok = matches!(r, Ok((200, _)));
            record(&ledger, probe, r);
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no write acknowledged 60 s after restart"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        first_write_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let l = ledger.lock().unwrap();
        let seen = check(&server, &l, cycle);
        eprintln!(
            "{role} kill {cycle}: {} acknowledged, {} uncertain, {seen} batches present; \
             answers other than 200: {:?}",
            l.acked.len(),
            l.uncertain.len(),
            l.failures
        );
    }
    ready_ms.sort_by(f64::total_cmp);
    first_write_ms.sort_by(f64::total_cmp);
    let l = ledger.lock().unwrap();
    eprintln!(
        "{role}: {cycles} kills ({wiped} with the NVMe directory deleted), {} batches acknowledged \
         and all present, {} uncertain; restart to ready median {:.0} ms, max {:.0} ms; to the \
         first acknowledged write median {:.0} ms, max {:.0} ms",
        l.acked.len(),
        l.uncertain.len(),
        ready_ms[ready_ms.len() / 2],
        ready_ms[ready_ms.len() - 1],
        first_write_ms[first_write_ms.len() / 2],
        first_write_ms[first_write_ms.len() - 1]
    );
    assert!(
        l.acked.len() as u64 >= cycles,
        "too few writes acknowledged to mean anything"
    );
}

#[test]
fn serve_keeps_every_acknowledged_batch_across_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = env_u64("STRATA_KILL_SEED", 20);
    let cycles = env_u64("STRATA_KILL_CYCLES", 20);
    eprintln!("STRATA_KILL_SEED={seed}");
    kill_loop(
        "serve",
        tmp.path(),
        &[],
        cycles,
        seed,
        &tmp.path().join("nvme"),
    );
}

#[test]
fn ingest_on_s3_with_faults_keeps_every_acknowledged_batch_across_kills() {
    let Ok(endpoint) = std::env::var("STRATA_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("STRATA_REQUIRE_S3").is_err(),
            "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
        );
        eprintln!("skipping: STRATA_TEST_S3_ENDPOINT unset (run ci/test.sh to start LocalStack)");
        return;
    };
    let bucket = std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into());
    let tmp = tempfile::tempdir().unwrap();
    let seed = env_u64("STRATA_KILL_SEED", 20);
    let cycles = env_u64("STRATA_KILL_CYCLES", 8);
    eprintln!("STRATA_KILL_SEED={seed}");
    let settings = [
        "store.kind=s3".to_string(),
        format!("store.bucket={bucket}"),
        format!("store.endpoint={endpoint}"),
        format!(
            "engine.root_prefix=kill-{}-{seed}-{}",
            std::process::id(),
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        ),
        // Faults under the retrying layer: transient errors and responses lost after the
        // request took effect (conditional puts that landed, deletes that happened).
        "store.fault.error_rate=0.02".to_string(),
        "store.fault.lost_response_rate=0.02".to_string(),
        format!("store.fault.seed={seed}"),
        // The restarted process is the same node: it takes its own leases back at once.
        "cluster.node=kill-node".to_string(),
        "engine.jobs.inprocess_workers=1".to_string(),
    ];
    let args: Vec<&str> = settings
        .iter()
        .flat_map(|s| ["--set", s.as_str()])
        .collect();
    kill_loop(
        "ingest",
        tmp.path(),
        &args,
        cycles,
        seed,
        &tmp.path().join("nvme"),
    );
}
