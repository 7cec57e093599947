//! Operation generator: a seeded PRNG whose output never changes across
//! versions, key choosers (uniform, Zipf, hot spot) and value construction.

use bytes::Bytes;
use quorumkv_core::rng::SplitMix64;

use crate::config::Distribution;

/// The workload's generator: quorumkv-core's SplitMix64, whose output is
/// fixed by its definition, so a `--seed` replays the same operations
/// forever (STYLE.md §6), unlike `rand::StdRng`, which may change between
/// releases.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64(seed))
    }
    /// A generator for a sub-stream, e.g. one logical client of one point.
    pub fn derive(seed: u64, a: u64, b: u64) -> Rng {
        let mut r = Rng::new(
            seed ^ a.wrapping_mul(0xA076_1D64_78BD_642F) ^ b.wrapping_mul(0xE703_7ED1_A0B4_28DB),
        );
        r.next_u64();
        r
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        self.0.next_f64()
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    /// Exponentially distributed with the given mean (Poisson inter-arrivals).
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }
}

/// Draws key indices in `[0, n)`: index i has probability ∝ 1/(i+1)^s.
/// Inverse-CDF over a precomputed table: exact, O(log n) a draw.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        assert!(n > 0, "Zipf over zero keys");
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for i in 1..=n {
            acc += (i as f64).powf(-s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.next_f64();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
    /// Probability mass of the `k` most popular keys.
    pub fn mass_of_top(&self, k: usize) -> f64 {
        if k == 0 {
            0.0
        } else {
            self.cdf[k.min(self.cdf.len()) - 1]
        }
    }
}

/// Picks keys according to a [`Distribution`].
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform(usize),
    Zipf(Zipf),
    Hotspot,
}

impl KeyChooser {
    pub fn new(dist: Distribution, keys: usize) -> KeyChooser {
        match dist {
            Distribution::Uniform => KeyChooser::Uniform(keys),
            Distribution::Zipf(s) => KeyChooser::Zipf(Zipf::new(keys, s)),
            Distribution::Hotspot => KeyChooser::Hotspot,
        }
    }
    pub fn sample(&self, rng: &mut Rng) -> usize {
        match self {
            KeyChooser::Uniform(n) => rng.below(*n as u64) as usize,
            KeyChooser::Zipf(z) => z.sample(rng),
            KeyChooser::Hotspot => 0,
        }
    }
}

/// A generated operation.
#[derive(Clone, Debug, PartialEq)]
pub enum GenOp {
    Get { key: usize },
    Put { key: usize },
}

/// The key space of one point. Each point has its own key prefix, so every
/// point's history starts from empty keys and can be checked on its own.
#[derive(Clone, Debug)]
pub struct KeySpace {
    names: Vec<Bytes>,
}

impl KeySpace {
    pub fn new(point: usize, keys: usize) -> KeySpace {
        KeySpace {
            names: (0..keys)
                .map(|i| Bytes::from(format!("b{point}-k{i}")))
                .collect(),
        }
    }
    pub fn name(&self, i: usize) -> &Bytes {
        &self.names[i]
    }
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Draws the next operation of a logical client.
pub fn next_op(rng: &mut Rng, keys: &KeyChooser, get_fraction: f64) -> GenOp {
    let key = keys.sample(rng);
    if rng.next_f64() < get_fraction {
        GenOp::Get { key }
    } else {
        GenOp::Put { key }
    }
}

/// The byte that pads values to `--value-size`. Never part of an id.
pub const PAD: u8 = b'.';

/// A value unique to (client, seq), padded to `size` bytes. The unique prefix
/// is what histories record (see [`value_id`]).
pub fn make_value(client: u64, seq: u64, size: usize) -> Bytes {
    let id = format!("c{client}-{seq}");
    let mut v = Vec::with_capacity(size.max(id.len()));
    v.extend_from_slice(id.as_bytes());
    v.resize(size.max(id.len()), PAD);
    Bytes::from(v)
}

/// The identifying prefix of a value written by [`make_value`].
pub fn value_id(v: &[u8]) -> String {
    quorumkv_core::op::text(&v[..id_len(v)])
}

/// [`value_id`]'s bytes, without copying: what histories record of a value.
pub fn id_prefix(v: &Bytes) -> Bytes {
    v.slice(..id_len(v))
}

fn id_len(v: &[u8]) -> usize {
    v.iter().position(|&b| b == PAD).unwrap_or(v.len())
}

/// Dedicated clients (seed 004 §5: a reader and a writer per server):
/// whether closed-loop client `c` of `clients` only reads. The first
/// `round(get_fraction × clients)` clients read and the rest write; as
/// client c is pinned to server c mod N, every server gets the same mix
/// (up to one client), e.g. 2N clients at 0.5 = one reader and one writer
/// per server.
pub fn dedicated_reader(c: usize, clients: usize, get_fraction: f64) -> bool {
    c < (get_fraction * clients as f64).round() as usize
}
