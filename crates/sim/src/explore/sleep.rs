//! Partial-order reduction: sleep sets (Godefroid) over events that
//! commute, kept per state so that they stay sound with the search's
//! state deduplication.
//!
//! **Independence.** Two events are independent when each touches state
//! the other neither reads nor writes, so that running them in either
//! order reaches the same state (same fingerprint) and neither enables or
//! disables the other:
//! * a delivery to node `j` (or node `j`'s next link event), without a
//!   crash inside, runs a handler of `j` only: it reads and writes `j`'s
//!   core, timers, disk, sessions and link queue, removes its own packet
//!   from the network and adds packets *from* `j` (per-link FIFO order is
//!   kept: the other event adds packets from another endpoint). It reads
//!   the virtual time, which only a timer firing moves, and touches
//!   neither the history nor the fault budgets;
//! * the clients' events (an issue, a delivery to a client) write the
//!   history, whose order is what the checker judges: they are all one
//!   owner, dependent on each other, independent of any node's events;
//! * everything else is dependent on every event: a timer firing moves
//!   the virtual time every later handler reads, a crash (also inside a
//!   call), a restart, a loss, a duplication or a reset changes the
//!   network or the budgets, or other nodes' link queues.
//!
//! So events of different owners commute, and a delivery cannot disable
//! one to another node (it removes only its own packet).
//!
//! **Sleep sets.** After exploring `t1` from a state, a later sibling
//! `t2` need not explore `t1` again if the two are independent: `t2, t1`
//! reaches the state `t1, t2` reached. Each state carries the set of such
//! events ("asleep"), which it does not explore; its successor by `t`
//! inherits those of its sleep set and of its earlier-explored siblings
//! that are independent of `t`. Sleep sets prune transitions, not states:
//! every state within the depth bound is still reached, by a path of the
//! same length (the events commuted), so every state is still checked
//! (invariants, linearizability of its history) and a shortest
//! counterexample stays shortest.
//!
//! **With deduplication** (Godefroid's state-caching rule): a state keeps
//! the sleep set it was first reached with. Reached again with a smaller
//! one, the events asleep before but awake now are explored from it then
//! (a re-expansion restricted to them), and its sleep set becomes the
//! intersection. Without that rule an event could be asleep on every path
//! that reaches a state and never be explored from it.
//!
//! **Crashes inside a handler call** are dependent on everything, so a
//! sleeping delivery's crash-inside variants are still explored where it
//! sleeps: its call would run the same commands there (its node's core
//! and the time did not change since it was explored), so the crash
//! points recorded then are the ones it has.
//!
//! Stateful per-step invariants see fewer orders of the same events (as
//! with deduplication already): an invariant over a *state* is checked on
//! every state.

use super::choice::{Choice, Ep};

/// An event asleep, with the crash points its handler call had.
#[derive(Clone, Debug)]
pub(super) struct Sleeper {
    pub choice: Choice,
    pub cuts: Vec<u32>,
}

/// Whose state an event touches, if only one owner's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Node(usize),
    Clients,
}

fn owner(c: Choice) -> Option<Owner> {
    match c {
        Choice::Deliver {
            to: Ep::Node(j),
            cut: None,
            ..
        }
        | Choice::Link { node: j, cut: None } => Some(Owner::Node(j)),
        Choice::Deliver {
            to: Ep::Client(_),
            cut: None,
            ..
        }
        | Choice::Issue { .. } => Some(Owner::Clients),
        _ => None,
    }
}

/// `a` and `b` commute (module doc).
pub(super) fn independent(a: Choice, b: Choice) -> bool {
    matches!((owner(a), owner(b)), (Some(x), Some(y)) if x != y)
}

/// The sleep set of the successor by `t`: the sleepers and the siblings
/// explored before `t` that commute with it.
pub(super) fn after(sleep: &[Sleeper], done: &[Sleeper], t: Choice) -> Vec<Sleeper> {
    (sleep.iter().chain(done))
        .filter(|z| independent(z.choice, t))
        .cloned()
        .collect()
}

/// The events of `old` not in `new`: asleep before, awake on this arrival.
pub(super) fn woken(old: &[Sleeper], new: &[Sleeper]) -> Vec<Choice> {
    (old.iter())
        .filter(|z| !new.iter().any(|n| n.choice == z.choice))
        .map(|z| z.choice)
        .collect()
}

/// The sleepers of `old` also in `new`.
pub(super) fn intersect(old: Vec<Sleeper>, new: &[Sleeper]) -> Vec<Sleeper> {
    (old.into_iter())
        .filter(|z| new.iter().any(|n| n.choice == z.choice))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(to: Ep) -> Choice {
        Choice::Deliver {
            from: Ep::Node(0),
            to,
            id: 7,
            cut: None,
        }
    }

    #[test]
    fn only_events_of_different_owners_commute() {
        let (n1, n2, c0) = (Ep::Node(0), Ep::Node(1), Ep::Client(0));
        assert!(independent(deliver(n1), deliver(n2)));
        assert!(!independent(deliver(n1), deliver(n1)), "one core");
        assert!(independent(deliver(n1), Choice::Issue { client: 0 }));
        assert!(
            !independent(deliver(c0), Choice::Issue { client: 1 }),
            "both write the history"
        );
        let link = Choice::Link { node: 1, cut: None };
        assert!(independent(deliver(n1), link));
        assert!(!independent(deliver(n2), link));
        let timer = Choice::Timer {
            at: n2,
            id: 1,
            cut: None,
        };
        assert!(!independent(deliver(n1), timer), "time moves");
        let cut = Choice::Deliver {
            from: Ep::Node(0),
            to: n2,
            id: 7,
            cut: Some(0),
        };
        assert!(!independent(deliver(n1), cut), "a crash");
        assert!(!independent(deliver(n1), Choice::Crash { node: 2 }));
    }

    #[test]
    fn sleep_sets_pass_on_what_commutes_and_shrink_on_arrival() {
        let s = |c| Sleeper {
            choice: c,
            cuts: vec![],
        };
        let (a, b, c) = (
            deliver(Ep::Node(0)),
            deliver(Ep::Node(1)),
            deliver(Ep::Node(2)),
        );
        let next = after(&[s(a)], &[s(b)], c);
        assert_eq!(next.len(), 2);
        assert!(after(&[s(a)], &[s(b)], deliver(Ep::Node(1))).len() == 1);
        assert_eq!(woken(&[s(a), s(b)], &[s(b)]), vec![a]);
        assert_eq!(intersect(vec![s(a), s(b)], &[s(b), s(c)]).len(), 1);
    }
}
