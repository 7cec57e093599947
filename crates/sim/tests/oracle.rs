//! The simulator half of the mutation-testing oracle (`scripts/mutants.sh`):
//! fixed sweeps, a few seconds in debug, run once per mutant. A mutant of a
//! protocol core that makes any of them fail is killed.

use quorumkv_sim::*;

mod common;

fn run(cfg: &SimConfig, range: &str) -> Summary {
    let proto = registry::find(&cfg.protocol).unwrap();
    let s = sweep(&proto, cfg, range.parse().unwrap(), 2, 1, |_| {}).unwrap();
    if let Some(f) = s.failures.first() {
        panic!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed());
    s
}

/// The default configuration, which draws every knob per seed (faults,
/// client mode, N, durability, divergence bias).
#[test]
fn fixed_sweep() {
    run(&SimConfig::default(), "0..400");
}

/// Membership change of ABD and lease-lock (`protocol::reconfig`): every
/// fault plus reconfigurations at N = 3 and 5 (two spares), durable,
/// liveness after the heal included; changes must happen.
#[test]
fn reconfig_fixed_sweep() {
    for (protocol, n, spares) in [
        ("abd", 3, 0),
        ("abd", 5, 2),
        ("lease-lock", 3, 0),
        ("lease-lock", 5, 2),
    ] {
        let cfg = SimConfig {
            protocol: protocol.into(),
            faults: "all,reconfig".parse().unwrap(),
            durability: Some(Durability::Fsync),
            replicas: Some(n),
            options: vec![("spares".into(), spares.to_string())],
            ..SimConfig::default()
        };
        let s = run(&cfg, "0..150");
        assert!(s.totals.reconfigs > 0);
    }
}

/// Lost and duplicated messages alone never make an operation time out:
/// the coordinator retransmits to the replicas that have not answered.
/// (Kills mutants that stop the retransmit tick, which the default sweep
/// cannot see: its unknown outcomes are explained by crashes and partitions.)
#[test]
fn loss_alone_never_leaves_an_operation_unknown() {
    let cfg = SimConfig {
        faults: "loss,dup".parse().unwrap(),
        ..SimConfig::default()
    };
    let s = run(&cfg, "0..40");
    assert!(s.totals.lost > 0);
    assert_eq!((s.totals.ops_unknown, s.totals.ops_fail), (0, 0));
}

/// The ring (seed 004) in its model: crashes up to N-1, delay, reorder and
/// pauses at N = 3 and 5, and no faults (where a quarter of the seeds run
/// the load phase and its starvation check).
#[test]
fn ring_fixed_sweep() {
    for (n, faults, range) in [
        (3, "crash,delay,reorder,pause", "0..150"),
        (5, "crash,delay,reorder,pause", "0..150"),
        (3, "none", "0..40"),
        (5, "none", "0..40"),
    ] {
        let cfg = SimConfig {
            protocol: "ring".into(),
            replicas: Some(n),
            faults: faults.parse().unwrap(),
            ..SimConfig::default()
        };
        run(&cfg, range);
    }
}

/// The two blocking protocols (issue 11) in their models. Lamport: crashes
/// (up to N-1), delay and pauses at N = 3 and 5, and connection resets
/// (`loss` on its FIFO links); lease-lock: every fault.
#[test]
fn blocking_fixed_sweep() {
    for (protocol, n, faults, range) in [
        ("lamport", 3, "crash,delay,pause", "0..300"),
        ("lamport", 5, "crash,delay,pause", "0..200"),
        ("lamport", 3, "loss,delay,partition", "0..100"),
        ("lease-lock", 3, "all", "0..200"),
        ("lease-lock", 5, "all", "0..100"),
    ] {
        let cfg = SimConfig {
            protocol: protocol.into(),
            replicas: Some(n),
            faults: faults.parse().unwrap(),
            ..SimConfig::default()
        };
        run(&cfg, range);
    }
}

/// Zab with every fault: durable logs (every node may crash at once) and
/// memory mode (servers that lost their state recover through a leader).
#[test]
fn zab_fixed_sweep() {
    for (durability, range) in [(Durability::Fsync, "0..150"), (Durability::Memory, "0..60")] {
        let cfg = SimConfig {
            protocol: "zab".into(),
            durability: Some(durability),
            ..SimConfig::default()
        };
        run(&cfg, range);
    }
}

/// Zab's znode service (seed 001): sessions (abandoned ones expire),
/// ephemerals, sequential names and watches under every fault, checked
/// with the znode model and `event_before_change`. A seed the checker's
/// budget cannot decide is skipped: a mutant that only makes seeds
/// undecided is missed, not caught.
#[test]
fn zab_znode_fixed_sweep() {
    for (durability, range) in [(Durability::Fsync, "0..60"), (Durability::Memory, "0..30")] {
        let cfg = SimConfig {
            check_timeout: std::time::Duration::from_secs(20),
            ..common::znode_cfg(durability)
        };
        let proto = registry::find(&cfg.protocol).unwrap();
        let s = sweep(&proto, &cfg, range.parse().unwrap(), 2, 1, |_| {}).unwrap();
        let bad = (s.failures.iter()).find(|f| !matches!(f.verdict, Verdict::Undecided { .. }));
        if let Some(f) = bad {
            panic!("seed {} ({}): {}", f.seed, f.params, f.verdict);
        }
    }
}
