//! Helpers shared by the sweep tests (`mod common;`); each test crate uses
//! some of them.
#![allow(dead_code)]

use quorumkv_sim::registry::Registered;
use quorumkv_sim::*;

/// A config of `protocol` under `faults` with options `opts`.
pub fn cfg(protocol: &str, faults: &str, opts: &[(&str, &str)]) -> SimConfig {
    SimConfig {
        protocol: protocol.into(),
        faults: faults.parse().unwrap(),
        options: (opts.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..SimConfig::default()
    }
}

/// Sweep `seeds` on two threads.
pub fn run(p: &Registered, c: &SimConfig, seeds: &str) -> Summary {
    sweep(p, c, seeds.parse().unwrap(), 2, 0, |_| {}).unwrap()
}

/// The failures' details, one line each.
pub fn details(s: &Summary) -> Vec<String> {
    (s.failures.iter())
        .map(|f| format!("seed {}: {}", f.seed, f.verdict))
        .collect()
}

/// Sweep `seeds` on two threads, print each failure with its parameters,
/// and require every seed to pass.
pub fn sweep_passes(p: &Registered, c: &SimConfig, seeds: &str, what: &str) -> Summary {
    let s = sweep(p, c, seeds.parse().unwrap(), 2, 3, |_| {}).unwrap();
    for f in &s.failures {
        eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed(), "{what} failed {} seeds", s.failures.len());
    s
}

/// The znode workload (`--znode`) on Zab under every fault, `durability`.
pub fn znode_cfg(durability: Durability) -> SimConfig {
    SimConfig {
        protocol: "zab".into(),
        faults: "delay,loss,partition,crash,pause".parse().unwrap(),
        durability: Some(durability),
        znode: true,
        // The znode model checks the whole tree as one object (sequential
        // counters, parents and sessions tie the paths together): small
        // histories keep the search within the budget.
        // Unknown outcomes (timeouts) stay open to the end of the history
        // and multiply the search: a debug build needs the longer budget.
        ops: 50,
        clients: 3,
        check_timeout: std::time::Duration::from_secs(60),
        ..SimConfig::default()
    }
}

/// `protocol` with membership changes among every fault (`all,reconfig`),
/// durable, at N = `replicas` of which the last `spares` start outside.
pub fn reconfig_cfg(protocol: &str, replicas: u32, spares: u32) -> SimConfig {
    SimConfig {
        durability: Some(Durability::Fsync),
        replicas: Some(replicas),
        ..cfg(protocol, "all,reconfig", &[("spares", &spares.to_string())])
    }
}

/// The clean code of a protocol with membership change passes every seed
/// with reconfigurations drawn among every server, at N = 3, N = 4 with
/// one spare and N = 5 with two: linearizable, no invariant broken, every
/// operation after the heal completed in time. Changes do happen.
pub fn reconfig_ci_seeds(p: &Registered, protocol: &str) {
    for (n, spares, range) in [(3, 0, "0..60"), (4, 1, "0..60"), (5, 2, "0..60")] {
        let s = run(p, &reconfig_cfg(protocol, n, spares), range);
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

/// Each injected reconfiguration bug of `bugs` (name, seeds) is caught at
/// N = 5: its first failure in the range is a history the checker refuses
/// or a broken invariant.
pub fn reconfig_bugs_caught(p: &Registered, protocol: &str, bugs: &[(&str, &str)]) {
    for &(bug, seeds) in bugs {
        let c = SimConfig {
            bug: Some(bug.into()),
            ..reconfig_cfg(protocol, 5, 0)
        };
        let s = sweep(p, &c, seeds.parse().unwrap(), 2, 1, |_| {}).unwrap();
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
