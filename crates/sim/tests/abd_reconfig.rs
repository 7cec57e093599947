//! ABD's membership change under the simulator's `reconfig` fault (add,
//! remove, replace servers while the other faults run; `abd/reconfig.rs`):
//! CI seeds of the clean code, and the injected reconfiguration bugs
//! caught, each as a history the checker refuses or a broken invariant.

use quorumkv_core::protocol::abd::Abd;
use quorumkv_sim::registry::register;

mod common;

/// The clean code passes every CI seed with reconfigurations
/// (`common::reconfig_ci_seeds`); a frozen replica finishes a change whose
/// proposer went silent.
#[test]
fn ci_seeds_abd_reconfig() {
    common::reconfig_ci_seeds(&register::<Abd>(), "abd");
}

/// Each reconfiguration bug is caught within 1 000 seeds at N = 5 (first
/// unsafe seed today in the comment; a range starts past the seeds where
/// the bug first shows as a stall; `quorumkv sim --protocol abd
/// --faults all,reconfig --durability fsync --replicas 5 --inject-bug B`).
#[test]
fn abd_reconfig_bugs_are_caught() {
    let bugs = [
        ("abd-reconfig-no-freeze", "0..1000"),             // 20
        ("abd-reconfig-transfer-from-one", "200..1000"),   // 216
        ("abd-reconfig-serve-before-transfer", "0..1000"), // 20
        ("abd-reconfig-ignore-accepted", "0..1000"),       // 19
    ];
    common::reconfig_bugs_caught(&register::<Abd>(), "abd", &bugs);
}
