//! Row encoding of the non-key columns of one version.
//!
//! Layout: `present` bitmap, `null` bitmap (both `ceil(n/8)` bytes, bit i = column i), then
//! each present non-null value in column order: fixed-width little-endian for numbers and
//! booleans, varint length plus bytes for strings and binaries. Whole rows set every present
//! bit; partial rows only the columns they carry.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Date64Builder, Float32Builder,
    Float64Builder, Int8Builder, Int16Builder, Int32Builder, Int64Builder, LargeBinaryBuilder,
    LargeStringBuilder, StringBuilder, UInt8Builder, UInt16Builder, UInt32Builder, UInt64Builder,
};
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

/// One column's values being decoded in bulk (see [`RowCodec::decode_columns`]).
enum Sink {
    Bool(BooleanBuilder),
    I8(Int8Builder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    U8(UInt8Builder),
    U16(UInt16Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Str(StringBuilder),
    LargeStr(LargeStringBuilder),
    Bin(BinaryBuilder),
    LargeBin(LargeBinaryBuilder),
    Date32(Date32Builder),
    Date64(Date64Builder),
    /// Timestamps, as their integers (cast to the type at the end).
    Ts(Int64Builder),
}

impl Sink {
    fn new(dt: &DataType, rows: usize) -> Result<Self> {
        Ok(match dt {
            DataType::Boolean => Sink::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Int8 => Sink::I8(Int8Builder::with_capacity(rows)),
            DataType::Int16 => Sink::I16(Int16Builder::with_capacity(rows)),
            DataType::Int32 => Sink::I32(Int32Builder::with_capacity(rows)),
            DataType::Int64 => Sink::I64(Int64Builder::with_capacity(rows)),
            DataType::UInt8 => Sink::U8(UInt8Builder::with_capacity(rows)),
            DataType::UInt16 => Sink::U16(UInt16Builder::with_capacity(rows)),
            DataType::UInt32 => Sink::U32(UInt32Builder::with_capacity(rows)),
            DataType::UInt64 => Sink::U64(UInt64Builder::with_capacity(rows)),
            DataType::Float32 => Sink::F32(Float32Builder::with_capacity(rows)),
            DataType::Float64 => Sink::F64(Float64Builder::with_capacity(rows)),
            DataType::Utf8 => Sink::Str(StringBuilder::with_capacity(rows, rows * 8)),
            DataType::LargeUtf8 => {
                Sink::LargeStr(LargeStringBuilder::with_capacity(rows, rows * 8))
            }
            DataType::Binary => Sink::Bin(BinaryBuilder::with_capacity(rows, rows * 8)),
            DataType::LargeBinary => {
                Sink::LargeBin(LargeBinaryBuilder::with_capacity(rows, rows * 8))
            }
            DataType::Date32 => Sink::Date32(Date32Builder::with_capacity(rows)),
            DataType::Date64 => Sink::Date64(Date64Builder::with_capacity(rows)),
            DataType::Timestamp(_, _) => Sink::Ts(Int64Builder::with_capacity(rows)),
            other => return Err(Error::Internal(format!("unsupported type {other}"))),
        })
    }

    fn append_null(&mut self) {
        match self {
            Sink::Bool(b) => b.append_null(),
            Sink::I8(b) => b.append_null(),
            Sink::I16(b) => b.append_null(),
            Sink::I32(b) => b.append_null(),
            Sink::I64(b) | Sink::Ts(b) => b.append_null(),
            Sink::U8(b) => b.append_null(),
            Sink::U16(b) => b.append_null(),
            Sink::U32(b) => b.append_null(),
            Sink::U64(b) => b.append_null(),
            Sink::F32(b) => b.append_null(),
            Sink::F64(b) => b.append_null(),
            Sink::Str(b) => b.append_null(),
            Sink::LargeStr(b) => b.append_null(),
            Sink::Bin(b) => b.append_null(),
            Sink::LargeBin(b) => b.append_null(),
            Sink::Date32(b) => b.append_null(),
            Sink::Date64(b) => b.append_null(),
        }
    }

    /// Takes one encoded value off the front of `buf`.
    fn append(&mut self, buf: &mut &[u8]) -> Result<()> {
        match self {
            Sink::Bool(b) => b.append_value(take::<1>(buf)?[0] != 0),
            Sink::I8(b) => b.append_value(take::<1>(buf)?[0] as i8),
            Sink::I16(b) => b.append_value(i16::from_le_bytes(take(buf)?)),
            Sink::I32(b) => b.append_value(i32::from_le_bytes(take(buf)?)),
            Sink::I64(b) | Sink::Ts(b) => b.append_value(i64::from_le_bytes(take(buf)?)),
            Sink::U8(b) => b.append_value(take::<1>(buf)?[0]),
            Sink::U16(b) => b.append_value(u16::from_le_bytes(take(buf)?)),
            Sink::U32(b) => b.append_value(u32::from_le_bytes(take(buf)?)),
            Sink::U64(b) => b.append_value(u64::from_le_bytes(take(buf)?)),
            Sink::F32(b) => b.append_value(f32::from_le_bytes(take(buf)?)),
            Sink::F64(b) => b.append_value(f64::from_le_bytes(take(buf)?)),
            Sink::Date32(b) => b.append_value(i32::from_le_bytes(take(buf)?)),
            Sink::Date64(b) => b.append_value(i64::from_le_bytes(take(buf)?)),
            Sink::Str(_) | Sink::LargeStr(_) | Sink::Bin(_) | Sink::LargeBin(_) => {
                let len = varint::get(buf)? as usize;
                if buf.len() < len {
                    return Err(Error::Corrupt("truncated row value".into()));
                }
                let (v, rest) = buf.split_at(len);
                *buf = rest;
                match self {
                    // As the row-at-a-time path builds strings: invalid UTF-8 replaced.
                    Sink::Str(b) => b.append_value(String::from_utf8_lossy(v)),
                    Sink::LargeStr(b) => b.append_value(String::from_utf8_lossy(v)),
                    Sink::Bin(b) => b.append_value(v),
                    Sink::LargeBin(b) => b.append_value(v),
                    _ => unreachable!("variable-width sinks only"),
                }
            }
        }
        Ok(())
    }

    fn finish(self, dt: &DataType) -> Result<ArrayRef> {
        Ok(match self {
            Sink::Bool(mut b) => Arc::new(b.finish()),
            Sink::I8(mut b) => Arc::new(b.finish()),
            Sink::I16(mut b) => Arc::new(b.finish()),
            Sink::I32(mut b) => Arc::new(b.finish()),
            Sink::I64(mut b) => Arc::new(b.finish()),
            Sink::U8(mut b) => Arc::new(b.finish()),
            Sink::U16(mut b) => Arc::new(b.finish()),
            Sink::U32(mut b) => Arc::new(b.finish()),
            Sink::U64(mut b) => Arc::new(b.finish()),
            Sink::F32(mut b) => Arc::new(b.finish()),
            Sink::F64(mut b) => Arc::new(b.finish()),
            Sink::Str(mut b) => Arc::new(b.finish()),
            Sink::LargeStr(mut b) => Arc::new(b.finish()),
            Sink::Bin(mut b) => Arc::new(b.finish()),
            Sink::LargeBin(mut b) => Arc::new(b.finish()),
            Sink::Date32(mut b) => Arc::new(b.finish()),
            Sink::Date64(mut b) => Arc::new(b.finish()),
            Sink::Ts(mut b) => {
                let ints: ArrayRef = Arc::new(b.finish());
                arrow::compute::cast(&ints, dt).map_err(|e| Error::Internal(e.to_string()))?
            }
        })
    }
}

impl RowCodec {
    /// Decodes many encoded rows at once straight into one Arrow array per column (in the
    /// codec's column order), without a value per row and column in between: the bulk
    /// path for folds of the row-oriented tiers. A column a row does not carry (a partial
    /// row) is null, as it is in a whole row built from a fold that ended at the bottom.
    pub fn decode_columns<'a>(
        &self,
        rows: impl ExactSizeIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>> {
        let n = self.bitmap_len();
        let mut sinks = self
            .types
            .iter()
            .map(|dt| Sink::new(dt, rows.len()))
            .collect::<Result<Vec<_>>>()?;
        for row in rows {
            if row.len() < 2 * n {
                return Err(Error::Corrupt("row shorter than its bitmaps".into()));
            }
            let (bitmaps, mut buf) = row.split_at(2 * n);
            for (i, sink) in sinks.iter_mut().enumerate() {
                let bit = 1 << (i % 8);
                if bitmaps[i / 8] & bit == 0 || bitmaps[n + i / 8] & bit != 0 {
                    sink.append_null();
                } else {
                    sink.append(&mut buf)?;
                }
            }
            if !buf.is_empty() {
                return Err(Error::Corrupt("trailing bytes after row".into()));
            }
        }
        sinks
            .into_iter()
            .zip(&self.types)
            .map(|(s, dt)| s.finish(dt))
            .collect()
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

    /// The bulk decoder gives what decoding row by row and building arrays gives, for
    /// every supported type, with nulls and columns a row does not carry.
    #[test]
    fn bulk_decode_matches_row_at_a_time() {
        use arrow::datatypes::TimeUnit;
        let types = vec![
            DataType::Boolean,
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float32,
            DataType::Float64,
            DataType::Utf8,
            DataType::LargeUtf8,
            DataType::Binary,
            DataType::LargeBinary,
            DataType::Date32,
            DataType::Date64,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ];
        let c = RowCodec::new(types.clone());
        let value = |t: &DataType, r: i64| -> Value {
            match t {
                DataType::Boolean => Value::Bool(r % 2 == 0),
                DataType::Int8 => Value::Int(r % 100 - 50),
                DataType::Int16 | DataType::Int32 | DataType::Date32 => Value::Int(r * 7 - 3),
                DataType::Int64 | DataType::Date64 | DataType::Timestamp(_, _) => {
                    Value::Int(r * 1_000_003 - 11)
                }
                DataType::UInt8 => Value::UInt((r % 200) as u64),
                DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => Value::UInt(r as u64 * 9),
                DataType::Float32 | DataType::Float64 => Value::Float(r as f64 / 4.0),
                _ => Value::Bytes(format!("v{r}").repeat((r % 4) as usize).into_bytes()),
            }
        };
        let rows: Vec<RowValues> = (0..50i64)
            .map(|r| {
                types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| match (r + i as i64) % 5 {
                        0 => Some(Value::Null),
                        1 if r % 3 == 0 => None,
                        _ => Some(value(t, r)),
                    })
                    .collect()
            })
            .collect();
        let encoded: Vec<Vec<u8>> = rows.iter().map(|r| c.encode(r).unwrap()).collect();
        let got = c
            .decode_columns(encoded.iter().map(|r| r.as_slice()))
            .unwrap();
        for (i, t) in types.iter().enumerate() {
            let column: Vec<Value> = encoded
                .iter()
                .map(|r| c.decode(r).unwrap()[i].clone().unwrap_or(Value::Null))
                .collect();
            let want = crate::value::build_array(t, &column).unwrap();
            assert_eq!(got[i].as_ref(), want.as_ref(), "column {i} ({t})");
        }
        assert!(c.decode_columns([&[0xFFu8][..]].into_iter()).is_err());
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
