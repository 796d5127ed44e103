//! The conformance suite against every backend. The S3 run needs LocalStack (started by
//! `ci/test.sh`); it is skipped with a notice when `STRATA_TEST_S3_ENDPOINT` is unset, and
//! CI sets `STRATA_REQUIRE_S3=1` so a missing LocalStack fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use object_store::path::Path;
use strata_objstore::conformance::run_all;
use strata_objstore::*;

fn run_id() -> String {
    format!("conf-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

#[tokio::test]
async fn memory_backend_conforms() {
    let store = object_store::memory::InMemory::new();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn local_dir_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirStore::new(dir.path()).unwrap();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn decorated_stack_conforms_under_faults() {
    // Every decorator, with injected transient errors and lost put responses: retries must
    // hide them, and conditional writes must still have exactly one winner.
    let dir = tempfile::tempdir().unwrap();
    let mut config = ObjectStoreConfig::local(dir.path());
    config.retry.backoff_ms_initial = 1;
    config.retry.attempts_max = 20;
    config.fault = Some(FaultConfig {
        error_rate: 0.1,
        lost_response_rate: 0.1,
        seed: 7,
        ..Default::default()
    });
    let metrics = ObjectStoreMetrics::default();
    let (store, fault) = build(&config, &metrics).await.unwrap();
    // A fixed prefix (the directory is fresh): faults are drawn per object, so the run,
    // and the retries the assertions below count on, are the same every time.
    run_all(store.as_ref(), &Path::from("conf-faults")).await;
    let fault = fault.expect("fault injector configured");
    assert!(
        fault.injected() > 0,
        "the run must have seen injected faults"
    );
    assert!(
        metrics.requests("put", "basic") >= 3,
        "instrumentation counts every attempt"
    );
}

fn s3_config() -> Option<S3Config> {
    let endpoint = std::env::var("STRATA_TEST_S3_ENDPOINT").ok();
    if endpoint.is_none() {
        assert!(
            std::env::var("STRATA_REQUIRE_S3").is_err(),
            "STRATA_REQUIRE_S3 is set but STRATA_TEST_S3_ENDPOINT is not"
        );
        eprintln!("skipping S3 conformance: STRATA_TEST_S3_ENDPOINT unset");
        return None;
    }
    Some(S3Config {
        bucket: std::env::var("STRATA_TEST_S3_BUCKET").unwrap_or_else(|_| "strata-test".into()),
        region: Some("us-east-1".into()),
        endpoint,
        request_timeout_ms: 10_000,
    })
}

#[tokio::test]
async fn s3_backend_conforms() {
    let Some(cfg) = s3_config() else { return };
    let store = s3::build(&cfg).await.unwrap();
    run_all(&store, &Path::from(run_id())).await;
}

#[tokio::test]
async fn s3_decorated_stack_conforms() {
    let Some(cfg) = s3_config() else { return };
    let metrics = ObjectStoreMetrics::default();
    let (store, _) = build(&ObjectStoreConfig::s3(cfg), &metrics).await.unwrap();
    let store: Arc<dyn ObjectStore> = store;
    run_all(store.as_ref(), &Path::from(run_id())).await;
    assert!(metrics.requests("put", "create") >= 2);
}

/// Every write of the local-directory backend is durable when it returns: the staged file and
/// the directory that names it are both synced, and the e-tag it answers is the one a HEAD
/// reports (so a conditional update after a put matches).
#[tokio::test]
async fn local_dir_writes_are_synced_before_they_return() {
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirStore::new(dir.path()).unwrap();
    let base = store.syncs();

    // A put into a new directory tree: the file, its directory, and each new directory's
    // entry in its parent.
    let a = Path::from("wal/shard-1/00000000000000000001.wal");
    let put = store.put(&a, b"one".to_vec().into()).await.unwrap();
    assert_eq!(
        store.syncs() - base,
        2 + 2,
        "file + its directory + two new directories"
    );
    let head = store.head(&a).await.unwrap();
    assert_eq!(
        put.e_tag, head.e_tag,
        "a put's e-tag is the one HEAD reports"
    );

    // Another put in the same directory: the file and the directory.
    let before = store.syncs();
    let b = Path::from("wal/shard-1/00000000000000000002.wal");
    let created = store
        .put_opts(
            &b,
            b"two".to_vec().into(),
            PutOptions::from(PutMode::Create),
        )
        .await
        .unwrap();
    assert_eq!(store.syncs() - before, 2);
    let err = store
        .put_opts(
            &b,
            b"other".to_vec().into(),
            PutOptions::from(PutMode::Create),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );
    assert_eq!(
        store.get(&b).await.unwrap().bytes().await.unwrap().as_ref(),
        b"two"
    );

    // A conditional update on the e-tag the create answered.
    let before = store.syncs();
    let version = UpdateVersion {
        e_tag: created.e_tag.clone(),
        version: None,
    };
    store
        .put_opts(
            &b,
            b"three".to_vec().into(),
            PutOptions::from(PutMode::Update(version)),
        )
        .await
        .unwrap();
    assert_eq!(store.syncs() - before, 2);
    assert_eq!(
        store.get(&b).await.unwrap().bytes().await.unwrap().as_ref(),
        b"three"
    );

    // A multipart upload: nothing under the name until completed, then whole and synced.
    let before = store.syncs();
    let c = Path::from("levels/big.parquet");
    let mut upload = store.put_multipart(&c).await.unwrap();
    let first = upload.put_part(vec![1u8; 1000].into());
    let second = upload.put_part(vec![2u8; 500].into());
    second.await.unwrap();
    first.await.unwrap();
    assert!(store.head(&c).await.is_err(), "not visible before complete");
    let done = upload.complete().await.unwrap();
    assert_eq!(
        store.syncs() - before,
        2 + 2 + 1,
        "each part + file + directory + the new directory"
    );
    let bytes = store.get(&c).await.unwrap().bytes().await.unwrap();
    assert_eq!(bytes.len(), 1500);
    assert!(bytes[..1000].iter().all(|b| *b == 1) && bytes[1000..].iter().all(|b| *b == 2));
    assert_eq!(done.e_tag, store.head(&c).await.unwrap().e_tag);

    // An aborted or dropped upload leaves nothing, not even its staging file.
    let d = Path::from("levels/aborted.parquet");
    let mut upload = store.put_multipart(&d).await.unwrap();
    upload.put_part(vec![3u8; 10].into()).await.unwrap();
    upload.abort().await.unwrap();
    let e = Path::from("levels/dropped.parquet");
    let mut upload = store.put_multipart(&e).await.unwrap();
    upload.put_part(vec![3u8; 10].into()).await.unwrap();
    drop(upload);
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("levels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["big.parquet".to_string()]);

    // A copy syncs the directory of its new name.
    let before = store.syncs();
    store
        .copy(&c, &Path::from("levels/copy.parquet"))
        .await
        .unwrap();
    assert_eq!(store.syncs() - before, 1);
}

/// Large writes reach the disk a slice at a time, each during the process's bulk turn,
/// while a small write (a WAL segment) never waits for the turn: a slice of bulk data held
/// up by another file's sync leaves small durable writes free to land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_dir_syncs_large_writes_in_slices_during_the_bulk_turn() {
    use object_store::ObjectStoreExt;
    use strata_objstore::{BULK_SLICE_BYTES, bulk_turn};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalDirStore::new(dir.path()).unwrap());
    store
        .put(&Path::from("levels/warm"), b"x".to_vec().into())
        .await
        .unwrap();
    store
        .put(&Path::from("wal/warm"), b"x".to_vec().into())
        .await
        .unwrap();

    // A payload of two and a half slices: three slice syncs, then the file and directory.
    let big = vec![7u8; BULK_SLICE_BYTES * 5 / 2];
    let before = store.syncs();
    store
        .put(&Path::from("levels/big"), big.clone().into())
        .await
        .unwrap();
    assert_eq!(store.syncs() - before, 3 + 2);
    let read = store.get(&Path::from("levels/big")).await.unwrap();
    assert_eq!(read.bytes().await.unwrap().as_ref(), big.as_slice());

    // A multipart part of the same size: three slice syncs, the last one its tail.
    let before = store.syncs();
    let mut upload = store
        .put_multipart(&Path::from("levels/parts"))
        .await
        .unwrap();
    upload.put_part(big.clone().into()).await.unwrap();
    assert_eq!(store.syncs() - before, 3);
    upload.complete().await.unwrap();

    // While the turn is held elsewhere, a large write waits for it and a small one lands.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _turn = bulk_turn();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    held_rx.recv().unwrap();
    let waiting = {
        let store = store.clone();
        let big = big.clone();
        tokio::spawn(async move { store.put(&Path::from("levels/later"), big.into()).await })
    };
    store
        .put(&Path::from("wal/segment"), vec![1u8; 64 << 10].into())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "a large write waits for the bulk turn"
    );
    assert!(store.head(&Path::from("levels/later")).await.is_err());
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    waiting.await.unwrap().unwrap();
    let read = store.get(&Path::from("levels/later")).await.unwrap();
    assert_eq!(read.bytes().await.unwrap().len(), big.len());
}

/// A local-directory bucket under `dir/bucket`, counted and retried as `build` stacks it.
fn linking_stack(dir: &std::path::Path) -> (Arc<LocalDirStore>, ObjectStoreMetrics, StoreRef) {
    let local = Arc::new(LocalDirStore::new(&dir.join("bucket")).unwrap());
    let metrics = ObjectStoreMetrics::default();
    let store: StoreRef = Arc::new(RetryingStore::new(
        Arc::new(InstrumentedStore::new(local.clone(), metrics.clone())),
        RetryConfig::default(),
    ));
    (local, metrics, store)
}

/// A create-only put whose payload names its local source file (`LocalSource`) is a hard
/// link of that file: no second copy, synced, aged from the put, and still create-only,
/// through the whole decorator stack. A source of another length, or on another file
/// system, is written as any payload.
#[tokio::test]
async fn local_dir_links_a_named_source_file_instead_of_copying_it() {
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (local, metrics, store) = linking_stack(dir.path());

    let nvme = dir.path().join("nvme");
    std::fs::create_dir_all(&nvme).unwrap();
    let source = nvme.join("7.sst");
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&source, &bytes).unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::open(&source)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let put = |path: &'static str, payload: Vec<u8>, from: std::path::PathBuf| {
        let store = store.clone();
        async move {
            let mut opts = PutOptions::from(PutMode::Create);
            opts.extensions.insert(LocalSource::new(from));
            store
                .put_opts(&Path::from(path), payload.into(), opts)
                .await
        }
    };

    let before = local.syncs();
    let created = put("t/shard-1/sst/7.sst", bytes.clone(), source.clone())
        .await
        .unwrap();
    assert_eq!(
        local.syncs() - before,
        2 + 3,
        "the source, the directory, and three new directories"
    );
    assert_eq!(metrics.requests("put", "sst"), 1, "still a counted put");
    let object = dir.path().join("bucket/t/shard-1/sst/7.sst");
    let (a, b) = (
        std::fs::metadata(&source).unwrap(),
        std::fs::metadata(&object).unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "the object is the source file, linked");
    assert_eq!(b.nlink(), 2);
    let head = store
        .head(&Path::from("t/shard-1/sst/7.sst"))
        .await
        .unwrap();
    assert_eq!(created.e_tag, head.e_tag);
    let age = chrono::Utc::now() - head.last_modified;
    assert!(
        age < chrono::Duration::seconds(60),
        "the object's age starts at the put, not at the file's write: {age}"
    );
    assert_eq!(
        store
            .get(&Path::from("t/shard-1/sst/7.sst"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .as_ref(),
        &bytes[..]
    );

    // Still create-only.
    let err = put("t/shard-1/sst/7.sst", bytes.clone(), source.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );

    // Deleting the local file leaves the object whole.
    std::fs::remove_file(&source).unwrap();
    assert_eq!(std::fs::read(&object).unwrap(), bytes);

    // A source whose length is not the payload's is not linked: the payload is written.
    let other = nvme.join("8.sst");
    std::fs::write(&other, b"short").unwrap();
    put("t/shard-1/sst/8.sst", bytes.clone(), other.clone())
        .await
        .unwrap();
    let object = dir.path().join("bucket/t/shard-1/sst/8.sst");
    assert_ne!(
        std::fs::metadata(&other).unwrap().ino(),
        std::fs::metadata(&object).unwrap().ino()
    );
    assert_eq!(std::fs::read(&object).unwrap(), bytes);

    // A source on another file system (tmpfs, where the machine has one) is copied.
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let elsewhere = tempfile::tempdir_in(shm).unwrap();
        let far = elsewhere.path().join("9.sst");
        std::fs::write(&far, &bytes).unwrap();
        put("t/shard-1/sst/9.sst", bytes.clone(), far.clone())
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("bucket/t/shard-1/sst/9.sst")).unwrap(),
            bytes
        );
    }
}

/// A source file standing for an empty payload (`LocalSource::instead_of_payload`, the put
/// carrying no bytes) is linked the same way, counted at the file's length; where it cannot
/// be linked (another file system) its bytes are written; a length that differs from the
/// file's is refused rather than written short; and after a lost response the retry layer
/// recognises its own object by the file's bytes.
#[tokio::test]
async fn local_dir_takes_a_source_file_in_place_of_an_empty_payload() {
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (local, metrics, store) = linking_stack(dir.path());
    let nvme = dir.path().join("nvme");
    std::fs::create_dir_all(&nvme).unwrap();
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
    let put = |store: StoreRef, path: &'static str, from: std::path::PathBuf, len: u64| async move {
        let mut opts = PutOptions::from(PutMode::Create);
        opts.extensions
            .insert(LocalSource::instead_of_payload(from, len));
        store
            .put_opts(&Path::from(path), Vec::<u8>::new().into(), opts)
            .await
    };
    let read = |p: &str| std::fs::read(dir.path().join("bucket").join(p)).unwrap();

    let source = nvme.join("1.sst");
    std::fs::write(&source, &bytes).unwrap();
    put(
        store.clone(),
        "t/s/sst/1.sst",
        source.clone(),
        bytes.len() as u64,
    )
    .await
    .unwrap();
    let object = dir.path().join("bucket/t/s/sst/1.sst");
    assert_eq!(
        std::fs::metadata(&source).unwrap().ino(),
        std::fs::metadata(&object).unwrap().ino(),
        "linked"
    );
    assert_eq!(read("t/s/sst/1.sst"), bytes);
    assert_eq!(
        metrics.bytes("put", "sst"),
        bytes.len() as u64,
        "counted at the file's length"
    );

    // A length that is not the file's: neither linked nor written short.
    let err = put(store.clone(), "t/s/sst/2.sst", source.clone(), 5)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the put said 5"), "{err}");
    assert!(
        store.head(&Path::from("t/s/sst/2.sst")).await.is_err(),
        "nothing written"
    );

    // Another file system: the file's bytes are written.
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let elsewhere = tempfile::tempdir_in(shm).unwrap();
        let far = elsewhere.path().join("3.sst");
        std::fs::write(&far, &bytes).unwrap();
        put(
            store.clone(),
            "t/s/sst/3.sst",
            far.clone(),
            bytes.len() as u64,
        )
        .await
        .unwrap();
        assert_ne!(
            std::fs::metadata(&far).unwrap().ino(),
            std::fs::metadata(dir.path().join("bucket/t/s/sst/3.sst"))
                .unwrap()
                .ino()
        );
        assert_eq!(read("t/s/sst/3.sst"), bytes);
    }

    // The first attempt lands and its response is lost; the retry finds the object and
    // compares it with the file, not with the empty payload.
    let faults = Arc::new(FaultInjectingStore::new(
        local.clone(),
        FaultConfig::default(),
    ));
    let lossy: StoreRef = Arc::new(RetryingStore::new(faults.clone(), RetryConfig::default()));
    let source = nvme.join("4.sst");
    std::fs::write(&source, &bytes).unwrap();
    faults.lose_next(1);
    put(
        lossy.clone(),
        "t/s/sst/4.sst",
        source.clone(),
        bytes.len() as u64,
    )
    .await
    .expect("the retry recognises the object its lost attempt wrote");
    assert_eq!(faults.counts().lost_responses, 1);
    assert_eq!(read("t/s/sst/4.sst"), bytes);
}

/// Small create-only puts (WAL segments) are written into spare unnamed files made ahead of
/// time and linked into place: the same syncs, the same create-only refusal, the same
/// e-tags, and nothing in the directories but the objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_dir_small_creates_fill_spare_unnamed_files() {
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
    let dir = tempfile::tempdir().unwrap();
    let store = LocalDirStore::new(dir.path()).unwrap();
    let create = || PutOptions::from(PutMode::Create);
    // Spares are made on the blocking pool after a create-only put: wait for one.
    async fn spare_ready(store: &LocalDirStore) {
        for _ in 0..500 {
            if store.spares_ready() > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        panic!("no spare unnamed file made within a second");
    }
    assert_eq!(store.spares_ready(), 0, "none before the first put");
    let mut names = Vec::new();
    for i in 0..20u32 {
        if i > 0 {
            spare_ready(&store).await;
        }
        let at = Path::from(format!("wal/s{}/{i:020}.wal", i / 10));
        let before = store.syncs();
        let put = store
            .put_opts(&at, format!("segment {i}").into_bytes().into(), create())
            .await
            .unwrap();
        // File + directory, and each directory the put created: `wal` and `wal/s0` for
        // the first, `wal/s1` for the eleventh.
        let new_dirs = match i {
            0 => 2,
            10 => 1,
            _ => 0,
        };
        assert_eq!(store.syncs() - before, 2 + new_dirs, "put {i}");
        assert_eq!(put.e_tag, store.head(&at).await.unwrap().e_tag, "put {i}");
        names.push(at);
    }
    // Every put after the first (including the one into a new directory) took a spare.
    assert_eq!(store.spares_taken(), 19);
    for (i, at) in names.iter().enumerate() {
        let got = store.get(at).await.unwrap().bytes().await.unwrap();
        assert_eq!(got.as_ref(), format!("segment {i}").as_bytes());
    }
    // A spare never takes a name that is already an object's.
    spare_ready(&store).await;
    let err = store
        .put_opts(&names[3], b"other".to_vec().into(), create())
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );
    assert_eq!(store.spares_taken(), 20, "the refused put took a spare");
    let got = store.get(&names[3]).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), b"segment 3");
    // Nothing but the objects on the disk: spares have no names.
    let mut on_disk = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                on_disk.push(p.strip_prefix(dir.path()).unwrap().display().to_string());
            }
        }
    }
    on_disk.sort();
    let mut want: Vec<String> = names.iter().map(|p| p.to_string()).collect();
    want.sort();
    assert_eq!(on_disk, want);
}
