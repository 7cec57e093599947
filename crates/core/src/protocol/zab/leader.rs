//! The leader's side: discovery (FOLLOWERINFO → NEWEPOCH → ACKEPOCH),
//! synchronisation (NEWLEADER with DIFF / TRUNC / SNAP → ACKNEWLEADER →
//! COMMIT) and broadcast (PROPOSAL → ACK → COMMIT in zxid order), seed 003
//! lines 637-668; heartbeats and SC2 (no quorum: step down).

use super::bugs::InjectedBug;
use super::msg::{Msg, Summary, SyncData};
use super::node::{Role, ZabNode, O};
use super::roles::{Fol, Leading, Stage};
use super::state_machine::{encode_snapshot, Payload, StateMachine};
use crate::types::{NodeId, Peer};
use bytes::Bytes;

impl ZabNode {
    pub(super) fn leading(&mut self) -> Option<&mut Leading> {
        match &mut self.role {
            Role::Leading(l) => Some(l),
            _ => None,
        }
    }

    fn fresh_fol(&self, stage: Stage, recovering: bool) -> Fol {
        Fol {
            stage,
            recovering,
            acked: 0,
            ponged: 0,
            heard: self.now,
        }
    }

    pub(super) fn on_follower_info(
        &mut self,
        from: NodeId,
        (accepted, promised): (u64, NodeId),
        recovering: bool,
        out: &mut O,
    ) {
        let me = self.id;
        let reuse = self.has_bug(InjectedBug::ReuseEpoch);
        let Some(l) = self.leading() else {
            // Not leading: tell it who we follow, or that we look.
            out.send(Peer::Node(from), self.notification());
            return;
        };
        if l.epoch == 0 {
            let f = Stage::Info { accepted };
            let fol = self.fresh_fol(f, recovering);
            self.leading().expect("leading").fols.insert(from, fol);
            return self.check_discovery(out);
        }
        if accepted > l.epoch || (accepted == l.epoch && promised != me && !reuse) {
            // Someone promised a newer epoch, or ours to another candidate
            // (it can never join ours): start over with a new epoch.
            return self.look(out);
        }
        let epoch = l.epoch;
        if l.fols
            .get(&from)
            .is_some_and(|f| f.stage == Stage::EpochSent)
        {
            // A repeat: our NEWEPOCH may have died with a connection.
            out.send(Peer::Node(from), Msg::NewEpoch { epoch });
            return;
        }
        let fol = self.fresh_fol(Stage::EpochSent, recovering);
        self.leading().expect("leading").fols.insert(from, fol);
        out.send(Peer::Node(from), Msg::NewEpoch { epoch });
    }

    /// With FOLLOWERINFO from a quorum (not recovering), choose an epoch
    /// above every epoch they promised (L1 of discovery) and propose it.
    pub(super) fn check_discovery(&mut self, out: &mut O) {
        let (me, own) = (self.id, self.accepted.0);
        let reuse = self.has_bug(InjectedBug::ReuseEpoch);
        let Role::Leading(l) = &self.role else {
            unreachable!("leading")
        };
        if l.epoch != 0 {
            return;
        }
        let info = |n: NodeId| {
            (l.fols.get(&n)).is_some_and(|f| !f.recovering && matches!(f.stage, Stage::Info { .. }))
        };
        if !self.is_quorum(|n| n == me || info(n)) {
            return;
        }
        let l = self.leading().expect("leading");
        let max = (l.fols.values())
            .filter_map(|f| match f.stage {
                Stage::Info { accepted } => Some(accepted),
                _ => None,
            })
            .fold(own, u64::max);
        // Checked (issue 31): with every message's epoch below
        // `COUNTER_LIMIT` this cannot fail in a run, but no epoch would
        // follow `u64::MAX`; wrapping to 0 would re-open epoch 0. Give the
        // leadership up instead.
        let next = if reuse {
            Some(max.max(1))
        } else {
            max.checked_add(1)
        };
        let Some(epoch) = next else {
            self.counters.epochs_exhausted += 1;
            return self.look(out);
        };
        let l = self.leading().expect("leading");
        l.epoch = epoch;
        let ids: Vec<NodeId> = l.fols.keys().copied().collect();
        for f in l.fols.values_mut() {
            f.stage = Stage::EpochSent;
        }
        let me = self.id;
        self.persist_accepted(epoch, me, out);
        for n in ids {
            out.send(Peer::Node(n), Msg::NewEpoch { epoch });
        }
        self.check_sync(out);
    }

    pub(super) fn on_ack_epoch(
        &mut self,
        from: NodeId,
        epoch: u64,
        cur_epoch: u64,
        summary: Summary,
        recovering: bool,
        out: &mut O,
    ) {
        let mine = (self.current_epoch, self.log.last_zxid());
        let now = self.now;
        // A learner (in no configuration in effect here) holds nothing a
        // quorum of ours committed that a voter of ours lacks: its newer
        // suffix is uncommitted, and it is synchronised to our history.
        let stale_ok = self.has_bug(InjectedBug::StaleLogLeader)
            || !self.configs().iter().any(|m| m.contains(from));
        let Some(l) = self.leading() else {
            return;
        };
        let Some(f) = l.fols.get_mut(&from) else {
            return;
        };
        if epoch != l.epoch || f.stage != Stage::EpochSent {
            return;
        }
        f.recovering = recovering;
        f.heard = now;
        if !l.syncing && !recovering && !stale_ok && (cur_epoch, summary.last()) > mine {
            // A follower's history is newer than ours: it must lead, not
            // us (the leader's history must hold every committed proposal).
            return self.look(out);
        }
        f.stage = Stage::Acked(summary);
        if l.syncing {
            return self.send_new_leader(from, out);
        }
        self.check_sync(out);
    }

    /// With ACKEPOCH from a quorum: our history is the epoch's initial
    /// history; accept it ourselves and send it (NEWLEADER).
    fn check_sync(&mut self, out: &mut O) {
        let me = self.id;
        let Role::Leading(l) = &self.role else {
            unreachable!("leading")
        };
        if l.syncing || l.epoch == 0 {
            return;
        }
        let acked = |n: NodeId| {
            (l.fols.get(&n)).is_some_and(|f| !f.recovering && matches!(f.stage, Stage::Acked(_)))
        };
        if !self.is_quorum(|n| n == me || acked(n)) {
            return;
        }
        let l = self.leading().expect("leading");
        l.syncing = true;
        let epoch = l.epoch;
        let ids: Vec<NodeId> = (l.fols.iter())
            .filter(|(_, f)| matches!(f.stage, Stage::Acked(_)))
            .map(|(&n, _)| n)
            .collect();
        self.persist_current(epoch, out);
        // Our own "ACKNEWLEADER": the history is on our disk.
        self.when_logged(out);
        for n in ids {
            self.send_new_leader(n, out);
        }
        self.check_established(out);
    }

    /// The synchronisation a follower needs (DIFF, TRUNC + DIFF, or SNAP).
    pub(super) fn sync_for(&mut self, s: &Summary) -> SyncData {
        let last = s.last().counter;
        let k = if self.has_bug(InjectedBug::DiffFromFollowerLast) && last <= self.log.last() {
            last // The bug: indexes compared, not zxids: "a prefix of ours".
        } else {
            self.log.match_point(s)
        };
        let trunc = (last > k).then_some(k + 1);
        if k < self.log.base() || k < s.base {
            self.counters.sync_snap += 1;
            let runs = self.log.runs_upto(self.applied);
            let members = self.log.members_at(self.applied);
            let data = encode_snapshot(&runs, &self.sm.snapshot(), members);
            return SyncData {
                snap: Some((self.applied, data)),
                trunc,
                entries: self.log.entries_from(self.applied + 1),
            };
        }
        if trunc.is_some() {
            self.counters.sync_trunc += 1;
        } else {
            self.counters.sync_diff += 1;
        }
        SyncData {
            snap: None,
            trunc,
            entries: self.log.entries_from(k + 1),
        }
    }

    fn send_new_leader(&mut self, to: NodeId, out: &mut O) {
        let l = self.leading().expect("leading");
        let epoch = l.epoch;
        let Some(f) = l.fols.get_mut(&to) else {
            return;
        };
        let Stage::Acked(summary) = std::mem::replace(&mut f.stage, Stage::Synced { acked: false })
        else {
            unreachable!("NEWLEADER goes to followers that acknowledged the epoch");
        };
        f.acked = 0;
        let sync = self.sync_for(&summary);
        out.send(Peer::Node(to), Msg::NewLeader { epoch, sync });
    }

    pub(super) fn on_ack_new_leader(&mut self, from: NodeId, epoch: u64, last: u64, out: &mut O) {
        let now = self.now;
        let Some(l) = self.leading() else {
            return;
        };
        let Some(f) = l.fols.get_mut(&from) else {
            return;
        };
        if epoch != l.epoch || f.stage != (Stage::Synced { acked: false }) {
            return;
        }
        f.stage = Stage::Synced { acked: true };
        f.recovering = false;
        f.acked = last;
        f.heard = now;
        if l.established {
            let index = self.commit;
            out.send(Peer::Node(from), Msg::Commit { epoch, index });
            return self.advance_commit(out);
        }
        self.check_established(out);
    }

    /// A quorum holds our history, us included once it is on our disk
    /// (`Msg::Logged`): commit it (L2 of sync) and broadcast. Only then do
    /// we serve: a read index below the history's end could miss a write
    /// committed in an earlier epoch.
    pub(super) fn check_established(&mut self, out: &mut O) {
        let (me, own) = (self.id, self.logged >= self.log.last());
        let Role::Leading(l) = &self.role else {
            unreachable!("leading")
        };
        if l.established || !l.syncing {
            return;
        }
        let holds = |n: NodeId| (n == me && own) || l.fols.get(&n).is_some_and(|f| f.counts());
        if !self.is_quorum(holds) {
            return;
        }
        let l = self.leading().expect("leading");
        l.established = true;
        self.mark_led(out);
        let last = self.log.last();
        self.commit_to(last, out);
        if self.has_bug(InjectedBug::ZnodeSeqReuse) {
            self.sm.tree.restart_seq_counters();
        }
        self.flush_waiting(out);
    }

    /// Commit up to `index` (COMMIT to every synchronised follower) and
    /// deliver. A quorum, us included, has it on disk (our share counted
    /// from `Msg::Logged`), so the COMMIT need not wait for our later
    /// records (`send_now`; FIFO still keeps it behind a held NEWLEADER).
    pub(super) fn commit_to(&mut self, index: u64, out: &mut O) {
        let l = self.leading().expect("leading");
        let epoch = l.epoch;
        let to: Vec<NodeId> = l.synced().collect();
        self.commit = self.commit.max(index);
        let index = self.commit;
        for n in to {
            out.send_now(Peer::Node(n), Msg::Commit { epoch, index });
        }
        self.deliver(out);
        self.leave_if_removed(out);
    }

    /// L1 of broadcast: log the proposal and send it to every follower at
    /// once, in parallel with our own disk write (ZooKeeper's leader does
    /// the same): a proposal is no promise, and our own vote for it counts
    /// only once the driver says it is durable (`Msg::Logged`). Many
    /// proposals made while a sync is in flight share the next one (the
    /// driver's group commit), at the leader and at each follower.
    pub(super) fn propose(&mut self, data: Bytes, out: &mut O) {
        let l = self.leading().expect("only a leader proposes");
        let epoch = l.epoch;
        let to: Vec<NodeId> = l.synced().collect();
        let index = self.log.last() + 1;
        let data = super::zentry::stamp(data, self.now);
        self.persist_entry(index, epoch, data.clone(), out);
        self.counters.proposals += 1;
        self.on_proposed(to.len());
        let hold = self.proposal_waits();
        let entry = super::msg::LogEntry { index, epoch, data };
        for n in to {
            let msg = Msg::Proposal {
                epoch,
                entry: entry.clone(),
            };
            if hold {
                out.send(Peer::Node(n), msg);
            } else {
                out.send_now(Peer::Node(n), msg);
            }
        }
        self.when_logged(out);
        self.advance_commit(out);
    }

    pub(super) fn on_ack(&mut self, from: NodeId, epoch: u64, index: u64, out: &mut O) {
        let now = self.now;
        let Some(l) = self.leading() else {
            return;
        };
        match l.fols.get_mut(&from) {
            Some(f) if epoch == l.epoch && f.counts() => {
                f.acked = f.acked.max(index);
                f.heard = now;
            }
            _ => return,
        }
        self.advance_commit(out);
    }

    /// L2: commit the highest index a quorum logged durably (us included,
    /// up to what the driver reported on our disk: `Msg::Logged`), in zxid
    /// order.
    pub(super) fn advance_commit(&mut self, out: &mut O) {
        let Some(acks) = self.commit_acks() else {
            return;
        };
        let index = if self.has_bug(InjectedBug::DeliverBeforeQuorum) {
            self.log.last()
        } else {
            match self.commit_point(&acks) {
                Some(i) => i,
                None => return,
            }
        };
        if index > self.commit {
            let holds = |n: NodeId| acks.get(&n).is_some_and(|&a| a >= index);
            self.invariant(
                self.is_quorum(holds),
                "committed without a quorum logging it",
            );
            self.broadcast_commit(index, out);
        }
    }

    pub(super) fn on_pong(&mut self, from: NodeId, epoch: u64, round: u64, last: u64, out: &mut O) {
        let now = self.now;
        let Some(l) = self.leading() else {
            return;
        };
        match l.fols.get_mut(&from) {
            Some(f) if epoch == l.epoch && f.counts() => {
                f.heard = now;
                f.ponged = f.ponged.max(round);
                f.acked = f.acked.max(last);
            }
            Some(_) => return,
            None => return self.not_in_broadcast(from, out),
        }
        self.advance_commit(out);
        self.check_read_rounds(out);
    }

    pub(super) fn on_forward(
        &mut self,
        from: NodeId,
        epoch: u64,
        origin: u64,
        rid: u64,
        op: Bytes,
        out: &mut O,
    ) {
        let Some(l) = self.leading() else {
            out.send(Peer::Node(from), Msg::Dropped { rid });
            return;
        };
        // A configuration op comes only from `reconfig` at the leader,
        // which checks it (one at a time, known servers): a follower never
        // forwards one (it encodes its clients' requests with their own
        // tags), so one arriving here is refused, not proposed.
        if op.first() == Some(&super::members::CONFIG_TAG) {
            return;
        }
        let ok = l.established && epoch == l.epoch && l.fols.get(&from).is_some_and(|f| f.counts());
        if ok {
            let p = Payload { origin, rid, op };
            self.propose(p.to_bytes(), out);
        } else {
            // Not proposed, and never will be: the follower may send it
            // again once it is back in our broadcast.
            out.send(Peer::Node(from), Msg::Dropped { rid });
            self.not_in_broadcast(from, out);
        }
    }

    /// A server talks to us as to its leader but is not in our broadcast
    /// (it missed our step-down or a new epoch): tell it who we are.
    pub(super) fn not_in_broadcast(&mut self, from: NodeId, out: &mut O) {
        out.send(Peer::Node(from), self.notification());
    }

    /// Send a heartbeat (and read-index) round to every follower.
    pub(super) fn ping(&mut self, out: &mut O) -> u64 {
        let (commit, last) = (self.commit, self.log.last());
        let l = self.leading().expect("leading");
        l.ping_round += 1;
        let (epoch, round) = (l.epoch, l.ping_round);
        let to: Vec<NodeId> = l.synced().collect();
        for n in to {
            let msg = Msg::Ping {
                epoch,
                round,
                commit,
                last,
            };
            // `commit` is on a quorum's disks; `last` only lets the follower
            // see a missing proposal (they all went before, FIFO).
            out.send_now(Peer::Node(n), msg);
        }
        round
    }

    /// Not established in time, or no quorum heard lately (SC2): step down.
    pub(super) fn leader_tick(&mut self, out: &mut O) {
        let (now, me) = (self.now, self.id);
        let (init, sync) = (self.cfg.init_limit, self.cfg.sync_limit);
        let Role::Leading(l) = &self.role else {
            unreachable!("leading")
        };
        if !l.established {
            if now > l.since.saturating_add(init) {
                return self.look(out);
            }
            return;
        }
        let alive = |n: NodeId| {
            n == me
                || (l.fols.get(&n))
                    .is_some_and(|f| f.counts() && now <= f.heard.saturating_add(sync))
        };
        if !self.is_quorum(alive) {
            return self.look(out);
        }
        let l = self.leading().expect("leading");
        // Announce ourselves to the servers outside our broadcast: one that
        // follows a newer epoch answers, and we step down at once.
        let inside: Vec<NodeId> = (l.fols.iter())
            .filter(|(_, f)| f.counts())
            .map(|(&n, _)| n)
            .collect();
        let outside: Vec<NodeId> = self.peers().filter(|n| !inside.contains(n)).collect();
        let hello = self.notification();
        for n in outside {
            out.send(Peer::Node(n), hello.clone());
        }
        self.ping(out);
    }

    pub(super) fn link_down(&mut self, n: NodeId, out: &mut O) {
        match &mut self.role {
            // Messages to it may have been lost: it re-synchronises.
            Role::Leading(l) => {
                l.fols.remove(&n);
            }
            Role::Following(f) if f.leader == n => self.look(out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::msg::LogEntry;
    use super::super::node::Config;
    use super::super::testing::{put, Cluster};
    use super::*;
    use crate::protocol::contract::{Command, Out, Protocol, Record};
    use crate::types::{ClientRef, Response, Time};

    type Cmds = Vec<Command<Msg, super::super::Timer>>;

    fn call(c: &mut Cluster, id: NodeId, f: impl FnOnce(&mut ZabNode, Time, &mut O)) -> Cmds {
        let now = c.now;
        let mut out = Out::new();
        f(
            c.nodes[id as usize - 1].as_mut().expect("up"),
            now,
            &mut out,
        );
        out.drain().collect()
    }

    fn logged(cmds: &Cmds) -> Msg {
        (cmds.iter())
            .find_map(|c| match c {
                Command::WhenDurable(m @ Msg::Logged { .. }) => Some(m.clone()),
                _ => None,
            })
            .expect("asks to hear when its log is durable")
    }

    fn commits(cmds: &Cmds) -> Vec<(Peer, u64)> {
        (cmds.iter())
            .filter_map(|c| match c {
                Command::SendNow {
                    to,
                    msg: Msg::Commit { index, .. },
                } => Some((*to, *index)),
                Command::Send {
                    msg: Msg::Commit { .. },
                    ..
                } => panic!("a COMMIT waited for later records"),
                _ => None,
            })
            .collect()
    }

    /// L1/L2 with the leader's disk in parallel: PROPOSALs leave at once,
    /// and the leader's own vote counts only once the driver reports its
    /// entry durable, so one follower's ACK is not a quorum of disks (N=3).
    #[test]
    fn the_leader_votes_for_its_proposal_only_once_it_is_durable() {
        let mut c = Cluster::new(3, Config::default());
        let l = c.settle();
        let f: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
        let client = ClientRef::local(99);
        let cmds = call(&mut c, l, |n, now, out| {
            n.on_client(now, client, put("k", "v"), out)
        });
        assert!(matches!(cmds[0], Command::Persist(Record::Entry { .. })));
        let proposed: Vec<Peer> = (cmds.iter())
            .filter_map(|c| match c {
                Command::SendNow {
                    to,
                    msg: Msg::Proposal { .. },
                } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(proposed, vec![Peer::Node(f[0]), Peer::Node(f[1])]);
        let own = logged(&cmds);
        let (epoch, index) = (c.node(l).epochs().1, c.node(l).log().last());
        let ack = Msg::Ack { epoch, index };
        let cmds = call(&mut c, l, |n, now, out| {
            n.on_msg(now, Peer::Node(f[0]), ack.clone(), out)
        });
        assert!(commits(&cmds).is_empty(), "committed on one disk of three");
        assert!(c.node(l).commit < index);
        let cmds = call(&mut c, l, |n, now, out| {
            n.on_msg(now, Peer::Node(l), own, out)
        });
        let to_all = vec![(Peer::Node(f[0]), index), (Peer::Node(f[1]), index)];
        assert_eq!(commits(&cmds), to_all);
        assert!(cmds.contains(&Command::ReplyNow {
            client,
            resp: Response::Done
        }));
        // The other follower's ACK then commits nothing new.
        let ack = Msg::Ack { epoch, index };
        let cmds = call(&mut c, l, |n, now, out| {
            n.on_msg(now, Peer::Node(f[1]), ack, out)
        });
        assert!(commits(&cmds).is_empty());
    }

    /// The batching rule: one durability report in flight at a time. A
    /// proposal made while one is out asks for none; the report coming
    /// back asks for the rest, so one sync gives one report (and one ACK
    /// from each follower), not one per proposal.
    #[test]
    fn one_durability_report_is_in_flight_at_a_time() {
        let mut c = Cluster::new(3, Config::default());
        let l = c.settle();
        let first = call(&mut c, l, |n, now, out| {
            n.on_client(now, ClientRef::local(1), put("a", "1"), out)
        });
        let own = logged(&first);
        let second = call(&mut c, l, |n, now, out| {
            n.on_client(now, ClientRef::local(2), put("b", "2"), out)
        });
        let asks = |cmds: &Cmds| {
            (cmds.iter())
                .filter(|c| matches!(c, Command::WhenDurable(_)))
                .count()
        };
        assert_eq!(asks(&second), 0, "asked again while one is in flight");
        let last = c.node(l).log().last();
        let back = call(&mut c, l, |n, now, out| {
            n.on_msg(now, Peer::Node(l), own, out)
        });
        let Msg::Logged { index, .. } = logged(&back) else {
            unreachable!()
        };
        assert_eq!(index, last, "the report asks for what was logged since");
        let again = call(&mut c, l, |n, now, out| {
            n.on_client(now, ClientRef::local(3), put("c", "3"), out)
        });
        assert_eq!(asks(&again), 0);
    }

    /// F1: a follower ACKs a proposal only once the driver reports it
    /// durable, and not on a report from before a synchronisation (its
    /// log may have lost entries since).
    #[test]
    fn a_follower_acks_once_durable_and_not_on_a_report_from_before_a_sync() {
        let mut c = Cluster::new(3, Config::default());
        let l = c.settle();
        let f = if l == 1 { 2 } else { 1 };
        let epoch = c.node(f).epochs().1;
        let index = c.node(f).log().last() + 1;
        let entry = LogEntry {
            index,
            epoch,
            data: Bytes::from_static(b"x"),
        };
        let prop = Msg::Proposal { epoch, entry };
        let cmds = call(&mut c, f, |n, now, out| {
            n.on_msg(now, Peer::Node(l), prop, out)
        });
        assert!(matches!(cmds[0], Command::Persist(Record::Entry { .. })));
        let acks = |cmds: &Cmds| {
            (cmds.iter())
                .filter(|c| match c {
                    Command::Send { msg, .. } | Command::SendNow { msg, .. } => {
                        matches!(msg, Msg::Ack { .. })
                    }
                    _ => false,
                })
                .count()
        };
        assert_eq!(acks(&cmds), 0, "ACK before the entry is durable");
        let own = logged(&cmds);
        let cmds = call(&mut c, f, |n, now, out| {
            n.on_msg(now, Peer::Node(f), own.clone(), out)
        });
        let ack = Command::SendNow {
            to: Peer::Node(l),
            msg: Msg::Ack { epoch, index },
        };
        assert_eq!(cmds, vec![ack]);
        c.nodes[f as usize - 1].as_mut().expect("up").log_gen += 1;
        let cmds = call(&mut c, f, |n, now, out| {
            n.on_msg(now, Peer::Node(f), own, out)
        });
        assert_eq!(acks(&cmds), 0, "a report from before a sync");
    }
}
