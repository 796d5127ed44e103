//! Versions of a key: what one write did to one row, and how versions merge (LASER §4):
//! the newest value of each column wins; a delete hides everything older.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::row::{RowCodec, RowValues};

/// What a version does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// A whole row.
    Put = 1,
    /// Some columns of a row; the others come from older versions.
    Partial = 2,
    /// The row is gone.
    Delete = 3,
}

impl EntryKind {
    /// Parses the stored byte.
    pub fn from_u8(b: u8) -> Result<Self> {
        match b {
            1 => Ok(EntryKind::Put),
            2 => Ok(EntryKind::Partial),
            3 => Ok(EntryKind::Delete),
            other => Err(Error::Corrupt(format!("unknown entry kind {other}"))),
        }
    }

    /// Whether this version alone determines the row (no need to look at older versions).
    pub fn is_full(self) -> bool {
        !matches!(self, EntryKind::Partial)
    }
}

/// One version of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Encoded primary key.
    pub key: Bytes,
    /// Sequence number of the write.
    pub seq: u64,
    /// What it does.
    pub kind: EntryKind,
    /// Encoded row values (see [`RowCodec`]); empty for deletes.
    pub value: Bytes,
}

/// A version being folded with older ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// Kind of the result.
    pub kind: EntryKind,
    /// Columns known so far (`None` = not present yet).
    pub values: RowValues,
}

impl Folded {
    /// Starts a fold from the newest version.
    pub fn from_entry(codec: &RowCodec, kind: EntryKind, value: &[u8]) -> Result<Self> {
        let values = match kind {
            EntryKind::Delete => vec![None; codec.width()],
            _ => codec.decode(value)?,
        };
        Ok(Self { kind, values })
    }

    /// Folds an older version under this one. Returns true once the result is full.
    pub fn merge_older(&mut self, codec: &RowCodec, kind: EntryKind, value: &[u8]) -> Result<bool> {
        if self.kind.is_full() {
            return Ok(true);
        }
        match kind {
            EntryKind::Delete => {
                // Partial over a delete: the row restarts; columns not written are NULL.
                self.fill_missing_with_null();
            }
            EntryKind::Put | EntryKind::Partial => {
                let older = codec.decode(value)?;
                for (mine, theirs) in self.values.iter_mut().zip(older) {
                    if mine.is_none() {
                        *mine = theirs;
                    }
                }
                if kind == EntryKind::Put {
                    self.kind = EntryKind::Put;
                }
            }
        }
        Ok(self.kind.is_full())
    }

    /// Ends a fold that ran out of older versions: a partial row with nothing under it is a
    /// row whose unwritten columns are NULL.
    pub fn finish_at_bottom(&mut self) {
        if self.kind == EntryKind::Partial {
            self.fill_missing_with_null();
        }
    }

    fn fill_missing_with_null(&mut self) {
        for v in &mut self.values {
            if v.is_none() {
                *v = Some(crate::value::Value::Null);
            }
        }
        self.kind = EntryKind::Put;
    }

    /// Encodes the result as a stored version.
    pub fn encode(&self, codec: &RowCodec) -> Result<Bytes> {
        Ok(match self.kind {
            EntryKind::Delete => Bytes::new(),
            _ => Bytes::from(codec.encode(&self.values)?),
        })
    }
}
