//! Lease-lock's membership change under the simulator's `reconfig` fault
//! (add, remove, replace servers while the other faults run;
//! `protocol::reconfig`, `lease_lock/reconfig.rs`): CI seeds of the clean
//! code, and the injected reconfiguration bugs caught, each as a history
//! the checker refuses or a broken invariant.

use quorumkv_core::protocol::lease_lock::LeaseLock;
use quorumkv_sim::registry::register;
use quorumkv_sim::*;

mod common;

fn reconfig_cfg(replicas: u32, spares: u32) -> SimConfig {
    common::reconfig_cfg("lease-lock", replicas, spares)
}

/// The clean code passes every seed with reconfigurations drawn among
/// every server: linearizable, no invariant broken, and every operation
/// after the heal completes in time (a frozen replica finishes a change
/// whose proposer went silent). Changes do happen.
#[test]
fn ci_seeds_lease_lock_reconfig() {
    let ll = register::<LeaseLock>();
    for (n, spares, range) in [(3, 0, "0..60"), (4, 1, "0..60"), (5, 2, "0..60")] {
        let c = reconfig_cfg(n, spares);
        let s = sweep(&ll, &c, range.parse().unwrap(), 2, 0, |_| {}).unwrap();
        for f in &s.failures {
            eprintln!(
                "N={n} spares={spares} seed {} ({}): {}",
                f.seed, f.params, f.verdict
            );
        }
        assert!(s.all_passed(), "N={n} spares={spares}");
        assert!(s.totals.reconfigs > 0, "N={n}: {:?}", s.totals);
    }
}

/// Each reconfiguration bug is caught within 1 000 seeds at N = 5 (first
/// unsafe seed today in the comment; a range starts past the seeds where
/// the bug first shows as a stall; `quorumkv sim --protocol lease-lock
/// --faults all,reconfig --durability fsync --replicas 5 --inject-bug B`).
#[test]
fn lease_lock_reconfig_bugs_are_caught() {
    let ll = register::<LeaseLock>();
    for (bug, seeds) in [
        ("lease-lock-reconfig-no-freeze", "0..1000"), // 19
        ("lease-lock-reconfig-transfer-from-one", "400..1000"), // 420
        ("lease-lock-reconfig-serve-before-transfer", "0..1000"), // 34
        ("lease-lock-reconfig-ignore-accepted", "100..1000"), // 174
    ] {
        let c = SimConfig {
            bug: Some(bug.into()),
            ..reconfig_cfg(5, 0)
        };
        let s = sweep(&ll, &c, seeds.parse().unwrap(), 2, 1, |_| {}).unwrap();
        let f = (s.failures.first()).unwrap_or_else(|| panic!("{bug}: not caught in {seeds}"));
        eprintln!("{bug}: first caught at seed {}: {}", f.seed, f.verdict);
        assert!(
            matches!(
                f.verdict,
                Verdict::Unsafe { .. } | Verdict::Invariant { .. }
            ),
            "{bug}: {}",
            f.verdict
        );
    }
}
