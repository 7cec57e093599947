//! The KV checker against brute force: on thousands of small random
//! key-value histories (gets, puts, deletes, appends; many writes of
//! unknown outcome), valid by construction or with one read perturbed,
//! [`check_with`] gives, overall and per key, the verdict that trying every
//! order gives: every order respecting real time, each unknown-outcome
//! operation placed anywhere after its call or nowhere, replayed on a map.
//!
//! The checker's search forces only known-return operations (the memo's
//! pruning by inclusion relies on it) and treats blind writes specially;
//! forcing an unknown blind write once made it refute linearizable
//! histories. Through the public API unknown puts nobody reads are dropped
//! before the search, so the writes that reach it as unknown and blind are
//! deletes on keys where no read returns "absent"; the generator makes
//! those often, along with the shapes around that bug (an unknown put
//! concurrent with a known put whose value is read; an unknown put whose
//! value a later read returns), and the test counts them.
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use quorumkv_check::gen::SplitMix64;
use quorumkv_check::{check_with, History, Model, Op, Operation, Options, Outcome, Verdict};

/// The sequential key-value map: a missing key is "no value" (`None`).
type Map = BTreeMap<String, String>;

/// Applies `o` to `m`; false if `o` is a completed get whose result is not
/// what `m` holds.
fn apply(m: &mut Map, o: &Operation) -> bool {
    match &o.op {
        Op::Get { key } => match &o.outcome {
            Outcome::Ok(r) => m.get(key) == r.as_ref(),
            _ => true,
        },
        Op::Put { key, value } => {
            m.insert(key.clone(), value.clone());
            true
        }
        Op::Delete { key } => {
            m.remove(key);
            true
        }
        Op::Append { key, value } => {
            m.entry(key.clone()).or_default().push_str(value);
            true
        }
        other => panic!("not a KV operation: {other}"),
    }
}

/// Whether some order of `ops` respecting real time replays on an empty
/// map: every known-outcome operation placed, each unknown-outcome one
/// placed anywhere after its call or never. Failed operations had no
/// effect and are left out.
fn brute(ops: &[Operation]) -> bool {
    let ops: Vec<&Operation> = ops.iter().filter(|o| o.outcome != Outcome::Fail).collect();
    assert!(ops.len() <= 32, "brute force is for small histories");
    let mut failed = HashSet::new();
    orders(&ops, 0, &Map::new(), &mut failed)
}

/// Whether the operations not in `placed` (a bit set) can follow, from
/// map `m`. `failed`: the configurations already found to fail (exact,
/// unlike the checker's memo, which prunes by inclusion).
fn orders(ops: &[&Operation], placed: u32, m: &Map, failed: &mut HashSet<(u32, Map)>) -> bool {
    let open = |j: usize| placed & 1 << j == 0;
    if !(0..ops.len()).any(|j| open(j) && ops[j].ret.is_some()) {
        return true;
    }
    if failed.contains(&(placed, m.clone())) {
        return false;
    }
    for i in (0..ops.len()).filter(|&i| open(i)) {
        // Ready: every operation that returned before it was called is placed.
        let ready = (0..ops.len()).all(|j| !open(j) || ops[j].ret.is_none_or(|r| r >= ops[i].call));
        let mut next = m.clone();
        if ready && apply(&mut next, ops[i]) && orders(ops, placed | 1 << i, &next, failed) {
            return true;
        }
    }
    failed.insert((placed, m.clone()));
    false
}

/// What became of an operation in the generated run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    Known,
    /// No return; the effect happened (at `effect`) or not.
    Unknown {
        applied: bool,
    },
    /// Returned a failure: no effect.
    Fail,
}

/// An operation before its result is known.
struct Draft {
    client: u64,
    op: Op,
    call: u64,
    effect: u64,
    ret: u64,
    fate: Fate,
}

/// A generated history and what its run showed.
struct Case {
    history: History,
    /// Some read saw the effect of an unknown-outcome write.
    unknown_seen: bool,
    /// Some unknown-outcome write's effect was seen by no read.
    unknown_unseen: bool,
}

/// Per-history choices of [`draw_op`].
struct Style {
    keys: u64,
    unique: bool,
    appends: bool,
}

/// A random operation; `next` numbers unique values.
fn draw_op(r: &mut SplitMix64, s: &Style, next: &mut u64) -> Op {
    let key = ["x", "y"][r.below(s.keys) as usize].to_string();
    let roll = r.below(100);
    let mut value = |prefix: &str| {
        *next += 1;
        match s.unique {
            true => format!("{prefix}{next}"),
            false => ["a", "b"][r.below(2) as usize].to_string(),
        }
    };
    match roll {
        0..=39 => Op::Get { key },
        40..=54 => Op::Delete { key },
        55..=71 if s.appends => Op::Append {
            key,
            value: value("p"),
        },
        _ => Op::Put {
            key,
            value: value("v"),
        },
    }
}

fn draw_fate(r: &mut SplitMix64, op: &Op) -> Fate {
    let roll = r.below(100);
    match (op.is_read(), roll) {
        (true, 0..=4) => Fate::Unknown { applied: false },
        (true, _) => Fate::Known,
        (false, 0..=41) => Fate::Unknown {
            applied: r.below(2) == 0,
        },
        (false, 42..=46) => Fate::Fail,
        (false, _) => Fate::Known,
    }
}

/// Bounds (inclusive) of a history's operations and processes.
#[derive(Clone, Copy)]
struct Size {
    ops: (u64, u64),
    procs: (u64, u64),
}

/// A few operations over a few processes on 1–2 keys. Each process runs its
/// operations one after another; one with an unknown outcome ends its
/// process, and a fresh process (a new client) takes its place. Each
/// operation takes effect at an instant between its call and its return
/// (an unknown one: any time after its call, or never).
fn drafts(r: &mut SplitMix64, size: Size) -> Vec<Draft> {
    let n = size.ops.0 + r.below(size.ops.1 - size.ops.0 + 1);
    let procs = (size.procs.0 + r.below(size.procs.1 - size.procs.0 + 1)) as usize;
    let style = Style {
        keys: 1 + r.below(2),
        unique: r.below(2) == 0,
        appends: r.below(10) < 3,
    };
    let mut free = vec![0u64; procs];
    let mut client: Vec<u64> = (0..procs as u64).collect();
    let mut next_client = procs as u64;
    let mut next_value = 0;
    let mut out = Vec::new();
    for _ in 0..n {
        let p = r.below(procs as u64) as usize;
        let op = draw_op(r, &style, &mut next_value);
        let fate = draw_fate(r, &op);
        let call = free[p] + r.below(4);
        let unknown = matches!(fate, Fate::Unknown { .. });
        let effect = call + r.below(if unknown { 16 } else { 6 });
        let ret = effect + r.below(6);
        out.push(Draft {
            client: client[p],
            op,
            call,
            effect,
            ret,
            fate,
        });
        if unknown {
            client[p] = next_client;
            next_client += 1;
            free[p] = call + r.below(8);
        } else {
            free[p] = ret + 1;
        }
    }
    out
}

/// Runs the drafts' effects in time order on a map, giving each completed
/// get what the map held, and notes which unknown writes a read saw.
fn run(drafts: Vec<Draft>) -> Case {
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by_key(|&i| (drafts[i].effect, i));
    let mut m = Map::new();
    // Per key, the operations whose effects make up its current value.
    let mut makers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut seen = vec![false; drafts.len()];
    let mut results = vec![None; drafts.len()];
    for i in order {
        let d = &drafts[i];
        let key = d.op.key().to_string();
        let takes_effect = matches!(d.fate, Fate::Known | Fate::Unknown { applied: true });
        if d.op.is_read() {
            if d.fate == Fate::Known {
                results[i] = m.get(&key).cloned();
                for &w in makers.get(&key).into_iter().flatten() {
                    seen[w] = true;
                }
            }
        } else if takes_effect {
            let probe = Operation::new(0, d.op.clone(), 0, None, Outcome::Unknown);
            apply(&mut m, &probe);
            let list = makers.entry(key).or_default();
            if !matches!(d.op, Op::Append { .. }) {
                list.clear();
            }
            list.push(i);
        }
    }
    let unknown = |d: &Draft| matches!(d.fate, Fate::Unknown { .. }) && !d.op.is_read();
    let writes: Vec<usize> = (0..drafts.len()).filter(|&i| unknown(&drafts[i])).collect();
    let unknown_seen = writes.iter().any(|&i| seen[i]);
    let unknown_unseen = writes.iter().any(|&i| !seen[i]);
    let ops = drafts
        .into_iter()
        .zip(results)
        .map(|(d, res)| {
            let (ret, outcome) = match d.fate {
                Fate::Known if d.op.is_read() => (Some(d.ret), Outcome::Ok(res)),
                Fate::Known => (Some(d.ret), Outcome::Ok(None)),
                Fate::Fail => (Some(d.ret), Outcome::Fail),
                Fate::Unknown { .. } => (None, Outcome::Unknown),
            };
            Operation::new(d.client, d.op, d.call, ret, outcome)
        })
        .collect();
    let mut history = History { ops };
    history.ops.sort_by_key(|o| (o.call, o.client));
    Case {
        history,
        unknown_seen,
        unknown_unseen,
    }
}

/// Changes the result of one completed get to another plausible one: no
/// value, a value or piece written on its key, one piece more, or a value
/// nobody wrote. False if the history has no completed get.
fn perturb(r: &mut SplitMix64, h: &mut History) -> bool {
    let gets: Vec<usize> = (0..h.ops.len())
        .filter(|&i| h.ops[i].op.is_read() && matches!(h.ops[i].outcome, Outcome::Ok(_)))
        .collect();
    if gets.is_empty() {
        return false;
    }
    let i = gets[r.below(gets.len() as u64) as usize];
    let key = h.ops[i].op.key().to_string();
    let Outcome::Ok(cur) = h.ops[i].outcome.clone() else {
        unreachable!("filtered to completed gets")
    };
    let mut alts: BTreeSet<Option<String>> = BTreeSet::from([None, Some("zz".to_string())]);
    for o in h.ops.iter().filter(|o| o.op.key() == key) {
        match &o.op {
            Op::Put { value, .. } => {
                alts.insert(Some(value.clone()));
            }
            Op::Append { value, .. } => {
                alts.insert(Some(value.clone()));
                alts.insert(Some(format!("{}{value}", cur.as_deref().unwrap_or(""))));
            }
            _ => {}
        }
    }
    alts.remove(&cur);
    let alts: Vec<Option<String>> = alts.into_iter().collect();
    h.ops[i].outcome = Outcome::Ok(alts[r.below(alts.len() as u64) as usize].clone());
    true
}

/// Which of the shapes around the historical bug a history has.
#[derive(Default)]
struct Shapes {
    /// An unknown put concurrent with a known put of another value that a
    /// read concurrent with the unknown put returns.
    concurrent: bool,
    /// An unknown put whose value a read called after it returns.
    later_read: bool,
    /// An unknown delete on a key with no append where no read returns
    /// "absent": a blind write of unknown outcome reaching the search.
    blind_delete: bool,
}

fn shapes(h: &History) -> Shapes {
    let ops = &h.ops;
    let got = |o: &Operation| match (&o.op, &o.outcome) {
        (Op::Get { .. }, Outcome::Ok(v)) => Some(v.clone()),
        _ => None,
    };
    let mut s = Shapes::default();
    for u in ops.iter().filter(|o| o.outcome == Outcome::Unknown) {
        let same = || ops.iter().filter(|o| o.op.key() == u.op.key());
        match &u.op {
            Op::Put { value: uv, .. } => {
                for k in same().filter(|k| k.ret.is_some_and(|r| r >= u.call)) {
                    let (Op::Put { value: kv, .. }, Outcome::Ok(_)) = (&k.op, &k.outcome) else {
                        continue;
                    };
                    let reads_k = |o: &Operation| {
                        got(o) == Some(Some(kv.clone())) && o.ret.is_some_and(|r| r >= u.call)
                    };
                    s.concurrent |= kv != uv && same().any(reads_k);
                }
                let later = |o: &Operation| got(o) == Some(Some(uv.clone())) && o.call > u.call;
                s.later_read |= same().any(later);
            }
            Op::Delete { .. } => {
                let append = same().any(|o| matches!(o.op, Op::Append { .. }));
                let absent_read = same().any(|o| got(o) == Some(None));
                s.blind_delete |= !append && !absent_read;
            }
            _ => {}
        }
    }
    s
}

/// The checker's report, every key decided, no explanation.
fn checker(h: &History) -> quorumkv_check::Report {
    let opts = Options {
        timeout: Some(Duration::from_secs(10)),
        threads: Some(1),
        all_keys: true,
        explain: false,
        ..Options::default()
    };
    check_with(h, Model::Kv, opts)
}

fn verdict(linearizable: bool) -> Verdict {
    match linearizable {
        true => Verdict::Linearizable,
        false => Verdict::NotLinearizable,
    }
}

/// Where the checker and brute force disagree on `h` (overall or for a
/// key), as a message; `None` if they agree. Panics if the checker does
/// not decide.
fn disagreement(h: &History) -> Option<String> {
    let rep = checker(h);
    let undecided = |v: Verdict| matches!(v, Verdict::Unknown | Verdict::Skipped);
    assert!(
        !undecided(rep.verdict) && rep.keys.iter().all(|k| !undecided(k.verdict)),
        "the checker did not decide:\n{}",
        h.to_jsonl()
    );
    let want = verdict(brute(&h.ops));
    if rep.verdict != want {
        return Some(format!("checker {:?}, brute force {want:?}", rep.verdict));
    }
    for k in &rep.keys {
        let mine: Vec<Operation> = (h.ops.iter())
            .filter(|o| o.op.key() == k.key)
            .cloned()
            .collect();
        let want = verdict(brute(&mine));
        if k.verdict != want {
            return Some(format!(
                "key {:?}: checker {:?}, brute force {want:?}",
                k.key, k.verdict
            ));
        }
    }
    None
}

/// Drops operations from `h` one at a time while the disagreement stays.
fn minimise(mut h: History) -> History {
    let mut i = 0;
    while i < h.ops.len() {
        let mut smaller = h.clone();
        smaller.ops.remove(i);
        if disagreement(&smaller).is_some() {
            h = smaller;
        } else {
            i += 1;
        }
    }
    h
}

/// Counts of histories, over all cases.
#[derive(Debug, Default)]
struct Tally {
    /// The verdicts (the checker's and brute force's, equal).
    linearizable: u32,
    not_linearizable: u32,
    /// One read's result changed.
    perturbed: u32,
    two_keys: u32,
    /// Some put, delete or append of unknown outcome.
    with_unknown_write: u32,
    /// In the generating run (before any perturbation), some read saw the
    /// effect of an unknown write; some unknown write was seen by none.
    unknown_seen: u32,
    unknown_unseen: u32,
    /// The [`Shapes`].
    shape_concurrent: u32,
    shape_later_read: u32,
    shape_blind_delete: u32,
}

impl Tally {
    fn add(&mut self, case: &Case, linearizable: bool, perturbed: bool) {
        let h = &case.history;
        let s = shapes(h);
        let keys: BTreeSet<&str> = h.ops.iter().map(|o| o.op.key()).collect();
        let unknown_write =
            (h.ops.iter()).any(|o| o.outcome == Outcome::Unknown && !o.op.is_read());
        let c = |b: bool| b as u32;
        self.linearizable += c(linearizable);
        self.not_linearizable += c(!linearizable);
        self.perturbed += c(perturbed);
        self.two_keys += c(keys.len() == 2);
        self.with_unknown_write += c(unknown_write);
        self.unknown_seen += c(case.unknown_seen);
        self.unknown_unseen += c(case.unknown_unseen);
        self.shape_concurrent += c(s.concurrent);
        self.shape_later_read += c(s.later_read);
        self.shape_blind_delete += c(s.blind_delete);
    }
}

/// Checks `cases` histories of `size` against brute force (panicking with
/// the minimised history at the first disagreement) and counts them.
fn agree_on(cases: u64, size: Size, seed: u64) -> Tally {
    let start = Instant::now();
    let mut t = Tally::default();
    for case in 0..cases {
        let mut r = SplitMix64(seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut c = run(drafts(&mut r, size));
        let perturbed = case % 2 == 1 && perturb(&mut r, &mut c.history);
        let want = brute(&c.history.ops);
        assert!(want || perturbed, "case {case}: a sequential run refuted");
        if let Some(why) = disagreement(&c.history) {
            let small = minimise(c.history.clone());
            panic!(
                "case {case}: {why}\nminimised ({}):\n{}\noriginal:\n{}",
                disagreement(&small).unwrap_or_default(),
                small.to_jsonl(),
                c.history.to_jsonl()
            );
        }
        t.add(&c, want, perturbed);
    }
    eprintln!("{t:#?}\nin {:?}", start.elapsed());
    t
}

/// Every verdict and every shape the generator aims at occurs often
/// enough that the agreement means something.
fn assert_covered(t: &Tally) {
    assert!(t.linearizable >= 200 && t.not_linearizable >= 200, "{t:?}");
    assert!(t.unknown_seen >= 200 && t.unknown_unseen >= 200, "{t:?}");
    assert!(
        t.shape_concurrent >= 50 && t.shape_later_read >= 200,
        "{t:?}"
    );
    assert!(t.shape_blind_delete >= 200 && t.two_keys >= 500, "{t:?}");
}

/// 2–6 operations over 2–3 processes, as in the bug's shapes.
#[test]
fn kv_checker_agrees_with_brute_force_on_small_histories() {
    let size = Size {
        ops: (2, 6),
        procs: (2, 3),
    };
    assert_covered(&agree_on(6000, size, 0x6b76_6272_7574_6500));
}

/// 7–10 operations over 2–4 processes: room for the search to reach one
/// configuration by several paths, where its memo's pruning matters.
#[test]
fn kv_checker_agrees_with_brute_force_on_medium_histories() {
    let size = Size {
        ops: (7, 10),
        procs: (2, 4),
    };
    assert_covered(&agree_on(4000, size, 0x6b76_6d65_6469_756d));
}
