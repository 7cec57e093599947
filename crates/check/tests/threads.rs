//! The verdict must not depend on the machine: one thread (or one CPU) and
//! all of them give the same verdicts on every bundled and generated
//! multi-key history, including those where one hard key could starve the
//! others.
use std::process::Command;
use std::time::Duration;

use quorumkv_check::formats::parse;
use quorumkv_check::gen::{hard_appends, mutate_stale_read, on_key, RegisterGen, SplitMix64};
use quorumkv_check::{check_with, History, Model, Options, Report, Verdict};

const KV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kv");
const BIN: &str = env!("CARGO_BIN_EXE_quorumkv-check");

fn bundled(name: &str) -> History {
    let text = std::fs::read_to_string(format!("{KV}/{name}")).expect("bundled history");
    parse(&text, None).expect("parses").0
}

/// Six register keys (one made stale if `bad`), plus a key whose
/// refutation is exponential if `hard`; the hard key is the smallest, so a
/// scheduler that runs keys to completion in order starts with it.
fn generated(seed: u64, bad: bool, hard: bool) -> History {
    let mut rng = SplitMix64(seed);
    let bad_key = rng.below(6);
    let mut ops = Vec::new();
    for k in 0..6u64 {
        let g = RegisterGen {
            seed: seed * 100 + k,
            ops: 100 + rng.below(200) as usize,
            clients: 2 + rng.below(6),
            values: [None, Some(3)][rng.below(2) as usize],
            unknown_ratio: 0.05,
            ..Default::default()
        };
        let mut h = g.history();
        if bad && k == bad_key {
            h = mutate_stale_read(&h, &mut rng).expect("has a stale-read candidate");
        }
        ops.extend(on_key(&h, &format!("k{k}"), k * 100).ops);
    }
    if hard {
        ops.extend(hard_appends("a-hard", 24, 1000).ops);
    }
    History { ops }
}

fn check(h: &History, threads: Option<usize>, timeout: Duration) -> Report {
    let opts = Options {
        timeout: Some(timeout),
        threads,
        ..Options::default()
    };
    check_with(h, Model::Kv, opts)
}

/// Same overall verdict, same verdict per key, same key explained.
fn assert_same(name: &str, a: &Report, b: &Report) {
    assert_eq!(a.verdict, b.verdict, "{name}");
    let per_key = |r: &Report| -> Vec<(String, Verdict)> {
        r.keys.iter().map(|k| (k.key.clone(), k.verdict)).collect()
    };
    assert_eq!(per_key(a), per_key(b), "{name}");
    let bad_key = |r: &Report| r.violation.as_ref().map(|v| v.key.clone());
    assert_eq!(bad_key(a), bad_key(b), "{name}");
}

#[test]
fn bundled_histories_get_the_same_verdicts_on_one_thread() {
    for name in [
        "c01-ok.txt",
        "c01-bad.txt",
        "c10-ok.txt",
        "c10-bad.txt",
        "c50-ok.txt",
        "c50-bad.txt",
    ] {
        let h = bundled(name);
        let one = check(&h, Some(1), Duration::from_secs(60));
        let all = check(&h, None, Duration::from_secs(60));
        assert_same(name, &one, &all);
        let want = if name.contains("-ok") {
            Verdict::Linearizable
        } else {
            Verdict::NotLinearizable
        };
        assert_eq!(one.verdict, want, "{name}");
    }
}

#[test]
fn generated_histories_get_the_same_verdicts_on_one_thread() {
    for seed in 0..4 {
        for (bad, hard) in [(false, false), (true, false), (true, true)] {
            let h = generated(seed, bad, hard);
            let name = format!("seed {seed}, bad {bad}, hard {hard}");
            let one = check(&h, Some(1), Duration::from_secs(60));
            let all = check(&h, None, Duration::from_secs(60));
            assert_same(&name, &one, &all);
            let want = if bad {
                Verdict::NotLinearizable
            } else {
                Verdict::Linearizable
            };
            assert_eq!(one.verdict, want, "{name}");
            assert!(one.elapsed < Duration::from_secs(30), "{name}: {one:?}");
        }
    }
}

#[test]
fn a_hard_key_alone_is_unknown_with_any_thread_count() {
    let h = generated(7, false, true);
    for threads in [Some(1), None] {
        let r = check(&h, threads, Duration::from_millis(500));
        assert_eq!(r.verdict, Verdict::Unknown, "{threads:?}");
        for k in &r.keys {
            let want = if k.key == "a-hard" {
                Verdict::Unknown
            } else {
                Verdict::Linearizable
            };
            assert_eq!(k.verdict, want, "{threads:?}: key {}", k.key);
        }
    }
}

/// The first CPU this process may run on (for `taskset`).
fn first_cpu() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let first = list.trim().split([',', '-']).next()?;
    Some(first.to_string())
}

/// Runs the CLI binary, on one CPU if `pin`; exit code and stdout with the
/// elapsed time (the only part that may differ) removed. `None` if `taskset`
/// is not available here.
fn cli(file: &str, pin: bool) -> Option<(i32, String)> {
    let args = [file, "--timeout", "60s"];
    let out = if pin {
        let cpu = first_cpu()?;
        Command::new("taskset")
            .args(["-c", &cpu, BIN])
            .args(args)
            .output()
            .ok()?
    } else {
        Command::new(BIN).args(args).output().expect("run the CLI")
    };
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let err = String::from_utf8_lossy(&out.stderr);
    if pin && err.contains("taskset:") {
        return None;
    }
    let text: Vec<&str> = stdout
        .lines()
        .map(|l| match l.rfind(", ") {
            Some(i) if l.contains(" keys, model ") => &l[..i],
            _ => l,
        })
        .collect();
    Some((out.status.code().expect("exited"), text.join("\n")))
}

#[test]
fn the_cli_on_one_cpu_says_what_it_says_on_all() {
    let dir = std::env::temp_dir().join(format!("qkv-check-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gen_file = dir.join("hard-and-bad.jsonl");
    let f = std::fs::File::create(&gen_file).unwrap();
    generated(3, true, true).write_jsonl(f).unwrap();
    let files = [
        format!("{KV}/c50-bad.txt"),
        format!("{KV}/c50-ok.txt"),
        gen_file.to_str().unwrap().to_string(),
    ];
    for file in &files {
        let all = cli(file, false).expect("unpinned run");
        let Some(one) = cli(file, true) else {
            eprintln!("taskset unavailable: one-CPU run of {file} skipped");
            return;
        };
        assert_eq!(one, all, "{file}");
        let want = if file.contains("-ok") { 0 } else { 1 };
        assert_eq!(one.0, want, "{file}: {}", one.1);
    }
}
