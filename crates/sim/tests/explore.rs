//! `quorumkv verify`'s explorer: a bounded exhaustive run per protocol
//! finds no violation, and injected bugs are found at small depth with a
//! trace that replays to the same failure.
//!
//! Debug builds run these; the depths are chosen so that the whole file
//! stays within about a minute on two slow cores.

use quorumkv_sim::explore::{self, ExploreConfig, Report};

/// The scope of these tests: the default N = 3, 2 clients, one operation
/// each, faults off unless a test turns them on.
fn scope(protocol: &str, depth: u32) -> ExploreConfig {
    ExploreConfig {
        protocol: protocol.into(),
        depth,
        crashes: 0,
        losses: 0,
        dups: 0,
        timers: 0,
        ..ExploreConfig::default()
    }
}

fn run(cfg: &ExploreConfig) -> Report {
    explore::explore(cfg, &mut |_| {}).unwrap_or_else(|e| panic!("{}: {e}", cfg.protocol))
}

fn assert_clean(cfg: &ExploreConfig) -> Report {
    let r = run(cfg);
    assert!(r.violation.is_none(), "{}: {:?}", cfg.protocol, r.violation);
    assert!(r.transitions > 0 && r.distinct > 1, "{}: {r}", cfg.protocol);
    assert_eq!(r.undecided, 0, "{}: {r}", cfg.protocol);
    r
}

#[test]
fn every_protocol_is_clean_at_a_bounded_depth_with_every_fault() {
    for p in ["abd", "ring", "lease-lock", "lamport", "zab"] {
        let cfg = ExploreConfig {
            crashes: 1,
            losses: 1,
            dups: 1,
            timers: 1,
            ..scope(p, 5)
        };
        let r = assert_clean(&cfg);
        assert_eq!(r.max_depth, 5, "{p}: {r}");
    }
}

#[test]
fn every_protocol_is_clean_deeper_without_faults() {
    for (p, depth) in [("abd", 9), ("lease-lock", 9), ("zab", 8)] {
        assert_clean(&scope(p, depth));
    }
}

/// From boot, Zab spends the first dozens of events electing a leader and
/// no operation completes at a depth the search reaches; `--warmup`
/// starts from the elected state, where both operations complete.
#[test]
fn zab_after_the_warm_up_completes_operations() {
    let cold = assert_clean(&scope("zab", 8));
    assert_eq!(cold.histories, 0, "{cold}");
    let warm = ExploreConfig {
        warmup: true,
        ..scope("zab", 12)
    };
    let r = assert_clean(&warm);
    assert!(r.histories > 0 && r.transitions > 100, "{r}");
    let path = explore::parse("issue c0").unwrap();
    let replayed = explore::replay_path(&warm, &path).unwrap();
    assert!(
        (replayed.lines.iter()).any(|l| l.contains("warm-up: settled")),
        "{:?}",
        replayed.lines
    );
}

/// Ring and Lamport's space without faults is small enough to exhaust:
/// every path ends (each operation done) below the bound.
#[test]
fn ring_and_lamport_are_exhausted_without_faults() {
    for p in ["ring", "lamport"] {
        let r = assert_clean(&scope(p, 40));
        assert!(r.exhausted, "{p}: {r}");
        assert!(r.leaves > 0 && r.histories > 0, "{p}: {r}");
        assert!(r.max_depth < 40, "{p}: {r}");
    }
}

/// A bug is found (a failure saying `expect`), its trace replays to the
/// same failure at its last step, and the same events without the bug do
/// not reproduce it.
fn found_and_replayed(cfg: &ExploreConfig, max_events: usize, expect: &str) {
    let r = run(cfg);
    let v = (r.violation.clone()).unwrap_or_else(|| panic!("{:?} not found: {r}", cfg.bug));
    assert!(
        v.path.len() <= max_events,
        "{} events: {:?}",
        v.path.len(),
        v
    );
    assert!(v.what.contains(expect), "{}", v.what);
    let text: Vec<String> = v.path.iter().map(|c| c.to_string()).collect();
    let path = explore::parse(&text.join("; ")).unwrap();
    assert_eq!(path, v.path);
    let again = explore::replay_path(cfg, &path).unwrap();
    assert_eq!(again.failure, Some((path.len(), v.what.clone())));
    let printed = again.lines.join("\n");
    assert_eq!(explore::parse(&printed).unwrap(), path, "{printed}");
    let fixed = ExploreConfig {
        bug: None,
        ..cfg.clone()
    };
    let clean = explore::replay_path(&fixed, &path).unwrap();
    let why = clean.failure.map(|(_, why)| why);
    assert_ne!(why.as_ref(), Some(&v.what), "{:?}", clean.lines);
}

#[test]
fn abd_minority_quorum_is_found_and_replays() {
    let cfg = ExploreConfig {
        bug: Some("abd-minority-quorum".into()),
        ..scope("abd", 10)
    };
    found_and_replayed(&cfg, 8, "not linearizable");
}

/// Found by lease-lock's per-step invariant (two running leases on one
/// key) as soon as both grants arrive, before any operation completes:
/// 6 events, where the history alone needed 14.
#[test]
fn lease_lock_minority_quorum_is_found_and_replays() {
    let cfg = ExploreConfig {
        bug: Some("lease-lock-minority-quorum".into()),
        ..scope("lease-lock", 16)
    };
    found_and_replayed(&cfg, 6, "one holder per key");
}

/// The ring's read inversion needs a read on one server while a write
/// from another is half-way round: three clients (two writers, a reader).
#[test]
fn ring_read_no_wait_is_found_and_replays() {
    let cfg = ExploreConfig {
        bug: Some("ring-read-no-wait".into()),
        clients: 3,
        ..scope("ring", 20)
    };
    found_and_replayed(&cfg, 15, "not linearizable");
}

#[test]
fn a_trace_that_does_not_fit_is_refused() {
    let cfg = scope("abd", 4);
    let path = explore::parse("issue c0; deliver n1>c0 @00000000000000ff").unwrap();
    let r = explore::replay_path(&cfg, &path).unwrap();
    let (step, why) = r.failure.expect("a message that was never sent");
    assert_eq!(step, 2);
    assert!(why.contains("does not fit"), "{why}");
    assert!(explore::parse("issue n1").is_err());
}

#[test]
fn bad_scopes_are_errors() {
    let mut cfg = scope("no-such-protocol", 3);
    assert!(explore::explore(&cfg, &mut |_| {}).is_err());
    cfg.protocol = "abd".into();
    cfg.bug = Some("no-such-bug".into());
    let e = explore::explore(&cfg, &mut |_| {}).unwrap_err();
    assert!(e.contains("abd-minority-quorum"), "{e}");
}

/// Sleep sets prune transitions between commuting events, not states:
/// the distinct states are the same with and without the reduction, and
/// fewer transitions reach them.
#[test]
fn sleep_sets_reach_the_same_states_with_fewer_transitions() {
    let faulty = |p, depth| ExploreConfig {
        crashes: 1,
        losses: 1,
        dups: 1,
        timers: 1,
        ..scope(p, depth)
    };
    let cases = [
        scope("abd", 7),
        scope("lease-lock", 7),
        scope("ring", 14),
        scope("lamport", 12),
        faulty("abd", 4),
        faulty("ring", 5),
        faulty("zab", 4),
    ];
    for base in cases {
        let p = base.protocol.clone();
        let full = assert_clean(&ExploreConfig {
            reduce: false,
            ..base.clone()
        });
        let reduced = assert_clean(&base);
        assert_eq!(reduced.distinct, full.distinct, "{p}: {reduced}\n{full}");
        assert_eq!(reduced.exhausted, full.exhausted, "{p}");
        assert_eq!(reduced.histories, full.histories, "{p}");
        assert!(
            reduced.transitions < full.transitions,
            "{p}: {reduced}\n{full}"
        );
        assert!(reduced.slept > 0, "{p}: {reduced}");
    }
}
