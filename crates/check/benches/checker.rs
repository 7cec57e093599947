//! Checker benchmark: time and peak memory per case, each case in its own
//! process so that peak RSS is that case's.
//!
//!     cargo bench -p quorumkv-check --bench checker            # all cases
//!     cargo bench -p quorumkv-check --bench checker -- case reg100k
//!     cargo bench -p quorumkv-check --bench checker -- gen OUT.jsonl [OPS CLIENTS [VALUES]]
//!     cargo bench -p quorumkv-check --bench checker -- cli FILE [check options]
//!
//! `cli` runs `quorumkv check` itself, for `/usr/bin/time -v`.
use std::process::{Command, ExitCode};
use std::time::Instant;

use quorumkv_check::formats::parse;
use quorumkv_check::gen::RegisterGen;
use quorumkv_check::{check, History, Model};

const CASES: &[&str] = &[
    "c50-ok",
    "c50-bad",
    "reg100k",
    "reg100k-v5",
    "reg100k-unknown",
];

/// The reference histories bundled with the tests.
const KV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kv");

fn reg100k(values: Option<u64>, unknown_ratio: f64) -> History {
    RegisterGen {
        ops: 100_000,
        clients: 16,
        values,
        unknown_ratio,
        seed: 42,
        ..Default::default()
    }
    .history()
}

/// Peak resident set of this process, kB (Linux).
fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn run_case(name: &str) -> ExitCode {
    let t0 = Instant::now();
    let (history, model) = match name {
        "c50-ok" | "c50-bad" => {
            let text = std::fs::read_to_string(format!("{KV}/{name}.txt"))
                .expect("reference history in tests/data/kv");
            (parse(&text, None).expect("parses").0, Model::Kv)
        }
        "reg100k" => (reg100k(None, 0.0), Model::Register),
        "reg100k-v5" => (reg100k(Some(5), 0.0), Model::Register),
        "reg100k-unknown" => (reg100k(None, 0.01), Model::Register),
        _ => {
            eprintln!("unknown case {name}; cases: {CASES:?}");
            return ExitCode::from(3);
        }
    };
    let load = t0.elapsed();
    let t1 = Instant::now();
    let r = check(&history, model, None);
    let secs = t1.elapsed().as_secs_f64();
    let steps: u64 = r.keys.iter().map(|k| k.steps).sum();
    let memo: usize = r.keys.iter().map(|k| k.memo).sum();
    println!(
        "{name:<16} {:>7} ops  {:<16} check {:>8.3} s  (load/generate {:.3} s)  peak RSS {:>7} kB  steps {steps} memo {memo}",
        history.ops.len(),
        format!("{:?}", r.verdict),
        secs,
        load.as_secs_f64(),
        peak_rss_kb().map_or("?".into(), |k| k.to_string()),
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    // cargo passes --bench; keep everything else.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("case") => run_case(args.get(1).map_or("", String::as_str)),
        Some("gen") => {
            let out = args.get(1).expect("gen OUT [OPS CLIENTS [VALUES]]");
            let num = |i: usize, d: u64| args.get(i).map_or(d, |s| s.parse().expect("a number"));
            let g = RegisterGen {
                ops: num(2, 100_000) as usize,
                clients: num(3, 16),
                values: args.get(4).map(|s| s.parse().expect("a number")),
                seed: 42,
                ..Default::default()
            };
            let f = std::fs::File::create(out).expect("create output");
            g.history()
                .write_jsonl(std::io::BufWriter::new(f))
                .expect("write");
            ExitCode::SUCCESS
        }
        Some("cli") => {
            let argv =
                std::iter::once("quorumkv-check".to_string()).chain(args[1..].iter().cloned());
            quorumkv_check::cli::run_from(argv)
        }
        Some(other) => {
            eprintln!("unknown mode {other:?}: use case NAME | gen OUT | cli ARGS");
            ExitCode::from(3)
        }
        None => {
            let me = std::env::current_exe().expect("own path");
            println!("# {} (each case in its own process)", me.display());
            for case in CASES {
                let status = Command::new(&me)
                    .args(["case", case])
                    .status()
                    .expect("spawn");
                if !status.success() {
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
    }
}
