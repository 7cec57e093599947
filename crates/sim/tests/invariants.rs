//! Per-step invariants (`ProtocolDef::Invariants`): each is caught by an
//! injected bug within 100 seeds of the simulator's defaults, as a broken
//! invariant, no later than the history check alone catches it
//! (`--no-invariants`); the clean protocols pass the CI sweeps with the
//! invariants on (the other test files).

use quorumkv_core::protocol::abd::Abd;
use quorumkv_core::protocol::lamport::Lamport;
use quorumkv_core::protocol::lease_lock::LeaseLock;
use quorumkv_core::protocol::ring::Ring;
use quorumkv_core::protocol::zab::Zab;
use quorumkv_sim::registry::{register, Registered};
use quorumkv_sim::*;

/// (protocol, bug, the invariant that catches it): the first seed today
/// with the invariants, and with the history check alone (0..1000 with
/// `quorumkv sim`; "none" = none in 0..100 here). A `zab-znode-` bug runs
/// the znode workload, a `zab-reconfig-` one adds the `reconfig` fault.
const CASES: &[(&str, &str, &str)] = &[
    ("abd", "abd-reuse-ts", "a tag names one value"), // 1; history 1
    ("abd", "abd-merge-keeps-tag", "a tag names one value"), // 34; history 47
    (
        "abd",
        "abd-reconfig-ignore-accepted",
        "one configuration per epoch",
    ), // with --faults all,reconfig: 9; history none
    // 2 (seed 0 breaks the read-index rule first: a leader of a reused
    // epoch starts its PING rounds again); history 225
    ("zab", "zab-reuse-epoch", "one established leader per epoch"),
    (
        "zab",
        "zab-deliver-before-quorum",
        "an entry commits only with a quorum of every configuration",
    ), // 0 (99 of 100); history 16
    (
        "zab",
        "zab-skip-trunc",
        "an entry commits only with a quorum of every configuration",
    ), // 11 (6 of 100); history 123
    (
        "zab",
        "zab-stale-log-leader",
        "a delivered entry is never truncated",
    ), // 2; history 2
    (
        "lease-lock",
        "lease-lock-grant-while-held",
        "a running lease is never taken over",
    ), // 0; history none (stalls)
    (
        "lease-lock",
        "lease-lock-minority-quorum",
        "one holder per key",
    ), // 0; history 0
    (
        "lamport",
        "lamport-enter-without-later-message",
        "one server in a critical section per scope",
    ), // 0 (999 of 0..1000); history 208 (5 of 0..1000)
    (
        "zab",
        "zab-znode-seq-reuse",
        "sequential suffixes never repeat",
    ), // with --znode: 0 (48 of 100 + 1 not linearizable); history 0 (20 of 100)
    (
        "zab",
        "zab-znode-orphan-ephemerals",
        "an expired session owns no ephemeral",
    ), // with --znode: 0 (53 of 100); history 0 (23 of 100 not linearizable)
    // with --znode: 0 (97 of 100); history none (TTL nodes are outside
    // the model)
    ("zab", "zab-znode-ttl-early", "a TTL node outlives its TTL"),
    (
        "zab",
        "zab-ack-before-persist",
        "no ACK for an entry not on disk",
    ), // 1, checked by the simulator against its disk model; history none in 0..1000
    (
        "zab",
        "zab-diff-from-follower-last",
        "delivered prefixes agree",
    ), // 2 (10 of 100); history 146 (none in 0..100)
    // with --faults all,reconfig (configuration entries need the fault):
    // 26 (4 of 100); history 116 (none in 0..100)
    (
        "zab",
        "zab-reconfig-replaces-pending",
        "committed configurations agree",
    ),
    (
        "ring",
        "ring-forward-not-pending",
        "a value held anywhere is pending or held everywhere",
    ), // 0; history 0 (not linearizable)
    ("ring", "ring-tag-from-held", "a tag names one value"), // 0 (99 of 100); history 2 (9 of 100)
    (
        "ring",
        "ring-apply-any-tag",
        "a server's tag never goes back",
    ), // 2 (40 of 100); history 29 (3 of 100)
];

fn proto(name: &str) -> Registered {
    match name {
        "abd" => register::<Abd>(),
        "zab" => register::<Zab>(),
        "lease-lock" => register::<LeaseLock>(),
        "lamport" => register::<Lamport>(),
        "ring" => register::<Ring>(),
        other => panic!("no case for {other}"),
    }
}

/// The seeds of 0..100 that fail, and how, in seed order (`stop`: at
/// most that many, 0 = all).
fn failures(p: &Registered, c: &SimConfig, stop: u64) -> Vec<(u64, Verdict)> {
    let s = sweep(p, c, "0..100".parse().unwrap(), 2, stop, |_| {}).unwrap();
    (s.failures.iter())
        .map(|f| (f.seed, f.verdict.clone()))
        .collect()
}

/// The first seed of 0..100 that fails, and how.
fn first_failure(p: &Registered, c: &SimConfig) -> Option<(u64, Verdict)> {
    failures(p, c, 1).into_iter().next()
}

#[test]
fn each_invariant_catches_its_bug_within_100_seeds_and_no_later_than_histories() {
    for &(protocol, bug, invariant) in CASES {
        let p = proto(protocol);
        let c = SimConfig {
            protocol: protocol.into(),
            bug: Some(bug.into()),
            znode: bug.starts_with("zab-znode"),
            faults: if bug.starts_with("zab-reconfig") || bug.starts_with("abd-reconfig") {
                "all,reconfig".parse().unwrap()
            } else {
                SimConfig::default().faults
            },
            ..SimConfig::default()
        };
        // The first failure is a broken invariant (another invariant may
        // see the bug first), and the case's own invariant breaks too.
        let all = failures(&p, &c, 0);
        let (seed, verdict) = all.first().unwrap_or_else(|| panic!("{bug}: none"));
        let seed = *seed;
        let Verdict::Invariant { .. } = verdict else {
            panic!("{bug}: seed {seed} failed otherwise: {verdict}");
        };
        let own = all.iter().find_map(|(s, v)| match v {
            Verdict::Invariant { details } if details.contains(invariant) => Some((s, details)),
            _ => None,
        });
        let (own_seed, details) =
            own.unwrap_or_else(|| panic!("{bug}: '{invariant}' never broken"));
        assert!(details.contains("after step "), "{details}");
        eprintln!("{bug}: first at seed {seed}, '{invariant}' at {own_seed}");
        let alone = SimConfig {
            no_invariants: true,
            ..c
        };
        let history = (first_failure(&p, &alone))
            .filter(|(_, v)| matches!(v, Verdict::Unsafe { .. }))
            .map(|(s, _)| s);
        eprintln!("{bug}: invariant '{invariant}' at seed {seed}, history alone {history:?}");
        assert!(
            history.is_none_or(|h| seed <= h),
            "{bug}: {seed} vs {history:?}"
        );
    }
}

/// A broken invariant is a seed failure with its replay command, and the
/// sweep goes on to the other seeds.
#[test]
fn a_broken_invariant_fails_its_seed_and_the_sweep_goes_on() {
    let p = register::<LeaseLock>();
    let c = SimConfig {
        protocol: "lease-lock".into(),
        bug: Some("lease-lock-grant-while-held".into()),
        ..SimConfig::default()
    };
    let s = sweep(&p, &c, "0..6".parse().unwrap(), 2, 0, |_| {}).unwrap();
    assert_eq!(s.seeds_run, 6);
    assert_eq!(s.failures.len(), 6, "every seed: the bug acts at once");
    for f in &s.failures {
        assert_eq!(f.verdict.label(), "INVARIANT", "{}", f.verdict);
    }
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: cli::Args,
}

fn parse(line: &str) -> cli::Args {
    use clap::Parser;
    Cli::parse_from(std::iter::once("sim").chain(line.split_whitespace())).args
}

fn cli_run(line: &str) -> (Summary, String) {
    let mut out = Vec::new();
    let s = cli::run_to(&parse(line), &register::<Zab>(), &mut out).unwrap();
    (s, String::from_utf8(out).unwrap())
}

/// The CLI names the invariant, the step and the replay command; with
/// `--no-invariants` the same seed is judged by its history alone (which
/// misses this bug there), and the replay command keeps the switch.
#[test]
fn cli_reports_a_broken_invariant_and_can_switch_them_off() {
    let line = "--protocol zab --seeds 2 --inject-bug zab-reuse-epoch --no-progress";
    let (s, text) = cli_run(line);
    assert_eq!(s.failures.len(), 1, "{text}");
    assert!(text.contains("FAIL seed 2: INVARIANT"), "{text}");
    assert!(text.contains("one established leader per epoch"), "{text}");
    assert!(text.contains("(after step "), "{text}");
    assert!(text.contains("1 broke an invariant"), "{text}");
    let replay = text.lines().find(|l| l.contains("replay:")).unwrap();
    assert!(!replay.contains("--no-invariants"), "{replay}");
    let off = format!("{line} --no-invariants");
    let (s, text) = cli_run(&off);
    assert!(s.all_passed(), "{text}");
    assert!(parse(&off).replay_command(2).contains(" --no-invariants"));
}
