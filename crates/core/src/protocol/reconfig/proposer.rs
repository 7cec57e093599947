//! One membership change in progress on a server: prepare, accept,
//! install (the module doc of `reconfig` has the why).

use super::msg::{Ballot, ChangeBug, ChangeMsg, Config, Entries};
use crate::protocol::contract::Out;
use crate::quorum::{QuorumStatus, QuorumTracker};
use crate::types::{NodeId, Peer, Tag, Time};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

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
    bug: Option<ChangeBug>,
}

impl Proposer {
    /// Change `old` to `target`, above ballot `floor` (this replica's own
    /// promise). `None` when epochs or rounds are used up.
    pub fn start<M: From<ChangeMsg> + Clone, T>(
        me: NodeId,
        (old, target): (Config, Vec<NodeId>),
        floor: Ballot,
        (now, retry, timeout): (Time, Duration, Duration),
        bug: Option<ChangeBug>,
        out: &mut Out<M, T>,
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

    fn prepare<M: From<ChangeMsg> + Clone, T>(&mut self, now: Time, out: &mut Out<M, T>) {
        self.step = Step::Prepare {
            votes: self.old.tracker(),
            best: None,
            merged: BTreeMap::new(),
        };
        self.retry_at = now.saturating_add(self.retry);
        let (epoch, ballot) = (self.epoch(), self.ballot);
        for &n in &self.old.members {
            out.send(Peer::Node(n), ChangeMsg::Prepare { epoch, ballot }.into());
        }
    }

    fn ours(&self, epoch: u64, ballot: Ballot) -> bool {
        epoch == self.epoch() && ballot == self.ballot
    }

    pub fn on_promise<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        accepted: Option<(Ballot, Vec<NodeId>)>,
        entries: Entries,
        out: &mut Out<M, T>,
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
        let ignore = self.bug == Some(ChangeBug::IgnoreAccepted);
        if let Some((b, m)) = accepted.filter(|_| !ignore) {
            if best.as_ref().is_none_or(|(top, _)| b > *top) {
                *best = Some((b, m));
            }
        }
        // The old epoch's state: the highest tag per key of the quorum.
        // (The injected bug keeps only the first replica's.)
        if self.bug != Some(ChangeBug::TransferFromOne) || votes.count() == 1 {
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

    pub fn on_accepted<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        out: &mut Out<M, T>,
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
    fn send_phase<M: From<ChangeMsg> + Clone, T>(&self, out: &mut Out<M, T>) {
        let (epoch, ballot) = (self.epoch(), self.ballot);
        match &self.step {
            Step::Prepare { votes, .. } => {
                for &n in self.old.members.iter().filter(|&&n| !votes.has(n)) {
                    out.send(Peer::Node(n), ChangeMsg::Prepare { epoch, ballot }.into());
                }
            }
            Step::Accept { votes, members, .. } => {
                for &n in self.old.members.iter().filter(|&&n| !votes.has(n)) {
                    let members = members.clone();
                    let accept = ChangeMsg::Accept {
                        epoch,
                        ballot,
                        members,
                    };
                    out.send(Peer::Node(n), accept.into());
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
                    out.send(Peer::Node(n), ChangeMsg::Install { config, entries }.into());
                }
            }
            Step::Backoff { .. } => {}
        }
    }

    /// The periodic timer: give up past the deadline, prepare again after
    /// a back-off, retransmit the current phase.
    pub fn tick<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        out: &mut Out<M, T>,
    ) -> Outcome {
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
