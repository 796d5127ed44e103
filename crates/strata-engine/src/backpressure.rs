//! Backpressure, the decision: whether a shard takes a write now or refuses it until
//! flushes and compaction catch up. A pure function of the shard's tree shape and its
//! settings; the shard applies it (`Shard::write`) and wakes its background work on a
//! refusal.

use crate::config::EngineConfig;

/// Why a write is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// More sorted runs than `sorted_runs_max` (reads would merge too many).
    SortedRuns,
    /// `memtables_frozen_max` frozen memtables wait for a flush (memory would grow).
    FrozenMemtables,
}

/// Whether a shard with `sorted_runs` sorted runs and `frozen` frozen memtables refuses
/// a write (None: it takes it). A limit of 0 frozen memtables counts as 1: the active
/// memtable must be able to freeze once.
pub(crate) fn refuses(sorted_runs: usize, frozen: usize, config: &EngineConfig) -> Option<Refusal> {
    if sorted_runs > config.sorted_runs_max {
        Some(Refusal::SortedRuns)
    } else if frozen >= config.memtables_frozen_max.max(1) {
        Some(Refusal::FrozenMemtables)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_table() {
        let mut config = EngineConfig {
            sorted_runs_max: 24,
            ..EngineConfig::default()
        };
        // (sorted runs, frozen memtables, frozen limit, expected)
        let cases = [
            (0, 0, 4, None),
            (24, 3, 4, None),
            (25, 0, 4, Some(Refusal::SortedRuns)),
            (25, 4, 4, Some(Refusal::SortedRuns)),
            (24, 4, 4, Some(Refusal::FrozenMemtables)),
            (0, 1, 0, Some(Refusal::FrozenMemtables)),
            (0, 0, 0, None),
        ];
        for (runs, frozen, limit, want) in cases {
            config.memtables_frozen_max = limit;
            assert_eq!(
                refuses(runs, frozen, &config),
                want,
                "runs {runs}, frozen {frozen}, limit {limit}"
            );
        }
    }
}
