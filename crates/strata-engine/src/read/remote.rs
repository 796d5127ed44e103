//! Reads of the columnar levels in the bucket: which groups a reader needs, one iterator
//! per (level, group) run over a key range, and the versions of one key, level by level,
//! until they decide the row. Reads go through the process's block and metadata caches;
//! nothing here writes.

use std::sync::Arc;

use strata_manifest::{Manifest, ParquetFileInfo};
use strata_objstore::StoreRef;

use crate::columnar::{BlockCache, MetaCache, ParquetSource, RunIter};
use crate::entry::{Entry, EntryKind};
use crate::error::Result;
use crate::iter::EntryIter;
use crate::row::RowValues;
use crate::schema::TableSchema;
use crate::state::ShardState;

/// Where a shard's Parquet files are and how they are cached.
pub(crate) struct BucketFiles<'a> {
    pub(crate) store: &'a StoreRef,
    pub(crate) paths: &'a strata_manifest::ShardPaths,
    pub(crate) cache: &'a Arc<BlockCache>,
    pub(crate) metas: &'a Arc<MetaCache>,
}

impl BucketFiles<'_> {
    pub(crate) fn parquet_source(&self, f: &ParquetFileInfo) -> ParquetSource {
        ParquetSource {
            store: self.store.clone(),
            path: self.paths.parquet(&f.name),
            info: f.clone(),
            cache: Some(self.cache.clone()),
            metas: self.metas.clone(),
        }
    }
}

/// The groups of each S3 level a reader of the non-key columns `needed` (None = all) must
/// read: the groups holding any of them, or the first group when none does (every version
/// is in every group, so any one group decides whether a row exists).
pub fn groups_needed(table: &TableSchema, level: usize, needed: Option<&[usize]>) -> Vec<usize> {
    let Some(formats) = table.groups.get(level) else {
        return Vec::new();
    };
    let mut wanted: Vec<usize> = match needed {
        None => (0..formats.len()).collect(),
        Some(cols) => (0..formats.len())
            .filter(|g| formats[*g].columns.iter().any(|c| cols.contains(c)))
            .collect(),
    };
    if wanted.is_empty() {
        wanted.push(0);
    }
    wanted
}

/// One iterator per (S3 level in `levels`, group needed) over the files overlapping
/// `[start, end)`, leaving out the files named in `skip`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_iters(
    table: &TableSchema,
    files: &BucketFiles<'_>,
    manifest: &Manifest,
    levels: std::ops::Range<usize>,
    skip: &std::collections::HashSet<String>,
    start: &[u8],
    end: Option<&[u8]>,
    needed: Option<&[usize]>,
    scan: bool,
    handle: &tokio::runtime::Handle,
) -> Vec<Box<dyn EntryIter>> {
    let mut out: Vec<Box<dyn EntryIter>> = Vec::new();
    for (li, level) in manifest.s3_levels.iter().enumerate() {
        if !levels.contains(&li) {
            continue;
        }
        let Some(formats) = table.groups.get(li) else {
            continue;
        };
        for g in groups_needed(table, li, needed) {
            let sources: Vec<ParquetSource> = level.groups[g]
                .files
                .iter()
                .filter(|f| !skip.contains(&f.name))
                .map(|f| files.parquet_source(f))
                .collect();
            if sources.is_empty() {
                continue;
            }
            let format = formats[g].clone();
            out.push(Box::new(match (scan, needed) {
                (true, Some(needed)) => {
                    let scan = crate::columnar::format::ScanColumns {
                        read: (0..format.columns.len())
                            .filter(|p| needed.contains(&format.columns[*p]))
                            .collect(),
                        puts_decide: needed.iter().all(|c| format.columns.contains(c)),
                    };
                    RunIter::for_scan(
                        handle.clone(),
                        format,
                        sources,
                        start,
                        end,
                        table.codec.clone(),
                        scan,
                    )
                }
                _ => RunIter::new(
                    handle.clone(),
                    format,
                    sources,
                    start,
                    end,
                    Some(table.codec.clone()),
                ),
            }));
        }
    }
    out
}

/// Adds the S3 levels' versions of `key` (at most `seq`) to `out`, level by level, until
/// the versions gathered decide the row. Blocking: call it on a blocking thread.
pub(crate) fn point_versions(
    table: &TableSchema,
    files: &BucketFiles<'_>,
    state: &ShardState,
    key: &[u8],
    seq: u64,
    out: &mut Vec<Entry>,
    handle: &tokio::runtime::Handle,
) -> Result<()> {
    strata_common::exec::wait(
        handle,
        point_versions_async(table, files, state, key, seq, out),
    )
}

/// [`point_versions`] on the caller's task: a lookup answered by the decoded-page
/// cache costs no thread hop.
pub(crate) async fn point_versions_async(
    table: &TableSchema,
    files: &BucketFiles<'_>,
    state: &ShardState,
    key: &[u8],
    seq: u64,
    out: &mut Vec<Entry>,
) -> Result<()> {
    // Each part with the columns of the group it came from.
    let mut parts: Vec<(Entry, &[usize])> = Vec::new();
    for (li, level) in state.manifest.value.s3_levels.iter().enumerate() {
        let Some(formats) = table.groups.get(li) else {
            continue;
        };
        for (g, run) in level.groups.iter().enumerate() {
            let i = run.files.partition_point(|f| f.key_max.as_slice() < key);
            let Some(f) = run.files.get(i).filter(|f| f.key_min.as_slice() <= key) else {
                continue;
            };
            let source = files.parquet_source(f);
            let found = source.lookup(&formats[g], key, seq).await?;
            for e in found {
                parts.push((formats[g].widen(&table.codec, &e)?, &formats[g].columns));
            }
        }
        if columns_decided(&table.codec, out, &parts)? {
            break;
        }
    }
    out.extend(parts.into_iter().map(|(e, _)| e));
    Ok(())
}

/// Whether every column's value is known from the versions gathered: `rows`, whole-row
/// versions from the row-oriented tiers, and `parts`, versions from the columnar levels
/// read so far, each speaking for the columns of its group only. A column group moves
/// down the levels on its own, so the parts of one version can sit at different levels:
/// an older delete read in one group says nothing of a newer version's columns in
/// another group not read yet. (Folding the parts as whole rows ended the search there
/// and returned the row without those columns.) A column is known once some version that
/// speaks for it is a delete, a whole row, or a part or partial row that sets it: deeper
/// levels hold only older versions of that column.
fn columns_decided(
    codec: &crate::row::RowCodec,
    rows: &[Entry],
    parts: &[(Entry, &[usize])],
) -> Result<bool> {
    // Per version: the columns it sets (None: all, a delete or a whole row), and the
    // columns it speaks for (None: all).
    let mut versions: Vec<(Option<RowValues>, Option<&[usize]>)> = Vec::new();
    let sets = |e: &Entry| -> Result<Option<RowValues>> {
        Ok(match e.kind {
            EntryKind::Partial => Some(codec.decode(&e.value)?),
            EntryKind::Put | EntryKind::Delete => None,
        })
    };
    for e in rows {
        versions.push((sets(e)?, None));
    }
    for (e, columns) in parts {
        versions.push((sets(e)?, Some(columns)));
    }
    Ok((0..codec.width()).all(|c| {
        versions.iter().any(|(values, columns)| {
            columns.is_none_or(|cols| cols.contains(&c))
                && values.as_ref().is_none_or(|v| v[c].is_some())
        })
    }))
}
