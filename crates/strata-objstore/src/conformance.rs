//! One conformance suite for every backend (memory, local directory, S3/LocalStack) and for
//! the decorator stack. Each check panics with a message naming the broken rule.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

fn p(base: &Path, rest: &str) -> Path {
    Path::from(format!("{base}/{rest}"))
}

async fn list_names(store: &dyn ObjectStore, prefix: &Path) -> Vec<String> {
    let mut names: Vec<String> = store
        .list(Some(prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    names
}

/// Runs every check under `base` (a prefix unique to this run).
pub async fn run_all(store: &dyn ObjectStore, base: &Path) {
    put_get_delete_list(store, &p(base, "basic")).await;
    ranges_and_head(store, &p(base, "ranges")).await;
    list_with_offset_and_delimiter(store, &p(base, "listing")).await;
    conditional_create(store, &p(base, "create")).await;
    conditional_update(store, &p(base, "update")).await;
    concurrent_creates_have_one_winner(store, &p(base, "race")).await;
}

pub async fn put_get_delete_list(store: &dyn ObjectStore, base: &Path) {
    let a = p(base, "a");
    let b = p(base, "dir/b");
    store
        .put(&a, Bytes::from_static(b"alpha").into())
        .await
        .unwrap();
    store
        .put(&b, Bytes::from_static(b"beta").into())
        .await
        .unwrap();
    assert_eq!(
        &store.get(&a).await.unwrap().bytes().await.unwrap()[..],
        b"alpha"
    );
    // overwrite is atomic and visible
    store
        .put(&a, Bytes::from_static(b"alpha2").into())
        .await
        .unwrap();
    assert_eq!(
        &store.get(&a).await.unwrap().bytes().await.unwrap()[..],
        b"alpha2"
    );
    assert_eq!(
        list_names(store, base).await,
        vec![a.to_string(), b.to_string()]
    );
    store.delete(&a).await.unwrap();
    assert!(
        matches!(
            store.get(&a).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "get after delete must be NotFound"
    );
    assert_eq!(list_names(store, base).await, vec![b.to_string()]);
    store.delete(&b).await.unwrap();
    assert!(list_names(store, base).await.is_empty());
}

pub async fn ranges_and_head(store: &dyn ObjectStore, base: &Path) {
    let a = p(base, "obj");
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    store
        .put(&a, Bytes::from(data.clone()).into())
        .await
        .unwrap();
    let meta = store.head(&a).await.unwrap();
    assert_eq!(meta.size, 10_000);
    let r = store.get_range(&a, 100..300).await.unwrap();
    assert_eq!(&r[..], &data[100..300]);
    let rs = store.get_ranges(&a, &[0..10, 9_990..10_000]).await.unwrap();
    assert_eq!(&rs[0][..], &data[0..10]);
    assert_eq!(&rs[1][..], &data[9_990..10_000]);
    assert!(matches!(
        store.head(&p(base, "missing")).await,
        Err(object_store::Error::NotFound { .. })
    ));
    store.delete(&a).await.unwrap();
}

pub async fn list_with_offset_and_delimiter(store: &dyn ObjectStore, base: &Path) {
    for i in 0..5 {
        store
            .put(
                &p(base, &format!("{i:020}")),
                Bytes::from(vec![i as u8]).into(),
            )
            .await
            .unwrap();
    }
    store
        .put(&p(base, "sub/x"), Bytes::from_static(b"x").into())
        .await
        .unwrap();
    let mut after: Vec<String> = store
        .list_with_offset(Some(base), &p(base, &format!("{:020}", 2)))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    after.sort();
    assert_eq!(
        after,
        vec![
            p(base, &format!("{:020}", 3)).to_string(),
            p(base, &format!("{:020}", 4)).to_string(),
            p(base, "sub/x").to_string()
        ]
    );
    let listed = store.list_with_delimiter(Some(base)).await.unwrap();
    assert_eq!(listed.objects.len(), 5);
    assert_eq!(listed.common_prefixes, vec![p(base, "sub")]);
    for m in store
        .list(Some(base))
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
    {
        store.delete(&m.location).await.unwrap();
    }
}

pub async fn conditional_create(store: &dyn ObjectStore, base: &Path) {
    let a = p(base, "manifest");
    let create = PutOptions::from(PutMode::Create);
    store
        .put_opts(&a, Bytes::from_static(b"v1").into(), create.clone())
        .await
        .expect("create-if-absent of a new object succeeds");
    let second = store
        .put_opts(&a, Bytes::from_static(b"v2").into(), create)
        .await;
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "If-None-Match on an existing object must fail with AlreadyExists, got {second:?}"
    );
    assert_eq!(
        &store.get(&a).await.unwrap().bytes().await.unwrap()[..],
        b"v1"
    );
    store.delete(&a).await.unwrap();
}

pub async fn conditional_update(store: &dyn ObjectStore, base: &Path) {
    let a = p(base, "lease");
    let r1 = store
        .put_opts(&a, Bytes::from_static(b"v1").into(), PutMode::Create.into())
        .await
        .unwrap();
    let v1 = UpdateVersion::from(r1);
    let r2 = store
        .put_opts(
            &a,
            Bytes::from_static(b"v2").into(),
            PutMode::Update(v1.clone()).into(),
        )
        .await
        .expect("If-Match with the current e-tag succeeds");
    // A writer still holding v1's e-tag lost the race.
    let stale = store
        .put_opts(
            &a,
            Bytes::from_static(b"v3").into(),
            PutMode::Update(v1).into(),
        )
        .await;
    assert!(
        matches!(stale, Err(object_store::Error::Precondition { .. })),
        "If-Match with a stale e-tag must fail with Precondition, got {stale:?}"
    );
    assert_eq!(
        &store.get(&a).await.unwrap().bytes().await.unwrap()[..],
        b"v2"
    );
    // A conditional update of a missing object fails too.
    let missing = store
        .put_opts(
            &p(base, "missing"),
            Bytes::from_static(b"x").into(),
            PutMode::Update(UpdateVersion::from(r2)).into(),
        )
        .await;
    assert!(missing.is_err(), "If-Match on a missing object must fail");
    store.delete(&a).await.unwrap();
}

pub async fn concurrent_creates_have_one_winner(store: &dyn ObjectStore, base: &Path) {
    let a = p(base, "next");
    let attempts = (0..8u8).map(|i| {
        let a = a.clone();
        async move {
            store
                .put_opts(&a, Bytes::from(vec![i]).into(), PutMode::Create.into())
                .await
                .map(|_| i)
        }
    });
    let results = futures::future::join_all(attempts).await;
    let winners: Vec<u8> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one concurrent create wins: {results:?}"
    );
    let stored = store.get(&a).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored[0], winners[0]);
    store.delete(&a).await.unwrap();
}
