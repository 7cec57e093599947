//! The generator: PRNG stability, Zipf skew (seed 002 §4.1), uniform keys, values.

use quorumkv_bench::config::{Distribution, SEED_002_ZIPF};
use quorumkv_bench::workload::{make_value, next_op, value_id, GenOp, KeyChooser, Rng, Zipf};

#[test]
fn rng_is_stable_across_versions() {
    // SplitMix64 reference outputs for seed 0 (Steele et al.); a change here
    // would silently change every recorded --seed.
    let mut r = Rng::new(0);
    assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
    assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    let mut a = Rng::derive(7, 1, 2);
    let mut b = Rng::derive(7, 1, 2);
    let mut c = Rng::derive(7, 1, 3);
    let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
    assert_eq!(x, y);
    assert_ne!(x, z);
    for _ in 0..10_000 {
        let f = a.next_f64();
        assert!((0.0..1.0).contains(&f));
        assert!(a.below(10) < 10);
    }
}

#[test]
fn zipf_seed_002_puts_90_percent_on_10_percent_of_keys() {
    let z = Zipf::new(1000, SEED_002_ZIPF);
    let exact = z.mass_of_top(100);
    assert!(
        (exact - 0.90).abs() < 0.01,
        "analytic mass of the top 10 % = {exact}"
    );

    let mut rng = Rng::new(42);
    let draws = 200_000;
    let mut hits = vec![0u32; 1000];
    for _ in 0..draws {
        hits[z.sample(&mut rng)] += 1;
    }
    let top: u32 = hits[..100].iter().sum();
    let frac = top as f64 / draws as f64;
    assert!(
        (frac - 0.90).abs() < 0.01,
        "empirical mass of the top 10 % = {frac}"
    );
    // Rank order: key 0 is the most popular, and popularity decreases.
    assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[500]);
}

#[test]
fn uniform_and_hotspot_keys() {
    let mut rng = Rng::new(1);
    let u = KeyChooser::new(Distribution::Uniform, 10);
    let mut hits = [0u32; 10];
    for _ in 0..100_000 {
        hits[u.sample(&mut rng)] += 1;
    }
    assert!(
        hits.iter().all(|&h| (9_000..11_000).contains(&h)),
        "{hits:?}"
    );
    let h = KeyChooser::new(Distribution::Hotspot, 10);
    assert!((0..100).all(|_| h.sample(&mut rng) == 0));
}

#[test]
fn get_fraction_is_respected() {
    let mut rng = Rng::new(3);
    let k = KeyChooser::new(Distribution::Uniform, 10);
    let gets = (0..100_000)
        .filter(|_| matches!(next_op(&mut rng, &k, 0.9), GenOp::Get { .. }))
        .count();
    assert!((89_000..91_000).contains(&gets), "{gets}");
    assert!((0..1000).all(|_| matches!(next_op(&mut rng, &k, 0.0), GenOp::Put { .. })));
}

#[test]
fn values_are_unique_and_padded() {
    let v = make_value(3, 17, 1024);
    assert_eq!(v.len(), 1024);
    assert_eq!(value_id(&v), "c3-17");
    assert_ne!(value_id(&make_value(3, 18, 8)), value_id(&v));
    // Smaller than the id: the id is kept whole.
    assert_eq!(value_id(&make_value(12345, 67890, 4)), "c12345-67890");
}
