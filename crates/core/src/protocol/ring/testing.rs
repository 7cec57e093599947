//! Helpers of the ring's unit tests, and a multi-node harness: in-memory
//! servers exchanging messages one delivery at a time, FIFO per pair of
//! servers (one global queue), with crashes seen by every survivor as
//! `Down` (the perfect failure detector).

use super::bugs::InjectedBug;
use super::msg::{Entry, Msg, Timer};
use super::node::{RingConfig, RingNode};
use crate::protocol::contract::{Command, LinkEvent, Out, Protocol, Record};
use crate::types::{ClientRef, NodeId, OpId, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub type O = Out<Msg, Timer>;
pub const T0: Time = Time(0);

pub fn tag(ts: u64, writer: u64) -> Tag {
    Tag { ts, writer }
}
pub fn key() -> Bytes {
    Bytes::from_static(b"k")
}
/// A write of `v` to [`key`] at `[ts, writer]` from origin `writer`.
pub fn entry(ts: u64, writer: u64, v: &str) -> Entry {
    Entry {
        key: key(),
        tag: tag(ts, writer),
        value: Some(Bytes::copy_from_slice(v.as_bytes())),
        origin: writer as NodeId,
        home: writer as NodeId,
        op: OpId::NONE,
        void: false,
    }
}
pub fn entry_from(origin: NodeId, ts: u64) -> Entry {
    entry(ts, u64::from(origin), "x")
}
pub fn put(v: &str) -> Request {
    Request::Put {
        key: key(),
        value: Bytes::copy_from_slice(v.as_bytes()),
    }
}
pub fn get() -> Request {
    Request::Get { key: key() }
}
/// The messages a handler sent, in order (other commands dropped).
pub fn sends(out: &mut O) -> Vec<(Peer, Msg)> {
    (out.drain())
        .filter_map(|c| match c {
            Command::Send { to, msg } => Some((to, msg)),
            _ => None,
        })
        .collect()
}

/// Server `id` of a ring of `n` with `rejoin` on (members 1..=n).
pub fn rejoining(id: NodeId, n: u32) -> RingNode {
    let cfg = RingConfig {
        rejoin: true,
        ..RingConfig::default()
    };
    RingNode::new(id, (1..=n).collect(), cfg)
}

pub fn value(v: &str) -> Response {
    Response::Value(Some(Bytes::copy_from_slice(v.as_bytes())))
}

/// In-memory servers and the messages between them.
pub struct Net {
    pub nodes: BTreeMap<NodeId, RingNode>,
    pub dead: BTreeSet<NodeId>,
    /// `(from, to, msg)` in sending order.
    pub wire: VecDeque<(NodeId, NodeId, Msg)>,
    pub replies: Vec<(ClientRef, Response)>,
    /// The lowest tag each value was sent under (not void copies).
    pub tags: BTreeMap<Vec<u8>, Tag>,
    /// The tag the answering server held when it answered each read.
    pub read_tags: BTreeMap<ClientRef, Tag>,
    /// Every tag each value was sent under (not void copies).
    pub all_tags: BTreeMap<Vec<u8>, BTreeSet<Tag>>,
    /// Restarts per server (its life; writer id = id + life << 32).
    pub lives: BTreeMap<NodeId, u64>,
    /// Servers with a `Join` timer set and not yet fired (one per server:
    /// setting it again re-arms it).
    pub timers: BTreeSet<NodeId>,
    /// With [`Net::durable`]: each server's records (synced at once: the
    /// harness runs a call's commands in order, so a persist precedes every
    /// later send). A restart reads them back instead of losing its state.
    pub disks: Option<BTreeMap<NodeId, Vec<Record>>>,
    cfg: RingConfig,
    bug: Option<InjectedBug>,
    next_client: u64,
}

impl Net {
    pub fn new(n: u32, cfg: RingConfig, bug: Option<InjectedBug>) -> Net {
        let cfg = RingConfig {
            rejoin: true,
            ..cfg
        };
        let members: Vec<NodeId> = (1..=n).collect();
        let nodes = (members.iter())
            .map(|&i| {
                let node = RingNode::new(i, members.clone(), cfg.clone());
                (i, node.with_bug(bug))
            })
            .collect();
        Net {
            nodes,
            dead: BTreeSet::new(),
            wire: VecDeque::new(),
            replies: Vec::new(),
            tags: BTreeMap::new(),
            all_tags: BTreeMap::new(),
            read_tags: BTreeMap::new(),
            lives: BTreeMap::new(),
            timers: BTreeSet::new(),
            disks: None,
            cfg,
            bug,
            next_client: 0,
        }
    }
    /// Servers keep their records: started (`on_start`) with a disk each.
    pub fn durable(mut self) -> Net {
        self.disks = Some(self.nodes.keys().map(|&n| (n, Vec::new())).collect());
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for n in ids {
            let node = self.nodes.remove(&n).unwrap().with_durable(true);
            self.nodes.insert(n, node);
            let mut out = O::new();
            self.nodes.get_mut(&n).unwrap().on_start(T0, &mut out);
            self.exec(n, out);
        }
        self
    }
    pub fn node(&self, id: NodeId) -> &RingNode {
        &self.nodes[&id]
    }

    fn exec(&mut self, at: NodeId, mut out: O) {
        for c in out.drain() {
            match c {
                Command::Send {
                    to: Peer::Node(to),
                    msg,
                } => {
                    if let Some(e) = msg.entry().filter(|e| !e.void) {
                        let v = e.value.as_deref().unwrap_or_default().to_vec();
                        self.all_tags.entry(v.clone()).or_default().insert(e.tag);
                        let t = self.tags.entry(v).or_insert(e.tag);
                        *t = (*t).min(e.tag);
                    }
                    self.wire.push_back((at, to, msg));
                }
                Command::Reply { client, resp } => {
                    if std::env::var("RING_TRACE").is_ok() {
                        eprintln!("REPLY {at} client {} {resp:?}", client.id);
                    }
                    if let Response::Value(v) = &resp {
                        let t = self.read_tag(at, v.as_deref());
                        self.read_tags.insert(client, t);
                    }
                    self.replies.push((client, resp));
                }
                Command::SetTimer {
                    timer: Timer::Join, ..
                } => {
                    self.timers.insert(at);
                }
                Command::Persist(rec) => {
                    let disks = self.disks.as_mut().expect("persist on a memory node");
                    disks.get_mut(&at).unwrap().push(rec);
                }
                other => panic!("unexpected command {other:?}"),
            }
        }
    }

    /// The tag of the value `v` a read at `at` just answered: the one held,
    /// or (a crash can apply several writes in one call) the highest tag
    /// `v` was sent under at or below it.
    fn read_tag(&self, at: NodeId, v: Option<&[u8]>) -> Tag {
        let Some(reg) = self.nodes[&at].register(b"k") else {
            return Tag::ZERO;
        };
        match v {
            _ if reg.value.as_deref() == v => reg.tag,
            None => Tag::ZERO,
            Some(v) => (self.all_tags.get(v).into_iter().flatten())
                .filter(|t| **t <= reg.tag)
                .max()
                .copied()
                .unwrap_or(Tag::ZERO),
        }
    }

    /// A client asks server `at`; its `op` names the operation (retries
    /// reuse it). Returns the request's handle.
    pub fn ask(&mut self, at: NodeId, req: Request, op: OpId) -> ClientRef {
        self.next_client += 1;
        let client = ClientRef {
            id: self.next_client,
            session: 1,
            op,
        };
        if std::env::var("RING_TRACE").is_ok() {
            eprintln!("ASK {at} client {} {op:?} {req:?}", client.id);
        }
        let mut out = O::new();
        self.nodes
            .get_mut(&at)
            .unwrap()
            .on_client(T0, client, req, &mut out);
        self.exec(at, out);
        client
    }

    /// Deliver the oldest message; false when none is left.
    pub fn step(&mut self) -> bool {
        let Some((from, to, msg)) = self.wire.pop_front() else {
            return false;
        };
        if std::env::var("RING_TRACE").is_ok() {
            eprintln!("{from}->{to} dead={} {msg:?}", self.dead.contains(&to));
        }
        if !self.dead.contains(&to) {
            let mut out = O::new();
            let node = self.nodes.get_mut(&to).unwrap();
            node.on_msg(T0, Peer::Node(from), msg, &mut out);
            self.exec(to, out);
        }
        true
    }
    /// Deliver the oldest message of a pair chosen by `pick` (an index into
    /// the wire): links stay FIFO, pairs interleave at random.
    pub fn step_pair(&mut self, pick: usize) -> bool {
        let Some((f, t, _)) = self.wire.get(pick % self.wire.len().max(1)) else {
            return false;
        };
        let (f, t) = (*f, *t);
        let first = (self.wire.iter())
            .position(|(a, b, _)| (*a, *b) == (f, t))
            .expect("present");
        let m = self.wire.remove(first).expect("present");
        self.wire.push_front(m);
        self.step()
    }
    /// Deliver `n` messages (or fewer if the wire empties).
    pub fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }
    /// Deliver everything; panics if messages circulate for ever.
    pub fn settle(&mut self) {
        assert!(
            self.try_settle(),
            "messages still circulate after 100000 deliveries"
        );
    }
    /// Deliver everything, or give up after 100000 deliveries (false).
    /// Timers fire only once the wire is empty (a retry comes after every
    /// message in flight), a round at a time, until none is set.
    pub fn try_settle(&mut self) -> bool {
        for _ in 0..100_000 {
            if self.step() {
                continue;
            }
            if self.timers.is_empty() {
                return true;
            }
            self.fire_timers();
        }
        false
    }
    /// Fire every `Join` timer that is set (each server's once).
    pub fn fire_timers(&mut self) {
        for at in std::mem::take(&mut self.timers) {
            if self.dead.contains(&at) {
                continue;
            }
            let mut out = O::new();
            let node = self.nodes.get_mut(&at).unwrap();
            node.on_timer(T0, Timer::Join, &mut out);
            self.exec(at, out);
        }
    }
    /// Deliver until `done` holds (checked before each delivery).
    pub fn run_until(&mut self, mut done: impl FnMut(&Net) -> bool) {
        while !done(self) {
            assert!(self.step(), "the wire emptied first");
        }
    }

    /// `j` crashes: what is on the wire to or from it is lost, and every
    /// survivor learns it (TCP close / heartbeat loss).
    pub fn crash(&mut self, j: NodeId) {
        if std::env::var("RING_TRACE").is_ok() {
            eprintln!("CRASH {j}");
        }
        self.dead.insert(j);
        self.timers.remove(&j);
        self.wire.retain(|(f, t, _)| *f != j && *t != j);
        let live: Vec<NodeId> = (self.nodes.keys().copied())
            .filter(|n| !self.dead.contains(n))
            .collect();
        for n in live {
            let mut out = O::new();
            let ev = LinkEvent::Down(Peer::Node(j));
            self.nodes.get_mut(&n).unwrap().on_link(T0, ev, &mut out);
            self.exec(n, out);
        }
    }

    /// `j` restarts with nothing (a new life, outside the view): every live
    /// peer sees its new connection come `Up`, and it learns which peers
    /// are down at once. It asks to join at start.
    pub fn restart(&mut self, j: NodeId) {
        assert!(self.dead.remove(&j), "{j} is not down");
        if std::env::var("RING_TRACE").is_ok() {
            eprintln!("RESTART {j}");
        }
        self.wire.retain(|(_, t, _)| *t != j); // sent to the dead: lost
        let life = self.lives.entry(j).or_default();
        *life += 1;
        let members: Vec<NodeId> = self.nodes.keys().copied().collect();
        let node = RingNode::new(j, members, self.cfg.clone())
            .with_writer(u64::from(j) | *life << 32)
            .with_bug(self.bug);
        let node = match self.disks.as_ref().map(|d| d[&j].clone()) {
            Some(records) => {
                let mut node = node.with_durable(true);
                for rec in records {
                    node.restore(rec);
                }
                node
            }
            None => node.restarted(),
        };
        self.nodes.insert(j, node);
        let mut out = O::new();
        self.nodes.get_mut(&j).unwrap().on_start(T0, &mut out);
        self.exec(j, out);
        let peers: Vec<NodeId> = self.nodes.keys().copied().filter(|&n| n != j).collect();
        for n in peers {
            let (at, ev) = match self.dead.contains(&n) {
                true => (j, LinkEvent::Down(Peer::Node(n))),
                false => (n, LinkEvent::Up(Peer::Node(j))),
            };
            let mut out = O::new();
            self.nodes.get_mut(&at).unwrap().on_link(T0, ev, &mut out);
            self.exec(at, out);
        }
    }
    /// Live servers in the view (not restarted and waiting to rejoin).
    pub fn serving(&self) -> Vec<NodeId> {
        (self.nodes.iter())
            .filter(|(n, node)| !self.dead.contains(n) && !node.is_outside())
            .map(|(&n, _)| n)
            .collect()
    }

    /// The answer given to `c`, if any (panics if it got two).
    pub fn answer(&self, c: ClientRef) -> Option<Response> {
        let mut it = self.replies.iter().filter(|(r, _)| *r == c);
        let first = it.next().map(|(_, r)| r.clone());
        assert!(it.next().is_none(), "{c:?} answered twice");
        first
    }
    /// `(tag, value)` of [`key`] at every live server.
    pub fn registers(&self) -> Vec<(NodeId, Tag, Option<Bytes>)> {
        (self.nodes.iter())
            .filter(|(n, _)| !self.dead.contains(n))
            .map(|(&n, node)| {
                let r = node.register(b"k").cloned().unwrap_or_default();
                (n, r.tag, r.value)
            })
            .collect()
    }
}
