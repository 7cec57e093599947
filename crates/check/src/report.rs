//! Plain-text rendering of a [`Report`] for the terminal.
use std::fmt::Write;

use crate::check::{KeyReport, Report, Verdict, Violation};
use crate::history::{Operation, Outcome};

/// Most operations of a failing prefix printed in full.
pub const MAX_PRINTED: usize = 60;

/// One line per key (with `verbose`, times and search statistics too). A
/// key not decided in time always says how far its search got.
pub fn keys_text(r: &Report, verbose: bool) -> String {
    let mut s = String::new();
    for k in &r.keys {
        let _ = write!(s, "key {:?}: {} ({} ops", k.key, k.verdict.name(), k.ops);
        if k.verdict == Verdict::Unknown {
            let _ = write!(s, "; {}", progress_text(k));
        } else if verbose {
            let _ = write!(
                s,
                ", {:.1?}, {} steps, {} memo entries",
                k.elapsed, k.steps, k.memo
            );
        }
        s.push_str(")\n");
    }
    s
}

/// How far the search of an undecided key got.
pub fn progress_text(k: &KeyReport) -> String {
    let p = &k.progress;
    format!(
        "searched {:.1?}: at most {} of {} operations linearized at once, \
         the longest fully linearized prefix {} of {} events, {} states explored, {} steps",
        k.elapsed, p.deepest, k.ops, p.prefix_events, p.events, p.states, p.steps
    )
}

/// The overall verdict line.
pub fn verdict_line(r: &Report) -> String {
    let word = match r.verdict {
        Verdict::Linearizable => "LINEARIZABLE",
        Verdict::NotLinearizable => "NOT LINEARIZABLE",
        Verdict::Unknown | Verdict::Skipped => "UNKNOWN (timed out)",
    };
    format!(
        "{word} ({} keys, model {}, {:.1?})\n",
        r.keys.len(),
        r.model.name(),
        r.elapsed
    )
}

/// `read -> "3"`, `write "3"`, `cas "1"->"2" failed`, `put "x" ?`.
pub fn op_text(o: &Operation) -> String {
    match &o.outcome {
        Outcome::Ok(r) if o.op.is_read() => match r {
            Some(v) => format!("{} -> {v:?}", o.op),
            None => format!("{} -> nil", o.op),
        },
        Outcome::Ok(_) => o.op.to_string(),
        Outcome::Fail => format!("{} (failed)", o.op),
        Outcome::Unknown => format!("{} (unknown outcome)", o.op),
    }
}

/// The violation: key, shortest failing prefix, and involved operations.
pub fn violation_text(v: &Violation) -> String {
    let mut s = String::new();
    let x = &v.ops[v.failing_op];
    let _ = writeln!(
        s,
        "violation on key {:?}: the shortest non-linearizable prefix has {} events ({} of the key's {} operations){}",
        v.key,
        v.prefix_events,
        v.prefix_ops,
        v.ops.len(),
        if v.minimal { "" } else { " [not minimal: shortening timed out]" },
    );
    let _ = writeln!(
        s,
        "it ends when op #{} returns: no order of the operations before it explains `{}` by client {}",
        v.failing_op,
        op_text(x),
        x.client
    );
    let _ = writeln!(
        s,
        "\noperations involved{}: relax any other (drop a read, make a write's outcome unknown) and the prefix still fails",
        if v.involved_minimal { "" } else { " [not fully shrunk: search budget spent]" }
    );
    table(&mut s, v, v.involved.iter().copied());
    let first = v.prefix_ops.saturating_sub(MAX_PRINTED);
    if first > 0 {
        let _ = writeln!(
            s,
            "\nfailing prefix, last {MAX_PRINTED} of {} operations:",
            v.prefix_ops
        );
    } else {
        let _ = writeln!(s, "\nfailing prefix ({} operations):", v.prefix_ops);
    }
    table(&mut s, v, first..v.prefix_ops);
    s
}

fn table(s: &mut String, v: &Violation, rows: impl Iterator<Item = usize>) {
    let end = v.ops[v.failing_op].ret.unwrap_or(u64::MAX);
    let _ = writeln!(
        s,
        "      {:>6} {:>7} {:>14} {:>14}  operation",
        "op", "client", "call", "return"
    );
    for i in rows {
        let o = &v.ops[i];
        let mark = if i == v.failing_op {
            '!'
        } else if v.involved.binary_search(&i).is_ok() {
            '*'
        } else {
            ' '
        };
        let ret = match o.ret {
            Some(r) if r <= end => r.to_string(),
            Some(_) => "(after)".into(),
            None => "-".into(),
        };
        let _ = writeln!(
            s,
            "    {mark} {:>6} {:>7} {:>14} {:>14}  {}",
            i,
            o.client,
            o.call,
            ret,
            op_text(o)
        );
    }
}
