//! The round engine behind [`crate::rounds`]: the world's nodes, clients
//! and command executor driven in synchronous rounds (seed 004 §2) instead
//! of by the virtual-time event queue.
//!
//! Every message event the executor would [`World::schedule`] lands in its
//! receiver's inbox instead, stamped with the current round. In round `k`
//! each process (server node or client) takes the *oldest* message of its
//! inbox sent before round `k`, if any, and handles it; what it sends is
//! stamped `k` and deliverable from round `k + 1` on. A process may send
//! any number of messages in a round (the seed's broadcast, step 2). With
//! [`Net::Separate`] a server has two inboxes, one for servers' messages
//! and one for clients' (the seed's dedicated client network, §4.2, §5),
//! and takes at most one message from each per round. A send to oneself
//! goes through one's own inbox like any other message.
//!
//! Timers fire only when the system is idle (every inbox empty), one per
//! idle round, earliest first: without faults no message is lost, and a
//! core's timers are for failures. No faults, no client timeouts; a run in
//! which an operation is outstanding, nothing is in flight and no timer is
//! left is stuck.

use super::{Ev, RunEnd, RunResult, World};
use crate::config::{SeedParams, SimConfig};
use crate::rounds::{Net, Role, RoundLoad};
use bytes::Bytes;
use quorumkv_core::{Peer, Request};
use std::collections::VecDeque;

/// Virtual µs per round: op instants are recorded in ns, so a round spans
/// 10^6 of them and the history's sub-µs counter never reaches the next
/// round (traces print one round as 1 ms).
pub(crate) const ROUND_US: u64 = 1_000;

/// The round of a history instant (ns).
pub fn round_of(ns: u64) -> u64 {
    ns / (ROUND_US * 1_000)
}

pub(super) struct Rounds<D: quorumkv_core::protocol::ProtocolDef> {
    load: RoundLoad,
    round: u64,
    /// Inbox `2 * e + class` of endpoint `e` (nodes first, then clients);
    /// class 1 holds clients' messages to a server under `Net::Separate`.
    inbox: Vec<VecDeque<(u64, Ev<D>)>>,
    /// Pending timer events `(at, seq, event)`; stale ones are skipped
    /// when fired, by the world's generation check.
    timers: Vec<(u64, u64, Ev<D>)>,
    /// Clients whose next operation is due (it goes out in the same round,
    /// or at the next idle round with `issue_when_idle`).
    to_issue: Vec<usize>,
}

impl<D: quorumkv_core::protocol::ProtocolDef> Rounds<D> {
    pub(super) fn new(load: RoundLoad, endpoints: usize) -> Self {
        Rounds {
            load,
            round: 0,
            inbox: (0..2 * endpoints).map(|_| VecDeque::new()).collect(),
            timers: Vec::new(),
            to_issue: Vec::new(),
        }
    }
}

impl<D: quorumkv_core::protocol::ProtocolDef> World<'_, D> {
    fn rounds(&mut self) -> &mut Rounds<D> {
        self.rounds.as_mut().expect("round mode")
    }

    /// [`World::schedule`] in round mode: messages go to inboxes, timers
    /// wait for an idle round, due issues to the run loop; client timeouts
    /// and the failure detector's bookkeeping do not exist (no faults).
    pub(super) fn round_schedule(&mut self, at: u64, ev: Ev<D>) {
        let n = self.nodes.len();
        let separate = self.rounds().load.net == Net::Separate;
        let from_client = |from: &Peer| matches!(from, Peer::Conn(_)) && separate;
        let slot = match &ev {
            Ev::NodeMsg { node, from, .. } => 2 * node + usize::from(from_client(from)),
            Ev::ProxyRequest { node, .. } => 2 * node + usize::from(separate),
            Ev::ClientMsg { client, .. }
            | Ev::ProxyReply { client, .. }
            | Ev::Notify { client, .. } => 2 * (n + client),
            Ev::NodeTimer { .. } | Ev::ClientTimer { .. } => {
                self.seq += 1;
                let seq = self.seq;
                self.rounds().timers.push((at, seq, ev));
                return;
            }
            Ev::ClientIssue { client } => {
                let c = *client;
                self.rounds().to_issue.push(c);
                return;
            }
            _ => return,
        };
        let r = self.rounds();
        let stamp = r.round;
        r.inbox[slot].push_back((stamp, ev));
    }

    /// The request client `c` issues next in round mode.
    pub(super) fn round_request(&self, c: usize) -> Option<Request> {
        let r = self.rounds.as_ref()?;
        let key = Bytes::from_static(b"k0");
        let n = self.clients[c].issued;
        let read = match r.load.roles[c] {
            Role::Reader => true,
            Role::Writer => false,
            Role::Alternate => n % 2 == 1,
        };
        Some(if read {
            Request::Get { key }
        } else {
            Request::Put {
                key,
                value: Bytes::from(format!("c{c}.{n}")),
            }
        })
    }

    /// The server a proxy client talks to in round mode: clients are
    /// spread evenly (client `c` to server `c mod N`).
    pub(super) fn round_server(&self, c: usize) -> Option<usize> {
        self.rounds.as_ref().map(|_| c % self.nodes.len())
    }

    fn issue_due(&mut self) {
        let due = std::mem::take(&mut self.rounds().to_issue);
        for c in due {
            self.issue(c);
        }
    }

    /// Fire the earliest live timer; false if none is left.
    fn fire_timer(&mut self) -> bool {
        loop {
            let timers = &mut self.rounds().timers;
            let Some(k) = (0..timers.len()).min_by_key(|&k| (timers[k].0, timers[k].1)) else {
                return false;
            };
            let (_, _, ev) = timers.swap_remove(k);
            let live = match &ev {
                Ev::NodeTimer { node, timer, gen } => {
                    self.nodes[*node].timers.get(timer) == Some(gen)
                }
                Ev::ClientTimer { client, timer, gen } => {
                    self.clients[*client].timers.get(timer) == Some(gen)
                }
                _ => false,
            };
            if live {
                self.dispatch(ev);
                return true;
            }
        }
    }

    /// Run rounds until every client is done or `load.rounds` have passed.
    pub(super) fn run_rounds(&mut self) -> RunEnd {
        let (max, idle_issue) = {
            let l = &self.rounds().load;
            (l.rounds, l.issue_when_idle)
        };
        for i in 0..self.nodes.len() {
            self.boot(i);
        }
        for c in 0..self.clients.len() {
            self.issue(c);
        }
        loop {
            if self.clients_done == self.clients.len() {
                return RunEnd::Finished;
            }
            let k = self.rounds().round + 1;
            if k > max {
                return match idle_issue {
                    // A latency run must finish; a loaded one just stops.
                    true => RunEnd::Stuck(format!("operations left after {max} rounds")),
                    false => RunEnd::Finished,
                };
            }
            self.rounds().round = k;
            self.now = k * ROUND_US;
            let mut handled = false;
            for q in 0..self.rounds().inbox.len() {
                let inbox = &mut self.rounds().inbox[q];
                if inbox.front().is_none_or(|(sent, _)| *sent >= k) {
                    continue;
                }
                let (_, ev) = inbox.pop_front().expect("checked");
                handled = true;
                self.stats.events += 1;
                self.dispatch(ev);
                if !idle_issue {
                    self.issue_due();
                }
            }
            if handled {
                continue;
            }
            // Idle: every inbox is empty (all they held was deliverable).
            if idle_issue && !self.rounds().to_issue.is_empty() {
                self.issue_due();
            } else if !self.fire_timer() {
                let open = self.clients.iter().filter(|s| s.pending.is_some()).count();
                return RunEnd::Stuck(format!(
                    "round {k}: {open} operations outstanding, nothing in flight, no timer"
                ));
            }
        }
    }
}

impl<'a, D: quorumkv_core::protocol::ProtocolDef> World<'a, D> {
    /// Run `load` in rounds: the seed's parameters give the cluster's
    /// shape (N, client mode); faults are off and clients never give up.
    pub fn run_in_rounds(
        cfg: &'a SimConfig,
        params: SeedParams,
        bug: Option<D::Bug>,
        opts: D::Options,
        load: RoundLoad,
    ) -> RunResult {
        let mut w = World::<D>::new(cfg, params, bug, opts);
        assert_eq!(load.roles.len(), w.clients.len(), "one role per client");
        // No fault phase, and no liveness bound in µs: a round run is
        // stuck only if it stops moving (`run_rounds`).
        w.healed = true;
        w.liveness_from_us = u64::MAX / 1000;
        for slot in &mut w.clients {
            slot.quota = load.ops_per_client.unwrap_or(u32::MAX);
            slot.done = slot.quota == 0;
        }
        w.clients_done = w.clients.iter().filter(|s| s.done).count();
        let endpoints = w.nodes.len() + w.clients.len();
        w.rounds = Some(Box::new(Rounds::new(load, endpoints)));
        let end = w.run_rounds();
        w.stats.virtual_us = w.now;
        RunResult {
            end,
            history: w.history,
            znode: w.znode,
            watch_events: w.watch_events,
            abandoned: w.abandoned,
            stats: w.stats,
            trace: w.trace,
            invariant: w.violation,
        }
    }
}
