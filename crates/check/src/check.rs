//! The checker's API: partitioning per key, the fair parallel search of
//! the keys ([`crate::schedule`]), and the explanation of a violation
//! ([`crate::explain`]).
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::explain::explain;
use crate::history::{History, Operation, Outcome};
use crate::model::{Model, Spec, SpecStepper, ValueStepper};
use crate::schedule::{self, Job, Plan};
use crate::search::{search, Deadline, Found, Progress, Span};

/// A verdict, overall or for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search ran out of time (the overall timeout or the key's own).
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
    /// Time spent searching this key (summed over its slices).
    pub elapsed: Duration,
    /// Search steps and memo entries, for tuning (also in `progress`).
    pub steps: u64,
    pub memo: usize,
    /// How far the search got: for an undecided key, how close it came.
    pub progress: Progress,
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
    /// `failing_op`. (Not minimal if the search steps allowed for it, a few
    /// tenths of a second, ran out.)
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
    /// Give up on a key (it gets [`Verdict::Unknown`]) after this much of
    /// its own search time; the other keys go on.
    pub per_key_timeout: Option<Duration>,
    /// Worker threads; `None`: the CPUs this process may run on. Given
    /// enough time the verdicts do not depend on it (keys are searched in
    /// fair slices, see the crate README).
    pub threads: Option<usize>,
    /// Decide every key even after one is found not linearizable (by default
    /// the others stop and get [`Verdict::Skipped`], as Porcupine does: one
    /// violation decides the history, while refuting some keys can take
    /// exponential time).
    pub all_keys: bool,
    /// On a violation, find the shortest failing prefix and the operations
    /// involved ([`Report::violation`]); costs up to a few checks of the key
    /// plus a fixed budget of search steps (a few tenths of a second).
    /// Without it `violation` is `None`.
    pub explain: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: None,
            per_key_timeout: None,
            threads: None,
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
    let parts = partition(history);
    let jobs = parts.iter().map(|(_, ops)| key_job(ops)).collect();
    let plan = Plan {
        threads: opts.threads.unwrap_or_else(schedule::default_threads),
        at,
        per_job: opts.per_key_timeout,
        stop_at_first: !opts.all_keys,
    };
    let settled = schedule::run(jobs, &plan);
    let keys: Vec<KeyReport> = parts
        .iter()
        .zip(&settled)
        .map(|((key, ops), s)| KeyReport {
            key: key.clone(),
            verdict: s.verdict,
            ops: ops.len(),
            elapsed: s.spent,
            steps: s.progress.steps,
            memo: s.progress.memo,
            progress: s.progress,
        })
        .collect();
    let verdict = keys
        .iter()
        .fold(Verdict::Linearizable, |v, k| v.combine(k.verdict));
    // The first refuted key in the search's order: the same whatever the
    // number of threads.
    let first_bad = (0..parts.len())
        .filter(|&i| settled[i].verdict == Verdict::NotLinearizable)
        .min_by_key(|&i| settled[i].rank);
    let violation = match first_bad {
        Some(i) if opts.explain => Some(explain(
            &parts[i].0,
            &parts[i].1,
            Deadline { at, cancel: None },
        )),
        _ => None,
    };
    Report {
        verdict,
        model,
        keys,
        violation,
        elapsed: start.elapsed(),
    }
}

/// The search of one key, or a key already refuted by a cheap test.
fn key_job(ops: &[Operation]) -> Job<ValueStepper> {
    let stepper = ValueStepper::new(ops);
    if reads_unwritten_value(ops) {
        let events = ops.len() + ops.iter().filter(|o| o.ret.is_some()).count();
        return Job::refuted(events, stepper);
    }
    Job::new(&spans(ops), 0, stepper)
}

fn spans(ops: &[Operation]) -> Vec<Span> {
    ops.iter()
        .map(|o| Span {
            call: o.call,
            ret: o.ret,
        })
        .collect()
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
    let plan = Plan {
        threads: schedule::default_threads(),
        at: timeout.map(|t| Instant::now() + t),
        per_job: None,
        stop_at_first: false,
    };
    let jobs = partitions
        .iter()
        .map(|ops| {
            let mut sorted: Vec<&SpecOp<S::Op>> = ops.iter().collect();
            sorted.sort_by_key(|o| o.call);
            let spans: Vec<Span> = sorted
                .iter()
                .map(|o| Span {
                    call: o.call,
                    ret: o.ret,
                })
                .collect();
            let stepper = SpecStepper::new(spec, sorted.iter().map(|o| &o.op).collect());
            Job::new(&spans, 0, stepper)
        })
        .collect();
    schedule::run(jobs, &plan)
        .into_iter()
        .map(|s| s.verdict)
        .collect()
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
            bound_observed_unknown_writes(&mut ops);
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

/// On a key with only reads, overwrites and deletes, an overwrite with an
/// unknown outcome whose value (written by no other operation) a read
/// returned must be linearized before that read, so before the read's
/// return: it is given the earliest such return as its own. No
/// linearization is lost, and the search stops carrying the write as
/// "may still happen" to the end of the history — with many crashes,
/// dozens of such writes made a seed undecidable (zab seed 8198: 149
/// unknown outcomes on one key).
fn bound_observed_unknown_writes(ops: &mut [Operation]) {
    use crate::history::Op;
    use std::collections::HashMap;
    if ops
        .iter()
        .any(|o| matches!(o.op, Op::Append { .. } | Op::Cas { .. }))
    {
        return;
    }
    let mut writers: HashMap<&str, usize> = HashMap::new();
    for o in ops.iter() {
        if let Op::Put { value, .. } | Op::Write { value, .. } = &o.op {
            *writers.entry(value.as_str()).or_default() += 1;
        }
    }
    let mut first_read: HashMap<String, u64> = HashMap::new();
    for o in ops.iter() {
        if let (true, Outcome::Ok(Some(v)), Some(r)) = (o.op.is_read(), &o.outcome, o.ret) {
            if writers.get(v.as_str()) == Some(&1) {
                let t = first_read.entry(v.clone()).or_insert(r);
                *t = (*t).min(r);
            }
        }
    }
    for o in ops.iter_mut() {
        if let (Op::Put { value, .. } | Op::Write { value, .. }, None) = (&o.op, o.ret) {
            // A read returning before the write was even called cannot be
            // explained; the search says so, with the write left open.
            if let Some(&r) = first_read.get(value.as_str()).filter(|&&r| r >= o.call) {
                o.ret = Some(r);
            }
        }
    }
}

/// Decides one key in a single search of at most `steps` steps, for the
/// explanation; also returns the steps used.
pub(crate) fn check_ops(ops: &[Operation], deadline: Deadline<'_>, steps: u64) -> (Found, u64) {
    if reads_unwritten_value(ops) {
        return (Found::Illegal, 0);
    }
    let (found, p) = search(&spans(ops), 0, &mut ValueStepper::new(ops), deadline, steps);
    (found, p.steps)
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

    fn key_verdicts(rep: &Report) -> Vec<(&str, Verdict)> {
        rep.keys
            .iter()
            .map(|k| (k.key.as_str(), k.verdict))
            .collect()
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

    fn unknown_w(client: u64, v: &str, call: u64) -> Operation {
        Operation {
            ret: None,
            outcome: Outcome::Unknown,
            ..w(client, v, call, call)
        }
    }

    #[test]
    fn an_observed_unknown_write_is_bounded_by_its_first_reader() {
        let mut ops = vec![
            w(1, "1", 0, 5),
            unknown_w(2, "2", 6),
            r(3, Some("2"), 30, 50),
            r(4, Some("2"), 10, 40),
            unknown_w(5, "3", 7), // nobody read 3: left open
            w(6, "4", 8, 9),      // 4 is written twice:
            unknown_w(7, "4", 1), // its unknown writer stays open
            r(8, Some("4"), 20, 21),
        ];
        bound_observed_unknown_writes(&mut ops);
        assert_eq!(ops[1].ret, Some(40), "the earliest return of a read of 2");
        assert_eq!(ops[4].ret, None);
        assert_eq!(ops[6].ret, None, "4 has more than one writer");
        let mut early = vec![unknown_w(1, "9", 10), r(2, Some("9"), 0, 3)];
        bound_observed_unknown_writes(&mut early);
        assert_eq!(early[0].ret, None, "the read cannot be explained anyway");
    }

    #[test]
    fn bounding_unknown_writes_keeps_both_verdicts() {
        // 2 read, then 1 again with no later write of 1: not linearizable.
        let bad = vec![
            w(1, "1", 0, 5),
            unknown_w(2, "2", 6),
            r(3, Some("2"), 10, 20),
            r(4, Some("1"), 25, 30),
        ];
        let rep = check(&History { ops: bad }, Model::Register, None);
        assert_eq!(rep.verdict, Verdict::NotLinearizable);
        // 1 read, then 2: the unknown write took effect in between.
        let good = vec![
            w(1, "1", 0, 5),
            unknown_w(2, "2", 6),
            r(3, Some("1"), 10, 15),
            r(4, Some("2"), 30, 40),
        ];
        let rep = check(&History { ops: good }, Model::Register, None);
        assert_eq!(rep.verdict, Verdict::Linearizable);
    }

    #[test]
    fn many_observed_unknown_writes_are_decided_at_once() {
        // 60 writes that crashed before their reply, each read later: the
        // search used to carry every one of them open to the end.
        let mut ops = Vec::new();
        for i in 0..60u64 {
            let v = i.to_string();
            ops.push(unknown_w(i, &v, 100 * i));
            ops.push(r(1000 + i, Some(&v), 100 * i + 50, 100 * i + 60));
        }
        let rep = check(
            &History { ops },
            Model::Register,
            Some(Duration::from_secs(20)),
        );
        assert_eq!(rep.verdict, Verdict::Linearizable);
    }

    /// `deletes` deletes that never returned, then `rounds` times: a put
    /// that completed, then a read of "absent" — each needs its own delete.
    fn open_deletes(deletes: u64, rounds: u64) -> History {
        let mut ops: Vec<Operation> = (0..deletes)
            .map(|i| Operation {
                op: Op::Delete { key: "".into() },
                ..unknown_w(100 + i, "", i)
            })
            .collect();
        for i in 0..rounds {
            let t = 1000 + 20 * i;
            ops.push(w(1, &i.to_string(), t, t + 5));
            ops.push(r(2, None, t + 10, t + 15));
        }
        History { ops }
    }

    #[test]
    fn open_deletes_are_interchangeable() {
        // 40 open deletes used in any order: 2^40 sets of placed deletes
        // without the twin rule, 41 counts with it.
        let budget = Some(Duration::from_secs(20));
        let rep = check(&open_deletes(40, 40), Model::Register, budget);
        assert_eq!(rep.verdict, Verdict::Linearizable);
        let rep = check(&open_deletes(39, 40), Model::Register, budget);
        assert_eq!(rep.verdict, Verdict::NotLinearizable);
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
        assert_eq!(
            key_verdicts(&rep),
            vec![("", Verdict::Linearizable), ("b", Verdict::NotLinearizable)]
        );
        assert_eq!(rep.violation.unwrap().key, "b");
    }

    #[test]
    fn timeout_gives_unknown_and_says_how_far() {
        let h = crate::gen::hard_appends("k", 20, 0);
        let rep = check(&h, Model::Kv, Some(Duration::from_millis(50)));
        assert_eq!(rep.verdict, Verdict::Unknown);
        let k = &rep.keys[0];
        assert_eq!(k.verdict, Verdict::Unknown);
        let p = k.progress;
        assert!(p.steps > 0 && p.states > 0, "{p:?}");
        assert!(p.deepest > 0 && p.deepest <= k.ops, "{p:?}");
        assert_eq!(p.events, 2 * k.ops);
        assert!(p.prefix_events <= p.events, "{p:?}");
    }

    #[test]
    fn per_key_timeout_gives_up_on_that_key_only() {
        let mut ops = crate::gen::hard_appends("hard", 20, 100).ops;
        ops.extend([w(1, "1", 0, 10), r(2, Some("1"), 20, 30)]);
        let opts = Options {
            per_key_timeout: Some(Duration::from_millis(30)),
            ..Options::default()
        };
        let rep = check_with(&History { ops }, Model::Kv, opts);
        assert_eq!(
            key_verdicts(&rep),
            vec![("", Verdict::Linearizable), ("hard", Verdict::Unknown)]
        );
        assert_eq!(rep.verdict, Verdict::Unknown);
        let spent = rep.keys[1].elapsed;
        assert!(spent >= Duration::from_millis(30), "{spent:?}");
        assert!(spent < Duration::from_secs(5), "{spent:?}");
    }

    #[test]
    fn a_hard_key_does_not_starve_a_bad_one_on_one_thread() {
        // The hard key is the smallest, so it is searched first; the stale
        // read on the other key must still be found, and the hard key is
        // left undecided.
        let mut ops = crate::gen::hard_appends("a", 24, 100).ops;
        ops.extend([w(1, "1", 0, 10), w(1, "2", 20, 30), r(2, Some("1"), 40, 50)]);
        ops.extend((0..40).map(|i| r(3, Some("2"), 60 + 2 * i, 61 + 2 * i)));
        let h = History { ops };
        for threads in [1, 2] {
            let opts = Options {
                timeout: Some(Duration::from_secs(60)),
                threads: Some(threads),
                ..Options::default()
            };
            let rep = check_with(&h, Model::Kv, opts);
            assert_eq!(
                key_verdicts(&rep),
                vec![("", Verdict::NotLinearizable), ("a", Verdict::Skipped)],
                "{threads} threads"
            );
            assert!(rep.elapsed < Duration::from_secs(10), "{:?}", rep.elapsed);
        }
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
