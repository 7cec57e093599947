//! Why a key is not linearizable: the shortest failing prefix and a
//! 1-minimal set of operations involved.
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

/// Checks `ops` in at most `steps` search steps; also returns the steps used.
fn check_indexed(ops: &[(usize, Operation)], deadline: Deadline<'_>, steps: u64) -> (Found, u64) {
    let ops: Vec<Operation> = ops.iter().map(|(_, o)| o.clone()).collect();
    check_ops(&ops, deadline, steps)
}

/// Search steps allowed to shrink the set of involved operations (a few
/// tenths of a second), and to each check while shrinking: a hard check is
/// treated as "needed" and its range split, so that one check never eats
/// the whole budget. Steps, not time, so that the explanation is the same
/// on any machine.
const RELAX_STEPS: u64 = 500_000;
const RELAX_CHECK_STEPS: u64 = 25_000;

/// Shortens a non-linearizable key to its shortest failing prefix (binary
/// search: any extension of a non-linearizable prefix is non-linearizable)
/// and finds the operations involved in the failure.
pub(crate) fn explain(key: &str, ops: &[Operation], deadline: Deadline<'_>) -> Violation {
    let ev = events(ops);
    let (mut lo, mut hi) = (0, ev.len()); // prefix(lo) linearizable, prefix(hi) not
    let mut minimal = true;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match check_indexed(&prefix(ops, &ev, mid), deadline, u64::MAX).0 {
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
    let mut budget = Budget {
        steps: RELAX_STEPS,
        deadline,
        cut_short: false,
    };
    let involved = involved(prefix(ops, &ev, hi), failing_op, &mut budget);
    let involved_minimal = !budget.cut_short;
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
    budget: &mut Budget<'_>,
) -> Vec<usize> {
    let mut relaxed = vec![false; ops.len()];
    // Writes first: while the reads are all there they pin where an unknown
    // write can go, which keeps these checks cheap. Then the reads.
    for reads in [false, true] {
        let cands: Vec<usize> = (0..ops.len())
            .filter(|&j| ops[j].0 != failing && ops[j].1.ret.is_some())
            .filter(|&j| ops[j].1.op.is_read() == reads)
            .collect();
        relax(&mut ops, &mut relaxed, &cands, budget);
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

/// What is left of the steps allowed to shrink the involved set.
struct Budget<'a> {
    steps: u64,
    deadline: Deadline<'a>,
    /// Some operation stayed in only because its check was cut short.
    cut_short: bool,
}

impl Budget<'_> {
    fn spent(&self) -> bool {
        self.steps == 0 || self.deadline.expired()
    }

    /// Checks `ops` within one check's share of the steps left.
    fn check(&mut self, ops: &[(usize, Operation)]) -> Found {
        let (found, used) = check_indexed(ops, self.deadline, self.steps.min(RELAX_CHECK_STEPS));
        self.steps -= used.min(self.steps);
        found
    }
}

fn relax(
    ops: &mut [(usize, Operation)],
    relaxed: &mut [bool],
    cands: &[usize],
    budget: &mut Budget<'_>,
) {
    let mut todo = vec![(0, cands.len())];
    while let Some((lo, hi)) = todo.pop() {
        if lo >= hi {
            continue;
        }
        if budget.spent() {
            budget.cut_short = true;
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
        let found = budget.check(&kept);
        if found == Found::Illegal {
            continue;
        }
        budget.cut_short |= found != Found::Linearizable && hi - lo == 1;
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
