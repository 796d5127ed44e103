//! The write-ahead log: segments in the object store, one per group commit.
//!
//! A segment is `wal/<20-digit id>.wal`, created if absent. Ids are consecutive per shard.
//! An empty object at an id is a *fence*: a new writer creates it at the first free id, so
//! the previous writer's next segment creation fails and it learns it was fenced. Fences are
//! never garbage collected (they are empty), so a stalled writer can never recreate its
//! next id after GC.

pub mod segment;

pub use segment::{Segment, SegmentRecord};
