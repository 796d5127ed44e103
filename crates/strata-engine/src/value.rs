//! Scalar values moved between Arrow arrays and Strata's key and row encodings.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder, Date32Array,
    Date32Builder, Date64Array, Date64Builder, Float32Array, Float32Builder, Float64Array,
    Float64Builder, Int8Array, Int8Builder, Int16Array, Int16Builder, Int32Array, Int32Builder,
    Int64Array, Int64Builder, LargeBinaryArray, LargeBinaryBuilder, LargeStringArray,
    LargeStringBuilder, StringArray, StringBuilder, TimestampMicrosecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray, UInt8Array,
    UInt8Builder, UInt16Array, UInt16Builder, UInt32Array, UInt32Builder, UInt64Array,
    UInt64Builder,
};
use arrow::datatypes::{DataType, TimeUnit};

use crate::error::{Error, Result};

/// One scalar. Integers of every width, dates and timestamps travel as `Int`/`UInt`; strings
/// and binaries as `Bytes`.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Boolean.
    Bool(bool),
    /// Signed integers, dates, timestamps.
    Int(i64),
    /// Unsigned integers.
    UInt(u64),
    /// Floats.
    Float(f64),
    /// Strings (UTF-8) and binaries.
    Bytes(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::UInt(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Bytes(v.as_bytes().to_vec())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Bytes(v.into_bytes())
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Bytes(v.to_vec())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}

/// Whether Strata can store columns of this type.
pub fn is_supported(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
    )
}

macro_rules! get {
    ($arr:expr, $ty:ty, $row:expr, $wrap:expr) => {{
        let a = $arr
            .as_any()
            .downcast_ref::<$ty>()
            .ok_or_else(|| Error::Internal(format!("array is not {}", stringify!($ty))))?;
        $wrap(a.value($row))
    }};
}

/// Reads row `row` of `array`.
pub fn value_at(array: &dyn Array, row: usize) -> Result<Value> {
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    Ok(match array.data_type() {
        DataType::Boolean => get!(array, BooleanArray, row, Value::Bool),
        DataType::Int8 => get!(array, Int8Array, row, |v: i8| Value::Int(v.into())),
        DataType::Int16 => get!(array, Int16Array, row, |v: i16| Value::Int(v.into())),
        DataType::Int32 => get!(array, Int32Array, row, |v: i32| Value::Int(v.into())),
        DataType::Int64 => get!(array, Int64Array, row, Value::Int),
        DataType::UInt8 => get!(array, UInt8Array, row, |v: u8| Value::UInt(v.into())),
        DataType::UInt16 => get!(array, UInt16Array, row, |v: u16| Value::UInt(v.into())),
        DataType::UInt32 => get!(array, UInt32Array, row, |v: u32| Value::UInt(v.into())),
        DataType::UInt64 => get!(array, UInt64Array, row, Value::UInt),
        DataType::Float32 => get!(array, Float32Array, row, |v: f32| Value::Float(v.into())),
        DataType::Float64 => get!(array, Float64Array, row, Value::Float),
        DataType::Utf8 => get!(array, StringArray, row, |v: &str| Value::Bytes(
            v.as_bytes().to_vec()
        )),
        DataType::LargeUtf8 => get!(array, LargeStringArray, row, |v: &str| Value::Bytes(
            v.as_bytes().to_vec()
        )),
        DataType::Binary => get!(array, BinaryArray, row, |v: &[u8]| Value::Bytes(v.to_vec())),
        DataType::LargeBinary => {
            get!(array, LargeBinaryArray, row, |v: &[u8]| Value::Bytes(
                v.to_vec()
            ))
        }
        DataType::Date32 => get!(array, Date32Array, row, |v: i32| Value::Int(v.into())),
        DataType::Date64 => get!(array, Date64Array, row, Value::Int),
        DataType::Timestamp(TimeUnit::Second, _) => {
            get!(array, TimestampSecondArray, row, Value::Int)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            get!(array, TimestampMillisecondArray, row, Value::Int)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            get!(array, TimestampMicrosecondArray, row, Value::Int)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            get!(array, TimestampNanosecondArray, row, Value::Int)
        }
        other => return Err(Error::Internal(format!("unsupported type {other}"))),
    })
}

fn mismatch(dt: &DataType, v: &Value) -> Error {
    Error::Internal(format!("value {v:?} does not fit type {dt}"))
}

macro_rules! build {
    (@with $new:expr, $values:expr, $dt:expr, $pat:pat => $conv:expr) => {{
        let mut b = $new;
        for v in $values {
            match v {
                Value::Null => b.append_null(),
                $pat => b.append_value($conv),
                other => return Err(mismatch($dt, other)),
            }
        }
        Arc::new(b.finish()) as ArrayRef
    }};
    ($builder:ty, $values:expr, $dt:expr, $pat:pat => $conv:expr) => {{
        build!(@with <$builder>::with_capacity($values.len()), $values, $dt, $pat => $conv)
    }};
}

/// The bytes of the byte-string values among `values`.
fn bytes_len(values: &[Value]) -> usize {
    values
        .iter()
        .map(|v| match v {
            Value::Bytes(x) => x.len(),
            _ => 0,
        })
        .sum()
}

/// Builds an array of type `dt` from values (the inverse of [`value_at`]).
pub fn build_array(dt: &DataType, values: &[Value]) -> Result<ArrayRef> {
    Ok(match dt {
        DataType::Boolean => build!(BooleanBuilder, values, dt, Value::Bool(x) => *x),
        DataType::Int8 => build!(Int8Builder, values, dt, Value::Int(x) => *x as i8),
        DataType::Int16 => build!(Int16Builder, values, dt, Value::Int(x) => *x as i16),
        DataType::Int32 => build!(Int32Builder, values, dt, Value::Int(x) => *x as i32),
        DataType::Int64 => build!(Int64Builder, values, dt, Value::Int(x) => *x),
        DataType::UInt8 => build!(UInt8Builder, values, dt, Value::UInt(x) => *x as u8),
        DataType::UInt16 => build!(UInt16Builder, values, dt, Value::UInt(x) => *x as u16),
        DataType::UInt32 => build!(UInt32Builder, values, dt, Value::UInt(x) => *x as u32),
        DataType::UInt64 => build!(UInt64Builder, values, dt, Value::UInt(x) => *x),
        DataType::Float32 => build!(Float32Builder, values, dt, Value::Float(x) => *x as f32),
        DataType::Float64 => build!(Float64Builder, values, dt, Value::Float(x) => *x),
        // Variable-width builders sized up front: grown by doubling, a batch of 1 KB values
        // copied its bytes into fresh memory several times over.
        DataType::Utf8 => {
            let b = StringBuilder::with_capacity(values.len(), bytes_len(values));
            build!(@with b, values, dt, Value::Bytes(x) => String::from_utf8_lossy(x))
        }
        DataType::LargeUtf8 => {
            let b = LargeStringBuilder::with_capacity(values.len(), bytes_len(values));
            build!(@with b, values, dt, Value::Bytes(x) => String::from_utf8_lossy(x))
        }
        DataType::Binary => {
            let b = BinaryBuilder::with_capacity(values.len(), bytes_len(values));
            build!(@with b, values, dt, Value::Bytes(x) => x)
        }
        DataType::LargeBinary => {
            let b = LargeBinaryBuilder::with_capacity(values.len(), bytes_len(values));
            build!(@with b, values, dt, Value::Bytes(x) => x)
        }
        DataType::Date32 => build!(Date32Builder, values, dt, Value::Int(x) => *x as i32),
        DataType::Date64 => build!(Date64Builder, values, dt, Value::Int(x) => *x),
        DataType::Timestamp(_, _) => {
            let ints = build!(Int64Builder, values, dt, Value::Int(x) => *x);
            arrow::compute::cast(&ints, dt).map_err(|e| Error::Internal(e.to_string()))?
        }
        other => return Err(Error::Internal(format!("unsupported type {other}"))),
    })
}
