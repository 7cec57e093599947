//! The simulator half of the mutation-testing oracle (`scripts/mutants.sh`):
//! one fixed sweep with the default configuration, which draws every knob
//! per seed (faults, client mode, N, durability, divergence bias). A mutant
//! of a protocol core that makes any of these seeds fail is killed. Kept
//! small enough (a few seconds in debug) to run once per mutant.

use quorumkv_sim::*;

#[test]
fn fixed_sweep() {
    let proto = protocol::find("abd").unwrap();
    let seeds: SeedRange = "0..400".parse().unwrap();
    let s = sweep(&proto, &SimConfig::default(), seeds, 2, 1, |_| {}).unwrap();
    if let Some(f) = s.failures.first() {
        panic!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed());
}
