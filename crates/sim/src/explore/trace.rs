//! Counterexamples as text: a path printed one event per line, with what
//! each event made the cores do, and parsed back for `--replay`.
//!
//! Format: `  3. deliver c0>n1 @1f2e…  | Query { … }`: the step number,
//! the event (messages and timers named by a hash of their contents), and
//! after `|` a description that the parser ignores. Lines starting with
//! `|` (effects) or `#` (comments) are skipped.

use super::choice::Choice;
use super::invariants::check_step;
use super::search::replay;
use super::state::{Payload, Setup, System};
use crate::verify::{check as lin_check, Safety};
use quorumkv_core::protocol::ProtocolDef;

/// A path re-executed: its trace, and the first failure on it.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    pub lines: Vec<String>,
    /// The step (1-based) and what failed there.
    pub failure: Option<(usize, String)>,
    /// The history at the end of the path (`OpRecord` lines).
    pub history: Vec<String>,
}

/// The events of a trace: a file's text, or events separated by `;`.
pub fn parse(text: &str) -> Result<Vec<Choice>, String> {
    let mut path = Vec::new();
    for (n, raw) in text.split(['\n', ';']).enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('|') {
            continue;
        }
        let line = match line.split_once(". ") {
            Some((num, rest)) if num.chars().all(|c| c.is_ascii_digit()) => rest,
            _ => line,
        };
        path.push(
            line.parse()
                .map_err(|e| format!("trace line {}: {e}", n + 1))?,
        );
    }
    Ok(path)
}

/// What event `c` is about, for the trace's description column.
fn describe<D: ProtocolDef>(s: &System<'_, D>, c: Choice) -> String {
    match c {
        Choice::Deliver { from, to, id, .. }
        | Choice::Drop { from, to, id }
        | Choice::Dup { from, to, id } => (s.find_packet(from, to, id))
            .map(|k| match &s.net[k].payload {
                Payload::Msg(m) => format!("{m:?}"),
                p => format!("{p:?}"),
            })
            .unwrap_or_default(),
        Choice::Timer { at, id, .. } => {
            let found = match at {
                super::choice::Ep::Node(i) => s.nodes.get(i).and_then(|n| {
                    (n.timers.iter().find(|t| t.id == id)).map(|t| format!("{:?}", t.timer))
                }),
                super::choice::Ep::Client(c) => s.clients.get(c).and_then(|n| {
                    (n.timers.iter().find(|t| t.id == id)).map(|t| format!("{:?}", t.timer))
                }),
            };
            found.unwrap_or_default()
        }
        Choice::Link { node, .. } => (s.nodes.get(node))
            .and_then(|n| n.links.front().map(|e| format!("{e:?}")))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// The failure of state `s` after a step, if any: the per-step
/// invariants, then the history when an operation just completed.
fn failure<D: ProtocolDef>(s: &System<'_, D>) -> Option<String> {
    if let Err(e) = check_step(s) {
        return Some(e);
    }
    if !s.completed {
        return None;
    }
    match lin_check(&s.history, s.setup.cfg.check_timeout) {
        Safety::Violation(why) => Some(format!("not linearizable: {why}")),
        _ => None,
    }
}

/// Re-execute `path` with tracing, stopping at the first failure.
pub(super) fn run_path<D: ProtocolDef>(setup: &Setup<D>, path: &[Choice]) -> Replayed {
    let mut out = Replayed::default();
    let mut s = match crate::panics::catch(|| replay(setup, &[], true)) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) | Err(e) => {
            out.failure = Some((0, e));
            return out;
        }
    };
    out.lines
        .push("  # start: every node booted, no operation issued".into());
    for e in s.trace.as_mut().map(std::mem::take).unwrap_or_default() {
        out.lines.push(format!("     |{e}"));
    }
    for (k, &c) in path.iter().enumerate() {
        let what = describe(&s, c);
        out.lines.push(format!("{:>3}. {c:<40} | {what}", k + 1));
        let r = crate::panics::catch(|| s.apply(c).map(|_| failure(&s)));
        for e in s.trace.as_mut().map(std::mem::take).unwrap_or_default() {
            out.lines.push(format!("     |{e}"));
        }
        let fail = match r {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => Some(format!("the trace does not fit: {e}")),
            Err(p) => Some(format!("panic: {p}")),
        };
        if let Some(f) = fail {
            out.failure = Some((k + 1, f));
            break;
        }
    }
    out.history = s.history.iter().map(|r| r.to_string()).collect();
    out
}
