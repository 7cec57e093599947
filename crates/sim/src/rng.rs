//! The simulator's PRNG: xoshiro256** seeded through SplitMix64.
//!
//! Written out here (not taken from `rand`) so that a seed replays byte for
//! byte forever: the sequence depends only on this file, never on a crate
//! version. Each concern of a run (workload, network, nemesis, parameters)
//! draws from its own stream, so turning one fault on does not change the
//! operations the clients issue.

/// SplitMix64 step (the project's one, in `quorumkv-core`): seeds xoshiro
/// and derives streams.
pub use quorumkv_core::rng::splitmix64;

/// A seed for a part of a run (a node's life, a client) from the run's
/// seed and the part's coordinates, so the cores' random sources differ
/// per node, per restart and per client, and replay with the seed.
pub fn derive(seed: u64, parts: &[u64]) -> u64 {
    let mut x = seed;
    for &p in parts {
        let mut sm = x ^ p.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = splitmix64(&mut sm);
    }
    x
}

/// xoshiro256** (Blackman & Vigna), 256 bits of state.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// Independent streams of one seed.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Params = 1,
    Workload = 2,
    Network = 3,
    Nemesis = 4,
    Timers = 5,
    Links = 6,
    Swarm = 7,
    Shape = 8,
    /// How long each fsync takes.
    Disk = 9,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    /// The generator of one stream of a seed.
    pub fn stream(seed: u64, stream: Stream) -> Rng {
        let mut sm = seed ^ (stream as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        Rng::new(splitmix64(&mut sm))
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (`n > 0`), by widening multiply (Lemire, no division).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range({lo}, {hi})");
        if hi - lo == u64::MAX {
            return self.next_u64();
        }
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// An index into a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

impl quorumkv_core::rng::Draw for Rng {
    fn next_u64(&mut self) -> u64 {
        Rng::next_u64(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first outputs of seed 0 are frozen: if this test changes, every
    /// replay command ever printed stops replaying.
    #[test]
    fn sequence_is_frozen() {
        let mut r = Rng::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = Rng::new(0);
        assert_eq!(got, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        // SplitMix64 reference value for state 0 (Vigna's splitmix64.c).
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(got, FROZEN_SEED0);
    }

    const FROZEN_SEED0: [u64; 3] = [
        0x99EC_5F36_CB75_F2B4,
        0xBF6E_1F78_4956_452A,
        0x1A5F_849D_4933_E6E0,
    ];

    #[test]
    fn below_and_range_stay_in_bounds() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            assert!(r.below(3) < 3);
            let x = r.range(5, 9);
            assert!((5..=9).contains(&x));
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(r.range(4, 4), 4);
    }

    #[test]
    fn streams_differ() {
        let a = Rng::stream(1, Stream::Workload).next_u64();
        let b = Rng::stream(1, Stream::Network).next_u64();
        let c = Rng::stream(2, Stream::Workload).next_u64();
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
