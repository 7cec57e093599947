//! The server: its state, the client entry points and the dispatch.

use super::bugs::InjectedBug;
use super::counters::Counters;
use super::disk::Durable;
use super::msg::{Body, Msg, ReqId, Scope, Staged, Timer};
use super::queue::Queues;
use super::recovering::Recovery;
use super::store::Store;
use crate::protocol::contract::{LinkEvent, Out, Protocol, Record};
use crate::types::{ClientRef, NodeId, OpError, Peer, Request, Response, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The highest Lamport clock a peer's message may carry: 2^63. A clock
/// grows by one per event, so no run reaches it; a larger stamp is forged
/// or corrupt, and is refused (counted in `lamport_clocks_refused_total`).
pub const CLOCK_LIMIT: u64 = 1 << 63;

/// What a write locks (`lock-scope`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LockScope {
    /// One lock for the whole store (seed 002 §3.2.1 item 2).
    #[default]
    Global,
    /// One lock per key ("possible with a bit more overhead", same place).
    Key,
}

/// Settings of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub scope: LockScope,
    /// Evict a peer we wait for that stays silent this long (§4.4.1's "fair
    /// timeout"); `None` waits forever, as the seed does.
    pub lock_timeout: Option<Duration>,
    /// Stage writes everywhere and apply them at RELEASE_LOCK; reads of a
    /// staged key wait (the candidate repair of the local read).
    pub read_wait: bool,
    /// A client operation not done by then is answered (see `tick`).
    pub op_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            scope: LockScope::Global,
            lock_timeout: None,
            read_wait: false,
            op_timeout: Duration::from_secs(2),
        }
    }
}

/// Where one of this server's writes stands.
#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// REQUEST_LOCK sent; `replies` are the peers that sent REPLY_LOCK.
    Waiting { replies: BTreeSet<NodeId> },
    /// In the critical section: SERVER_WRITE sent, waiting for these acks;
    /// `refused`: a peer had dropped the request and did not apply.
    Writing {
        unacked: BTreeSet<NodeId>,
        refused: bool,
    },
}

/// One of this server's writes (a client PUT or DELETE).
#[derive(Clone, Debug)]
pub(super) struct Op {
    /// `None` once answered (an op timeout answers before the end).
    pub client: Option<ClientRef>,
    pub scope: Scope,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub deadline: Time,
    pub phase: Phase,
}

/// A read waiting for a staged write of its key (`read-wait`).
#[derive(Clone, Debug)]
pub(super) struct WaitingRead {
    pub client: ClientRef,
    pub key: Bytes,
    pub deadline: Time,
}

/// One server of the Lamport-mutex store: replica, lock participant and
/// the coordinator of its clients' writes.
#[derive(Debug)]
pub struct LamportNode {
    pub id: NodeId,
    /// This life's number (`NodeSpec::incarnation`), in every request id.
    pub(super) life: u64,
    /// The other servers (every member but `id`).
    pub(super) peers: Vec<NodeId>,
    pub(super) cfg: Config,
    pub(super) bug: Option<InjectedBug>,
    /// Lamport clock: past every message received and every request made.
    pub(super) clock: u64,
    pub(super) store: Store,
    pub(super) queues: Queues,
    /// This server's own requests, in lock order.
    pub(super) ops: BTreeMap<ReqId, Op>,
    pub(super) reads: Vec<WaitingRead>,
    /// The highest clock received from each peer (the entry rule), counted
    /// only from a synced peer (see `unsynced`).
    pub(super) last_recv: BTreeMap<NodeId, u64>,
    /// Peers whose stream to us may have a gap (we restarted, or saw their
    /// link come back `Up`) and whose `Outstanding` has not arrived since:
    /// their messages do not count for the entry rule (`recovery.rs`,
    /// `on_up`).
    pub(super) unsynced: BTreeSet<NodeId>,
    /// When each peer last spoke, and since when we wait for it (lock timeout).
    pub(super) last_heard: BTreeMap<NodeId, Time>,
    pub(super) awaited_since: BTreeMap<NodeId, Time>,
    /// Peers dropped by the lock timeout, ignored until they sync again.
    pub(super) evicted: BTreeSet<NodeId>,
    /// Replies held back ([`InjectedBug::SeedDeferral`] only).
    pub(super) deferred: Vec<(NodeId, ReqId)>,
    /// Set while copying state from peers; the peers that answered.
    pub(super) recovery: Option<Recovery>,
    /// The peers awaited at the last tick (polled if still awaited).
    pub(super) stalled: BTreeSet<NodeId>,
    /// Our verdicts on a previous life's staged writes, re-sent with every
    /// resync (a `Resolve` lost in a reset would leave its key staged).
    pub(super) verdicts: BTreeMap<ReqId, (Scope, bool)>,
    /// Writes of our previous lives being committed (`Commit` sent), and
    /// the peers whose ack we still need before `Resolve`.
    pub(super) committing: BTreeMap<ReqId, (Staged, BTreeSet<NodeId>)>,
    /// What is on disk (durable servers only).
    pub(super) durable: Durable,
    /// Why this server cannot go on (every peer lost its state too).
    pub(super) fatal: Option<String>,
    ticking: bool,
    pub counters: Counters,
}

impl LamportNode {
    /// `members` are all server ids of the cluster (including `id`).
    pub fn new(id: NodeId, members: &[NodeId], cfg: Config) -> Self {
        assert!(members.contains(&id), "node {id} is not a member");
        LamportNode {
            id,
            life: 0,
            peers: members.iter().copied().filter(|&n| n != id).collect(),
            cfg,
            bug: None,
            clock: 0,
            store: Store::default(),
            queues: Queues::default(),
            ops: BTreeMap::new(),
            reads: Vec::new(),
            last_recv: BTreeMap::new(),
            unsynced: BTreeSet::new(),
            last_heard: BTreeMap::new(),
            awaited_since: BTreeMap::new(),
            evicted: BTreeSet::new(),
            deferred: Vec::new(),
            recovery: None,
            stalled: BTreeSet::new(),
            verdicts: BTreeMap::new(),
            committing: BTreeMap::new(),
            durable: Durable::default(),
            fatal: None,
            ticking: false,
            counters: Counters::default(),
        }
    }
    /// This server's life: a restarted server must use another one.
    pub fn with_life(mut self, life: u64) -> Self {
        self.life = life;
        self
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        self
    }
    /// Start by copying state from every peer (seed 002 §2, recovery mode
    /// `r`): `on_start` asks them; no client is served until all answered.
    pub fn recovering(mut self) -> Self {
        self.recovery = Some(Recovery {
            lost: true,
            ..Recovery::default()
        });
        self
    }
    pub fn is_recovering(&self) -> bool {
        self.recovery.is_some()
    }
    /// The value this server would read for `key` (tests, harness).
    pub fn value(&self, key: &[u8]) -> Option<Bytes> {
        self.store.get(key)
    }
    pub fn store_snapshot(&self) -> Vec<super::msg::Entry> {
        self.store.snapshot()
    }
    /// Whether this server is inside a critical section right now.
    pub fn holds_lock(&self) -> bool {
        (self.ops.values()).any(|op| matches!(op.phase, Phase::Writing { .. }))
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Peers we exchange with: all but the evicted.
    pub(super) fn active(&self) -> Vec<NodeId> {
        let ev = &self.evicted;
        self.peers
            .iter()
            .copied()
            .filter(|n| !ev.contains(n))
            .collect()
    }
    pub(super) fn send(&self, to: NodeId, body: Body, out: &mut Out<Msg, Timer>) {
        let clock = self.clock;
        out.send(Peer::Node(to), Msg { clock, body });
    }
    pub(super) fn broadcast(&self, body: Body, out: &mut Out<Msg, Timer>) {
        for to in self.active() {
            self.send(to, body.clone(), out);
        }
    }
    pub(super) fn scope_of(&self, key: &Bytes) -> Scope {
        match self.cfg.scope {
            LockScope::Global => Scope::Global,
            LockScope::Key => Scope::Key(key.clone()),
        }
    }

    fn read(&mut self, now: Time, client: ClientRef, key: Bytes, out: &mut Out<Msg, Timer>) {
        if self.cfg.read_wait && self.queues.is_staged(&key) {
            self.counters.reads_waited += 1;
            let deadline = now.saturating_add(self.cfg.op_timeout);
            self.reads.push(WaitingRead {
                client,
                key,
                deadline,
            });
        } else {
            out.reply(client, Response::Value(self.store.get(&key)));
        }
    }

    /// Answer the waiting reads whose key is no longer staged.
    fn serve_reads(&mut self, out: &mut Out<Msg, Timer>) {
        if self.reads.is_empty() || self.recovery.is_some() {
            return;
        }
        let (store, queues) = (&self.store, &self.queues);
        self.reads.retain(|r| {
            let ready = !queues.is_staged(&r.key);
            if ready {
                out.reply(r.client, Response::Value(store.get(&r.key)));
            }
            !ready
        });
    }

    /// What every handler does last: enter critical sections that became
    /// possible, send deferred replies (bug), serve reads, keep the tick.
    fn after(&mut self, out: &mut Out<Msg, Timer>) {
        self.try_enter(out);
        self.flush_deferred(out);
        self.serve_reads(out);
        self.arm_tick(out);
    }

    fn arm_tick(&mut self, out: &mut Out<Msg, Timer>) {
        // A non-empty queue may be stuck on a peer's lost RELEASE_LOCK, a
        // recovery on a lost SyncRequest: both need the tick to poll.
        let busy = !self.queues.is_empty() || self.recovery.is_some();
        if !self.ticking && (!self.ops.is_empty() || !self.reads.is_empty() || busy) {
            self.ticking = true;
            out.set_timer(self.tick_interval(), Timer::Tick);
        }
    }

    pub(super) fn tick_interval(&self) -> Duration {
        let limit =
            (self.cfg.lock_timeout).map_or(self.cfg.op_timeout, |l| l.min(self.cfg.op_timeout));
        (limit / 4).max(Duration::from_millis(1))
    }

    /// Answer operations past the op timeout. A write still waiting for
    /// the lock is withdrawn (RELEASE_LOCK) and refused: it never entered
    /// and never will. A write inside its critical section is already
    /// applied here: its outcome is unknown, and it runs to completion.
    fn expire(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        let due: Vec<ReqId> = (self.ops.iter())
            .filter(|(_, op)| op.client.is_some() && now >= op.deadline)
            .map(|(&r, _)| r)
            .collect();
        for req in due {
            let op = self.ops.get_mut(&req).expect("listed");
            let client = op.client.take().expect("listed");
            match &op.phase {
                Phase::Waiting { .. } => {
                    self.counters.refused += 1;
                    self.withdraw(req, out);
                    let e = OpError::refused("lock not granted within the op timeout");
                    out.reply(client, Response::Failed(e));
                }
                Phase::Writing { unacked, .. } => {
                    self.counters.timed_out += 1;
                    let need = self.peers.len() as u32;
                    let got = need.saturating_sub(unacked.len() as u32);
                    out.reply(client, Response::Failed(OpError::Timeout { got, need }));
                }
            }
        }
        self.reads.retain(|r| {
            let due = now >= r.deadline;
            if due {
                let e = OpError::unknown("a write of this key was still staged");
                out.reply(r.client, Response::Failed(e));
            }
            !due
        });
    }
}

/// The handlers, run by the `Protocol` methods through `durably`.
impl LamportNode {
    fn client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        if self.recovery.is_some() {
            let e = OpError::refused("recovering: copying state from peers");
            out.reply(client, Response::Failed(e));
            return;
        }
        match req {
            Request::Get { key } => self.read(now, client, key, out),
            Request::Put { key, value } => self.request(now, client, key, Some(value), out),
            Request::Delete { key } => self.request(now, client, key, None, out),
            req @ Request::Znode(_) => out.reply(client, req.refusal().expect("not KV")),
        }
        self.after(out);
    }

    fn message(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        let from = match from {
            Peer::Node(n) if self.peers.contains(&n) => n,
            _ => {
                self.counters.misrouted += 1;
                return;
            }
        };
        if self.evicted.contains(&from) && msg.body != Body::SyncRequest {
            self.counters.from_evicted += 1;
            // It polls us: it waits on us, so it missed our `Evicted` (its
            // rejoin was under way when it came, and ended on our answer
            // from before the eviction). Tell it again; one answer per
            // poll, and it polls once a tick. Dropping the poll left it
            // waiting for ever (sim seed 435, N = 3, memory,
            // `lock-timeout=300ms`).
            if msg.body == Body::Poll {
                self.send(from, Body::Evicted, out);
            }
            return;
        }
        // A stamp past `CLOCK_LIMIT` is refused: no honest peer gets there
        // (a clock grows by one per event), and taking it would leave this
        // server's clock no room (issue 31). Checked all the same.
        let next = (msg.clock <= CLOCK_LIMIT)
            .then(|| self.clock.max(msg.clock).checked_add(1))
            .flatten();
        let Some(clock) = next else {
            self.counters.clock_refused += 1;
            return;
        };
        self.clock = clock;
        self.note_stamp(from, &msg);
        self.last_heard.insert(from, now);
        self.dispatch(from, msg.body, out);
        self.after(out);
    }

    fn timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Tick => {
                self.ticking = false;
                self.check_total_loss(now);
                self.expire(now, out);
                self.check_lock_timeouts(now, out);
                self.poll_stalled(out);
                self.after(out);
            }
        }
    }

    fn link(&mut self, _now: Time, ev: LinkEvent, out: &mut Out<Msg, Timer>) {
        match ev {
            LinkEvent::Up(Peer::Node(p)) if self.peers.contains(&p) => self.on_up(p, out),
            // A peer that went down keeps its queued requests: it may only
            // have lost the connection and still hold the lock. They go
            // when it says so after `Up` (`Outstanding`, `SyncRequest`) or
            // when the lock timeout evicts it.
            LinkEvent::Down(Peer::Node(_)) => self.counters.links_down += 1,
            // Client sessions hold no lock here: nothing to clean up.
            LinkEvent::Up(_) | LinkEvent::Down(_) => {}
        }
        self.after(out);
    }
}

impl Protocol for LamportNode {
    type Msg = Msg;
    type Timer = Timer;

    fn on_start(&mut self, _now: Time, out: &mut Out<Msg, Timer>) {
        self.durably(out, |n, out| {
            if n.durable.on {
                n.resume(out);
            }
            n.unsync_all(out);
            if n.recovery.is_some() {
                n.start_recovery(out);
            }
            n.arm_tick(out);
        });
    }

    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.durably(out, |n, out| n.client(now, client, req, out));
    }

    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        self.durably(out, |n, out| n.message(now, from, msg, out));
    }

    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        self.durably(out, |n, out| n.timer(now, timer, out));
    }

    fn on_link(&mut self, now: Time, ev: LinkEvent, out: &mut Out<Msg, Timer>) {
        self.durably(out, |n, out| n.link(now, ev, out));
    }

    fn restore(&mut self, rec: Record) {
        self.restore_record(rec);
    }

    fn fatal(&self) -> Option<String> {
        self.fatal.clone()
    }

    fn role(&self) -> &'static str {
        if self.recovery.is_some() {
            "recovering"
        } else if self.holds_lock() {
            "holder"
        } else {
            "replica"
        }
    }

    fn status(&self) -> String {
        format!(
            "{} clock={} keys={} queued={} own={} reads-waiting={} evicted={:?}",
            self.role(),
            self.clock,
            self.store.len(),
            self.queues.len(),
            self.ops.len(),
            self.reads.len(),
            self.evicted,
        )
    }

    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut m = self.counters.metrics();
        m.push((
            "lamport_queued_requests",
            "lock requests queued here, all scopes",
            self.queues.len() as u64,
        ));
        m.push((
            "lamport_recovering",
            "1 while this server copies state from its peers",
            self.recovery.is_some() as u64,
        ));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::super::msg::{Body, Msg, Scope};
    use super::super::testing::*;
    use super::{Config, LamportNode};
    use crate::protocol::contract::Protocol;
    use crate::types::Peer;

    /// Only members take part in the lock: a request from a server outside
    /// the membership, or one that arrives on a client connection, is
    /// counted and dropped (no queue slot, no clock step, no answer); a
    /// member's request is queued.
    #[test]
    fn a_stranger_cannot_queue_for_the_lock() {
        let mut n = LamportNode::new(1, &[1, 2, 3], Config::default());
        let mut out = O::new();
        let lock = |node| Body::RequestLock {
            req: r(5, node),
            scope: Scope::Global,
        };
        deliver(&mut n, 9, 5, lock(9), &mut out);
        let body = lock(2);
        n.on_msg(T0, Peer::Conn(2), Msg { clock: 5, body }, &mut out);
        assert!(out.is_empty() && n.queues.is_empty());
        assert_eq!((n.clock, n.counters.misrouted), (0, 2));
        deliver(&mut n, 2, 5, lock(2), &mut out);
        assert_eq!((n.queues.len(), n.clock), (1, 6));
        assert_eq!(n.counters.misrouted, 2);
    }
}
