//! Bloom filter over user keys (double hashing of one xxh3 hash).

/// Collects key hashes and builds the filter.
#[derive(Debug, Default)]
pub struct BloomBuilder {
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// Adds a key (duplicates are fine).
    pub fn add(&mut self, key: &[u8]) {
        let h = xxhash_rust::xxh3::xxh3_64(key);
        if self.hashes.last() != Some(&h) {
            self.hashes.push(h);
        }
    }

    /// Encodes: probe count (1 byte) then the bit array.
    pub fn build(&self, bits_per_key: usize) -> Vec<u8> {
        let bits = (self.hashes.len() * bits_per_key).max(64);
        let bytes = bits.div_ceil(8);
        let bits = bytes * 8;
        let k = ((bits_per_key as f64) * 0.69).round().clamp(1.0, 30.0) as u8;
        let mut out = vec![0u8; bytes + 1];
        out[0] = k;
        for &h in &self.hashes {
            let (mut a, b) = (h, h.rotate_left(32) | 1);
            for _ in 0..k {
                let bit = (a % bits as u64) as usize;
                out[1 + bit / 8] |= 1 << (bit % 8);
                a = a.wrapping_add(b);
            }
        }
        out
    }
}

/// A decoded filter.
#[derive(Debug, Clone)]
pub struct Bloom {
    data: Vec<u8>,
}

impl Bloom {
    /// Wraps an encoded filter.
    pub fn new(data: Vec<u8>) -> Self {
        Self { data }
    }

    /// False means the key is certainly absent.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        if self.data.len() < 2 {
            return true;
        }
        let k = self.data[0];
        let bits = ((self.data.len() - 1) * 8) as u64;
        let h = xxhash_rust::xxh3::xxh3_64(key);
        let (mut a, b) = (h, h.rotate_left(32) | 1);
        for _ in 0..k {
            let bit = (a % bits) as usize;
            if self.data[1 + bit / 8] & (1 << (bit % 8)) == 0 {
                return false;
            }
            a = a.wrapping_add(b);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = BloomBuilder::default();
        for i in 0..10_000u32 {
            b.add(&i.to_be_bytes());
        }
        let f = Bloom::new(b.build(10));
        assert!((0..10_000u32).all(|i| f.may_contain(&i.to_be_bytes())));
        let fp = (10_000..110_000u32)
            .filter(|i| f.may_contain(&i.to_be_bytes()))
            .count();
        assert!(fp < 2_000, "false positive rate too high: {fp}/100000");
    }
}
