//! A server's part in membership change (`reconfig` has the protocol,
//! shared with lease-lock): route its messages to it, and run this
//! server's operations in each configuration it installs.

use super::msg::{Msg, Timer};
use super::node::AbdNode;
use crate::protocol::contract::{Membership, Out};
use crate::protocol::reconfig::ChangeMsg;
use crate::types::{NodeId, Time};

impl AbdNode {
    /// Start changing the members to `voters` (`quorumkv member`, the
    /// simulator's `reconfig`): the epoch it decides.
    pub fn propose(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut Out<Msg, Timer>,
    ) -> Result<u64, String> {
        self.changes.propose(now, voters, out)
    }

    /// A membership-change message from server `from`.
    pub(super) fn on_reconfig(
        &mut self,
        now: Time,
        from: NodeId,
        msg: ChangeMsg,
        out: &mut Out<Msg, Timer>,
    ) {
        let installed = (self.changes).on_msg(now, from, msg, &mut self.replica, out);
        if let Some(config) = installed {
            self.coord.adopt(now, &config, out);
        }
    }

    /// The metrics of membership change (`Protocol::metrics`).
    pub(super) fn reconfig_metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let c = self.changes.counts();
        vec![
            (
                "abd_config_epoch",
                "the membership configuration this replica serves in",
                c.epoch,
            ),
            (
                "abd_reconfig_held_back_total",
                "queries and stores unanswered: frozen by a membership change, or not a member",
                c.held_back,
            ),
            (
                "abd_reconfig_moved_total",
                "queries and stores of an older configuration answered with the newer one",
                c.moved,
            ),
            (
                "abd_reconfig_changes_total",
                "membership changes this server ran to completion",
                c.done,
            ),
            (
                "abd_reconfig_taken_over_total",
                "stalled membership changes this frozen replica finished",
                c.taken_over,
            ),
        ]
    }

    /// Who votes, as this replica sees it (`Changes::view`).
    pub fn membership_view(&self) -> Membership {
        self.changes.view()
    }

    /// A configuration for the simulator's `reconfig` fault
    /// (`Changes::draw`).
    pub fn draw_config(&self, all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
        self.changes.draw(all, draw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::abd::{Ballot, CoordinatorConfig};
    use crate::protocol::contract::Protocol;
    use crate::protocol::reconfig::{Config, STALL_RETRIES};
    use crate::types::Peer;
    use crate::types::{Request, Tag};
    use bytes::Bytes;

    fn node(id: NodeId) -> AbdNode {
        AbdNode::new(id, vec![1, 2, 3, 4], true, CoordinatorConfig::default()).with_spares(1)
    }

    #[test]
    fn a_change_is_refused_with_a_reason() {
        let mut n = node(1);
        let mut out = O::new();
        let why = |r: Result<u64, String>| r.unwrap_err();
        assert!(why(n.propose(T0, &[], &mut out)).contains("at least one"));
        assert!(why(n.propose(T0, &[1, 9], &mut out)).contains("server 9 is unknown"));
        assert!(why(n.propose(T0, &[3, 2, 1], &mut out)).contains("members already"));
        assert!(out.is_empty());
        assert_eq!(n.propose(T0, &[2, 3, 4], &mut out), Ok(1));
        assert!(why(n.propose(T0, &[1, 2], &mut out)).contains("in flight"));
        let m = n.membership_view();
        assert_eq!(m.voters, vec![1, 2, 3]);
        assert_eq!(m.pending, Some((1, vec![2, 3, 4])));
        assert_eq!(
            (m.servers, m.leader, m.commit),
            (vec![1, 2, 3, 4], Some(1), 0)
        );
        assert_eq!(n.role(), "replica");
        assert_eq!(node(4).role(), "learner", "a spare");
    }

    /// A replica frozen by a proposer that went silent finishes the change
    /// itself after the stall time, above the ballot it promised.
    #[test]
    fn a_frozen_replica_takes_over_a_stalled_change() {
        let mut n = node(2);
        let mut out = O::new();
        let promised = Ballot { round: 3, node: 1 };
        let prepare = Msg::Prepare {
            epoch: 1,
            ballot: promised,
        };
        n.on_msg(T0, Peer::Node(1), prepare, &mut out);
        assert!(n.changes.epochs.frozen());
        out.drain();
        let retry = n.coord.cfg.retry_interval;
        let stall = retry * (STALL_RETRIES + 2);
        n.on_timer(T0.saturating_add(stall / 2), Timer::Reconfig, &mut out);
        assert!(n.changes.proposer.is_none(), "not yet");
        out.drain();
        n.on_timer(T0.saturating_add(stall), Timer::Reconfig, &mut out);
        assert_eq!(n.changes.changes_taken_over, 1);
        let p = n.changes.proposer.as_ref().expect("taken over");
        assert_eq!(p.target, vec![1, 2, 3], "no change of its own");
        let prepares: Vec<Msg> = sends(&mut out).into_iter().map(|(_, m)| m).collect();
        let above = Ballot { round: 4, node: 2 };
        assert!(prepares.contains(&Msg::Prepare {
            epoch: 1,
            ballot: above
        }));
    }

    /// A store phase under way when the configuration moves keeps its
    /// tag: it goes again, under a fresh op id, to the new members.
    #[test]
    fn a_store_in_flight_keeps_its_tag_in_the_new_configuration() {
        let mut c = coord(3);
        let mut out = started(&mut c, 9, put(b"x"));
        qreply(&mut c, 1, 4, 3, None, &mut out);
        qreply(&mut c, 2, 4, 3, None, &mut out);
        let stores = sends(&mut out);
        let Msg::Store { op, tag, .. } = stores[0].1.clone() else {
            panic!("{stores:?}")
        };
        assert_eq!(tag.ts, 5);
        let moved = Msg::Moved {
            op,
            config: Config::new(2, vec![2, 3, 4]),
        };
        c.handle(T0, Peer::Node(1), moved, &mut out);
        assert_eq!(c.epoch(), 2);
        let again = sends(&mut out);
        let to: Vec<Peer> = again.iter().map(|(t, _)| *t).collect();
        assert_eq!(to, vec![Peer::Node(2), Peer::Node(3), Peer::Node(4)]);
        for (_, m) in &again {
            let Msg::Store {
                op: fresh,
                tag: same,
                epoch,
                ..
            } = m
            else {
                panic!("{m:?}")
            };
            assert_eq!((*same, *epoch), (tag, 2));
            assert_ne!(*fresh, op, "a fresh op id");
        }
        // A configuration naming an id past the bitsets is not adopted.
        let bad = Msg::Moved {
            op: 0,
            config: Config::new(9, vec![2, 64]),
        };
        c.handle(T0, Peer::Node(2), bad, &mut out);
        assert_eq!((c.epoch(), c.counters.misrouted), (2, 1));
        assert!(out.is_empty());
        // An ack under the old op id no longer counts.
        c.handle(T0, Peer::Node(2), Msg::StoreAck { op }, &mut out);
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op }, &mut out);
        assert!(replies(&mut out).is_empty());
        // A query in flight starts again from its query phase.
        let mut out = started(&mut c, 10, Request::Get { key: key() });
        out.drain();
        let moved = Msg::Moved {
            op: 0,
            config: Config::new(3, vec![3, 4]),
        };
        c.handle(T0, Peer::Node(2), moved, &mut out);
        let q = sends(&mut out);
        assert!(q
            .iter()
            .any(|(to, m)| *to == Peer::Node(4) && matches!(m, Msg::Query { epoch: 3, .. })));
    }

    /// Deliver every message between `nodes` (ids 1..) until none is
    /// left, dropping those `drop(to, msg)` says; how many of each kind
    /// went by, by the message's first word.
    fn settle_with(
        nodes: &mut [AbdNode],
        firsts: Vec<(NodeId, O)>,
        drop: &dyn Fn(NodeId, &Msg) -> bool,
    ) -> std::collections::BTreeMap<String, u32> {
        use crate::protocol::contract::Command;
        let mut seen = std::collections::BTreeMap::new();
        let mut queue = std::collections::VecDeque::new();
        let push = |q: &mut std::collections::VecDeque<_>, at: NodeId, o: &mut O| {
            for c in o.drain() {
                if let Command::Send { to, msg } = c {
                    q.push_back((at, to, msg));
                }
            }
        };
        for (from, mut out) in firsts {
            push(&mut queue, from, &mut out);
        }
        while let Some((at, to, msg)) = queue.pop_front() {
            let name = format!("{msg:?}");
            let word = name.split([' ', '{']).next().unwrap_or("").to_string();
            *seen.entry(word).or_insert(0) += 1;
            assert!(seen.values().sum::<u32>() < 10_000, "does not settle");
            let Peer::Node(t) = to else { continue };
            if drop(t, &msg) {
                continue;
            }
            let mut o = O::new();
            nodes[t as usize - 1].on_msg(T0, Peer::Node(at), msg, &mut o);
            push(&mut queue, t, &mut o);
        }
        seen
    }

    /// [`settle_with`], dropping every message to a node in `cut`.
    fn settle(
        nodes: &mut [AbdNode],
        firsts: Vec<(NodeId, O)>,
        cut: &[NodeId],
    ) -> std::collections::BTreeMap<String, u32> {
        settle_with(nodes, firsts, &|to, _| cut.contains(&to))
    }

    fn cluster() -> Vec<AbdNode> {
        (1..=4).map(node).collect()
    }

    /// A spare runs a change end to end: the old members' state reaches
    /// the new member, every server installs the new configuration (the
    /// removed one too, to answer `Moved`), the proposer reports it.
    #[test]
    fn a_change_runs_end_to_end_between_servers() {
        let mut nodes = cluster();
        let store = Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts: 3, writer: 1 },
            value: Some(Bytes::from_static(b"v")),
            epoch: 0,
        };
        for n in &mut nodes[..2] {
            n.on_msg(T0, Peer::Conn(9), store.clone(), &mut O::new());
        }
        let mut out = O::new();
        assert_eq!(nodes[3].propose(T0, &[2, 3, 4], &mut out), Ok(1));
        let seen = settle(&mut nodes, vec![(4, out)], &[]);
        for word in [
            "Prepare",
            "Promise",
            "Accept",
            "Accepted",
            "Install",
            "Installed",
        ] {
            assert!(seen.contains_key(word), "{word}: {seen:?}");
        }
        for n in &nodes {
            assert_eq!(
                n.changes.epochs.installed,
                Config::new(1, vec![2, 3, 4]),
                "n{}",
                n.id
            );
            assert_eq!(n.coord.epoch(), 1);
        }
        assert_eq!(nodes[3].replica.get(b"k").unwrap().0.ts, 3, "transferred");
        assert!(nodes[3].changes.proposer.is_none());
        assert_eq!(nodes[3].changes.changes_done, 1);
        assert_eq!(
            nodes[3].changes.last_change,
            Some(Ok(Config::new(1, vec![2, 3, 4])))
        );
        assert_eq!((nodes[0].role(), nodes[3].role()), ("learner", "replica"));
        let metric = |n: &AbdNode, name: &str| {
            (n.metrics().into_iter())
                .find(|(m, _, _)| *m == name)
                .map(|(_, _, v)| v)
        };
        assert_eq!(metric(&nodes[3], "abd_config_epoch"), Some(1));
        assert_eq!(metric(&nodes[3], "abd_reconfig_changes_total"), Some(1));
        assert_eq!(metric(&nodes[0], "abd_reconfig_held_back_total"), Some(0));
    }

    /// The proposer's own install does not end its change: it waits for a
    /// quorum of the new members, retransmitting to them.
    #[test]
    fn a_change_waits_for_a_quorum_of_the_new_members() {
        let mut nodes = cluster();
        let mut out = O::new();
        nodes[3].propose(T0, &[2, 3, 4], &mut out).unwrap();
        let lost = |to: NodeId, m: &Msg| matches!(m, Msg::Install { .. }) && (to == 2 || to == 3);
        settle_with(&mut nodes, vec![(4, out)], &lost);
        assert_eq!(
            nodes[3].changes.epochs.installed.epoch, 1,
            "installed itself"
        );
        assert!(nodes[3].changes.proposer.is_some(), "1 of 3 installed");
        let mut out = O::new();
        let later = T0.saturating_add(nodes[3].coord.cfg.retry_interval);
        nodes[3].on_timer(later, Timer::Reconfig, &mut out);
        settle(&mut nodes, vec![(4, out)], &[]);
        assert!(nodes[3].changes.proposer.is_none() && nodes[3].changes.changes_done == 1);
    }

    /// A refused proposer backs off, then prepares above the promise it
    /// was refused with; one that promised another's higher ballot defers
    /// to it (no retransmission while it waits).
    #[test]
    fn a_refused_proposer_backs_off_and_one_outbid_defers() {
        let mut n = node(1);
        let mut out = O::new();
        n.propose(T0, &[1, 2], &mut out).unwrap();
        out.drain();
        let ours = Ballot { round: 1, node: 1 };
        let theirs = Ballot { round: 5, node: 3 };
        let refuse = Msg::Refuse {
            epoch: 1,
            ballot: ours,
            promised: theirs,
        };
        n.on_msg(T0, Peer::Node(2), refuse, &mut out);
        let retry = n.coord.cfg.retry_interval;
        n.on_timer(T0.saturating_add(retry * 2), Timer::Reconfig, &mut out);
        let again: Vec<Msg> = sends(&mut out).into_iter().map(|(_, m)| m).collect();
        let above = Ballot { round: 6, node: 1 };
        assert!(
            again.contains(&Msg::Prepare {
                epoch: 1,
                ballot: above
            }),
            "{again:?}"
        );
        // Outbid by server 2's prepare: silent for the stall time.
        let outbid = Msg::Prepare {
            epoch: 1,
            ballot: Ballot { round: 9, node: 2 },
        };
        let t1 = T0.saturating_add(retry * 2);
        n.on_msg(t1, Peer::Node(2), outbid, &mut out);
        out.drain();
        n.on_timer(t1.saturating_add(retry), Timer::Reconfig, &mut out);
        let quiet: Vec<Msg> = sends(&mut out).into_iter().map(|(_, m)| m).collect();
        assert!(
            !quiet.iter().any(|m| matches!(m, Msg::Prepare { .. })),
            "{quiet:?}"
        );
    }

    /// How an install from elsewhere meets a change in flight here: one of
    /// the current epoch changes nothing; a newer one with our target ends
    /// the change as done; a newer one ends a takeover without reverting
    /// anything. A change arms the reconfiguration timer.
    #[test]
    fn an_install_from_elsewhere_ends_or_leaves_a_change() {
        use crate::protocol::contract::Command;
        let prepares = |o: &mut O| {
            (o.drain())
                .filter(|c| {
                    matches!(
                        c,
                        Command::Send {
                            msg: Msg::Prepare { .. },
                            ..
                        }
                    )
                })
                .count()
        };
        let mut n = node(1);
        let mut out = O::new();
        n.propose(T0, &[2, 3, 4], &mut out).unwrap();
        let armed = (out.commands().iter()).any(|c| {
            matches!(
                c,
                Command::SetTimer {
                    timer: Timer::Reconfig,
                    ..
                }
            )
        });
        assert!(armed);
        out.drain();
        // Its own prepare freezes it: busy still, and one timer is enough.
        let own = Msg::Prepare {
            epoch: 1,
            ballot: Ballot { round: 1, node: 1 },
        };
        n.on_msg(T0, Peer::Node(1), own, &mut out);
        let timers = (out.drain()).filter(|c| matches!(c, Command::SetTimer { .. }));
        assert_eq!(timers.count(), 0, "armed already");
        let same = Msg::Install {
            config: Config::new(0, vec![1, 2, 3]),
            entries: vec![],
        };
        n.on_msg(T0, Peer::Node(2), same, &mut out);
        assert_eq!(prepares(&mut out), 0, "the current epoch: nothing to redo");
        assert!(n.changes.proposer.is_some());
        let ours = Msg::Install {
            config: Config::new(1, vec![2, 3, 4]),
            entries: vec![],
        };
        n.on_msg(T0, Peer::Node(2), ours, &mut out);
        assert_eq!(prepares(&mut out), 0, "decided elsewhere: done");
        assert!(n.changes.proposer.is_none());
        assert_eq!(n.changes.changes_done, 1);

        // A takeover (no change of its own) overtaken by another change.
        let mut n = node(2);
        let prepare = Msg::Prepare {
            epoch: 1,
            ballot: Ballot { round: 1, node: 1 },
        };
        n.on_msg(T0, Peer::Node(1), prepare, &mut out);
        let stall = n.coord.cfg.retry_interval * (STALL_RETRIES + 2);
        n.on_timer(T0.saturating_add(stall), Timer::Reconfig, &mut out);
        assert!(n.changes.proposer.as_ref().is_some_and(|p| p.takeover));
        out.drain();
        let other = Msg::Install {
            config: Config::new(1, vec![1, 2]),
            entries: vec![],
        };
        n.on_msg(T0, Peer::Node(1), other, &mut out);
        assert_eq!(prepares(&mut out), 0, "no revert to the old members");
        assert!(n.changes.proposer.is_none());
        assert_eq!(n.changes.epochs.installed, Config::new(1, vec![1, 2]));
    }

    /// Two changes at once: one is refused and the servers agree on one
    /// configuration per epoch; the refused one runs again after it. A
    /// server cut off during the change catches up on the next query of
    /// the new epoch (`InstallRequest`).
    #[test]
    fn concurrent_changes_agree_and_a_server_behind_catches_up() {
        let mut nodes = cluster();
        let (mut a, mut b) = (O::new(), O::new());
        assert!(nodes[0].propose(T0, &[1, 2], &mut a).is_ok());
        assert!(nodes[1].propose(T0, &[2, 3, 4], &mut b).is_ok());
        let seen = settle(&mut nodes, vec![(2, b), (1, a)], &[3]);
        assert!(seen.contains_key("Refuse"), "{seen:?}");
        let live = [&nodes[0], &nodes[1], &nodes[3]];
        let epoch = live[0].changes.epochs.installed.clone();
        // n2's change won epoch 1; n1's, refused, ran again as epoch 2.
        assert_eq!(epoch, Config::new(2, vec![1, 2]));
        for n in live {
            assert_eq!(n.changes.epochs.installed, epoch, "n{}", n.id);
        }
        assert_eq!(nodes[2].changes.epochs.installed.epoch, 0, "cut off");
        let query = Msg::Query {
            op: 5,
            key: key(),
            epoch: epoch.epoch,
        };
        let mut out = O::new();
        nodes[2].on_msg(T0, Peer::Node(2), query, &mut out);
        let seen = settle(&mut nodes, vec![(3, out)], &[]);
        assert!(seen.contains_key("InstallRequest"), "{seen:?}");
        assert_eq!(nodes[2].changes.epochs.installed, epoch);
    }

    #[test]
    fn the_simulator_draws_changes_that_change_something() {
        let n = node(1);
        let all = [1, 2, 3, 4];
        let mut seen = std::collections::BTreeSet::new();
        for draw in 0..400u64 {
            let d = draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            if let Some(m) = n.draw_config(&all, d) {
                assert_ne!(m, vec![1, 2, 3]);
                assert!(m.len() >= 2 && m.iter().all(|x| all.contains(x)), "{m:?}");
                seen.insert(m);
            }
        }
        assert!(seen.contains(&vec![1, 2, 3, 4]), "an add: {seen:?}");
        assert!(seen.iter().any(|m| m.len() == 2), "a removal: {seen:?}");
    }
}
