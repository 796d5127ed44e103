//! Corrupt objects in the bucket (issue 20, item 7): a shard whose catalog, manifest, WAL
//! segment, row SST or Parquet file was damaged is opened and read the way a replacement
//! node would (empty local directory: writer open, point reads, scans, a query's view),
//! and every failure must be an error naming the damaged object: never a panic (in the
//! caller or in any background task), never an abort.
//!
//! Each case copies one pristine bucket, damages one object of one kind with a seeded
//! mutation (bit flips, truncation, zeroed or inserted bytes; for JSON, changed digits and
//! removed elements, which keep it parseable), and reads everything. Reads that succeed
//! are fine (a mutation may hit bytes nothing reads, and Parquet pages carry no checksum);
//! reads that fail must say which object.
//! `STRATA_CORRUPT_CASES` sets the cases per kind (default 12).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_engine::{Db, ScanOptions, Value};

/// Panics seen anywhere in the process (test threads, runtime workers, blocking pool).
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn texts(ids: &[i64], tag: &str) -> Vec<String> {
    ids.iter().map(|i| format!("{tag}-{i:06}")).collect()
}

async fn load(t: &strata_engine::Table, ids: &[i64], tag: &str) {
    let a = texts(ids, tag);
    let a: Vec<Option<&str>> = a.iter().map(|s| Some(s.as_str())).collect();
    let b: Vec<Option<i64>> = ids.iter().map(|i| Some(i * 7)).collect();
    t.upsert(rows(ids, &a, &b)).await.unwrap();
}

fn config() -> strata_engine::EngineConfig {
    let mut c = small_config();
    // Nothing deletes objects behind the cases' backs.
    c.gc.interval_ms = 0;
    c.l0_settle_ms = 0;
    c
}

/// A bucket holding every kind of object: columnar levels (two, the deeper one split into
/// two column groups), row SSTs over them, a WAL tail with partial updates and deletes,
/// manifests and the catalog.
async fn pristine(bucket: &Path) {
    let store = local_store(bucket);
    let local = tempfile::tempdir().unwrap();
    let db = open(&store, local.path(), config()).await;
    db.create_table_with_layout("t", schema(), &["id"], layout(1))
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..600).collect();
    for chunk in ids.chunks(150) {
        load(&t, chunk, "first").await;
    }
    t.drain_to_bucket().await.unwrap();
    t.compact_column_group(0, 0).await.unwrap();
    let newer: Vec<i64> = (100..300).collect();
    load(&t, &newer, "second").await;
    t.flush().await.unwrap();
    t.update(only(&[
        (
            "id",
            Arc::new(arrow::array::Int64Array::from(vec![5, 150, 450])),
        ),
        (
            "b",
            Arc::new(arrow::array::Int64Array::from(vec![-1, -2, -3])),
        ),
    ]))
    .await
    .unwrap();
    t.delete(keys(&[7, 160, 460])).await.unwrap();
    // Dropped without close: the tail stays in the WAL, to be replayed.
    drop(t);
    drop(db);
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for f in files(from) {
        let dest = to.join(f.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dest).unwrap();
    }
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().to_string()
}

/// The objects the newest state reads, by kind and file stem: the newest catalog and
/// manifest versions, the SSTs and Parquet files the manifest names, the WAL above its
/// replay point.
fn live_objects(objects: &[PathBuf]) -> std::collections::HashSet<(Kind, String)> {
    let newest = |k: Kind| {
        objects
            .iter()
            .filter(|p| kind_of(p) == Some(k))
            .max_by_key(|p| stem(p).parse::<u64>().unwrap_or(0))
            .unwrap()
    };
    let mut live = std::collections::HashSet::new();
    live.insert((Kind::Catalog, stem(newest(Kind::Catalog))));
    let manifest = newest(Kind::Manifest);
    live.insert((Kind::Manifest, stem(manifest)));
    let m: strata_manifest::Manifest =
        serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap();
    live.extend(m.ssts().map(|s| (Kind::Sst, s.id.to_string())));
    live.extend(m.parquet_files().map(|f| (Kind::Parquet, f.name.clone())));
    for p in objects.iter().filter(|p| kind_of(p) == Some(Kind::Wal)) {
        if stem(p)
            .parse::<u64>()
            .is_ok_and(|id| id > m.wal_replay_after)
        {
            live.insert((Kind::Wal, stem(p)));
        }
    }
    live
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Catalog,
    Manifest,
    Wal,
    Sst,
    Parquet,
}

fn kind_of(path: &Path) -> Option<Kind> {
    let s = path.to_string_lossy();
    if s.contains("/catalog/") {
        Some(Kind::Catalog)
    } else if s.contains("/manifest/") {
        Some(Kind::Manifest)
    } else if s.ends_with(".wal") {
        Some(Kind::Wal)
    } else if s.ends_with(".sst") {
        Some(Kind::Sst)
    } else if s.ends_with(".parquet") {
        Some(Kind::Parquet)
    } else {
        None
    }
}

/// Damages `data` in one of several ways; JSON is mostly kept parseable.
fn mutate(data: &[u8], json: bool, rng: &mut StdRng) -> (Vec<u8>, String) {
    let mut d = data.to_vec();
    let n = d.len().max(1);
    if json && rng.random_bool(0.6) {
        // Change a number, or remove one array element: still JSON, wrong content.
        let digits: Vec<usize> = (0..d.len()).filter(|i| d[*i].is_ascii_digit()).collect();
        if !digits.is_empty() && rng.random_bool(0.7) {
            let mut how = Vec::new();
            for _ in 0..rng.random_range(1..=3) {
                let i = digits[rng.random_range(0..digits.len())];
                let v = b'0' + rng.random_range(0..10u8);
                how.push(format!("{i}:{}", v as char));
                d[i] = v;
            }
            return (d, format!("digits {}", how.join(",")));
        }
        let text = String::from_utf8_lossy(&d).to_string();
        let opens: Vec<usize> = text.match_indices('{').map(|(i, _)| i).collect();
        if opens.len() > 1 {
            let at = opens[rng.random_range(1..opens.len())];
            let mut depth = 0;
            for (j, c) in text[at..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            let mut end = at + j + 1;
                            if text[end..].starts_with(',') {
                                end += 1;
                            }
                            let out = format!("{}{}", &text[..at], &text[end..]);
                            // A removed last element leaves a trailing comma: drop it.
                            let out = out.replace(",\n]", "\n]").replace(",]", "]");
                            return (out.into_bytes(), format!("removed object at {at}"));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    match rng.random_range(0..5) {
        0 => {
            let i = rng.random_range(0..n.min(d.len()).max(1));
            if let Some(b) = d.get_mut(i) {
                *b ^= 1 << rng.random_range(0..8);
            }
            (d, format!("bit flip at {i}"))
        }
        1 => {
            let at = rng.random_range(0..n);
            d.truncate(at);
            (d, format!("truncated to {at}"))
        }
        2 => {
            let at = rng.random_range(0..n);
            let len = rng.random_range(1..=64).min(d.len().saturating_sub(at));
            d[at..at + len].fill(0);
            (d, format!("{len} bytes zeroed at {at}"))
        }
        3 => {
            // Near the end: footers, indexes and lengths live there.
            let tail = d.len().min(256);
            let at = d.len() - tail + rng.random_range(0..tail.max(1)).min(tail);
            let mut flips = Vec::new();
            for _ in 0..rng.random_range(1..=4) {
                let i = (at + rng.random_range(0..8)).min(d.len().saturating_sub(1));
                if let Some(b) = d.get_mut(i) {
                    *b = rng.random();
                    flips.push(i);
                }
            }
            (d, format!("random bytes at {flips:?}"))
        }
        _ => {
            let at = rng.random_range(0..=d.len());
            let junk: Vec<u8> = (0..rng.random_range(1..32)).map(|_| rng.random()).collect();
            d.splice(at..at, junk.iter().copied());
            (d, format!("{} bytes inserted at {at}", junk.len()))
        }
    }
}

/// Opens the damaged bucket with an empty local directory and reads everything; the
/// errors met, in order.
async fn read_all(bucket: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    let store = local_store(bucket);
    let local = tempfile::tempdir().unwrap();
    let db = match Db::open_with_store(
        store,
        None,
        strata_objstore::ObjectStoreMetrics::default(),
        local.path().to_path_buf(),
        config(),
        strata_common::clock::system(),
    )
    .await
    {
        Ok(db) => db,
        Err(e) => return vec![e.to_string()],
    };
    match db.view("t", None).await {
        Ok(view) => {
            if std::env::var("STRATA_CORRUPT_VERBOSE").is_ok() {
                eprintln!(
                    "  view at manifest version {}",
                    view.shards[0].manifest_version()
                );
            }
            let handle = tokio::runtime::Handle::current();
            let r = strata_common::exec::blocking(move || -> strata_engine::Result<usize> {
                let mut n = 0;
                for shard in &view.shards {
                    for projection in [vec![0, 1, 2], vec![2], vec![0]] {
                        let mut b = shard.batches(&[], None, &projection, 100, &handle)?;
                        while let Some(batch) = b.next_batch()? {
                            n += batch.num_rows();
                        }
                    }
                }
                Ok(n)
            })
            .await
            .unwrap();
            if let Err(e) = r {
                errors.push(e.to_string());
            }
        }
        Err(e) => errors.push(e.to_string()),
    }
    match db.table("t").await {
        Ok(t) => {
            for k in [0, 5, 7, 150, 299, 450, 599] {
                if let Err(e) = t.get(&[Value::Int(k)], None, None).await {
                    errors.push(e.to_string());
                }
            }
            if let Err(e) = t.scan(&ScanOptions::default(), None).await {
                errors.push(e.to_string());
            }
            // Background work over the damaged files (compaction, jobs) must not panic.
            let _ = t.compact().await;
        }
        Err(e) => errors.push(e.to_string()),
    }
    db.close().await;
    errors
}

#[test]
fn corrupt_objects_give_errors_naming_them() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.lock().unwrap().push(info.to_string());
        prev(info);
    }));
    let cases: usize = std::env::var("STRATA_CORRUPT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let clean = root.path().join("pristine");
    std::fs::create_dir_all(&clean).unwrap();
    // On a runtime of its own, shut down after: no background task of the pristine
    // writer (flush, compaction, jobs) keeps changing the bucket while it is copied.
    let build = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    build.block_on(pristine(&clean));
    build.shutdown_timeout(std::time::Duration::from_secs(10));
    let objects = files(&clean);
    let live = live_objects(&objects);
    // Reading opens the writer, which commits a manifest version: read a copy.
    let copy = root.path().join("baseline");
    copy_dir(&clean, &copy);
    let baseline = rt.block_on(read_all(&copy));
    assert!(
        baseline.is_empty(),
        "the pristine bucket reads: {baseline:?}"
    );

    let mut rng = StdRng::seed_from_u64(20);
    let mut failures = Vec::new();
    let mut detected = 0;
    let mut total = 0;
    for kind in [
        Kind::Catalog,
        Kind::Manifest,
        Kind::Wal,
        Kind::Sst,
        Kind::Parquet,
    ] {
        let of_kind: Vec<&PathBuf> = objects
            .iter()
            .filter(|p| kind_of(p) == Some(kind))
            .collect();
        assert!(!of_kind.is_empty(), "the pristine bucket has no {kind:?}");
        for case in 0..cases {
            // Manifests and the catalog are read newest first: damage the newest mostly.
            // Mostly an object the newest state reads (the newest catalog and manifest
            // version, the files it names, the WAL above its replay point); sometimes any.
            let read: Vec<&PathBuf> = of_kind
                .iter()
                .copied()
                .filter(|p| live.contains(&(kind, stem(p))))
                .collect();
            let pool = if !read.is_empty() && case % 4 != 3 {
                &read
            } else {
                &of_kind
            };
            let victim = pool[rng.random_range(0..pool.len())];
            let bucket = root.path().join(format!("case-{kind:?}-{case}"));
            copy_dir(&clean, &bucket);
            let target = bucket.join(victim.strip_prefix(&clean).unwrap());
            let data = std::fs::read(&target).unwrap();
            let json = matches!(kind, Kind::Catalog | Kind::Manifest);
            let (bad, how) = mutate(&data, json, &mut rng);
            std::fs::write(&target, &bad).unwrap();
            let name = stem(victim);
            let errors = rt.block_on(read_all(&bucket));
            total += 1;
            if !errors.is_empty() {
                detected += 1;
            }
            if std::env::var("STRATA_CORRUPT_VERBOSE").is_ok() {
                eprintln!(
                    "{kind:?} {} ({how}): {:?}",
                    victim.strip_prefix(&clean).unwrap().display(),
                    errors.first()
                );
            }
            for e in &errors {
                // A damaged manifest or catalog may name a file or shard that does not
                // exist, or give a file a wrong size: the error names that file or shard and
                // says the manifest or catalog disagrees.
                let names_reference = match kind {
                    Kind::Manifest => e.contains("not found") || e.contains("the manifest"),
                    Kind::Catalog => e.contains("the catalog"),
                    _ => false,
                };
                if !e.contains(&name) && !names_reference {
                    failures.push(format!(
                        "{kind:?} {} ({how}): error does not name it: {e}",
                        victim.strip_prefix(&clean).unwrap().display()
                    ));
                }
            }
            std::fs::remove_dir_all(&bucket).unwrap();
        }
    }
    drop(rt);
    let panics = PANICS.lock().unwrap().clone();
    eprintln!("{total} damaged buckets read, {detected} with errors");
    assert!(panics.is_empty(), "panics: {panics:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
