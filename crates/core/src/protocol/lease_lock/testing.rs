//! Helpers of the unit tests (build coordinators, pick commands out of an
//! `Out`) and [`Net`], an in-memory network of lease-lock servers and
//! client-side coordinators that delivers their messages and timers, so
//! tests can run whole operations and choose the interleavings that matter
//! (seed 000 §4: two coordinators contending for one key).

use super::bugs::Bug;
use super::coordinator::{Coordinator, CoordinatorConfig};
use super::def::{LeaseLock, LeaseOptions};
use super::msg::{LockId, Msg, Timer};
use super::node::LeaseNode;
use crate::protocol::contract::{client_writer_id, ClientSpec, NodeSpec, ProtocolDef};
use crate::protocol::contract::{Command, Out, Protocol, Timing};
use crate::types::{ClientRef, NodeId, Peer, Request, Response, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use crate::protocol::test_harness::{replies, sends, timers, value, T0};

pub type O = Out<Msg, Timer>;
/// The writer id of the coordinators built by [`coord`].
pub const ME: u64 = 100;

pub fn coord(n: u32) -> Coordinator {
    coord_with(n, CoordinatorConfig::default())
}
pub fn coord_with(n: u32, cfg: CoordinatorConfig) -> Coordinator {
    Coordinator::new(ME, (1..=n).collect(), cfg)
}
pub fn key() -> Bytes {
    Bytes::from_static(b"k")
}
pub fn lock(owner: u64, round: u64) -> LockId {
    LockId { owner, round }
}
pub fn get() -> Request {
    Request::Get { key: key() }
}
pub fn put(value: &'static [u8]) -> Request {
    Request::Put {
        key: key(),
        value: Bytes::from_static(value),
    }
}
/// The ids of the replicas that `sends` went to, in order.
pub fn to_ids(sends: &[(Peer, Msg)]) -> Vec<NodeId> {
    (sends.iter())
        .map(|(to, _)| match to {
            Peer::Node(n) => *n,
            Peer::Conn(c) => panic!("sent to connection {c}"),
        })
        .collect()
}
/// Start `req` at `c` and feed it grants from `granted` for its round.
pub fn locked(c: &mut Coordinator, req: Request, granted: &[NodeId], out: &mut O) -> LockId {
    c.start(T0, ClientRef::local(1), req, out);
    let Some((_, Msg::LockReq { lock, .. })) = sends(out).pop() else {
        panic!("a lock round starts with LOCK_REQ")
    };
    for &n in granted {
        c.handle(
            T0,
            Peer::Node(n),
            Msg::LockGranted { lock, key: key() },
            out,
        );
    }
    lock
}
/// As [`locked`], then every locked replica answers READ with nothing:
/// the operation is in its write phase (WRITE sent to `granted`).
pub fn writing(c: &mut Coordinator, req: Request, granted: &[NodeId], out: &mut O) -> LockId {
    let lock = locked(c, req, granted, out);
    for &n in granted {
        let reply = Msg::ReadReply {
            lock,
            tag: crate::types::Tag::ZERO,
            value: None,
        };
        c.handle(T0, Peer::Node(n), reply, out);
    }
    lock
}

/// A message in flight.
#[derive(Clone, Debug)]
pub struct Envelope {
    pub from: Peer,
    pub to: Peer,
    pub msg: Msg,
}

/// Servers `Peer::Node(1..=n)` and client-side coordinators `Peer::Conn(c)`,
/// connected by a FIFO queue the test may deliver out of order.
pub struct Net {
    pub now: Time,
    pub nodes: BTreeMap<NodeId, LeaseNode>,
    pub clients: BTreeMap<u64, Coordinator>,
    pub queue: VecDeque<Envelope>,
    /// Answers to clients: (the request's `ClientRef::id`, response).
    pub answers: Vec<(u64, Response)>,
    /// Every message delivered so far, in order.
    pub delivered: Vec<Envelope>,
    timers: Vec<(Time, Peer, Timer)>,
    members: Vec<NodeId>,
    opts: LeaseOptions,
    bug: Option<Bug>,
}

impl Net {
    /// `n` servers built by the registration with `opts`.
    pub fn new(n: u32, opts: LeaseOptions) -> Net {
        Net::with_bug(n, opts, None)
    }
    /// … with an injected bug in every server and client.
    pub fn with_bug(n: u32, opts: LeaseOptions, bug: Option<Bug>) -> Net {
        let members: Vec<NodeId> = (1..=n).collect();
        let nodes = (members.iter())
            .map(|&id| {
                let spec = NodeSpec {
                    id,
                    members: &members,
                    incarnation: 0,
                    durable: false,
                    lost_state: false,
                    timing: Timing::default(),
                    seed: u64::from(id),
                };
                (id, LeaseLock::node(&spec, &opts, bug))
            })
            .collect();
        Net {
            now: T0,
            nodes,
            clients: BTreeMap::new(),
            queue: VecDeque::new(),
            answers: Vec::new(),
            delivered: Vec::new(),
            timers: Vec::new(),
            members,
            opts,
            bug,
        }
    }
    /// A client-side coordinator on connection `conn` (kept if it exists).
    pub fn add_client(&mut self, conn: u64) {
        if self.clients.contains_key(&conn) {
            return;
        }
        let spec = ClientSpec {
            writer_id: client_writer_id(conn),
            members: &self.members,
            timing: Timing::default(),
            seed: conn,
        };
        let c = LeaseLock::client(&spec, &self.opts, self.bug);
        self.clients.insert(conn, c);
    }
    /// Server `id` restarts without its state (its next life): recovering
    /// first (as the registration builds it) if `recover`, else at once.
    pub fn restart_empty(&mut self, id: NodeId, recover: bool) {
        let spec = NodeSpec {
            id,
            members: &self.members,
            incarnation: 1,
            durable: false,
            lost_state: recover,
            timing: Timing::default(),
            seed: u64::from(id),
        };
        let node = LeaseLock::node(&spec, &self.opts, self.bug);
        self.nodes.insert(id, node);
        let mut out = O::new();
        let (now, role) = self.at(Peer::Node(id));
        role.on_start(now, &mut out);
        self.collect(Peer::Node(id), out);
    }
    /// Ask `at` (a server or a client coordinator) for `req`, as request `id`.
    pub fn request(&mut self, at: Peer, id: u64, req: Request) {
        let mut out = O::new();
        let client = ClientRef::local(id);
        let (now, role) = self.at(at);
        role.on_client(now, client, req, &mut out);
        self.collect(at, out);
    }
    /// The time, and the server or client coordinator at `p`.
    fn at(&mut self, p: Peer) -> (Time, &mut dyn Protocol<Msg = Msg, Timer = Timer>) {
        let role: &mut dyn Protocol<Msg = Msg, Timer = Timer> = match p {
            Peer::Node(n) => self.nodes.get_mut(&n).expect("a node of the net"),
            Peer::Conn(c) => self.clients.get_mut(&c).expect("a client of the net"),
        };
        (self.now, role)
    }
    fn collect(&mut self, at: Peer, mut out: O) {
        for cmd in out.drain() {
            match cmd {
                Command::Send { to, msg } | Command::SendNow { to, msg } => {
                    self.queue.push_back(Envelope { from: at, to, msg })
                }
                Command::Reply { client, resp } | Command::ReplyNow { client, resp } => {
                    self.answers.push((client.id, resp))
                }
                Command::WhenDurable(msg) => self.queue.push_back(Envelope {
                    from: at,
                    to: at,
                    msg,
                }),
                Command::SetTimer { after, timer } => {
                    self.timers.retain(|(_, p, t)| (*p, t) != (at, &timer));
                    self.timers
                        .push((self.now.saturating_add(after), at, timer));
                }
                Command::CancelTimer { timer } => {
                    self.timers.retain(|(_, p, t)| (*p, t) != (at, &timer))
                }
                Command::Notify { .. } | Command::Persist(_) => {}
            }
        }
    }
    fn deliver(&mut self, e: Envelope) {
        self.delivered.push(e.clone());
        let mut out = O::new();
        let (now, role) = self.at(e.to);
        role.on_msg(now, e.from, e.msg, &mut out);
        self.collect(e.to, out);
    }
    /// Deliver the first message in flight that `pick` accepts.
    pub fn deliver_first(&mut self, pick: impl Fn(&Envelope) -> bool) {
        let i = self
            .queue
            .iter()
            .position(pick)
            .expect("such a message in flight");
        let e = self.queue.remove(i).expect("present");
        self.deliver(e);
    }
    /// Deliver everything in flight but what `hold` picks, in order, until
    /// only held messages are left.
    pub fn run_except(&mut self, hold: impl Fn(&Envelope) -> bool) {
        for _ in 0..10_000 {
            let Some(i) = self.queue.iter().position(|e| !hold(e)) else {
                return;
            };
            let e = self.queue.remove(i).expect("present");
            self.deliver(e);
        }
        panic!("the network never went quiet");
    }
    /// Deliver everything in flight, in order, until the network is quiet.
    pub fn run(&mut self) {
        self.run_except(|_| false);
    }
    /// Move time to `t`, firing due timers in time order and running the
    /// network after each.
    pub fn advance_to(&mut self, t: Time) {
        loop {
            self.run();
            let next = (self.timers.iter().enumerate())
                .filter(|(_, (at, _, _))| *at <= t)
                .min_by_key(|(_, (at, _, _))| *at)
                .map(|(i, _)| i);
            let Some(i) = next else { break };
            let (at, who, timer) = self.timers.remove(i);
            self.now = self.now.max(at);
            let mut out = O::new();
            let (now, role) = self.at(who);
            role.on_timer(now, timer, &mut out);
            self.collect(who, out);
        }
        self.now = t;
    }
    /// The answer to request `id`, if any.
    pub fn answer(&self, id: u64) -> Option<&Response> {
        self.answers.iter().find(|(i, _)| *i == id).map(|(_, r)| r)
    }
    /// Replicas where some lease on [`key`] still runs now.
    pub fn locked_at(&self) -> Vec<NodeId> {
        (self.nodes.iter())
            .filter(|(_, n)| n.replica.holder(&key(), self.now).is_some())
            .map(|(&id, _)| id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lease_lock::LockRetry;
    use crate::types::OpError;

    fn is_lock_req_of(from: Peer, to: NodeId) -> impl Fn(&Envelope) -> bool {
        move |e| e.from == from && e.to == Peer::Node(to) && matches!(e.msg, Msg::LockReq { .. })
    }

    #[test]
    fn put_get_and_delete_round_trip_through_clients_and_servers() {
        let mut net = Net::new(3, LeaseOptions::default());
        net.add_client(1);
        net.request(Peer::Conn(1), 1, put(b"a"));
        net.run();
        assert_eq!(net.answer(1), Some(&Response::Done));
        assert!(net.locked_at().is_empty(), "every lock released");
        // Through a server's proxy coordinator; reads see the client's write.
        net.request(Peer::Node(2), 2, get());
        net.run();
        assert_eq!(net.answer(2), Some(&value(b"a")));
        net.request(Peer::Node(3), 3, Request::Delete { key: key() });
        net.run();
        net.request(Peer::Conn(1), 4, get());
        net.run();
        assert_eq!(net.answer(3), Some(&Response::Done));
        assert_eq!(net.answer(4), Some(&Response::Value(None)));
        // Q = 2 of 3 hold the tombstone's tag (2, server 3's writer id).
        let tags: Vec<_> = (net.nodes.values())
            .map(|n| n.replica.get(b"k").map(|k| k.tag.ts))
            .collect();
        assert!(
            tags.iter().filter(|t| **t == Some(2)).count() >= 2,
            "{tags:?}"
        );
        assert!(net.locked_at().is_empty());
    }

    /// Client 1 locks replicas 1 and 2 before client 2's requests reach
    /// them; client 2 gets only replica 3 and fails definitely, releasing it.
    fn contend(opts: LeaseOptions) -> Net {
        let mut net = Net::new(3, opts);
        net.add_client(1);
        net.add_client(2);
        net.request(Peer::Conn(1), 1, put(b"one"));
        net.request(Peer::Conn(2), 2, put(b"two"));
        net.deliver_first(is_lock_req_of(Peer::Conn(1), 1));
        net.deliver_first(is_lock_req_of(Peer::Conn(1), 2));
        net.deliver_first(is_lock_req_of(Peer::Conn(2), 3));
        net.run();
        net
    }

    #[test]
    fn of_two_contending_coordinators_one_is_denied_and_fails_definitely() {
        let no_retry = LeaseOptions {
            lock_retry: LockRetry::None,
            ..LeaseOptions::default()
        };
        let mut net = contend(no_retry);
        assert_eq!(net.answer(1), Some(&Response::Done));
        let Some(Response::Failed(e)) = net.answer(2) else {
            panic!("client 2 must fail: {:?}", net.answer(2))
        };
        assert!(
            e.is_definite() && e.to_string().contains("lock denied"),
            "{e}"
        );
        assert_eq!(net.clients[&2].counters.surplus_grants, 0);
        assert!(net.locked_at().is_empty(), "the loser released replica 3");
        net.request(Peer::Conn(2), 3, get());
        net.run();
        assert_eq!(net.answer(3), Some(&value(b"one")));
    }

    #[test]
    fn with_backoff_the_denied_coordinator_retries_and_writes_last() {
        let opts = LeaseOptions {
            lock_retry: LockRetry::Backoff,
            ..Default::default()
        };
        let mut net = contend(opts);
        assert_eq!(net.answer(1), Some(&Response::Done));
        assert_eq!(net.answer(2), None, "waiting to retry");
        net.advance_to(Time(BACKOFF_WAIT.as_micros() as u64));
        assert_eq!(net.answer(2), Some(&Response::Done));
        assert_eq!(net.clients[&2].counters.retries, 1);
        net.request(Peer::Node(1), 3, get());
        net.run();
        assert_eq!(net.answer(3), Some(&value(b"two")));
        assert!(net.locked_at().is_empty());
    }
    const BACKOFF_WAIT: Duration = Duration::from_millis(10);

    /// The seed's surplus grants: with `surplus-grants=expire` a grant after
    /// the Q-th is not released, and blocks its replica for the lease.
    #[test]
    fn surplus_grants_are_released_or_left_to_expire() {
        for (release, still_locked) in [(true, vec![]), (false, vec![3])] {
            let opts = LeaseOptions {
                release_surplus: release,
                ..Default::default()
            };
            let mut net = Net::new(3, opts);
            net.add_client(1);
            net.request(Peer::Conn(1), 1, put(b"x"));
            net.run();
            assert_eq!(net.answer(1), Some(&Response::Done));
            assert_eq!(net.clients[&1].counters.surplus_grants, 1);
            assert_eq!(net.locked_at(), still_locked, "release={release}");
            net.advance_to(Time(2_000_000));
            assert!(net.locked_at().is_empty(), "the lease ends it anyway");
        }
    }

    #[test]
    fn a_put_whose_lease_runs_out_mid_write_has_an_unknown_outcome() {
        let opts = LeaseOptions {
            lease: Some(Duration::from_millis(50)),
            ..Default::default()
        };
        let mut net = Net::new(3, opts);
        net.add_client(1);
        net.request(Peer::Conn(1), 1, put(b"late"));
        // Replicas 1 and 2 grant first; the WRITE to replica 2 is held up.
        let held = |e: &Envelope| e.to == Peer::Node(2) && matches!(e.msg, Msg::Write { .. });
        net.run_except(held);
        assert_eq!(net.queue.len(), 1);
        assert_eq!(net.answer(1), None);
        net.now = Time(60_000); // past the lease, before any re-send
        net.run();
        let Some(Response::Failed(e)) = net.answer(1) else {
            panic!("{:?}", net.answer(1))
        };
        assert!(matches!(e, OpError::Unknown { .. }), "{e}");
        let held: Vec<_> = (net.nodes.values())
            .map(|n| n.replica.get(b"k").and_then(|k| k.value.clone()))
            .collect();
        assert_eq!(
            held[0].as_deref(),
            Some(&b"late"[..]),
            "replica 1 applied it"
        );
        assert_eq!(held[1], None, "replica 2 denied it");
        assert_eq!(net.nodes[&2].replica.counters.writes_denied, 1);
        assert!(net.locked_at().is_empty());
    }

    /// Operations a coordinator runs under a quorum of locks right now.
    fn holding(c: &Coordinator) -> usize {
        use crate::protocol::lease_lock::coordinator::Phase;
        (c.pending.values())
            .filter(|p| matches!(p.phase, Phase::Reading { .. } | Phase::Writing { .. }))
            .count()
    }

    /// One random run: 3 client-side coordinators and the servers' own
    /// contend for one key while the network delivers in random order and
    /// duplicates messages. Leases never run out here (10 s).
    fn random_run(seed: u64, bug: Option<Bug>) -> Result<(), String> {
        let mut rng = crate::rng::SplitMix64(seed);
        let opts = LeaseOptions {
            lease: Some(Duration::from_secs(10)),
            lock_retry: [LockRetry::None, LockRetry::Backoff][seed as usize % 2],
            write_back: seed % 4 < 2,
            ..Default::default()
        };
        let n = [3, 5][(seed / 4) as usize % 2];
        let mut net = Net::with_bug(n, opts, bug);
        let ops = 8;
        for id in 1..=ops {
            let at = match rng.below(4) {
                0 => Peer::Node(1 + rng.below(u64::from(n)) as NodeId),
                c => {
                    net.add_client(c);
                    Peer::Conn(c)
                }
            };
            let req = if rng.chance(0.5) { get() } else { put(b"v") };
            net.request(at, id, req);
        }
        while !net.queue.is_empty() {
            let i = rng.below(net.queue.len() as u64) as usize;
            let e = net.queue.remove(i).expect("present");
            if rng.chance(0.1) {
                let j = rng.below(net.queue.len() as u64 + 1) as usize;
                net.queue.insert(j, e.clone());
            }
            net.deliver(e);
            if rng.chance(0.02) {
                net.advance_to(
                    net.now
                        .saturating_add(Duration::from_millis(rng.below(150))),
                );
            }
            // §4.2's promise: while leases run, one operation at a time
            // holds a quorum of the key's locks.
            let holders: usize = net.clients.values().map(holding).sum::<usize>()
                + net.nodes.values().map(|n| holding(&n.coord)).sum::<usize>();
            check(holders <= 1, || format!("{holders} holders"))?;
        }
        net.advance_to(net.now.saturating_add(Duration::from_secs(3)));
        check(net.answers.len() == ops as usize, || {
            "not all answered".into()
        })?;
        let locked = net.locked_at();
        check(locked.is_empty(), || format!("still locked at {locked:?}"))?;
        // Each put read the latest tag under its locks and wrote ts + 1.
        let done_puts = (net.answers.iter())
            .filter(|(_, r)| *r == Response::Done)
            .count() as u64;
        let tags: Vec<_> = (net.nodes.values())
            .map(|n| n.replica.get(b"k").map(|k| k.tag).unwrap_or_default())
            .collect();
        let max = tags.iter().copied().max().unwrap();
        check(max.ts == done_puts, || {
            format!("{done_puts} puts done, tags {tags:?}")
        })?;
        let on = tags.iter().filter(|&&t| t == max).count();
        check(on > n as usize / 2, || {
            format!("the last write is on {on} of {n}")
        })?;
        let unknown = net
            .answers
            .iter()
            .filter(|(_, r)| matches!(r, Response::Failed(e) if !e.is_definite()));
        check(unknown.count() == 0, || "an unknown outcome".into())
    }

    fn check(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
        ok.then_some(()).ok_or_else(why)
    }

    #[test]
    fn random_interleavings_with_duplicates_keep_one_holder_and_lose_no_write() {
        for seed in 0..300 {
            random_run(seed, None).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }

    /// The same runs catch the injected safety bugs within 100 seeds.
    #[test]
    fn random_runs_catch_the_injected_safety_bugs() {
        for bug in [Bug::GrantWhileHeld, Bug::MinorityQuorum] {
            let caught = (0..100).find(|&s| random_run(s, Some(bug)).is_err());
            assert!(caught.is_some(), "{bug:?} never caught");
        }
    }

    /// A replica that lost its data would make a get stale (its empty
    /// register plus one that missed the put form a quorum); recovering
    /// first, it catches up before it grants a lock.
    #[test]
    fn a_replica_restarted_without_its_data_recovers_before_it_serves() {
        for (recover, seen) in [(false, Response::Value(None)), (true, value(b"a"))] {
            let mut net = Net::new(3, LeaseOptions::default());
            net.add_client(1);
            net.request(Peer::Conn(1), 1, put(b"a"));
            net.run();
            let has = |net: &Net, n: NodeId| {
                net.nodes[&n]
                    .replica
                    .get(b"k")
                    .is_some_and(|k| k.value.is_some())
            };
            assert!(has(&net, 1) && has(&net, 2) && !has(&net, 3));
            net.restart_empty(1, recover);
            assert_eq!(net.nodes[&1].is_recovering(), recover);
            net.run();
            assert_eq!(net.nodes[&1].is_recovering(), recover, "a lease first");
            let after_a_lease = net.now.saturating_add(Duration::from_secs(2));
            net.advance_to(after_a_lease);
            assert!(
                !net.nodes[&1].is_recovering(),
                "synced from replicas 2 and 3"
            );
            net.request(Peer::Conn(1), 2, get());
            net.deliver_first(|e| e.to == Peer::Node(1));
            net.deliver_first(|e| e.to == Peer::Node(3));
            net.run();
            assert_eq!(net.answer(2), Some(&seen), "recover={recover}");
        }
    }
}
