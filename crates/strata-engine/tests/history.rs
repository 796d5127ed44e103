//! Time travel's history is bounded by size as well as by time (`history_bytes_ratio`): a
//! table rewritten quickly keeps a shorter window, says so when asked for more, and reads
//! what it keeps exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{rows, view_point_at};
use strata_engine::{AsOf, Db, Error};

/// Rounds of rewriting every key.
const ROUNDS: usize = 10;
/// Keys rewritten each round.
const KEYS: i64 = 200;

/// The value of key `k` written in `round`: distinct, and not compressible to nothing.
fn value(round: usize, k: i64) -> String {
    let mut x = (round as u64 * 1_000_003 + k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut s = format!("{round}-{k}-");
    for _ in 0..12 {
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        s.push_str(&format!("{:08x}", x as u32));
    }
    s
}

/// A table whose keys were each rewritten `ROUNDS` times, one flush (a manifest commit) a
/// round and nothing compacted in the background; with `drain`, then moved to the bottom
/// of the tree (every compaction and cross-tier job run). The sequence number and the
/// writer's clock after each round.
struct Rounds {
    _tmp: tempfile::TempDir,
    db: Db,
    seqs: Vec<u64>,
    times: Vec<u64>,
}

async fn rewritten(ratio: f64, drain: bool) -> Rounds {
    let tmp = tempfile::tempdir().unwrap();
    let store = common::memory_store();
    let mut c = common::small_config();
    c.history_retention_ms = 3_600_000; // the window alone would keep every round
    c.history_bytes_ratio = ratio;
    c.history_bytes_min = 16 << 10; // a round writes more than this
    c.l0_compaction_trigger = 1_000;
    c.l0_settle_ms = 0;
    let db = common::open(&store, tmp.path(), c).await;
    db.create_table("t", common::schema(), &["id"])
        .await
        .unwrap();
    let t = db.table("t").await.unwrap();
    let ids: Vec<i64> = (0..KEYS).collect();
    let (mut seqs, mut times) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let a: Vec<String> = ids.iter().map(|&k| value(round, k)).collect();
        let a: Vec<Option<&str>> = a.iter().map(|s| Some(s.as_str())).collect();
        let b: Vec<Option<i64>> = vec![Some(round as i64); ids.len()];
        seqs.push(t.upsert(rows(&ids, &a, &b)).await.unwrap());
        times.push(strata_common::clock::system().now_ms()); // the clock the writer uses
        t.flush().await.unwrap();
        // Rounds a few milliseconds apart: a time resolves to one of them.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    if drain {
        t.drain_to_bucket().await.unwrap();
    }
    Rounds {
        _tmp: tmp,
        db,
        seqs,
        times,
    }
}

/// Key `k` as of round `round`'s sequence number, or the view's error.
async fn as_of_round(
    db: &Db,
    seqs: &[u64],
    round: usize,
    k: i64,
) -> strata_engine::Result<Option<(i64, Option<String>, Option<i64>)>> {
    view_point_at(db, "t", k, Some(AsOf::Seq(seqs[round]))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_rewritten_past_its_byte_budget_keeps_a_shorter_exact_history() {
    let Rounds { _tmp, db, seqs, .. } = rewritten(0.5, true).await;
    // The newest rounds read exactly as they were written.
    for round in [ROUNDS - 2, ROUNDS - 1] {
        for k in [0, 77, KEYS - 1] {
            let got = as_of_round(&db, &seqs, round, k).await.unwrap();
            assert_eq!(
                got,
                Some((k, Some(value(round, k)), Some(round as i64))),
                "key {k} as of round {round}"
            );
        }
    }
    // The first round was merged away, and the error says how far back reads reach.
    match as_of_round(&db, &seqs, 0, 77).await {
        Err(Error::SnapshotTooOld { requested, floor }) => {
            assert_eq!(requested, seqs[0]);
            assert!(
                floor > seqs[0] && floor <= seqs[ROUNDS - 2],
                "floor {floor}, rounds {seqs:?}"
            );
        }
        other => panic!("round 0 should be too old to read, got {other:?}"),
    }
    // The latest state is untouched.
    assert_eq!(
        common::view_point(&db, "t", 5).await,
        Some((5, Some(value(ROUNDS - 1, 5)), Some(ROUNDS as i64 - 1)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_byte_budget_the_whole_window_is_kept() {
    let Rounds { _tmp, db, seqs, .. } = rewritten(0.0, true).await;
    for round in [0, ROUNDS / 2, ROUNDS - 1] {
        let got = as_of_round(&db, &seqs, round, 77).await.unwrap();
        assert_eq!(
            got,
            Some((77, Some(value(round, 77)), Some(round as i64))),
            "as of round {round}"
        );
    }
}

/// Before compaction merges anything (its floor still 0), a time inside the window reads
/// exactly what was acknowledged by then, however far the byte budget has moved: the
/// seq-time index keeps the entries (it once dropped them and read such a time as an
/// empty table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_inside_the_window_reads_exactly_before_anything_is_merged() {
    let Rounds {
        _tmp, db, times, ..
    } = rewritten(0.5, false).await;
    for round in [0, 1, ROUNDS - 1] {
        let got = view_point_at(&db, "t", 77, Some(AsOf::TimestampMs(times[round])))
            .await
            .unwrap();
        assert_eq!(
            got,
            Some((77, Some(value(round, 77)), Some(round as i64))),
            "as of the time of round {round}"
        );
    }
}

/// A byte ratio that is not a number >= 0 is refused when the database opens, naming the
/// setting, rather than silently turning the cap off.
#[tokio::test]
async fn a_bad_byte_ratio_is_refused_at_open() {
    for bad in [-0.5, f64::NAN, f64::INFINITY] {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = common::small_config();
        c.history_bytes_ratio = bad;
        let err = Db::open_with_store(
            common::memory_store(),
            None,
            Default::default(),
            tmp.path().to_path_buf(),
            c,
            strata_common::clock::system(),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("ratio {bad} was accepted"));
        assert!(
            err.to_string().contains("history_bytes_ratio"),
            "ratio {bad}: {err}"
        );
        assert!(
            std::fs::read_dir(tmp.path()).unwrap().next().is_none(),
            "ratio {bad}: the local directory was written"
        );
    }
}
