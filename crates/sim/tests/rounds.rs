//! The round model (`quorumkv sim --rounds`): the latencies and
//! throughputs seed 004 §4 derives are properties of the model, and a
//! round run's history is checked like a seed's.

use quorumkv_core::protocol::abd::Abd;
use quorumkv_core::protocol::ring::Ring;
use quorumkv_core::protocol::ProtocolDef;
use quorumkv_sim::rounds::{run_cli, run_load, LoadRun, Net, Role, RoundLoad, RoundSettings};
use quorumkv_sim::{SimConfig, Verdict};

fn cfg(protocol: &str, opts: &[(&str, &str)]) -> SimConfig {
    SimConfig {
        protocol: protocol.into(),
        options: (opts.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..SimConfig::default()
    }
}

/// One client, each operation issued when nothing is in flight.
fn idle<D: ProtocolDef>(cfg: &SimConfig, n: u32) -> LoadRun {
    let load = RoundLoad {
        roles: vec![Role::Alternate],
        rounds: 1000,
        issue_when_idle: true,
        ops_per_client: Some(6),
        net: Net::Shared,
    };
    let run = run_load::<D>(cfg, n, "idle", load).unwrap();
    assert_eq!(run.verdict, Verdict::Pass, "N={n}");
    assert_eq!(run.ops, 6);
    run
}

/// `per_server` clients per server, all in `role`, for `rounds` rounds.
fn loaded<D: ProtocolDef>(cfg: &SimConfig, n: u32, role: Role, net: Net) -> LoadRun {
    let load = RoundLoad {
        roles: vec![role; 4 * n as usize],
        rounds: 1200,
        issue_when_idle: false,
        ops_per_client: None,
        net,
    };
    let run = run_load::<D>(cfg, n, "loaded", load).unwrap();
    assert_eq!(run.verdict, Verdict::Pass, "N={n} {role:?}");
    run
}

#[test]
fn ring_isolated_read_takes_2_rounds_and_write_2n_plus_2() {
    for n in [2, 3, 5, 8] {
        let run = idle::<Ring>(&cfg("ring", &[]), n);
        let (r, w) = (run.read_latency, run.write_latency);
        assert_eq!((r.count, r.min, r.max), (3, 2, 2), "N={n} reads");
        let expect = 2 * u64::from(n) + 2;
        assert_eq!((w.count, w.min, w.max), (3, expect, expect), "N={n} writes");
        assert_eq!(run.timers_fired, 0);
    }
}

#[test]
fn ring_serves_n_reads_per_round_and_at_most_half_a_write() {
    let c = cfg("ring", &[("window", "0")]);
    for n in [3, 5] {
        let reads = loaded::<Ring>(&c, n, Role::Reader, Net::Shared);
        assert!(
            (reads.reads_per_round - f64::from(n)).abs() < 0.01,
            "N={n}: {} reads per round",
            reads.reads_per_round
        );
        // Without piggybacking a write costs 2N receptions on the ring, and
        // the N servers receive N messages per round together.
        let writes = loaded::<Ring>(&c, n, Role::Writer, Net::Separate);
        // (A window of 900 rounds counts a write or two more or less.)
        let w = writes.writes_per_round;
        assert!((0.47..=0.505).contains(&w), "N={n}: {w} writes per round");
        // Client requests share the servers' one message per round: at
        // most N / (2N + 1).
        let shared = loaded::<Ring>(&c, n, Role::Writer, Net::Shared);
        let bound = f64::from(n) / f64::from(2 * n + 1);
        let w = shared.writes_per_round;
        assert!(
            w <= bound + 0.005 && w > bound - 0.03,
            "N={n}: {w} > {bound}"
        );
    }
}

/// ABD's client coordinator is a process too: it receives one reply per
/// round, so a phase costs 1 + Q rounds; an isolated read is one phase
/// (all Q query replies carry the same tag: no write-back).
#[test]
fn abd_isolated_read_takes_one_plus_a_quorum_of_rounds() {
    for n in [3, 5] {
        let run = idle::<Abd>(&cfg("abd", &[]), n);
        let q = u64::from(n / 2 + 1);
        let r = run.read_latency;
        assert_eq!((r.min, r.max), (1 + q, 1 + q), "N={n}");
        assert!(run.write_latency.min >= 2 * (1 + q), "N={n}");
        // Its retransmission timer never fires: nothing is ever lost.
        assert_eq!(run.timers_fired, 0);
        // Every operation sends N queries and each server takes one
        // message per round: at most one read per round, whatever N.
        let reads = loaded::<Abd>(&cfg("abd", &[]), n, Role::Reader, Net::Shared);
        assert!(reads.reads_per_round <= 1.0 + 1e-9 && reads.reads_per_round > 0.95);
    }
}

#[test]
fn a_round_run_that_is_not_linearizable_fails() {
    let bad = SimConfig {
        bug: Some("ring-read-no-wait".into()),
        ..cfg("ring", &[])
    };
    let mut roles = vec![Role::Reader; 12];
    roles.extend([Role::Writer; 3]);
    let load = RoundLoad {
        roles,
        rounds: 400,
        issue_when_idle: false,
        ops_per_client: None,
        net: Net::Shared,
    };
    let run = run_load::<Ring>(&bad, 3, "mixed", load.clone()).unwrap();
    assert!(
        matches!(run.verdict, Verdict::Unsafe { .. }),
        "{}",
        run.verdict
    );
    // The same load without the bug passes, and runs are deterministic.
    let good = run_load::<Ring>(&cfg("ring", &[]), 3, "mixed", load.clone()).unwrap();
    assert_eq!(good.verdict, Verdict::Pass);
    assert!(good.reads_per_round > 0.0 && good.writes_per_round > 0.0);
    let again = run_load::<Ring>(&cfg("ring", &[]), 3, "mixed", load).unwrap();
    assert_eq!(good.history, again.history);
}

/// With a window of one message the ring's queues fill and its fairness
/// rule picks what goes next: every server's writer is served; forwarding
/// first (the injected bug) starves one, which fails the run.
#[test]
fn ring_fairness_serves_every_writer_and_its_absence_starves_one() {
    let n = 5;
    let mut roles = vec![Role::Reader; 4 * n];
    roles.extend(vec![Role::Writer; n]);
    let load = RoundLoad {
        roles,
        rounds: 2000,
        issue_when_idle: false,
        ops_per_client: None,
        net: Net::Separate,
    };
    let fair = cfg("ring", &[("window", "1")]);
    let run = run_load::<Ring>(&fair, n as u32, "mixed", load.clone()).unwrap();
    assert_eq!(run.verdict, Verdict::Pass);
    assert!(run.write_share.0 > 0.9, "{:?}", run.write_share);
    let unfair = SimConfig {
        bug: Some("ring-fifo-forwarding".into()),
        ..fair
    };
    let run = run_load::<Ring>(&unfair, n as u32, "mixed", load).unwrap();
    assert!(
        matches!(&run.verdict, Verdict::Stuck { details } if details.contains("starved")),
        "{}",
        run.verdict
    );
    assert_eq!(run.write_share.0, 0.0);
}

/// `quorumkv sim --rounds`: the table, the JSON, and a failing run.
#[test]
fn the_cli_prints_a_table_or_json_and_reports_failures() {
    let ring = quorumkv_sim::registry::register::<Ring>();
    let s = RoundSettings {
        rounds: 200,
        ..RoundSettings::default()
    };
    let mut out = Vec::new();
    let ok = run_cli(&ring, &cfg("ring", &[]), &[3], &s, false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(ok && text.contains("| 3 | 2 | 8 | 3.00 |"), "{text}");
    let mut out = Vec::new();
    assert!(run_cli(&ring, &cfg("ring", &[]), &[2, 4], &s, true, &mut out).unwrap());
    let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(rows[1]["replicas"], 4);
    assert_eq!(rows[1]["idle"]["write_latency"]["max"], 10);
    assert_eq!(rows[0]["reads"]["verdict"], "pass");
    let bad = SimConfig {
        bug: Some("ring-read-no-wait".into()),
        ..cfg("ring", &[])
    };
    let mut out = Vec::new();
    assert!(!run_cli(&ring, &bad, &[3], &s, false, &mut out).unwrap());
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("FAIL N=3 mixed run: NOT LINEARIZABLE"),
        "{text}"
    );
}
