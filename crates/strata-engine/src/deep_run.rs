//! The sorted run a scan reads column-wise (see [`crate::read::scan`]).
//!
//! A scan reads one run of columnar files by columns and lines everything above it up by
//! key (the overlay of the immutable upper tiers, the memtables). That run is the deepest
//! S3 level holding files, joined by every file of a shallower level that shares its
//! column-group layout and overlaps no file of any deeper level: no key of such a file
//! exists deeper, so it lines up with the deep level's files as one run.
//!
//! Under default level sizes this is where most of a table sits after a load in key order
//! (or any append-mostly load): the first columnar level fills with the newest keys while
//! the level below holds the oldest, and the first level is often the larger of the two
//! (levels fill from the top). Without joining, those files were folded into the overlay,
//! or, when too large for its memory budget, merged row by row into every scan (at 10M
//! rows of the 31-column table, 1 GB of the first level made a scan 39x slower than
//! DataFusion over the same rows in Parquet).

use std::collections::HashSet;

use strata_manifest::{Manifest, ParquetFileInfo};

use crate::schema::TableSchema;

/// The run a scan reads column-wise: per column group of the deep level, its files and the
/// joined files of shallower levels, in key order.
#[derive(Debug, Clone)]
pub(crate) struct DeepRun {
    /// The deepest S3 level holding files (its column-group layout is the run's).
    pub(crate) level: usize,
    /// Per group of the level: the run's files in key order.
    pub(crate) groups: Vec<Vec<ParquetFileInfo>>,
    /// Names of the files of shallower levels in the run.
    pub(crate) joined: HashSet<String>,
}

/// What a group's run holds: rows, sequence span and key span. Runs with the same signature
/// hold the same versions (every drain writes all groups of a version; a compaction of one
/// group moves only that group's part of them).
pub(crate) type Signature<'a> = (
    u64,
    Option<u64>,
    Option<u64>,
    Option<&'a [u8]>,
    Option<&'a [u8]>,
);

/// The signature of the files `files` (in key order).
pub(crate) fn signature<'a>(files: &[&'a ParquetFileInfo]) -> Signature<'a> {
    (
        files.iter().map(|f| f.rows).sum::<u64>(),
        files.iter().map(|f| f.seq_min).min(),
        files.iter().map(|f| f.seq_max).max(),
        files.first().map(|f| f.key_min.as_slice()),
        files.last().map(|f| f.key_max.as_slice()),
    )
}

fn overlaps(f: &ParquetFileInfo, spans: &[(&[u8], &[u8])]) -> bool {
    spans
        .iter()
        .any(|(lo, hi)| f.key_min.as_slice() <= *hi && *lo <= f.key_max.as_slice())
}

impl DeepRun {
    /// The run of `m`'s S3 levels for a table laid out as `table`; None when no S3 level
    /// holds files or the deepest one's groups are not the table's.
    pub(crate) fn of(table: &TableSchema, m: &Manifest) -> Option<Self> {
        let level = m
            .s3_levels
            .iter()
            .rposition(|l| l.groups.iter().any(|g| !g.files.is_empty()))?;
        let formats = table.groups.get(level)?;
        let runs = &m.s3_levels[level].groups;
        if formats.len() != runs.len() {
            return None;
        }
        let mut groups: Vec<Vec<ParquetFileInfo>> = runs.iter().map(|r| r.files.clone()).collect();
        let mut joined = HashSet::new();
        // Key spans of every file at or below the level being looked at (joined or not: a
        // shallower file must not share a key with any of them).
        let mut deeper: Vec<(&[u8], &[u8])> = runs
            .iter()
            .flat_map(|r| r.files.iter())
            .map(|f| (f.key_min.as_slice(), f.key_max.as_slice()))
            .collect();
        for up in (0..level).rev() {
            let up_runs = &m.s3_levels[up].groups;
            let same_layout = up_runs.len() == formats.len()
                && table.groups.get(up).is_some_and(|f| {
                    f.len() == formats.len()
                        && f.iter().zip(formats).all(|(a, b)| a.columns == b.columns)
                });
            if same_layout {
                let picks: Vec<Vec<&ParquetFileInfo>> = up_runs
                    .iter()
                    .map(|r| r.files.iter().filter(|f| !overlaps(f, &deeper)).collect())
                    .collect();
                // Every group must contribute the same versions, or the run's groups would
                // no longer line up row by row.
                let consistent = picks.iter().all(|p| signature(p) == signature(&picks[0]));
                if consistent {
                    for (g, p) in picks.into_iter().enumerate() {
                        for f in p {
                            joined.insert(f.name.clone());
                            groups[g].push(f.clone());
                        }
                    }
                }
            }
            deeper.extend(
                up_runs
                    .iter()
                    .flat_map(|r| r.files.iter())
                    .map(|f| (f.key_min.as_slice(), f.key_max.as_slice())),
            );
        }
        for files in &mut groups {
            files.sort_by(|a, b| a.key_min.cmp(&b.key_min));
        }
        Some(Self {
            level,
            groups,
            joined,
        })
    }

    /// The signature of group `g`'s files.
    pub(crate) fn signature(&self, g: usize) -> Option<Signature<'_>> {
        let files: Vec<&ParquetFileInfo> = self.groups.get(g)?.iter().collect();
        Some(signature(&files))
    }

    /// Whether the run holds the file named `name`, of a level above it.
    pub(crate) fn holds(&self, name: &str) -> bool {
        self.joined.contains(name)
    }
}
