//! Row encoding of the non-key columns of one version.
//!
//! Layout: `present` bitmap, `null` bitmap (both `ceil(n/8)` bytes, bit i = column i), then
//! each present non-null value in column order: fixed-width little-endian for numbers and
//! booleans, varint length plus bytes for strings and binaries. Whole rows set every present
//! bit; partial rows only the columns they carry.

use arrow::datatypes::DataType;

use crate::error::{Error, Result};
use crate::value::Value;
use crate::varint;

/// Values of a row's non-key columns; `None` = not carried by this version.
pub type RowValues = Vec<Option<Value>>;

/// Encodes and decodes rows for one table's non-key column types.
#[derive(Debug, Clone)]
pub struct RowCodec {
    types: Vec<DataType>,
}

impl RowCodec {
    /// A codec for these column types.
    pub fn new(types: Vec<DataType>) -> Self {
        Self { types }
    }

    /// Number of columns.
    pub fn width(&self) -> usize {
        self.types.len()
    }

    fn bitmap_len(&self) -> usize {
        self.types.len().div_ceil(8)
    }

    /// Encodes a row.
    pub fn encode(&self, values: &[Option<Value>]) -> Result<Vec<u8>> {
        if values.len() != self.types.len() {
            return Err(Error::Internal("row width mismatch".into()));
        }
        let n = self.bitmap_len();
        let mut out = vec![0u8; 2 * n];
        for (i, (v, dt)) in values.iter().zip(&self.types).enumerate() {
            let Some(v) = v else { continue };
            out[i / 8] |= 1 << (i % 8);
            match (dt, v) {
                (_, Value::Null) => out[n + i / 8] |= 1 << (i % 8),
                (DataType::Boolean, Value::Bool(b)) => out.push(u8::from(*b)),
                (DataType::Int8, Value::Int(x)) => out.push(*x as i8 as u8),
                (DataType::Int16, Value::Int(x)) => {
                    out.extend_from_slice(&(*x as i16).to_le_bytes())
                }
                (DataType::Int32 | DataType::Date32, Value::Int(x)) => {
                    out.extend_from_slice(&(*x as i32).to_le_bytes())
                }
                (DataType::Int64 | DataType::Date64 | DataType::Timestamp(_, _), Value::Int(x)) => {
                    out.extend_from_slice(&x.to_le_bytes())
                }
                (DataType::UInt8, Value::UInt(x)) => out.push(*x as u8),
                (DataType::UInt16, Value::UInt(x)) => {
                    out.extend_from_slice(&(*x as u16).to_le_bytes())
                }
                (DataType::UInt32, Value::UInt(x)) => {
                    out.extend_from_slice(&(*x as u32).to_le_bytes())
                }
                (DataType::UInt64, Value::UInt(x)) => out.extend_from_slice(&x.to_le_bytes()),
                (DataType::Float32, Value::Float(f)) => {
                    out.extend_from_slice(&(*f as f32).to_le_bytes())
                }
                (DataType::Float64, Value::Float(f)) => out.extend_from_slice(&f.to_le_bytes()),
                (
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary,
                    Value::Bytes(b),
                ) => {
                    varint::put(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
                (dt, v) => {
                    return Err(Error::Internal(format!("value {v:?} does not fit {dt}")));
                }
            }
        }
        Ok(out)
    }

    /// Decodes a row.
    pub fn decode(&self, mut buf: &[u8]) -> Result<RowValues> {
        let n = self.bitmap_len();
        if buf.len() < 2 * n {
            return Err(Error::Corrupt("row shorter than its bitmaps".into()));
        }
        let (bitmaps, rest) = buf.split_at(2 * n);
        buf = rest;
        let mut out = Vec::with_capacity(self.types.len());
        for (i, dt) in self.types.iter().enumerate() {
            if bitmaps[i / 8] & (1 << (i % 8)) == 0 {
                out.push(None);
                continue;
            }
            if bitmaps[n + i / 8] & (1 << (i % 8)) != 0 {
                out.push(Some(Value::Null));
                continue;
            }
            let v = match dt {
                DataType::Boolean => Value::Bool(take::<1>(&mut buf)?[0] != 0),
                DataType::Int8 => Value::Int((take::<1>(&mut buf)?[0] as i8).into()),
                DataType::Int16 => Value::Int(i16::from_le_bytes(take(&mut buf)?).into()),
                DataType::Int32 | DataType::Date32 => {
                    Value::Int(i32::from_le_bytes(take(&mut buf)?).into())
                }
                DataType::Int64 | DataType::Date64 | DataType::Timestamp(_, _) => {
                    Value::Int(i64::from_le_bytes(take(&mut buf)?))
                }
                DataType::UInt8 => Value::UInt(take::<1>(&mut buf)?[0].into()),
                DataType::UInt16 => Value::UInt(u16::from_le_bytes(take(&mut buf)?).into()),
                DataType::UInt32 => Value::UInt(u32::from_le_bytes(take(&mut buf)?).into()),
                DataType::UInt64 => Value::UInt(u64::from_le_bytes(take(&mut buf)?)),
                DataType::Float32 => Value::Float(f32::from_le_bytes(take(&mut buf)?).into()),
                DataType::Float64 => Value::Float(f64::from_le_bytes(take(&mut buf)?)),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                    let len = varint::get(&mut buf)? as usize;
                    if buf.len() < len {
                        return Err(Error::Corrupt("truncated row value".into()));
                    }
                    let (b, rest) = buf.split_at(len);
                    buf = rest;
                    Value::Bytes(b.to_vec())
                }
                other => return Err(Error::Internal(format!("unsupported type {other}"))),
            };
            out.push(Some(v));
        }
        if !buf.is_empty() {
            return Err(Error::Corrupt("trailing bytes after row".into()));
        }
        Ok(out)
    }
}

fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N]> {
    if buf.len() < N {
        return Err(Error::Corrupt("truncated row value".into()));
    }
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[..N]);
    *buf = &buf[N..];
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{EntryKind, Folded};

    fn codec() -> RowCodec {
        RowCodec::new(vec![
            DataType::Utf8,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Utf8,
        ])
    }

    fn s(x: &str) -> Option<Value> {
        Some(Value::from(x))
    }

    #[test]
    fn round_trip_with_nulls_and_absent_columns() {
        let c = RowCodec::new(vec![
            DataType::Int64,
            DataType::Utf8,
            DataType::Float32,
            DataType::Boolean,
        ]);
        let row = vec![
            Some(Value::Int(-5)),
            None,
            Some(Value::Null),
            Some(Value::Bool(true)),
        ];
        assert_eq!(c.decode(&c.encode(&row).unwrap()).unwrap(), row);
        assert!(c.decode(&[0xFF]).is_err());
    }

    /// LASER §4: `100: -,b',c',-` over `100: a,b,c,d` gives `a,b',c',d`.
    #[test]
    fn laser_partial_update_merge() {
        let c = codec();
        let older = c.encode(&[s("a"), s("b"), s("c"), s("d")]).unwrap();
        let newer = c.encode(&[None, s("b'"), s("c'"), None]).unwrap();
        let mut f = Folded::from_entry(&c, EntryKind::Partial, &newer).unwrap();
        assert!(f.merge_older(&c, EntryKind::Put, &older).unwrap());
        assert_eq!(f.values, vec![s("a"), s("b'"), s("c'"), s("d")]);
    }

    /// A delete under a partial row must not resurrect older values (GreptimeDB's bug).
    #[test]
    fn partial_over_delete_does_not_resurrect() {
        let c = codec();
        let newer = c.encode(&[None, s("x"), None, None]).unwrap();
        let mut f = Folded::from_entry(&c, EntryKind::Partial, &newer).unwrap();
        assert!(f.merge_older(&c, EntryKind::Delete, &[]).unwrap());
        assert_eq!(
            f.values,
            vec![
                Some(Value::Null),
                s("x"),
                Some(Value::Null),
                Some(Value::Null)
            ]
        );
    }
}
