//! Why a key is not linearizable: the shortest failing prefix and a
//! 1-minimal set of operations involved.
use std::time::{Duration, Instant};

use crate::check::{check_ops, Violation};
use crate::history::{Operation, Outcome};
use crate::search::{Deadline, Found};

/// The events of `ops` in the search's order: (time, 0 call / 1 return, op).
fn events(ops: &[Operation]) -> Vec<(u64, u8, usize)> {
    let mut ev = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        ev.push((o.call, 0, i));
        if let Some(r) = o.ret {
            ev.push((r.max(o.call), 1, i));
        }
    }
    ev.sort_unstable();
    ev
}

/// The history made of the first `k` events, as indices into `ops` and
/// operations: those not completed within the prefix get an unknown
/// outcome (and reads among them are dropped).
fn prefix(ops: &[Operation], ev: &[(u64, u8, usize)], k: usize) -> Vec<(usize, Operation)> {
    let mut done = vec![false; ops.len()];
    let mut called = 0;
    for &(_, kind, i) in &ev[..k] {
        if kind == 1 {
            done[i] = true;
        } else {
            called = called.max(i + 1);
        }
    }
    (0..called)
        .filter(|&i| done[i] || !ops[i].op.is_read())
        .map(|i| {
            let mut o = ops[i].clone();
            if !done[i] {
                o.ret = None;
                o.outcome = Outcome::Unknown;
            }
            (i, o)
        })
        .collect()
}

fn check_indexed(ops: &[(usize, Operation)], deadline: Deadline<'_>) -> Found {
    let ops: Vec<Operation> = ops.iter().map(|(_, o)| o.clone()).collect();
    check_ops(&ops, deadline)
}

/// Time allowed to shrink the set of involved operations.
const RELAX_BUDGET: Duration = Duration::from_millis(300);

/// Shortens a non-linearizable key to its shortest failing prefix (binary
/// search: any extension of a non-linearizable prefix is non-linearizable)
/// and finds the operations involved in the failure.
pub(crate) fn explain(key: &str, ops: &[Operation], deadline: Deadline<'_>) -> Violation {
    let ev = events(ops);
    let (mut lo, mut hi) = (0, ev.len()); // prefix(lo) linearizable, prefix(hi) not
    let mut minimal = true;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match check_indexed(&prefix(ops, &ev, mid), deadline) {
            Found::Illegal => hi = mid,
            Found::Linearizable => lo = mid,
            Found::Timeout | Found::Paused => {
                minimal = false;
                break;
            }
        }
    }
    let (_, kind, failing_op) = ev[hi - 1];
    debug_assert!(
        kind == 1 || !minimal,
        "a call never makes a history non-linearizable"
    );
    let prefix_ops = ev[..hi]
        .iter()
        .filter(|e| e.1 == 0)
        .map(|e| e.2 + 1)
        .max()
        .unwrap_or(0);
    let budget = Instant::now() + RELAX_BUDGET;
    let relax_deadline = Deadline {
        at: Some(deadline.at.map_or(budget, |t| t.min(budget))),
        cancel: None,
    };
    let involved = involved(prefix(ops, &ev, hi), failing_op, relax_deadline);
    let involved_minimal = !relax_deadline.expired();
    Violation {
        key: key.to_string(),
        ops: ops.to_vec(),
        prefix_events: hi,
        prefix_ops,
        failing_op,
        involved,
        involved_minimal,
        minimal,
    }
}

/// Relaxing an operation only adds freedom: a read is dropped, a write
/// gets an unknown outcome (it may take effect any time after its call, or
/// never). Starting from a non-linearizable prefix, relax as many
/// operations as possible while it stays non-linearizable, halving the
/// candidate ranges (ddmin-like: few checks when most operations are
/// irrelevant). What is left, plus `failing`, is a 1-minimal set of
/// operations whose results and completion times alone contradict
/// linearizability. Operations not tried in time stay in.
fn involved(
    mut ops: Vec<(usize, Operation)>,
    failing: usize,
    deadline: Deadline<'_>,
) -> Vec<usize> {
    let mut relaxed = vec![false; ops.len()];
    // Writes first: while the reads are all there they pin where an unknown
    // write can go, which keeps these checks cheap. Then the reads.
    for reads in [false, true] {
        let cands: Vec<usize> = (0..ops.len())
            .filter(|&j| ops[j].0 != failing && ops[j].1.ret.is_some())
            .filter(|&j| ops[j].1.op.is_read() == reads)
            .collect();
        relax(&mut ops, &mut relaxed, &cands, deadline);
    }
    let mut out: Vec<usize> = (0..ops.len())
        .filter(|&j| !relaxed[j] && ops[j].1.ret.is_some())
        .map(|j| ops[j].0)
        .collect();
    if !out.contains(&failing) {
        out.push(failing);
    }
    out.sort_unstable();
    out
}

/// Time allowed to one check while shrinking: a hard one is treated as
/// "needed" and its range split, so one check never eats the whole budget.
const RELAX_STEP: Duration = Duration::from_millis(20);

fn relax(
    ops: &mut [(usize, Operation)],
    relaxed: &mut [bool],
    cands: &[usize],
    deadline: Deadline<'_>,
) {
    let mut todo = vec![(0, cands.len())];
    while let Some((lo, hi)) = todo.pop() {
        if lo >= hi || deadline.expired() {
            continue;
        }
        let saved: Vec<Operation> = cands[lo..hi].iter().map(|&j| ops[j].1.clone()).collect();
        for &j in &cands[lo..hi] {
            ops[j].1.ret = None;
            ops[j].1.outcome = Outcome::Unknown;
            relaxed[j] = true;
        }
        let kept: Vec<(usize, Operation)> = (0..ops.len())
            .filter(|&j| !(relaxed[j] && ops[j].1.op.is_read()))
            .map(|j| ops[j].clone())
            .collect();
        let step = Instant::now() + RELAX_STEP;
        let sub = Deadline {
            at: Some(deadline.at.map_or(step, |t| t.min(step))),
            cancel: None,
        };
        if check_indexed(&kept, sub) == Found::Illegal {
            continue;
        }
        for (k, &j) in cands[lo..hi].iter().enumerate() {
            ops[j].1 = saved[k].clone();
            relaxed[j] = false;
        }
        if hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            // Popped last-in-first-out: the earlier half first (the cause of
            // a violation is usually recent, so old operations tend to go).
            todo.push((mid, hi));
            todo.push((lo, mid));
        }
    }
}
