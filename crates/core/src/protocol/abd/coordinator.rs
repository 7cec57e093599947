//! The coordinator role: runs each client operation in two quorum phases.

use super::bugs::InjectedBug;
use super::counters::Counters;
use super::msg::{Msg, Timer};
use super::thrifty::Thrifty;
use crate::protocol::contract::{Out, Protocol};
use crate::protocol::reconfig::Config;
use crate::quorum::{majority, QuorumStatus, QuorumTracker};
use crate::types::{
    ClientRef, NodeId, OpError, Peer, Request, Response, Tag, Time, TAG_SPACE_EXHAUSTED,
};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

/// Settings of a coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Fail an operation that has no quorum after this long. Its outcome is
    /// then unknown to the client: the store phase may still complete.
    pub op_timeout: Duration,
    /// Resend a phase's message to replicas that have not answered after this long.
    pub retry_interval: Duration,
    /// Skip the write-back when the query quorum agrees on one tag.
    pub fast_read: bool,
    /// Send each phase to Q replicas only (rotating, avoiding replicas that
    /// recently failed to answer) instead of all N; fall back to all after
    /// `thrifty_fallback`. Fewer messages per operation; a slow or dead
    /// replica costs the operations that picked it one fallback delay.
    pub thrifty: bool,
    pub thrifty_fallback: Duration,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            op_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_millis(100),
            fast_read: true,
            thrifty: false,
            thrifty_fallback: Duration::from_millis(5),
        }
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Get,
    /// Put (Some) or delete (None).
    Write(Option<Bytes>),
}

#[derive(Clone, Debug)]
enum Phase {
    /// Phase 1: collecting tags. `lowest`/`highest` tag seen so far and the
    /// value of the highest.
    Query {
        votes: QuorumTracker,
        lowest: Tag,
        highest: Tag,
        value: Option<Bytes>,
    },
    /// Phase 2: storing `(tag, value)`; reply `result` once a quorum acked,
    /// or first store `then` (a write's own tag and value) after this
    /// catch-up write-back (see `finish_query`).
    Store {
        acks: QuorumTracker,
        tag: Tag,
        value: Option<Bytes>,
        result: Response,
        then: Option<(Tag, Option<Bytes>)>,
    },
}

#[derive(Clone, Debug)]
struct Pending {
    client: ClientRef,
    key: Bytes,
    kind: Kind,
    phase: Phase,
    deadline: Time,
    retry_at: Time,
    /// Replicas the current phase was sent to (bit i = member id i).
    asked: u64,
}

/// The first op id of a restarted node's coordinator with writer id `id`
/// (see [`AbdNode::with_writer`]): a hash of it, so that a late reply to the
/// previous incarnation's op is never taken for one of this incarnation's.
/// With op ids restarting at 1, a stale `QueryReply` for key A completed a
/// new operation on key B (found by `quorumkv sim`).
pub(super) fn first_op(id: u64) -> u64 {
    let mut state = id;
    crate::rng::splitmix64(&mut state)
}

/// Runs ABD operations on behalf of clients. `id` is the writer id that goes
/// into tags: it must be unique among all coordinators of a cluster.
#[derive(Debug)]
pub struct Coordinator {
    pub(super) id: u64,
    /// The configuration epoch its operations run in (`reconfig.rs`).
    pub(super) epoch: u64,
    pub(super) members: Vec<NodeId>,
    pub(super) quorum: usize,
    pub(super) cfg: CoordinatorConfig,
    pub(super) bug: Option<InjectedBug>,
    pub(super) next_op: u64,
    /// Highest ts this coordinator has put into a tag (tags stay unique).
    last_ts: u64,
    /// Ordered: the retransmit loop in `tick` iterates it and its order
    /// reaches the output (a seed must replay byte for byte).
    pending: BTreeMap<u64, Pending>,
    ticking: bool,
    thrifty: Thrifty,
    pub counters: Counters,
    /// Operations completed since start (for INFO / stats).
    pub completed: u64,
    pub timed_out: u64,
}

impl Coordinator {
    pub fn new(id: u64, members: Vec<NodeId>, cfg: CoordinatorConfig) -> Self {
        assert!(
            !members.is_empty(),
            "an ABD coordinator needs at least one replica"
        );
        let quorum = majority(members.len());
        Coordinator {
            id,
            epoch: 0,
            members,
            quorum,
            cfg,
            bug: None,
            next_op: 1,
            last_ts: 0,
            pending: BTreeMap::new(),
            ticking: false,
            thrifty: Thrifty::new(),
            counters: Counters::default(),
            completed: 0,
            timed_out: 0,
        }
    }

    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        if bug == Some(InjectedBug::MinorityQuorum) {
            self.quorum = (self.members.len() / 2).max(1);
        }
        self
    }

    pub fn quorum(&self) -> usize {
        self.quorum
    }
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Run in `config` from now on, if it is newer: every operation in
    /// flight runs its current phase again under a fresh op id, so that no
    /// reply of the old epoch counts in the new one (a quorum of the new
    /// members need not be one of the old). A store keeps its tag: its
    /// value may have been read already, and a fresh tag would let it
    /// overwrite a later write (found by `quorumkv sim`, seed 90).
    pub fn adopt(&mut self, now: Time, config: &Config, out: &mut Out<Msg, Timer>) {
        // Ids past 63 would not fit the quorum bitsets.
        let fits = config.members.iter().all(|&m| m < 64);
        if config.members.is_empty() || !fits {
            self.counters.misrouted += 1;
            return;
        }
        if config.epoch <= self.epoch {
            return; // another replica's answer to the same move
        }
        self.epoch = config.epoch;
        self.members = config.members.clone();
        self.quorum = majority(self.members.len());
        if self.bug == Some(InjectedBug::MinorityQuorum) {
            self.quorum = (self.members.len() / 2).max(1);
        }
        let ops: Vec<u64> = self.pending.keys().copied().collect();
        for op in ops {
            let p = self.pending.remove(&op).expect("present");
            let fresh = self.next_op;
            self.next_op = self.next_op.wrapping_add(1);
            let store = match &p.phase {
                Phase::Query { .. } => None,
                Phase::Store {
                    tag,
                    value,
                    result,
                    then,
                    ..
                } => Some(((*tag, value.clone()), result.clone(), then.clone())),
            };
            self.pending.insert(fresh, p);
            match store {
                None => self.restart(now, fresh, out),
                Some((pair, result, then)) => self.enter_store(now, fresh, pair, result, then, out),
            }
        }
    }

    /// Send operation `op`'s query and (re)enter its query phase.
    fn restart(&mut self, now: Time, op: u64, out: &mut Out<Msg, Timer>) {
        let asked = self.targets(now, None);
        let retry_at = now.saturating_add(self.first_retry());
        let (phase, epoch) = (self.query_phase(), self.epoch);
        let p = self.pending.get_mut(&op).expect("present");
        let key = p.key.clone();
        p.asked = asked;
        p.retry_at = retry_at;
        p.phase = phase;
        self.send_to(asked, &Msg::Query { op, key, epoch }, out);
    }

    /// A query phase with nothing heard yet.
    fn query_phase(&self) -> Phase {
        Phase::Query {
            votes: QuorumTracker::new(self.members.len(), self.quorum),
            lowest: Tag {
                ts: u64::MAX,
                writer: u64::MAX,
            },
            highest: Tag::ZERO,
            value: None,
        }
    }
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// How long a phase waits before re-sending to the replicas that have
    /// not answered (in thrifty mode: to every replica not yet answered).
    fn first_retry(&self) -> Duration {
        if self.cfg.thrifty {
            self.cfg.thrifty_fallback
        } else {
            self.cfg.retry_interval
        }
    }

    /// The replicas a new phase goes to ([`Thrifty::targets`]).
    fn targets(&mut self, now: Time, prefer: Option<u64>) -> u64 {
        (self.thrifty).targets(self.cfg.thrifty, &self.members, self.quorum, now, prefer)
    }

    /// Start an operation for `client`.
    pub fn start(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        let (key, kind) = match req {
            Request::Get { key } => (key, Kind::Get),
            Request::Put { key, value } => (key, Kind::Write(Some(value))),
            Request::Delete { key } => (key, Kind::Write(None)),
            req @ Request::Znode(_) => return out.reply(client, req.refusal().expect("not KV")),
        };
        let op = self.next_op;
        // An op id only names an operation among this coordinator's own
        // (it starts at a hash, `first_op`): wrapping keeps it unique for
        // 2^64 operations and orders nothing, unlike a tag's ts.
        self.next_op = self.next_op.wrapping_add(1);
        let deadline = now.saturating_add(self.cfg.op_timeout);
        let pending = Pending {
            client,
            key,
            kind,
            phase: self.query_phase(),
            deadline,
            retry_at: now,
            asked: 0,
        };
        self.pending.insert(op, pending);
        self.restart(now, op, out);
        self.arm_tick(out);
    }

    fn send_to(&self, asked: u64, msg: &Msg, out: &mut Out<Msg, Timer>) {
        for &n in &self.members {
            if asked & (1 << n) != 0 {
                out.send(Peer::Node(n), msg.clone());
            }
        }
    }

    fn arm_tick(&mut self, out: &mut Out<Msg, Timer>) {
        if !self.ticking {
            self.ticking = true;
            out.set_timer(self.tick_interval(), Timer::Tick);
        }
    }

    fn tick_interval(&self) -> Duration {
        self.first_retry()
            .min(self.cfg.retry_interval)
            .min(self.cfg.op_timeout)
            / 2
    }

    fn on_query_reply(
        &mut self,
        now: Time,
        from: NodeId,
        op: u64,
        tag: Tag,
        value: Option<Bytes>,
        out: &mut Out<Msg, Timer>,
    ) {
        let Some(p) = self.pending.get_mut(&op) else {
            self.counters.stale_replies += 1;
            return;
        };
        let Phase::Query {
            votes,
            lowest,
            highest,
            value: best,
        } = &mut p.phase
        else {
            // A query reply arriving during the store phase: surplus.
            self.counters.stale_replies += 1;
            return;
        };
        match votes.record(from) {
            QuorumStatus::Duplicate => {
                self.counters.duplicate_replies += 1;
                return;
            }
            QuorumStatus::AlreadyWon => {
                unreachable!("the phase changes as soon as the quorum is won")
            }
            QuorumStatus::Pending | QuorumStatus::Won => {}
        }
        *lowest = (*lowest).min(tag);
        if tag > *highest || votes.count() == 1 {
            *highest = tag;
            *best = value;
        }
        if !votes.won() {
            return;
        }
        let agreed = if self.bug == Some(InjectedBug::FastReadTsOnly) {
            lowest.ts == highest.ts
        } else {
            *lowest == *highest
        };
        let (lowest, highest) = (*lowest, (*highest, best.take()));
        self.finish_query(now, op, agreed, lowest, highest, out);
    }

    /// The query quorum is in with the `highest` (tag, value) it saw: a get
    /// returns (fast read, when the quorum `agreed` on one tag) or writes it
    /// back; a put / delete stores its value under a fresh, higher tag.
    fn finish_query(
        &mut self,
        now: Time,
        op: u64,
        agreed: bool,
        lowest: Tag,
        (max_tag, max_value): (Tag, Option<Bytes>),
        out: &mut Out<Msg, Timer>,
    ) {
        match self.pending[&op].kind.clone() {
            Kind::Get => {
                let skip =
                    self.bug == Some(InjectedBug::NoWriteBack) || (self.cfg.fast_read && agreed);
                if skip {
                    let p = self.pending.remove(&op).expect("present");
                    self.completed += 1;
                    out.reply(p.client, Response::Value(max_value));
                } else {
                    let result = Response::Value(max_value.clone());
                    self.enter_store(now, op, (max_tag, max_value), result, None, out);
                }
            }
            Kind::Write(value) => {
                // A tag must name one value: never reuse a ts this
                // coordinator already issued, even when the query quorum did
                // not see it (a concurrent write through the same proxy, or
                // an earlier write that timed out with its store in flight).
                let last_ts = match self.bug {
                    Some(InjectedBug::ReuseTs) => 0,
                    _ => self.last_ts,
                };
                let floor = Tag {
                    ts: max_tag.ts.max(last_ts),
                    writer: 0,
                };
                // Checked (`Tag::next`): a key whose tag space is used up
                // takes no newer write. Refused before any store left, so
                // the write had no effect (issue 31: `ts + 1` wrapped to 0,
                // and every later write lost to the forged tag).
                let Some(tag) = floor.next(self.id) else {
                    let p = self.pending.remove(&op).expect("present");
                    self.counters.tag_space_exhausted += 1;
                    let why = OpError::refused(TAG_SPACE_EXHAUSTED);
                    return out.reply(p.client, Response::Failed(why));
                };
                self.last_ts = tag.ts;
                if tag.jumps_too_far(lowest) {
                    // A replica of the quorum would refuse the new tag: the
                    // highest is more than `MAX_TAG_JUMP` ahead of it (one
                    // forged store can do that). Write the highest back
                    // first, as a get would, so the replicas catch up; one
                    // more round, only then. Without it, writes that see
                    // the forged tag time out until a get writes it back.
                    self.counters.catch_up_write_backs += 1;
                    let then = Some((tag, value));
                    let catch_up = (max_tag, max_value);
                    return self.enter_store(now, op, catch_up, Response::Done, then, out);
                }
                self.enter_store(now, op, (tag, value), Response::Done, None, out);
            }
        }
    }

    fn enter_store(
        &mut self,
        now: Time,
        op: u64,
        (tag, value): (Tag, Option<Bytes>),
        result: Response,
        then: Option<(Tag, Option<Bytes>)>,
        out: &mut Out<Msg, Timer>,
    ) {
        let voters = match &self.pending[&op].phase {
            Phase::Query { votes, .. } => votes.members(),
            // After a catch-up write-back: the replicas that took it.
            Phase::Store { acks, .. } => acks.members(),
        };
        let asked = self.targets(now, Some(voters));
        let retry_at = now.saturating_add(self.first_retry());
        let p = self.pending.get_mut(&op).expect("present");
        let msg = Msg::Store {
            op,
            key: p.key.clone(),
            tag,
            value: value.clone(),
            epoch: self.epoch,
        };
        p.asked = asked;
        p.retry_at = retry_at;
        self.send_to(asked, &msg, out);
        let p = self.pending.get_mut(&op).expect("present");
        p.phase = Phase::Store {
            acks: QuorumTracker::new(self.members.len(), self.quorum),
            tag,
            value,
            result,
            then,
        };
    }

    fn on_store_ack(&mut self, now: Time, from: NodeId, op: u64, out: &mut Out<Msg, Timer>) {
        let Some(p) = self.pending.get_mut(&op) else {
            self.counters.stale_replies += 1;
            return;
        };
        let Phase::Store { acks, .. } = &mut p.phase else {
            // An ack can only answer a Store we sent, so it cannot arrive in phase 1.
            self.counters.misrouted += 1;
            return;
        };
        match acks.record(from) {
            QuorumStatus::Duplicate => self.counters.duplicate_replies += 1,
            QuorumStatus::Pending => {}
            QuorumStatus::AlreadyWon => unreachable!("the op leaves as soon as the quorum is won"),
            QuorumStatus::Won => {
                // A catch-up write-back is on a quorum: now the write's own
                // store, under a fresh op id. A `StoreAck` names no tag, so
                // a late or duplicated ack of the write-back must not count
                // for it: under the old id it is a stale reply.
                if let Phase::Store {
                    then: then @ Some(_),
                    result,
                    ..
                } = &mut p.phase
                {
                    let (own, result) = (then.take().expect("matched"), result.clone());
                    let p = self.pending.remove(&op).expect("present");
                    let fresh = self.next_op;
                    self.next_op = self.next_op.wrapping_add(1);
                    self.pending.insert(fresh, p);
                    return self.enter_store(now, fresh, own, result, None, out);
                }
                let p = self.pending.remove(&op).expect("present");
                let Phase::Store { result, .. } = p.phase else {
                    unreachable!()
                };
                self.completed += 1;
                out.reply(p.client, result);
            }
        }
    }

    /// Handle a reply addressed to the coordinator role.
    pub fn handle(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        let Peer::Node(node) = from else {
            // Replies only come from replicas.
            self.counters.misrouted += 1;
            return;
        };
        if !self.members.contains(&node) {
            // Not a replica of this cluster: it counts in no quorum (and
            // an id past 63 would not fit the quorum bitsets).
            self.counters.misrouted += 1;
            return;
        }
        match msg {
            Msg::QueryReply { op, tag, value } => {
                self.on_query_reply(now, node, op, tag, value, out)
            }
            Msg::StoreAck { op } => self.on_store_ack(now, node, op, out),
            // A replica of our configuration has moved on: follow it.
            Msg::Moved { config, .. } => self.adopt(now, &config, out),
            _ => self.counters.misrouted += 1,
        }
    }

    /// The periodic tick: expire operations past their deadline, retransmit
    /// the current phase to replicas that have not answered.
    pub fn tick(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.ticking = false;
        let mut expired = Vec::new();
        let epoch = self.epoch;
        for (&op, p) in self.pending.iter_mut() {
            if now >= p.deadline {
                expired.push(op);
                continue;
            }
            if now < p.retry_at {
                continue;
            }
            p.retry_at = now.saturating_add(self.cfg.retry_interval);
            let answered = match &p.phase {
                Phase::Query { votes, .. } => votes.members(),
                Phase::Store { acks, .. } => acks.members(),
            };
            // Asked but silent: avoid that replica for a while (thrifty).
            for &n in &self.members {
                if p.asked & !answered & (1 << n) != 0 {
                    self.thrifty.avoid(n, now);
                }
            }
            p.asked = self.members.iter().fold(0u64, |m, &n| m | 1 << n);
            let (votes, msg) = match &p.phase {
                Phase::Query { votes, .. } => (
                    votes,
                    Msg::Query {
                        op,
                        key: p.key.clone(),
                        epoch,
                    },
                ),
                Phase::Store {
                    acks, tag, value, ..
                } => (
                    acks,
                    Msg::Store {
                        op,
                        key: p.key.clone(),
                        tag: *tag,
                        value: value.clone(),
                        epoch,
                    },
                ),
            };
            for &n in &self.members {
                if !votes.has(n) {
                    out.send(Peer::Node(n), msg.clone());
                }
            }
        }
        for op in expired {
            let p = self.pending.remove(&op).expect("present");
            let (got, need) = match &p.phase {
                Phase::Query { votes, .. } => (votes.count(), votes.need()),
                Phase::Store { acks, .. } => (acks.count(), acks.need()),
            };
            self.timed_out += 1;
            out.reply(p.client, Response::Failed(OpError::Timeout { got, need }));
        }
        if !self.pending.is_empty() {
            self.arm_tick(out);
        }
    }
}

impl Protocol for Coordinator {
    type Msg = Msg;
    type Timer = Timer;
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.start(now, client, req, out);
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        self.handle(now, from, msg, out);
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Tick => self.tick(now, out),
            Timer::Sync | Timer::Reconfig => {} // only servers
        }
    }
    fn status(&self) -> String {
        format!(
            "coordinator id={} in_flight={} completed={} timed_out={}",
            self.id,
            self.pending.len(),
            self.completed,
            self.timed_out
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::abd::Replica;
    use crate::protocol::contract::Command;

    #[test]
    fn get_queries_all_and_waits_for_a_majority() {
        let mut c = slow_read_coord(5);
        let mut out = O::new();
        start_get(&mut c, 1, &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 5, "phase 1 goes to all N replicas");
        assert!(s.iter().all(|(_, m)| matches!(m, Msg::Query { op: 1, .. })));
        qreply(&mut c, 1, 1, 7, Some("a"), &mut out);
        qreply(&mut c, 2, 1, 7, Some("a"), &mut out);
        assert!(sends(&mut out).is_empty(), "2 of 5 is not a quorum");
        qreply(&mut c, 3, 1, 7, Some("a"), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 5, "a quorum of 3 starts the write-back to all");
        assert!(matches!(
            &s[0].1,
            Msg::Store {
                tag: Tag { ts: 1, writer: 7 },
                ..
            }
        ));
    }

    #[test]
    fn get_returns_the_value_of_the_highest_tag_and_writes_it_back() {
        let mut c = slow_read_coord(3);
        let mut out = started_get(&mut c, 1);
        qreply(&mut c, 1, 2, 5, Some("old"), &mut out);
        // Same ts, higher writer id wins the tie (lexicographic tag order).
        qreply(&mut c, 3, 2, 9, Some("new"), &mut out);
        let s = sends(&mut out);
        let Msg::Store { tag, value: v, .. } = &s[0].1 else {
            panic!("expected write-back")
        };
        assert_eq!(*tag, Tag { ts: 2, writer: 9 });
        assert_eq!(v.as_deref(), Some(&b"new"[..]));
        assert!(
            replies(&mut out).is_empty(),
            "no answer before the write-back quorum"
        );
        c.handle(T0, Peer::Node(2), Msg::StoreAck { op: 1 }, &mut out);
        assert!(replies(&mut out).is_empty());
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(replies(&mut out), vec![value(b"new")]);
    }

    #[test]
    fn fast_read_skips_write_back_only_when_the_quorum_agrees() {
        let mut c = coord(3);
        let mut out = started_get(&mut c, 1);
        qreply(&mut c, 1, 4, 1, Some("v"), &mut out);
        qreply(&mut c, 2, 4, 1, Some("v"), &mut out);
        assert_eq!(replies(&mut out), vec![value(b"v")]);

        let mut c = coord(3);
        start_get(&mut c, 1, &mut out);
        out.drain();
        qreply(&mut c, 1, 4, 1, Some("v"), &mut out);
        qreply(&mut c, 2, 3, 1, Some("u"), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 3, "disagreeing quorum must write back");
        assert!(s.iter().all(|(_, m)| matches!(
            m,
            Msg::Store {
                tag: Tag { ts: 4, .. },
                ..
            }
        )));
    }

    #[test]
    fn put_uses_max_ts_plus_one_and_its_own_id() {
        let mut c = coord(3);
        let mut out = started(&mut c, 9, put(b"x"));
        qreply(&mut c, 2, 7, 3, None, &mut out);
        qreply(&mut c, 3, 5, 4, None, &mut out);
        let s = sends(&mut out);
        assert!(s.iter().all(|(_, m)| matches!(
            m,
            Msg::Store {
                tag: Tag { ts: 8, writer: 100 },
                ..
            }
        )));
        c.handle(T0, Peer::Node(1), Msg::StoreAck { op: 1 }, &mut out);
        c.handle(T0, Peer::Node(2), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(replies(&mut out), vec![Response::Done]);
    }

    #[test]
    fn duplicate_and_late_replies_are_counted_not_used() {
        let mut c = coord(3);
        let mut out = started(&mut c, 1, put(b"x"));
        qreply(&mut c, 1, 1, 1, None, &mut out);
        qreply(&mut c, 1, 1, 1, None, &mut out);
        assert!(
            sends(&mut out).is_empty(),
            "one replica twice is not a quorum"
        );
        assert_eq!(c.counters.duplicate_replies, 1);
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(c.counters.misrouted, 1, "an ack cannot answer phase 1");
        assert_eq!(c.in_flight(), 1);
        qreply(&mut c, 2, 1, 1, None, &mut out);
        out.drain();
        // Replica 3's query reply arrives once the store phase began.
        qreply(&mut c, 3, 1, 1, None, &mut out);
        assert_eq!(c.counters.stale_replies, 1);
        c.handle(T0, Peer::Node(1), Msg::StoreAck { op: 1 }, &mut out);
        c.handle(T0, Peer::Node(1), Msg::StoreAck { op: 1 }, &mut out);
        assert!(replies(&mut out).is_empty());
        assert_eq!(c.counters.duplicate_replies, 2);
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(replies(&mut out).len(), 1);
        // The third replica's late answers arrive after completion.
        qreply(&mut c, 3, 1, 1, None, &mut out);
        c.handle(T0, Peer::Node(2), Msg::StoreAck { op: 1 }, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.counters.stale_replies, 3);
        assert_eq!(c.in_flight(), 0, "completed ops leave the pending table");
        assert_eq!((c.completed, c.timed_out), (1, 0));
    }

    #[test]
    fn no_quorum_times_out_and_retransmits_meanwhile() {
        let mut c = coord(3);
        let mut out = started_get(&mut c, 1);
        qreply(&mut c, 1, 0, 0, None, &mut out);
        c.tick(Time(50_000), &mut out);
        assert!(sends(&mut out).is_empty(), "not before the retry interval");
        c.tick(Time(100_000), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 2, "retransmit to the two silent replicas only");
        c.tick(Time(150_000), &mut out);
        assert!(sends(&mut out).is_empty(), "next retry at 200 ms");
        c.tick(Time(2_000_000), &mut out);
        assert_eq!(
            replies(&mut out),
            vec![Response::Failed(OpError::Timeout { got: 1, need: 2 })]
        );
        assert_eq!(c.in_flight(), 0);
    }

    /// One retransmit tick at a time, at half the retry interval, re-armed
    /// only while operations are pending; outcomes are counted.
    #[test]
    fn the_tick_runs_while_operations_are_pending() {
        let mut c = coord(3); // retry 100 ms, timeout 2 s
        let mut out = O::new();
        let tick = vec![(Duration::from_millis(50), Timer::Tick)];
        start_get(&mut c, 1, &mut out);
        assert_eq!(timers(&mut out), tick);
        start_get(&mut c, 2, &mut out);
        assert!(timers(&mut out).is_empty(), "a tick is already pending");
        c.on_timer(Time(50_000), Timer::Tick, &mut out);
        assert_eq!(timers(&mut out), tick, "re-armed: operations pending");
        c.tick(Time(2_000_000), &mut out);
        assert!(timers(&mut out).is_empty(), "all expired: no more ticks");
        assert_eq!((c.timed_out, c.completed), (2, 0));
        c.start(
            Time(2_000_000),
            ClientRef::local(3),
            Request::Get { key: key() },
            &mut out,
        );
        assert_eq!(timers(&mut out), tick, "armed again for new work");
        let op = c.next_op - 1;
        for n in [1, 2] {
            let reply = Msg::QueryReply {
                op,
                tag: Tag::ZERO,
                value: None,
            };
            c.handle(T0, Peer::Node(n), reply, &mut out);
        }
        assert_eq!((c.timed_out, c.completed), (2, 1));
        c.handle(T0, Peer::Conn(4), Msg::StoreAck { op }, &mut out);
        c.handle(
            T0,
            Peer::Node(3),
            Msg::Query {
                op,
                key: key(),
                epoch: 0,
            },
            &mut out,
        );
        assert_eq!(c.counters.misrouted, 2);
    }

    /// A key whose highest tag is at `ts = u64::MAX` takes no newer write:
    /// the put is refused definitely, before any store leaves.
    #[test]
    fn a_write_after_the_last_tag_is_refused_not_wrapped() {
        let mut c = coord(3);
        let mut out = started(&mut c, 9, put(b"x"));
        qreply(&mut c, 1, u64::MAX, 999, Some("forged"), &mut out);
        qreply(&mut c, 2, 3, 1, None, &mut out);
        let cmds = out.commands();
        assert_eq!(cmds.len(), 1, "a reply and no Store: {cmds:?}");
        assert_eq!(
            replies(&mut out),
            vec![Response::Failed(OpError::refused(TAG_SPACE_EXHAUSTED))]
        );
        assert_eq!((c.in_flight(), c.counters.tag_space_exhausted), (0, 1));
        assert_eq!(c.last_ts, 0, "no ts was issued");
    }

    /// A `Store` of "forged" at `[ts, 999]` sent by a client connection
    /// straight to replica 1 (issue 31); what the replica answers.
    fn forge(net: &mut Net, ts: u64) -> O {
        let tag = Tag { ts, writer: 999 };
        let value = Some(Bytes::from_static(b"forged"));
        let forged = Msg::Store {
            op: 1,
            key: key(),
            tag,
            value,
            epoch: 0,
        };
        let mut out = O::new();
        net.replicas[0].handle(Peer::Conn(66), forged, &mut out);
        out
    }

    /// Issue 31 end to end: a forged `Store` at `ts = u64::MAX` (or a huge
    /// jump) sent straight to one replica leaves the key writable, and the
    /// next put through a coordinator is read back, not the forged value.
    #[test]
    fn a_forged_max_tag_leaves_the_key_writable_and_linearizable() {
        for forged_ts in [u64::MAX, u64::MAX / 2, 2 + crate::types::MAX_TAG_JUMP] {
            let mut net = Net::new(3);
            let mut c = coord(3);
            assert_eq!(net.run(&mut c, put(b"first")), Response::Done);
            assert!(
                forge(&mut net, forged_ts).is_empty(),
                "the forger gets no ack"
            );
            assert_eq!(net.run(&mut c, put(b"second")), Response::Done);
            let get = Request::Get { key: key() };
            let second = value(b"second");
            assert_eq!(net.run(&mut c, get.clone()), second);
            let mut other = Coordinator::new(200, vec![1, 2, 3], CoordinatorConfig::default());
            assert_eq!(net.run(&mut other, get), second);
            for r in &net.replicas {
                assert_eq!(r.get(b"k").unwrap().0, Tag { ts: 2, writer: 100 });
            }
        }
    }

    /// A forged store at exactly `MAX_TAG_JUMP` ahead is taken by the one
    /// replica it reaches. The next write sees it and would jump more than
    /// `MAX_TAG_JUMP` past the other replicas, which would refuse it: it
    /// writes the highest back first, then its own tag, and completes.
    #[test]
    fn a_write_past_a_maximal_jump_writes_the_highest_back_first() {
        use crate::types::MAX_TAG_JUMP;
        let mut net = Net::new(3);
        let mut c = coord(3);
        assert_eq!(net.run(&mut c, put(b"first")), Response::Done);
        let mut out = forge(&mut net, 1 + MAX_TAG_JUMP);
        assert_eq!(sends(&mut out).len(), 1, "within the bound: taken");
        assert_eq!(net.run(&mut c, put(b"second")), Response::Done);
        assert_eq!(c.counters.catch_up_write_backs, 1);
        let stores: Vec<_> = (net.sent.iter())
            .filter_map(|m| match m {
                Msg::Store { op, tag, .. } if tag.ts > 1 => Some((*op, tag.ts)),
                _ => None,
            })
            .collect();
        let (catch_up, own) = (stores[0], stores[stores.len() - 1]);
        assert_eq!((catch_up.1, own.1), (1 + MAX_TAG_JUMP, 2 + MAX_TAG_JUMP));
        assert_ne!(catch_up.0, own.0, "a fresh op id: acks name no tag");
        // A late ack of the catch-up is stale, not an ack of the write.
        let mut out = O::new();
        let late = Msg::StoreAck { op: catch_up.0 };
        c.handle(T0, Peer::Node(3), late, &mut out);
        assert!(out.is_empty());
        let own = Tag {
            ts: 2 + MAX_TAG_JUMP,
            writer: 100,
        };
        for r in &net.replicas {
            assert_eq!(r.get(b"k").unwrap().0, own);
            assert_eq!(r.counters.tag_jumps_refused, 0);
        }
        let get = Request::Get { key: key() };
        let second = value(b"second");
        assert_eq!(net.run(&mut c, get), second);
        assert_eq!(net.run(&mut c, put(b"third")), Response::Done);
        assert_eq!(c.counters.catch_up_write_backs, 1, "only when needed");
    }

    /// A reply from an id that is no replica of the cluster (64 would not
    /// even fit the quorum bitset) counts in no quorum, and panics nothing.
    #[test]
    fn replies_from_outside_the_cluster_are_ignored() {
        let mut c = coord(3);
        let mut out = started(&mut c, 1, put(b"x"));
        for n in [4, 64, u32::MAX] {
            qreply(&mut c, n, 1, 1, None, &mut out);
            c.handle(T0, Peer::Node(n), Msg::StoreAck { op: 1 }, &mut out);
        }
        qreply(&mut c, 1, 1, 1, None, &mut out);
        assert!(out.is_empty(), "one replica is no quorum of 3");
        assert_eq!(c.counters.misrouted, 6);
    }

    #[test]
    fn delete_stores_a_tombstone() {
        let mut c = coord(1);
        let mut r = Replica::new(false);
        let mut out = O::new();
        let mut run = |c: &mut Coordinator, req| {
            c.start(T0, ClientRef::local(1), req, &mut out);
            loop {
                let mut progressed = false;
                for cmd in out.drain().collect::<Vec<_>>() {
                    match cmd {
                        Command::Send { msg, .. } => {
                            let mut o2 = O::new();
                            r.handle(Peer::Conn(0), msg, &mut o2);
                            for (_, m) in sends(&mut o2) {
                                c.handle(T0, Peer::Node(1), m, &mut out);
                                progressed = true;
                            }
                        }
                        Command::Reply { resp, .. } => return resp,
                        _ => {}
                    }
                }
                assert!(progressed, "operation stalled");
            }
        };
        assert_eq!(run(&mut c, put(b"v")), Response::Done);
        assert_eq!(run(&mut c, Request::Delete { key: key() }), Response::Done);
        assert_eq!(
            run(&mut c, Request::Get { key: key() }),
            Response::Value(None)
        );
    }
}
