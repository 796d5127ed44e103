//! Every decoder of a stored format, fed arbitrary and mutated bytes (issue 20, item 7):
//! it returns a value or an error, never panics, and never allocates by an untrusted
//! length. Checksummed formats are also fed mutations with the checksum recomputed, so the
//! parsers behind the checksum are reached. Objects read end to end (with the object named
//! in the error) are covered by `corrupt_objects.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use proptest::prelude::*;
use strata_engine::entry::{Entry, EntryKind};
use strata_engine::schema::PreparedEntry;
use strata_engine::sst::block::{Block, BlockBuilder};
use strata_engine::sst::bloom::{Bloom, BloomBuilder};
use strata_engine::sst::footer::{Footer, seal};
use strata_engine::sst::{SstBuilder, SstIter, SstReader};
use strata_engine::wal::segment::Segment;

/// One damage to a byte string.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Set(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Damage::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Damage::Set(i, v)),
        any::<usize>().prop_map(Damage::Truncate),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Damage::Insert(i, v)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Damage::Remove(i, n)),
    ]
}

fn apply(mut d: Vec<u8>, damages: &[Damage]) -> Vec<u8> {
    for x in damages {
        let n = d.len();
        match x {
            Damage::Flip(i, b) if n > 0 => d[i % n] ^= 1 << b,
            Damage::Set(i, v) if n > 0 => d[i % n] = *v,
            Damage::Truncate(i) => d.truncate(i % (n + 1)),
            Damage::Insert(i, v) => {
                let at = i % (n + 1);
                d.splice(at..at, v.iter().copied());
            }
            Damage::Remove(i, k) if n > 0 => {
                let at = i % n;
                d.drain(at..(at + k).min(n));
            }
            _ => {}
        }
    }
    d
}

/// Recomputes the trailing crc32c of a damaged WAL segment or SST block body.
fn resealed(body: Vec<u8>) -> Vec<u8> {
    seal(body)
}

fn entries() -> impl Strategy<Value = Vec<(Vec<u8>, u64, u8, Vec<u8>)>> {
    proptest::collection::vec(
        (
            proptest::collection::vec(any::<u8>(), 0..12),
            any::<u64>(),
            0u8..3,
            proptest::collection::vec(any::<u8>(), 0..24),
        ),
        0..24,
    )
}

fn kind(k: u8) -> EntryKind {
    EntryKind::from_u8(k).unwrap_or(EntryKind::Put)
}

fn segment_bytes(epoch: u64, es: &[(Vec<u8>, u64, u8, Vec<u8>)]) -> Vec<u8> {
    let prepared: Vec<PreparedEntry> = es
        .iter()
        .map(|(k, _, kd, v)| PreparedEntry {
            key: Bytes::from(k.clone()),
            kind: kind(*kd),
            value: Bytes::from(v.clone()),
        })
        .collect();
    let records: Vec<(u64, &[PreparedEntry])> = prepared
        .chunks(3)
        .enumerate()
        .map(|(i, c)| (i as u64 + 1, c))
        .collect();
    Segment::encode(epoch, &records)
}

fn block_bytes(es: &[(Vec<u8>, u64, u8, Vec<u8>)]) -> Vec<u8> {
    let mut sorted = es.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut b = BlockBuilder::default();
    for (k, s, kd, v) in &sorted {
        b.add(k, *s, kind(*kd), v);
    }
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn wal_segments_decode_or_fail(
        epoch in any::<u64>(),
        es in entries(),
        damages in proptest::collection::vec(damage(), 0..4),
        raw in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let good = segment_bytes(epoch, &es);
        let decoded = Segment::decode(&Bytes::from(good.clone())).unwrap();
        prop_assert_eq!(decoded.writer_epoch, epoch);
        let _ = Segment::decode(&Bytes::from(raw));
        let _ = Segment::decode(&Bytes::from(apply(good.clone(), &damages)));
        // Past the checksum: the body damaged, the crc recomputed.
        let body = good[..good.len() - 4].to_vec();
        let _ = Segment::decode(&Bytes::from(resealed(apply(body, &damages))));
    }

    #[test]
    fn sst_blocks_decode_or_fail(
        es in entries(),
        damages in proptest::collection::vec(damage(), 0..4),
        raw in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let good = block_bytes(&es);
        prop_assert_eq!(Block::decode(&Bytes::from(good.clone())).unwrap().entries.len(), es.len());
        let _ = Block::decode(&Bytes::from(raw.clone()));
        let _ = Block::decode(&Bytes::from(resealed(raw)));
        let _ = Block::decode(&Bytes::from(apply(good.clone(), &damages)));
        let body = good[..good.len() - 4].to_vec();
        if let Ok(b) = Block::decode(&Bytes::from(resealed(apply(body, &damages)))) {
            for e in b.entries {
                let _ = (e.key.len(), e.value.len());
            }
        }
    }

    #[test]
    fn sst_footers_and_blooms_decode_or_fail(
        raw in proptest::collection::vec(any::<u8>(), 0..96),
        fields in (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>(), any::<u64>()),
        key in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let _ = Footer::decode(&raw);
        let f = Footer {
            index_offset: fields.0,
            index_len: fields.1,
            bloom_offset: fields.2,
            bloom_len: fields.3,
            entries: fields.4,
        };
        prop_assert_eq!(Footer::decode(&f.encode()).unwrap(), f);
        let _ = Bloom::new(raw.clone()).may_contain(&key);
        let mut b = BloomBuilder::default();
        b.add(&key);
        prop_assert!(Bloom::new(b.build(10)).may_contain(&key));
    }

    #[test]
    fn json_objects_decode_or_fail(
        damages in proptest::collection::vec(damage(), 1..4),
        which in 0usize..4,
    ) {
        // Representative documents of each JSON kind the bucket holds.
        let m = strata_manifest::Manifest::empty(2);
        let docs = [
            serde_json::to_vec(&m).unwrap(),
            br#"{"format_version":1,"next_table_id":1,"tables":{}}"#.to_vec(),
            br#"{"job":"1-0-1-1","attempt":1,"worker":"w","outputs":[[]],"bytes_read":0,"bytes_written":0,"took_ms":1}"#.to_vec(),
            br#"{"id":"1-0-1-1","shard_dir":"t/1/0","target_level":0,"targets":[]}"#.to_vec(),
        ];
        let bad = apply(docs[which].clone(), &damages);
        let _ = serde_json::from_slice::<strata_manifest::Manifest>(&bad);
        let _ = serde_json::from_slice::<strata_manifest::Catalog>(&bad);
        let _ = serde_json::from_slice::<strata_engine::jobs::JobResult>(&bad);
        let _ = serde_json::from_slice::<strata_engine::jobs::JobSpec>(&bad);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A whole SST file damaged anywhere: opening it, point reads and a full iteration
    /// return values or errors naming the file.
    #[test]
    fn sst_files_open_and_read_or_fail(
        es in entries(),
        damages in proptest::collection::vec(damage(), 1..4),
        tail in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.sst");
        let mut sorted = es.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        sorted.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        if sorted.is_empty() {
            sorted.push((b"k".to_vec(), 1, 0, b"v".to_vec())); // an SST is never empty
        }
        let mut w = SstBuilder::create(&path, 64, 10).unwrap();
        for (k, s, kd, v) in &sorted {
            w.add(&Entry {
                key: Bytes::from(k.clone()),
                seq: *s,
                kind: kind(*kd),
                value: Bytes::from(v.clone()),
            })
            .unwrap();
        }
        w.finish().unwrap();
        let good = std::fs::read(&path).unwrap();
        // Damage the metadata at the end (footer, bloom, index) or anywhere.
        let damages: Vec<Damage> = if tail {
            let from = good.len().saturating_sub(160);
            damages
                .iter()
                .map(|d| match d {
                    Damage::Flip(i, b) => Damage::Flip(from + i % 160, *b),
                    Damage::Set(i, v) => Damage::Set(from + i % 160, *v),
                    other => other.clone(),
                })
                .collect()
        } else {
            damages
        };
        std::fs::write(&path, apply(good, &damages)).unwrap();
        match SstReader::open(&path) {
            Ok(r) => {
                let r = std::sync::Arc::new(r);
                for (k, _, _, _) in &sorted {
                    if let Err(e) = r.get(k, u64::MAX) {
                        prop_assert!(e.to_string().contains("000001.sst"), "{}", e);
                    }
                }
                let mut it = SstIter::new(r, &[]);
                use strata_engine::iter::EntryIter;
                for _ in 0..10_000 {
                    match it.next_entry() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => {
                            prop_assert!(e.to_string().contains("000001.sst"), "{}", e);
                            break;
                        }
                    }
                }
            }
            Err(e) => prop_assert!(e.to_string().contains("000001.sst"), "{}", e),
        }
    }
}
