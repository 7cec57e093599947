//! Membership change for ABD: a sequence of configurations, each decided
//! by the one before it (issue 37).
//!
//! The design follows the reconfigurable atomic storage of RAMBO (Lynch
//! and Shvartsman, 2002) with its configuration sequence decided by
//! single-decree Paxos among the old configuration, as RAMBO II does, and
//! a stop-the-world state transfer in the manner of Vertical Paxos
//! (Lamport, Malkhi, Zhou, 2009): simpler than RAMBO's concurrent
//! old-and-new quorums, at the cost of a short pause of the key space
//! while a change runs (about three round trips).
//!
//! Configuration `k` ([`Config`]) has an epoch `k` and its members; epoch
//! 0 is the cluster file's (minus its spares). Every query and store names
//! the epoch its coordinator believes in; a replica serves only its own
//! installed epoch, answers an older one with [`Msg::Moved`] (the
//! coordinator adopts the newer configuration and restarts the operation
//! under a fresh op id) and a newer one by asking to be brought up to date
//! ([`Msg::InstallRequest`]).
//!
//! A change from epoch `k` to `k+1`, run by a [`Proposer`] on any server:
//! 1. **Prepare** (Paxos phase 1) to the members of `k`. A replica that
//!    promises is *frozen*: it serves no query or store of epoch `k` any
//!    more, and sends its whole store with the promise. Every operation of
//!    epoch `k` that completed did so on a quorum of `k` before those
//!    members froze, so the stores of a promise quorum hold all of them.
//! 2. **Accept** (Paxos phase 2): the members of `k+1` are the value
//!    accepted under the highest ballot among the promises, or the
//!    proposer's own if none: at most one configuration is ever decided
//!    for an epoch.
//! 3. **Install**: the decided configuration and the merged stores go to
//!    the members of both; a replica merges them and serves epoch `k+1`.
//!    The change is done when a quorum of `k+1` installed.
//!
//! So every replica that serves epoch `k+1` holds every write completed
//! before it (the invariant that makes the old quorum safe to forget), and
//! a replica catching up later takes its state from one that installed.
//!
//! A proposer that dies halfway leaves members frozen; a frozen member
//! that sees no installation for a while runs the change itself, proposing
//! no change: Paxos then finishes whatever was accepted, or moves the same
//! members to the next epoch. Epochs and ballot rounds are checked: at
//! `u64::MAX` a change is refused.

use super::bugs::InjectedBug;
pub use super::msg::{Ballot, Config};
use super::msg::{Entries, Msg, Timer};
use super::replica::Replica;
use crate::protocol::contract::{Out, Record};
use crate::quorum::{QuorumStatus, QuorumTracker};
use crate::types::{NodeId, Peer, Tag, Time};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

const CONFIG_KEY: &str = "abd.config";
const PAXOS_KEY: &str = "abd.paxos";

/// What a replica promised and accepted for deciding epoch `epoch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Paxos {
    epoch: u64,
    promised: Ballot,
    accepted: Option<(Ballot, Vec<NodeId>)>,
}

/// Every replica's side: the configuration it serves in, and its acceptor
/// state for deciding the next one.
#[derive(Debug)]
pub struct Epochs {
    me: NodeId,
    /// Every server of the cluster file (a change may name only these).
    pub servers: Vec<NodeId>,
    pub installed: Config,
    paxos: Paxos,
    /// When this replica froze (promised for the next epoch); `None` if not.
    frozen_since: Option<Time>,
    /// When it last asked to be brought up to a newer epoch.
    asked_at: Option<Time>,
    retry: Duration,
    durable: bool,
    bug: Option<InjectedBug>,
    /// Queries and stores of its epoch left unanswered: frozen, or not a
    /// member.
    pub held_back: u64,
    /// Queries and stores of an older epoch answered with `Moved`.
    pub moved: u64,
}

impl Epochs {
    pub fn new(me: NodeId, servers: Vec<NodeId>, initial: Config, durable: bool) -> Self {
        Epochs {
            me,
            servers,
            installed: initial,
            paxos: Paxos::default(),
            frozen_since: None,
            asked_at: None,
            retry: Duration::from_millis(100),
            durable,
            bug: None,
            held_back: 0,
            moved: 0,
        }
    }
    pub fn set(&mut self, retry: Duration, bug: Option<InjectedBug>) {
        self.retry = retry;
        self.bug = bug;
    }

    /// Promised a proposer of the next epoch: serves nothing of its own.
    pub fn frozen(&self) -> bool {
        self.paxos.promised != Ballot::ZERO && Some(self.paxos.epoch) == self.next_epoch()
    }
    pub fn frozen_since(&self) -> Option<Time> {
        self.frozen_since.filter(|_| self.frozen())
    }
    pub fn next_epoch(&self) -> Option<u64> {
        self.installed.epoch.checked_add(1)
    }
    /// The highest ballot this replica has promised for the next epoch.
    pub fn promised(&self) -> Ballot {
        if self.frozen() {
            self.paxos.promised
        } else {
            Ballot::ZERO
        }
    }
    /// The members accepted for the next epoch, if any.
    pub fn accepted(&self) -> Option<&[NodeId]> {
        let ok = self.frozen() || Some(self.paxos.epoch) == self.next_epoch();
        (self.paxos.accepted.as_ref())
            .filter(|_| ok)
            .map(|(_, m)| m.as_slice())
    }

    /// Whether a query or store of `epoch` (op `op`, from `from`) is
    /// served here; otherwise what was answered or asked instead.
    pub fn admit(
        &mut self,
        now: Time,
        from: Peer,
        op: u64,
        epoch: u64,
        out: &mut Out<Msg, Timer>,
    ) -> bool {
        use std::cmp::Ordering::*;
        match epoch.cmp(&self.installed.epoch) {
            Less => {
                self.moved += 1;
                let config = self.installed.clone();
                out.send(from, Msg::Moved { op, config });
                false
            }
            Greater => {
                self.ask(now, epoch, out);
                false
            }
            Equal => {
                let frozen = self.frozen() && self.bug != Some(InjectedBug::NoFreeze);
                if frozen || !self.installed.has(self.me) {
                    self.held_back += 1;
                    return false;
                }
                true
            }
        }
    }

    /// Whether `members` is a configuration of this cluster: not empty,
    /// every one a server of the cluster file (so an id fits the quorum
    /// bitsets, which stop at 63).
    fn known(&self, members: &[NodeId]) -> bool {
        !members.is_empty() && members.iter().all(|m| self.servers.contains(m))
    }

    /// Ask every other server for epoch `epoch` or newer (once per retry).
    pub fn ask(&mut self, now: Time, epoch: u64, out: &mut Out<Msg, Timer>) {
        if self
            .asked_at
            .is_some_and(|t| now < t.saturating_add(self.retry))
        {
            return;
        }
        self.asked_at = Some(now);
        for &n in self.servers.iter().filter(|&&n| n != self.me) {
            out.send(Peer::Node(n), Msg::InstallRequest { epoch });
        }
    }

    fn persist_paxos(&self, out: &mut Out<Msg, Timer>) {
        if self.durable {
            let value = postcard::to_allocvec(&self.paxos).expect("encodes");
            out.persist(Record::Meta {
                key: PAXOS_KEY.into(),
                value: Bytes::from(value),
            });
        }
    }

    /// Whether a Paxos message for deciding `epoch` concerns us; if it is
    /// for one already installed here, the sender is told with `Install`.
    fn deciding(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: u64,
        replica: &Replica,
        out: &mut Out<Msg, Timer>,
    ) -> bool {
        if epoch <= self.installed.epoch {
            self.send_install(from, replica, out);
            return false;
        }
        if Some(epoch) != self.next_epoch() {
            self.ask(now, epoch.saturating_sub(1), out);
            return false;
        }
        if Some(epoch) != Some(self.paxos.epoch) {
            self.paxos = Paxos {
                epoch,
                ..Paxos::default()
            };
        }
        self.installed.has(self.me)
    }

    pub fn on_prepare(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        replica: &Replica,
        out: &mut Out<Msg, Timer>,
    ) {
        if !self.deciding(now, from, epoch, replica, out) {
            return;
        }
        // The same ballot again is a retransmission (the promise may have
        // been lost): promise again. Only a lower one is refused.
        if ballot < self.paxos.promised {
            let promised = self.paxos.promised;
            return out.send(
                Peer::Node(from),
                Msg::Refuse {
                    epoch,
                    ballot,
                    promised,
                },
            );
        }
        self.paxos.promised = ballot;
        // A proposer is at work: the stall counts from its last message.
        self.frozen_since = Some(now);
        self.persist_paxos(out);
        let promise = Msg::Promise {
            epoch,
            ballot,
            accepted: self.paxos.accepted.clone(),
            entries: replica.snapshot(),
        };
        out.send(Peer::Node(from), promise);
    }

    /// An accept; `Some(config)` when the injected bug installs it at once.
    pub fn on_accept(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        members: Vec<NodeId>,
        replica: &Replica,
        out: &mut Out<Msg, Timer>,
    ) -> Option<Config> {
        if !self.deciding(now, from, epoch, replica, out) {
            return None;
        }
        if !self.known(&members) {
            return None; // a configuration must name servers of the cluster
        }
        if ballot < self.paxos.promised {
            let promised = self.paxos.promised;
            out.send(
                Peer::Node(from),
                Msg::Refuse {
                    epoch,
                    ballot,
                    promised,
                },
            );
            return None;
        }
        self.paxos.promised = ballot;
        self.paxos.accepted = Some((ballot, members.clone()));
        self.frozen_since = Some(now);
        self.persist_paxos(out);
        out.send(Peer::Node(from), Msg::Accepted { epoch, ballot });
        let early = Config::new(epoch, members);
        (self.bug == Some(InjectedBug::InstallOnAccept) && early.has(self.me)).then_some(early)
    }

    /// Take `config` with the old epoch's state `entries`: true if it is
    /// newer than the one installed here (it is then installed).
    pub fn install(
        &mut self,
        config: Config,
        entries: Entries,
        replica: &mut Replica,
        out: &mut Out<Msg, Timer>,
    ) -> bool {
        replica.merge(entries, out);
        if config.epoch <= self.installed.epoch || !self.known(&config.members) {
            return false;
        }
        if self.durable {
            let value = postcard::to_allocvec(&config).expect("encodes");
            out.persist(Record::Meta {
                key: CONFIG_KEY.into(),
                value: Bytes::from(value),
            });
        }
        self.installed = config;
        self.frozen_since = None;
        true
    }

    fn send_install(&self, to: NodeId, replica: &Replica, out: &mut Out<Msg, Timer>) {
        let config = self.installed.clone();
        let entries = replica.snapshot();
        out.send(Peer::Node(to), Msg::Install { config, entries });
    }

    /// A replica behind epoch `epoch` asks: bring it up to ours.
    pub fn on_install_request(
        &self,
        from: NodeId,
        epoch: u64,
        replica: &Replica,
        out: &mut Out<Msg, Timer>,
    ) {
        if epoch <= self.installed.epoch && self.installed.epoch > 0 {
            self.send_install(from, replica, out);
        }
    }

    /// The records of this module, after a restart.
    pub fn restore(&mut self, key: &str, value: &[u8]) {
        match key {
            CONFIG_KEY => {
                if let Ok(c) = postcard::from_bytes::<Config>(value) {
                    if c.epoch > self.installed.epoch {
                        self.installed = c;
                    }
                }
            }
            PAXOS_KEY => {
                if let Ok(p) = postcard::from_bytes::<Paxos>(value) {
                    self.paxos = p;
                }
            }
            _ => {}
        }
    }
    /// After a restart: a frozen replica counts its stall from now.
    pub fn on_start(&mut self, now: Time) {
        if self.frozen() {
            self.frozen_since = Some(now);
        }
    }
    /// A stalled change is taken over from now on: count again.
    pub fn touch(&mut self, now: Time) {
        if self.frozen() {
            self.frozen_since = Some(now);
        }
    }
}

/// Where a change stands.
#[derive(Clone, Debug)]
enum Step {
    /// Waiting for a promise quorum; the highest accepted value and the
    /// stores merged so far.
    Prepare {
        votes: QuorumTracker,
        best: Option<(Ballot, Vec<NodeId>)>,
        merged: BTreeMap<Bytes, (Tag, Option<Bytes>)>,
    },
    /// Refused by a higher ballot: prepare again at `until`.
    Backoff { until: Time },
    Accept {
        votes: QuorumTracker,
        members: Vec<NodeId>,
        merged: Entries,
    },
    Install {
        votes: QuorumTracker,
        config: Config,
        merged: Entries,
    },
}

/// What a proposer has come to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Going,
    /// The new configuration is installed on a quorum of it.
    Done(Config),
    /// No quorum in time, or rounds used up.
    GaveUp(String),
}

/// One membership change in progress on this server.
#[derive(Clone, Debug)]
pub struct Proposer {
    me: NodeId,
    /// The members this change asked for (the decided ones may differ:
    /// a value accepted earlier wins).
    pub target: Vec<NodeId>,
    pub old: Config,
    ballot: Ballot,
    step: Step,
    retry_at: Time,
    retry: Duration,
    pub deadline: Time,
    /// Started by a frozen replica to finish a stalled change, not asked
    /// for: once any newer configuration is installed, it is done.
    pub takeover: bool,
    bug: Option<InjectedBug>,
}

impl Proposer {
    /// Change `old` to `target`, above ballot `floor` (this replica's own
    /// promise). `None` when epochs or rounds are used up.
    pub fn start(
        me: NodeId,
        (old, target): (Config, Vec<NodeId>),
        floor: Ballot,
        (now, retry, timeout): (Time, Duration, Duration),
        bug: Option<InjectedBug>,
        out: &mut Out<Msg, Timer>,
    ) -> Option<Proposer> {
        old.epoch.checked_add(1)?;
        let ballot = floor.above(me)?;
        let mut p = Proposer {
            me,
            target: Config::new(0, target).members,
            old,
            ballot,
            step: Step::Backoff { until: now },
            retry_at: now,
            retry,
            deadline: now.saturating_add(timeout),
            takeover: false,
            bug,
        };
        p.prepare(now, out);
        Some(p)
    }
    /// The epoch this change decides.
    pub fn epoch(&self) -> u64 {
        self.old.epoch + 1 // checked in `start`
    }

    /// The epoch this change is installing, once decided.
    pub fn installing(&self) -> Option<u64> {
        match &self.step {
            Step::Install { config, .. } => Some(config.epoch),
            _ => None,
        }
    }

    fn prepare(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.step = Step::Prepare {
            votes: self.old.tracker(),
            best: None,
            merged: BTreeMap::new(),
        };
        self.retry_at = now.saturating_add(self.retry);
        let (epoch, ballot) = (self.epoch(), self.ballot);
        for &n in &self.old.members {
            out.send(Peer::Node(n), Msg::Prepare { epoch, ballot });
        }
    }

    fn ours(&self, epoch: u64, ballot: Ballot) -> bool {
        epoch == self.epoch() && ballot == self.ballot
    }

    pub fn on_promise(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        accepted: Option<(Ballot, Vec<NodeId>)>,
        entries: Entries,
        out: &mut Out<Msg, Timer>,
    ) {
        if !self.ours(epoch, ballot) || !self.old.has(from) {
            return;
        }
        let Step::Prepare {
            votes,
            best,
            merged,
        } = &mut self.step
        else {
            return;
        };
        if votes.record(from) == QuorumStatus::Duplicate {
            return;
        }
        let ignore = self.bug == Some(InjectedBug::IgnoreAccepted);
        if let Some((b, m)) = accepted.filter(|_| !ignore) {
            if best.as_ref().is_none_or(|(top, _)| b > *top) {
                *best = Some((b, m));
            }
        }
        // The old epoch's state: the highest tag per key of the quorum.
        // (The injected bug keeps only the first replica's.)
        if self.bug != Some(InjectedBug::TransferFromOne) || votes.count() == 1 {
            for (k, t, v) in entries {
                if merged.get(&k).is_none_or(|(held, _)| t > *held) {
                    merged.insert(k, (t, v));
                }
            }
        }
        if !votes.won() {
            return;
        }
        let members = match best.take() {
            Some((_, m)) => m,
            None => self.target.clone(),
        };
        let merged = std::mem::take(merged)
            .into_iter()
            .map(|(k, (t, v))| (k, t, v))
            .collect();
        self.step = Step::Accept {
            votes: self.old.tracker(),
            members,
            merged,
        };
        self.retry_at = now.saturating_add(self.retry);
        self.send_phase(out);
    }

    pub fn on_accepted(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        out: &mut Out<Msg, Timer>,
    ) {
        if !self.ours(epoch, ballot) || !self.old.has(from) {
            return;
        }
        let next = self.epoch();
        let Step::Accept {
            votes,
            members,
            merged,
        } = &mut self.step
        else {
            return;
        };
        if votes.record(from) != QuorumStatus::Won {
            return;
        }
        let config = Config::new(next, std::mem::take(members));
        let merged = std::mem::take(merged);
        self.step = Step::Install {
            votes: config.tracker(),
            config,
            merged,
        };
        self.retry_at = now.saturating_add(self.retry);
        self.send_phase(out);
    }

    pub fn on_installed(&mut self, from: NodeId, epoch: u64) -> Outcome {
        let Step::Install { votes, config, .. } = &mut self.step else {
            return Outcome::Going;
        };
        if epoch != config.epoch || !config.has(from) {
            return Outcome::Going;
        }
        match votes.record(from) {
            QuorumStatus::Won => Outcome::Done(config.clone()),
            _ => Outcome::Going,
        }
    }

    /// A higher ballot was promised: try again above it after a pause
    /// that differs by server, so two proposers do not duel for ever.
    pub fn on_refuse(
        &mut self,
        now: Time,
        (epoch, ballot): (u64, Ballot),
        promised: Ballot,
    ) -> Outcome {
        if !self.ours(epoch, ballot) || promised <= self.ballot {
            return Outcome::Going;
        }
        let Some(next) = promised.above(self.me) else {
            return Outcome::GaveUp("the ballot rounds of this epoch are used up".into());
        };
        self.ballot = next;
        let pause = self.retry.saturating_mul(self.me.clamp(1, 8));
        self.step = Step::Backoff {
            until: now.saturating_add(pause),
        };
        Outcome::Going
    }

    /// This server promised another proposer's `promised` for our epoch:
    /// let it finish, and try again above it only after `pause` (if it
    /// goes silent). A change already decided goes on installing.
    pub fn defer(&mut self, now: Time, epoch: u64, promised: Ballot, pause: Duration) {
        if epoch != self.epoch() || promised <= self.ballot || self.installing().is_some() {
            return;
        }
        if let Some(next) = promised.above(self.me) {
            self.ballot = next;
            self.step = Step::Backoff {
                until: now.saturating_add(pause),
            };
        }
    }

    /// Send the current phase to those that have not answered.
    fn send_phase(&self, out: &mut Out<Msg, Timer>) {
        let (epoch, ballot) = (self.epoch(), self.ballot);
        match &self.step {
            Step::Prepare { votes, .. } => {
                for &n in self.old.members.iter().filter(|&&n| !votes.has(n)) {
                    out.send(Peer::Node(n), Msg::Prepare { epoch, ballot });
                }
            }
            Step::Accept { votes, members, .. } => {
                for &n in self.old.members.iter().filter(|&&n| !votes.has(n)) {
                    let members = members.clone();
                    out.send(
                        Peer::Node(n),
                        Msg::Accept {
                            epoch,
                            ballot,
                            members,
                        },
                    );
                }
            }
            Step::Install {
                votes,
                config,
                merged,
            } => {
                // The proposer too: it reports the membership it made.
                let mut to: Vec<NodeId> = self.old.members.clone();
                to.extend(&config.members);
                to.push(self.me);
                to.sort_unstable();
                to.dedup();
                for n in to.into_iter().filter(|&n| !votes.has(n)) {
                    let config = config.clone();
                    let entries = merged.clone();
                    out.send(Peer::Node(n), Msg::Install { config, entries });
                }
            }
            Step::Backoff { .. } => {}
        }
    }

    /// The periodic timer: give up past the deadline, prepare again after
    /// a back-off, retransmit the current phase.
    pub fn tick(&mut self, now: Time, out: &mut Out<Msg, Timer>) -> Outcome {
        if now >= self.deadline {
            return Outcome::GaveUp(format!(
                "no quorum of epoch {} answered in time",
                self.old.epoch
            ));
        }
        if let Step::Backoff { until } = self.step {
            if now >= until {
                self.prepare(now, out);
            }
            return Outcome::Going;
        }
        if now >= self.retry_at {
            self.retry_at = now.saturating_add(self.retry);
            self.send_phase(out);
        }
        Outcome::Going
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::contract::Command;

    fn cfg(epoch: u64, m: &[NodeId]) -> Config {
        Config::new(epoch, m.to_vec())
    }
    const TIMES: (Time, Duration, Duration) = (
        Time::ZERO,
        Duration::from_millis(10),
        Duration::from_secs(1),
    );
    fn ballot(round: u64, node: NodeId) -> Ballot {
        Ballot { round, node }
    }

    #[test]
    fn ballots_and_epochs_never_wrap() {
        let last = ballot(u64::MAX, 1);
        assert_eq!(last.above(2), None);
        assert_eq!(ballot(4, 1).above(2), Some(ballot(5, 2)));
        let mut out = O::new();
        let old = cfg(u64::MAX, &[1, 2, 3]);
        assert!(
            Proposer::start(1, (old, vec![1, 2]), Ballot::ZERO, TIMES, None, &mut out).is_none()
        );
        let old = cfg(3, &[1, 2, 3]);
        assert!(Proposer::start(1, (old, vec![1, 2]), last, TIMES, None, &mut out).is_none());
        assert!(out.is_empty());
        // An acceptor at the last epoch decides no next one.
        let mut e = Epochs::new(1, vec![1, 2], cfg(u64::MAX, &[1, 2]), false);
        let r = Replica::new(false);
        e.on_prepare(Time::ZERO, 2, (u64::MAX, ballot(1, 2)), &r, &mut out);
        assert!(!e.frozen());
    }

    /// The three phases against acceptors 2 and 3 of {1,2,3}: a promise
    /// freezes its replica, the promise quorum's stores are merged by
    /// highest tag, and the decided configuration goes to the old and new
    /// members and the proposer; it is done on a quorum of the new.
    #[test]
    fn a_change_prepares_accepts_and_installs() {
        let old = cfg(0, &[1, 2, 3]);
        let mut acc: Vec<(Epochs, Replica)> = (1..=3)
            .map(|i| {
                (
                    Epochs::new(i, vec![1, 2, 3, 4, 5], old.clone(), true),
                    Replica::new(true),
                )
            })
            .collect();
        let mut out = O::new();
        let tag = |ts| Tag { ts, writer: 1 };
        let v = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
        acc[1].1.merge(vec![(key(), tag(2), v("new"))], &mut out);
        acc[2].1.merge(vec![(key(), tag(1), v("old"))], &mut out);
        out.drain();
        let mut p = Proposer::start(
            5,
            (old.clone(), vec![2, 3, 4]),
            Ballot::ZERO,
            TIMES,
            None,
            &mut out,
        )
        .unwrap();
        assert_eq!(p.epoch(), 1);
        let sent = sends(&mut out);
        let b = ballot(1, 5);
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|(_, m)| *m
            == Msg::Prepare {
                epoch: 1,
                ballot: b
            }));
        for i in [1usize, 2] {
            let (e, r) = &mut acc[i];
            assert!(
                e.admit(Time::ZERO, Peer::Node(9), 1, 0, &mut out),
                "serving"
            );
            e.on_prepare(Time::ZERO, 5, (1, b), r, &mut out);
            assert!(e.frozen(), "a promise freezes");
            assert!(!e.admit(Time::ZERO, Peer::Node(9), 1, 0, &mut out));
            assert_eq!(e.held_back, 1);
            let cmds = out.commands();
            assert!(
                matches!(cmds[0], Command::Persist(Record::Meta { .. })),
                "{cmds:?}"
            );
            let Some((
                _,
                Msg::Promise {
                    accepted, entries, ..
                },
            )) = sends(&mut out).pop()
            else {
                panic!("no promise")
            };
            assert_eq!(accepted, None);
            let from = i as NodeId + 1;
            p.on_promise(
                Time::ZERO,
                from,
                (1, b),
                accepted,
                entries.clone(),
                &mut out,
            );
            // A duplicate or a stranger's promise counts once / not at all.
            p.on_promise(Time::ZERO, from, (1, b), None, entries.clone(), &mut out);
            p.on_promise(Time::ZERO, 4, (1, b), None, entries, &mut out);
        }
        let accepts = sends(&mut out);
        assert_eq!(accepts.len(), 3, "{accepts:?}");
        let m = vec![2, 3, 4];
        assert!(accepts.iter().all(|(_, x)| *x
            == Msg::Accept {
                epoch: 1,
                ballot: b,
                members: m.clone()
            }));
        for (i, e) in [(0usize, 1), (1, 2)] {
            let (acceptor, r) = &mut acc[i];
            assert_eq!(
                acceptor.on_accept(Time::ZERO, 5, (1, b), m.clone(), r, &mut out),
                None
            );
            assert_eq!(acceptor.accepted(), Some(&m[..]));
            assert_eq!(
                sends(&mut out),
                vec![(
                    Peer::Node(5),
                    Msg::Accepted {
                        epoch: 1,
                        ballot: b
                    }
                )]
            );
            p.on_accepted(Time::ZERO, e, (1, b), &mut out);
        }
        assert_eq!(p.installing(), Some(1));
        let installs = sends(&mut out);
        let to: Vec<Peer> = installs.iter().map(|(t, _)| *t).collect();
        let want: Vec<Peer> = [1, 2, 3, 4, 5].into_iter().map(Peer::Node).collect();
        assert_eq!(to, want, "old and new members and the proposer");
        let Msg::Install { config, entries } = &installs[0].1 else {
            panic!()
        };
        assert_eq!(config, &cfg(1, &[2, 3, 4]));
        assert_eq!(
            entries,
            &vec![(key(), tag(2), v("new"))],
            "the quorum's highest"
        );
        assert_eq!(p.on_installed(2, 1), Outcome::Going);
        assert_eq!(p.on_installed(1, 1), Outcome::Going, "not a new member");
        assert_eq!(p.on_installed(2, 1), Outcome::Going, "a duplicate");
        assert_eq!(p.on_installed(3, 0), Outcome::Going, "another epoch");
        assert_eq!(p.on_installed(3, 1), Outcome::Done(cfg(1, &[2, 3, 4])));
        // Replica 1 installs it, persists it, and serves nothing any more:
        // an old epoch's query is told where the cluster went.
        let (e, r) = &mut acc[0];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert!(
            !e.install(config.clone(), entries.clone(), r, &mut out),
            "once"
        );
        assert!(!e.frozen());
        assert!(
            !e.admit(Time::ZERO, Peer::Node(9), 7, 1, &mut out),
            "not a member"
        );
        assert!(!e.admit(Time::ZERO, Peer::Node(9), 7, 0, &mut out));
        assert_eq!(e.moved, 1);
        let last = sends(&mut out).pop();
        assert_eq!(
            last,
            Some((
                Peer::Node(9),
                Msg::Moved {
                    op: 7,
                    config: cfg(1, &[2, 3, 4])
                }
            ))
        );
        // Replica 2 serves epoch 1 with the merged state.
        let (e, r) = &mut acc[1];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert!(e.admit(Time::ZERO, Peer::Node(9), 7, 1, &mut out));
        assert_eq!(r.get(b"k").unwrap().0, tag(2));
        let (e, r) = &mut acc[2];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert_eq!(r.get(b"k").unwrap().1, v("new"), "older value replaced");
    }

    /// Paxos: a lower or equal ballot is refused; a later proposer with
    /// another target decides the value accepted earlier, not its own; a
    /// refused proposer backs off, then prepares above the promise; it
    /// gives up at its deadline.
    #[test]
    fn an_accepted_value_wins_over_a_later_proposal() {
        let old = cfg(0, &[1, 2, 3]);
        let mut e = Epochs::new(1, vec![1, 2, 3, 4], old.clone(), false);
        let r = Replica::new(false);
        let mut out = O::new();
        let b1 = ballot(1, 2);
        e.on_prepare(Time::ZERO, 2, (1, b1), &r, &mut out);
        e.on_accept(Time::ZERO, 2, (1, b1), vec![1, 2], &r, &mut out);
        out.drain();
        // The same prepare again (its promise lost): promised again, with
        // the value accepted since (seed 73 of a client-mode sweep stalled
        // when a retransmitted prepare was refused).
        e.on_prepare(Time::ZERO, 2, (1, b1), &r, &mut out);
        let again = sends(&mut out);
        assert!(
            matches!(&again[0].1, Msg::Promise { accepted: Some((b, _)), .. } if *b == b1),
            "{again:?}"
        );
        e.on_prepare(Time::ZERO, 3, (1, ballot(1, 1)), &r, &mut out);
        e.on_accept(Time::ZERO, 3, (1, ballot(0, 9)), vec![3], &r, &mut out);
        let refusals = sends(&mut out);
        assert_eq!(refusals.len(), 2);
        for (to, m) in refusals {
            assert_eq!(to, Peer::Node(3));
            assert!(
                matches!(m, Msg::Refuse { promised, .. } if promised == b1),
                "{m:?}"
            );
        }
        assert_eq!(e.accepted(), Some(&[1, 2][..]), "unchanged");
        let mut p = Proposer::start(3, (old, vec![3, 4]), b1, TIMES, None, &mut out).unwrap();
        out.drain();
        let b2 = ballot(2, 3);
        e.on_prepare(Time::ZERO, 3, (1, b2), &r, &mut out);
        let Msg::Promise {
            accepted, entries, ..
        } = sends(&mut out).remove(0).1
        else {
            panic!()
        };
        assert_eq!(accepted, Some((b1, vec![1, 2])));
        p.on_promise(
            Time::ZERO,
            2,
            (1, b2),
            Some((ballot(0, 7), vec![4])),
            vec![],
            &mut out,
        );
        p.on_promise(Time::ZERO, 1, (1, b2), accepted, entries, &mut out);
        let Msg::Accept { members, .. } = &sends(&mut out)[0].1 else {
            panic!()
        };
        assert_eq!(members, &vec![1, 2], "the highest ballot's value");
        // A stale refusal (not ours, or not higher) changes nothing.
        assert_eq!(
            p.on_refuse(Time::ZERO, (1, b1), ballot(9, 1)),
            Outcome::Going
        );
        assert_eq!(p.on_refuse(Time::ZERO, (1, b2), b1), Outcome::Going);
        assert_eq!(p.installing(), None);
        let b9 = ballot(9, 1);
        assert_eq!(p.on_refuse(Time::ZERO, (1, b2), b9), Outcome::Going);
        assert_eq!(p.tick(Time::from_micros(1), &mut out), Outcome::Going);
        assert!(out.is_empty(), "backing off");
        p.tick(Time::from_micros(100_000), &mut out);
        let again = sends(&mut out);
        assert_eq!(again.len(), 3);
        assert_eq!(
            again[0].1,
            Msg::Prepare {
                epoch: 1,
                ballot: ballot(10, 3)
            }
        );
        // Retransmitted to the silent ones after a retry interval.
        p.tick(Time::from_micros(100_001), &mut out);
        assert!(out.is_empty(), "not before the retry interval");
        p.tick(Time::from_micros(200_000), &mut out);
        assert_eq!(sends(&mut out).len(), 3);
        let gave = p.tick(Time::from_micros(2_000_000), &mut out);
        assert!(matches!(gave, Outcome::GaveUp(_)), "{gave:?}");
        let last = ballot(u64::MAX, 1);
        let gave = p.on_refuse(Time::ZERO, (1, ballot(10, 3)), last);
        assert!(matches!(gave, Outcome::GaveUp(_)), "{gave:?}");
    }

    /// A replica behind asks every other server (once per retry); one
    /// that installed that epoch or a later one answers with its state;
    /// the configuration and the promise survive a restart.
    #[test]
    fn a_replica_behind_catches_up_and_records_survive_a_restart() {
        let mut e = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), false);
        let mut out = O::new();
        assert!(!e.admit(Time::ZERO, Peer::Node(2), 1, 3, &mut out));
        let asked = sends(&mut out);
        let to: Vec<Peer> = asked.iter().map(|(t, _)| *t).collect();
        assert_eq!(to, vec![Peer::Node(2), Peer::Node(3)]);
        assert!(matches!(asked[0].1, Msg::InstallRequest { epoch: 3 }));
        e.admit(Time::ZERO, Peer::Node(2), 1, 3, &mut out);
        assert!(out.is_empty(), "once per retry");
        e.ask(Time::from_micros(100_000), 3, &mut out);
        assert_eq!(sends(&mut out).len(), 2, "again after a retry interval");
        let ahead = Epochs::new(2, vec![1, 2, 3], cfg(3, &[1, 2]), false);
        let r = Replica::new(false);
        ahead.on_install_request(1, 3, &r, &mut out);
        assert!(matches!(
            sends(&mut out)[0],
            (Peer::Node(1), Msg::Install { .. })
        ));
        ahead.on_install_request(1, 4, &r, &mut out);
        assert!(out.is_empty(), "not that far");
        // A Paxos message of an epoch installed already: told with Install.
        let mut ahead = ahead;
        ahead.on_prepare(Time::ZERO, 1, (2, ballot(1, 1)), &r, &mut out);
        assert!(matches!(
            sends(&mut out)[0],
            (Peer::Node(1), Msg::Install { .. })
        ));

        // A configuration naming a server the cluster does not have (or
        // none) is neither accepted nor installed.
        let mut e = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), false);
        let mut r0 = Replica::new(false);
        assert_eq!(
            e.on_accept(Time::ZERO, 2, (1, ballot(1, 2)), vec![1, 70], &r0, &mut out),
            None
        );
        assert!(out.is_empty() && e.accepted().is_none());
        assert!(!e.install(cfg(1, &[2, 99]), vec![], &mut r0, &mut out));
        assert!(!e.install(cfg(1, &[]), vec![], &mut r0, &mut out));
        assert_eq!(e.installed, cfg(0, &[1, 2, 3]));

        let mut d = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), true);
        let mut rr = Replica::new(true);
        assert!(d.install(cfg(2, &[1, 3]), vec![], &mut rr, &mut out));
        d.on_prepare(Time::ZERO, 3, (3, ballot(4, 3)), &rr, &mut out);
        let mut back = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), true);
        for c in out.commands() {
            if let Command::Persist(Record::Meta { key, value }) = c {
                back.restore(key, value);
            }
        }
        assert_eq!(back.installed, cfg(2, &[1, 3]));
        assert!(back.frozen() && back.frozen_since().is_none());
        assert_eq!(back.promised(), ballot(4, 3));
        back.on_start(Time::from_micros(5));
        assert_eq!(back.frozen_since(), Some(Time::from_micros(5)));
        back.touch(Time::from_micros(9));
        assert_eq!(back.frozen_since(), Some(Time::from_micros(9)));
    }
}
