//! Version folding shared by reads, compaction and jobs: the rules that turn a key's
//! versions (newest first, possibly split into column-group parts) into what a reader sees
//! or what a merge keeps. Pure functions over entries; no I/O, no shard state.

use crate::entry::{Entry, EntryKind, Folded};
use crate::error::Result;
use crate::row::RowCodec;

/// Collapses one key's versions (newest first) into one version per snapshot stripe; every
/// version above `keep_above` (the history horizon) is kept. With `complete`, a partial
/// version kept also takes the columns it lacks from the older versions given (which are
/// kept as they are), so that a reader of it needs nothing older: every snapshot reads the
/// same row, and a columnar level's newest versions are whole rows a scan selects
/// column-wise. Callers whose output is written one column group at a time pass false, as
/// each group's job sees its own inputs.
pub(crate) fn collapse(
    codec: &RowCodec,
    versions: &[Entry],
    pins: &[u64],
    keep_above: u64,
    bottommost: bool,
    complete: bool,
) -> Result<Vec<Entry>> {
    let stripe = |seq: u64| {
        if seq > keep_above {
            (1, seq)
        } else {
            (0, pins.partition_point(|p| *p < seq) as u64)
        }
    };
    let mut out: Vec<Entry> = Vec::new();
    let mut i = 0;
    while i < versions.len() {
        let head = &versions[i];
        let s = stripe(head.seq);
        let mut folded = Folded::from_entry(codec, head.kind, &head.value)?;
        let mut j = i + 1;
        while j < versions.len() && stripe(versions[j].seq) == s {
            if !folded.kind.is_full() {
                folded.merge_older(codec, versions[j].kind, &versions[j].value)?;
            }
            j += 1;
        }
        if complete && !folded.kind.is_full() {
            for older in &versions[j..] {
                if folded.merge_older(codec, older.kind, &older.value)? {
                    break;
                }
            }
        }
        let is_last = j == versions.len();
        if bottommost && is_last {
            folded.finish_at_bottom();
        }
        let drop_tombstone = bottommost && is_last && folded.kind == EntryKind::Delete;
        if !drop_tombstone {
            out.push(Entry {
                key: head.key.clone(),
                seq: head.seq,
                kind: folded.kind,
                value: folded.encode(codec)?,
            });
        }
        i = j;
    }
    Ok(out)
}

/// Sorts versions newest first and merges parts of the same version (one per column group).
pub(crate) fn coalesce(codec: &RowCodec, versions: &mut Vec<Entry>) -> Result<()> {
    versions.sort_by_key(|e| std::cmp::Reverse(e.seq));
    let mut out: Vec<Entry> = Vec::with_capacity(versions.len());
    for e in versions.drain(..) {
        match out.last_mut() {
            Some(prev) if prev.seq == e.seq => {
                *prev = crate::iter::union_parts(codec, prev, &e)?;
            }
            _ => out.push(e),
        }
    }
    *versions = out;
    Ok(())
}

/// Whether the versions gathered so far decide the row: the newest is a delete, or every
/// column has a value from a version newer than anything deeper.
pub(crate) fn decided(codec: &RowCodec, versions: &mut Vec<Entry>) -> Result<bool> {
    coalesce(codec, versions)?;
    let Some(first) = versions.first() else {
        return Ok(false);
    };
    if first.kind == EntryKind::Delete || first.kind == EntryKind::Put {
        return Ok(true);
    }
    let mut f = Folded::from_entry(codec, first.kind, &first.value)?;
    for e in &versions[1..] {
        if f.merge_older(codec, e.kind, &e.value)? {
            return Ok(true);
        }
    }
    Ok(f.values.iter().all(Option::is_some))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;
    use arrow::datatypes::DataType;
    use bytes::Bytes;

    fn codec() -> RowCodec {
        RowCodec::new(vec![DataType::Int64, DataType::Int64])
    }

    fn e(seq: u64, kind: EntryKind, vals: &[Option<i64>]) -> Entry {
        let c = codec();
        let row: Vec<Option<Value>> = vals.iter().map(|v| v.map(Value::Int)).collect();
        Entry {
            key: Bytes::from_static(b"k"),
            seq,
            kind,
            value: if kind == EntryKind::Delete {
                Bytes::new()
            } else {
                Bytes::from(c.encode(&row).unwrap())
            },
        }
    }

    #[test]
    fn collapses_to_one_version_without_pins() {
        let v = vec![
            e(5, EntryKind::Partial, &[Some(9), None]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        let out = collapse(&codec(), &v, &[], u64::MAX, false, false).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].seq, 5);
        assert_eq!(out[0].kind, EntryKind::Put);
        assert_eq!(
            codec().decode(&out[0].value).unwrap(),
            vec![Some(Value::Int(9)), Some(Value::Int(2))]
        );
    }

    #[test]
    fn keeps_versions_a_pinned_snapshot_needs() {
        let v = vec![
            e(5, EntryKind::Put, &[Some(9), Some(9)]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        let out = collapse(&codec(), &v, &[4], u64::MAX, false, false).unwrap();
        assert_eq!(out.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![5, 3]);
    }

    #[test]
    fn keeps_every_version_above_the_history_horizon() {
        let v = vec![
            e(7, EntryKind::Partial, &[Some(7), None]),
            e(6, EntryKind::Put, &[Some(6), Some(6)]),
            e(3, EntryKind::Put, &[Some(3), Some(3)]),
            e(2, EntryKind::Put, &[Some(2), Some(2)]),
        ];
        // Horizon 4: 7 and 6 stay as written, 3 and 2 collapse to 3.
        let out = collapse(&codec(), &v, &[], 4, false, false).unwrap();
        assert_eq!(out.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![7, 6, 3]);
        assert_eq!(out[0].kind, EntryKind::Partial);
        // A pin below the horizon still splits the old stripe.
        let out = collapse(&codec(), &v, &[2], 4, false, false).unwrap();
        assert_eq!(
            out.iter().map(|x| x.seq).collect::<Vec<_>>(),
            vec![7, 6, 3, 2]
        );
    }

    #[test]
    fn kept_partial_versions_are_completed_from_older_ones() {
        let v = vec![
            e(7, EntryKind::Partial, &[Some(7), None]),
            e(6, EntryKind::Partial, &[None, Some(6)]),
            e(3, EntryKind::Put, &[Some(3), Some(3)]),
        ];
        // Every version above horizon 2 is kept; 7 and 6 are completed from the older ones.
        let out = collapse(&codec(), &v, &[], 2, false, true).unwrap();
        assert_eq!(out.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![7, 6, 3]);
        let rows: Vec<_> = out
            .iter()
            .map(|x| (x.kind, codec().decode(&x.value).unwrap()))
            .collect();
        let int = |a: i64, b: i64| vec![Some(Value::Int(a)), Some(Value::Int(b))];
        assert_eq!(
            rows,
            vec![
                (EntryKind::Put, int(7, 6)),
                (EntryKind::Put, int(3, 6)),
                (EntryKind::Put, int(3, 3)),
            ]
        );
        // Over a delete the row restarts; with nothing older it stays partial.
        let v = vec![
            e(7, EntryKind::Partial, &[Some(7), None]),
            e(5, EntryKind::Delete, &[]),
        ];
        let out = collapse(&codec(), &v, &[], 2, false, true).unwrap();
        assert_eq!(out[0].kind, EntryKind::Put);
        assert_eq!(
            codec().decode(&out[0].value).unwrap(),
            vec![Some(Value::Int(7)), Some(Value::Null)]
        );
        let out = collapse(&codec(), &v[..1], &[], 2, false, true).unwrap();
        assert_eq!(out[0].kind, EntryKind::Partial);
    }

    #[test]
    fn drops_tombstones_only_at_the_bottom() {
        let v = vec![
            e(5, EntryKind::Delete, &[]),
            e(3, EntryKind::Put, &[Some(1), Some(2)]),
        ];
        assert_eq!(
            collapse(&codec(), &v, &[], u64::MAX, false, false).unwrap()[0].kind,
            EntryKind::Delete
        );
        assert!(
            collapse(&codec(), &v, &[], u64::MAX, true, false)
                .unwrap()
                .is_empty()
        );
    }
}
