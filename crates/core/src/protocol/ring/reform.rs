//! Kill-all (e): every server restarted, so nobody holds a live view and
//! no `Join` is ever answered. The lowest member, outside, takes a census:
//! `Census` to every other member, each outside one answering `Roll` with
//! its life and its state. With an answer from every member, and no
//! `Down` since the round began, nobody is in (an in server answers
//! nothing, and being in passes only from a server in to one outside), so
//! no ring serves: it merges every register by highest tag and every
//! applied operation, forms the view of all members, and welcomes its
//! successor, which installs and welcomes its own, round to the census
//! taker (module doc, "Kill-all").
//!
//! Why nothing acknowledged is lost: a write is acknowledged once its write
//! went round, and each server persisted it before passing it on (or, for a
//! server welcomed later, before serving its snapshot); a read answers a
//! value persisted where it was read. Every server's disk is in the merge.
//! A server that lost its state (memory durability, `--recover`) may have
//! been the last one in: then the cluster cannot be re-formed safely, and
//! the census says so (`Protocol::fatal`) instead of waiting for ever.

use super::msg::Snapshot;
use super::msg::{Msg, Timer};
use super::node::RingNode;
use super::restart::Census;
use crate::protocol::contract::Out;
use crate::types::{NodeId, Peer};
use std::collections::BTreeMap;

type O = Out<Msg, Timer>;

impl RingNode {
    /// This server takes the census: the lowest member, outside, rejoin on.
    fn census_taker(&self) -> bool {
        self.outside && self.cfg.rejoin && self.members.first() == Some(&self.id)
    }

    /// On start and on the `Join` timer: begin a census if none runs and
    /// no member is reported down, else ask again the members that have
    /// not answered (a request sent before their link came up was lost).
    pub(super) fn census(&mut self, out: &mut O) {
        if !self.census_taker() || self.fatal.is_some() {
            return;
        }
        if self.census.is_none() {
            if self.members.iter().any(|m| self.link_down.contains(m)) {
                return;
            }
            self.census_round = self.census_round.saturating_add(1);
            self.census = Some(Census {
                round: self.census_round,
                rolls: BTreeMap::new(),
            });
        }
        let Some(c) = &self.census else { return };
        let round = c.round;
        let ask: Vec<NodeId> = (self.members.iter().copied())
            .filter(|m| *m != self.id && !c.rolls.contains_key(m))
            .collect();
        for m in ask {
            out.send(Peer::Node(m), Msg::Census { round });
        }
        self.census_complete(out);
    }

    /// A member went down: the census starts again (its answer, if any,
    /// came from a life that is gone).
    pub(super) fn census_down(&mut self) {
        self.census = None;
    }

    /// `Census` from `from`: answered only while outside.
    pub(super) fn on_census(&mut self, from: NodeId, round: u64, out: &mut O) {
        if !self.outside {
            return;
        }
        let (writer, lost) = (self.writer, self.lost);
        let state = Box::new(self.snapshot());
        let roll = Msg::Roll {
            round,
            writer,
            lost,
            state,
        };
        out.send(Peer::Node(from), roll);
    }

    /// `Roll` straight from `from` (the life that got the request).
    pub(super) fn on_roll(
        &mut self,
        from: NodeId,
        (round, writer, lost): (u64, u64, bool),
        state: Snapshot,
        out: &mut O,
    ) {
        if !self.census_taker() {
            return;
        }
        let Some(c) = self.census.as_mut().filter(|c| c.round == round) else {
            return;
        };
        c.rolls.insert(from, (writer, lost, state));
        self.census_complete(out);
    }

    /// Every other member answered: re-form, or give up if a state is lost.
    fn census_complete(&mut self, out: &mut O) {
        let others = self.members.len().saturating_sub(1);
        let Some(c) = self.census.take_if(|c| c.rolls.len() >= others) else {
            return;
        };
        let lost: Vec<NodeId> = (c.rolls.iter())
            .filter(|(_, (_, l, _))| *l)
            .map(|(&n, _)| n)
            .chain(self.lost.then_some(self.id))
            .collect();
        if !lost.is_empty() {
            return self.unrecoverable(lost, out);
        }
        self.counters.reformed += 1;
        let mut lives = BTreeMap::from([(self.id, self.writer)]);
        for (n, (writer, _, s)) in c.rolls {
            lives.insert(n, writer);
            for (held, _) in s.regs {
                self.merge_register(&held, out);
            }
            self.applied_ops(s.ops, s.op_writes, out);
            self.view = self.view.max(s.view);
        }
        self.form(lives, out);
    }

    /// The view of every member, and the first `Welcome` of the chain.
    fn form(&mut self, lives: BTreeMap<NodeId, u64>, out: &mut O) {
        self.outside = false;
        self.join_sent_to = None;
        self.view = self.view.saturating_add(1);
        self.alive = self.members.iter().copied().collect();
        // Joins and notices kept outside are about lives now counted in
        // (or gone): the census settled them.
        self.stash.clear();
        self.stashed_views.clear();
        self.stashed_gone.clear();
        self.lives = lives;
        self.next = self.successor();
        self.pred = self.live_pred(self.id);
        self.link.fresh();
        if self.next != self.id {
            let mut snap = self.snapshot();
            snap.reform = true;
            out.send(Peer::Node(self.next), Msg::Welcome(Box::new(snap)));
        }
    }

    /// A re-formed ring's `Welcome` is installed here (`on_welcome`): every
    /// member is in the view already, so no `ViewChange`; the successor
    /// gets the state in turn (FIFO: before any ring message from here),
    /// unless it is the census taker, in since it formed the view.
    pub(super) fn reformed(&mut self, out: &mut O) {
        self.announcing = false;
        let lives = &self.lives;
        self.stash.retain(|(n, w)| lives.get(n) != Some(w));
        if self.next != self.id && self.members.first() != Some(&self.next) {
            let mut snap = self.snapshot();
            snap.reform = true;
            out.send(Peer::Node(self.next), Msg::Welcome(Box::new(snap)));
        }
    }

    /// Some member lost its state and every member is outside: acknowledged
    /// writes may be gone for good. Say so, here and at every member.
    fn unrecoverable(&mut self, lost: Vec<NodeId>, out: &mut O) {
        let why = format!(
            "every ring server restarted and {lost:?} lost its state (durability memory or \
             --recover): acknowledged writes may be gone; the ring cannot re-form safely \
             (start it afresh, or keep data with --durability fsync)"
        );
        for &m in self.members.iter().filter(|&&m| m != self.id) {
            out.send(Peer::Node(m), Msg::Unrecoverable { lost: lost.clone() });
        }
        self.fatal = Some(why);
    }

    /// The census taker's verdict, at any member still outside.
    pub(super) fn on_unrecoverable(&mut self, lost: Vec<NodeId>) {
        if self.outside && self.fatal.is_none() {
            self.fatal = Some(format!(
                "every ring server restarted and {lost:?} lost its state: acknowledged writes \
                 may be gone; the ring cannot re-form safely"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::contract::Protocol;
    use crate::protocol::ring::node::RingConfig;
    use crate::protocol::ring::testing::{get, put, value, Net};
    use crate::types::{OpId, Response};

    fn kill_all(net: &mut Net, order: &[u32]) {
        for &j in order {
            net.crash(j);
        }
        for &j in order {
            net.restart(j);
        }
    }

    #[test]
    fn after_a_kill_all_the_ring_re_forms_with_every_acknowledged_write() {
        for n in 1..=5u32 {
            let mut net = Net::new(n, RingConfig::default(), None).durable();
            let op = OpId { client: 9, seq: 1 };
            let c = net.ask(n, put("a"), op);
            net.settle();
            assert_eq!(net.answer(c), Some(Response::Done));
            let order: Vec<u32> = (1..=n).rev().collect();
            kill_all(&mut net, &order);
            if n > 1 {
                assert!(net.serving().is_empty(), "nobody is in");
            }
            net.settle();
            assert_eq!(net.serving(), (1..=n).collect::<Vec<_>>(), "N = {n}");
            assert_eq!(net.node(1).counters.reformed, 1);
            for j in 1..=n {
                let r = net.ask(j, get(), OpId::NONE);
                assert_eq!(net.answer(r), Some(value("a")), "N = {n} at {j}");
            }
            // The retry of an applied write is known from disk: applied once.
            let tag = net.node(1).register(b"k").unwrap().tag;
            let r = net.ask(n, put("a"), op);
            net.settle();
            assert_eq!(net.answer(r), Some(Response::Done));
            assert_eq!(net.node(1).register(b"k").unwrap().tag, tag);
            // And the ring writes again.
            let w = net.ask(1, put("b"), OpId { client: 9, seq: 2 });
            net.settle();
            assert_eq!(net.answer(w), Some(Response::Done));
        }
    }

    #[test]
    fn the_last_server_in_holds_what_the_others_missed_and_the_merge_keeps_it() {
        // 3 and 2 crash; 1 alone acknowledges "late"; then 1 crashes too.
        let mut net = Net::new(3, RingConfig::default(), None).durable();
        net.ask(1, put("early"), OpId::NONE);
        net.settle();
        net.crash(3);
        net.crash(2);
        let c = net.ask(1, put("late"), OpId::NONE);
        net.settle();
        assert_eq!(net.answer(c), Some(Response::Done));
        net.crash(1);
        for j in [2, 3, 1] {
            net.restart(j);
        }
        net.settle();
        assert_eq!(net.serving(), vec![1, 2, 3]);
        for j in 1..=3 {
            let r = net.ask(j, get(), OpId::NONE);
            assert_eq!(net.answer(r), Some(value("late")), "at {j}");
        }
    }

    /// A member reported down while the census runs: the census starts
    /// again (its answer came from a life that is gone), with a new round
    /// once every member is up.
    #[test]
    fn a_member_down_during_the_census_starts_it_again() {
        use crate::protocol::contract::{Command, LinkEvent, Record};
        use crate::protocol::ring::msg::Msg;
        use crate::protocol::ring::node::RingNode;
        use crate::protocol::ring::testing::{O, T0};
        use crate::types::Peer;
        let mut n = RingNode::new(1, vec![1, 2, 3], RingConfig::default()).with_durable(true);
        n.restore(Record::Meta {
            key: super::super::durable::STARTED.to_string(),
            value: bytes::Bytes::new(),
        });
        let rounds = |out: &O, to: u32| -> Vec<u64> {
            (out.commands().iter())
                .filter_map(|c| match c {
                    Command::Send {
                        to: Peer::Node(j),
                        msg: Msg::Census { round },
                    } if *j == to => Some(*round),
                    _ => None,
                })
                .collect()
        };
        let mut out = O::new();
        n.on_start(T0, &mut out);
        assert_eq!(rounds(&out, 2), vec![1]);
        let mut out = O::new();
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        assert_eq!(rounds(&out, 2), vec![2], "{:?}", out.commands());
    }

    /// The census taker's merge persists a register newer than its own
    /// (with its operation), and nothing for an older one.
    #[test]
    fn the_census_merge_persists_only_a_newer_register() {
        use crate::protocol::contract::{Command, Record};
        use crate::protocol::ring::node::RingNode;
        use crate::protocol::ring::testing::{entry, O};
        let mut n = RingNode::new(1, vec![1, 2, 3], RingConfig::default()).with_durable(true);
        let mut out = O::new();
        n.merge_register(&entry(2, 1, "a"), &mut out);
        n.merge_register(&entry(1, 2, "old"), &mut out);
        let regs: Vec<_> = (out.commands().iter())
            .filter(|c| matches!(c, Command::Persist(Record::Register { .. })))
            .collect();
        assert_eq!(regs.len(), 1, "{:?}", out.commands());
    }

    #[test]
    fn a_census_waits_while_a_server_is_in_and_that_server_lets_the_others_in() {
        // 1 and 2 restart while 3 is still in: the census gets no answer
        // from 3; the normal join does it.
        let mut net = Net::new(3, RingConfig::default(), None).durable();
        net.ask(3, put("a"), OpId::NONE);
        net.settle();
        net.crash(1);
        net.crash(2);
        net.restart(1);
        net.restart(2);
        net.settle();
        assert_eq!(net.serving(), vec![1, 2, 3]);
        assert_eq!(net.node(1).counters.reformed, 0);
        let r = net.ask(1, get(), OpId::NONE);
        assert_eq!(net.answer(r), Some(value("a")));
    }

    #[test]
    fn a_kill_all_without_disks_is_reported_not_waited_on() {
        let mut net = Net::new(3, RingConfig::default(), None);
        net.ask(1, put("a"), OpId::NONE);
        net.settle();
        kill_all(&mut net, &[1, 2, 3]);
        net.settle();
        assert!(net.serving().is_empty());
        for j in 1..=3 {
            let why = net.node(j).fatal().expect("every member gives up");
            assert!(why.contains("lost its state"), "{why}");
        }
        let r = net.ask(2, get(), OpId::NONE);
        assert!(matches!(net.answer(r), Some(Response::Failed(e)) if e.is_definite()));
    }
}
