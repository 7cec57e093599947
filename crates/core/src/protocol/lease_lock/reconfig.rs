//! Lease-lock's part in membership change (`protocol::reconfig` has the
//! protocol, shared with ABD): a server routes the change's messages and
//! admits a request only in the epoch it serves; a coordinator follows a
//! newer configuration and runs its operations again there.
//!
//! What is particular to locks:
//! - A frozen replica (it promised the next epoch and sent its store)
//!   answers no LOCK_REQ, READ or WRITE of its epoch: a WRITE under a lock
//!   granted before the freeze must not change a store already handed
//!   over, and a READ of the frozen store could miss a write of the next
//!   epoch.
//! - Installing a configuration releases every lock (`Replica::release_all`):
//!   all were granted in an older epoch, whose WRITEs are now answered
//!   `Moved`.
//! - A coordinator told `Moved` releases its locks, takes the new members
//!   and runs each operation from a new lock round. An operation that had
//!   not written yet starts over; one whose WRITE had left keeps its tag
//!   and value and writes them again under new locks without reading
//!   (ABD's rule for a store in flight: a fresh tag could overwrite a
//!   later write). Its outcome is unknown if it then fails.

use super::coordinator::{Coordinator, Kind, Pending, Phase};
use super::msg::{Msg, Timer};
use crate::protocol::contract::Out;
use crate::protocol::reconfig::{ChangeBug, Config};
use crate::quorum::majority;
use crate::types::{OpError, Time};

use super::bugs::Bug;

/// Where lease-lock persists its configuration and its Paxos state.
pub const KEYS: [&str; 2] = ["lease_lock.config", "lease_lock.paxos"];

/// The membership-change bug a lease-lock injected bug is, if any.
pub fn change_bug(bug: Option<Bug>) -> Option<ChangeBug> {
    match bug? {
        Bug::ReconfigNoFreeze => Some(ChangeBug::NoFreeze),
        Bug::ReconfigTransferFromOne => Some(ChangeBug::TransferFromOne),
        Bug::ReconfigServeBeforeTransfer => Some(ChangeBug::InstallOnAccept),
        Bug::ReconfigIgnoreAccepted => Some(ChangeBug::IgnoreAccepted),
        _ => None,
    }
}

impl Coordinator {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Q grants are in: READ, or write again what was written in an older
    /// configuration.
    pub(super) fn on_locked(&mut self, now: Time, round: u64, out: &mut Out<Msg, Timer>) {
        match self.pending[&round].fixed.clone() {
            Some((tag, value, result)) => self.enter_write(now, round, (tag, value), result, out),
            None => self.enter_read(now, round, out),
        }
    }

    /// Why operation `p` ends without its locks: a definite refusal, unless
    /// a put's WRITE already left in an older configuration.
    pub(super) fn gave_up(&self, p: &Pending, why: String) -> OpError {
        if p.fixed.is_some() && matches!(p.kind, Kind::Write(_)) {
            OpError::unknown(why)
        } else {
            OpError::refused(why)
        }
    }

    /// Run in `config` from now on, if it is newer: every operation in
    /// flight releases its locks and locks anew among the new members
    /// under a fresh round, so that no reply of the old epoch counts in
    /// the new one (a quorum of the new members need not be one of the
    /// old).
    pub fn adopt(&mut self, now: Time, config: &Config, out: &mut Out<Msg, Timer>) {
        if !config.usable() {
            self.counters.misrouted += 1;
            return;
        }
        if config.epoch <= self.epoch {
            return; // another replica's answer to the same move
        }
        let pending = std::mem::take(&mut self.pending);
        for (round, p) in &pending {
            let lock = self.lock_id(*round);
            let unlock = Msg::Unlock {
                lock,
                key: p.key.clone(),
            };
            self.send_to(p.phase.locked(), &unlock, out);
        }
        self.epoch = config.epoch;
        self.members = config.members.clone();
        self.quorum = majority(self.members.len());
        if self.bug == Some(Bug::MinorityQuorum) {
            self.quorum = (self.members.len() / 2).max(1);
        }
        for (_, mut p) in pending {
            if let Phase::Writing {
                tag, value, result, ..
            } = &p.phase
            {
                p.fixed = Some((*tag, value.clone(), result.clone()));
            }
            p.phase = Phase::Backoff;
            self.lock_round(now, p, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Protocol;
    use crate::protocol::lease_lock::testing::*;
    use crate::protocol::lease_lock::LeaseNode;
    use crate::protocol::lease_lock::{CoordinatorConfig, LockId};
    use crate::protocol::reconfig::Ballot;
    use crate::protocol::reconfig::ChangeMsg;
    use crate::types::{NodeId, Peer};
    use crate::types::{Response, Tag};
    use bytes::Bytes;
    use std::time::Duration;

    fn node(id: NodeId) -> LeaseNode {
        let cfg = CoordinatorConfig::default();
        LeaseNode::new(id, vec![1, 2, 3, 4], Duration::from_secs(1), true, cfg).with_spares(1)
    }
    fn lock_req(l: LockId, epoch: u64) -> Msg {
        Msg::LockReq {
            lock: l,
            key: key(),
            epoch,
        }
    }
    fn write(l: LockId, ts: u64, epoch: u64) -> Msg {
        Msg::Write {
            lock: l,
            key: key(),
            tag: Tag { ts, writer: 7 },
            value: Some(Bytes::from_static(b"v")),
            epoch,
        }
    }
    fn change(n: &mut LeaseNode, from: NodeId, m: ChangeMsg, out: &mut O) {
        n.on_msg(T0, Peer::Node(from), Msg::Change(m), out);
    }

    /// A replica that promised the next epoch answers no LOCK_REQ, READ
    /// or WRITE of its own (a WRITE under a lock granted before the freeze
    /// changes nothing); once it installs the next, its locks are gone and
    /// an old epoch's request is told the new configuration.
    #[test]
    fn a_frozen_replica_serves_nothing_and_an_install_releases_every_lock() {
        let mut n = node(2);
        let mut out = O::new();
        let a = lock(9, 1);
        n.on_msg(T0, Peer::Conn(5), lock_req(a, 0), &mut out);
        assert!(matches!(
            sends(&mut out)[..],
            [(_, Msg::LockGranted { .. })]
        ));
        let ballot = Ballot { round: 1, node: 1 };
        change(&mut n, 1, ChangeMsg::Prepare { epoch: 1, ballot }, &mut out);
        assert!(n.changes.epochs.frozen());
        out.drain();
        n.on_msg(T0, Peer::Conn(5), write(a, 3, 0), &mut out);
        n.on_msg(T0, Peer::Conn(6), lock_req(lock(8, 1), 0), &mut out);
        assert!(sends(&mut out).is_empty(), "frozen: no answer");
        assert_eq!(n.replica.get(b"k").unwrap().tag, Tag::ZERO, "not applied");
        assert_eq!(n.changes.counts().held_back, 2);
        let config = Config::new(1, vec![2, 3, 4]);
        let entries = vec![(key(), Tag { ts: 2, writer: 1 }, None)];
        change(&mut n, 1, ChangeMsg::Install { config, entries }, &mut out);
        assert_eq!(n.replica.holder(b"k", T0), None, "released");
        assert_eq!(n.replica.get(b"k").unwrap().tag.ts, 2, "merged");
        out.drain();
        n.on_msg(T0, Peer::Conn(5), write(a, 3, 0), &mut out);
        let want = Msg::Moved {
            lock: a,
            config: Config::new(1, vec![2, 3, 4]),
        };
        assert_eq!(sends(&mut out), vec![(Peer::Conn(5), want)]);
        n.on_msg(T0, Peer::Conn(6), lock_req(lock(8, 2), 1), &mut out);
        assert!(matches!(
            sends(&mut out)[..],
            [(_, Msg::LockGranted { .. })]
        ));
        assert_eq!(n.role(), "replica");
    }

    /// A spare is a learner, refuses to serve epoch 0, and a request of a
    /// newer epoch makes it ask to be brought up to date.
    #[test]
    fn a_spare_serves_nothing_and_asks_for_a_newer_epoch() {
        let mut n = node(4);
        let mut out = O::new();
        assert_eq!(n.role(), "learner");
        n.on_msg(T0, Peer::Conn(5), lock_req(lock(9, 1), 0), &mut out);
        assert!(sends(&mut out).is_empty());
        n.on_msg(T0, Peer::Conn(5), lock_req(lock(9, 2), 3), &mut out);
        let asked = sends(&mut out);
        assert_eq!(asked.len(), 3);
        let want = Msg::Change(ChangeMsg::InstallRequest { epoch: 3 });
        assert!(asked.iter().all(|(_, m)| *m == want), "{asked:?}");
    }

    /// A coordinator told `Moved` unlocks what it held, takes the new
    /// members, and locks again: an operation still reading starts over,
    /// one whose WRITE had left writes the same tag again without reading.
    #[test]
    fn a_moved_coordinator_relocks_and_a_write_in_flight_keeps_its_tag() {
        let mut c = coord(3);
        let mut out = O::new();
        let w = writing(&mut c, put(b"x"), &[1, 2], &mut out);
        let Some((_, Msg::Write { tag, .. })) = sends(&mut out).pop() else {
            panic!("a write")
        };
        let moved = Msg::Moved {
            lock: w,
            config: Config::new(4, vec![2, 3, 4]),
        };
        c.handle(T0, Peer::Node(1), moved.clone(), &mut out);
        assert_eq!(c.epoch(), 4);
        let s = sends(&mut out);
        let unlocks: Vec<_> = s
            .iter()
            .filter(|(_, m)| matches!(m, Msg::Unlock { .. }))
            .collect();
        assert_eq!(
            to_ids(&unlocks.iter().map(|x| (*x).clone()).collect::<Vec<_>>()),
            vec![1, 2]
        );
        let relock: Vec<_> = (s.iter())
            .filter(|(_, m)| matches!(m, Msg::LockReq { epoch: 4, .. }))
            .cloned()
            .collect();
        assert_eq!(to_ids(&relock), vec![2, 3, 4]);
        let Msg::LockReq { lock: l2, .. } = relock[0].1 else {
            unreachable!()
        };
        assert_ne!(l2, w, "a fresh round");
        c.handle(T0, Peer::Node(1), moved, &mut out);
        assert!(out.is_empty(), "the same move again changes nothing");
        for n in [3, 4] {
            let g = Msg::LockGranted {
                lock: l2,
                key: key(),
            };
            c.handle(T0, Peer::Node(n), g, &mut out);
        }
        let s = sends(&mut out);
        assert_eq!(to_ids(&s), vec![3, 4], "no READ: the WRITE again");
        for (_, m) in &s {
            assert!(
                matches!(m, Msg::Write { tag: t, epoch: 4, .. } if *t == tag),
                "{m:?}"
            );
        }
        for n in [3, 4] {
            c.handle(T0, Peer::Node(n), Msg::Ack { lock: l2 }, &mut out);
        }
        let cmds: Vec<_> = out.drain().collect();
        assert!(
            cmds.iter().any(|c| matches!(
                c,
                crate::protocol::contract::Command::Reply {
                    resp: Response::Done,
                    ..
                }
            )),
            "{cmds:?}"
        );
    }

    /// A put whose WRITE left in the old configuration and that finds no
    /// lock quorum in the new one ends unknown, not refused.
    #[test]
    fn a_moved_write_that_cannot_relock_is_unknown() {
        let cfg = CoordinatorConfig {
            lock_retry: crate::protocol::lease_lock::LockRetry::None,
            ..Default::default()
        };
        let mut c = coord_with(3, cfg);
        let mut out = O::new();
        let w = writing(&mut c, put(b"x"), &[1, 2], &mut out);
        let config = Config::new(1, vec![1, 2, 3]);
        c.handle(T0, Peer::Node(1), Msg::Moved { lock: w, config }, &mut out);
        let Some((_, Msg::LockReq { lock: l2, .. })) = sends(&mut out).pop() else {
            panic!("relock")
        };
        for n in [1, 2] {
            c.handle(T0, Peer::Node(n), Msg::LockDenied { lock: l2 }, &mut out);
        }
        let cmds: Vec<_> = out.drain().collect();
        let err = cmds.iter().find_map(|c| match c {
            crate::protocol::contract::Command::Reply {
                resp: Response::Failed(e),
                ..
            } => Some(e.clone()),
            _ => None,
        });
        let err = err.expect("answered");
        assert!(!err.is_definite(), "{err:?}");
    }

    /// Records of the configuration survive a restart; a configuration a
    /// coordinator cannot use (no member, an id past 63) is refused.
    #[test]
    fn the_configuration_survives_a_restart_and_a_bad_one_is_refused() {
        let mut n = node(2);
        let mut out = O::new();
        let config = Config::new(1, vec![2, 3, 4]);
        change(
            &mut n,
            1,
            ChangeMsg::Install {
                config,
                entries: vec![],
            },
            &mut out,
        );
        let metas: Vec<_> = (out.drain())
            .filter_map(|c| match c {
                crate::protocol::contract::Command::Persist(
                    r @ crate::protocol::contract::Record::Meta { .. },
                ) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(metas.len(), 1);
        let mut back = node(2);
        for r in metas {
            back.restore(r);
        }
        assert_eq!(back.changes.epochs.installed, Config::new(1, vec![2, 3, 4]));
        let mut c = coord(3);
        for bad in [Config::new(5, vec![]), Config::new(5, vec![2, 64])] {
            c.adopt(T0, &bad, &mut out);
        }
        assert_eq!((c.epoch(), c.counters.misrouted), (0, 2));
    }

    /// Deliver every message between `nodes` (ids 1..) until none is left.
    fn settle(nodes: &mut [LeaseNode], from: NodeId, mut out: O) {
        use crate::protocol::contract::Command;
        let mut queue: std::collections::VecDeque<(NodeId, Peer, Msg)> = (out.drain())
            .filter_map(|c| match c {
                Command::Send { to, msg } => Some((from, to, msg)),
                _ => None,
            })
            .collect();
        let mut steps = 0;
        while let Some((at, to, msg)) = queue.pop_front() {
            steps += 1;
            assert!(steps < 10_000, "does not settle");
            let Peer::Node(t) = to else { continue };
            let mut o = O::new();
            nodes[t as usize - 1].on_msg(T0, Peer::Node(at), msg, &mut o);
            for c in o.drain() {
                if let Command::Send { to, msg } = c {
                    queue.push_back((t, to, msg));
                }
            }
        }
    }

    /// `quorumkv member replace 1 4` between lease-lock servers: the
    /// epoch it decides, every member installs it with the old epoch's
    /// registers, and the proposer reports it done.
    #[test]
    fn a_change_runs_end_to_end_between_servers() {
        let mut nodes: Vec<LeaseNode> = (1..=4).map(node).collect();
        let mut out = O::new();
        let v = (Tag { ts: 3, writer: 7 }, Some(Bytes::from_static(b"v")));
        for n in &mut nodes[..2] {
            n.replica.merge(vec![(key(), v.0, v.1.clone())], &mut out);
        }
        out.drain();
        assert_eq!(nodes[0].propose(T0, &[2, 3, 4], &mut out), Ok(1));
        settle(&mut nodes, 1, out);
        for n in &nodes {
            assert_eq!(n.changes.epochs.installed, Config::new(1, vec![2, 3, 4]));
        }
        for n in &nodes[1..] {
            assert_eq!(n.replica.get(b"k").unwrap().tag, v.0, "n{}", n.id);
        }
        assert_eq!(nodes[0].changes.changes_done, 1);
        assert_eq!(nodes[0].role(), "learner");
        assert_eq!(nodes[3].membership_view().voters, vec![2, 3, 4]);
    }

    /// Each lease-lock reconfiguration bug is the shared code's, and no
    /// other bug is.
    #[test]
    fn the_reconfiguration_bugs_map_to_the_shared_ones() {
        assert_eq!(
            change_bug(Some(Bug::ReconfigNoFreeze)),
            Some(ChangeBug::NoFreeze)
        );
        assert_eq!(
            change_bug(Some(Bug::ReconfigTransferFromOne)),
            Some(ChangeBug::TransferFromOne)
        );
        assert_eq!(
            change_bug(Some(Bug::ReconfigServeBeforeTransfer)),
            Some(ChangeBug::InstallOnAccept)
        );
        assert_eq!(
            change_bug(Some(Bug::ReconfigIgnoreAccepted)),
            Some(ChangeBug::IgnoreAccepted)
        );
        assert_eq!(change_bug(Some(Bug::MinorityQuorum)), None);
        assert_eq!(change_bug(None), None);
    }
}
