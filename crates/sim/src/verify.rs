//! Safety: hand a seed's history to the linearizability checker
//! (`quorumkv-check`, key-value model, each key on its own).

use crate::history::OpRecord;
use quorumkv_check::history::{History, Operation};
use quorumkv_check::{check as lin_check, Model, Verdict};
use quorumkv_core::op::{Op, Outcome};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

/// The checker's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Safety {
    Linearizable,
    /// Not linearizable; the text names the violating operations.
    Violation(String),
    /// The checker gave up (budget exhausted).
    Unknown(String),
}

/// The checker's view of a sim history: unknown outcomes have no return
/// time, and unknown puts whose value no get ever returned are left out.
///
/// Why that is sound: values are unique, so if such a put took effect, no
/// read observed it before the next write; deleting it from a valid
/// linearization leaves a valid one, and an unknown operation may also never
/// have happened. It matters because every unknown put stays open until the
/// end of the history and multiplies the checker's search space.
pub fn to_history(records: &[OpRecord]) -> History {
    let observed: HashSet<&str> = records
        .iter()
        .filter_map(|r| match (&r.op, &r.outcome) {
            (Op::Get { .. }, Outcome::Ok(Some(v))) => Some(v.as_str()),
            _ => None,
        })
        .collect();
    let ops = records
        .iter()
        .filter(|r| match (&r.op, &r.outcome) {
            (Op::Put { value, .. }, Outcome::Unknown) => observed.contains(value.as_str()),
            _ => true,
        })
        .map(|r| {
            let ret = (r.outcome != Outcome::Unknown).then_some(r.complete_ns);
            Operation {
                client: r.process,
                op: r.op.clone(),
                call: r.invoke_ns,
                ret,
                outcome: r.outcome.clone(),
            }
        })
        .collect();
    History { ops }
}

fn show(o: &Operation) -> String {
    let ret = o
        .ret
        .map(|t| format!("{:>12.6}ms", t as f64 / 1e6))
        .unwrap_or_else(|| format!("{:>14}", "…"));
    format!(
        "p{:<3} [{:>12.6}ms .. {ret}] {} -> {}",
        o.client,
        o.call as f64 / 1e6,
        o.op,
        o.outcome
    )
}

/// Check `history` against the key-value model within `timeout`.
pub fn check(history: &[OpRecord], timeout: Duration) -> Safety {
    let h = to_history(history);
    let report = lin_check(&h, Model::Kv, Some(timeout));
    match report.verdict {
        Verdict::Linearizable => Safety::Linearizable,
        Verdict::Unknown => {
            let open: Vec<_> = report
                .keys
                .iter()
                .filter(|k| k.verdict == Verdict::Unknown)
                .map(|k| &k.key)
                .collect();
            Safety::Unknown(format!(
                "the checker timed out after {timeout:?} on keys {open:?}"
            ))
        }
        Verdict::NotLinearizable | Verdict::Skipped => {
            let Some(v) = report.violation else {
                return Safety::Violation("not linearizable (no details)".into());
            };
            let mut s = format!(
                "key {:?}: no linearization of the first {} operations lets this one return what it did:\n",
                v.key, v.prefix_ops
            );
            let _ = writeln!(s, "  >> {}", show(&v.ops[v.failing_op]));
            let _ = writeln!(s, "  involved (the failing op, the ops concurrent with it, each client's last op before it):");
            let mut involved = v.involved.clone();
            involved.sort_unstable();
            for i in involved {
                let mark = if i == v.failing_op { ">>" } else { "  " };
                let _ = writeln!(s, "  {mark} {}", show(&v.ops[i]));
            }
            Safety::Violation(s.trim_end().to_string())
        }
    }
}

/// Check the znode requests of a history against the znode model
/// (`quorumkv_check::znode::ZnodeSpec`), the whole tree as one object, and
/// the watch events the clients received against the reads
/// (`znode::event_before_change`).
pub fn check_znode(run: &crate::world::RunResult, timeout: Duration) -> Safety {
    use crate::world::znode::{event_before_change, znode_history};
    let (asked, history) = (&run.znode, &run.history);
    if let Some(why) = event_before_change(asked, &run.watch_events, history) {
        return Safety::Violation(why);
    }
    let ops = znode_history(asked, &run.abandoned, history);
    match quorumkv_check::znode::check_history(ops, timeout) {
        (Verdict::Linearizable, _) => Safety::Linearizable,
        (Verdict::Unknown, why) => Safety::Unknown(why),
        (_, why) => Safety::Violation(format!("{why} (replay with --trace)")),
    }
}
