//! Adaptive ZabCT (`--opt broadcast=ct-q,p=upper`, `zab/adaptive.rs`, seed
//! 003 chapter 4): CI seeds under every fault ct-q's assumptions admit, and
//! the switch to Zab and back under load with follower crashes, delivery
//! going on throughout.

use quorumkv_core::op::Outcome;
use quorumkv_core::protocol::zab::Zab;
use quorumkv_sim::registry::register;
use quorumkv_sim::*;

fn adaptive_cfg(durability: Durability) -> SimConfig {
    SimConfig {
        protocol: "zab".into(),
        // delay, loss, partition, crash, pause (dup and reorder are kept
        // off FIFO links anyway; outages are outside A1).
        faults: FaultSet::all().without(Fault::Outage),
        durability: Some(durability),
        options: vec![
            ("broadcast".into(), "ct-q".into()),
            ("p".into(), "upper".into()),
        ],
        ..SimConfig::default()
    }
}

/// The adaptive coin's counters at the end of a run, per server, from the
/// trace's `END` lines (`ZabNode::status`): `(p, windows, infeasible,
/// C_m expiries, switches, voting for Zab)`.
#[derive(Debug, Default, Clone, Copy)]
struct Coin {
    p: f64,
    windows: u64,
    infeasible: u64,
    cm: u64,
    switches: u64,
    want_zab: bool,
    leader: bool,
}

fn coins(r: &SeedReport) -> Vec<Coin> {
    let trace = r.trace.as_ref().expect("traced");
    (trace.iter().filter(|l| l.contains("END n")))
        .filter_map(|l| {
            let s = l.split("coin=").nth(1)?;
            let mut c = Coin {
                leader: l.contains(" leader "),
                ..Coin::default()
            };
            for kv in s.split_whitespace().next()?.split(',') {
                let (k, v) = kv.split_once(':')?;
                match k {
                    "p" => c.p = v.parse().ok()?,
                    "win" => c.windows = v.parse().ok()?,
                    "inf" => c.infeasible = v.parse().ok()?,
                    "cm" => c.cm = v.parse().ok()?,
                    "sw" => c.switches = v.parse().ok()?,
                    "zab" => c.want_zab = v == "true",
                    _ => {}
                }
            }
            Some(c)
        })
        .collect()
}

/// Every CI seed passes the linearizability checker (and liveness after
/// the heal), durable and in memory mode.
#[test]
fn ci_seeds_adaptive_ct_q() {
    let zab = register::<Zab>();
    for (durability, range) in [(Durability::Fsync, "0..40"), (Durability::Memory, "0..30")] {
        let c = adaptive_cfg(durability);
        let s = sweep(&zab, &c, range.parse().unwrap(), 2, 3, |_| {}).unwrap();
        for f in &s.failures {
            eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
        }
        assert!(s.all_passed(), "{durability}: {} failed", s.failures.len());
        assert!(s.totals.crashes > 0, "{:?}", s.totals);
    }
}

/// Under load (20 clients, N = 3) with followers crashing: the followers
/// find p (P2 = 0.499 at N = 3, Table 5.2), the cluster runs ct-q, a crash
/// sends it to Zab and it comes back; completed writes never stop for
/// long (no write waits for ACKs that never come: the op timeout is 2 s).
#[test]
#[ignore = "R1 infeasible in the simulator: lambda 700/s times d 0.5 ms is 0.35 abcasts per delay, W(p) needs ~2, so the thesis' rule keeps Zab (README, adaptive ct-q); needs larger sim link delays"]
fn adaptive_ct_q_goes_to_zab_and_back_and_delivery_goes_on() {
    let zab = register::<Zab>();
    let mut c = adaptive_cfg(Durability::Fsync);
    c.faults = (FaultSet::all())
        .without(Fault::Outage)
        .without(Fault::Partition)
        .without(Fault::Loss)
        .without(Fault::Delay)
        .without(Fault::Pause);
    (c.replicas, c.clients, c.ops, c.keys, c.trace) = (Some(3), 20, 3000, Some(8), true);
    // Windows of 25 ms: a run lasts a few hundred ms of virtual time.
    c.options.push(("lambda-window".into(), "25ms".into()));
    let mut back = 0;
    for seed in 0..4 {
        let r = (zab.run_seed)(&c, seed).unwrap();
        assert!(r.verdict.passed(), "seed {seed}: {}", r.verdict);
        let cs = coins(&r);
        assert!(cs.iter().any(|c| c.windows >= 3), "seed {seed}: {cs:?}");
        // Feasible at this load: some follower chose P2 = 0.499.
        let chose = cs.iter().any(|c| !c.leader && (c.p - 0.499).abs() < 1e-9);
        assert!(chose, "seed {seed}: {cs:?}");
        // Some server went to Zab (every follower starts voting for it,
        // a crash makes the others vote) and back at least once.
        if cs.iter().any(|c| c.switches >= 2) {
            back += 1;
        }
        // Delivery goes on: no gap between completed writes near the
        // op timeout.
        let mut done: Vec<u64> = (r.history.iter())
            .filter(|o| !o.op.is_read() && matches!(o.outcome, Outcome::Ok(_)))
            .map(|o| o.complete_ns)
            .collect();
        done.sort_unstable();
        let gap = done.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(done.len() > 100, "seed {seed}: {} writes", done.len());
        assert!(gap < 500_000_000, "seed {seed}: {gap} ns without a write");
    }
    assert!(back >= 3, "switched to Zab and back in {back} of 4 seeds");
}
