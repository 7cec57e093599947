//! Seeds whose histories the checker once could not decide within 300 s:
//! a cluster down for seconds under crashes leaves a hundred operations
//! with unknown outcomes on one key, among them many deletes (all alike)
//! and puts whose values a read returned later. The checker now decides
//! each at once (open deletes are interchangeable; an observed unknown
//! put ends by its first reader's return), so a 2 s budget is plenty and
//! each seed must pass, not merely be undecided.

use std::time::Duration;

use quorumkv_core::protocol::zab::Zab;
use quorumkv_sim::registry::register;
use quorumkv_sim::*;

mod common;
use common::{cfg, details, run};

#[test]
fn zab_seeds_that_were_undecided_are_decided_and_pass() {
    let zab = register::<Zab>();
    let cfg = SimConfig {
        durability: Some(Durability::Fsync),
        check_timeout: Duration::from_secs(2),
        ..cfg("zab", "all", &[])
    };
    for seed in ["5716", "7201", "8198", "9418"] {
        let s = run(&zab, &cfg, seed);
        assert!(s.all_passed(), "seed {seed}: {:#?}", details(&s));
    }
}
