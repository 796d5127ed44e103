//! Keys, values and key choosers shared by the load drivers (`strata-loadtest`,
//! `netbench`, and `slatebench`, which drives SlateDB with the same keys and choosers).

use rand::Rng;
use rand::rngs::StdRng;

/// Key distributions.
#[derive(Debug, Clone, Copy, clap::ValueEnum, serde::Serialize, PartialEq, Eq)]
pub enum Dist {
    /// Every key equally likely.
    Uniform,
    /// YCSB's zipfian (theta 0.99), scrambled.
    Zipfian,
    /// A hot fraction of the keys takes a fraction of the operations.
    Hotspot,
}

/// YCSB's zipfian generator (Gray et al.), scrambled by hashing so hot keys spread out.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// The generator over `n` keys with skew `theta`.
    pub fn new(n: u64, theta: f64) -> Self {
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Self {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    /// The key for a uniform draw `u` in [0, 1).
    pub fn next(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        xxhash_rust::xxh3::xxh3_64(&rank.min(self.n - 1).to_le_bytes()) % self.n
    }
}

/// Picks keys by a distribution.
pub struct KeyChooser {
    /// The distribution.
    pub dist: Dist,
    /// The zipfian generator (for `Dist::Zipfian`).
    pub zipf: Option<Zipf>,
    /// Hotspot: the fraction of keys that are hot.
    pub hot_fraction: f64,
    /// Hotspot: the fraction of operations on hot keys.
    pub hot_op_fraction: f64,
}

impl KeyChooser {
    /// The next key index below `n`.
    pub fn next(&self, rng: &mut StdRng, n: u64) -> u64 {
        match self.dist {
            Dist::Uniform => rng.random_range(0..n),
            Dist::Zipfian => self
                .zipf
                .as_ref()
                .map_or(0, |z| z.next(rng.random::<f64>()))
                .min(n - 1),
            Dist::Hotspot => {
                let hot = ((n as f64) * self.hot_fraction).max(1.0) as u64;
                if rng.random::<f64>() < self.hot_op_fraction {
                    rng.random_range(0..hot)
                } else {
                    rng.random_range(hot.min(n - 1)..n)
                }
            }
        }
    }
}

/// The key of record `i` (YCSB's `user` + a hash, so keys spread over the key space).
pub fn key(i: u64) -> Vec<u8> {
    format!("user{:020}", xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())).into_bytes()
}

/// A value of `len` random lowercase letters.
pub fn value(rng: &mut StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random_range(b'a'..=b'z')).collect()
}
