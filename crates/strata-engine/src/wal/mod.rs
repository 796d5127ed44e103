//! The write-ahead log: segments in the object store, one per group commit, and the rules
//! for reading them back in order.
//!
//! A segment is `wal/<20-digit id>.wal`, created if absent. Ids are consecutive per shard.
//! A writer keeps up to [`UPLOADS_IN_FLIGHT`] segments on their way to the bucket at once
//! and acknowledges them in id order, each only once it and every earlier one are stored;
//! so at any moment the bucket holds a consecutive run of ids, then possibly a few ids past
//! a hole (uploads still in flight, or landed after their writer died or was deposed), never
//! acknowledged while the hole is open.
//!
//! A *fence* is a segment without records ([`fence`]), carrying its writer's epoch. A new
//! writer fences the WAL where the previous writer would write next: at the first hole (or
//! after the last id) and then every following id up to [`UPLOADS_IN_FLIGHT`] consecutive
//! fences of its own, skipping ids taken meanwhile. The previous writer's next creation then
//! fails, so it learns it was fenced and acknowledges nothing more, and none of its uploads
//! still in flight can land past the fences. Fences are never garbage collected (they are
//! recognised by their size, [`is_fence_size`]), so a stalled writer can never recreate one
//! of those ids after GC. (Fences written before epochs were recorded are empty objects.)
//!
//! Reading the WAL back ([`contiguous`], [`EpochFilter`]): the consecutive run of ids from
//! the replay point, stopping at a hole; and within it, a segment of an older epoch than an
//! earlier segment or fence is a deposed writer's upload that landed after it was fenced,
//! never acknowledged, and is skipped.

pub mod local;
pub mod segment;

pub use segment::{Segment, SegmentRecord};

/// How many segments a writer has on their way to the bucket at most (a protocol constant:
/// readers and new writers rely on it to tell uploads in flight from lost segments).
pub const UPLOADS_IN_FLIGHT: u64 = 8;

/// A fence: a segment of `writer_epoch` without records.
pub fn fence(writer_epoch: u64) -> Vec<u8> {
    Segment::encode(writer_epoch, &[])
}

/// The size of a fence ([`fence`]); a segment with records is larger.
pub const FENCE_BYTES: u64 = 4 + 2 + 8 + 4 + 4;

/// Whether a WAL object of `size` bytes is a fence (this format's, or an empty one written
/// before fences carried epochs): GC keeps these for ever.
pub fn is_fence_size(size: u64) -> bool {
    size <= FENCE_BYTES
}

/// Where the readable WAL ends: `ids` are the listed ids above the replay point, sorted;
/// `from` is the first id after the replay point. Returns the end (exclusive) of the
/// consecutive run starting at `from`. Ids past a hole are uploads still in flight (or a
/// dead writer's, to be fenced by the next one) only while there are fewer than
/// [`UPLOADS_IN_FLIGHT`] of them; more means a segment some acknowledged write needed is
/// gone, reported as `Err(the missing id)`.
pub fn contiguous(from: u64, ids: &[u64]) -> Result<u64, u64> {
    let mut end = from;
    let mut rest = ids.iter().copied().skip_while(|id| *id < from).peekable();
    while rest.peek() == Some(&end) {
        rest.next();
        end += 1;
    }
    let beyond = rest.count() as u64;
    if beyond >= UPLOADS_IN_FLIGHT {
        Err(end)
    } else {
        Ok(end)
    }
}

/// Drops, in id order, the segments of a writer older than one already seen: uploads that
/// landed after a newer writer's fence, never acknowledged.
#[derive(Debug, Default)]
pub struct EpochFilter {
    newest: u64,
}

impl EpochFilter {
    /// Whether to apply `segment`'s records (it comes next in id order).
    pub fn admit(&mut self, segment: &Segment) -> bool {
        if segment.writer_epoch < self.newest {
            return false;
        }
        self.newest = segment.writer_epoch;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_the_smallest_segment_and_decodes_with_its_epoch() {
        let f = bytes::Bytes::from(fence(7));
        assert_eq!(f.len() as u64, FENCE_BYTES);
        assert!(is_fence_size(FENCE_BYTES) && is_fence_size(0));
        let s = Segment::decode(&f).unwrap();
        assert_eq!((s.writer_epoch, s.records.len()), (7, 0));
        let entry = crate::schema::PreparedEntry {
            key: bytes::Bytes::from_static(b"k"),
            kind: crate::entry::EntryKind::Put,
            value: bytes::Bytes::new(),
        };
        let one = Segment::encode(7, &[(1, std::slice::from_ref(&entry))]);
        assert!(!is_fence_size(one.len() as u64));
    }

    #[test]
    fn the_readable_run_stops_at_a_hole_and_too_much_past_it_is_a_loss() {
        let n = UPLOADS_IN_FLIGHT;
        // (from, listed ids, expected)
        let cases: Vec<(u64, Vec<u64>, Result<u64, u64>)> = vec![
            (5, vec![], Ok(5)),
            (5, vec![5, 6, 7], Ok(8)),
            // Ids at or below the replay point are ignored.
            (5, vec![3, 4, 5], Ok(6)),
            // A hole with uploads in flight past it.
            (5, vec![5, 7, 8], Ok(6)),
            // The first segment itself still in flight.
            (5, vec![6, 7], Ok(5)),
            // Just fewer than the in-flight bound past the hole, and exactly the bound.
            (1, (3..3 + n - 1).collect(), Ok(1)),
            (1, (3..3 + n).collect(), Err(1)),
            (1, [1, 2].into_iter().chain(4..4 + n).collect(), Err(3)),
        ];
        for (from, ids, want) in cases {
            assert_eq!(contiguous(from, &ids), want, "from {from}, ids {ids:?}");
        }
    }

    #[test]
    fn segments_of_a_deposed_writer_after_a_newer_fence_are_dropped() {
        let seg = |epoch| Segment {
            writer_epoch: epoch,
            records: Vec::new(),
        };
        let mut f = EpochFilter::default();
        // epoch 1's segments, epoch 2's fence, a late upload of epoch 1, epoch 2's segment,
        // epoch 3's fence, then a late epoch 2 upload.
        let admitted: Vec<bool> = [1, 1, 2, 1, 2, 3, 2, 3]
            .into_iter()
            .map(|e| f.admit(&seg(e)))
            .collect();
        assert_eq!(
            admitted,
            vec![true, true, true, false, true, true, false, true]
        );
    }
}
