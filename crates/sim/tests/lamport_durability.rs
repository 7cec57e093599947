//! Issue 32: Lamport servers keep their state on disk. In durable seeds
//! the nemesis crashes every server at once; the injected bugs for the
//! new persistence rules are caught.

use quorumkv_sim::registry::find;
use quorumkv_sim::*;

fn cfg(durability: Option<Durability>, n: u32, bug: Option<&str>) -> SimConfig {
    SimConfig {
        protocol: "lamport".into(),
        replicas: Some(n),
        durability,
        bug: bug.map(Into::into),
        ..SimConfig::default()
    }
}

fn run(c: &SimConfig, seeds: &str) -> Summary {
    let p = find("lamport").unwrap();
    sweep(&p, c, seeds.parse().unwrap(), 2, 0, |_| {}).unwrap()
}

/// fsync seeds, default faults: servers crash, every one at once too,
/// and come back from their disks with every acknowledged write.
#[test]
fn fsync_servers_survive_crashes_of_every_server_at_once() {
    let s = run(&cfg(Some(Durability::Fsync), 3, None), "0..60");
    for f in &s.failures {
        eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed());
    let t = &s.totals;
    assert!(t.cluster_crashes > 0 && t.held_outputs > 0, "{t:?}");
}

/// A WriteAck that leaves before its staged write is synced
/// (`lamport-ack-before-sync`): a power cut loses a write its holder
/// answered Done. Drawn durability, N = 3: caught at seed 164 (the only
/// one in 0..2000; N = 5: seed 78, the only one in 0..1000); the same seed
/// passes without it.
#[test]
fn ack_before_sync_is_caught() {
    let seed = "164..165";
    let bad = run(&cfg(None, 3, Some("lamport-ack-before-sync")), seed);
    let f = bad.failures.first().expect("caught");
    assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
    assert!(run(&cfg(None, 3, None), seed).all_passed());
}

/// A staged write's end persisted before its value
/// (`lamport-release-persisted-before-write`): a crash before the value
/// follows loses the write at that server, which serves the old one.
#[test]
fn release_persisted_before_write_is_caught() {
    let c = cfg(
        Some(Durability::Fsync),
        3,
        Some("lamport-release-persisted-before-write"),
    );
    let s = run(&c, "0..100");
    let f = s.failures.first().expect("caught within 100 fsync seeds");
    eprintln!("caught at seed {} ({} of 100)", f.seed, s.failures.len());
    assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
}

/// A peer's messages counted for entry before its `Outstanding` after a
/// gap in its stream (`lamport-enter-before-resync`, the former rule): a
/// reset seen on one side only lost its earlier REQUEST_LOCK, and its
/// later REPLY_LOCK let a second server in. The per-step invariant (one
/// server in a critical section per scope) catches it: N = 5, fsync,
/// `--faults crash,pause`, 3 of seeds 0..100, first seed 5; the same
/// seeds pass without it (and N = 3 / 5, fsync / memory, default faults
/// and `delay,crash,pause`: 0 of 2 000 each).
#[test]
fn enter_before_resync_is_caught_by_the_invariant() {
    let with = |bug| SimConfig {
        faults: "crash,pause".parse().unwrap(),
        ..cfg(Some(Durability::Fsync), 5, bug)
    };
    let s = run(&with(Some("lamport-enter-before-resync")), "0..100");
    let f = s.failures.first().expect("caught within 100 seeds");
    eprintln!("caught at seed {} ({} of 100)", f.seed, s.failures.len());
    assert!(
        matches!(f.verdict, Verdict::Invariant { .. }),
        "{}",
        f.verdict
    );
    let fixed = run(&with(None), "0..100");
    assert!(
        fixed.all_passed(),
        "{:?}",
        fixed.failures.first().map(|f| f.seed)
    );
}

/// With `lock-timeout`, a server evicted while it committed a staged write
/// of its own rules on it again when its rejoin ends. Before, the write's
/// slot stayed at the head of its key's queue at that server once the
/// peers had superseded it, and every later write of the key there timed
/// out: N = 3, fsync, seeds 539 and 1998 were liveness failures (the
/// eviction itself may break safety under pauses: the seed's assumption).
#[test]
fn an_evicted_committer_rules_on_its_write_again() {
    let mut c = cfg(Some(Durability::Fsync), 3, None);
    c.options = vec![("lock-timeout".into(), "300ms".into())];
    for seed in ["539..540", "1998..1999"] {
        let s = run(&c, seed);
        for f in &s.failures {
            eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
        }
        assert!(s.all_passed(), "seed {seed}");
    }
}

/// A server that evicted a peer answers the peer's `Poll` with `Evicted`
/// again: the peer may have missed the first one during a rejoin that then
/// ended on an answer from before the eviction, and waited on us for ever
/// (N = 3, memory, `lock-timeout`, seed 435: a liveness failure before).
#[test]
fn an_evicted_server_that_polls_is_told_again() {
    let mut c = cfg(Some(Durability::Memory), 3, None);
    c.options = vec![("lock-timeout".into(), "300ms".into())];
    let s = run(&c, "435..436");
    for f in &s.failures {
        eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed());
}
