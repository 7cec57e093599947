//! Breadth-first search over every interleaving of enabled events, up to
//! the depth bound, deduplicating states by fingerprint.
//!
//! Cores are not `Clone`: each state is rebuilt by replaying its path from
//! the initial state (stateless search). The search keeps only a tree of
//! `(parent, choice)` pairs and the fingerprints seen, so memory stays
//! small; the price is `O(depth)` handler calls per transition.
//!
//! With `reduce` on (the default), sleep sets prune transitions between
//! commuting events (`sleep.rs` has the rules and why they are sound).

use super::choice::Choice;
use super::invariants::check_step;
use super::report::{Progress, Report, Violation};
use super::sleep::{self, Sleeper};
use super::state::{Setup, System};
use crate::verify::{check as lin_check, Safety};
use quorumkv_core::protocol::ProtocolDef;
use std::collections::HashMap;
use std::time::Instant;

/// Report progress every this many transitions.
const PROGRESS_EVERY: u64 = 64;

fn is_cut(c: Choice) -> bool {
    matches!(
        c,
        Choice::Deliver { cut: Some(_), .. }
            | Choice::Timer { cut: Some(_), .. }
            | Choice::Link { cut: Some(_), .. }
    )
}

/// Rebuild the state at the end of `path`.
pub(super) fn replay<'s, D: ProtocolDef>(
    setup: &'s Setup<D>,
    path: &[Choice],
    trace: bool,
) -> Result<System<'s, D>, String> {
    let mut s = System::new(setup, trace);
    for (k, &c) in path.iter().enumerate() {
        s.apply(c)
            .map_err(|e| format!("step {}: {c}: {e}", k + 1))?;
    }
    Ok(s)
}

/// A state queued for expansion: its tree index, core hashes and
/// fingerprint, and `Some(events)` for a re-expansion restricted to the
/// events that were asleep when it was first expanded (`sleep.rs`).
type Level = (u32, Vec<u64>, u64, Option<Vec<Choice>>);

/// A state seen: the sleep set it carries, and whether it was expanded.
struct Slot {
    sleep: Vec<Sleeper>,
    expanded: bool,
}

/// What one transition led to.
struct Next {
    fingerprint: u64,
    hashes: Vec<u64>,
    cuts: Vec<u32>,
    /// The node of the call could crash inside it.
    cuttable: bool,
}

struct Search<'s, D: ProtocolDef> {
    setup: &'s Setup<D>,
    /// The search tree: each state's parent and the choice that led to it.
    tree: Vec<(u32, Choice)>,
    seen: HashMap<u64, Slot>,
    /// The checker's verdict per distinct history (`None` = linearizable).
    checked: HashMap<u64, Option<String>>,
    report: Report,
    started: Instant,
}

impl<'s, D: ProtocolDef> Search<'s, D> {
    fn path(&self, mut k: u32) -> Vec<Choice> {
        let mut p = Vec::new();
        while k != 0 {
            let (parent, c) = self.tree[k as usize];
            p.push(c);
            k = parent;
        }
        p.reverse();
        p
    }

    /// Linearizability of `s`'s history, once per distinct history.
    fn check_history(&mut self, s: &System<'_, D>) -> Result<(), String> {
        let key = s.history_key();
        if let Some(v) = self.checked.get(&key) {
            return v.clone().map_or(Ok(()), Err);
        }
        self.report.histories += 1;
        let verdict = match lin_check(&s.history, self.setup.cfg.check_timeout) {
            Safety::Linearizable => None,
            Safety::Unknown(_) => {
                self.report.undecided += 1;
                None
            }
            Safety::Violation(why) => Some(format!("not linearizable: {why}")),
        };
        self.checked.insert(key, verdict.clone());
        verdict.map_or(Ok(()), Err)
    }

    /// Execute `c` on `s` and check the state it leads to.
    fn step(&mut self, mut s: System<'s, D>, c: Choice, parent: &[u64]) -> Result<Next, String> {
        s.adopt_core_hashes(parent);
        let cuttable = self.setup.cfg.crash_inside && s.may_crash_now();
        s.apply(c)
            .map_err(|e| format!("explorer: {c} not applicable: {e}"))?;
        check_step(&s)?;
        if s.completed {
            self.check_history(&s)?;
        }
        Ok(Next {
            fingerprint: s.fingerprint(),
            hashes: s.core_hashes(),
            cuts: std::mem::take(&mut s.cuts),
            cuttable,
        })
    }

    /// Expand state `k`: every successor not seen yet joins `next`.
    fn expand(&mut self, level: &Level, next: &mut Vec<Level>) -> Result<bool, Violation> {
        let (k, parent, fp, only) = level;
        let k = *k;
        let path = self.path(k);
        let fail = |c: Option<Choice>, what: String| {
            let mut path = path.clone();
            path.extend(c);
            Violation { path, what }
        };
        let first = crate::panics::catch(|| replay(self.setup, &path, false))
            .and_then(|r| r)
            .map_err(|e| fail(None, e))?;
        let enabled = first.enabled();
        let cuttable = self.setup.cfg.crash_inside && first.may_crash_now();
        let slot = self.seen.get_mut(fp).expect("a queued state was seen");
        slot.expanded = true;
        let asleep = slot.sleep.clone();
        let leaf = enabled.is_empty() && only.is_none();
        let mut todo = self.choices_to_explore(enabled, &asleep, only.as_deref(), cuttable);
        todo.reverse();
        let mut done: Vec<Sleeper> = Vec::new();
        let mut first = Some(first);
        while let Some(c) = todo.pop() {
            let r = crate::panics::catch(|| {
                let s = match first.take() {
                    Some(s) => s,
                    None => replay(self.setup, &path, false)?,
                };
                self.step(s, c, parent)
            });
            let n = r.map_err(|p| format!("panic: {p}")).and_then(|r| r);
            let n = n.map_err(|e| fail(Some(c), e))?;
            self.report.transitions += 1;
            if n.cuttable && !is_cut(c) && only.is_none() {
                todo.extend(n.cuts.iter().filter_map(|&k| c.with_cut(k)));
            }
            let sleep = match self.setup.cfg.reduce {
                true => sleep::after(&asleep, &done, c),
                false => Vec::new(),
            };
            if !is_cut(c) {
                done.push(Sleeper {
                    choice: c,
                    cuts: n.cuts,
                });
            }
            self.arrive(k, c, (n.fingerprint, n.hashes), sleep, next);
        }
        Ok(leaf)
    }

    /// The events to explore from a state: the enabled ones not asleep
    /// (with the crash-inside variants of those asleep), or only `only`.
    fn choices_to_explore(
        &mut self,
        enabled: Vec<Choice>,
        asleep: &[Sleeper],
        only: Option<&[Choice]>,
        cuttable: bool,
    ) -> Vec<Choice> {
        if let Some(only) = only {
            return enabled.into_iter().filter(|c| only.contains(c)).collect();
        }
        let mut todo = Vec::with_capacity(enabled.len());
        for c in enabled {
            match asleep.iter().find(|z| z.choice == c) {
                None => todo.push(c),
                Some(z) => {
                    self.report.slept += 1;
                    if cuttable {
                        todo.extend(z.cuts.iter().filter_map(|&k| c.with_cut(k)));
                    }
                }
            }
        }
        todo
    }

    /// A transition from state `k` by `c` reached the state `(fp, hashes)`
    /// with sleep set `sleep`: queue it if new; if it was expanded with
    /// events asleep that are awake now, queue a re-expansion with them.
    fn arrive(
        &mut self,
        k: u32,
        c: Choice,
        (fp, hashes): (u64, Vec<u64>),
        sleep: Vec<Sleeper>,
        next: &mut Vec<Level>,
    ) {
        let woken = match self.seen.get_mut(&fp) {
            None => {
                let expanded = false;
                self.seen.insert(fp, Slot { sleep, expanded });
                None
            }
            Some(slot) => {
                let woken = sleep::woken(&slot.sleep, &sleep);
                slot.sleep = sleep::intersect(std::mem::take(&mut slot.sleep), &sleep);
                match slot.expanded && !woken.is_empty() {
                    true => Some(Some(woken)),
                    false => return, // seen, nothing new to explore from it
                }
            }
        };
        if woken.is_some() {
            self.report.reexpanded += 1;
        }
        self.tree.push((k, c));
        next.push((self.tree.len() as u32 - 1, hashes, fp, woken.flatten()));
    }

    fn out_of_states(&self) -> bool {
        let max = self.setup.cfg.max_states;
        max > 0 && self.report.transitions >= max
    }
}

/// Explore every path of `setup`'s scope up to its depth.
pub(super) fn search<D: ProtocolDef>(
    setup: &Setup<D>,
    progress: &mut dyn FnMut(&Progress),
) -> Report {
    let mut s = Search {
        setup,
        tree: vec![(0, Choice::Crash { node: 0 })], // the root; its choice is unused
        seen: HashMap::new(),
        checked: HashMap::new(),
        report: Report::default(),
        started: Instant::now(),
    };
    let mut frontier = match replay(setup, &[], false) {
        Ok(mut root) => {
            let fp = root.fingerprint();
            let (sleep, expanded) = (Vec::new(), false);
            s.seen.insert(fp, Slot { sleep, expanded });
            vec![(0u32, root.core_hashes(), fp, None)]
        }
        Err(e) => {
            return s.finish(Some(Violation {
                path: vec![],
                what: e,
            }))
        }
    };
    let mut depth = 0;
    let mut shown = 0;
    while !frontier.is_empty() && depth < setup.cfg.depth && !s.out_of_states() {
        let mut next = Vec::new();
        for level in &frontier {
            match s.expand(level, &mut next) {
                Ok(leaf) => s.report.leaves += u64::from(leaf),
                Err(v) => return s.finish(Some(v)),
            }
            if s.report.transitions >= shown + PROGRESS_EVERY {
                shown = s.report.transitions;
                progress(&s.progress(depth + 1, next.len()));
            }
            if s.out_of_states() {
                break;
            }
        }
        depth += 1;
        if !next.is_empty() {
            s.report.max_depth = depth;
        }
        frontier = next;
        progress(&s.progress(depth, frontier.len()));
    }
    // A re-expansion queues a state again: count each state once.
    let mut once = std::collections::HashSet::new();
    frontier.retain(|l| once.insert(l.2));
    s.report.frontier_left = s.live_frontier(&frontier);
    if !s.out_of_states() && depth == setup.cfg.depth {
        s.report.leaves += frontier.len() as u64 - s.report.frontier_left;
    }
    s.report.exhausted = s.report.frontier_left == 0 && !s.out_of_states();
    s.finish(None)
}

impl<D: ProtocolDef> Search<'_, D> {
    fn progress(&self, depth: u32, frontier: usize) -> Progress {
        Progress {
            transitions: self.report.transitions,
            distinct: self.seen.len() as u64,
            depth,
            frontier,
            elapsed: self.started.elapsed(),
        }
    }

    /// How many states of the last frontier still had events enabled.
    fn live_frontier(&self, frontier: &[Level]) -> u64 {
        let live = |&(k, ..): &&Level| {
            let r = crate::panics::catch(|| replay(self.setup, &self.path(*k), false));
            r.ok()
                .and_then(|r| r.ok())
                .is_some_and(|s| !s.enabled().is_empty())
        };
        frontier.iter().filter(|k| live(k)).count() as u64
    }

    fn finish(mut self, violation: Option<Violation>) -> Report {
        self.report.distinct = self.seen.len() as u64;
        self.report.elapsed = self.started.elapsed();
        self.report.violation = violation;
        self.report
    }
}
