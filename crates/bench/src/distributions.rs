//! # Key distributions of the YCSB workloads
//!
//! * [`Zipfian`]: ranks 0..n with P(rank i) ∝ 1/(i+1)^θ, drawn in O(1) with the method of Gray et al.
//!   ("Quickly generating billion-record synthetic databases", SIGMOD 1994), as YCSB's `ZipfianGenerator`
//!   does. ζ(n, θ) is computed once and extended incrementally when n grows (for the `latest` distribution).
//! * [`ScrambledZipfian`]: YCSB's request distribution `zipfian`: a zipfian rank over a large fixed item space
//!   (10^10 items, θ = 0.99, ζ precomputed as YCSB does), hashed with FNV-1a 64 and reduced modulo the key
//!   count, so that popular keys are spread over the key space instead of clustered at its start.
//! * [`Latest`]: YCSB's `latest`: the newest keys are the most popular (rank 0 = the last key inserted).
//! * `Uniform`: every key equally likely.
//!
//! Every generator draws from a caller-supplied RNG, so each thread has its own seeded stream.

use rand::Rng;

/// The skew YCSB uses by default.
pub const YCSB_THETA: f64 = 0.99;
/// Item space of YCSB's scrambled zipfian generator.
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// ζ(10^10, 0.99), the constant YCSB precomputes for its scrambled zipfian generator.
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// ζ(n, θ) − ζ(m, θ) = Σ_{i=m+1..n} 1/i^θ.
fn zeta_range(m: u64, n: u64, theta: f64) -> f64 {
    (m + 1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Zipfian ranks over 0..n (see the module doc).
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2: f64,
    eta: f64,
}

impl Zipfian {
    /// Ranks over `0..items` (at least 1) with skew `theta` (0 < θ < 1).
    pub fn new(items: u64, theta: f64) -> Self {
        let zetan = zeta_range(0, items.max(1), theta);
        Self::with_zeta(items.max(1), theta, zetan)
    }

    fn with_zeta(items: u64, theta: f64, zetan: f64) -> Self {
        let zeta2 = zeta_range(0, 2, theta);
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            zeta2,
            eta: 0.0,
        };
        z.eta = z.compute_eta();
        z
    }

    fn compute_eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// Number of ranks.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Grows the rank space to `items` (never shrinks), extending ζ incrementally.
    pub fn grow_to(&mut self, items: u64) {
        if items > self.items {
            self.zetan += zeta_range(self.items, items, self.theta);
            self.items = items;
            self.eta = self.compute_eta();
        }
    }

    /// Probability of rank `i` under the exact distribution (for tests and reports).
    pub fn probability(&self, i: u64) -> f64 {
        1.0 / ((i + 1) as f64).powf(self.theta) / self.zetan
    }

    /// A rank in 0..items; 0 is the most popular.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// 64-bit FNV-1a over the little-endian bytes of `v`.
pub fn fnv1a64(v: u64) -> u64 {
    fnv1a(&v.to_le_bytes())
}

/// YCSB's scrambled zipfian over keys 0..keys.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    keys: u64,
    ranks: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(keys: u64) -> Self {
        ScrambledZipfian {
            keys: keys.max(1),
            ranks: Zipfian::with_zeta(SCRAMBLED_ITEMS, YCSB_THETA, SCRAMBLED_ZETAN),
        }
    }

    /// A key in 0..keys.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        fnv1a64(self.ranks.next(rng)) % self.keys
    }
}

/// YCSB's `latest`: key `newest − rank` with a zipfian rank, where `newest + 1` keys exist.
#[derive(Debug, Clone)]
pub struct Latest {
    ranks: Zipfian,
}

impl Latest {
    /// For a key space that starts with `keys` keys.
    pub fn new(keys: u64) -> Self {
        Latest {
            ranks: Zipfian::new(keys.max(1), YCSB_THETA),
        }
    }

    /// A key in 0..keys, where `keys` (the current key count) may have grown since the last call.
    pub fn next(&mut self, keys: u64, rng: &mut impl Rng) -> u64 {
        let keys = keys.max(1);
        self.ranks.grow_to(keys);
        let rank = self.ranks.next(rng).min(keys - 1);
        keys - 1 - rank
    }
}

/// How a workload picks existing keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDistribution {
    Uniform,
    Zipfian,
    Latest,
}

impl KeyDistribution {
    pub fn name(self) -> &'static str {
        match self {
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipfian => "zipfian",
            KeyDistribution::Latest => "latest",
        }
    }
}

/// A per-thread key chooser for one distribution.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    Uniform,
    Zipfian(ScrambledZipfian),
    Latest(Latest),
}

impl KeyChooser {
    /// A chooser over a key space of `keys` keys at the start.
    pub fn new(dist: KeyDistribution, keys: u64) -> Self {
        match dist {
            KeyDistribution::Uniform => KeyChooser::Uniform,
            KeyDistribution::Zipfian => KeyChooser::Zipfian(ScrambledZipfian::new(keys)),
            KeyDistribution::Latest => KeyChooser::Latest(Latest::new(keys)),
        }
    }

    /// A key below `keys`: the loaded keys for uniform and zipfian (whose key space is fixed at creation,
    /// as in YCSB), every key inserted so far for latest.
    pub fn next(&mut self, keys: u64, rng: &mut impl Rng) -> u64 {
        match self {
            KeyChooser::Uniform => rng.random_range(0..keys.max(1)),
            KeyChooser::Zipfian(z) => z.next(rng).min(keys.max(1) - 1),
            KeyChooser::Latest(l) => l.next(keys, rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Within `z` standard deviations of a binomial(n, p) count.
    fn near(count: u64, n: u64, p: f64, z: f64) -> bool {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (count as f64 - mean).abs() <= z * sd
    }

    #[test]
    fn zipfian_head_matches_the_exact_distribution() {
        let z = Zipfian::new(1000, YCSB_THETA);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let n = 400_000;
        let mut counts = vec![0u64; 1000];
        for _ in 0..n {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // Gray's method is exact for ranks 0 and 1.
        for (i, &c) in counts.iter().enumerate().take(2) {
            let p = z.probability(i as u64);
            assert!(near(c, n, p, 5.0), "rank {i}: {c} of {n}, p = {p}");
        }
        // The rest is an approximation: the mass of the top 10% of ranks within 2% of the exact one, and
        // counts decreasing along the head.
        let top: u64 = counts[..100].iter().sum();
        let exact: f64 = (0..100).map(|i| z.probability(i)).sum();
        let got = top as f64 / n as f64;
        assert!((got - exact).abs() < 0.02, "top 10%: {got} vs {exact}");
        assert!(counts[0] > counts[1] && counts[1] > counts[5] && counts[5] > counts[50]);
        assert!(counts.iter().all(|&c| c < n));
    }

    #[test]
    fn zipfian_growth_equals_fresh_construction() {
        let mut grown = Zipfian::new(100, YCSB_THETA);
        grown.grow_to(5000);
        let fresh = Zipfian::new(5000, YCSB_THETA);
        assert!((grown.zetan - fresh.zetan).abs() < 1e-9);
        assert!((grown.eta - fresh.eta).abs() < 1e-12);
        assert_eq!(grown.items(), 5000);
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_spread_out() {
        let keys = 10_000;
        let z = ScrambledZipfian::new(keys);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let n = 200_000u64;
        let mut counts = vec![0u64; keys as usize];
        for _ in 0..n {
            counts[z.next(&mut rng) as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        // Rank 0 over 10^10 items has p = 1/ζ = 3.8%: the hottest key gets about that share.
        let p0 = 1.0 / SCRAMBLED_ZETAN;
        assert!(near(sorted[0], n, p0, 6.0), "{} vs {}", sorted[0], p0);
        // Skewed: the hottest 1% of keys take far more than 1% of requests.
        let hot: u64 = sorted[..100].iter().sum();
        assert!(hot as f64 > 0.2 * n as f64, "{hot}");
        // Spread out: the hottest key is not at the start of the key space (hash scrambling).
        let hottest = counts.iter().position(|&c| c == sorted[0]).unwrap();
        assert_ne!(hottest, 0);
        // The ten hottest keys are not clustered in one 10% slice of the key space.
        let mut idx: Vec<usize> = (0..keys as usize).collect();
        idx.sort_unstable_by(|&a, &b| counts[b].cmp(&counts[a]));
        let slices: std::collections::HashSet<usize> =
            idx[..10].iter().map(|&i| i / 1000).collect();
        assert!(slices.len() >= 4, "{slices:?}");
    }

    #[test]
    fn latest_prefers_the_newest_keys_and_follows_growth() {
        let mut l = Latest::new(1000);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 100_000u64;
        let mut newest = 0;
        for _ in 0..n {
            let k = l.next(1000, &mut rng);
            assert!(k < 1000);
            if k == 999 {
                newest += 1;
            }
        }
        let z = Zipfian::new(1000, YCSB_THETA);
        assert!(near(newest, n, z.probability(0), 5.0), "{newest}");
        // After growth the newest key is the new last one.
        let mut hits = 0;
        for _ in 0..10_000 {
            let k = l.next(2000, &mut rng);
            assert!(k < 2000);
            if k == 1999 {
                hits += 1;
            }
        }
        assert!(hits > 500, "{hits}");
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let mut c = KeyChooser::new(KeyDistribution::Uniform, 10);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[c.next(10, &mut rng) as usize] += 1;
        }
        for (i, &k) in counts.iter().enumerate() {
            assert!(near(k, 100_000, 0.1, 5.0), "key {i}: {k}");
        }
    }
}
