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
