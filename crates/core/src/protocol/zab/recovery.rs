//! Recovery of a server that lost its state (memory mode), in the manner
//! of Viewstamped Replication's recovery (Liskov and Cowling, 2012, §4.3):
//! before it takes part in anything, a restarted empty server learns the
//! highest epoch promised (accepted) by a quorum of peers that did not
//! lose theirs, and from then on refuses every epoch below it.
//!
//! Why (the simulator's seed 2138): Zab's safety argument (seed 003 lines
//! 683-691, and the discovery phase, lines 637-648) rests on each server's
//! promise being durable: once it acknowledged NEWEPOCH(e) it takes no
//! history and no proposal from a leader of an epoch below e. A server
//! that restarts empty has forgotten that promise, and the proposals it
//! ACKed. Counting it in no quorum until a NEWLEADER synchronised it is
//! not enough: a *stale* candidate (one that finished discovery for epoch
//! e before a newer epoch e' > e was established) can still send it
//! NEWLEADER(e), and its ACKNEWLEADER completes e's quorum. The server had
//! ACKed (and so let commit) proposals of e' in its previous life; the
//! stale leader's history lacks them, and it serves the older values.
//!
//! The rule, and why it is enough: every epoch the previous life promised
//! was first chosen by a candidate that persisted it (as its own accepted
//! epoch) and became part of a quorum's promises only through servers
//! that keep their state. Asking a quorum `M` of peers that are not
//! recovering, after the crash: the candidate of the previous life's
//! highest epoch `E_old`, and the servers whose promises it counted with
//! ours, have `E_old` (or more) as their accepted epoch by then, or have
//! not promised it yet — and the leader then no longer counts our old
//! promise: the crash reset our connections, and a leader forgets what a
//! follower told it when the link goes `Down` (`link_down`; a leader that
//! receives our `Recover` also forgets it). With N = 3, `M` is both other
//! servers and holds `E_old`'s candidate, so the learned floor is at least
//! `E_old`; with N = 5 the argument needs the `Down` to reach the old
//! leader before the answer of a member of `M` that promised `E_old` only
//! after answering us (the simulator guarantees it: a restart resets the
//! connections first). Crash vectors (Michael, Ports, Sharma, Szekeres,
//! DISC 2017) would remove the assumption: a peer that answered RECOVER
//! with an epoch below one it later promises names the recovering server's
//! new life in that ACKEPOCH, and the leader drops the older lives' votes
//! first. Not built: it needs lives that are ordered (the node driver
//! draws a random incarnation per start) and fences that survive their
//! holder losing its own state.
//!
//! The epochs of the previous life are then all at most the floor, the
//! new life accepts no NEWEPOCH below it (`accepted` is set to the floor
//! and the candidate that holds it), its FOLLOWERINFO and ACKEPOCH count in
//! no discovery quorum (its empty history would hide proposals it ACKed),
//! and only a NEWLEADER of an epoch at least the floor makes it a full
//! member again: the leader of such an epoch holds every proposal the old
//! life could have helped commit (Zab's own argument, the epochs of the
//! two lives being disjoint or, for the floor itself, from one leader).
//!
//! Consequence: recovery needs a quorum of servers that kept their state.
//! If a majority lose it at once, no one ever leads again (they wait), the
//! same as the `lamport` protocol's recovery.

use super::bugs::InjectedBug;
use super::msg::Msg;
use super::node::{ZabNode, O};
use super::roles::Recovery;
use crate::types::{NodeId, Peer};

impl ZabNode {
    /// Still learning the epoch floor: no vote, no following, no leading.
    pub(super) fn learning(&self) -> bool {
        self.recovery.is_some()
    }

    /// A server that lost its state starts by learning its floor (unless
    /// the injected bug skips it, as the code once did).
    pub(super) fn start_recovery(&mut self) {
        if !self.has_bug(InjectedBug::RecoverWithoutEpoch) {
            self.recovery = Some(Recovery::default());
        }
    }

    /// Ask every peer that has not answered yet (on start and each tick).
    pub(super) fn ask_recovery(&self, out: &mut O) {
        let Some(r) = &self.recovery else {
            return;
        };
        let life = self.writer;
        for p in self.peers().filter(|p| !r.answers.contains_key(p)) {
            out.send(Peer::Node(p), Msg::Recover { life });
        }
    }

    /// A peer restarted empty and asks for our accepted epoch. Anything it
    /// told us in its previous life is void: if we lead, it leaves our
    /// quorums (as on `Down`); if we follow it, it no longer leads.
    pub(super) fn on_recover(&mut self, from: NodeId, life: u64, out: &mut O) {
        self.link_down(from, out);
        let msg = Msg::RecoverOk {
            life,
            accepted: self.accepted.0,
            promised: self.accepted.1,
            recovering: self.recovering,
        };
        out.send(Peer::Node(from), msg);
    }

    /// An answer: once a quorum of peers that kept their state answered,
    /// our floor is the highest epoch they promised, and we accept no
    /// NEWEPOCH below it (nor the floor itself from another leader).
    pub(super) fn on_recover_ok(
        &mut self,
        from: NodeId,
        life: u64,
        promise: (u64, NodeId),
        recovering: bool,
        out: &mut O,
    ) {
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        if life != self.writer || recovering {
            return;
        }
        r.answers.insert(from, promise);
        // A quorum of voters (an empty log: the initial configuration);
        // spares' answers do not count.
        let Some(r) = self.recovery.as_ref() else {
            return;
        };
        if !self.is_quorum(|n| r.answers.contains_key(&n)) {
            return;
        }
        let r = self.recovery.as_mut().expect("recovering");
        // The highest epoch, and its leader: preferably as the leader
        // itself reported it (a losing candidate's follower may name it).
        let (epoch, leader) = (r.answers.iter())
            .map(|(&by, &(e, l))| (e, l == by, l))
            .max()
            .map_or((0, 0), |(e, _, l)| (e, l));
        self.recovery = None;
        self.counters.recoveries += 1;
        if epoch > self.accepted.0 {
            self.persist_accepted(epoch, leader, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::node::Config;
    use super::super::testing;
    use super::*;
    use crate::protocol::contract::Protocol;
    use crate::types::Time;

    fn recovering(id: NodeId) -> ZabNode {
        ZabNode::new(
            id,
            &[1, 2, 3, 4, 5],
            7 << 32 | u64::from(id),
            Config::default(),
        )
        .recovering()
    }

    fn sent(out: &mut O) -> Vec<(NodeId, Msg)> {
        testing::sent(&out.drain().collect::<Vec<_>>())
    }

    #[test]
    fn the_floor_is_the_highest_epoch_of_a_quorum_that_kept_its_state() {
        let mut n = recovering(1);
        let mut out = O::new();
        n.on_start(Time::ZERO, &mut out);
        let asked: Vec<NodeId> = (sent(&mut out).into_iter())
            .filter(|(_, m)| matches!(m, Msg::Recover { .. }))
            .map(|(p, _)| p)
            .collect();
        assert_eq!(asked, vec![2, 3, 4, 5]);
        let life = n.writer;
        // A stale answer (another life) and a recovering peer do not count.
        n.on_recover_ok(2, life + 1, (9, 2), false, &mut out);
        n.on_recover_ok(3, life, (8, 3), true, &mut out);
        n.on_recover_ok(4, life, (5, 2), false, &mut out);
        n.on_recover_ok(5, life, (6, 5), false, &mut out);
        assert!(n.learning(), "two of four peers are not a quorum of five");
        // Learning: it follows no one even if a leader calls.
        let lead = Msg::Notify {
            round: 1,
            vote: None,
            state: super::super::PeerState::Leading,
            recovering: false,
            led: 0,
        };
        n.on_msg(Time::ZERO, Peer::Node(4), lead, &mut out);
        assert_eq!(n.role(), "recovering");
        assert!(sent(&mut out)
            .iter()
            .all(|(_, m)| !matches!(m, Msg::FollowerInfo { .. })));
        n.on_recover_ok(2, life, (6, 5), false, &mut out);
        assert!(!n.learning() && n.is_recovering());
        assert_eq!(n.epochs(), (6, 0), "the floor, promised to its leader");
        // Epochs below the floor are refused; the floor from its own
        // leader is taken.
        assert!(n.accepts_epoch(4, 7) && n.accepts_epoch(5, 6));
        assert!(!n.accepts_epoch(4, 5) && !n.accepts_epoch(2, 6));
    }

    /// Two peers name different leaders for the highest epoch (one
    /// promised it to a losing candidate): the floor names the leader as
    /// it reported itself, so the winner is accepted at that epoch.
    #[test]
    fn the_floor_names_the_leader_that_reported_itself() {
        let mut n = ZabNode::new(1, &[1, 2, 3], 1 << 32 | 1, Config::default()).recovering();
        let mut out = O::new();
        let life = n.writer;
        n.on_recover_ok(3, life, (6, 2), false, &mut out);
        n.on_recover_ok(2, life, (6, 2), false, &mut out);
        assert_eq!(n.epochs(), (6, 0));
        assert!(n.accepts_epoch(2, 6) && !n.accepts_epoch(3, 6));
        let mut n = ZabNode::new(1, &[1, 2, 3], 1 << 32 | 1, Config::default()).recovering();
        n.on_recover_ok(2, life, (6, 3), false, &mut out);
        n.on_recover_ok(3, life, (6, 3), false, &mut out);
        assert!(n.accepts_epoch(3, 6) && !n.accepts_epoch(2, 6));
        let mut n = ZabNode::new(1, &[1, 2, 3], 1 << 32 | 1, Config::default()).recovering();
        n.on_recover_ok(2, life, (6, 3), false, &mut out);
        n.on_recover_ok(3, life, (6, 3), false, &mut out);
        n.on_recover_ok(2, life, (6, 2), false, &mut out);
        assert!(n.accepts_epoch(3, 6), "learned once, from the quorum");
        let mut n = ZabNode::new(1, &[1, 2, 3, 4, 5], 1 << 32 | 1, Config::default()).recovering();
        for (by, leader) in [(2, 4), (3, 3), (4, 3)] {
            n.on_recover_ok(by, life, (6, leader), false, &mut out);
        }
        assert!(n.accepts_epoch(3, 6) && !n.accepts_epoch(4, 6));
        assert_eq!(n.counters.recoveries, 1);
    }

    /// Seed 2138 in miniature: n1 promised epoch 5 to n2 (and ACKed its
    /// proposals), lost its state, and n3 still waits as the candidate of
    /// epoch 4. Having learned its floor, n1 tells n3 (which then starts
    /// over) and refuses NEWEPOCH 4; with the old code it accepted it and
    /// its ACKNEWLEADER made it a full member of the stale epoch.
    #[test]
    fn a_stale_candidate_cannot_recruit_a_server_that_lost_its_state() {
        for bug in [None, Some(InjectedBug::RecoverWithoutEpoch)] {
            let mut n = ZabNode::new(1, &[1, 2, 3], 1 << 32 | 1, Config::default())
                .with_bug(bug)
                .recovering();
            let mut out = O::new();
            n.on_start(Time::ZERO, &mut out);
            let life = n.writer;
            n.on_recover_ok(2, life, (5, 2), false, &mut out);
            n.on_recover_ok(3, life, (4, 3), false, &mut out);
            sent(&mut out);
            let stale = Msg::Notify {
                round: 1,
                vote: Some(super::super::Vote {
                    leader: 3,
                    cur_epoch: 3,
                    last: Default::default(),
                }),
                state: super::super::PeerState::Leading,
                recovering: false,
                led: 0,
            };
            n.on_msg(Time::ZERO, Peer::Node(3), stale, &mut out);
            let info = sent(&mut out);
            n.on_msg(
                Time::ZERO,
                Peer::Node(3),
                Msg::NewEpoch { epoch: 4 },
                &mut out,
            );
            let sync = Msg::NewLeader {
                epoch: 4,
                sync: Default::default(),
            };
            n.on_msg(Time::ZERO, Peer::Node(3), sync, &mut out);
            let answers = sent(&mut out);
            let acked = answers
                .iter()
                .any(|(_, m)| matches!(m, Msg::AckNewLeader { epoch: 4, .. }));
            if bug.is_none() {
                let floor = Msg::FollowerInfo {
                    accepted: 5,
                    promised: 2,
                    recovering: true,
                };
                assert_eq!(info, vec![(3, floor)], "names the floor to n3");
                assert!(!acked && n.is_recovering() && n.epochs() == (5, 0));
            } else {
                assert!(acked && !n.is_recovering() && n.epochs() == (4, 4));
            }
        }
    }

    /// What the previous life told us is void: a leader drops it from its
    /// quorums (its ACKEPOCH, ACKs), a follower of it looks again.
    #[test]
    fn an_answer_voids_what_the_previous_life_said() {
        use super::super::node::Role;
        use super::super::roles::{Fol, Leading, Stage};
        let mut n = ZabNode::new(2, &[1, 2, 3], 2, Config::default());
        let mut l = Leading::new(Time::ZERO);
        let fol = Fol {
            stage: Stage::Acked(Default::default()),
            recovering: false,
            acked: 0,
            ponged: 0,
            heard: Time::ZERO,
        };
        l.fols.insert(1, fol.clone());
        l.fols.insert(3, fol);
        n.role = Role::Leading(l);
        let mut out = O::new();
        n.on_recover(1, 99, &mut out);
        let Role::Leading(l) = &n.role else {
            panic!("still leads");
        };
        assert_eq!(l.fols.keys().copied().collect::<Vec<_>>(), vec![3]);
        let ok = Msg::RecoverOk {
            life: 99,
            accepted: 0,
            promised: 0,
            recovering: false,
        };
        assert_eq!(sent(&mut out), vec![(1, ok)]);
        n.follow(1, &mut out);
        assert_eq!(n.role(), "follower");
        n.on_recover(1, 100, &mut out);
        assert_eq!(n.role(), "looking");
    }

    #[test]
    fn with_the_bug_a_lost_server_skips_learning() {
        let n = ZabNode::new(1, &[1, 2, 3], 1, Config::default())
            .with_bug(Some(InjectedBug::RecoverWithoutEpoch))
            .recovering();
        assert!(n.is_recovering() && !n.learning());
    }
}
