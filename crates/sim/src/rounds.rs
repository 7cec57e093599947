//! The round model of seed 004 (§2, §4): `quorumkv sim --rounds R`.
//!
//! Synchronous rounds in which every process, server or client, receives
//! at most one message per round, the oldest one waiting for it; what it
//! sends in round `k` is delivered from round `k + 1` on (the engine is
//! `world/rounds.rs`: the world's nodes, clients and command executor, fed
//! from per-process inboxes instead of the event queue). Clients are
//! processes too: each has an inbox, so a coordinator that waits for Q
//! replies spends Q rounds receiving them. No faults; timers fire only
//! when the system is idle.
//!
//! Per N, four runs, each history checked for linearizability like a
//! seed's (a round run that is not linearizable fails):
//! * **idle**: one client alternates a write and a read of one key, each
//!   issued only when nothing is in flight: isolated latencies in rounds
//!   (the seed: read 2, write 2N+2);
//! * **reads**, **writes**: `clients_per_server × N` clients, each with one
//!   operation outstanding at all times, only reads or only writes of one
//!   key: completed operations per round (the seed: N reads, 1 write);
//! * **mixed**: the readers of the reads run and one writer per server at
//!   once (one key). A read waits for the writes pending at its server,
//!   so reads per round are about readers / write latency: readers must
//!   outnumber writers for reads to reach N per round.
//!
//! Throughput counts the operations completed in the last three quarters
//! of the run (the first quarter fills the pipeline). A loaded run of a
//! protocol that promises liveness fails if a client completes nothing in
//! that window (starvation: the ring's fairness rule, line 244). Proxy clients are
//! spread evenly: client `c` talks to server `c mod N`.

use crate::config::{ClientMode, FaultSet, SeedParams, SimConfig};
use crate::history::OpRecord;
use crate::registry::Registered;
use crate::run::{find_bug, Verdict};
use crate::verify::{self, Safety};
use crate::world::{round_of, RunEnd, World};
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::protocol::{ProtocolDef, ProtocolOptions};
use std::fmt::Write as _;

/// What a server may receive per round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Net {
    /// One message per round, whoever sent it (clients and servers share
    /// one network).
    Shared,
    /// One message from a server and one from a client per round (the
    /// seed's dedicated client network, §4.2 and §5).
    Separate,
}

impl Net {
    pub fn name(self) -> &'static str {
        match self {
            Net::Shared => "shared",
            Net::Separate => "separate",
        }
    }
}

/// What a client of a round run issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Reader,
    Writer,
    /// A write, then a read, and so on.
    Alternate,
}

/// One round run: a role per client.
#[derive(Clone, Debug)]
pub struct RoundLoad {
    pub roles: Vec<Role>,
    /// Rounds at most (a loaded run stops there; an idle one must finish).
    pub rounds: u64,
    /// Issue a client's next operation only when nothing is in flight.
    pub issue_when_idle: bool,
    /// Operations per client (`None`: no limit).
    pub ops_per_client: Option<u32>,
    pub net: Net,
}

/// `quorumkv sim --rounds` settings.
#[derive(Clone, Copy, Debug)]
pub struct RoundSettings {
    /// Rounds of each loaded run.
    pub rounds: u64,
    /// Clients per server of each kind in the loaded runs.
    pub clients_per_server: u32,
    pub net: Net,
    /// Writes and reads of the idle run (each).
    pub idle_ops: u32,
}

impl Default for RoundSettings {
    fn default() -> Self {
        RoundSettings {
            rounds: 2000,
            clients_per_server: 4,
            net: Net::Shared,
            idle_ops: 5,
        }
    }
}

/// Latencies in rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    pub count: usize,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
}

impl Latency {
    fn of(rounds: impl Iterator<Item = u64>) -> Latency {
        let v: Vec<u64> = rounds.collect();
        if v.is_empty() {
            return Latency::default();
        }
        Latency {
            count: v.len(),
            min: *v.iter().min().expect("non-empty"),
            max: *v.iter().max().expect("non-empty"),
            mean: v.iter().sum::<u64>() as f64 / v.len() as f64,
        }
    }

    /// `2`, or `2-3` when it varies; `-` for none.
    pub fn brief(&self) -> String {
        match (self.count, self.min == self.max) {
            (0, _) => "-".into(),
            (_, true) => self.min.to_string(),
            _ => format!("{}-{}", self.min, self.max),
        }
    }
}

/// What one round run measured.
#[derive(Clone, Debug)]
pub struct LoadRun {
    pub label: &'static str,
    pub clients: usize,
    pub rounds: u64,
    /// Operations completed per round in the measured window.
    pub reads_per_round: f64,
    pub writes_per_round: f64,
    pub read_latency: Latency,
    pub write_latency: Latency,
    /// Writes completed by the clients of each server (client `c` is
    /// server `c mod N`'s), as a multiple of a fair share: `(min, max)`;
    /// `(1, 1)` when every server's writers got 1/N of the writes (line
    /// 244). Zero writes: `(0, 0)`.
    pub write_share: (f64, f64),
    /// Operations in the history (in flight at the end included).
    pub ops: usize,
    /// Protocol messages, and client requests and replies (proxy mode).
    pub messages: u64,
    pub client_messages: u64,
    pub timers_fired: u64,
    pub verdict: Verdict,
    pub history: Vec<OpRecord>,
    /// The message trace (`SimConfig::trace`; one round prints as 1 ms).
    pub trace: Option<Vec<String>>,
}

/// The four runs at one N.
#[derive(Clone, Debug)]
pub struct RoundReport {
    pub protocol: &'static str,
    pub replicas: u32,
    /// `client` (own coordinator) or `proxy`.
    pub mode: &'static str,
    pub idle: LoadRun,
    pub reads: LoadRun,
    pub writes: LoadRun,
    pub mixed: LoadRun,
}

impl RoundReport {
    pub fn runs(&self) -> [&LoadRun; 4] {
        [&self.idle, &self.reads, &self.writes, &self.mixed]
    }
    pub fn passed(&self) -> bool {
        self.runs().iter().all(|r| r.verdict.passed())
    }
}

/// Whether `D`'s clients run their own coordinator under `cfg.mode`
/// (`mixed` means client-driven where the protocol has a coordinator).
fn client_driven<D: ProtocolDef>(cfg: &SimConfig) -> bool {
    D::HAS_CLIENT_COORDINATOR && cfg.mode != ClientMode::Proxy
}

/// Run `load` at N = `n` and check its history.
pub fn run_load<D: ProtocolDef>(
    cfg: &SimConfig,
    n: u32,
    label: &'static str,
    load: RoundLoad,
) -> Result<LoadRun, String> {
    if !(1..64).contains(&n) {
        return Err(format!("--replicas must be 1..=63, not {n}"));
    }
    let bug = find_bug::<D>(cfg)?;
    let mut opts = D::Options::default();
    opts.apply(&cfg.options)
        .map_err(|e| format!("protocol {}: {e}", D::NAME))?;
    let cfg = SimConfig {
        replicas: Some(n),
        clients: load.roles.len() as u32,
        ops: 1024,
        faults: FaultSet::NONE,
        ..cfg.clone()
    };
    let mut params = SeedParams::draw(&cfg, 0, D::HAS_CLIENT_COORDINATOR);
    params.client_driven = client_driven::<D>(&cfg);
    params.keys = 1;
    params.load = false;
    let (clients, rounds) = (load.roles.len(), load.rounds);
    let warmup = if load.issue_when_idle { 0 } else { rounds / 4 };
    let result = World::<D>::run_in_rounds(&cfg, params, bug, opts, load);
    let done: Vec<_> = (result.history.iter())
        .filter(|r| r.outcome != Outcome::Unknown && round_of(r.complete_ns) > warmup)
        .collect();
    let is_read = |r: &&OpRecord| matches!(r.op, Op::Get { .. });
    let latency = |read: bool| {
        Latency::of(
            (done.iter())
                .filter(|r| is_read(r) == read)
                .map(|r| round_of(r.complete_ns) - round_of(r.invoke_ns)),
        )
    };
    let (read_latency, write_latency) = (latency(true), latency(false));
    let writes = done.iter().copied().filter(|r| !is_read(r));
    let write_share = write_share(writes, n, write_latency.count);
    let window = (round_of(result.stats.virtual_us * 1000) - warmup).max(1) as f64;
    let end = match starved(&done, clients) {
        Some(c) if warmup > 0 && D::PROMISES_LIVENESS && result.end == RunEnd::Finished => {
            RunEnd::Stuck(format!(
                "client {c} completed no operation in rounds {}..={rounds} (starved)",
                warmup + 1
            ))
        }
        _ => result.end,
    };
    let verdict = match (verify::check(&result.history, cfg.check_timeout), end) {
        _ if result.invariant.is_some() => Verdict::Invariant {
            details: result.invariant.clone().unwrap_or_default(),
        },
        (Safety::Violation(details), _) => Verdict::Unsafe { details },
        (_, RunEnd::Stuck(details)) => Verdict::Stuck { details },
        (Safety::Unknown(details), _) => Verdict::Undecided { details },
        (Safety::Linearizable, RunEnd::Finished) => Verdict::Pass,
    };
    Ok(LoadRun {
        label,
        clients,
        rounds,
        reads_per_round: read_latency.count as f64 / window,
        writes_per_round: write_latency.count as f64 / window,
        read_latency,
        write_latency,
        write_share,
        ops: result.history.len(),
        messages: result.stats.messages,
        client_messages: result.stats.client_messages,
        timers_fired: result.stats.timers_fired,
        verdict,
        history: result.history,
        trace: result.trace,
    })
}

/// The fewest and the most writes completed through one server (client
/// `p` uses server `p mod n`), each relative to a fair share of `count`.
fn write_share<'a>(writes: impl Iterator<Item = &'a OpRecord>, n: u32, count: usize) -> (f64, f64) {
    let mut per_server = vec![0u64; n as usize];
    for r in writes {
        per_server[(r.process % u64::from(n)) as usize] += 1;
    }
    let fair = count.max(1) as f64 / f64::from(n);
    let share = |x: Option<&u64>| x.map_or(0.0, |&x| x as f64 / fair);
    (
        share(per_server.iter().min()),
        share(per_server.iter().max()),
    )
}

/// Liveness under load: the first of `clients` that completed nothing in
/// the measured window (`done`), if any (a write that waits longer is
/// starved).
fn starved(done: &[&OpRecord], clients: usize) -> Option<usize> {
    let mut served = vec![false; clients];
    for r in done {
        served[r.process as usize % clients] = true;
    }
    served.iter().position(|&s| !s)
}

/// The four runs of the module doc at N = `n`.
pub fn measure<D: ProtocolDef>(
    cfg: &SimConfig,
    n: u32,
    s: &RoundSettings,
) -> Result<RoundReport, String> {
    let k = (s.clients_per_server * n) as usize;
    let loaded = |roles: Vec<Role>| RoundLoad {
        roles,
        rounds: s.rounds,
        issue_when_idle: false,
        ops_per_client: None,
        net: s.net,
    };
    let idle = RoundLoad {
        roles: vec![Role::Alternate],
        // Generous: an isolated operation takes a few rounds per server.
        rounds: 1000 + 100 * u64::from(n) * u64::from(s.idle_ops),
        issue_when_idle: true,
        ops_per_client: Some(2 * s.idle_ops),
        net: s.net,
    };
    // Readers and one writer per server: the seed's server that "receives
    // an infinite number of read requests" while writes go on (§4.2).
    let untraced = SimConfig {
        trace: false,
        ..cfg.clone()
    };
    let mut mixed = vec![Role::Reader; k];
    mixed.extend(vec![Role::Writer; n as usize]);
    Ok(RoundReport {
        protocol: D::NAME,
        replicas: n,
        mode: if client_driven::<D>(cfg) {
            "client"
        } else {
            "proxy"
        },
        // Only the idle run is traced: a loaded one sends thousands of messages.
        idle: run_load::<D>(cfg, n, "idle", idle)?,
        reads: run_load::<D>(&untraced, n, "reads", loaded(vec![Role::Reader; k]))?,
        writes: run_load::<D>(&untraced, n, "writes", loaded(vec![Role::Writer; k]))?,
        mixed: run_load::<D>(&untraced, n, "mixed", loaded(mixed))?,
    })
}

/// The table of `reports` (Markdown, README-ready).
pub fn table(reports: &[RoundReport], s: &RoundSettings) -> String {
    let mut t = String::new();
    if let Some(r) = reports.first() {
        let k = s.clients_per_server;
        let _ = writeln!(
            t,
            "round model (seed 004 §2): {} ({} clients), {} network; loaded runs: {} rounds, {k} readers or {k} writers per server (mixed: {k} readers and 1 writer per server), one op outstanding each",
            r.protocol,
            r.mode,
            s.net.name(),
            s.rounds,
        );
    }
    t += "\n| N | read latency | write latency | reads/round (reads only) | writes/round (writes only) | mixed: reads/round | mixed: writes/round | checked |\n";
    t += "|---|---|---|---|---|---|---|---|\n";
    for r in reports {
        let checked = if r.passed() {
            "linearizable".to_string()
        } else {
            let bad: Vec<_> = (r.runs().iter())
                .filter(|x| !x.verdict.passed())
                .map(|x| format!("{}: {}", x.label, x.verdict.label()))
                .collect();
            bad.join(", ")
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {checked} |",
            r.replicas,
            r.idle.read_latency.brief(),
            r.idle.write_latency.brief(),
            r.reads.reads_per_round,
            r.writes.writes_per_round,
            r.mixed.reads_per_round,
            r.mixed.writes_per_round,
        );
    }
    t
}

fn latency_json(l: &Latency) -> serde_json::Value {
    serde_json::json!({"count": l.count, "min": l.min, "max": l.max, "mean": l.mean})
}

fn run_json(r: &LoadRun) -> serde_json::Value {
    serde_json::json!({
        "clients": r.clients,
        "rounds": r.rounds,
        "reads_per_round": r.reads_per_round,
        "writes_per_round": r.writes_per_round,
        "read_latency": latency_json(&r.read_latency),
        "write_latency": latency_json(&r.write_latency),
        "write_share": {"min": r.write_share.0, "max": r.write_share.1},
        "ops": r.ops,
        "messages": r.messages,
        "client_messages": r.client_messages,
        "timers_fired": r.timers_fired,
        "verdict": r.verdict.label(),
        "details": r.verdict.to_string(),
    })
}

/// `reports` as JSON (one object per N).
pub fn json(reports: &[RoundReport], s: &RoundSettings) -> String {
    let rows: Vec<_> = (reports.iter())
        .map(|r| {
            serde_json::json!({
                "protocol": r.protocol,
                "replicas": r.replicas,
                "mode": r.mode,
                "net": s.net.name(),
                "idle": run_json(&r.idle),
                "reads": run_json(&r.reads),
                "writes": run_json(&r.writes),
                "mixed": run_json(&r.mixed),
            })
        })
        .collect();
    serde_json::to_string_pretty(&rows).expect("plain JSON values")
}

/// `quorumkv sim --rounds`: measure `proto` at each N of `replicas`, write
/// the table (or JSON) and every failing run's details to `out`. `Ok(true)`
/// when every run passed.
pub fn run_cli(
    proto: &Registered,
    cfg: &SimConfig,
    replicas: &[u32],
    s: &RoundSettings,
    json_out: bool,
    out: &mut impl std::io::Write,
) -> Result<bool, String> {
    let mut reports = Vec::new();
    for &n in replicas {
        reports.push((proto.measure_rounds)(cfg, n, s)?);
    }
    let text = if json_out {
        json(&reports, s)
    } else {
        table(&reports, s)
    };
    let _ = writeln!(out, "{text}");
    for r in &reports {
        if let Some(trace) = &r.idle.trace {
            let _ = writeln!(
                out,
                "--- trace of the idle run at N={} (1 ms = 1 round) ---",
                r.replicas
            );
            for l in trace {
                let _ = writeln!(out, "  {l}");
            }
            for op in &r.idle.history {
                let _ = writeln!(out, "  {op}");
            }
        }
    }
    let mut ok = true;
    for r in &reports {
        for run in r.runs().into_iter().filter(|x| !x.verdict.passed()) {
            ok = false;
            let _ = writeln!(
                out,
                "\nFAIL N={} {} run: {}",
                r.replicas, run.label, run.verdict
            );
        }
    }
    Ok(ok)
}
