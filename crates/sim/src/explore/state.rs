//! The explored system: N replica cores, the clients (with their
//! client-side coordinators when the protocol has them), the messages in
//! flight, pending timers, disks, fault budgets and the clients' history.
//! Cores are not `Clone`, so a state is reached by replaying its path from
//! [`System::new`]; [`System::fingerprint`] names it for deduplication.

use super::choice::{Choice, Ep};
use super::config::ExploreConfig;
use crate::config::Durability;
use crate::history::OpRecord;
use quorumkv_core::protocol::{LinkEvent, LinkModel, Protocol, ProtocolDef, Record};
use quorumkv_core::{ClientRef, NodeId, Request, Response};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, VecDeque};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

pub(super) type NodeTimer<D> = <<D as ProtocolDef>::Node as Protocol>::Timer;
pub(super) type ClientTimer<D> = <<D as ProtocolDef>::Client as Protocol>::Timer;

/// What a packet carries.
#[derive(Debug)]
pub(super) enum Payload<M> {
    Msg(M),
    /// Proxy mode: a client's request to its server, over TCP.
    Request {
        cref: ClientRef,
        req: Request,
    },
    /// Proxy mode: the server's answer.
    Reply {
        cref: ClientRef,
        resp: Response,
    },
}

#[derive(Debug)]
pub(super) struct Packet<M> {
    pub from: Ep,
    pub to: Ep,
    pub payload: Payload<M>,
    /// [`debug_id`] of the payload: the trace's `@id`.
    pub id: u64,
    /// Delivered in order with the other FIFO packets of its link.
    pub fifo: bool,
}

/// A pending timer: the timer, when it is due, and its trace id.
pub(super) struct Pending<T> {
    pub timer: T,
    pub due: u64,
    pub id: u64,
}

pub(super) struct NodeSt<D: ProtocolDef> {
    /// `None` while crashed.
    pub core: Option<D::Node>,
    pub timers: Vec<Pending<NodeTimer<D>>>,
    /// Records persisted (synced at once: `fsync` without its latency).
    pub disk: Vec<Record>,
    pub incarnation: u64,
    /// Client sessions this life has seen come `Up`.
    pub sessions: BTreeSet<u64>,
    /// Link events not yet reported to the core, in order.
    pub links: VecDeque<LinkEvent>,
}

pub(super) struct ClientSt<D: ProtocolDef> {
    pub coord: Option<D::Client>,
    pub timers: Vec<Pending<ClientTimer<D>>>,
    pub issued: u32,
    /// The open operation: its request number and history record.
    pub pending: Option<(u64, usize)>,
    pub process: u64,
}

/// What is left of each fault budget on this path.
#[derive(Clone, Copy, Debug, Hash)]
pub(super) struct Budgets {
    pub crashes: u32,
    pub losses: u32,
    pub dups: u32,
    pub timers: u32,
}

/// The scope, resolved against the protocol's types.
pub(super) struct Setup<D: ProtocolDef> {
    pub cfg: ExploreConfig,
    pub opts: D::Options,
    pub bug: Option<D::Bug>,
    pub members: Vec<NodeId>,
    /// Whether a crash may happen at all (the protocol's crash bound).
    pub may_crash: bool,
}

impl<D: ProtocolDef> Setup<D> {
    pub fn durable(&self) -> bool {
        self.cfg.durability != Durability::Memory && D::PERSISTS_STATE
    }
    pub fn coordinator_clients(&self) -> bool {
        D::HAS_CLIENT_COORDINATOR
    }
}

pub(super) struct System<'s, D: ProtocolDef> {
    pub setup: &'s Setup<D>,
    pub nodes: Vec<NodeSt<D>>,
    pub clients: Vec<ClientSt<D>>,
    /// In flight, in the order sent.
    pub net: Vec<Packet<D::Msg>>,
    /// Messages a node sent itself in the current step, delivered after
    /// its handler call returns (without network faults).
    pub selfq: VecDeque<(usize, D::Msg)>,
    /// Virtual time, µs: moves only when a timer fires (to its due time).
    pub now: u64,
    pub budgets: Budgets,
    pub history: Vec<OpRecord>,
    /// Orders invocations and completions (the history's real time,
    /// one µs per invocation or completion).
    pub stamp: u64,
    pub next_process: u64,
    /// Set by a step that completed an operation.
    pub completed: bool,
    /// The distinct crash points (commands run before it) of the step's
    /// handler call, for the search's crash-inside branches.
    pub cuts: Vec<u32>,
    /// Per core (nodes, then clients): the hash of its `Debug` text, or
    /// `None` if a handler ran since it was taken.
    pub core_hashes: Vec<Option<u64>>,
    /// Effects of each step, when tracing (`  n1 -> n2 Msg`).
    pub trace: Option<Vec<String>>,
    /// The protocol's per-step invariants (`ProtocolDef::Invariants`), fed
    /// every handler call along the path (a replay feeds them again).
    pub inv: D::Invariants,
    /// The first invariant the path broke.
    pub violation: Option<String>,
}

/// FNV-1a, fed formatted text without building the string: a hash that
/// stays the same across builds (trace ids).
struct Fnv(u64);

impl std::fmt::Write for Fnv {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for b in s.bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Ok(())
    }
}

/// The FNV-1a hash of `x`'s `Debug` text.
pub(super) fn debug_id(x: &impl Debug) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let _ = std::fmt::Write::write_fmt(&mut h, format_args!("{x:?}"));
    h.0
}

/// Hash `x`'s `Debug` text into `h` (no string built).
fn hash_debug(x: &impl Debug, h: &mut DefaultHasher) {
    struct W<'a>(&'a mut DefaultHasher);
    impl std::fmt::Write for W<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let _ = std::fmt::Write::write_fmt(&mut W(h), format_args!("{x:?}"));
    h.write_u8(0xff);
}

impl<'s, D: ProtocolDef> System<'s, D> {
    pub fn link_model(&self) -> LinkModel {
        D::LINK_MODEL
    }

    /// Every event enabled now, in a fixed order (crash cuts excluded:
    /// the search adds them once it knows a call's command count).
    pub fn enabled(&self) -> Vec<Choice> {
        let mut v = Vec::new();
        for (c, cl) in self.clients.iter().enumerate() {
            if cl.pending.is_none() && cl.issued < self.setup.cfg.ops {
                v.push(Choice::Issue { client: c });
            }
        }
        self.network_choices(&mut v);
        if self.budgets.timers > 0 {
            self.timer_choices(&mut v);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.core.is_some() && !n.links.is_empty() {
                v.push(Choice::Link { node: i, cut: None });
            }
        }
        self.node_fault_choices(&mut v);
        v
    }

    fn up(&self, ep: Ep) -> bool {
        match ep {
            Ep::Node(i) => self.nodes[i].core.is_some(),
            Ep::Client(_) => true,
        }
    }

    /// Index of the first packet that `choice`'s (from, to, id) names and
    /// that may be delivered now (FIFO packets only at their link's head).
    pub fn find_packet(&self, from: Ep, to: Ep, id: u64) -> Option<usize> {
        let mut fifo_seen = false;
        for (k, p) in self.net.iter().enumerate() {
            if p.from != from || p.to != to {
                continue;
            }
            if p.id == id && (!p.fifo || !fifo_seen) {
                return Some(k);
            }
            fifo_seen |= p.fifo;
        }
        None
    }

    fn network_choices(&self, v: &mut Vec<Choice>) {
        let lossy = self.link_model() == LinkModel::Unreliable;
        let mut seen = std::collections::HashSet::new();
        for p in &self.net {
            let key = (p.from, p.to, p.id);
            if !self.up(p.to) || !seen.insert(key) {
                continue;
            }
            if self.find_packet(p.from, p.to, p.id).is_none() {
                continue;
            }
            let (from, to, id) = key;
            v.push(Choice::Deliver {
                from,
                to,
                id,
                cut: None,
            });
            if lossy && !p.fifo && matches!(p.payload, Payload::Msg(_)) {
                if self.budgets.losses > 0 {
                    v.push(Choice::Drop { from, to, id });
                }
                if self.budgets.dups > 0 {
                    v.push(Choice::Dup { from, to, id });
                }
            }
        }
    }

    fn timer_choices(&self, v: &mut Vec<Choice>) {
        for (i, n) in self.nodes.iter().enumerate() {
            for t in &n.timers {
                let (at, id, cut) = (Ep::Node(i), t.id, None);
                v.push(Choice::Timer { at, id, cut });
            }
        }
        for (c, cl) in self.clients.iter().enumerate() {
            for t in &cl.timers {
                let (at, id, cut) = (Ep::Client(c), t.id, None);
                v.push(Choice::Timer { at, id, cut });
            }
        }
    }

    fn node_fault_choices(&self, v: &mut Vec<Choice>) {
        let n = self.nodes.len();
        if self.budgets.losses > 0 && self.link_model() == LinkModel::FifoReliable {
            for a in 0..n {
                for b in a + 1..n {
                    if self.nodes[a].core.is_some() && self.nodes[b].core.is_some() {
                        v.push(Choice::Reset { a, b });
                    }
                }
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.core.is_none() {
                v.push(Choice::Restart { node: i });
            } else if self.may_crash_now() {
                v.push(Choice::Crash { node: i });
            }
        }
    }

    /// A crash is within the budget and the protocol's bound.
    pub fn may_crash_now(&self) -> bool {
        let down = self.nodes.iter().filter(|n| n.core.is_none()).count();
        self.setup.may_crash && self.budgets.crashes > 0 && down == 0
    }

    /// The state's name for deduplication: everything that can influence
    /// what happens next or what the checker sees. The network is a
    /// multiset (per-link order kept only for FIFO packets), timers a set.
    pub fn fingerprint(&mut self) -> u64 {
        let n = self.nodes.len();
        for k in 0..self.core_hashes.len() {
            if self.core_hashes[k].is_none() {
                let mut h = DefaultHasher::new();
                match k < n {
                    true => hash_debug(&self.nodes[k].core, &mut h),
                    false => hash_debug(&self.clients[k - n].coord, &mut h),
                }
                self.core_hashes[k] = Some(h.finish());
            }
        }
        let mut h = DefaultHasher::new();
        self.now.hash(&mut h);
        self.budgets.hash(&mut h);
        self.core_hashes.hash(&mut h);
        for n in &self.nodes {
            hash_timers(&n.timers, &mut h);
            hash_debug(&n.disk, &mut h);
            (n.incarnation, &n.sessions).hash(&mut h);
            hash_debug(&n.links, &mut h);
        }
        for c in &self.clients {
            hash_timers(&c.timers, &mut h);
            (c.issued, c.pending, c.process).hash(&mut h);
        }
        let mut fifo: Vec<(Ep, Ep, u64)> = Vec::new();
        let mut bag: Vec<(Ep, Ep, u64)> = Vec::new();
        for p in &self.net {
            let k = (p.from, p.to, p.id);
            if p.fifo {
                fifo.push(k)
            } else {
                bag.push(k)
            }
        }
        fifo.sort_by_key(|&(f, t, _)| (f, t)); // stable: per-link order kept
        bag.sort_unstable();
        (fifo, bag).hash(&mut h);
        self.history.hash(&mut h);
        h.finish()
    }

    /// The hashes of the cores' `Debug` text (nodes, then clients), as
    /// [`Self::fingerprint`] left them.
    pub fn core_hashes(&self) -> Vec<u64> {
        self.core_hashes.iter().map(|h| h.unwrap_or(0)).collect()
    }

    /// Take the core hashes of the state this one was replayed to (no
    /// core has changed since): only the cores the next step touches are
    /// formatted again. Sound because a core changes only inside its own
    /// handler calls, which mark it ([`Self::touch`]).
    pub fn adopt_core_hashes(&mut self, hashes: &[u64]) {
        if hashes.len() == self.core_hashes.len() {
            self.core_hashes = hashes.iter().map(|&h| Some(h)).collect();
        }
    }

    /// Endpoint `ep`'s core may have changed.
    pub fn touch(&mut self, ep: Ep) {
        let k = match ep {
            Ep::Node(i) => i,
            Ep::Client(c) => self.nodes.len() + c,
        };
        if let Some(h) = self.core_hashes.get_mut(k) {
            *h = None;
        }
    }

    /// The clients' history, keyed for the checker's cache.
    pub fn history_key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.history.hash(&mut h);
        h.finish()
    }
}

fn hash_timers<T>(timers: &[Pending<T>], h: &mut DefaultHasher) {
    let mut ts: Vec<(u64, u64)> = timers.iter().map(|t| (t.id, t.due)).collect();
    ts.sort_unstable();
    ts.hash(h);
}
