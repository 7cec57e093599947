//! Partitioning per key, parallel search, and the analysis of a violation.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::history::{History, Operation, Outcome};
use crate::model::{Model, Spec, SpecStepper, ValueStepper};
use crate::search::{search, Deadline, Found, Span};

/// A verdict, overall or for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search ran out of time.
    Unknown,
    /// Per key only: not decided because another key had already been found
    /// not linearizable (see [`Options::all_keys`]).
    Skipped,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Linearizable => "linearizable",
            Verdict::NotLinearizable => "NOT linearizable",
            Verdict::Unknown => "unknown (timed out)",
            Verdict::Skipped => "not decided (stopped at the first violation)",
        }
    }

    /// NotLinearizable beats Unknown beats Linearizable.
    fn combine(self, other: Verdict) -> Verdict {
        use Verdict::*;
        match (self, other) {
            (NotLinearizable, _) | (_, NotLinearizable) => NotLinearizable,
            (Unknown, _) | (_, Unknown) => Unknown,
            // Skipped implies some key is NotLinearizable.
            (Skipped, _) | (_, Skipped) => NotLinearizable,
            _ => Linearizable,
        }
    }
}

/// The verdict for one key.
#[derive(Clone, Debug)]
pub struct KeyReport {
    pub key: String,
    pub verdict: Verdict,
    /// Operations checked (failed operations and unknown reads dropped).
    pub ops: usize,
    pub elapsed: Duration,
    /// Search steps and memo entries, for tuning.
    pub steps: u64,
    pub memo: usize,
}

/// Why one key is not linearizable.
#[derive(Clone, Debug)]
pub struct Violation {
    pub key: String,
    /// The key's operations that were checked, ordered by invocation.
    pub ops: Vec<Operation>,
    /// The shortest prefix of the key's events (calls and returns in time
    /// order) that cannot be linearized, as a count of events.
    pub prefix_events: usize,
    /// How many of `ops` were invoked within that prefix: `ops[..prefix_ops]`.
    /// Those not completed within it count as unknown there.
    pub prefix_ops: usize,
    /// Index into `ops` of the operation whose completion ends the prefix:
    /// no order of the earlier operations lets it return what it did.
    pub failing_op: usize,
    /// Indices into `ops`, sorted: a 1-minimal set of operations of the
    /// prefix whose results and times alone contradict linearizability. All
    /// others can be relaxed (a read dropped, a write given an unknown
    /// outcome) and the prefix is still not linearizable. Includes
    /// `failing_op`. (Not minimal if the 0.3 s allowed for it ran out.)
    pub involved: Vec<usize>,
    /// False if shrinking `involved` ran out of time (it is then a superset).
    pub involved_minimal: bool,
    /// False if the shortening ran out of time: the prefix is then not
    /// linearizable but may not be the shortest.
    pub minimal: bool,
}

/// The result of [`check`].
#[derive(Clone, Debug)]
pub struct Report {
    pub verdict: Verdict,
    pub model: Model,
    /// One entry per key, ordered by key.
    pub keys: Vec<KeyReport>,
    /// Details of the first key found not linearizable.
    pub violation: Option<Violation>,
    pub elapsed: Duration,
}

/// How to check.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Keys not decided in time get [`Verdict::Unknown`].
    pub timeout: Option<Duration>,
    /// Decide every key even after one is found not linearizable (by default
    /// the others stop and get [`Verdict::Skipped`], as Porcupine does: one
    /// violation decides the history, while refuting some keys can take
    /// exponential time).
    pub all_keys: bool,
    /// On a violation, find the shortest failing prefix and the operations
    /// involved ([`Report::violation`]); costs up to a few checks of the key
    /// plus 0.3 s. Without it `violation` is `None`.
    pub explain: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: None,
            all_keys: false,
            explain: true,
        }
    }
}

/// Checks `history` against `model`, each key on its own and in parallel,
/// stopping at the first key found not linearizable.
///
/// Operations with [`Outcome::Fail`] and reads with [`Outcome::Unknown`] are
/// dropped first. Every operation is interpreted with the semantics of its
/// kind whatever `model` is (use [`Model::allows`] to reject foreign ones).
/// With a `timeout`, keys not decided in time get [`Verdict::Unknown`].
pub fn check(history: &History, model: Model, timeout: Option<Duration>) -> Report {
    check_with(
        history,
        model,
        Options {
            timeout,
            ..Options::default()
        },
    )
}

/// [`check`] with all options.
pub fn check_with(history: &History, model: Model, opts: Options) -> Report {
    let start = Instant::now();
    let at = opts.timeout.map(|t| start + t);
    let stop = AtomicBool::new(false);
    let first_bad = AtomicUsize::new(usize::MAX);
    let deadline = Deadline {
        at,
        cancel: (!opts.all_keys).then_some(&stop),
    };
    let parts = partition(history);
    let indexed: Vec<(usize, &(String, Vec<Operation>))> = parts.iter().enumerate().collect();
    let keys = par_map(&indexed, |&(i, (key, ops))| {
        let t0 = Instant::now();
        let (found, stats) = if deadline.expired() {
            (Found::Timeout, Default::default())
        } else {
            check_ops(ops, deadline)
        };
        if found == Found::Illegal {
            let _ = first_bad.compare_exchange(usize::MAX, i, Ordering::AcqRel, Ordering::Acquire);
            stop.store(true, Ordering::Release);
        }
        let mut v = verdict(found);
        if v == Verdict::Unknown && at.is_none_or(|t| Instant::now() < t) {
            v = Verdict::Skipped;
        }
        KeyReport {
            key: key.clone(),
            verdict: v,
            ops: ops.len(),
            elapsed: t0.elapsed(),
            steps: stats.steps,
            memo: stats.memo,
        }
    });
    let verdict = keys
        .iter()
        .fold(Verdict::Linearizable, |v, k| v.combine(k.verdict));
    let violation = match first_bad.load(Ordering::Acquire) {
        _ if !opts.explain => None,
        usize::MAX => None,
        i => Some(explain(
            &parts[i].0,
            &parts[i].1,
            Deadline { at, cancel: None },
        )),
    };
    Report {
        verdict,
        model,
        keys,
        violation,
        elapsed: start.elapsed(),
    }
}

/// An operation of a [`Spec`] with its times.
#[derive(Clone, Debug)]
pub struct SpecOp<O> {
    pub call: u64,
    /// `None`: unknown outcome (may take effect after `call`, or never).
    pub ret: Option<u64>,
    pub op: O,
}

/// Checks independent partitions of a history against any [`Spec`]: the seam
/// for models beyond the built-in ones. One verdict per partition.
pub fn check_spec<S: Spec>(
    spec: &S,
    partitions: &[Vec<SpecOp<S::Op>>],
    timeout: Option<Duration>,
) -> Vec<Verdict> {
    let deadline = Deadline {
        at: timeout.map(|t| Instant::now() + t),
        cancel: None,
    };
    par_map(partitions, |ops| {
        let mut sorted: Vec<&SpecOp<S::Op>> = ops.iter().collect();
        sorted.sort_by_key(|o| o.call);
        let spans: Vec<Span> = sorted
            .iter()
            .map(|o| Span {
                call: o.call,
                ret: o.ret,
            })
            .collect();
        let mut stepper = SpecStepper::new(spec, sorted.iter().map(|o| &o.op).collect());
        verdict(search(&spans, 0, &mut stepper, deadline).0)
    })
}

fn verdict(f: Found) -> Verdict {
    match f {
        Found::Linearizable => Verdict::Linearizable,
        Found::Illegal => Verdict::NotLinearizable,
        Found::Timeout => Verdict::Unknown,
    }
}

/// Keys with their operations, minus those that constrain nothing, each
/// list ordered by invocation.
fn partition(history: &History) -> Vec<(String, Vec<Operation>)> {
    let mut parts: BTreeMap<&str, Vec<Operation>> = BTreeMap::new();
    for o in &history.ops {
        let dropped = match o.outcome {
            Outcome::Fail => true,
            Outcome::Unknown => o.op.is_read(),
            Outcome::Ok(_) => false,
        };
        if !dropped {
            let key = o.op.key();
            let mut o = o.clone();
            if o.outcome == Outcome::Unknown {
                o.ret = None;
            }
            parts.entry(key).or_default().push(o);
        }
    }
    parts
        .into_iter()
        .map(|(k, mut ops)| {
            drop_unobserved_unknown_writes(&mut ops);
            ops.sort_by_key(|o| (o.call, o.client));
            (k.to_string(), ops)
        })
        .collect()
}

/// On a key with only reads, overwrites and deletes, an overwrite with an
/// unknown outcome whose value nobody read may as well never have happened:
/// in any linearization no read falls between it and the next write, so
/// removing it changes no result. Dropping these keeps the search from
/// trying every place for them. (Not with appends or cas, whose effect
/// depends on the value overwritten.)
fn drop_unobserved_unknown_writes(ops: &mut Vec<Operation>) {
    use crate::history::Op;
    let simple = ops
        .iter()
        .all(|o| !matches!(o.op, Op::Append { .. } | Op::Cas { .. }));
    if !simple {
        return;
    }
    let seen: std::collections::HashSet<&str> = ops
        .iter()
        .filter_map(|o| match &o.outcome {
            Outcome::Ok(Some(v)) if o.op.is_read() => Some(v.as_str()),
            _ => None,
        })
        .collect();
    let keep: Vec<bool> = ops
        .iter()
        .map(|o| match (&o.op, &o.outcome) {
            (Op::Put { value, .. } | Op::Write { value, .. }, Outcome::Unknown) => {
                seen.contains(value.as_str())
            }
            _ => true,
        })
        .collect();
    let mut k = keep.into_iter();
    ops.retain(|_| k.next().expect("one flag per op"));
}

fn check_ops(ops: &[Operation], deadline: Deadline<'_>) -> (Found, crate::search::Stats) {
    if reads_unwritten_value(ops) {
        return (Found::Illegal, Default::default());
    }
    let spans: Vec<Span> = ops
        .iter()
        .map(|o| Span {
            call: o.call,
            ret: o.ret,
        })
        .collect();
    search(&spans, 0, &mut ValueStepper::new(ops), deadline)
}

/// A completed read of a value that no operation writes (on a key without
/// appends, where values are only ever written whole) can never be placed.
/// Caught here it costs nothing, where the search would first try every
/// order of everything else.
fn reads_unwritten_value(ops: &[Operation]) -> bool {
    use crate::history::Op;
    let mut written = std::collections::HashSet::new();
    for o in ops {
        match &o.op {
            Op::Append { .. } => return false,
            Op::Put { value, .. } | Op::Write { value, .. } => {
                written.insert(value.as_str());
            }
            Op::Cas { to, .. } => {
                written.insert(to.as_str());
            }
            _ => {}
        }
    }
    ops.iter().any(|o| match &o.outcome {
        Outcome::Ok(Some(v)) if o.op.is_read() => !written.contains(v.as_str()),
        _ => false,
    })
}

/// Runs `f` on every item on up to `available_parallelism` threads, biggest
/// jobs first; results in item order.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items.len() {
                            return mine;
                        }
                        mine.push((i, f(&items[i])));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("checker thread panicked"))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

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
    check_ops(&ops, deadline).0
}

/// Time allowed to shrink the set of involved operations.
const RELAX_BUDGET: Duration = Duration::from_millis(300);

/// Shortens a non-linearizable key to its shortest failing prefix (binary
/// search: any extension of a non-linearizable prefix is non-linearizable)
/// and finds the operations involved in the failure.
fn explain(key: &str, ops: &[Operation], deadline: Deadline<'_>) -> Violation {
    let ev = events(ops);
    let (mut lo, mut hi) = (0, ev.len()); // prefix(lo) linearizable, prefix(hi) not
    let mut minimal = true;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match check_indexed(&prefix(ops, &ev, mid), deadline) {
            Found::Illegal => hi = mid,
            Found::Linearizable => lo = mid,
            Found::Timeout => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;

    fn w(client: u64, v: &str, call: u64, ret: u64) -> Operation {
        let op = Op::Write {
            key: "".into(),
            value: v.into(),
        };
        Operation {
            client,
            op,
            call,
            ret: Some(ret),
            outcome: Outcome::Ok(None),
        }
    }
    fn r(client: u64, v: Option<&str>, call: u64, ret: u64) -> Operation {
        let op = Op::Read { key: "".into() };
        Operation {
            client,
            op,
            call,
            ret: Some(ret),
            outcome: Outcome::Ok(v.map(String::from)),
        }
    }

    #[test]
    fn stale_read_is_explained_by_the_shortest_prefix() {
        let ops = vec![
            w(1, "1", 0, 10),
            w(1, "2", 20, 30),
            r(2, Some("2"), 35, 40),
            r(3, Some("1"), 50, 60), // stale: fails here
            w(1, "3", 70, 80),
            r(2, Some("3"), 90, 95),
        ];
        let rep = check(&History { ops }, Model::Register, None);
        assert_eq!(rep.verdict, Verdict::NotLinearizable);
        let v = rep.violation.unwrap();
        assert_eq!(v.failing_op, 3);
        assert_eq!(v.prefix_ops, 4);
        assert_eq!(v.prefix_events, 8);
        assert!(v.minimal);
        // w(1) completed, then 2 was read, then 1 again: w(2) itself may be
        // relaxed (the read of 2 pins it), everything else is needed.
        assert_eq!(v.involved, vec![0, 2, 3]);
        assert!(v.involved_minimal);
    }

    #[test]
    fn keys_are_independent_and_combined() {
        let mut ops = vec![w(1, "1", 0, 10), r(2, Some("1"), 20, 30)];
        ops.push(Operation {
            op: Op::Read { key: "b".into() },
            ..r(3, Some("nope"), 0, 1)
        });
        let rep = check_with(
            &History { ops },
            Model::Register,
            Options {
                all_keys: true,
                ..Options::default()
            },
        );
        assert_eq!(rep.verdict, Verdict::NotLinearizable);
        let verdicts: Vec<_> = rep
            .keys
            .iter()
            .map(|k| (k.key.as_str(), k.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![("", Verdict::Linearizable), ("b", Verdict::NotLinearizable)]
        );
        assert_eq!(rep.violation.unwrap().key, "b");
    }

    #[test]
    fn timeout_gives_unknown() {
        // Many concurrent writes of the same value and an impossible read
        // make an exponential search; a zero timeout must stop it.
        let mut ops: Vec<Operation> = (0..40).map(|i| w(i, "x", 0, 100)).collect();
        ops.push(r(99, Some("y"), 200, 300));
        let rep = check(&History { ops }, Model::Register, Some(Duration::ZERO));
        assert_eq!(rep.verdict, Verdict::Unknown);
    }

    #[test]
    fn spec_seam_checks_a_counter() {
        /// Increment (None) or read (Some(n)).
        struct Counter;
        impl Spec for Counter {
            type Op = Option<u32>;
            type State = u32;
            fn init(&self) -> u32 {
                0
            }
            fn step(&self, s: &u32, op: &Option<u32>) -> Option<u32> {
                match op {
                    None => Some(s + 1),
                    Some(n) => (n == s).then_some(*s),
                }
            }
        }
        let op = |call, ret, op| SpecOp {
            call,
            ret: Some(ret),
            op,
        };
        let ok = vec![
            op(0, 10, None),
            op(1, 2, Some(0)),
            op(5, 20, None),
            op(21, 22, Some(2)),
        ];
        let bad = vec![op(0, 10, None), op(11, 12, Some(0))];
        let v = check_spec(&Counter, &[ok, bad], None);
        assert_eq!(v, vec![Verdict::Linearizable, Verdict::NotLinearizable]);
    }
}
