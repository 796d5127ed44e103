//! One attempt of a job: reads the inputs its spec names (row SSTs fetched into scratch
//! space, or one column group's Parquet files), merges and folds their versions, and writes
//! the output files of each target group. Commits nothing: the result goes back through
//! [`crate::store::jobs::hand_back`].

use std::sync::Arc;
use std::time::Duration;

use strata_manifest::{ParquetFileInfo, ShardPaths};
use strata_objstore::StoreRef;
use tokio_util::sync::CancellationToken;

use crate::columnar::reader::block_on_unless;
use crate::columnar::{FileShape, GroupFormat, MetaCache, ParquetSource, RunIter, RunWriter};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fold::collapse;
use crate::iter::{EntryIter, MergeIter};
use crate::row::RowCodec;
use crate::schema::TableSchema;
use crate::sst::SstIter;
use crate::store::jobs::{JobResult, JobSource, JobSpec};

/// Projects versions of another format into a group.
struct ProjectIter {
    inner: Box<dyn EntryIter>,
    from: RowCodec,
    from_columns: Option<Vec<usize>>,
    to: Arc<GroupFormat>,
}

impl EntryIter for ProjectIter {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        match self.inner.next_entry()? {
            None => Ok(None),
            Some(e) => Ok(Some(self.to.project_from(
                &self.from,
                self.from_columns.as_deref(),
                &e,
            )?)),
        }
    }
}

/// Runs a job's merge: reads the inputs, writes the outputs of attempt `attempt`, and
/// returns them (nothing is committed here). `scratch` holds downloaded SSTs. Once `stop`
/// is cancelled, the merge ends with [`Error::Closed`] at its next read or key.
pub async fn execute(
    store: &StoreRef,
    spec: &JobSpec,
    attempt: u64,
    scratch: &std::path::Path,
    metas: &Arc<MetaCache>,
    pause_per_file_ms: u64,
    stop: &CancellationToken,
) -> Result<JobResult> {
    let started = std::time::Instant::now();
    let table = Arc::new(TableSchema::new(spec.table.clone())?);
    let paths = ShardPaths::from_dir(&spec.shard_dir);
    let bytes_read = spec.input_bytes;
    // Row SSTs come from the bucket into scratch space.
    let mut readers = Vec::new();
    if let JobSource::CrossTier { ssts } = &spec.source {
        crate::localfs::create_dir_all(scratch)
            .await
            .map_err(Error::io(format!("create {}", scratch.display())))?;
        for s in ssts {
            let local = scratch.join(format!("{}-{}.sst", spec.id, s.id));
            // Corruption is named after the object.
            let reader =
                crate::store::download::open_object(store, &paths.sst(&s.id), &local).await?;
            readers.push(Arc::new(reader));
        }
    }
    let handle = tokio::runtime::Handle::current();
    let mut outputs = Vec::with_capacity(spec.targets.len());
    let mut bytes_written = 0;
    let source_of = |f: &ParquetFileInfo| ParquetSource {
        store: store.clone(),
        path: paths.parquet(&f.name),
        info: f.clone(),
        cache: None,
        metas: metas.clone(),
    };
    for target in &spec.targets {
        let to = table
            .groups
            .get(spec.target_level)
            .and_then(|l| l.get(target.group))
            .cloned()
            .ok_or_else(|| Error::Invalid(format!("job {}: no target group", spec.id)))?;
        let mut sources: Vec<Box<dyn EntryIter>> = Vec::new();
        match &spec.source {
            JobSource::CrossTier { .. } => {
                for r in &readers {
                    sources.push(Box::new(ProjectIter {
                        inner: Box::new(SstIter::new(r.clone(), &[])),
                        from: table.codec.clone(),
                        from_columns: None,
                        to: to.clone(),
                    }));
                }
            }
            JobSource::Group {
                level,
                group,
                files,
            } => {
                let from = table
                    .groups
                    .get(*level)
                    .and_then(|l| l.get(*group))
                    .cloned()
                    .ok_or_else(|| Error::Invalid(format!("job {}: no source group", spec.id)))?;
                sources.push(Box::new(ProjectIter {
                    inner: Box::new(
                        RunIter::new(
                            handle.clone(),
                            from.clone(),
                            files.iter().map(source_of).collect(),
                            &[],
                            None,
                            None,
                        )
                        .stop_on(stop.clone()),
                    ),
                    from: from.codec.clone(),
                    from_columns: Some(from.columns.clone()),
                    to: to.clone(),
                }));
            }
        }
        sources.push(Box::new(
            RunIter::new(
                handle.clone(),
                to.clone(),
                target.overlapping.iter().map(source_of).collect(),
                &[],
                None,
                None,
            )
            .stop_on(stop.clone()),
        ));
        let writer = RunWriter::new(
            store.clone(),
            to.clone(),
            FileShape {
                file_bytes_target: spec.file_bytes,
                row_group_rows: spec.row_group_rows,
                page_bytes: spec.page_bytes,
                page_rows: spec.page_rows,
                dictionary_page_bytes: spec.dictionary_page_bytes,
            },
            format!("{}-g{:03}", spec.output_prefix(attempt), target.group),
            {
                let paths = paths.clone();
                Box::new(move |name: &str| paths.parquet(name))
            },
        );
        let (pins, bottommost, codec) = (spec.pins.clone(), spec.bottommost, to.codec.clone());
        let keep_above = spec.keep_above;
        // A level of one group is written whole by each job: its kept partial versions
        // can be completed from the older ones (with several groups, each group's job sees
        // only its own inputs, and the groups' versions must stay alike).
        let complete = table
            .groups
            .get(spec.target_level)
            .is_some_and(|l| l.len() == 1);
        let (h, stop) = (handle.clone(), stop.clone());
        let files =
            crate::background::run("strata-job", move || -> Result<Vec<ParquetFileInfo>> {
                let mut writer = writer;
                // Copies of one version (a record retained on NVMe, or promoted, beside the
                // version the bucket holds) are one version: merged as parts, so a partial
                // copy never hides the columns the bucket's resolved copy carries.
                let mut merged = MergeIter::with_parts(sources, codec.clone());
                let mut group: Vec<Entry> = Vec::new();
                loop {
                    let next = merged.next_entry()?;
                    let boundary = match (&next, group.first()) {
                        (Some(e), Some(g)) => e.key != g.key,
                        (None, _) => true,
                        (Some(_), None) => false,
                    };
                    if boundary && !group.is_empty() {
                        let collapsed =
                            collapse(&codec, &group, &pins, keep_above, bottommost, complete)?;
                        group.clear();
                        block_on_unless(&h, Some(&stop), writer.add_key(collapsed))??;
                    }
                    match next {
                        Some(e) => group.push(e),
                        None => break,
                    }
                }
                block_on_unless(&h, Some(&stop), writer.finish())?
            })
            .await??;
        if pause_per_file_ms > 0 {
            tokio::time::sleep(Duration::from_millis(
                pause_per_file_ms * files.len() as u64,
            ))
            .await;
        }
        bytes_written += files.iter().map(|f| f.size_bytes).sum::<u64>();
        outputs.push(files);
    }
    Ok(JobResult {
        job: spec.id.clone(),
        attempt,
        worker: String::new(),
        outputs,
        bytes_read,
        bytes_written,
        took_ms: started.elapsed().as_millis() as u64,
    })
}
