//! Membership change at the leader: a reconfiguration is proposed as a
//! log entry (`members.rs`), committed by a quorum of the old
//! configuration and one of the new (ZooKeeper 3.5's `reconfig`; Shraer
//! et al., USENIX ATC 2012), and in effect from its commit on. Until then
//! every quorum is a majority of each configuration in effect
//! (`ZabNode::configs`). A leader the new configuration leaves out leads
//! until the commit, then steps down and an election among the new
//! members follows. The rules and why they suffice:
//! `docs/src/protocols/zab.md`, "Membership change".

use super::bugs::InjectedBug;
use super::members::{quorum_value_in, Members};
use super::node::{Role, ZabNode, O};
use super::state_machine::Payload;
use super::variant::Variant;
use crate::protocol::contract::{Membership, Record};
use crate::types::{NodeId, Time};
use std::collections::BTreeMap;

impl ZabNode {
    /// Propose the configuration `new` (the full set of voting servers).
    /// Only an established leader takes it, one at a time: refused while
    /// a configuration entry is uncommitted here, for an unknown server,
    /// for the configuration in effect, under a broadcast variant. The
    /// caller (the node layer) authenticates who asks. Returns the index
    /// of the entry; it is in effect once committed (`committed_config`).
    pub fn reconfig(&mut self, now: Time, new: &[NodeId], out: &mut O) -> Result<u64, String> {
        self.now = now;
        let r = self.try_reconfig(new, out);
        if r.is_err() {
            self.counters.reconfigs_refused += 1;
        }
        r
    }

    fn try_reconfig(&mut self, new: &[NodeId], out: &mut O) -> Result<u64, String> {
        if !matches!(&self.role, Role::Leading(l) if l.established) {
            return Err("only the established leader takes a reconfiguration".into());
        }
        if self.bcast.variant != Variant::Zab {
            return Err("the broadcast variants run a fixed configuration".into());
        }
        let m = Members::new(new).ok_or("a configuration is 1 to 64 servers, none 0")?;
        if let Some(n) = (m.ids().iter()).find(|&&n| n != self.id && !self.knows(n)) {
            return Err(format!("server {n} is unknown here"));
        }
        let pending = self.log.members_above(self.commit).next().map(|(p, _)| p);
        let replace = self.has_bug(InjectedBug::ZabReconfigReplacesPending);
        if pending.is_some() && !replace {
            return Err("a reconfiguration is in flight".into());
        }
        if &m == self.committed_config() {
            return Err("that is the configuration in effect".into());
        }
        if let Some(p) = pending {
            // The bug: the newer configuration takes the pending one's place.
            self.log.truncate_from(p);
            out.persist(Record::TruncateFrom { index: p });
        }
        let index = (self.log.last()).checked_add(1).ok_or("the log is full")?;
        // Request id 0 is no client's (they start at 1): nobody waits.
        let p = Payload {
            origin: self.writer,
            rid: 0,
            op: m.to_op(),
        };
        self.propose(p.to_bytes(), out);
        Ok(index)
    }

    /// Who votes as this server sees it (`quorumkv member list`): the
    /// committed configuration, the one in flight if any.
    pub fn membership_view(&self) -> Membership {
        let mut servers: Vec<NodeId> = self.peers().collect();
        servers.push(self.id);
        servers.sort_unstable();
        servers.dedup();
        let pending = self
            .log
            .members_above(self.commit.max(self.log.base()))
            .last();
        Membership {
            node: self.id,
            voters: self.committed_config().ids().to_vec(),
            pending: pending.map(|(at, m)| (at, m.ids().to_vec())),
            servers,
            leader: self.leader(),
            commit: self.commit,
        }
    }

    /// A configuration for the simulator's `reconfig` fault, drawn from
    /// `draw` over the servers `all`: add a server outside the committed
    /// configuration, remove a member (keeping two), replace one, or any
    /// set of two or more. `None` unless we are the established leader
    /// with nothing in flight, or if the draw changes nothing.
    pub fn draw_config(&self, all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
        let leads = matches!(&self.role, Role::Leading(l) if l.established);
        let pending = self.log.members_above(self.commit).next().is_some();
        if !leads || (pending && !self.has_bug(InjectedBug::ZabReconfigReplacesPending)) {
            return None;
        }
        let cur = self.committed_config().ids().to_vec();
        let new = crate::protocol::contract::draw_members(&cur, all, draw)?;
        let m = Members::new(&new)?;
        (m != *self.committed_config()).then_some(new)
    }

    /// What each server holds of our log as the leader counts it for
    /// commits: a synchronised follower its ACKs, us our durable log.
    /// `None` unless we lead an established epoch.
    pub(super) fn commit_acks(&self) -> Option<BTreeMap<NodeId, u64>> {
        let Role::Leading(l) = &self.role else {
            return None;
        };
        if !l.established {
            return None;
        }
        let last = self.log.last();
        let early = self.has_bug(InjectedBug::ZabLearnerVotesBeforeSync);
        let committed = self.committed_config();
        let mut acks: BTreeMap<NodeId, u64> = (l.fols.iter())
            .filter_map(|(&n, f)| {
                if f.counts() {
                    Some((n, f.acked.min(last)))
                } else if early && !committed.contains(n) {
                    // The bug: a joiner counts as holding our whole log
                    // before its ACKNEWLEADER said it holds our history.
                    Some((n, last))
                } else {
                    None
                }
            })
            .collect();
        acks.insert(self.id, self.logged.min(last));
        Some(acks)
    }

    /// The highest index a quorum of every configuration in effect holds
    /// (L2 of broadcast with the joint rule).
    pub(super) fn commit_point(&self, acks: &BTreeMap<NodeId, u64>) -> Option<u64> {
        if self.has_bug(InjectedBug::ZabReconfigOldQuorumOnly) {
            // The bug: the committed configuration's quorum alone decides,
            // a pending reconfiguration and what follows it included.
            return quorum_value_in(&[self.committed_config()], acks);
        }
        self.quorum_value(acks)
    }

    /// The rounds a quorum of every configuration in effect answered (us
    /// included) are those below this bound, if we lead an established
    /// epoch.
    pub(super) fn confirmed_below(&self) -> Option<u64> {
        let Role::Leading(l) = &self.role else {
            return None;
        };
        if !l.established {
            return None;
        }
        let mut rounds: BTreeMap<NodeId, u64> = (l.fols.iter())
            .filter(|(_, f)| f.counts())
            .map(|(&n, f)| (n, f.ponged))
            .collect();
        rounds.insert(self.id, u64::MAX);
        Some(
            self.quorum_value(&rounds)
                .map_or(0, |r| r.saturating_add(1)),
        )
    }

    /// A leader that a committed configuration leaves out steps down (its
    /// COMMIT went first): the new members elect one of themselves, and
    /// this server stays a learner (`own_vote` is `None` for it).
    pub(super) fn leave_if_removed(&mut self, out: &mut O) {
        if matches!(self.role, Role::Leading(_)) && !self.voter() {
            self.look(out);
        }
    }
}
