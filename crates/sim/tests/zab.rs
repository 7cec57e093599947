//! Zab's CI seeds: every seed passes with every fault, durable logs (all
//! nodes may crash at once) and in memory mode (recovering servers); each
//! injected bug is caught within 100 seeds, and ZooKeeper's local reads
//! are caught not being linearizable.

use quorumkv_core::protocol::zab::Zab;
use quorumkv_sim::registry::register;
use quorumkv_sim::*;

mod common;
use common::sweep_passes;

fn zab_cfg(durability: Durability) -> SimConfig {
    SimConfig {
        protocol: "zab".into(),
        faults: FaultSet::all(),
        durability: Some(durability),
        ..SimConfig::default()
    }
}

#[test]
fn ci_seeds_zab() {
    let zab = register::<Zab>();
    for (durability, range) in [
        (Durability::Fsync, "0..300"),
        (Durability::Memory, "0..150"),
    ] {
        let s = sweep_passes(
            &zab,
            &zab_cfg(durability),
            range,
            &format!("zab {durability}"),
        );
        let t = &s.totals;
        assert!(t.crashes > 0 && t.pauses > 0 && t.link_downs > 0, "{t:?}");
    }
}

/// Each bug is caught within 100 seeds (first failing seed today in the
/// comment), as a linearizability violation, with every fault. TRUNC is
/// rare there (a server must hold proposals that no member of the next
/// quorum got: a leader change during a partition), so skip-trunc runs
/// with a `sync-limit` under the partitions' length and over 300 seeds:
/// about 1.4 % of those seeds catch it (14 of 0..1000 on the code that
/// sends proposals before the leader's own sync; partitions and delays
/// alone: 0.7 %, first at 945), so a schedule change may move the first.
#[test]
fn zab_injected_bugs_are_caught() {
    let zab = register::<Zab>();
    let short_sync = vec![("sync-limit".to_string(), "30ms".to_string())];
    for (bug, options, seeds) in [
        ("zab-deliver-before-quorum", vec![], "0..100"), // 9
        ("zab-reuse-epoch", vec![], "0..100"),           // 65
        ("zab-stale-log-leader", vec![], "0..100"),      // 2
        ("zab-skip-trunc", short_sync, "0..300"),        // 29
    ] {
        let c = SimConfig {
            bug: Some(bug.into()),
            faults: FaultSet::all(),
            options,
            // The history's teeth (`tests/invariants.rs`: the invariants).
            no_invariants: true,
            ..zab_cfg(Durability::Fsync)
        };
        // A bug may first show as a stall (reuse-epoch: seed 60) before a
        // seed shows what it breaks: the test asks for an unsafe seed.
        let s = sweep(&zab, &c, seeds.parse().unwrap(), 2, 5, |_| {}).unwrap();
        let f = (s.failures.iter())
            .find(|f| matches!(f.verdict, Verdict::Unsafe { .. }))
            .unwrap_or_else(|| panic!("{bug}: no unsafe seed in {seeds}: {:?}", s.failures));
        eprintln!("{bug}: first caught at seed {}", f.seed);
    }
}

/// `read=local` (ZooKeeper's reads) is not linearizable: caught at once.
/// The default (read index) passes the same seeds in `ci_seeds_zab`; reads
/// through the log are linearizable on these seeds too (the rare liveness
/// failures left are the module doc's known gap).
#[test]
fn local_reads_are_stale_and_logged_reads_are_not() {
    let zab = register::<Zab>();
    let opt = |v: &str| SimConfig {
        options: vec![("read".into(), v.into())],
        ..zab_cfg(Durability::Fsync)
    };
    let s = sweep(&zab, &opt("local"), "0..20".parse().unwrap(), 2, 1, |_| {}).unwrap();
    let f = s
        .failures
        .first()
        .expect("stale local reads within 20 seeds");
    assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
    let s = sweep(&zab, &opt("log"), "0..60".parse().unwrap(), 2, 3, |_| {}).unwrap();
    let unsafe_seeds: Vec<u64> = (s.failures.iter())
        .filter(|f| matches!(f.verdict, Verdict::Unsafe { .. }))
        .map(|f| f.seed)
        .collect();
    assert!(unsafe_seeds.is_empty(), "read=log: {unsafe_seeds:?}");
}

/// Issue 14: servers that lose their state (memory mode). Seeds 2138 and
/// 4470 were not linearizable (a server restarted empty completed a stale
/// candidate's quorum after ACKing a newer epoch's proposals) and 2563
/// tripped the debug check "SNAP behind what we delivered"; all pass since
/// the recovering server learns its epoch floor first (`zab/recovery.rs`).
/// The old code, `zab-recover-without-epoch`, fails 1219, 2138, 2350,
/// 2563 and 3438 of 0..10000 in memory mode (on the code with the leader's
/// disk and network in parallel; 2138 and 4470 before it).
#[test]
fn zab_memory_recovery_seeds() {
    let zab = register::<Zab>();
    let one = |c: &SimConfig, seed: u64| {
        let range = seed.to_string().parse().unwrap();
        sweep(&zab, c, range, 1, 1, |_| {}).unwrap()
    };
    for seed in [2138, 2563, 4470] {
        let s = one(&zab_cfg(Durability::Memory), seed);
        for f in &s.failures {
            eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
        }
        assert!(s.all_passed(), "memory seed {seed}");
    }
    let c = SimConfig {
        bug: Some("zab-recover-without-epoch".into()),
        no_invariants: true,
        ..zab_cfg(Durability::Memory)
    };
    for seed in [1219, 2138, 2563] {
        let s = one(&c, seed);
        let f = s.failures.first().expect("the old recovery fails");
        assert!(
            matches!(f.verdict, Verdict::Unsafe { .. }),
            "{seed}: {}",
            f.verdict
        );
    }
}
