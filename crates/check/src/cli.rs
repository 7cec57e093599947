//! `quorumkv check`: decide whether a recorded history is linearizable.
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::check::{check_with, Options, Verdict};
use crate::formats::{parse, Format};
use crate::history::History;
use crate::model::Model;
use crate::report;

/// Check that a recorded history is linearizable.
///
/// Reads FILE (our JSON lines, a znode/lock history (see --model znode), JSON lines with invoke/complete/ok fields, a
/// Jepsen EDN history or register log, or the EDN key-value format; detected
/// unless --format is given; fields a format does not use are ignored), checks each key on its own
/// with the Wing–Gong/Lowe search, and prints a verdict per key and overall.
/// Keys are searched in fair slices of growing size, smallest first, on all
/// threads: a hard key cannot starve the others, and the verdict does not
/// depend on the number of CPUs (given time). Checking stops at the first
/// key found not linearizable (see --all-keys). For a key not decided in
/// time it prints how far the search got. On a violation it prints the key, the
/// shortest prefix of that key's history that cannot be linearized, and the
/// operations involved with their call and return times (nanoseconds, or
/// line numbers for formats without times).
///
/// Exit status: 0 linearizable, 1 not linearizable, 2 unknown (timed out) or
/// unreadable input, 3 usage error.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  quorumkv check run.jsonl\n  quorumkv check etcd_000.log --model cas-register --timeout 10s\n  quorumkv check c50-bad.txt --html failure.html\n  quorumkv check big.jsonl --all-keys --per-key-timeout 5s --timeout 2m"
)]
pub struct Args {
    /// History file; "-" reads standard input.
    pub file: PathBuf,

    /// Sequential model [default: from the operations: kv if any
    /// get/put/append/delete, else cas-register if any cas, else register].
    #[arg(long, value_enum)]
    pub model: Option<ModelArg>,

    /// Input format [default: detected from the first line].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,

    /// Give up after this long (e.g. 500ms, 30s, 2m; "none" for never);
    /// undecided keys are reported unknown.
    #[arg(long, default_value = "30s", value_parser = parse_timeout, value_name = "DURATION")]
    pub timeout: Timeout,

    /// Give up on one key after this much search time of its own (same
    /// syntax); it is reported unknown and the other keys go on.
    #[arg(long, default_value = "none", value_parser = parse_timeout, value_name = "DURATION")]
    pub per_key_timeout: Timeout,

    /// Worker threads [default: the CPUs this process may run on].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,

    /// Write a self-contained HTML page that draws the failing key's
    /// operations on a timeline (clients as rows).
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,

    /// Decide every key, even after one is found not linearizable.
    #[arg(long)]
    pub all_keys: bool,

    /// Also print time, search steps and memo size per key.
    #[arg(long, short)]
    pub verbose: bool,
}

/// `--model`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelArg {
    /// read / write.
    Register,
    /// read / write / cas.
    CasRegister,
    /// get / put / append / delete, per key.
    Kv,
    /// ZooKeeper's znodes (the tree as one object) and lock holdings
    /// (fencing tokens in order, no two holders at once): JSON lines with
    /// `f` open/close/create/delete/set/get/exists/children/hold (detected).
    Znode,
}

impl ModelArg {
    fn key_value(self) -> Option<Model> {
        match self {
            ModelArg::Register => Some(Model::Register),
            ModelArg::CasRegister => Some(Model::CasRegister),
            ModelArg::Kv => Some(Model::Kv),
            ModelArg::Znode => None,
        }
    }
}

/// `--format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// quorumkv's JSON lines (see the README).
    Jsonl,
    /// Jepsen register log (`INFO  jepsen.util - 3 :invoke :cas [1 4]`; tabs or spaces).
    Jepsen,
    /// EDN-like kv maps (`{:process 0, :type :invoke, :f :get, :key "0", :value nil}`).
    EdnKv,
    /// JSON lines, one operation each, with `invoke`/`complete` (ns) and `ok` (true, false, null).
    InvokeJson,
    /// Jepsen/Knossos EDN history (`{:type :invoke, :f :cas, :value [1 2], :process 3, :time 12}`).
    JepsenEdn,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Jsonl => Format::Jsonl,
            FormatArg::Jepsen => Format::Jepsen,
            FormatArg::EdnKv => Format::EdnKv,
            FormatArg::InvokeJson => Format::InvokeJson,
            FormatArg::JepsenEdn => Format::JepsenEdn,
        }
    }
}

/// `--timeout`: a duration, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout(pub Option<Duration>);

fn parse_timeout(s: &str) -> Result<Timeout, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(Timeout(None));
    }
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?} (try 30s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit {unit:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs)
        .map(|d| Timeout(Some(d)))
        .map_err(|e| e.to_string())
}

/// Exit codes.
pub const EXIT_OK: u8 = 0;
pub const EXIT_VIOLATION: u8 = 1;
pub const EXIT_UNKNOWN: u8 = 2;
pub const EXIT_USAGE: u8 = 3;

/// Runs `quorumkv check`, printing to stdout and stderr.
pub fn run(args: Args) -> ExitCode {
    let out = std::io::stdout();
    let err = std::io::stderr();
    ExitCode::from(run_to(&args, &mut out.lock(), &mut err.lock()))
}

/// Parses `argv` (program name first) as a standalone `check` command and
/// runs it; usage errors exit 3 (clap's own default is 2, which here means
/// "unknown").
pub fn run_from<I, T>(argv: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    #[command(name = "quorumkv-check")]
    struct Standalone {
        #[command(flatten)]
        args: Args,
    }
    match <Standalone as clap::Parser>::try_parse_from(argv) {
        Ok(s) => run(s.args),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK })
        }
    }
}

/// Runs the command with explicit output streams; returns the exit code.
pub fn run_to(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let name = args.file.display().to_string();
    let loaded = read_text(args).and_then(|text| {
        let znode = match args.model {
            Some(m) => m == ModelArg::Znode,
            None => args.format.is_none() && crate::znode::jsonl::looks_like(&text),
        };
        match znode {
            true => crate::znode::jsonl::parse(&text).map(Loaded::Znode),
            false => parse(&text, args.format.map(Format::from))
                .map(|(h, _)| Loaded::Kv(h))
                .map_err(|e| e.to_string()),
        }
    });
    let history = match loaded {
        Ok(Loaded::Kv(h)) => h,
        Ok(Loaded::Znode(h)) => return run_znode(args, h, out),
        Err(e) => {
            let _ = writeln!(err, "quorumkv check: {name}: {e}");
            return EXIT_UNKNOWN;
        }
    };
    let model = match args.model.and_then(ModelArg::key_value) {
        Some(m) => m,
        None => Model::detect(history.ops.iter().map(|o| &o.op)),
    };
    if let Some(o) = history.ops.iter().find(|o| !model.allows(&o.op)) {
        let _ = writeln!(
            err,
            "quorumkv check: {name}: operation `{}` (client {}, call {}) is not part of model {}",
            o.op,
            o.client,
            o.call,
            model.name()
        );
        return EXIT_UNKNOWN;
    }
    let opts = Options {
        timeout: args.timeout.0,
        per_key_timeout: args.per_key_timeout.0,
        threads: args.threads.map(usize::from),
        all_keys: args.all_keys,
        explain: true,
    };
    let r = check_with(&history, model, opts);
    let _ = write!(out, "{}", report::keys_text(&r, args.verbose));
    let _ = write!(out, "{}", report::verdict_line(&r));
    if let Some(v) = &r.violation {
        let _ = write!(out, "\n{}", report::violation_text(v));
    }
    if let Some(path) = &args.html {
        if let Err(e) = std::fs::write(path, crate::html::page(&r, &name)) {
            let _ = writeln!(err, "quorumkv check: cannot write {}: {e}", path.display());
            return EXIT_UNKNOWN;
        }
        let _ = writeln!(out, "wrote {}", path.display());
    }
    match r.verdict {
        Verdict::Linearizable => EXIT_OK,
        Verdict::NotLinearizable => EXIT_VIOLATION,
        Verdict::Unknown | Verdict::Skipped => EXIT_UNKNOWN,
    }
}

enum Loaded {
    Kv(History),
    Znode(crate::znode::jsonl::ZnodeHistory),
}

/// `--model znode`: the znode model on the operations, the lock check on
/// each lock's holdings; one line each, then the overall verdict.
fn run_znode(args: &Args, h: crate::znode::jsonl::ZnodeHistory, out: &mut dyn Write) -> u8 {
    use crate::znode::jsonl::lock_violations;
    let mut verdicts = Vec::new();
    if !h.ops.is_empty() {
        let timeout = args.timeout.0.unwrap_or(Duration::MAX);
        let (v, why) = crate::znode::check_history(h.ops, timeout);
        let _ = writeln!(out, "{why}");
        verdicts.push(v);
    }
    for (lock, holds) in &h.locks {
        let (broken, excused) = lock_violations(holds);
        let _ = write!(out, "lock {lock}: {} holds, ", holds.len());
        let _ = writeln!(
            out,
            "{excused} overlaps after a holder's session expired; {}",
            match broken.first() {
                None => "tokens in order, no other overlap".to_string(),
                Some(v) => format!("{} VIOLATIONS, first: {v}", broken.len()),
            }
        );
        verdicts.push(match broken.is_empty() {
            true => Verdict::Linearizable,
            false => Verdict::NotLinearizable,
        });
    }
    let (line, code) = if verdicts.contains(&Verdict::NotLinearizable) {
        ("NOT LINEARIZABLE", EXIT_VIOLATION)
    } else if verdicts.iter().all(|v| *v == Verdict::Linearizable) {
        ("LINEARIZABLE", EXIT_OK)
    } else {
        ("UNKNOWN", EXIT_UNKNOWN)
    };
    let _ = writeln!(out, "verdict: {line}");
    code
}

fn read_text(args: &Args) -> Result<String, String> {
    let mut bytes = Vec::new();
    let read = if args.file.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut bytes)
    } else {
        std::fs::File::open(&args.file).and_then(|mut f| f.read_to_end(&mut bytes))
    };
    read.map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse() {
        assert_eq!(
            parse_timeout("30s"),
            Ok(Timeout(Some(Duration::from_secs(30))))
        );
        assert_eq!(
            parse_timeout("500ms"),
            Ok(Timeout(Some(Duration::from_millis(500))))
        );
        assert_eq!(
            parse_timeout("2m"),
            Ok(Timeout(Some(Duration::from_secs(120))))
        );
        assert_eq!(
            parse_timeout("1.5"),
            Ok(Timeout(Some(Duration::from_millis(1500))))
        );
        assert_eq!(parse_timeout("none"), Ok(Timeout(None)));
        assert!(parse_timeout("fast").is_err());
        assert!(parse_timeout("3 parsecs").is_err());
        assert!(parse_timeout("-1s").is_err());
    }
}
