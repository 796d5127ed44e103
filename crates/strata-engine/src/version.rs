//! The version set: the shape a shard's manifest must have (one run per column group of
//! each columnar level, as the table's layout declares).

use strata_manifest::{Manifest, S3Level};

use crate::error::{Error, Result};

/// Gives a manifest the S3 levels of the table's layout (new shards, or older manifests).
pub(crate) fn shape_levels(m: &mut Manifest, groups: &[usize]) -> Result<()> {
    if m.s3_levels.is_empty() {
        m.s3_levels = groups
            .iter()
            .map(|n| S3Level {
                groups: vec![Default::default(); *n],
            })
            .collect();
        return Ok(());
    }
    check_shape(m, groups)
}

/// Checks that a manifest read from the bucket has the table's columnar levels: none yet
/// (a shard no writer has opened since), or one run per column group of every level, so
/// that code indexing a level's runs by the table's groups can trust the shape.
pub(crate) fn check_shape(m: &Manifest, groups: &[usize]) -> Result<()> {
    if m.s3_levels.is_empty() {
        return Ok(());
    }
    let have: Vec<usize> = m.s3_levels.iter().map(|l| l.groups.len()).collect();
    if have != groups {
        return Err(Error::Corrupt(format!(
            "the manifest has S3 levels with {have:?} groups but the table's layout has {groups:?}"
        )));
    }
    Ok(())
}
