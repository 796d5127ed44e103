//! `local` durability: acknowledged after a local fsync, visible at once, and uploaded to the
//! bucket right after, so a reopen from the bucket alone finds it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

mod common;

use common::*;
use futures::TryStreamExt;
use strata_engine::{Db, DbConfig, Durability, Mutation, Value, WriteOptions};
use strata_objstore::ObjectStoreConfig;

#[tokio::test]
async fn local_durability_acks_then_uploads() {
    let store = memory_store();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&store, dir.path(), small_config()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let local = WriteOptions {
        durability: Durability::Local,
    };
    let seq = t
        .write(
            &[Mutation::Upsert(rows(
                &[1, 2],
                &[Some("x"), Some("y")],
                &[Some(1), Some(2)],
            ))],
            local,
        )
        .await
        .unwrap();
    assert!(seq > 0);
    assert!(
        t.get(&[Value::Int(2)], None, None).await.unwrap().is_some(),
        "visible once acknowledged"
    );
    // The segment reaches the bucket (the same group commit uploads it).
    let mut uploaded = false;
    for _ in 0..100 {
        let wal: Vec<_> = store
            .list(None)
            .try_filter(|m| {
                futures::future::ready(m.location.as_ref().contains("/wal/") && m.size > 0)
            })
            .try_collect()
            .await
            .unwrap();
        if !wal.is_empty() {
            uploaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(uploaded, "a locally acknowledged write must be uploaded");
    db.close().await;
    // Reopen from the bucket alone.
    let fresh = tempfile::tempdir().unwrap();
    let db = open(&store, fresh.path(), small_config()).await;
    let t = db.table("t").await.unwrap();
    let got = decode(&t.scan(&Default::default(), None).await.unwrap());
    assert_eq!(
        got,
        vec![
            (1, Some("x".into()), Some(1)),
            (2, Some("y".into()), Some(2))
        ]
    );
    db.close().await;
}

/// A WAL segment an acknowledged write lives in, missing from the bucket when the shard
/// reopens, is an error naming it, not a warning and a shard silently without the write.
#[tokio::test]
async fn a_missing_wal_segment_fails_the_reopen_loudly() {
    use object_store::ObjectStoreExt;
    let store = memory_store();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = open(&store, d1.path(), small_config()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    for k in 0..3 {
        t.upsert(rows(&[k], &[Some("acknowledged")], &[None]))
            .await
            .unwrap();
    }
    db.close().await;
    // Lose the second of the data segments (none was flushed: the WAL holds every write).
    let wal: Vec<object_store::ObjectMeta> = futures::TryStreamExt::try_collect(store.list(None))
        .await
        .unwrap();
    let mut segments: Vec<_> = wal
        .into_iter()
        .filter(|m| m.location.as_ref().contains("/wal/") && m.size > 0)
        .map(|m| m.location)
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "one segment per write: {segments:?}");
    store.delete(&segments[1]).await.unwrap();

    let db = open(&store, d2.path(), small_config()).await;
    let err = match db.table("t").await {
        Ok(t) => t.get(&[Value::Int(0)], None, None).await.unwrap_err(),
        Err(e) => e,
    };
    assert!(err.to_string().contains("missing"), "{err}");
}

/// A write acknowledged after the local fsync whose upload never happened (the bucket
/// refused it until the process stopped) is uploaded and replayed when the shard reopens on
/// the same node, not swept away as a leftover file.
#[tokio::test]
async fn a_locally_acknowledged_write_survives_a_restart_before_its_upload() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&store, dir.path(), small_config()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    t.upsert(rows(&[1], &[Some("uploaded")], &[None]))
        .await
        .unwrap();
    // The bucket refuses every PUT from now on: the segment stays local.
    fault.fail_next(strata_objstore::FaultOp::Put, 1_000_000);
    let local = WriteOptions {
        durability: Durability::Local,
    };
    t.write(
        &[Mutation::Upsert(rows(&[2], &[Some("local only")], &[None]))],
        local,
    )
    .await
    .expect("acknowledged after the local fsync");
    db.close().await;
    fault.clear_scripted();

    let db = open(&store, dir.path(), small_config()).await;
    let t = db.table("t").await.unwrap();
    for k in [1, 2] {
        assert!(
            t.get(&[Value::Int(k)], None, None).await.unwrap().is_some(),
            "row {k} after the restart"
        );
    }
    // And it is in the bucket now: a reopen elsewhere finds it.
    db.close().await;
    let other = tempfile::tempdir().unwrap();
    let db = open(&store, other.path(), small_config()).await;
    let t = db.table("t").await.unwrap();
    assert!(t.get(&[Value::Int(2)], None, None).await.unwrap().is_some());
}

/// On a local-directory bucket on the same disk, a flushed or compacted SST reaches the
/// bucket as a hard link of the synced local file, not a second copy; the bucket's object
/// outlives the local directory, and a reopen from the bucket alone reads every row.
#[tokio::test]
async fn sst_uploads_to_a_local_directory_bucket_link_the_local_file() {
    // On a store handed in (the SST's bytes read back as the put's payload), and on the
    // configured local-directory bucket (the file standing for the payload).
    for configured in [false, true] {
        ssts_linked(configured).await;
    }
}

async fn ssts_linked(configured: bool) {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let store = local_store(&bucket);
    let nvme = dir.path().join("nvme");
    let db = if configured {
        Db::open(DbConfig {
            store: ObjectStoreConfig::local(&bucket),
            local_dir: nvme.clone(),
            engine: small_config(),
        })
        .await
        .unwrap()
    } else {
        open(&store, &nvme, small_config()).await
    };
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    for round in 0..3i64 {
        let ids: Vec<i64> = (round * 100..round * 100 + 100).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("v{i}")).collect();
        let a: Vec<Option<&str>> = names.iter().map(|s| Some(s.as_str())).collect();
        let b: Vec<Option<i64>> = ids.iter().map(|i| Some(*i)).collect();
        t.write(&[Mutation::Upsert(rows(&ids, &a, &b))], Default::default())
            .await
            .unwrap();
        t.flush().await.unwrap();
    }
    t.compact().await.unwrap();
    let ssts = |root: &std::path::Path| -> Vec<std::path::PathBuf> {
        walk(root)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "sst"))
            .collect()
    };
    let in_bucket = ssts(&bucket);
    assert!(!in_bucket.is_empty(), "flushes uploaded SSTs");
    let local: std::collections::HashMap<String, u64> = ssts(&nvme)
        .into_iter()
        .map(|p| {
            let ino = std::fs::metadata(&p).unwrap().ino();
            (p.file_name().unwrap().to_string_lossy().into_owned(), ino)
        })
        .collect();
    let mut shared = 0;
    for p in &in_bucket {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(ino) = local.get(&name) {
            assert_eq!(
                *ino,
                std::fs::metadata(p).unwrap().ino(),
                "{name}: the object is the local file, linked"
            );
            shared += 1;
        }
    }
    assert!(
        shared > 0,
        "the live SSTs are shared with the bucket ({configured})"
    );
    if configured {
        let sst_bytes: u64 = in_bucket
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        let counted = db.object_store_metrics().bytes("put", "sst");
        assert!(
            counted >= sst_bytes,
            "puts counted at the files' lengths: {counted} < {sst_bytes}"
        );
    }
    db.close().await;

    std::fs::remove_dir_all(&nvme).unwrap();
    let db = open(&store, &nvme, small_config()).await;
    let t = db.table("t").await.unwrap();
    let got = decode(&t.scan(&Default::default(), None).await.unwrap());
    assert_eq!(got.len(), 300);
    assert_eq!(got[299], (299, Some("v299".into()), Some(299)));
    db.close().await;
}

fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Locally acknowledged writes filling more than one file of the local log (4 MiB each), none
/// uploaded, survive a crash (every task dropped, no orderly close): the reopen uploads and
/// replays each of them, and leaves no log file behind. (While the bucket refuses them,
/// locally durable writes gather into one segment until it holds `wal_segment_bytes_max`;
/// a write past that waits for the bucket.)
#[test]
fn locally_acknowledged_writes_over_several_log_files_survive_a_crash() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(700_000);
    let mut config = small_config();
    config.wal_uploads_in_flight = 8;
    let crashed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    crashed.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        db.create_table("t", schema(), &["id"]).await.unwrap();
        let t = db.table("t").await.unwrap();
        // The bucket refuses every PUT from now on: every segment stays in the local log.
        fault.fail_next(strata_objstore::FaultOp::Put, 1_000_000);
        let local = WriteOptions {
            durability: Durability::Local,
        };
        for k in 0..8i64 {
            let v = format!("{k}:{big}");
            t.write(
                &[Mutation::Upsert(rows(
                    &[k],
                    &[Some(v.as_str())],
                    &[Some(k)],
                ))],
                local,
            )
            .await
            .expect("acknowledged after the local sync");
        }
        let logs = log_files(dir.path());
        assert!(
            logs.len() >= 2,
            "5.6 MB of segments span log files: {logs:?}"
        );
        // A crash: the Db dropped without close, its tasks with the runtime.
        drop(t);
        drop(db);
    });
    crashed.shutdown_timeout(std::time::Duration::from_secs(10));
    fault.clear_scripted();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        let t = db.table("t").await.unwrap();
        for k in 0..8i64 {
            let row = t.get(&[Value::Int(k)], None, None).await.unwrap();
            assert!(row.is_some(), "row {k} after the crash");
        }
        assert!(
            log_files(dir.path()).is_empty(),
            "the reopen removes the log"
        );
        db.close().await;
        // Every one of them is in the bucket: a node with an empty local directory reads them.
        let other = tempfile::tempdir().unwrap();
        let db = open(&store, other.path(), config).await;
        let t = db.table("t").await.unwrap();
        for k in 0..8i64 {
            assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
        }
        db.close().await;
    });
}

/// The local log's files anywhere under `dir`.
fn log_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "walog") {
                out.push(p);
            }
        }
    }
    out
}

/// The WAL segments with records in the bucket (fences excluded).
async fn wal_segments(store: &strata_objstore::StoreRef) -> usize {
    let wal: Vec<_> = store
        .list(None)
        .try_filter(|m| {
            futures::future::ready(
                m.location.as_ref().contains("/wal/") && !strata_engine::wal::is_fence_size(m.size),
            )
        })
        .try_collect()
        .await
        .unwrap();
    wal.len()
}

/// Locally durable writes gather under one WAL segment for `wal_local_upload_delay_ms`: one
/// PUT for many writes. A remote write uploads what is gathered before its own segment (it
/// is acknowledged only after every segment before it), and the interval's end uploads the
/// rest. A crash with writes gathered but not uploaded loses none of them on this node: the
/// reopen joins their logged parts into one segment, byte for byte the one the writer would
/// have uploaded, so a gathered segment that did land before the crash is recognised as the
/// writer's own and the segments after it are uploaded too.
#[test]
fn locally_durable_writes_gather_into_one_segment_and_survive_a_crash() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    // No flush moves the replay point past the gathered segments; no interval ends (a
    // delay past what the clock can add gathers until something else uploads).
    config.memtable_bytes_max = 64 << 20;
    config.wal_local_upload_delay_ms = u64::MAX;
    let local = WriteOptions {
        durability: Durability::Local,
    };
    let write = |k: i64| Mutation::Upsert(rows(&[k], &[Some("v")], &[Some(k)]));
    let crashed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = crashed.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        db.create_table("t", schema(), &["id"]).await.unwrap();
        let t = db.table("t").await.unwrap();
        let before = wal_segments(&store).await;
        for k in 0..20i64 {
            t.write(&[write(k)], local).await.unwrap();
            assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
        }
        assert_eq!(
            wal_segments(&store).await,
            before,
            "gathered, not yet uploaded"
        );
        // A remote write: the gathered segment goes up first, then its own.
        t.write(&[write(100)], WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(wal_segments(&store).await, before + 2);
        // More local writes, gathered under the next id; then a crash before their upload.
        for k in 20..30i64 {
            t.write(&[write(k)], local).await.unwrap();
        }
        assert_eq!(wal_segments(&store).await, before + 2);
        // The bucket refuses the upload the writer's end would make: only the log has them.
        fault.fail_next(strata_objstore::FaultOp::Put, 1_000_000);
        drop(t);
        drop(db);
        before
    });
    crashed.shutdown_timeout(std::time::Duration::from_secs(10));
    fault.clear_scripted();
    assert_eq!(
        rt_count(&store),
        before + 2,
        "the last gathered segment was not uploaded before the crash"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        let t = db.table("t").await.unwrap();
        for k in (0..30i64).chain([100]) {
            assert!(
                t.get(&[Value::Int(k)], None, None).await.unwrap().is_some(),
                "row {k} after the crash"
            );
        }
        db.close().await;
        // All of them in the bucket: a node with an empty local directory reads them.
        let other = tempfile::tempdir().unwrap();
        let db = open(&store, other.path(), config.clone()).await;
        let t = db.table("t").await.unwrap();
        for k in (0..30i64).chain([100]) {
            assert!(t.get(&[Value::Int(k)], None, None).await.unwrap().is_some());
        }
        db.close().await;
    });

    // With a short interval, the interval's end uploads what is gathered.
    let mut config = small_config();
    config.wal_local_upload_delay_ms = 20;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = memory_store();
        let dir = tempfile::tempdir().unwrap();
        let db = open(&store, dir.path(), config.clone()).await;
        db.create_table("t", schema(), &["id"]).await.unwrap();
        let t = db.table("t").await.unwrap();
        let before = wal_segments(&store).await;
        for k in 0..5i64 {
            t.write(&[write(k)], local).await.unwrap();
        }
        let mut uploaded = false;
        for _ in 0..200 {
            if wal_segments(&store).await > before {
                uploaded = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(uploaded, "the interval's end uploads the gathered writes");
        db.close().await;
    });
}

/// A bucket that refuses every PUT for a while does not stop locally durable writes: once
/// the writer's uploads in flight are all retrying, later local writes keep gathering into
/// the next segment (up to `wal_segment_bytes_max`) and are acknowledged after the local
/// sync. When the bucket comes back, everything reaches it, and a node with an empty local
/// directory reads every row. (A remote write or a sync sent meanwhile waits for an upload
/// slot, and the local writes queued behind it wait with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locally_durable_writes_go_on_while_the_bucket_refuses_uploads() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.memtable_bytes_max = 64 << 20;
    config.wal_uploads_in_flight = 1;
    config.wal_local_upload_delay_ms = 5;
    let db = open(&store, dir.path(), config.clone()).await;
    db.create_table("t", schema(), &["id"]).await.unwrap();
    let t = db.table("t").await.unwrap();
    let local = WriteOptions {
        durability: Durability::Local,
    };
    fault.fail_next(strata_objstore::FaultOp::Put, 1_000_000);
    for k in 0..40i64 {
        let m = [Mutation::Upsert(rows(&[k], &[Some("v")], &[Some(k)]))];
        let w = t.write(&m, local);
        tokio::time::timeout(std::time::Duration::from_secs(5), w)
            .await
            .unwrap_or_else(|_| panic!("local write {k} waited for the bucket"))
            .unwrap();
        // Past the interval: without gathering, every write would need an upload slot.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    fault.clear_scripted();
    db.close().await;
    let other = tempfile::tempdir().unwrap();
    let db = open(&store, other.path(), config).await;
    let t = db.table("t").await.unwrap();
    for k in 0..40i64 {
        assert!(
            t.get(&[Value::Int(k)], None, None).await.unwrap().is_some(),
            "row {k} in the bucket"
        );
    }
    db.close().await;
}

/// The WAL segments with records in the bucket, from outside a runtime.
fn rt_count(store: &strata_objstore::StoreRef) -> usize {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(wal_segments(store))
}

/// A gathered segment whose parts span two log files is uploaded, and its first file is then
/// reused by later local writes, so after a crash the log holds only the segment's last
/// parts. The reopen must recognise the bucket's copy as the writer's own (same epoch, not a
/// fence) and still upload the later segment, never uploaded: no acknowledged write lost.
#[test]
fn a_gathered_segment_partly_overwritten_in_the_log_does_not_hide_later_writes() {
    let fault = std::sync::Arc::new(strata_objstore::FaultInjectingStore::new(
        memory_store(),
        Default::default(),
    ));
    let store: strata_objstore::StoreRef = fault.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config();
    config.memtable_bytes_max = 64 << 20;
    config.wal_local_upload_delay_ms = 60_000;
    config.wal_uploads_in_flight = 8;
    let big = "x".repeat(700_000);
    let local = WriteOptions {
        durability: Durability::Local,
    };
    let crashed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    crashed.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        db.create_table("t", schema(), &["id"]).await.unwrap();
        let t = db.table("t").await.unwrap();
        let write = |k: i64| {
            let v = format!("{k}:{big}");
            [Mutation::Upsert(rows(
                &[k],
                &[Some(v.as_str())],
                &[Some(k)],
            ))]
        };
        // 4.9 MB gathered under one id: five parts fill the first 4 MiB log file, two go
        // to a second.
        for k in 0..7i64 {
            t.write(&write(k), local).await.unwrap();
        }
        assert_eq!(log_files(dir.path()).len(), 2);
        // A remote write uploads it (then its own segment); the first file is spare now.
        t.write(
            &[Mutation::Upsert(rows(&[100], &[Some("r")], &[Some(100)]))],
            WriteOptions::default(),
        )
        .await
        .unwrap();
        // The next gathered segment fills the second file and reuses the first.
        for k in 7..11i64 {
            t.write(&write(k), local).await.unwrap();
        }
        assert_eq!(log_files(dir.path()).len(), 2, "the spare file was reused");
        fault.fail_next(strata_objstore::FaultOp::Put, 1_000_000);
        drop(t);
        drop(db);
    });
    crashed.shutdown_timeout(std::time::Duration::from_secs(10));
    fault.clear_scripted();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = open(&store, dir.path(), config.clone()).await;
        let t = db.table("t").await.unwrap();
        for k in (0..11i64).chain([100]) {
            assert!(
                t.get(&[Value::Int(k)], None, None).await.unwrap().is_some(),
                "row {k} after the crash"
            );
        }
        db.close().await;
    });
}
