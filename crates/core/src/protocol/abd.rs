//! ABD: the Attiya–Bar-Noy–Dolev multi-writer atomic register, one register
//! per key (seed 000 §3, seed 002 §3.1).
//!
//! Two roles:
//! * [`Replica`] stores `(tag, value)` per key and answers queries and stores.
//! * [`Coordinator`] runs one client operation in two phases against all N
//!   replicas, waiting each time for the first Q = ⌊N/2⌋+1 distinct replies:
//!   - get: **query** → max tag → **write-back** that (tag, value) → return value;
//!   - put / delete: **query** → tag = (max.ts + 1, my id) → **store** → done.
//!
//! Any two quorums intersect, so a completed store is seen by every later
//! query, and the write-back makes a returned value visible to every later
//! read (no read inversion).
//!
//! Decisions beyond the seeds (see the README, "Where we depart from the seeds"):
//! * Send to all N and take the first Q replies (seed 002), not "the first R
//!   servers" of the configuration (seed 000), which blocks on one slow server.
//! * Fast read: when the Q query replies all carry the same tag, that tag is
//!   already on a quorum and the write-back is skipped (one round trip).
//!   Switch off with [`CoordinatorConfig::fast_read`].
//! * Delete stores a tombstone (`value = None`) with a fresh tag.
//! * Lost messages are retransmitted to the replicas that have not answered;
//!   both replica handlers are idempotent, so duplicates are harmless.
//! * In durable mode a replica persists before it acknowledges a store.
//!
//! [`AbdNode`] puts a replica and a coordinator in one server, for thin
//! clients (RESP, CLI): the *proxy* mode. Client libraries run a bare
//! [`Coordinator`]: the *client-driven* mode the seeds built.

use crate::protocol::{LinkEvent, Out, Protocol, Record};
use crate::quorum::{majority, QuorumStatus, QuorumTracker};
use crate::types::{ClientRef, NodeId, OpError, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

// ---------------------------------------------------------------- messages

/// Messages between a coordinator and the replicas. `op` is chosen by the
/// coordinator and echoed back; it is unique per coordinator only, which is
/// enough because replies go back to the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1: "what tag and value do you hold for `key`?"
    Query { op: u64, key: Bytes },
    /// A replica's answer to `Query`.
    QueryReply {
        op: u64,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// Phase 2: "hold `value` at `tag` for `key`, unless you hold a newer tag."
    Store {
        op: u64,
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// A replica's acknowledgement of `Store` (sent whether or not it applied).
    StoreAck { op: u64 },
    /// A restarted replica that lost its state asks a peer for everything it holds.
    SyncRequest,
    /// A peer's whole store, answering `SyncRequest`.
    SyncReply {
        entries: Vec<(Bytes, Tag, Option<Bytes>)>,
    },
}

/// Timers of the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic while operations are pending: retransmit and expire them.
    Tick,
    /// Periodic while a restarted replica recovers: ask again.
    Sync,
}

/// Deliberate bugs for the simulator's self-test (`quorumkv sim
/// --inject-bug`). They exist so that tests can prove the simulator and the
/// checker catch a broken protocol. Never enabled otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedBug {
    /// get returns after the query phase, without write-back (allows read inversion).
    NoWriteBack,
    /// quorums of ⌊N/2⌋ instead of ⌊N/2⌋+1 (two quorums may not intersect).
    MinorityQuorum,
    /// replicas overwrite their value even with an older tag.
    AcceptOlderTag,
    /// a replica restarted without its data answers queries at once.
    NoRecovery,
    /// a replica acknowledges a store before it persists it (a crash in
    /// between loses an acknowledged write).
    AckBeforePersist,
    /// a recovering replica merges the stores of N−Q peers, one fewer than
    /// it needs, before answering.
    RecoveryOnePeerShort,
    /// the fast read takes the quorum's tags as equal when only their
    /// timestamps match (two writers can use one ts for different values).
    FastReadTsOnly,
}

impl InjectedBug {
    pub const ALL: &'static [InjectedBug] = &[
        InjectedBug::NoWriteBack,
        InjectedBug::MinorityQuorum,
        InjectedBug::AcceptOlderTag,
        InjectedBug::NoRecovery,
        InjectedBug::AckBeforePersist,
        InjectedBug::RecoveryOnePeerShort,
        InjectedBug::FastReadTsOnly,
    ];
    pub fn name(self) -> &'static str {
        match self {
            InjectedBug::NoWriteBack => "abd-no-write-back",
            InjectedBug::MinorityQuorum => "abd-minority-quorum",
            InjectedBug::AcceptOlderTag => "abd-accept-older-tag",
            InjectedBug::NoRecovery => "abd-no-recovery",
            InjectedBug::AckBeforePersist => "abd-ack-before-persist",
            InjectedBug::RecoveryOnePeerShort => "abd-recovery-one-peer-short",
            InjectedBug::FastReadTsOnly => "abd-fast-read-ts-only",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            InjectedBug::NoWriteBack => "get skips the write-back phase",
            InjectedBug::MinorityQuorum => "quorum of floor(N/2) instead of floor(N/2)+1",
            InjectedBug::AcceptOlderTag => "a replica overwrites its value with an older tag",
            InjectedBug::NoRecovery => {
                "a replica restarted without its data answers at once (shows with --durability memory)"
            }
            InjectedBug::AckBeforePersist => {
                "a replica acks a store before persisting it (shows with crashes inside handlers, durable)"
            }
            InjectedBug::RecoveryOnePeerShort => {
                "a recovering replica syncs from one peer fewer than it needs (shows with --durability memory)"
            }
            InjectedBug::FastReadTsOnly => {
                "the fast read compares only the timestamps of the quorum's tags, not the writers"
            }
        }
    }
}

// ----------------------------------------------------------------- replica

/// Counters of things that happened but needed no action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Replies for operations that already finished (late or duplicate).
    pub stale_replies: u64,
    /// Replies from a replica that had already answered this phase.
    pub duplicate_replies: u64,
    /// Messages that reached the wrong role (e.g. a reply at a bare replica).
    pub misrouted: u64,
    /// Stores ignored because the replica held a newer or equal tag.
    pub older_stores: u64,
}

/// One ABD replica: `(tag, value)` per key.
#[derive(Debug, Default)]
pub struct Replica {
    store: HashMap<Bytes, (Tag, Option<Bytes>)>,
    durable: bool,
    bug: Option<InjectedBug>,
    pub counters: Counters,
}

impl Replica {
    /// `durable`: emit a `Persist` before acknowledging each applied store.
    pub fn new(durable: bool) -> Self {
        Replica {
            durable,
            ..Default::default()
        }
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        self
    }
    pub fn get(&self, key: &[u8]) -> Option<&(Tag, Option<Bytes>)> {
        self.store.get(key)
    }
    pub fn len(&self) -> usize {
        self.store.len()
    }
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    fn on_query(&mut self, from: Peer, op: u64, key: Bytes, out: &mut Out<Msg, Timer>) {
        let (tag, value) = self.store.get(&key).cloned().unwrap_or((Tag::ZERO, None));
        out.send(from, Msg::QueryReply { op, tag, value });
    }

    fn on_store(
        &mut self,
        from: Peer,
        op: u64,
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
        out: &mut Out<Msg, Timer>,
    ) {
        let current = self.store.get(&key).map(|(t, _)| *t).unwrap_or(Tag::ZERO);
        let newer = tag > current || self.bug == Some(InjectedBug::AcceptOlderTag);
        let ack_first = self.bug == Some(InjectedBug::AckBeforePersist);
        if ack_first {
            out.send(from, Msg::StoreAck { op });
        }
        if newer {
            if self.durable {
                out.persist(Record::Register {
                    key: key.clone(),
                    tag,
                    value: value.clone(),
                });
            }
            self.store.insert(key, (tag, value));
        } else {
            self.counters.older_stores += 1;
        }
        // Always acknowledge: a replica holding a newer tag already holds
        // something at least as recent as what the coordinator wants stored.
        if !ack_first {
            out.send(from, Msg::StoreAck { op });
        }
    }

    /// Handle a message addressed to the replica role.
    pub fn handle(&mut self, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::Query { op, key } => self.on_query(from, op, key, out),
            Msg::Store {
                op,
                key,
                tag,
                value,
            } => self.on_store(from, op, key, tag, value, out),
            Msg::QueryReply { .. }
            | Msg::StoreAck { .. }
            | Msg::SyncRequest
            | Msg::SyncReply { .. } => self.counters.misrouted += 1,
        }
    }

    /// Everything this replica holds, for a recovering peer.
    pub fn snapshot(&self) -> Vec<(Bytes, Tag, Option<Bytes>)> {
        let mut v: Vec<_> = self
            .store
            .iter()
            .map(|(k, (t, val))| (k.clone(), *t, val.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0)); // deterministic message contents
        v
    }

    pub fn restore(&mut self, rec: Record) {
        let Record::Register { key, tag, value } = rec;
        let newer = self.store.get(&key).map(|(t, _)| tag > *t).unwrap_or(true);
        if newer {
            self.store.insert(key, (tag, value));
        }
    }
}

// ------------------------------------------------------------- coordinator

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
    /// Phase 2: storing `(tag, value)`; reply `result` once a quorum acked.
    Store {
        acks: QuorumTracker,
        tag: Tag,
        value: Option<Bytes>,
        result: Response,
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
fn first_op(id: u64) -> u64 {
    let mut state = id;
    crate::rng::splitmix64(&mut state)
}

/// How long thrifty mode avoids a replica that failed to answer in time.
const AVOID_FOR: Duration = Duration::from_secs(1);

/// Runs ABD operations on behalf of clients. `id` is the writer id that goes
/// into tags: it must be unique among all coordinators of a cluster.
#[derive(Debug)]
pub struct Coordinator {
    id: u64,
    members: Vec<NodeId>,
    quorum: usize,
    cfg: CoordinatorConfig,
    bug: Option<InjectedBug>,
    next_op: u64,
    /// Highest ts this coordinator has put into a tag (tags stay unique).
    last_ts: u64,
    /// Ordered: the retransmit loop in `tick` iterates it and its order
    /// reaches the output (a seed must replay byte for byte).
    pending: BTreeMap<u64, Pending>,
    ticking: bool,
    /// Thrifty mode: where the next phase's rotation starts, and until when
    /// each replica (by id) is avoided after it failed to answer.
    rotation: usize,
    avoid_until: Vec<Time>,
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
            members,
            quorum,
            cfg,
            bug: None,
            next_op: 1,
            last_ts: 0,
            pending: BTreeMap::new(),
            ticking: false,
            rotation: 0,
            avoid_until: vec![Time::ZERO; 64],
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
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Start an operation for `client`.
    pub fn start(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        let (key, kind) = match req {
            Request::Get { key } => (key, Kind::Get),
            Request::Put { key, value } => (key, Kind::Write(Some(value))),
            Request::Delete { key } => (key, Kind::Write(None)),
        };
        let op = self.next_op;
        self.next_op = self.next_op.wrapping_add(1);
        let asked = self.targets(now, None);
        self.send_to(
            asked,
            &Msg::Query {
                op,
                key: key.clone(),
            },
            out,
        );
        let phase = Phase::Query {
            votes: QuorumTracker::new(self.quorum),
            lowest: Tag {
                ts: u64::MAX,
                writer: u64::MAX,
            },
            highest: Tag::ZERO,
            value: None,
        };
        let deadline = now.saturating_add(self.cfg.op_timeout);
        let retry_at = now.saturating_add(self.first_retry());
        self.pending.insert(
            op,
            Pending {
                client,
                key,
                kind,
                phase,
                deadline,
                retry_at,
                asked,
            },
        );
        self.arm_tick(out);
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

    /// The replicas a new phase goes to, as a bitmask of ids: all of them;
    /// or, in thrifty mode, Q of them — `prefer` (the replicas that just
    /// answered phase 1, known alive) if given, else the next Q in rotation
    /// skipping replicas that recently failed to answer.
    fn targets(&mut self, now: Time, prefer: Option<u64>) -> u64 {
        let all = self.members.iter().fold(0u64, |m, &n| m | 1 << n);
        if !self.cfg.thrifty {
            return all;
        }
        if let Some(p) = prefer.filter(|p| p.count_ones() as usize >= self.quorum) {
            return p;
        }
        let n = self.members.len();
        let start = self.rotation % n;
        self.rotation = self.rotation.wrapping_add(1);
        let ring = (0..n).map(|i| self.members[(start + i) % n]);
        let healthy = ring
            .clone()
            .filter(|&m| self.avoid_until[m as usize] <= now);
        let avoided = ring.filter(|&m| self.avoid_until[m as usize] > now);
        healthy
            .chain(avoided)
            .take(self.quorum)
            .fold(0u64, |m, n| m | 1 << n)
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
        let (max_tag, max_value) = (*highest, best.take());
        match p.kind.clone() {
            Kind::Get => {
                let skip =
                    self.bug == Some(InjectedBug::NoWriteBack) || (self.cfg.fast_read && agreed);
                if skip {
                    let p = self.pending.remove(&op).expect("present");
                    self.completed += 1;
                    out.reply(p.client, Response::Value(max_value));
                } else {
                    let result = Response::Value(max_value.clone());
                    self.enter_store(now, op, max_tag, max_value, result, out);
                }
            }
            Kind::Write(value) => {
                // A tag must name one value: never reuse a ts this
                // coordinator already issued, even when the query quorum did
                // not see it (a concurrent write through the same proxy, or
                // an earlier write that timed out with its store in flight).
                let ts = max_tag.ts.max(self.last_ts) + 1;
                self.last_ts = ts;
                let tag = Tag {
                    ts,
                    writer: self.id,
                };
                self.enter_store(now, op, tag, value, Response::Done, out);
            }
        }
    }

    fn enter_store(
        &mut self,
        now: Time,
        op: u64,
        tag: Tag,
        value: Option<Bytes>,
        result: Response,
        out: &mut Out<Msg, Timer>,
    ) {
        let voters = match &self.pending[&op].phase {
            Phase::Query { votes, .. } => votes.members(),
            Phase::Store { .. } => unreachable!("enter_store leaves phase 1"),
        };
        let asked = self.targets(now, Some(voters));
        let retry_at = now.saturating_add(self.first_retry());
        let p = self.pending.get_mut(&op).expect("present");
        let msg = Msg::Store {
            op,
            key: p.key.clone(),
            tag,
            value: value.clone(),
        };
        p.asked = asked;
        p.retry_at = retry_at;
        self.send_to(asked, &msg, out);
        let p = self.pending.get_mut(&op).expect("present");
        p.phase = Phase::Store {
            acks: QuorumTracker::new(self.quorum),
            tag,
            value,
            result,
        };
    }

    fn on_store_ack(&mut self, from: NodeId, op: u64, out: &mut Out<Msg, Timer>) {
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
        match msg {
            Msg::QueryReply { op, tag, value } => {
                self.on_query_reply(now, node, op, tag, value, out)
            }
            Msg::StoreAck { op } => self.on_store_ack(node, op, out),
            Msg::Query { .. } | Msg::Store { .. } | Msg::SyncRequest | Msg::SyncReply { .. } => {
                self.counters.misrouted += 1
            }
        }
    }

    /// The periodic tick: expire operations past their deadline, retransmit
    /// the current phase to replicas that have not answered.
    pub fn tick(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.ticking = false;
        let mut expired = Vec::new();
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
                    self.avoid_until[n as usize] = now.saturating_add(AVOID_FOR);
                }
            }
            p.asked = self.members.iter().fold(0u64, |m, &n| m | 1 << n);
            let (votes, msg) = match &p.phase {
                Phase::Query { votes, .. } => (
                    votes,
                    Msg::Query {
                        op,
                        key: p.key.clone(),
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
            Timer::Sync => {} // only servers recover
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

// -------------------------------------------------------------- server node

/// A server: one replica plus a coordinator for clients that do not run
/// their own (proxy mode). Messages are routed by kind: requests to the
/// replica, replies to the coordinator.
#[derive(Debug)]
pub struct AbdNode {
    pub id: NodeId,
    pub replica: Replica,
    pub coord: Coordinator,
    members: Vec<NodeId>,
    /// Set while a restarted replica that lost its state catches up.
    recovery: Option<QuorumTracker>,
    /// Queries left unanswered because this replica was still recovering.
    pub queries_held_back: u64,
}

/// How often a recovering replica asks again.
const SYNC_RETRY: Duration = Duration::from_millis(200);

impl AbdNode {
    /// `members` are all replica ids of the cluster (including `id`).
    pub fn new(id: NodeId, members: Vec<NodeId>, durable: bool, cfg: CoordinatorConfig) -> Self {
        AbdNode {
            id,
            replica: Replica::new(durable),
            coord: Coordinator::new(id as u64, members.clone(), cfg),
            members,
            recovery: None,
            queries_held_back: 0,
        }
    }
    /// Use `writer` as the coordinator's writer id instead of the node id.
    /// A restarted node has forgotten which tags it issued before the crash,
    /// so each boot must write under a fresh id (e.g. node id plus a boot
    /// counter): otherwise one tag can end up naming two values.
    pub fn with_writer(mut self, writer: u64) -> Self {
        self.coord.id = writer;
        self.coord.next_op = first_op(writer);
        self
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.replica = self.replica.with_bug(bug);
        self.coord = self.coord.with_bug(bug);
        self
    }

    /// Start in recovery: this replica restarted without its state (memory
    /// mode) and must not answer queries until it has merged the stores of
    /// f+1 = N−Q+1 live peers. Every completed write is on Q replicas, at
    /// least Q−1 of them other than this one, and (f+1)+(Q−1) > N−1, so
    /// those peers hold every completed write. Stores are accepted and
    /// acknowledged meanwhile (holding a value is always safe). Seed 002's
    /// recovery mode `r`; not in seed 000, whose replicas never restart.
    pub fn recovering(mut self) -> Self {
        if self.coord.bug == Some(InjectedBug::NoRecovery) {
            return self;
        }
        let mut need = self.members.len() - majority(self.members.len()) + 1;
        if self.coord.bug == Some(InjectedBug::RecoveryOnePeerShort) {
            need = need.saturating_sub(1).max(1);
        }
        self.recovery = Some(QuorumTracker::new(need));
        self
    }

    pub fn is_recovering(&self) -> bool {
        self.recovery.is_some()
    }

    fn ask_for_sync(&self, out: &mut Out<Msg, Timer>) {
        let Some(votes) = &self.recovery else { return };
        for &n in self
            .members
            .iter()
            .filter(|&&n| n != self.id && !votes.has(n))
        {
            out.send(Peer::Node(n), Msg::SyncRequest);
        }
        out.set_timer(SYNC_RETRY, Timer::Sync);
    }

    fn on_sync_reply(&mut self, from: Peer, entries: Vec<(Bytes, Tag, Option<Bytes>)>) {
        let (Peer::Node(n), Some(votes)) = (from, self.recovery.as_mut()) else {
            return; // not recovering (a late reply) or not from a replica
        };
        if votes.has(n) {
            return;
        }
        for (key, tag, value) in entries {
            self.replica.restore(Record::Register { key, tag, value });
        }
        votes.record(n);
        if votes.won() {
            self.recovery = None;
        }
    }
}

impl Protocol for AbdNode {
    type Msg = Msg;
    type Timer = Timer;
    fn on_start(&mut self, _now: Time, out: &mut Out<Msg, Timer>) {
        self.ask_for_sync(out);
    }
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.coord.start(now, client, req, out);
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::Query { .. } if self.recovery.is_some() => self.queries_held_back += 1,
            Msg::Query { .. } | Msg::Store { .. } => self.replica.handle(from, msg, out),
            Msg::QueryReply { .. } | Msg::StoreAck { .. } => self.coord.handle(now, from, msg, out),
            // A recovering replica has nothing trustworthy to give.
            Msg::SyncRequest if self.recovery.is_some() => {}
            Msg::SyncRequest => out.send(
                from,
                Msg::SyncReply {
                    entries: self.replica.snapshot(),
                },
            ),
            Msg::SyncReply { entries } => self.on_sync_reply(from, entries),
        }
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Tick => self.coord.tick(now, out),
            Timer::Sync => self.ask_for_sync(out),
        }
    }
    fn on_link(&mut self, _now: Time, _ev: LinkEvent, _out: &mut Out<Msg, Timer>) {
        // ABD needs no failure detector: quorums tolerate silent replicas and
        // the retransmit tick covers messages lost on a broken link.
    }
    fn restore(&mut self, rec: Record) {
        self.replica.restore(rec);
    }
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let (r, c) = (&self.replica.counters, &self.coord.counters);
        vec![
            (
                "abd_ops_completed_total",
                "operations this server coordinated to completion",
                self.coord.completed,
            ),
            (
                "abd_ops_timed_out_total",
                "operations this server coordinated that found no quorum in time",
                self.coord.timed_out,
            ),
            (
                "abd_replica_keys",
                "keys held by this replica",
                self.replica.len() as u64,
            ),
            (
                "abd_older_stores_total",
                "stores ignored because a newer tag was held",
                r.older_stores,
            ),
            (
                "abd_stale_replies_total",
                "replies for operations already finished",
                c.stale_replies,
            ),
            (
                "abd_duplicate_replies_total",
                "replies from a replica that had already answered",
                c.duplicate_replies,
            ),
            (
                "abd_misrouted_total",
                "messages that reached the wrong role",
                r.misrouted + c.misrouted,
            ),
            (
                "abd_queries_held_back_total",
                "queries unanswered while recovering",
                self.queries_held_back,
            ),
            (
                "abd_recovering",
                "1 while this replica catches up after a restart",
                self.recovery.is_some() as u64,
            ),
        ]
    }
    fn status(&self) -> String {
        let rec = if self.recovery.is_some() {
            " RECOVERING"
        } else {
            ""
        };
        format!(
            "replica keys={}{rec} | {}",
            self.replica.len(),
            self.coord.status()
        )
    }
}

#[cfg(test)]
mod tests {
    //! The ABD rules of seed 000 §3 / seed 002 §3.1, driven by hand-fed messages.
    use super::*;
    use crate::protocol::Command;

    type O = Out<Msg, Timer>;
    const T0: Time = Time(0);

    fn coord(n: u32) -> Coordinator {
        Coordinator::new(100, (1..=n).collect(), CoordinatorConfig::default())
    }
    fn slow_read_coord(n: u32) -> Coordinator {
        Coordinator::new(
            100,
            (1..=n).collect(),
            CoordinatorConfig {
                fast_read: false,
                ..Default::default()
            },
        )
    }
    fn key() -> Bytes {
        Bytes::from_static(b"k")
    }
    /// Drain `out`, keeping what `pick` picks.
    fn drained<T>(out: &mut O, pick: impl FnMut(Command<Msg, Timer>) -> Option<T>) -> Vec<T> {
        out.drain().filter_map(pick).collect()
    }
    fn sends(out: &mut O) -> Vec<(Peer, Msg)> {
        drained(out, |c| match c {
            Command::Send { to, msg } => Some((to, msg)),
            _ => None,
        })
    }
    fn replies(out: &mut O) -> Vec<Response> {
        drained(out, |c| match c {
            Command::Reply { resp, .. } => Some(resp),
            _ => None,
        })
    }
    fn timers(out: &mut O) -> Vec<(Duration, Timer)> {
        drained(out, |c| match c {
            Command::SetTimer { after, timer } => Some((after, timer)),
            _ => None,
        })
    }
    fn qreply(
        c: &mut Coordinator,
        from: NodeId,
        ts: u64,
        writer: u64,
        v: Option<&str>,
        out: &mut O,
    ) {
        let value = v.map(|s| Bytes::copy_from_slice(s.as_bytes()));
        c.handle(
            T0,
            Peer::Node(from),
            Msg::QueryReply {
                op: 1,
                tag: Tag { ts, writer },
                value,
            },
            out,
        );
    }

    #[test]
    fn get_queries_all_and_waits_for_a_majority() {
        let mut c = slow_read_coord(5);
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
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
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        out.drain();
        qreply(&mut c, 1, 2, 5, Some("old"), &mut out);
        // Same ts, higher writer id wins the tie (lexicographic tag order).
        qreply(&mut c, 3, 2, 9, Some("new"), &mut out);
        let s = sends(&mut out);
        let Msg::Store { tag, value, .. } = &s[0].1 else {
            panic!("expected write-back")
        };
        assert_eq!(*tag, Tag { ts: 2, writer: 9 });
        assert_eq!(value.as_deref(), Some(&b"new"[..]));
        assert!(
            replies(&mut out).is_empty(),
            "no answer before the write-back quorum"
        );
        c.handle(T0, Peer::Node(2), Msg::StoreAck { op: 1 }, &mut out);
        assert!(replies(&mut out).is_empty());
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(
            replies(&mut out),
            vec![Response::Value(Some(Bytes::from_static(b"new")))]
        );
    }

    #[test]
    fn fast_read_skips_write_back_only_when_the_quorum_agrees() {
        let mut c = coord(3);
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        out.drain();
        qreply(&mut c, 1, 4, 1, Some("v"), &mut out);
        qreply(&mut c, 2, 4, 1, Some("v"), &mut out);
        assert_eq!(
            replies(&mut out),
            vec![Response::Value(Some(Bytes::from_static(b"v")))]
        );

        let mut c = coord(3);
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
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
        let mut out = O::new();
        c.start(
            T0,
            ClientRef(9),
            Request::Put {
                key: key(),
                value: Bytes::from_static(b"x"),
            },
            &mut out,
        );
        out.drain();
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
        let mut out = O::new();
        c.start(
            T0,
            ClientRef(1),
            Request::Put {
                key: key(),
                value: Bytes::from_static(b"x"),
            },
            &mut out,
        );
        out.drain();
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
    fn replica_keeps_the_highest_tag_and_always_acks() {
        let mut r = Replica::new(false);
        let mut out = O::new();
        let store = |ts, v: &str| Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts, writer: 1 },
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
        };
        r.handle(Peer::Conn(1), store(2, "two"), &mut out);
        r.handle(Peer::Conn(1), store(1, "one"), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 2);
        assert!(s
            .iter()
            .all(|(to, m)| *to == Peer::Conn(1) && matches!(m, Msg::StoreAck { op: 1 })));
        assert_eq!(r.get(b"k").unwrap().1.as_deref(), Some(&b"two"[..]));
        assert_eq!(r.counters.older_stores, 1);
        r.handle(Peer::Conn(1), store(2, "two"), &mut out);
        assert_eq!(r.counters.older_stores, 2, "an equal tag is not newer");
        assert_eq!((r.len(), r.is_empty()), (1, false));
        let other = Msg::Store {
            op: 2,
            key: Bytes::from_static(b"other"),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
        };
        r.handle(Peer::Conn(1), other, &mut out);
        assert_eq!(r.len(), 2);
        assert!(Replica::new(false).is_empty());
        r.handle(Peer::Conn(1), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(r.counters.misrouted, 1);
        out.drain();
        r.handle(Peer::Node(2), Msg::Query { op: 5, key: key() }, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(
                Peer::Node(2),
                Msg::QueryReply {
                    op: 5,
                    tag: Tag { ts: 2, writer: 1 },
                    value: Some(Bytes::from_static(b"two"))
                }
            )]
        );
    }

    #[test]
    fn durable_replica_persists_before_it_acks() {
        let mut r = Replica::new(true);
        let mut out = O::new();
        let msg = Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
        };
        r.handle(Peer::Node(1), msg, &mut out);
        let cmds = out.commands();
        assert!(matches!(cmds[0], Command::Persist(_)));
        assert!(matches!(cmds[1], Command::Send { .. }));
    }

    #[test]
    fn no_quorum_times_out_and_retransmits_meanwhile() {
        let mut c = coord(3);
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        out.drain();
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
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        assert_eq!(timers(&mut out), tick);
        c.start(T0, ClientRef(2), Request::Get { key: key() }, &mut out);
        assert!(timers(&mut out).is_empty(), "a tick is already pending");
        c.on_timer(Time(50_000), Timer::Tick, &mut out);
        assert_eq!(timers(&mut out), tick, "re-armed: operations pending");
        c.tick(Time(2_000_000), &mut out);
        assert!(timers(&mut out).is_empty(), "all expired: no more ticks");
        assert_eq!((c.timed_out, c.completed), (2, 0));
        c.start(
            Time(2_000_000),
            ClientRef(3),
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
        c.handle(T0, Peer::Node(3), Msg::Query { op, key: key() }, &mut out);
        assert_eq!(c.counters.misrouted, 2);
    }

    #[test]
    fn delete_stores_a_tombstone() {
        let mut c = coord(1);
        let mut r = Replica::new(false);
        let mut out = O::new();
        let mut run = |c: &mut Coordinator, req| {
            c.start(T0, ClientRef(1), req, &mut out);
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
        assert_eq!(
            run(
                &mut c,
                Request::Put {
                    key: key(),
                    value: Bytes::from_static(b"v")
                }
            ),
            Response::Done
        );
        assert_eq!(run(&mut c, Request::Delete { key: key() }), Response::Done);
        assert_eq!(
            run(&mut c, Request::Get { key: key() }),
            Response::Value(None)
        );
    }

    #[test]
    fn a_recovering_replica_answers_no_query_until_f_plus_one_peers_synced() {
        // N = 5, Q = 3: a recovering replica needs N - Q + 1 = 3 peers.
        let mut n =
            AbdNode::new(1, vec![1, 2, 3, 4, 5], false, CoordinatorConfig::default()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let asked: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(
            asked,
            vec![Peer::Node(2), Peer::Node(3), Peer::Node(4), Peer::Node(5)]
        );
        let query = Msg::Query { op: 1, key: key() };
        n.on_msg(T0, Peer::Conn(9), query.clone(), &mut out);
        assert!(out.is_empty(), "no answer while recovering");
        assert_eq!(n.queries_held_back, 1);
        let entry = |ts, v: &str| {
            vec![(
                key(),
                Tag { ts, writer: 1 },
                Some(Bytes::copy_from_slice(v.as_bytes())),
            )]
        };
        n.on_msg(
            T0,
            Peer::Node(2),
            Msg::SyncReply {
                entries: entry(3, "new"),
            },
            &mut out,
        );
        n.on_msg(
            T0,
            Peer::Node(2),
            Msg::SyncReply {
                entries: entry(3, "new"),
            },
            &mut out,
        );
        n.on_msg(
            T0,
            Peer::Node(3),
            Msg::SyncReply {
                entries: entry(1, "old"),
            },
            &mut out,
        );
        assert!(n.is_recovering(), "a duplicate reply must not count twice");
        // A recovering replica refuses to serve as a sync source itself.
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        assert!(out.is_empty());
        n.on_msg(
            T0,
            Peer::Node(5),
            Msg::SyncReply { entries: vec![] },
            &mut out,
        );
        assert!(!n.is_recovering());
        n.on_msg(T0, Peer::Conn(9), query, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(
                Peer::Conn(9),
                Msg::QueryReply {
                    op: 1,
                    tag: Tag { ts: 3, writer: 1 },
                    value: Some(Bytes::from_static(b"new"))
                }
            )],
            "the highest tag of the merged stores"
        );
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        let sync = vec![(
            key(),
            Tag { ts: 3, writer: 1 },
            Some(Bytes::from_static(b"new")),
        )];
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Node(4), Msg::SyncReply { entries: sync })]
        );
    }

    #[test]
    fn thrifty_asks_a_quorum_then_falls_back_and_avoids_the_silent_replica() {
        let cfg = CoordinatorConfig {
            thrifty: true,
            fast_read: false,
            ..Default::default()
        };
        let mut c = Coordinator::new(100, vec![1, 2, 3], cfg);
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(
            to,
            vec![Peer::Node(1), Peer::Node(2)],
            "phase 1 to Q = 2 replicas only"
        );
        qreply(&mut c, 1, 1, 1, Some("v"), &mut out);
        assert!(out.is_empty());
        // Replica 2 is silent: after the fallback delay the tick asks replica 3.
        c.tick(Time(6_000), &mut out);
        let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(
            to,
            vec![Peer::Node(2), Peer::Node(3)],
            "fallback: everyone who has not answered"
        );
        qreply(&mut c, 3, 2, 1, Some("w"), &mut out);
        let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(
            to,
            vec![Peer::Node(1), Peer::Node(3)],
            "write-back to the replicas that answered"
        );
        c.handle(T0, Peer::Node(1), Msg::StoreAck { op: 1 }, &mut out);
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(
            replies(&mut out),
            vec![Response::Value(Some(Bytes::from_static(b"w")))]
        );
        // The next operations avoid replica 2 for a while, whatever the rotation.
        for op in 2..5 {
            c.start(
                Time(7_000),
                ClientRef(op),
                Request::Get { key: key() },
                &mut out,
            );
            let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
            assert!(
                !to.contains(&Peer::Node(2)),
                "op {op} asked the silent replica: {to:?}"
            );
            assert_eq!(to.len(), 2);
        }
    }

    fn thrifty_coord(n: u32) -> Coordinator {
        let cfg = CoordinatorConfig {
            thrifty: true,
            ..Default::default()
        };
        Coordinator::new(100, (1..=n).collect(), cfg)
    }

    /// Thrifty phases start at rotating replicas, and still ask Q distinct
    /// replicas when all but one are avoided.
    #[test]
    fn thrifty_rotates_and_asks_a_quorum_even_when_most_are_avoided() {
        let mut c = thrifty_coord(3);
        let mut out = O::new();
        let mut asked = Vec::new();
        for op in 1..=3 {
            c.start(T0, ClientRef(op), Request::Get { key: key() }, &mut out);
            let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
            asked.push(to);
            let reply = Msg::QueryReply {
                op,
                tag: Tag::ZERO,
                value: None,
            };
            c.handle(T0, Peer::Node(1), reply, &mut out);
        }
        let n = Peer::Node;
        assert_eq!(
            asked,
            vec![vec![n(1), n(2)], vec![n(2), n(3)], vec![n(1), n(3)]]
        );
        // Replicas 2 and 3 stay silent past the fallback: both avoided.
        c.tick(Time(6_000), &mut out);
        out.drain();
        c.start(
            Time(7_000),
            ClientRef(9),
            Request::Get { key: key() },
            &mut out,
        );
        assert_eq!(sends(&mut out).len(), 2, "Q = 2 distinct replicas");
    }

    /// A replica that stays silent is avoided again at every retransmit,
    /// not only the first.
    #[test]
    fn thrifty_keeps_avoiding_a_replica_while_it_stays_silent() {
        let mut c = thrifty_coord(3);
        let mut out = O::new();
        c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
        qreply(&mut c, 1, 0, 0, None, &mut out);
        c.tick(Time(6_000), &mut out); // 2 silent: avoided until 1.006 s
        c.tick(Time(106_000), &mut out); // 2 and 3 silent: until 1.106 s
        out.drain();
        // Rotation now starts at replica 2, but 2 and 3 are still avoided.
        c.start(
            Time(1_050_000),
            ClientRef(2),
            Request::Get { key: key() },
            &mut out,
        );
        let to: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(to, vec![Peer::Node(1), Peer::Node(2)]);
    }

    // ------------------------------------------ injected bugs (testing aid)

    #[test]
    fn quorums_are_majorities_and_the_minority_bug_shrinks_them() {
        for (n, q, bad) in [(1, 1, 1), (3, 2, 1), (4, 3, 2), (5, 3, 2)] {
            assert_eq!(coord(n).quorum(), q);
            let c = coord(n).with_bug(Some(InjectedBug::MinorityQuorum));
            assert_eq!(c.quorum(), bad, "N={n}");
        }
    }

    #[test]
    fn injected_bugs_have_distinct_names_and_descriptions() {
        let names: std::collections::HashSet<_> =
            InjectedBug::ALL.iter().map(|b| b.name()).collect();
        assert_eq!(names.len(), InjectedBug::ALL.len());
        assert!(names.iter().all(|n| n.starts_with("abd-")));
        let about: std::collections::HashSet<_> =
            InjectedBug::ALL.iter().map(|b| b.describe()).collect();
        assert_eq!(about.len(), InjectedBug::ALL.len());
    }

    #[test]
    fn bug_ack_before_persist_acks_first() {
        let store = Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
        };
        let mut r = Replica::new(true).with_bug(Some(InjectedBug::AckBeforePersist));
        let mut out = O::new();
        r.handle(Peer::Node(1), store, &mut out);
        let cmds = out.commands();
        assert!(matches!(cmds[0], Command::Send { .. }));
        assert!(matches!(cmds[1], Command::Persist(_)));
        assert_eq!(cmds.len(), 2);
    }

    #[test]
    fn bug_recovery_one_peer_short_stops_a_peer_early() {
        // N = 5 needs 3 peers (see the test above); the bug takes 2.
        let mut n = AbdNode::new(1, vec![1, 2, 3, 4, 5], false, CoordinatorConfig::default())
            .with_bug(Some(InjectedBug::RecoveryOnePeerShort))
            .recovering();
        let mut out = O::new();
        for peer in [2, 3] {
            assert!(n.is_recovering());
            let reply = Msg::SyncReply { entries: vec![] };
            n.on_msg(T0, Peer::Node(peer), reply, &mut out);
        }
        assert!(!n.is_recovering());
    }

    /// Two writers can issue one ts for two values; only the full tags agree.
    #[test]
    fn fast_read_needs_equal_tags_not_just_equal_timestamps() {
        for (bug, writes_back) in [(None, true), (Some(InjectedBug::FastReadTsOnly), false)] {
            let mut c = coord(3).with_bug(bug);
            let mut out = O::new();
            c.start(T0, ClientRef(1), Request::Get { key: key() }, &mut out);
            out.drain();
            qreply(&mut c, 1, 4, 1, Some("a"), &mut out);
            qreply(&mut c, 2, 4, 2, Some("b"), &mut out);
            let cmds = out.drain().collect::<Vec<_>>();
            let stored = cmds.iter().any(|c| matches!(c, Command::Send { .. }));
            let replied = cmds.iter().any(|c| matches!(c, Command::Reply { .. }));
            assert_eq!((stored, replied), (writes_back, !writes_back), "{bug:?}");
        }
    }
}
