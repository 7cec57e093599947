//! `quorumkv sim`: run many seeds of a protocol under injected faults, check
//! every history, print a summary; a failing seed prints its replay command.

use crate::config::{ClientMode, Durability, FaultSet, SeedRange, SimConfig, Timing};
use crate::registry::{self, Registered};
use crate::rounds::{self, Net, RoundSettings};
use crate::run::{SeedReport, Verdict};
use crate::sweep::{sweep, Summary};
use quorumkv_core::protocol::options::{format_duration, parse_duration_range, parse_pair};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "Exit status: 0 when every seed passes, 1 when any fails, 2 on a usage error.\n\
Every parameter of a run is drawn from its seed: a failing seed prints the exact command that replays it.\n\
Unless fixed by a flag, each seed draws N from {3, 5} and the durability (fsync or memory; buffered only\n\
by the flag), and a quarter of the seeds are biased toward divergence (one key, many writers, partitions,\n\
reads right after a heal). Crashes may fall between two commands of one handler call. Where nodes forget\n\
(memory, or a protocol that persists nothing) the nemesis never has more than the protocol's max_crashed(N)\n\
nodes down at once (`quorumkv protocols` lists it), except the `outage` fault, which freezes more than that\n\
for a while (operations must then time out, and the cluster recover). Where they keep their records (fsync,\n\
buffered) it crashes any number, every node at once too (a power cut), and outages crash nodes.\n\n\
Faults keep to the protocol's link model. Unreliable: loss, dup and reorder as named. FIFO-reliable:\n\
`loss` resets the connection instead (both ends see the link go Down, then Up; what was in flight is lost),\n\
dup and reorder are not applied, and a partition holds messages until it heals or the failure detector\n\
declares the link down. --break-assumptions applies silent loss, dup and reorder anyway (with a warning):\n\
the protocol is then expected to fail. A heartbeat failure detector reports a crashed, paused or\n\
partitioned peer Down after 5 x 20ms of silence, and Up when it is back.";

/// Arguments of `quorumkv sim`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = AFTER_HELP, after_long_help = long_help())]
pub struct Args {
    /// Protocol to simulate.
    #[arg(long, default_value_t = quorumkv_core::protocol::ProtocolKind::default_protocol().to_string())]
    pub protocol: String,
    /// Seeds to run: `N`, `A..B` (B excluded) or `A..=B`.
    #[arg(long, default_value = "0..100")]
    pub seeds: SeedRange,
    /// Faults: `none`, `all`, or a comma list of delay,loss,dup,reorder,partition,crash,pause,outage,
    /// and reconfig (membership changes; not in `all`: e.g. `all,reconfig`).
    #[arg(long, default_value = "all")]
    pub faults: FaultSet,
    /// Replicas (N) (default: drawn per seed, 3 or 5).
    #[arg(long)]
    pub replicas: Option<u32>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 5)]
    pub clients: u32,
    /// Operations per seed, over all clients.
    #[arg(long, default_value_t = 200)]
    pub ops: u32,
    /// Number of keys (default: drawn per seed, 1 to 3, so operations collide).
    #[arg(long)]
    pub keys: Option<u32>,
    /// How clients reach the protocol: through a server (proxy), with their
    /// own coordinator (client), or drawn per seed (mixed).
    #[arg(long, value_enum, default_value_t = ClientMode::Mixed)]
    pub mode: ClientMode,
    /// What a crash (a power cut of the node) leaves: fsync keeps every
    /// record whose sync completed (a sync takes 100-500us of virtual time
    /// and covers everything written before it: group commit; messages and
    /// replies wait for the syncs of earlier records); buffered keeps what
    /// the last flush (every 5ms) wrote, and acknowledges before that;
    /// memory keeps nothing. Default: drawn per seed, half fsync, half
    /// memory. With memory a restarted ABD replica recovers from f+1 live
    /// peers before it answers (as `quorumkv server --recover` does);
    /// `--inject-bug abd-no-recovery` shows the checker catching
    /// acknowledged writes lost without that recovery.
    #[arg(long, value_enum)]
    pub durability: Option<Durability>,
    /// A protocol option, KEY=VALUE (repeatable); it overrides the seed's own
    /// variation of that option. `--help` lists each protocol's options.
    #[arg(long = "opt", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub opts: Vec<(String, String)>,
    /// Apply faults outside the protocol's link model (silent loss, dup and
    /// reorder on FIFO-reliable links), to show that it depends on it.
    #[arg(long)]
    pub break_assumptions: bool,
    /// TESTING AID: run a deliberately broken variant of the protocol, to
    /// prove that the simulator and the checker catch it. `list` names them.
    #[arg(long, value_name = "NAME")]
    pub inject_bug: Option<String>,
    /// Workload: a key with a write in flight through a server (proxy
    /// mode) when that server crashes is only read from then on, by the
    /// clients and by the stall probe. A crashed writer's operation left
    /// pending for good then stalls reads in the healed cluster instead of
    /// being overtaken by the next write of its key (ring: `--inject-bug
    /// ring-no-takeover --opt rejoin=off`).
    #[arg(long)]
    pub read_after_crash: bool,
    /// Every link's one-way latency, `D` or `LO..HI` (e.g. `20ms..25ms`),
    /// instead of the per-seed draw (20 µs to 1.2 ms); every timeout of the
    /// simulator (retransmit, operation, client, heartbeat, liveness)
    /// grows in proportion. Protocol timers are options: give Zab a longer
    /// `--opt init-limit` and `sync-limit` with it.
    #[arg(long, value_name = "D|LO..HI", value_parser = parse_duration_range)]
    pub link_delay: Option<(Duration, Duration)>,
    /// The one-way latency of the links between clients and servers, `D`
    /// or `LO..HI`, apart from the servers' links (`--link-delay` or the
    /// per-seed draw): seed 001's client RTT beside its server RTT. The
    /// simulator's client and operation timeouts grow to match.
    #[arg(long, value_name = "D|LO..HI", value_parser = parse_duration_range)]
    pub client_link_delay: Option<(Duration, Duration)>,
    /// Print the message trace of each failing seed (of every seed when only
    /// one seed runs).
    #[arg(long)]
    pub trace: bool,
    /// The clients use the znode service (create, delete, set, get, exists,
    /// children, small multis; sessions and ephemerals) instead of the KV
    /// store, and the history is also checked against the znode model
    /// (`--protocol zab`).
    #[arg(long)]
    pub znode: bool,
    /// Do not check the protocol's per-step invariants after every step,
    /// nor its checks over messages (they are on by default): the history
    /// alone judges each seed.
    #[arg(long)]
    pub no_invariants: bool,
    /// Make one pause in six long (120-300 ms): a stop-the-world pause past
    /// every failure detector, after which the paused node resumes in the
    /// role the others took from it (a replaced leader serving reads).
    #[arg(long)]
    pub long_pauses: bool,
    /// Print one line per seed.
    #[arg(long, short)]
    pub verbose: bool,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Checker budget per seed, seconds (an undecided seed counts as failed).
    #[arg(long, default_value_t = 10.0)]
    pub check_timeout: f64,
    /// Stop after this many failing seeds (0: run them all).
    #[arg(long, default_value_t = 0)]
    pub max_failures: u64,
    /// Expect at least one seed to fail (for injected bugs): exit 0 if one
    /// does, 1 if all pass.
    #[arg(long)]
    pub expect_failure: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Run seed 004's round model instead of seeds: latency and throughput
    /// in rounds per N, ROUNDS rounds per loaded run (e.g. 2000).
    ///
    /// Synchronous rounds: each process (server or client) receives at most
    /// one message per round, the oldest waiting; what it sends arrives from
    /// the next round on; no faults; timers fire only when nothing is in
    /// flight. Per N (`--replicas`, default 2 to 8): the isolated read and
    /// write latency in rounds, and the reads and writes completed per round
    /// under load (reads only, writes only, readers plus one writer per
    /// server); every run's history is checked. Clients run their own
    /// coordinator if the protocol has one, unless `--mode proxy`; proxy
    /// clients are spread evenly over the servers. One key; --seeds,
    /// --faults, --clients, --ops and --keys do not apply. With `--trace`:
    /// the idle run's trace (1 ms = 1 round).
    #[arg(long, value_name = "ROUNDS", help_heading = "Round model")]
    pub rounds: Option<u64>,
    /// Round model: what a server receives per round (separate: one
    /// message from a server and one from a client, seed 004 §4.2).
    #[arg(long, value_enum, default_value_t = Net::Shared, help_heading = "Round model")]
    pub round_net: Net,
    /// Round model: readers (or writers) per server in the loaded runs, each
    /// keeping one operation outstanding.
    #[arg(long, default_value_t = 4, help_heading = "Round model")]
    pub round_clients: u32,
    /// Round model: print JSON instead of the table.
    #[arg(long, help_heading = "Round model")]
    pub json: bool,
}

impl Args {
    pub fn to_config(&self) -> SimConfig {
        SimConfig {
            protocol: self.protocol.clone(),
            replicas: self.replicas,
            clients: self.clients,
            ops: self.ops,
            keys: self.keys,
            faults: self.faults,
            mode: self.mode,
            durability: self.durability,
            bug: self.inject_bug.clone(),
            options: self.opts.clone(),
            break_assumptions: self.break_assumptions,
            timing: {
                let t = match self.link_delay {
                    Some((lo, hi)) => Timing::default().with_link_delay(lo, hi),
                    None => Timing::default(),
                };
                match self.client_link_delay {
                    Some((lo, hi)) => t.with_client_link_delay(lo, hi),
                    None => t,
                }
            },
            check_timeout: Duration::from_secs_f64(self.check_timeout.max(0.001)),
            trace: false,
            read_after_crash: self.read_after_crash,
            znode: self.znode,
            no_invariants: self.no_invariants,
            long_pauses: self.long_pauses,
        }
    }

    /// The command line that replays `seed` exactly.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut cmd = format!(
            "quorumkv sim --protocol {} --seeds {seed} --faults {} --clients {} --ops {} --mode {}",
            self.protocol, self.faults, self.clients, self.ops, self.mode
        );
        if let Some(n) = self.replicas {
            cmd += &format!(" --replicas {n}");
        }
        if let Some(d) = self.durability {
            cmd += &format!(" --durability {d}");
        }
        if let Some(k) = self.keys {
            cmd += &format!(" --keys {k}");
        }
        for (k, v) in &self.opts {
            cmd += &format!(" --opt {k}={v}");
        }
        if self.break_assumptions {
            cmd += " --break-assumptions";
        }
        if self.znode {
            cmd += " --znode";
        }
        if let Some(b) = &self.inject_bug {
            cmd += &format!(" --inject-bug {b}");
        }
        if self.read_after_crash {
            cmd += " --read-after-crash";
        }
        if self.no_invariants {
            cmd += " --no-invariants";
        }
        if self.long_pauses {
            cmd += " --long-pauses";
        }
        if let Some((lo, hi)) = self.link_delay {
            cmd += &format!(
                " --link-delay {}..{}",
                format_duration(lo),
                format_duration(hi)
            );
        }
        if let Some((lo, hi)) = self.client_link_delay {
            cmd += &format!(
                " --client-link-delay {}..{}",
                format_duration(lo),
                format_duration(hi)
            );
        }
        cmd + " --trace"
    }
}

fn list_bugs(out: &mut impl Write) {
    let _ = writeln!(
        out,
        "Injected bugs (testing aid: they exist only behind --inject-bug):"
    );
    for p in registry::registry() {
        for b in (p.bugs)() {
            let _ = writeln!(out, "  {:<28} {:<6} {}", b.name, p.name, b.about);
        }
    }
}

/// Run `quorumkv sim`.
pub fn run(args: Args) -> ExitCode {
    if args.inject_bug.as_deref() == Some("list") {
        list_bugs(&mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    let proto = match registry::find(&args.protocol) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("quorumkv sim: {e}");
            return ExitCode::from(2);
        }
    };
    let mut stdout = std::io::stdout().lock();
    if let Some(r) = args.rounds {
        return run_rounds(&args, &proto, r, &mut stdout);
    }
    match run_to(&args, &proto, &mut stdout) {
        Ok(summary) => {
            let failed = !summary.all_passed();
            if failed == args.expect_failure {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("quorumkv sim: {e}");
            ExitCode::from(2)
        }
    }
}

/// `quorumkv sim --rounds`.
fn run_rounds(args: &Args, proto: &Registered, r: u64, out: &mut impl Write) -> ExitCode {
    let settings = RoundSettings {
        rounds: r.max(4),
        clients_per_server: args.round_clients.max(1),
        net: args.round_net,
        ..RoundSettings::default()
    };
    let replicas: Vec<u32> = match args.replicas {
        Some(n) => vec![n],
        None => (2..=8).collect(),
    };
    let cfg = SimConfig {
        trace: args.trace,
        ..args.to_config()
    };
    match rounds::run_cli(proto, &cfg, &replicas, &settings, args.json, out) {
        Ok(passed) if passed != args.expect_failure => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("quorumkv sim: {e}");
            ExitCode::from(2)
        }
    }
}

/// `--help`'s list of every protocol's options and link model.
fn long_help() -> String {
    let mut s = format!("{AFTER_HELP}\n\nProtocol options (--opt KEY=VALUE):\n");
    for i in registry::infos() {
        s += &i.options_help();
    }
    s += "Link models:\n";
    for i in registry::infos() {
        s += &format!("  {}: {}\n", i.name, i.link_model);
    }
    s
}

/// Run the sweep of `args` and write the report to `out`.
pub fn run_to(args: &Args, proto: &Registered, out: &mut impl Write) -> Result<Summary, String> {
    let cfg = args.to_config();
    (proto.check_options)(&cfg.options).map_err(|e| format!("protocol {}: {e}", proto.name))?;
    if cfg.break_assumptions && proto.link_model.is_fifo() {
        let _ = writeln!(
            out,
            "WARNING: --break-assumptions: {} assumes {} links, but loss is now silent and dup/reorder apply; failures are expected",
            proto.name, proto.link_model
        );
    }
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let bug = args
        .inject_bug
        .as_deref()
        .map(|b| format!(", INJECTED BUG {b}"))
        .unwrap_or_default();
    let drawn = |x: Option<String>| x.unwrap_or_else(|| "drawn".into());
    let _ = writeln!(
        out,
        "sim {}: N={} clients={} ops/seed={} faults={} mode={} durability={} seeds={}{bug}",
        proto.name,
        drawn(args.replicas.map(|n| n.to_string())),
        args.clients,
        args.ops,
        args.faults,
        args.mode,
        drawn(args.durability.map(|d| d.to_string())),
        args.seeds
    );
    let mut bar = Progress::new(
        args.seeds.len(),
        !args.no_progress && std::io::stderr().is_terminal(),
    );
    let verbose = args.verbose;
    let mut lines = Vec::new();
    let summary = sweep(proto, &cfg, args.seeds, jobs, args.max_failures, |r| {
        bar.update(r);
        if verbose {
            lines.push(seed_line(r));
        }
    })?;
    bar.finish();
    if verbose {
        lines.sort();
        for l in lines {
            let _ = writeln!(out, "{}", l.1);
        }
    }
    for f in &summary.failures {
        report_failure(args, proto, &cfg, f, out);
    }
    if args.trace && args.seeds.len() == 1 && summary.failures.is_empty() {
        let traced = (proto.run_seed)(
            &SimConfig {
                trace: true,
                ..cfg.clone()
            },
            args.seeds.start,
        )?;
        print_trace(&traced, out);
    }
    print_summary(&summary, out);
    Ok(summary)
}

fn seed_line(r: &SeedReport) -> (u64, String) {
    let s = &r.stats;
    let line = format!(
        "seed {:>6} {:<16} ops ok={} fail={} unknown={}  msgs={} crashes={} (inside {}) outages={} partitions={} pauses={} virtual={:.1}ms  [{}]",
        r.seed,
        r.verdict.label(),
        s.ops_ok,
        s.ops_fail,
        s.ops_unknown,
        s.messages,
        s.crashes,
        s.crashes_inside,
        s.outages,
        s.partitions,
        s.pauses,
        s.virtual_us as f64 / 1000.0,
        r.params
    );
    (r.seed, line)
}

fn report_failure(
    args: &Args,
    proto: &Registered,
    cfg: &SimConfig,
    f: &SeedReport,
    out: &mut impl Write,
) {
    let _ = writeln!(out, "\nFAIL seed {}: {}", f.seed, f.verdict.label());
    let _ = writeln!(out, "  replay: {}", args.replay_command(f.seed));
    let _ = writeln!(out, "  params: {}", f.params);
    let details = match &f.verdict {
        Verdict::Pass => String::new(),
        Verdict::Unsafe { details }
        | Verdict::Stuck { details }
        | Verdict::Undecided { details }
        | Verdict::Panicked { details }
        | Verdict::Invariant { details } => details.clone(),
    };
    for l in details.lines() {
        let _ = writeln!(out, "  {l}");
    }
    if args.trace {
        // Determinism makes the rerun the same run; check it while at it.
        match (proto.run_seed)(
            &SimConfig {
                trace: true,
                ..cfg.clone()
            },
            f.seed,
        ) {
            Ok(traced) => {
                if traced.history != f.history {
                    let _ = writeln!(out, "  WARNING: the rerun differs from the first run: the simulation is not deterministic");
                }
                print_trace(&traced, out);
            }
            Err(e) => {
                let _ = writeln!(out, "  (trace rerun failed: {e})");
            }
        }
    }
}

fn print_trace(r: &SeedReport, out: &mut impl Write) {
    let _ = writeln!(out, "  --- trace of seed {} ({}) ---", r.seed, r.params);
    for l in r.trace.iter().flatten() {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out, "  --- history of seed {} ---", r.seed);
    for op in &r.history {
        let _ = writeln!(out, "  {op}");
    }
    let _ = writeln!(out, "  --- end of seed {} ---", r.seed);
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// `seeds: … run, … passed, … failed (…)`.
fn seeds_line(s: &Summary) -> String {
    let count = |f: fn(&Verdict) -> bool| s.failures.iter().filter(|r| f(&r.verdict)).count();
    let unsafe_ = count(|v| matches!(v, Verdict::Unsafe { .. }));
    let stuck = count(|v| matches!(v, Verdict::Stuck { .. }));
    let undecided = count(|v| matches!(v, Verdict::Undecided { .. }));
    // Shown only when some seed panicked or broke a per-step invariant:
    // other summaries stay as they were.
    let mut panicked = String::new();
    for (n, what) in [
        (
            count(|v| matches!(v, Verdict::Invariant { .. })),
            "broke an invariant",
        ),
        (count(|v| matches!(v, Verdict::Panicked { .. })), "panicked"),
    ] {
        if n > 0 {
            panicked += &format!(", {n} {what}");
        }
    }
    format!(
        "seeds: {} run, {} passed, {} failed ({unsafe_} not linearizable, {stuck} liveness, {undecided} undecided{panicked})",
        s.seeds_run,
        s.passed,
        s.failures.len()
    )
}

fn print_summary(s: &Summary, out: &mut impl Write) {
    let _ = writeln!(out, "\n{}", seeds_line(s));
    let t = &s.totals;
    let _ = writeln!(
        out,
        "simulated: {} ops ({} ok, {} fail, {} unknown), {} messages (+{} client requests/replies; {} lost, {} cut, {} duplicated), {} events, {} crashes ({} inside a handler), {} outages, {} partitions, {} pauses, {:.1}s virtual",
        s.ops(),
        t.ops_ok,
        t.ops_fail,
        t.ops_unknown,
        t.messages,
        t.client_messages,
        t.lost,
        t.cut,
        t.duplicated,
        t.events,
        t.crashes,
        t.crashes_inside,
        t.outages,
        t.partitions,
        t.pauses,
        t.virtual_us as f64 / 1e6
    );
    if t.reconfigs > 0 {
        let _ = writeln!(
            out,
            "membership: {} reconfigurations proposed (fault reconfig)",
            t.reconfigs
        );
    }
    if t.persisted > 0 {
        let _ = writeln!(
            out,
            "disk: {} records persisted, {} fsyncs ({:.2} records each), {} messages/replies held behind a sync, {} unsynced records lost to crashes, {} crashes of every node at once",
            t.persisted,
            t.syncs,
            t.persisted as f64 / t.syncs.max(1) as f64,
            t.held_outputs,
            t.records_lost,
            t.cluster_crashes
        );
    }
    let _ = writeln!(
        out,
        "links: {} down / {} up reported to cores, {} resets ({} messages dropped with them, {} held across partitions), {} reconnects, {} retries, {} notifications ({} dropped){}",
        t.link_downs,
        t.link_ups,
        t.resets,
        t.reset_dropped,
        t.held,
        t.reconnects,
        t.retries,
        t.notifies,
        t.notifies_dropped,
        match t.sessions_abandoned {
            0 => String::new(),
            n => format!(
                ", {n} znode sessions abandoned ({} `expired` events), {} unanswered znode requests no second server logged",
                t.expired_events, t.znode_uncarried
            ),
        }
    );
    let _ = writeln!(
        out,
        "wall: {:.2}s on {} thread(s): {} messages/s, {} seeds/min (simulation alone {} messages/s per core; checking took {:.2}s of {:.2}s thread time)",
        s.wall.as_secs_f64(),
        s.jobs,
        si(s.messages_per_sec()),
        si(s.seeds_per_min()),
        si(s.sim_messages_per_core_sec()),
        s.check_wall.as_secs_f64(),
        (s.sim_wall + s.check_wall).as_secs_f64()
    );
    let _ = writeln!(out, "{}", if s.all_passed() { "PASS" } else { "FAIL" });
}

/// A one-line progress bar on stderr (only when it is a terminal).
struct Progress {
    total: u64,
    done: u64,
    failed: u64,
    messages: u64,
    on: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new(total: u64, on: bool) -> Progress {
        let now = Instant::now();
        Progress {
            total,
            done: 0,
            failed: 0,
            messages: 0,
            on,
            start: now,
            last: now,
        }
    }

    fn update(&mut self, r: &SeedReport) {
        self.done += 1;
        self.failed += u64::from(!r.verdict.passed());
        self.messages += r.stats.messages;
        if self.on && (self.last.elapsed() >= Duration::from_millis(100) || self.done == self.total)
        {
            self.last = Instant::now();
            self.draw();
        }
    }

    fn draw(&self) {
        const W: u64 = 30;
        let filled = (self.done * W / self.total.max(1)) as usize;
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}{}] {}/{} seeds, {} failed, {} msg/s ",
            "=".repeat(filled),
            " ".repeat(W as usize - filled),
            self.done,
            self.total,
            self.failed,
            si(self.messages as f64 / secs)
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.on {
            self.draw();
            eprintln!();
        }
    }
}
