//! Thresholds by size-weighted sampling (HotRAP §3.2), on plain values.

use super::record::Record;

/// xorshift64*: sampling needs speed and reproducibility, not cryptographic quality.
pub(super) fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The score S' such that the records scoring at least S' weigh about `target` by `size`
/// (§3.2): `points` positions drawn uniformly over the total weight map to records in
/// proportion to their size; with `k = points · target / total`, S' is the k-th largest
/// sampled score.
pub fn threshold(
    records: &[Record],
    size: fn(&Record) -> u64,
    target: u64,
    tick: u64,
    alpha: f64,
    points: usize,
    rng: &mut u64,
) -> f64 {
    let total: u64 = records.iter().map(size).sum();
    if total == 0 || target >= total || points == 0 {
        return 0.0;
    }
    let mut positions: Vec<u64> = (0..points).map(|_| next_random(rng) % total).collect();
    positions.sort_unstable();
    let mut scores = Vec::with_capacity(points);
    let (mut upto, mut i) = (0u64, 0usize);
    for r in records {
        upto += size(r);
        while i < positions.len() && positions[i] < upto {
            scores.push(r.score_at(tick, alpha));
            i += 1;
        }
    }
    scores.sort_by(|a, b| b.total_cmp(a));
    let k = ((points as f64) * target as f64 / total as f64).round() as usize;
    if k == 0 {
        return scores.first().map_or(0.0, |s| s.next_up());
    }
    scores[(k - 1).min(scores.len() - 1)]
}
