//! Memcomparable key encoding: the byte order of encoded keys equals the order of the key
//! tuples. Integers are big-endian with the sign bit flipped; floats use the IEEE total-order
//! trick; strings and binaries escape `0x00` as `0x00 0xFF` and end with `0x00 0x01`, so a
//! shorter string sorts before its extensions and composite keys compare column by column.

use arrow::datatypes::DataType;

use crate::error::{Error, Result};
use crate::value::Value;

/// Appends the encoding of `v` (of column type `dt`) to `out`.
pub fn encode_value(dt: &DataType, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    match (dt, v) {
        (_, Value::Null) => return Err(Error::Internal("null in key".into())),
        (DataType::Boolean, Value::Bool(b)) => out.push(u8::from(*b)),
        (DataType::Int8, Value::Int(x)) => out.push((*x as i8 as u8) ^ 0x80),
        (DataType::Int16, Value::Int(x)) => {
            out.extend_from_slice(&((*x as i16 as u16) ^ 0x8000).to_be_bytes())
        }
        (DataType::Int32 | DataType::Date32, Value::Int(x)) => {
            out.extend_from_slice(&((*x as i32 as u32) ^ 0x8000_0000).to_be_bytes())
        }
        (DataType::Int64 | DataType::Date64 | DataType::Timestamp(_, _), Value::Int(x)) => {
            out.extend_from_slice(&((*x as u64) ^ 0x8000_0000_0000_0000).to_be_bytes())
        }
        (DataType::UInt8, Value::UInt(x)) => out.push(*x as u8),
        (DataType::UInt16, Value::UInt(x)) => out.extend_from_slice(&(*x as u16).to_be_bytes()),
        (DataType::UInt32, Value::UInt(x)) => out.extend_from_slice(&(*x as u32).to_be_bytes()),
        (DataType::UInt64, Value::UInt(x)) => out.extend_from_slice(&x.to_be_bytes()),
        (DataType::Float32, Value::Float(f)) => {
            let bits = (*f as f32).to_bits();
            let t = if bits >> 31 == 1 {
                !bits
            } else {
                bits ^ 0x8000_0000
            };
            out.extend_from_slice(&t.to_be_bytes())
        }
        (DataType::Float64, Value::Float(f)) => {
            let bits = f.to_bits();
            let t = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ 0x8000_0000_0000_0000
            };
            out.extend_from_slice(&t.to_be_bytes())
        }
        (
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary,
            Value::Bytes(b),
        ) => {
            for &byte in b {
                out.push(byte);
                if byte == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0x00, 0x01]);
        }
        (dt, v) => {
            return Err(Error::Internal(format!(
                "key value {v:?} does not fit type {dt}"
            )));
        }
    }
    Ok(())
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if buf.len() < n {
        return Err(Error::Corrupt("truncated key".into()));
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Ok(head)
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

/// Decodes one value of type `dt` from the front of `buf`, advancing it.
pub fn decode_value(dt: &DataType, buf: &mut &[u8]) -> Result<Value> {
    Ok(match dt {
        DataType::Boolean => Value::Bool(take(buf, 1)?[0] != 0),
        DataType::Int8 => Value::Int(((take(buf, 1)?[0] ^ 0x80) as i8).into()),
        DataType::Int16 => {
            Value::Int(((u16::from_be_bytes(arr(take(buf, 2)?)) ^ 0x8000) as i16).into())
        }
        DataType::Int32 | DataType::Date32 => {
            Value::Int(((u32::from_be_bytes(arr(take(buf, 4)?)) ^ 0x8000_0000) as i32).into())
        }
        DataType::Int64 | DataType::Date64 | DataType::Timestamp(_, _) => {
            Value::Int((u64::from_be_bytes(arr(take(buf, 8)?)) ^ 0x8000_0000_0000_0000) as i64)
        }
        DataType::UInt8 => Value::UInt(take(buf, 1)?[0].into()),
        DataType::UInt16 => Value::UInt(u16::from_be_bytes(arr(take(buf, 2)?)).into()),
        DataType::UInt32 => Value::UInt(u32::from_be_bytes(arr(take(buf, 4)?)).into()),
        DataType::UInt64 => Value::UInt(u64::from_be_bytes(arr(take(buf, 8)?))),
        DataType::Float32 => {
            let t = u32::from_be_bytes(arr(take(buf, 4)?));
            let bits = if t >> 31 == 1 { t ^ 0x8000_0000 } else { !t };
            Value::Float(f32::from_bits(bits).into())
        }
        DataType::Float64 => {
            let t = u64::from_be_bytes(arr(take(buf, 8)?));
            let bits = if t >> 63 == 1 {
                t ^ 0x8000_0000_0000_0000
            } else {
                !t
            };
            Value::Float(f64::from_bits(bits))
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
            let mut out = Vec::new();
            loop {
                let b = take(buf, 1)?[0];
                if b != 0 {
                    out.push(b);
                    continue;
                }
                match take(buf, 1)?[0] {
                    0xFF => out.push(0),
                    0x01 => break,
                    other => {
                        return Err(Error::Corrupt(format!("bad key escape 0x00 0x{other:02x}")));
                    }
                }
            }
            Value::Bytes(out)
        }
        other => return Err(Error::Internal(format!("unsupported key type {other}"))),
    })
}

/// Encodes a composite key.
pub fn encode_key(types: &[DataType], values: &[Value]) -> Result<Vec<u8>> {
    if types.len() != values.len() {
        return Err(Error::Invalid(format!(
            "key has {} columns, got {} values",
            types.len(),
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(16);
    for (dt, v) in types.iter().zip(values) {
        if matches!(v, Value::Null) {
            return Err(Error::Invalid("key values must not be null".into()));
        }
        encode_value(dt, v, &mut out).map_err(|_| {
            Error::Invalid(format!(
                "key value {v:?} does not match key column type {dt}"
            ))
        })?;
    }
    Ok(out)
}

/// Decodes a composite key.
pub fn decode_key(types: &[DataType], mut key: &[u8]) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(types.len());
    for dt in types {
        out.push(decode_value(dt, &mut key)?);
    }
    if !key.is_empty() {
        return Err(Error::Corrupt("trailing bytes after key".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;
    use proptest::prelude::*;

    fn enc(dt: &DataType, v: Value) -> Vec<u8> {
        encode_key(std::slice::from_ref(dt), &[v]).unwrap()
    }

    proptest! {
        #[test]
        fn i64_order(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), enc(&DataType::Int64, a.into()).cmp(&enc(&DataType::Int64, b.into())));
        }

        #[test]
        fn i32_order(a: i32, b: i32) {
            prop_assert_eq!(a.cmp(&b), enc(&DataType::Int32, a.into()).cmp(&enc(&DataType::Int32, b.into())));
        }

        #[test]
        fn u64_order(a: u64, b: u64) {
            prop_assert_eq!(a.cmp(&b), enc(&DataType::UInt64, a.into()).cmp(&enc(&DataType::UInt64, b.into())));
        }

        #[test]
        fn f64_order(a in proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::INFINITE,
                     b in proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::INFINITE) {
            let ea = enc(&DataType::Float64, a.into());
            let eb = enc(&DataType::Float64, b.into());
            prop_assert_eq!(a.total_cmp(&b), ea.cmp(&eb));
        }

        #[test]
        fn bytes_order(a: Vec<u8>, b: Vec<u8>) {
            prop_assert_eq!(a.cmp(&b), enc(&DataType::Binary, a.clone().into()).cmp(&enc(&DataType::Binary, b.clone().into())));
        }

        #[test]
        fn string_order(a: String, b: String) {
            prop_assert_eq!(a.as_bytes().cmp(b.as_bytes()), enc(&DataType::Utf8, a.clone().into()).cmp(&enc(&DataType::Utf8, b.clone().into())));
        }

        #[test]
        fn composite_order_and_round_trip(a1: Vec<u8>, a2: i64, b1: Vec<u8>, b2: i64) {
            let types = [DataType::Binary, DataType::Int64];
            let ka = encode_key(&types, &[a1.clone().into(), a2.into()]).unwrap();
            let kb = encode_key(&types, &[b1.clone().into(), b2.into()]).unwrap();
            prop_assert_eq!((a1.clone(), a2).cmp(&(b1, b2)), ka.cmp(&kb));
            prop_assert_eq!(decode_key(&types, &ka).unwrap(), vec![Value::Bytes(a1), Value::Int(a2)]);
        }

        #[test]
        fn timestamp_round_trip(t: i64) {
            let dt = DataType::Timestamp(TimeUnit::Microsecond, None);
            let k = enc(&dt, t.into());
            prop_assert_eq!(decode_key(&[dt], &k).unwrap(), vec![Value::Int(t)]);
        }
    }

    #[test]
    fn prefix_sorts_first_even_with_zero_bytes() {
        let a = enc(&DataType::Binary, vec![1u8].into());
        let b = enc(&DataType::Binary, vec![1u8, 0].into());
        let c = enc(&DataType::Binary, vec![1u8, 0, 0].into());
        assert!(a < b && b < c);
    }

    #[test]
    fn null_and_mismatched_keys_are_rejected() {
        assert!(encode_key(&[DataType::Int64], &[Value::Null]).is_err());
        assert!(encode_key(&[DataType::Int64], &["x".into()]).is_err());
        assert!(encode_key(&[DataType::Int64], &[]).is_err());
    }
}
