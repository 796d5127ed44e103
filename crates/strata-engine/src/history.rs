//! Time travel's history: the seq-time index a manifest carries and the history horizon,
//! the sequence number below which compaction may merge a key's versions.
//!
//! Pure functions on plain values (no shard, no I/O); the shard supplies its manifest's
//! entries, the ones acknowledged since, its clock and its byte counts.
//!
//! The horizon is the newer of two bounds: the newest sequence number acknowledged at least
//! `history_retention_ms` ago (time travel's window), and the newest one after which more
//! than the byte budget has been written (so a table rewritten quickly keeps a shorter
//! window rather than many copies of its data in every merge; Luo ch. 5's sustained
//! writes stall once the merges carry them).

use strata_manifest::SeqTime;

/// Bound on a manifest's seq-time entries (about 40 bytes each in JSON).
pub(crate) const SEQ_TIMES_MAX: usize = 4096;

/// Appends `t` to ascending seq-time entries: it replaces the last entry when both fall in
/// the same second and the last entry would still span at most `quantum` bytes from the
/// entry before it (so consecutive entries are at most a second or a quantum apart, and
/// the byte budget resolves that finely even when a second writes more), and is dropped
/// when older than the last. `before`: the bytes of the entry preceding `out`'s first (0
/// if none).
pub(crate) fn push_seq_time(out: &mut Vec<SeqTime>, t: SeqTime, quantum: u64, before: u64) {
    let start = match out.len() {
        0 | 1 => before,
        n => out[n - 2].bytes,
    };
    match out.last_mut() {
        Some(last) if t.ms < last.ms || t.seq < last.seq => {}
        Some(last)
            if last.ms / 1000 == t.ms / 1000 && t.bytes.saturating_sub(start) <= quantum.max(1) =>
        {
            *last = t
        }
        _ => out.push(t),
    }
}

/// Merges a manifest's seq-time entries with newer ones ([`push_seq_time`]), keeping only
/// one entry at or below `horizon` (the anchor that resolves times just inside the
/// history) and at most [`SEQ_TIMES_MAX`] entries (the oldest after the anchor thinned).
/// The caller passes a horizon no newer than what compaction has merged (the manifest's
/// `compaction_floor_seq`): a time whose entry is gone must be refused as too old, never
/// resolved to an empty table.
pub(crate) fn merge_seq_times(
    old: &[SeqTime],
    new: &[SeqTime],
    horizon: u64,
    quantum: u64,
) -> Vec<SeqTime> {
    let mut out: Vec<SeqTime> = Vec::with_capacity(old.len() + new.len());
    for t in old.iter().chain(new.iter()) {
        push_seq_time(&mut out, *t, quantum, 0);
    }
    let older = out.iter().filter(|t| t.seq <= horizon).count();
    if older > 1 {
        out.drain(..older - 1);
    }
    if out.len() > SEQ_TIMES_MAX {
        let excess = out.len() - SEQ_TIMES_MAX;
        // Keep the anchor (index 0); thin the oldest entries after it.
        out.drain(1..=excess);
    }
    out
}

/// Bytes written between two seq-time entries of the same second that keep both: an
/// eighth of the smallest history, so the byte budget's horizon is that precise.
pub(crate) fn seq_time_quantum(history_bytes_min: u64) -> u64 {
    (history_bytes_min / 8).max(1)
}

/// The byte budget of a shard's history: `ratio` of its stored bytes, at least `min`;
/// `None` (no cap) when `ratio` is 0 (`Db::open` refuses negative or non-finite ones).
pub(crate) fn bytes_budget(ratio: f64, min: u64, stored_bytes: u64) -> Option<u64> {
    if ratio <= 0.0 || !ratio.is_finite() {
        return None;
    }
    Some(((stored_bytes as f64 * ratio) as u64).max(min))
}

/// What the horizon is computed from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HorizonInputs {
    /// The writer's clock.
    pub now_ms: u64,
    /// Time travel's window (`history_retention_ms`, not 0).
    pub retention_ms: u64,
    /// Bytes written to the shard so far (the counter `SeqTime::bytes` samples).
    pub written_bytes: u64,
    /// The history's byte budget ([`bytes_budget`]).
    pub bytes_max: Option<u64>,
}

/// The history horizon over a shard's seq-time entries (ascending): every version above it
/// is kept by compaction. Entries without a byte count (0, written before it was recorded)
/// never move the horizon by size.
pub(crate) fn horizon<'a>(times: impl IntoIterator<Item = &'a SeqTime>, at: HorizonInputs) -> u64 {
    let cutoff = at.now_ms.saturating_sub(at.retention_ms);
    let mut horizon = 0;
    for t in times {
        let too_old = t.ms <= cutoff;
        let too_much = at
            .bytes_max
            .is_some_and(|max| t.bytes > 0 && at.written_bytes.saturating_sub(t.bytes) > max);
        if too_old || too_much {
            horizon = horizon.max(t.seq);
        }
    }
    horizon
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64, seq: u64, bytes: u64) -> SeqTime {
        SeqTime { ms, seq, bytes }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_horizon_is_the_newer_of_the_window_and_the_byte_budget() {
        // One entry a second for 100 s, 10 MiB written a second, seq = second.
        let times: Vec<SeqTime> = (1..=100).map(|s| t(s * 1000, s, s * 10 * MIB)).collect();
        let at = |now_s: u64, retention_s: u64, bytes_max: Option<u64>| HorizonInputs {
            now_ms: now_s * 1000,
            retention_ms: retention_s * 1000,
            written_bytes: 100 * 10 * MIB,
            bytes_max,
        };
        let cases = [
            // (now, window, budget) -> horizon
            ((100, 900, None), 0), // the whole run is inside the window
            ((100, 30, None), 70), // the window alone
            ((100, 900, Some(200 * MIB)), 79), // over 200 MiB written after seq 79
            ((100, 30, Some(200 * MIB)), 79), // the budget is the newer bound
            ((100, 10, Some(200 * MIB)), 90), // the window is the newer bound
            ((100, 900, Some(10_000 * MIB)), 0),
        ];
        for ((now, window, budget), want) in cases {
            assert_eq!(
                horizon(&times, at(now, window, budget)),
                want,
                "now {now} s, window {window} s, budget {budget:?}"
            );
        }
    }

    #[test]
    fn entries_without_a_byte_count_are_kept_by_the_window_alone() {
        let times = [t(1000, 1, 0), t(2000, 2, 0), t(3000, 3, 5 * MIB)];
        let at = HorizonInputs {
            now_ms: 4000,
            retention_ms: 900_000,
            written_bytes: 500 * MIB,
            bytes_max: Some(64 * MIB),
        };
        assert_eq!(horizon(&times, at), 3);
        assert_eq!(horizon(&times[..2], at), 0);
    }

    #[test]
    fn the_budget_is_a_share_of_the_stored_bytes_with_a_floor() {
        let min = 64 * MIB;
        assert_eq!(bytes_budget(0.0, min, 10 << 30), None);
        assert_eq!(bytes_budget(f64::NAN, min, 10 << 30), None);
        assert_eq!(bytes_budget(0.5, min, 10 << 30), Some(5 << 30));
        assert_eq!(bytes_budget(0.5, min, MIB), Some(min));
    }

    #[test]
    fn seq_times_keep_one_entry_a_second_and_one_anchor_at_the_horizon() {
        let old = [t(1_000, 1, 10), t(2_000, 2, 20), t(3_000, 3, 30)];
        let new = [t(3_500, 4, 40), t(4_000, 5, 50), t(3_900, 3, 0)];
        let merged = merge_seq_times(&old, &new, 2, 1000);
        assert_eq!(
            merged,
            vec![t(2_000, 2, 20), t(3_500, 4, 40), t(4_000, 5, 50)]
        );
    }

    #[test]
    fn a_second_that_writes_more_than_the_quantum_keeps_entries_a_quantum_apart() {
        let mut out = vec![t(500, 1, 0)];
        for (i, bytes) in [10, 60, 110, 160, 210].into_iter().enumerate() {
            push_seq_time(&mut out, t(1_000 + i as u64, i as u64 + 2, bytes), 100, 0);
        }
        // All in one second, 50 bytes at a time: an entry spans at most 100 bytes from the
        // one before it (not 50 from its own last update, which would keep one entry).
        assert_eq!(
            out.iter().map(|t| t.bytes).collect::<Vec<_>>(),
            vec![0, 60, 160, 210]
        );
        for w in out.windows(2) {
            assert!(w[1].bytes - w[0].bytes <= 100, "{out:?}");
        }
        // A writer's pending entries continue from the manifest's last one: the first of
        // them does not swallow a second's writes either.
        let mut pending = Vec::new();
        for (i, bytes) in [1_050, 1_100, 1_150, 1_200].into_iter().enumerate() {
            push_seq_time(
                &mut pending,
                t(7_000 + i as u64, 10 + i as u64, bytes),
                100,
                1_000,
            );
        }
        assert_eq!(
            pending.iter().map(|t| t.bytes).collect::<Vec<_>>(),
            vec![1_100, 1_200]
        );
    }
}
