//! Criterion benches: memtable insert, SST build, SST point lookup, batched engine writes.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use strata_engine::entry::{Entry, EntryKind};
use strata_engine::memtable::Memtable;
use strata_engine::schema::PreparedEntry;
use strata_engine::sst::{SstBuilder, SstReader};
use strata_engine::{Db, EngineConfig, WriteOptions};

fn key(i: u64) -> Bytes {
    Bytes::from(format!("user{:020}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes())
}

fn entries(n: u64, value_bytes: usize) -> Vec<PreparedEntry> {
    (0..n)
        .map(|i| PreparedEntry {
            key: key(i),
            kind: EntryKind::Put,
            value: Bytes::from(vec![b'v'; value_bytes]),
        })
        .collect()
}

fn memtable_insert(c: &mut Criterion) {
    let batch = entries(1000, 200);
    let mut g = c.benchmark_group("memtable_insert");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000x200B", |b| {
        b.iter(|| {
            let m = Memtable::new();
            for (i, e) in batch.iter().enumerate() {
                m.insert(i as u64 + 1, 1, std::slice::from_ref(e));
            }
            m
        })
    });
    g.finish();
}

fn sorted_entries(n: u64, value_bytes: usize) -> Vec<Entry> {
    let mut v: Vec<Entry> = entries(n, value_bytes)
        .into_iter()
        .enumerate()
        .map(|(i, e)| Entry {
            key: e.key,
            seq: i as u64 + 1,
            kind: e.kind,
            value: e.value,
        })
        .collect();
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

fn sst_build_and_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = sorted_entries(20_000, 200);
    let mut g = c.benchmark_group("sst");
    g.throughput(Throughput::Elements(data.len() as u64));
    g.bench_function("build_20000x200B", |b| {
        b.iter(|| {
            let mut sb = SstBuilder::create(&dir.path().join("b.sst"), 4096, 10).unwrap();
            for e in &data {
                sb.add(e).unwrap();
            }
            sb.finish().unwrap()
        })
    });
    let path = dir.path().join("lookup.sst");
    let mut sb = SstBuilder::create(&path, 4096, 10).unwrap();
    for e in &data {
        sb.add(e).unwrap();
    }
    sb.finish().unwrap();
    let reader = SstReader::open(&path).unwrap();
    g.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    g.bench_function("point_lookup_hit", |b| {
        b.iter(|| {
            i = (i + 7919) % 20_000;
            let got = reader.get(&key(i), u64::MAX).unwrap();
            assert_eq!(got.len(), 1);
        })
    });
    g.bench_function("point_lookup_miss", |b| {
        b.iter(|| {
            i += 1;
            reader.get(&key(1_000_000 + i), u64::MAX).unwrap()
        })
    });
    g.finish();
}

fn batched_writes(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut g = c.benchmark_group("engine_write");
    for batch in [1usize, 100] {
        let dir = tempfile::tempdir().unwrap();
        let (db, table) = rt.block_on(async {
            let db = Db::open_with_store(
                Arc::new(strata_objstore::LocalDirStore::new(&dir.path().join("bucket")).unwrap()),
                None,
                Default::default(),
                dir.path().join("nvme"),
                EngineConfig::default(),
                strata_common::clock::system(),
            )
            .await
            .unwrap();
            db.create_kv_namespace("kv").await.unwrap();
            let t = db.table("kv").await.unwrap();
            (db, t)
        });
        let value = vec![b'v'; 200];
        let mut n = 0u64;
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(
            BenchmarkId::new("kv_put_remote_localdir", batch),
            &batch,
            |b, &batch| {
                b.iter(|| {
                    let keys: Vec<Bytes> = (0..batch)
                        .map(|_| {
                            n += 1;
                            key(n)
                        })
                        .collect();
                    let pairs: Vec<(&[u8], &[u8])> = keys
                        .iter()
                        .map(|k| (k.as_ref(), value.as_slice()))
                        .collect();
                    rt.block_on(table.kv_put(&pairs, WriteOptions::default()))
                        .unwrap()
                })
            },
        );
        rt.block_on(db.close());
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = memtable_insert, sst_build_and_lookup, batched_writes
}
criterion_main!(benches);
