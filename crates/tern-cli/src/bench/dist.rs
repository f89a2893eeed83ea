//! Key distributions for benchmarks: uniform and scrambled zipfian (as YCSB generates them).
//!
//! The zipfian generator is the algorithm of Gray et al., "Quickly Generating Billion-Record
//! Synthetic Databases" (SIGMOD 1994), as used by YCSB's `ZipfianGenerator`: item `i` (0-based)
//! is drawn with probability proportional to `1 / (i + 1)^theta`. YCSB then scrambles ranks with
//! a hash so the popular items are spread over the key space, not clustered at its start.

/// A small, fast, seedable generator (SplitMix64): benchmarks need speed and repeatability,
/// not cryptographic quality.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (no modulo bias worth measuring).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64's finaliser: a bijective 64-bit mix.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A zipfian rank's hash, as YCSB's scrambled zipfian uses it to place popular items. Offset
/// first: `mix64(0)` is 0, and the most popular rank must not land on item 0.
#[inline]
pub fn scramble(rank: u64) -> u64 {
    mix64(rank.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// How benchmark operations pick items among `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dist {
    /// Every item equally likely.
    Uniform,
    /// Scrambled zipfian, theta 0.99 (YCSB's default skew).
    Zipfian,
}

impl Dist {
    pub fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Zipfian => "zipfian",
        }
    }
}

/// Draws item indices in `0..n` from a distribution.
pub struct Sampler {
    n: u64,
    rng: SplitMix64,
    zipf: Option<Zipfian>,
}

impl Sampler {
    pub fn new(dist: Dist, n: u64, seed: u64) -> Sampler {
        let zipf = (dist == Dist::Zipfian).then(|| Zipfian::new(n, ZIPFIAN_THETA));
        Sampler { n, rng: SplitMix64::new(seed), zipf }
    }

    #[inline]
    pub fn next_index(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.below(self.n),
            // Scramble: the rank's hash picks the item, so hot items are spread out.
            Some(z) => scramble(z.rank(self.rng.unit())) % self.n,
        }
    }
}

/// YCSB's default skew.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// Gray et al.'s zipfian over ranks `0..n`: rank 0 is the most popular.
pub struct Zipfian {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// Ranks `0..n` (n > 0) with skew `theta` (0 < theta < 1).
    pub fn new(n: u64, theta: f64) -> Zipfian {
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2, theta);
        let nf = n as f64;
        Zipfian {
            n: nf,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    /// The rank for a uniform `u` in `[0, 1)`.
    #[inline]
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        ((self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n as u64 - 1)
    }
}

/// `sum_{i=1..n} 1 / i^theta`, computed once per `(n, theta)` in a process (10M items take
/// about 0.2 s, and every benchmark thread needs it).
fn zeta(n: u64, theta: f64) -> f64 {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CACHE: Mutex<Option<HashMap<(u64, u64), f64>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    *cache
        .get_or_insert_with(HashMap::new)
        .entry((n, theta.to_bits()))
        .or_insert_with(|| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_covers_the_range_evenly() {
        let mut s = Sampler::new(Dist::Uniform, 10, 1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[s.next_index() as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipfian_ranks_follow_the_power_law() {
        // Unscrambled ranks: P(rank 0) / P(rank 1) = 2^theta ≈ 1.99, and the top 1% of 10 000
        // items draw a large share.
        let z = Zipfian::new(10_000, ZIPFIAN_THETA);
        let mut rng = SplitMix64::new(7);
        let mut counts = vec![0u32; 10_000];
        let draws = 1_000_000;
        for _ in 0..draws {
            counts[z.rank(rng.unit()) as usize] += 1;
        }
        let ratio = f64::from(counts[0]) / f64::from(counts[1]);
        assert!((1.8..2.2).contains(&ratio), "rank 0 / rank 1 = {ratio}");
        let top: u32 = counts[..100].iter().sum();
        assert!(f64::from(top) / f64::from(draws) > 0.45, "top 1% share {top}");
        let mut s = Sampler::new(Dist::Zipfian, 10_000, 3);
        assert!((0..10_000).all(|_| s.next_index() < 10_000));
    }
}
