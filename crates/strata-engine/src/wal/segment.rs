//! WAL segment encoding.
//!
//! ```text
//! magic "SWAL" | format u16 | writer_epoch u64 | record count u32
//! record*: seq u64 | entry count u32 | entry*: kind u8 | key len varint | key | value len varint | value
//! crc32c u32 of everything before
//! ```

use bytes::Bytes;

use crate::entry::EntryKind;
use crate::error::{Error, Result};
use crate::schema::PreparedEntry;
use crate::varint;

const MAGIC: &[u8; 4] = b"SWAL";
/// Format 2: written by writers that keep uploads in flight and fence with epochs (format 1
/// segments, from a writer with one upload at a time, read the same). A binary that knows
/// only format 1 refuses a WAL with format 2 segments loudly instead of misreading the
/// holes and fences the newer protocol leaves.
const FORMAT: u16 = 2;
/// Formats this binary reads.
const FORMATS_READ: [u16; 2] = [1, 2];

/// The writes of one sequence number.
#[derive(Debug, Clone)]
pub struct SegmentRecord {
    /// Sequence number.
    pub seq: u64,
    /// Versions written.
    pub entries: Vec<PreparedEntry>,
}

/// A decoded segment.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Epoch of the writer that wrote it.
    pub writer_epoch: u64,
    /// Records in sequence order.
    pub records: Vec<SegmentRecord>,
}

impl Segment {
    /// Encodes a segment.
    pub fn encode(writer_epoch: u64, records: &[(u64, &[PreparedEntry])]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&writer_epoch.to_le_bytes());
        out.extend_from_slice(&(records.len() as u32).to_le_bytes());
        for (seq, entries) in records {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for e in *entries {
                out.push(e.kind as u8);
                varint::put(&mut out, e.key.len() as u64);
                out.extend_from_slice(&e.key);
                varint::put(&mut out, e.value.len() as u64);
                out.extend_from_slice(&e.value);
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// One segment holding the records of `parts` (segments of one writer, in sequence
    /// order), as [`Segment::encode`] of all their records at once would: the bytes of a
    /// segment whose group commits were logged locally one by one and uploaded together.
    pub fn concat(parts: &[Bytes]) -> Result<Vec<u8>> {
        if let [one] = parts {
            return Ok(one.to_vec());
        }
        let decoded = parts
            .iter()
            .map(Segment::decode)
            .collect::<Result<Vec<_>>>()?;
        let epoch = decoded.first().map_or(0, |s| s.writer_epoch);
        if decoded.iter().any(|s| s.writer_epoch != epoch) {
            return Err(Error::Corrupt(
                "parts of one wal segment from different writers".into(),
            ));
        }
        let records: Vec<(u64, &[PreparedEntry])> = decoded
            .iter()
            .flat_map(|s| s.records.iter())
            .map(|r| (r.seq, r.entries.as_slice()))
            .collect();
        Ok(Segment::encode(epoch, &records))
    }

    /// Decodes and verifies a segment.
    pub fn decode(data: &Bytes) -> Result<Self> {
        if data.len() < 4 + 2 + 8 + 4 + 4 {
            return Err(Error::Corrupt("wal segment too short".into()));
        }
        let (body, crc) = data.split_at(data.len() - 4);
        let mut crc_bytes = [0u8; 4];
        crc_bytes.copy_from_slice(crc);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc_bytes) {
            return Err(Error::Corrupt("wal segment checksum mismatch".into()));
        }
        if &body[..4] != MAGIC {
            return Err(Error::Corrupt("not a wal segment".into()));
        }
        let mut buf = &body[4..];
        let format = u16::from_le_bytes(fixed(&mut buf)?);
        if !FORMATS_READ.contains(&format) {
            return Err(Error::Corrupt(format!("unsupported wal format {format}")));
        }
        let writer_epoch = u64::from_le_bytes(fixed(&mut buf)?);
        let n = u32::from_le_bytes(fixed(&mut buf)?);
        // Counts are untrusted (a checksum proves integrity, not sense): room for at most
        // what the bytes left can hold (a record takes 12 bytes, an entry at least 3).
        let mut records = Vec::with_capacity((n as usize).min(buf.len() / 12));
        for _ in 0..n {
            let seq = u64::from_le_bytes(fixed(&mut buf)?);
            let m = u32::from_le_bytes(fixed(&mut buf)?);
            let mut entries = Vec::with_capacity((m as usize).min(buf.len() / 3));
            for _ in 0..m {
                let kind = EntryKind::from_u8(fixed::<1>(&mut buf)?[0])?;
                let key = slice(&mut buf, data, body)?;
                let value = slice(&mut buf, data, body)?;
                entries.push(PreparedEntry { key, kind, value });
            }
            records.push(SegmentRecord { seq, entries });
        }
        if !buf.is_empty() {
            return Err(Error::Corrupt("trailing bytes in wal segment".into()));
        }
        Ok(Segment {
            writer_epoch,
            records,
        })
    }
}

fn fixed<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N]> {
    if buf.len() < N {
        return Err(Error::Corrupt("truncated wal segment".into()));
    }
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[..N]);
    *buf = &buf[N..];
    Ok(a)
}

/// Reads a length-prefixed slice as a zero-copy view into `data`.
fn slice(buf: &mut &[u8], data: &Bytes, body: &[u8]) -> Result<Bytes> {
    let len = varint::get(buf)? as usize;
    if buf.len() < len {
        return Err(Error::Corrupt("truncated wal entry".into()));
    }
    let offset = body.len() - buf.len();
    let out = data.slice(offset..offset + len);
    *buf = &buf[len..];
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detect_corruption() {
        let entries = [
            PreparedEntry {
                key: Bytes::from_static(b"k1"),
                kind: EntryKind::Put,
                value: Bytes::from_static(b"v"),
            },
            PreparedEntry {
                key: Bytes::from_static(b"k2"),
                kind: EntryKind::Delete,
                value: Bytes::new(),
            },
        ];
        let data = Bytes::from(Segment::encode(7, &[(3, &entries[..]), (4, &entries[..1])]));
        let seg = Segment::decode(&data).unwrap();
        assert_eq!(seg.writer_epoch, 7);
        assert_eq!(seg.records.len(), 2);
        assert_eq!(seg.records[0].seq, 3);
        assert_eq!(seg.records[0].entries[1].kind, EntryKind::Delete);
        assert_eq!(seg.records[1].entries[0].key, Bytes::from_static(b"k1"));
        let mut bad = data.to_vec();
        bad[20] ^= 1;
        assert!(Segment::decode(&Bytes::from(bad)).is_err());
    }

    /// A segment whose checksum holds but whose counts claim billions of records or
    /// entries is an error, not an allocation of their size.
    #[test]
    fn huge_counts_under_a_valid_checksum_are_errors() {
        let reseal = |mut body: Vec<u8>| {
            body.truncate(body.len() - 4);
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            Bytes::from(body)
        };
        let mut records = Segment::encode(1, &[]);
        records[14..18].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Segment::decode(&reseal(records)).is_err());
        let entries: [PreparedEntry; 0] = [];
        let mut one = Segment::encode(1, &[(5, &entries[..])]);
        one[26..30].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Segment::decode(&reseal(one)).is_err());
    }

    /// Group commits logged one by one and uploaded together: the parts' concatenation is
    /// byte for byte the segment encoded from all their records at once (so a reopen that
    /// uploads it from the local log finds the writer's own upload, not a stranger's).
    #[test]
    fn parts_concatenate_to_the_segment_of_all_their_records() {
        let entry = |k: &'static [u8], kind| PreparedEntry {
            key: Bytes::from_static(k),
            kind,
            value: Bytes::from_static(b"value"),
        };
        let a = [entry(b"a", EntryKind::Put), entry(b"b", EntryKind::Delete)];
        let b = [entry(b"c", EntryKind::Put)];
        let c = [entry(b"d", EntryKind::Put)];
        let all = Segment::encode(4, &[(10, &a[..]), (11, &b[..]), (12, &c[..])]);
        let parts = [
            Bytes::from(Segment::encode(4, &[(10, &a[..])])),
            Bytes::from(Segment::encode(4, &[(11, &b[..]), (12, &c[..])])),
        ];
        assert_eq!(Segment::concat(&parts).unwrap(), all);
        assert_eq!(Segment::concat(&parts[..1]).unwrap(), parts[0].to_vec());
        let stranger = [
            parts[0].clone(),
            Bytes::from(Segment::encode(5, &[(11, &b[..])])),
        ];
        assert!(Segment::concat(&stranger).is_err());
    }

    /// Segments of format 1 (one upload at a time) still replay; an unknown format is
    /// refused by name.
    #[test]
    fn format_one_reads_and_unknown_formats_are_refused() {
        let reseal = |mut body: Vec<u8>, format: u16| {
            body[4..6].copy_from_slice(&format.to_le_bytes());
            body.truncate(body.len() - 4);
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            Bytes::from(body)
        };
        let entry = PreparedEntry {
            key: Bytes::from_static(b"k"),
            kind: EntryKind::Put,
            value: Bytes::from_static(b"v"),
        };
        let data = Segment::encode(3, &[(9, std::slice::from_ref(&entry))]);
        assert_eq!(u16::from_le_bytes([data[4], data[5]]), FORMAT);
        let old = Segment::decode(&reseal(data.clone(), 1)).unwrap();
        assert_eq!((old.writer_epoch, old.records[0].seq), (3, 9));
        let err = Segment::decode(&reseal(data, 3)).unwrap_err().to_string();
        assert!(err.contains("unsupported wal format 3"), "{err}");
    }
}
