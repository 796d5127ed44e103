//! LEB128 unsigned varints.

use crate::error::{Error, Result};

/// Appends `v`.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one varint from the front of `buf`, advancing it.
pub fn get(buf: &mut &[u8]) -> Result<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(Error::Corrupt("truncated varint".into()));
        };
        *buf = rest;
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Error::Corrupt("varint too long".into()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(v: u64) {
            let mut out = Vec::new();
            super::put(&mut out, v);
            let mut s = &out[..];
            prop_assert_eq!(super::get(&mut s).unwrap(), v);
            prop_assert!(s.is_empty());
        }
    }
}
