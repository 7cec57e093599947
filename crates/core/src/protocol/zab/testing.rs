//! An in-memory cluster for the unit tests: FIFO delivery in send order,
//! ticks by hand, a disk per server (restored in the driver's order), and
//! crashes that lose nothing persisted.

use super::bugs::InjectedBug;
use super::msg::{Msg, Timer};
use super::msg::{PeerState, Vote, Zxid};
use super::node::{Config, ZabNode};
use crate::protocol::contract::{Command, LinkEvent, Out, Protocol, Record};
use crate::types::{ClientRef, Event, NodeId, Peer, Request, Response, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// What survives a crash, replayed in `Protocol::restore`'s order.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    meta: BTreeMap<String, Bytes>,
    snapshot: Option<(u64, Bytes)>,
    entries: BTreeMap<u64, (u64, Bytes)>,
}

impl Disk {
    fn write(&mut self, r: Record) {
        match r {
            Record::Meta { key, value } => {
                self.meta.insert(key, value);
            }
            Record::Snapshot { index, data } => {
                self.snapshot = Some((index, data));
                self.entries = self.entries.split_off(&(index + 1));
            }
            Record::Entry { index, epoch, data } => {
                self.entries.insert(index, (epoch, data));
            }
            Record::TruncateFrom { index } => {
                self.entries.split_off(&index);
            }
            Record::Register { .. } => {}
        }
    }
    pub fn records(&self) -> Vec<Record> {
        let mut v: Vec<Record> = (self.meta.iter())
            .map(|(k, v)| Record::Meta {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        if let Some((index, data)) = &self.snapshot {
            v.push(Record::Snapshot {
                index: *index,
                data: data.clone(),
            });
        }
        for (&index, (epoch, data)) in &self.entries {
            v.push(Record::Entry {
                index,
                epoch: *epoch,
                data: data.clone(),
            });
        }
        v
    }
}

pub struct Cluster {
    pub nodes: Vec<Option<ZabNode>>,
    pub disks: Vec<Disk>,
    pub now: Time,
    pub cfg: Config,
    pub bug: Option<InjectedBug>,
    /// The broadcast variant, coin p and A1.1 every boot runs with.
    pub bcast: (super::Variant, f64, bool),
    queue: VecDeque<(NodeId, NodeId, Msg)>,
    /// Paused servers (no ticks) and the messages held for them.
    paused: Vec<NodeId>,
    held: Vec<(NodeId, NodeId, Msg)>,
    pub replies: Vec<(NodeId, ClientRef, Response)>,
    /// Events pushed (`Command::Notify`): server, connection, event.
    pub events: Vec<(NodeId, u64, Event)>,
    lives: u64,
    next_client: u64,
    /// The initial configuration is servers `1..=voters`; the others are
    /// spares (`ZabNode::with_spares`).
    voters: u32,
}

impl Cluster {
    pub fn new(n: u32, cfg: Config) -> Cluster {
        Cluster::running(n, cfg, (super::Variant::Zab, 0.5, true))
    }
    /// A cluster whose servers run broadcast variant `(variant, p, A1.1)`.
    pub fn running(n: u32, cfg: Config, bcast: (super::Variant, f64, bool)) -> Cluster {
        let mut c = Cluster {
            nodes: Vec::new(),
            disks: vec![Disk::default(); n as usize],
            now: Time::ZERO,
            cfg,
            bug: None,
            bcast,
            queue: VecDeque::new(),
            paused: Vec::new(),
            held: Vec::new(),
            replies: Vec::new(),
            events: Vec::new(),
            lives: 0,
            next_client: 1,
            voters: n,
        };
        c.nodes = (1..=n).map(|_| None).collect();
        for id in 1..=n {
            c.boot(id);
        }
        c
    }
    /// `voters` servers in the initial configuration and `spares` more
    /// outside it, all running (membership change, `reconfig_tests.rs`).
    pub fn with_spares(voters: u32, spares: u32, cfg: Config) -> Cluster {
        let mut c = Cluster::new(0, cfg);
        c.voters = voters;
        let n = voters + spares;
        c.disks = vec![Disk::default(); n as usize];
        c.nodes = (1..=n).map(|_| None).collect();
        for id in 1..=n {
            c.boot(id);
        }
        c
    }
    fn members(&self) -> Vec<NodeId> {
        (1..=self.nodes.len() as u32).collect()
    }
    fn boot(&mut self, id: NodeId) {
        self.lives += 1;
        let writer = u64::from(id) | self.lives << 32;
        let (v, p, stay_out) = self.bcast;
        let all = self.members();
        let (initial, spares) = all.split_at(self.voters.min(all.len() as u32) as usize);
        let mut node = ZabNode::new(id, initial, writer, self.cfg)
            .with_spares(spares)
            .with_bug(self.bug)
            .with_broadcast(v, p, u64::from(id))
            .with_stay_out(stay_out);
        for r in self.disks[id as usize - 1].records() {
            node.restore(r);
        }
        self.nodes[id as usize - 1] = Some(node);
        self.call(id, |n, now, out| n.on_start(now, out));
    }
    pub fn node(&self, id: NodeId) -> &ZabNode {
        self.nodes[id as usize - 1].as_ref().expect("up")
    }
    fn call(&mut self, id: NodeId, f: impl FnOnce(&mut ZabNode, Time, &mut Out<Msg, Timer>)) {
        self.act(id, f);
    }
    /// Call server `id` by hand and carry out what it asks for (sends,
    /// records); `None` if it is down.
    pub fn act<R>(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut ZabNode, Time, &mut Out<Msg, Timer>) -> R,
    ) -> Option<R> {
        let now = self.now;
        let node = self.nodes[id as usize - 1].as_mut()?;
        let mut out = Out::new();
        let r = f(node, now, &mut out);
        // The disk is synchronous: nothing waits for it.
        for cmd in out.drain() {
            match cmd.plain() {
                Command::Send {
                    to: Peer::Node(to),
                    msg,
                } => self.queue.push_back((id, to, msg)),
                // Durable at once, back in order.
                Command::WhenDurable(msg) => self.queue.push_back((id, id, msg)),
                Command::Reply { client, resp } => self.replies.push((id, client, resp)),
                Command::Persist(r) => self.disks[id as usize - 1].write(r),
                Command::Notify { session, event } => self.events.push((id, session, event)),
                _ => {}
            }
        }
        Some(r)
    }
    /// Deliver every message in flight (and those they cause).
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            let Some((from, to, msg)) = self.queue.pop_front() else {
                return;
            };
            if self.paused.contains(&to) {
                self.held.push((from, to, msg));
                continue;
            }
            self.call(to, |n, now, out| n.on_msg(now, Peer::Node(from), msg, out));
        }
        panic!("messages never stop");
    }
    /// One tick of virtual time at every live server, then delivery.
    pub fn tick(&mut self) {
        self.now = self.now.saturating_add(self.cfg.tick);
        for id in self.members() {
            if self.paused.contains(&id) {
                continue;
            }
            self.call(id, |n, now, out| n.on_timer(now, Timer::Finalize, out));
            self.call(id, |n, now, out| n.on_timer(now, Timer::Tick, out));
        }
        self.run();
    }
    /// Tick until some server leads with every live server following it.
    pub fn settle(&mut self) -> NodeId {
        self.settle_ticks().0
    }
    /// `settle`, and how many ticks it took.
    pub fn settle_ticks(&mut self) -> (NodeId, u32) {
        for ticks in 1..=200 {
            self.tick();
            let up: Vec<&ZabNode> = self.nodes.iter().flatten().collect();
            let leaders: Vec<NodeId> = up.iter().filter_map(|n| n.leader()).collect();
            if leaders.len() == up.len() && leaders.iter().all(|&l| l == leaders[0]) {
                return (leaders[0], ticks);
            }
        }
        panic!("no leader after 200 ticks");
    }
    /// Call server `id` by hand: what it asks for is returned, not carried out.
    pub fn exec(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut ZabNode, Time, &mut Out<Msg, Timer>),
    ) -> Vec<Command<Msg, Timer>> {
        let now = self.now;
        let mut out = Out::new();
        f(
            self.nodes[id as usize - 1].as_mut().expect("up"),
            now,
            &mut out,
        );
        out.drain().collect()
    }
    pub fn crash(&mut self, id: NodeId) {
        self.nodes[id as usize - 1] = None;
        self.queue.retain(|(f, t, _)| *f != id && *t != id);
        self.held.retain(|(f, t, _)| *f != id && *t != id);
        self.paused.retain(|&p| p != id);
        for other in self.members() {
            if other != id {
                let ev = LinkEvent::Down(Peer::Node(id));
                self.call(other, |n, now, out| n.on_link(now, ev, out));
            }
        }
    }
    /// Server `id` stops (a stalled process): no ticks, and what is sent
    /// to it waits, with its links up; `resume` hands it everything.
    pub fn pause(&mut self, id: NodeId) {
        self.paused.push(id);
    }
    pub fn resume(&mut self, id: NodeId) {
        self.paused.retain(|&p| p != id);
        let held = std::mem::take(&mut self.held);
        let (to_it, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|m| m.1 == id);
        self.held = rest;
        self.queue.extend(to_it);
        self.run();
    }
    pub fn restart(&mut self, id: NodeId) {
        self.boot(id);
    }
    /// Ask server `at` for `req`; returns its answer once given.
    pub fn ask(&mut self, at: NodeId, req: Request) -> Option<Response> {
        let client = ClientRef::local(self.next_client);
        self.ask_as(at, client, req)
    }
    /// Ask as `client` (its session and operation id); a fresh request id.
    pub fn ask_as(&mut self, at: NodeId, client: ClientRef, req: Request) -> Option<Response> {
        let client = ClientRef {
            id: self.next_client,
            ..client
        };
        self.next_client += 1;
        self.call(at, |n, now, out| n.on_client(now, client, req, out));
        for _ in 0..50 {
            self.run();
            if let Some(i) = self.replies.iter().position(|(_, c, _)| *c == client) {
                return Some(self.replies.remove(i).2);
            }
            self.tick();
        }
        None
    }
    /// Ask as `client` without waiting (a fresh request id, returned; the
    /// answer lands in `replies`).
    pub fn send_as(&mut self, at: NodeId, client: ClientRef, req: Request) -> ClientRef {
        let client = ClientRef {
            id: self.next_client,
            ..client
        };
        self.next_client += 1;
        self.call(at, |n, now, out| n.on_client(now, client, req, out));
        client
    }
    /// Ask without waiting (the answer lands in `replies`).
    pub fn send(&mut self, at: NodeId, req: Request) -> ClientRef {
        let client = ClientRef::local(self.next_client);
        self.next_client += 1;
        self.call(at, |n, now, out| n.on_client(now, client, req, out));
        client
    }
}

pub use crate::protocol::test_harness::{get, put};

pub type Cmds = Vec<Command<Msg, Timer>>;

pub fn vote(leader: NodeId, cur_epoch: u64, (epoch, counter): (u64, u64)) -> Vote {
    Vote {
        leader,
        cur_epoch,
        last: Zxid { epoch, counter },
    }
}

pub fn notify(round: u64, vote: Option<Vote>, state: PeerState, recovering: bool) -> Msg {
    Msg::Notify {
        round,
        vote,
        state,
        recovering,
        led: 0,
    }
}

/// Server `id` of `1..=n`, alone, with current epoch `cur` and a log whose
/// entries have the epochs `log`; started (looking, round 1).
pub fn lone(id: NodeId, n: u32, cur: u64, log: &[u64]) -> ZabNode {
    let members: Vec<NodeId> = (1..=n).collect();
    let mut node = ZabNode::new(id, &members, u64::from(id), Config::default());
    node.current_epoch = cur;
    node.accepted = (cur, id);
    for &e in log {
        node.log.append(e, Bytes::new());
    }
    node.on_start(Time::ZERO, &mut Out::new());
    node
}

pub fn hear(n: &mut ZabNode, from: NodeId, msg: Msg) -> Cmds {
    let mut out = Out::new();
    n.on_msg(Time::ZERO, Peer::Node(from), msg, &mut out);
    out.drain().collect()
}

/// A settled ct-q cluster of three with a fixed p: its leader and its
/// two followers.
pub fn ct_q_three() -> (Cluster, NodeId, NodeId, NodeId) {
    let c = Cluster::running(3, Config::default(), (super::Variant::CtQ, 0.5, true));
    settled_three(c)
}

/// Settle a cluster of three: it, its leader and its two followers.
pub fn settled_three(mut c: Cluster) -> (Cluster, NodeId, NodeId, NodeId) {
    let l = c.settle();
    let mut f = (1..=3).filter(|&n| n != l);
    let (f1, f2) = (f.next().expect("two"), f.next().expect("two"));
    (c, l, f1, f2)
}

/// Three servers, n3 leading (the highest id, every log empty).
pub fn settled() -> Cluster {
    let mut c = Cluster::new(3, Config::default());
    assert_eq!(c.settle(), 3);
    c
}

/// Server `id` receives `msg` from `from`; what it asks for is returned.
pub fn at(c: &mut Cluster, id: NodeId, from: NodeId, msg: Msg) -> Cmds {
    c.exec(id, |n, now, out| n.on_msg(now, Peer::Node(from), msg, out))
}

/// The messages among `cmds` (`Send` and `SendNow`), with their recipients.
pub fn sent(cmds: &[Command<Msg, Timer>]) -> Vec<(NodeId, Msg)> {
    (cmds.iter())
        .filter_map(|c| match c.clone().plain() {
            Command::Send {
                to: Peer::Node(n),
                msg,
            } => Some((n, msg)),
            _ => None,
        })
        .collect()
}

pub fn value(v: &str) -> Response {
    Response::Value(Some(Bytes::copy_from_slice(v.as_bytes())))
}
