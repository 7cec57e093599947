//! The durability modes: group commit in `fsync`, the power cut that
//! `buffered` does not survive, and crashes of every node at once where
//! nodes keep their records.

use quorumkv_sim::registry::find;
use quorumkv_sim::*;

fn with(durability: Durability) -> SimConfig {
    SimConfig {
        durability: Some(durability),
        ..SimConfig::default()
    }
}

fn run(proto: &str, cfg: &SimConfig, seeds: &str) -> Summary {
    let proto = find(proto).unwrap();
    sweep(&proto, cfg, seeds.parse().unwrap(), 2, 0, |_| {}).unwrap()
}

/// Correct ABD keeps every acknowledged write in `fsync` mode, although
/// the nemesis crashes every node at once (inside syncs too): a node's
/// messages and replies wait for its syncs. (Let them leave at once and
/// these seeds lose acknowledged writes: 2 of the mixed ones, 6 of 300 in
/// client mode.)
#[test]
fn abd_passes_fsync_seeds_with_every_node_crashing_at_once() {
    let client = SimConfig {
        mode: ClientMode::Client,
        ..with(Durability::Fsync)
    };
    assert!(run("abd", &client, "0..300").all_passed());
    let s = run("abd", &with(Durability::Fsync), "0..300");
    for f in &s.failures {
        eprintln!("seed {} ({}): {}", f.seed, f.params, f.verdict);
    }
    assert!(s.all_passed());
    let t = &s.totals;
    assert!(t.cluster_crashes > 0 && t.peak_down == 5, "{t:?}");
    assert!(t.held_outputs > 0 && t.records_lost > 0, "{t:?}");
    assert!(t.persisted > t.syncs, "a batch of two or more: {t:?}");
}

/// Lease-lock persists its values (not its locks): it too survives every
/// node crashing at once in `fsync` mode.
#[test]
fn lease_lock_passes_fsync_seeds_with_every_node_crashing_at_once() {
    let s = run("lease-lock", &with(Durability::Fsync), "0..200");
    assert!(s.all_passed(), "{:?}", s.failures.first().map(|f| f.seed));
    assert!(s.totals.cluster_crashes > 0 && s.totals.held_outputs > 0);
}

/// Under load, records that arrive while a sync runs share the next one:
/// fewer fsyncs than records.
#[test]
fn syncs_take_time_so_batches_form_under_load() {
    let cfg = SimConfig {
        clients: 30,
        ops: 600,
        faults: FaultSet::NONE,
        ..with(Durability::Fsync)
    };
    let s = run("abd", &cfg, "0..10");
    let t = &s.totals;
    assert!(t.persisted * 10 > t.syncs * 11, "{t:?}");
    assert!(t.held_outputs > 0 && t.records_lost == 0, "{t:?}");
}

/// The injected bug that acknowledges a store before persisting it is
/// caught in `fsync` mode within 100 seeds (mixed client modes): its ack
/// leaves before the sync, and a crash inside the sync loses the record.
#[test]
fn ack_before_persist_is_caught_in_fsync_mode_within_100_seeds() {
    let cfg = SimConfig {
        bug: Some("abd-ack-before-persist".into()),
        ..with(Durability::Fsync)
    };
    let s = run("abd", &cfg, "0..100");
    let f = s.failures.first().expect("caught within 100 seeds");
    assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
    eprintln!(
        "ack-before-persist: {} of 100 seeds caught, first {}",
        s.failures.len(),
        f.seed
    );
}

/// `buffered` acknowledges what is only in the page cache: a power cut of
/// enough nodes before the next flush loses acknowledged writes, which the
/// checker sees. The same seeds pass in `fsync` mode.
#[test]
fn buffered_loses_acknowledged_writes_to_a_power_cut() {
    let s = run("abd", &with(Durability::Buffered), "0..100");
    let f = s
        .failures
        .first()
        .expect("a power cut loses an acked write");
    assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
    assert_eq!(s.totals.held_outputs, 0, "buffered holds nothing back");
    eprintln!(
        "buffered: {} of 100 seeds lost a write, first {}",
        s.failures.len(),
        f.seed
    );
    let range = format!("0..{}", f.seed + 1);
    assert!(run("abd", &with(Durability::Fsync), &range).all_passed());
}

/// The ring keeps its registers on disk: in durable seeds an outage takes
/// every server down at once (a kill-all) and the ring re-forms from the
/// disks with nothing acknowledged lost; crashes go past its N − 1 bound
/// too, a tenth of them taking the whole cluster down. Fsync only: the
/// simulator's crash is a power cut, which `buffered` does not survive.
#[test]
fn durable_ring_outages_crash_every_server_and_it_reforms() {
    let cfg = SimConfig {
        faults: "outage".parse().unwrap(),
        ..with(Durability::Fsync)
    };
    let s = run("ring", &cfg, "0..40");
    assert!(s.all_passed(), "{s:?}");
    let t = &s.totals;
    assert!(t.outages > 0 && t.crashes > 0, "{t:?}");
    let crash = SimConfig {
        faults: "crash".parse().unwrap(),
        replicas: Some(3),
        ..with(Durability::Fsync)
    };
    let s = run("ring", &crash, "0..20");
    assert!(s.all_passed(), "{s:?}");
    let t = &s.totals;
    assert!(t.crashes > 0 && t.peak_down == 3, "{t:?}");
}

/// `--durability` takes the three modes (and `durable`, its old name for
/// fsync); a seed draws fsync or memory, never buffered.
#[test]
fn the_durability_flag_and_draw() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: cli::Args,
    }
    for (flag, mode) in [
        ("fsync", Durability::Fsync),
        ("durable", Durability::Fsync),
        ("buffered", Durability::Buffered),
        ("memory", Durability::Memory),
    ] {
        let a = Cli::parse_from(["sim", "--durability", flag]).args;
        assert_eq!(a.durability, Some(mode));
        assert!(a
            .replay_command(3)
            .contains(&format!("--durability {mode}")));
    }
    let drawn: Vec<_> = (0..100)
        .map(|s| SeedParams::draw(&SimConfig::default(), s, true).durability)
        .collect();
    assert!(drawn.contains(&Durability::Fsync) && drawn.contains(&Durability::Memory));
    assert!(!drawn.contains(&Durability::Buffered));
}
