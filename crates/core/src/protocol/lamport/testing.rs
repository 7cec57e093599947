//! An in-memory cluster for the unit tests: servers joined by FIFO links,
//! messages delivered in a seeded random interleaving (per-link order is
//! kept, as `LinkModel::FifoReliable` promises), link resets and restarts
//! on demand, and invariant checks after every step.

use super::bugs::InjectedBug;
use super::msg::{Body, Msg, ReqId, Scope, Timer};
use super::node::{Config, LamportNode};
use crate::protocol::contract::{Command, LinkEvent, Out, Protocol, Record};
use crate::rng::SplitMix64;
use crate::types::{ClientRef, NodeId, Peer, Request, Response, Time};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::protocol::test_harness::replies;
pub use crate::protocol::test_harness::{b, get, put, T0};

pub type O = Out<Msg, Timer>;
/// The messages in `out` (draining it), as (to, body).
pub fn sent(out: &mut O) -> Vec<(NodeId, Body)> {
    (out.drain())
        .filter_map(|c| match c {
            Command::Send {
                to: Peer::Node(n),
                msg,
            } => Some((n, msg.body)),
            _ => None,
        })
        .collect()
}
/// The client answers in `out` (draining it).
pub fn answers(out: &mut O) -> Vec<Response> {
    replies(out)
}
/// The messages and the client answers in `out` (draining it).
pub fn split(out: &mut O) -> (Vec<(NodeId, Body)>, Vec<Response>) {
    let (mut msgs, mut resps) = (Vec::new(), Vec::new());
    for c in out.drain() {
        match c {
            Command::Send {
                to: Peer::Node(n),
                msg,
            } => msgs.push((n, msg.body)),
            Command::Reply { resp, .. } => resps.push(resp),
            _ => {}
        }
    }
    (msgs, resps)
}
/// Request `ts` of server `node`, first life.
pub fn r(ts: u64, node: u32) -> ReqId {
    ReqId { ts, node, life: 0 }
}
/// A global write of `v` to key `k`.
pub fn write(req: ReqId, v: &str) -> Body {
    Body::ServerWrite {
        req,
        scope: Scope::Global,
        key: b("k"),
        value: Some(b(v)),
    }
}
/// A peer's list of its outstanding requests in life `life`: none.
pub fn outstanding(life: u64) -> Body {
    Body::Outstanding { life, reqs: vec![] }
}
/// A message from `from` stamped with clock `clock`.
pub fn deliver(n: &mut LamportNode, from: NodeId, clock: u64, body: Body, out: &mut O) {
    n.on_msg(T0, Peer::Node(from), Msg { clock, body }, out);
}

/// N servers (ids 1..=N) and the links between them.
pub struct Cluster {
    pub nodes: Vec<LamportNode>,
    pub now: Time,
    cfg: Config,
    bug: Option<InjectedBug>,
    links: BTreeMap<(NodeId, NodeId), VecDeque<Msg>>,
    timers: BTreeMap<(NodeId, u8), Time>,
    pub answers: BTreeMap<u64, Response>,
    next_client: u64,
    rng: SplitMix64,
    /// Most servers seen inside a critical section at once.
    pub max_holders: usize,
    pub delivered: u64,
    /// Paused servers: nothing is delivered to or from them, no timer fires.
    pub paused: std::collections::BTreeSet<NodeId>,
    /// Durable servers: what each persisted (durable at once), read back
    /// at a restart.
    pub durable: bool,
    pub disks: BTreeMap<NodeId, Vec<Record>>,
}

impl Cluster {
    pub fn new(n: u32, cfg: Config, bug: Option<InjectedBug>, seed: u64) -> Cluster {
        let members: Vec<NodeId> = (1..=n).collect();
        let nodes = (members.iter())
            .map(|&id| LamportNode::new(id, &members, cfg.clone()).with_bug(bug))
            .collect();
        let mut c = Cluster {
            nodes,
            now: T0,
            cfg,
            bug,
            links: BTreeMap::new(),
            timers: BTreeMap::new(),
            answers: BTreeMap::new(),
            next_client: 1,
            rng: SplitMix64(seed),
            max_holders: 0,
            delivered: 0,
            paused: Default::default(),
            durable: false,
            disks: BTreeMap::new(),
        };
        for id in members {
            c.call(id, |n, now, out| n.on_start(now, out));
        }
        c
    }
    /// As `new`, with durable servers.
    pub fn durable(n: u32, cfg: Config, bug: Option<InjectedBug>, seed: u64) -> Cluster {
        let mut c = Cluster::new(n, cfg, bug, seed);
        c.durable = true;
        for id in 1..=n {
            c.nodes[id as usize - 1] = c.rebuild(id, 0);
            c.call(id, |n, now, out| n.on_start(now, out));
        }
        c
    }
    /// Server `id`'s next life: read back from its disk if durable, else
    /// recovering (its state lost).
    fn rebuild(&self, id: NodeId, life: u64) -> LamportNode {
        let members: Vec<NodeId> = (1..=self.nodes.len() as NodeId).collect();
        let mut fresh = LamportNode::new(id, &members, self.cfg.clone())
            .with_bug(self.bug)
            .with_life(life)
            .durable(self.durable);
        if !self.durable {
            return fresh.recovering();
        }
        for rec in self.disks.get(&id).into_iter().flatten() {
            fresh.restore(rec.clone());
        }
        fresh
    }
    pub fn node(&self, id: NodeId) -> &LamportNode {
        &self.nodes[id as usize - 1]
    }

    fn call(&mut self, id: NodeId, f: impl FnOnce(&mut LamportNode, Time, &mut O)) {
        let mut out = O::new();
        f(&mut self.nodes[id as usize - 1], self.now, &mut out);
        for c in out.drain() {
            match c.plain() {
                Command::Send {
                    to: Peer::Node(to),
                    msg,
                } => self.links.entry((id, to)).or_default().push_back(msg),
                Command::Persist(rec) => self.disks.entry(id).or_default().push(rec),
                Command::Reply { client, resp } => {
                    assert!(
                        self.answers.insert(client.id, resp).is_none(),
                        "answered twice"
                    );
                }
                Command::SetTimer {
                    after,
                    timer: Timer::Tick,
                } => {
                    self.timers.insert((id, 0), self.now.saturating_add(after));
                }
                _ => {}
            }
        }
        let global = self.cfg.scope == super::LockScope::Global;
        let holders = self.nodes.iter().filter(|n| n.holds_lock()).count();
        if global {
            self.max_holders = self.max_holders.max(holders);
        }
    }

    /// A client asks server `at`; returns the client's id.
    pub fn client(&mut self, at: NodeId, req: Request) -> u64 {
        let id = self.next_client;
        self.next_client += 1;
        self.call(at, |n, now, out| {
            n.on_client(now, ClientRef::local(id), req, out)
        });
        id
    }

    /// Deliver one message of a random non-empty link; false if none.
    pub fn step(&mut self) -> bool {
        let busy: Vec<(NodeId, NodeId)> = (self.links.iter())
            .filter(|(&(f, _), q)| !q.is_empty() && !self.paused.contains(&f))
            .filter(|(&(_, t), _)| !self.paused.contains(&t))
            .map(|(&k, _)| k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[self.rng.below(busy.len() as u64) as usize];
        self.deliver_from(from, to);
        true
    }
    /// Deliver the next message on the link `from` → `to`; false if none.
    pub fn deliver_from(&mut self, from: NodeId, to: NodeId) -> bool {
        let Some(msg) = self.links.get_mut(&(from, to)).and_then(|q| q.pop_front()) else {
            return false;
        };
        self.delivered += 1;
        self.now = Time(self.now.0 + 10);
        self.call(to, |n, now, out| n.on_msg(now, Peer::Node(from), msg, out));
        true
    }
    /// Deliver until no message is in flight (bounded).
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("no quiescence after 100000 messages");
    }
    /// Advance time to the next timer and fire it; false if none.
    pub fn fire_next_timer(&mut self) -> bool {
        let paused = &self.paused;
        let due = (self.timers.iter()).filter(|((id, _), _)| !paused.contains(id));
        let Some((&(id, _), &at)) = due.min_by_key(|(_, &at)| at) else {
            return false;
        };
        self.timers.remove(&(id, 0));
        self.now = self.now.max(at);
        self.call(id, |n, now, out| n.on_timer(now, Timer::Tick, out));
        true
    }
    /// Let `d` of virtual time pass, firing timers and delivering messages.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now.saturating_add(d);
        loop {
            self.settle();
            let paused = &self.paused;
            let due = (self.timers.iter()).filter(|((id, _), _)| !paused.contains(id));
            match due.map(|(_, &at)| at).min() {
                Some(at) if at <= end => {
                    self.fire_next_timer();
                }
                _ => break,
            }
        }
        self.now = self.now.max(end);
    }

    /// The connection between `a` and `b` resets: what is in flight is
    /// lost, both sides see `Down` then `Up`.
    pub fn reset_link(&mut self, a: NodeId, b: NodeId) {
        self.links.remove(&(a, b));
        self.links.remove(&(b, a));
        for (x, y) in [(a, b), (b, a)] {
            self.call(x, |n, now, out| {
                n.on_link(now, LinkEvent::Down(Peer::Node(y)), out)
            });
        }
        for (x, y) in [(a, b), (b, a)] {
            self.call(x, |n, now, out| {
                n.on_link(now, LinkEvent::Up(Peer::Node(y)), out)
            });
        }
    }

    /// Every server crashes at once (what is in flight is lost) and comes
    /// back from its disk (durable) or recovering; every link comes up.
    pub fn crash_all(&mut self) {
        let n = self.nodes.len() as NodeId;
        self.links.clear();
        self.timers.clear();
        for id in 1..=n {
            let life = self.node(id).life + 1;
            self.nodes[id as usize - 1] = self.rebuild(id, life);
        }
        for id in 1..=n {
            self.call(id, |n, now, out| n.on_start(now, out));
        }
        for a in 1..=n {
            for b in (1..=n).filter(|&b| b != a) {
                self.call(a, |n, now, out| {
                    n.on_link(now, LinkEvent::Up(Peer::Node(b)), out)
                });
            }
        }
    }

    /// Server `id` crashes (its state and in-flight messages are lost) and
    /// restarts, recovering (or from its disk, durable); its peers see its
    /// links go down and up.
    pub fn restart(&mut self, id: NodeId) {
        let members: Vec<NodeId> = (1..=self.nodes.len() as NodeId).collect();
        self.links.retain(|&(f, t), _| f != id && t != id);
        self.timers.remove(&(id, 0));
        let life = self.node(id).life + 1;
        self.nodes[id as usize - 1] = self.rebuild(id, life);
        for &p in members.iter().filter(|&&p| p != id) {
            self.call(p, |n, now, out| {
                n.on_link(now, LinkEvent::Down(Peer::Node(id)), out)
            });
        }
        self.call(id, |n, now, out| n.on_start(now, out));
        for &p in members.iter().filter(|&&p| p != id) {
            self.call(p, |n, now, out| {
                n.on_link(now, LinkEvent::Up(Peer::Node(id)), out)
            });
            self.call(id, |n, now, out| {
                n.on_link(now, LinkEvent::Up(Peer::Node(p)), out)
            });
        }
    }

    /// Every replica holds the same store, and none applied out of order.
    pub fn assert_converged(&self) {
        let first = self.nodes[0].store_snapshot();
        for n in &self.nodes {
            assert_eq!(n.store_snapshot(), first, "server {} differs", n.id);
            assert_eq!(n.counters.out_of_order_applies, 0, "server {}", n.id);
            assert!(n.queues.is_empty(), "server {}: {}", n.id, n.status());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lamport::LockScope;

    fn done(c: &Cluster, ids: &[u64]) -> bool {
        ids.iter()
            .all(|id| c.answers.get(id) == Some(&Response::Done))
    }

    /// Two servers write at once; both complete, one after the other, and
    /// every replica ends with the same store.
    #[test]
    fn two_servers_writing_concurrently_both_complete_and_replicas_agree() {
        for n in [2, 3, 5] {
            for seed in 0..20 {
                let mut c = Cluster::new(n, Config::default(), None, seed);
                let a = c.client(1, put("k", "from-1"));
                let z = c.client(n, put("k", "from-n"));
                c.settle();
                assert!(done(&c, &[a, z]), "N={n} seed={seed}: {:?}", c.answers);
                assert_eq!(c.max_holders, 1, "mutual exclusion");
                c.assert_converged();
                // The lower request (clock 1, node 1) went first.
                assert_eq!(c.node(2).value(b"k"), Some(b("from-n")));
            }
        }
    }

    /// The seed's deferral (§3.2.2 item 3): at N = 2 both servers wait for
    /// the other's reply forever. Lamport's rule completes both.
    #[test]
    fn the_seeds_deferral_deadlocks_two_concurrent_requests() {
        let mut c = Cluster::new(2, Config::default(), Some(InjectedBug::SeedDeferral), 1);
        let a = c.client(1, put("k", "a"));
        let b2 = c.client(2, put("k", "b"));
        c.settle();
        assert!(c.answers.is_empty(), "{:?}", c.answers);
        assert!(c
            .nodes
            .iter()
            .all(|n| n.deferred.len() == 1 && !n.holds_lock()));
        // Only the op timeout breaks it: the first server to give up
        // withdraws, which frees its deferred reply, and the other enters.
        c.run_for(Duration::from_secs(3));
        assert!(matches!(&c.answers[&a], Response::Failed(e) if e.is_definite()));
        assert_eq!(c.answers[&b2], Response::Done, "{:?}", c.answers);
        // One request at a time goes through even with the bug.
        let solo = c.client(1, put("k", "solo"));
        c.settle();
        assert!(done(&c, &[solo]));

        let mut c = Cluster::new(2, Config::default(), None, 1);
        let (x, y) = (c.client(1, put("k", "a")), c.client(2, put("k", "b")));
        c.settle();
        assert!(done(&c, &[x, y]) && (a, b2) == (x, y));
    }

    /// Entering at the head without a later message from the peer: both
    /// servers see their own request first and enter together.
    #[test]
    fn entering_without_a_later_message_lets_two_servers_hold_the_lock() {
        let bug = Some(InjectedBug::EnterWithoutLaterMessage);
        let mut c = Cluster::new(2, Config::default(), bug, 3);
        c.client(1, put("k", "a"));
        c.client(2, put("k", "b"));
        assert_eq!(c.max_holders, 2);
        c.settle();
        let mut ok = Cluster::new(2, Config::default(), None, 3);
        ok.client(1, put("k", "a"));
        ok.client(2, put("k", "b"));
        assert_eq!(
            ok.max_holders, 0,
            "nobody enters before hearing from the peer"
        );
        ok.settle();
        assert_eq!(ok.max_holders, 1);
    }

    /// Per-key locks: a write of another key enters while one is held.
    #[test]
    fn per_key_locks_let_writes_of_different_keys_overlap() {
        for (scope, overlap) in [(LockScope::Key, true), (LockScope::Global, false)] {
            let cfg = Config {
                scope,
                ..Config::default()
            };
            let mut c = Cluster::new(2, cfg, None, 0);
            let a = c.client(1, put("a", "1"));
            c.deliver_from(1, 2); // REQUEST_LOCK
            c.deliver_from(2, 1); // REPLY_LOCK: 1 enters, SERVER_WRITE waits
            assert!(c.node(1).holds_lock());
            let w = c.client(2, put("b", "2"));
            c.deliver_from(2, 1); // 2's REQUEST_LOCK
            c.deliver_from(1, 2); // 1's SERVER_WRITE
            c.deliver_from(1, 2); // 1's REPLY_LOCK to 2
            assert_eq!(c.node(2).holds_lock(), overlap, "{scope:?}");
            c.settle();
            assert!(done(&c, &[a, w]));
            c.assert_converged();
        }
    }

    /// N in 2..=4, either scope, read-wait or not, drawn from `rng`.
    fn random_config(rng: &mut SplitMix64) -> (u32, Config) {
        let n = 2 + rng.below(3) as u32;
        let cfg = Config {
            scope: [LockScope::Global, LockScope::Key][rng.below(2) as usize],
            read_wait: rng.chance(0.5),
            op_timeout: Duration::from_secs(600),
            ..Config::default()
        };
        (n, cfg)
    }

    /// One random run: N in 2..=4, either scope, read-wait or not, 12
    /// writes at random servers, random interleaving and link resets.
    /// Returns the cluster after it settled and the writes' client ids.
    fn random_run(seed: u64, bug: Option<InjectedBug>) -> (Cluster, Vec<u64>) {
        let mut rng = SplitMix64(seed);
        let (n, cfg) = random_config(&mut rng);
        let mut c = Cluster::new(n, cfg, bug, seed);
        let mut writes = Vec::new();
        for i in 0..12 {
            let at = 1 + rng.below(n as u64) as u32;
            let key = ["a", "b", "c"][rng.below(3) as usize];
            writes.push(c.client(at, put(key, &format!("{seed}-{i}"))));
            for _ in 0..rng.below(8) {
                c.step();
            }
            if rng.chance(0.15) {
                let x = 1 + rng.below(n as u64) as u32;
                let y = 1 + (x as u64 % n as u64) as u32;
                c.reset_link(x, y);
            }
        }
        c.settle();
        (c, writes)
    }

    /// Every write completes, at most one holder under the global lock, no
    /// write applied out of order, every replica equal at the end.
    #[test]
    fn random_runs_with_link_resets_complete_and_converge() {
        for seed in 0..300u64 {
            let (c, writes) = random_run(seed, None);
            assert!(done(&c, &writes), "seed {seed}: {:?}", c.answers);
            assert!(c.max_holders <= 1, "seed {seed}");
            c.assert_converged();
        }
    }

    /// The same runs catch the bugs that show without reads: a lost
    /// RELEASE_LOCK never resynchronised stalls a write; entering without
    /// a later message puts two servers in the critical section.
    #[test]
    fn random_runs_catch_the_stall_and_the_double_holder() {
        let stalled = (0..300).any(|seed| {
            let (c, writes) = random_run(seed, Some(InjectedBug::NoResyncOnUp));
            !done(&c, &writes)
        });
        assert!(stalled, "no run stalled without the resync on Up");
        let two = (0..300).any(|seed| {
            let (c, _) = random_run(seed, Some(InjectedBug::EnterWithoutLaterMessage));
            c.max_holders > 1
        });
        assert!(two, "no run had two holders");
    }

    /// Random runs with crashes: a server restarts (losing its store, its
    /// queue and its clients' writes) at random points, link resets too.
    /// Writes at servers that never crashed complete; recovery leaves every
    /// replica equal.
    #[test]
    fn random_runs_with_restarts_recover_and_converge() {
        for seed in 0..200u64 {
            let mut rng = SplitMix64(seed ^ 0xC0FFEE);
            let (n, cfg) = random_config(&mut rng);
            let mut c = Cluster::new(n, cfg, None, seed);
            let mut writes = Vec::new();
            let mut crashed = std::collections::BTreeSet::new();
            for i in 0..12 {
                let at = 1 + rng.below(n as u64) as u32;
                let key = ["a", "b"][rng.below(2) as usize];
                if !c.node(at).is_recovering() {
                    writes.push((at, c.client(at, put(key, &format!("{i}")))));
                }
                for _ in 0..rng.below(10) {
                    c.step();
                }
                // Some other server must keep the state: with every
                // server recovering at once nothing is left to copy (and
                // recovery waits for a peer that holds it, for good).
                let x = 1 + rng.below(n as u64) as u32;
                let held = (1..=n).any(|p| p != x && !c.node(p).is_recovering());
                if rng.chance(0.15) && held {
                    crashed.insert(x);
                    c.restart(x);
                } else if rng.chance(0.1) {
                    c.reset_link(x, 1 + (x % n));
                }
            }
            c.settle();
            for &(at, id) in &writes {
                if !crashed.contains(&at) {
                    assert_eq!(c.answers.get(&id), Some(&Response::Done), "seed {seed}");
                }
            }
            assert!(c.nodes.iter().all(|n| !n.is_recovering()), "seed {seed}");
            assert!(c.max_holders <= 1, "seed {seed}");
            // Then the timers: a write staged for a holder's previous life
            // that its new life's recovery never heard of is resolved by the
            // peers' poll (`Orphans`), one tick (op timeout / 4 = 150 s
            // here) later, not by messages alone. Seed 152: server 2,
            // restarted in memory mode, staged server 1's `(3,1)` from server
            // 3's `SyncReply` (sent before server 1's RELEASE_LOCK reached
            // 3; the one to 2 died with 2's crash); server 1, recovering too,
            // took 2's first `SyncReply` (without it) and dropped its second
            // as a duplicate. At the next tick 2 polls 1 with its orphans, 1
            // commits `(3,1)` (already superseded) and 2's queue moves on.
            c.run_for(Duration::from_secs(2 * 600));
            c.assert_converged();
        }
    }

    /// Why the seed's local reads are not linearizable, and what
    /// `read-wait` changes: during a broadcast the holder's read sees the
    /// new value and a later read at another server the old one.
    #[test]
    fn a_local_read_during_a_broadcast_sees_an_inversion_unless_read_wait() {
        for read_wait in [false, true] {
            let cfg = Config {
                read_wait,
                ..Config::default()
            };
            let mut c = Cluster::new(3, cfg, None, 0);
            c.client(1, put("k", "new"));
            for (f, t) in [(1, 2), (1, 3), (2, 1), (3, 1)] {
                c.deliver_from(f, t);
            }
            assert!(c.node(1).holds_lock(), "SERVER_WRITEs in flight");
            let first = c.client(1, get("k"));
            let second = c.client(3, get("k"));
            let old = Some(&Response::Value(None));
            assert_eq!(c.answers.get(&second), old);
            if read_wait {
                assert_eq!(c.answers.get(&first), None, "waits for the release");
                c.settle();
                assert_eq!(c.answers[&first], Response::Value(Some(b("new"))));
            } else {
                let new = Response::Value(Some(b("new")));
                assert_eq!(c.answers[&first], new, "new, then old: not linearizable");
            }
        }
    }

    /// The price of the lock timeout: a holder that is only slow (paused)
    /// is evicted while still inside its critical section, and another
    /// server enters: two holders. Once it wakes it is told, rejoins, and
    /// the replicas converge again.
    #[test]
    fn a_lock_timeout_evicts_a_slow_holder_and_two_servers_hold_the_lock() {
        let cfg = Config {
            lock_timeout: Some(Duration::from_millis(100)),
            ..Config::default()
        };
        let mut c = Cluster::new(3, cfg, None, 0);
        let slow = c.client(1, put("k", "slow"));
        for (f, t) in [(1, 2), (1, 3), (2, 1), (3, 1)] {
            c.deliver_from(f, t);
        }
        assert!(c.node(1).holds_lock());
        c.paused.insert(1);
        let fast = c.client(2, put("k", "fast"));
        c.run_for(Duration::from_millis(300));
        assert_eq!(c.answers.get(&fast), Some(&Response::Done));
        assert_eq!(c.max_holders, 2, "mutual exclusion lost");
        c.paused.clear();
        c.run_for(Duration::from_secs(1));
        assert!(matches!(&c.answers[&slow], Response::Failed(e) if !e.is_definite()));
        c.assert_converged();
    }

    /// A holder that dies after its SERVER_WRITE reached one peer only:
    /// once it is back, recovery merges every peer's store and repairs
    /// the other, and writes resume.
    #[test]
    fn a_holder_crashing_mid_broadcast_leaves_no_divergence_after_recovery() {
        let mut c = Cluster::new(3, Config::default(), None, 0);
        c.client(1, put("k", "v"));
        c.deliver_from(1, 2);
        c.deliver_from(1, 3);
        c.deliver_from(2, 1);
        c.deliver_from(3, 1); // 1 enters, applies, SERVER_WRITE to 2 and 3
        assert!(c.node(1).holds_lock());
        c.deliver_from(1, 2); // reaches 2 only
        assert_eq!(c.node(2).value(b"k"), Some(b("v")));
        c.restart(1);
        let early = c.client(1, get("k"));
        assert!(matches!(&c.answers[&early], Response::Failed(e) if e.is_definite()));
        c.settle();
        assert!(!c.node(1).is_recovering());
        c.assert_converged();
        assert_eq!(c.node(3).value(b"k"), Some(b("v")), "repaired");
        let w = c.client(3, put("k", "after"));
        c.settle();
        assert!(done(&c, &[w]));
        c.assert_converged();
    }

    /// A silent peer is evicted after the lock timeout: the write goes on
    /// without it; once it speaks again it is told, rejoins and catches up.
    #[test]
    fn a_silent_peer_is_evicted_after_the_lock_timeout_and_rejoins() {
        let cfg = Config {
            lock_timeout: Some(Duration::from_millis(100)),
            ..Config::default()
        };
        let mut c = Cluster::new(3, cfg, None, 0);
        c.paused.insert(3);
        let w = c.client(1, put("k", "v"));
        c.run_for(Duration::from_millis(50));
        assert!(c.answers.is_empty(), "blocked on 3 before the timeout");
        c.run_for(Duration::from_millis(200));
        assert!(done(&c, &[w]), "{:?}", c.answers);
        assert_eq!(c.node(1).counters.evictions, 1);
        assert_eq!(c.node(2).counters.evictions, 0, "2 waited for nobody");
        c.paused.clear();
        c.run_for(Duration::from_secs(1));
        assert!(c
            .nodes
            .iter()
            .all(|n| n.evicted.is_empty() && !n.is_recovering()));
        c.assert_converged();
        let w2 = c.client(3, put("k", "back"));
        c.settle();
        assert!(done(&c, &[w2]));
        c.assert_converged();
        // A holder that dies inside its critical section: the next
        // writer's stall is about one lock timeout, and the passive server
        // drops the dead holder too (else it would hold the write back).
        let cfg = Config {
            lock_timeout: Some(Duration::from_millis(200)),
            ..Config::default()
        };
        let mut c = Cluster::new(3, cfg, None, 0);
        c.client(1, put("k", "dead"));
        for (f, t) in [(1, 2), (1, 3), (2, 1), (3, 1), (1, 2), (1, 3)] {
            c.deliver_from(f, t);
        }
        assert!(c.node(1).holds_lock());
        c.paused.insert(1);
        let w = c.client(2, put("k", "next"));
        c.run_for(Duration::from_millis(150));
        assert!(!c.answers.contains_key(&w));
        c.run_for(Duration::from_millis(200));
        assert_eq!(c.answers.get(&w), Some(&Response::Done));
        assert_eq!(c.node(3).counters.evictions, 1, "3 dropped 1, not 2");
        assert_eq!(c.node(2).counters.evictions, 1);
        assert_eq!(c.node(3).value(b"k"), Some(b("next")));
        // Without a lock timeout the write just waits (the seed).
        let mut c = Cluster::new(3, Config::default(), None, 0);
        c.paused.insert(3);
        c.client(1, put("k", "v"));
        c.run_for(Duration::from_secs(1));
        assert!(c.answers.is_empty() && c.node(1).evicted.is_empty());
    }
}
