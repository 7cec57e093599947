//! The liveness checks beyond the bound: the stall probe (issue 11) and
//! the load phase's starvation check (issue 12). Each catches its injected
//! bug, by its own message, and passes the correct protocol.

use quorumkv_core::protocol::lamport::Lamport;
use quorumkv_core::protocol::lease_lock::LeaseLock;
use quorumkv_core::protocol::ring::Ring;
use quorumkv_sim::registry::register;
use quorumkv_sim::*;

mod common;
use common::{cfg, details, run};

fn assert_all_pass(s: &Summary, what: &str) {
    assert!(s.all_passed(), "{what}: {:#?}", details(s));
}

/// Some seed fails, and every failure is the check's (by its message).
fn assert_caught_by(s: &Summary, what: &str, message: &str) {
    let d = details(s);
    assert!(!d.is_empty(), "{what} survived {} seeds", s.seeds_run);
    assert!(d.iter().all(|l| l.contains(message)), "{what}: {d:#?}");
}

/// Issue 12: forwarding first starves a server's writes under the load
/// phase (seed 004 lines 205-209); nb_msg and FIFO do not. The window is
/// pinned at 16 (an unlimited one never queues, so no rule is needed).
#[test]
fn ring_starvation_is_caught_and_fair_rings_pass() {
    let ring = register::<Ring>();
    for n in [3, 5] {
        let mut c = cfg("ring", "none", &[("window", "16")]);
        c.replicas = Some(n);
        for fairness in ["nb-msg", "fifo"] {
            let mut fair = c.clone();
            fair.options.push(("fairness".into(), fairness.into()));
            // A quarter of the seeds draw the load phase.
            assert_all_pass(&run(&ring, &fair, "0..24"), fairness);
        }
        c.bug = Some("ring-fifo-forwarding".into());
        assert_caught_by(&run(&ring, &c, "0..40"), "fifo-forwarding", "starvation");
    }
}

/// Issue 11: a failed lock round that keeps its grants refuses the lone
/// probe after the burst; with the grants released it succeeds.
#[test]
fn lease_lock_stall_is_caught_and_the_correct_protocol_passes() {
    let ll = register::<LeaseLock>();
    let c = cfg(
        "lease-lock",
        "none",
        &[("write-back", "true"), ("surplus-grants", "unlock")],
    );
    assert_all_pass(&run(&ll, &c, "0..20"), "lease-lock");
    let bug = SimConfig {
        bug: Some("lease-lock-no-unlock-after-failure".into()),
        ..c
    };
    assert_caught_by(&run(&ll, &bug, "0..10"), "no-unlock-after-failure", "stall");
}

/// Surplus grants left to expire (the seed's mode) block a replica for a
/// lease by design: the probe waits `ProtocolDef::linger` first, and
/// passes, with faults too.
#[test]
fn lease_lock_expiring_grants_are_no_stall() {
    let ll = register::<LeaseLock>();
    for faults in ["none", "all"] {
        let c = cfg(
            "lease-lock",
            faults,
            &[("write-back", "true"), ("surplus-grants", "expire")],
        );
        assert_all_pass(&run(&ll, &c, "0..20"), faults);
    }
}

/// The seed's REPLY_LOCK deferral deadlocks concurrent requests: still
/// caught as a liveness failure.
#[test]
fn lamport_seed_deferral_stays_caught() {
    let lamport = register::<Lamport>();
    let c = SimConfig {
        bug: Some("lamport-seed-deferral".into()),
        ..cfg("lamport", "none", &[("read-wait", "true")])
    };
    let s = run(&lamport, &c, "0..10");
    assert!(!s.failures.is_empty(), "seed-deferral survived 10 seeds");
    assert!(s
        .failures
        .iter()
        .all(|f| matches!(f.verdict, Verdict::Stuck { .. })));
}
