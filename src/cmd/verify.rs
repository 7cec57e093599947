//! `quorumkv verify`: exhaustive small-scope checking of a protocol core
//! (`quorumkv_sim::explore`), with a progress bar and a replayable
//! counterexample.

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quorumkv_sim::explore::{self, ExploreConfig, Progress, Report};
use quorumkv_sim::Durability;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// Check every interleaving of a small configuration, breadth-first.
///
/// The real protocol cores run through the same `Protocol` trait as in the
/// simulator and the servers: N replicas (3), C clients (2) issuing K
/// operations each on one key (puts of distinct values and gets,
/// alternating; client 0 starts with a put, client 1 with a get). Every
/// enabled event is a branch: a message delivered (FIFO links only at
/// their head), lost or duplicated (unreliable links), a connection reset
/// (FIFO-reliable links), a pending timer firing, a link event reported, a
/// node crashing (also between two commands of one handler call) or
/// restarting. States are deduplicated by fingerprint. Every completed
/// operation's history goes to the linearizability checker; per-step
/// invariants run after every event.
///
/// Bounded by --depth (events per path) and the budgets below; the report
/// says whether the space was exhausted below the bound or cut by it.
/// A violation prints its trace, one event per line; save it to a file and
/// pass it to --replay (with the same flags) to re-execute it.
///
/// Examples:
///   quorumkv verify --protocol abd --depth 10
///   quorumkv verify --protocol ring --depth 40 --crashes 0 --losses 0 --timers 0
///   quorumkv verify --protocol abd --depth 10 --bug abd-minority-quorum \
///       --crashes 0 --losses 0 --dups 0 --timers 0 --save-trace trace.txt
///   quorumkv verify --protocol abd --depth 10 --bug abd-minority-quorum \
///       --crashes 0 --losses 0 --dups 0 --timers 0 --replay trace.txt
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Protocol to check (`quorumkv protocols` lists them).
    #[arg(long, short)]
    protocol: String,
    /// Events per path at most.
    #[arg(long, short, default_value_t = 12)]
    depth: u32,
    /// Operations per client (1 or 2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    ops: u32,
    /// Clients, each with its own operations.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=3))]
    clients: u32,
    /// Replicas (N).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
    replicas: u32,
    /// Node crashes per path (0 or 1); a crashed node may restart.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1))]
    crashes: u32,
    /// Crash only between handler calls, never inside one.
    #[arg(long)]
    no_crash_inside: bool,
    /// What a crash keeps: fsync (every persisted record) or memory (nothing).
    #[arg(long, value_enum, default_value_t = Durability::Fsync)]
    durability: Durability,
    /// Message losses per path (unreliable links: a drop; FIFO-reliable
    /// links: a connection reset).
    #[arg(long, default_value_t = 1)]
    losses: u32,
    /// Message duplications per path (unreliable links only).
    #[arg(long, default_value_t = 1)]
    dups: u32,
    /// Timer firings per path.
    #[arg(long, default_value_t = 2)]
    timers: u32,
    /// Start from the state a fault-free fair schedule settles in (nothing
    /// in flight, every node leader/follower/replica: a leader elected and
    /// synced) instead of from boot. Leader-based protocols spend their
    /// first dozens of events electing; this explores their operations.
    #[arg(long)]
    warmup: bool,
    /// Explore every transition: no partial-order reduction (sleep sets
    /// over commuting events). The states reached are the same.
    #[arg(long)]
    no_reduction: bool,
    /// Inject one of the protocol's deliberate bugs.
    #[arg(long)]
    bug: Option<String>,
    /// A named option set of the protocol (see `quorumkv protocols`).
    #[arg(long)]
    variant: Option<String>,
    /// A protocol option, KEY=VALUE (repeatable; after --variant).
    #[arg(long = "opt", value_name = "KEY=VALUE")]
    opts: Vec<String>,
    /// Stop after this many states explored (0 = no limit).
    #[arg(long, default_value_t = 0)]
    max_states: u64,
    /// Re-execute a trace instead of searching: a file, or events separated
    /// by `;` (`issue c0; deliver c0>n1 @…`).
    #[arg(long, value_name = "TRACE")]
    replay: Option<String>,
    /// Write a counterexample's trace to this file.
    #[arg(long, value_name = "FILE")]
    save_trace: Option<std::path::PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn config(a: &Args) -> Result<ExploreConfig, String> {
    let opts = (a.opts.iter())
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .ok_or(format!("--opt {kv}: want KEY=VALUE"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(ExploreConfig {
        protocol: a.protocol.clone(),
        depth: a.depth,
        replicas: a.replicas,
        clients: a.clients,
        ops: a.ops,
        crashes: a.crashes,
        crash_inside: !a.no_crash_inside,
        durability: a.durability,
        losses: a.losses,
        dups: a.dups,
        timers: a.timers,
        bug: a.bug.clone(),
        warmup: a.warmup,
        variant: a.variant.clone(),
        opts,
        max_states: a.max_states,
        reduce: !a.no_reduction,
        ..ExploreConfig::default()
    })
}

pub fn run(a: Args) -> ExitCode {
    let cfg = match config(&a) {
        Ok(c) => c,
        Err(e) => return super::fail(e),
    };
    match &a.replay {
        Some(t) => replay(&cfg, t),
        None => search(&cfg, &a),
    }
}

fn progress_bar(quiet: bool) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    if quiet || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} {spinner} {wide_msg}")
            .expect("static template"),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

fn show(p: &Progress) -> String {
    let rate = p.transitions as f64 / p.elapsed.as_secs_f64().max(1e-9);
    format!(
        "depth {:>3}  states {:>10}  distinct {:>10}  next level {:>8}  {:>8.0} states/s",
        p.depth, p.transitions, p.distinct, p.frontier, rate
    )
}

fn search(cfg: &ExploreConfig, a: &Args) -> ExitCode {
    println!("verify {}", cfg.flags());
    let pb = progress_bar(a.quiet);
    let r = explore::explore(cfg, &mut |p| pb.set_message(show(p)));
    pb.finish_and_clear();
    let report = match r {
        Ok(r) => r,
        Err(e) => return super::fail(e),
    };
    println!("{report}");
    match &report.violation {
        None => ExitCode::SUCCESS,
        Some(_) => counterexample(cfg, &report, a.save_trace.as_deref()),
    }
}

fn counterexample(
    cfg: &ExploreConfig,
    report: &Report,
    save: Option<&std::path::Path>,
) -> ExitCode {
    let Some(v) = &report.violation else {
        return ExitCode::SUCCESS;
    };
    println!("\nviolation after {} events: {}\n", v.path.len(), v.what);
    let replayed = match explore::replay_path(cfg, &v.path) {
        Ok(r) => r,
        Err(e) => return super::fail(e),
    };
    let mut text = format!("# quorumkv verify {}\n", cfg.flags());
    for l in &replayed.lines {
        text += l;
        text.push('\n');
    }
    print!("{text}");
    println!("history:");
    for h in &replayed.history {
        println!("  {h}");
    }
    let inline: Vec<String> = v.path.iter().map(|c| c.to_string()).collect();
    if let Some(path) = save {
        match std::fs::write(path, &text) {
            Ok(()) => println!(
                "\ntrace saved: replay with\n  quorumkv verify {} --replay {}",
                cfg.flags(),
                path.display()
            ),
            Err(e) => eprintln!("quorumkv: cannot write {}: {e}", path.display()),
        }
    } else {
        println!(
            "\nreplay with\n  quorumkv verify {} --replay '{}'",
            cfg.flags(),
            inline.join("; ")
        );
    }
    ExitCode::FAILURE
}

fn replay(cfg: &ExploreConfig, trace: &str) -> ExitCode {
    let text = match std::path::Path::new(trace).is_file() {
        true => match std::fs::read_to_string(trace) {
            Ok(t) => t,
            Err(e) => return super::fail(format!("cannot read {trace}: {e}")),
        },
        false => trace.to_string(),
    };
    let path = match explore::parse(&text) {
        Ok(p) => p,
        Err(e) => return super::fail(e),
    };
    let r = match explore::replay_path(cfg, &path) {
        Ok(r) => r,
        Err(e) => return super::fail(e),
    };
    for l in &r.lines {
        println!("{l}");
    }
    println!("history:");
    for h in &r.history {
        println!("  {h}");
    }
    match r.failure {
        Some((step, what)) => {
            println!("\nFAILED at step {step} of {}: {what}", path.len());
            ExitCode::FAILURE
        }
        None => {
            println!("\nno failure on these {} events", path.len());
            ExitCode::SUCCESS
        }
    }
}
