//! The simulated world of one seed: virtual time, one event queue, the nodes,
//! the network, the nemesis and the clients.
//!
//! Organisation (TigerBeetle's VOPR): every parameter comes from the seed;
//! a *fault phase* in which the nemesis partitions, crashes and pauses nodes
//! and the network loses, duplicates, delays and reorders messages; then the
//! faults heal and a *liveness phase* in which every new operation must
//! complete within a bound. Everything has a limit (virtual time, events).
//!
//! The driver's contract of `quorumkv_core::protocol` is kept exactly:
//! handlers run one at a time; the commands of a call execute in order, and
//! a `Persist` is synced to the node's [`Disk`] before the call's next
//! command runs; a crash may fall between two commands of one call (the
//! later ones never happen), as real crashes do; a send to oneself comes
//! back through `on_msg` after the call returns, without network faults;
//! setting a pending timer replaces it (generation numbers); links are FIFO
//! unless the `reorder` fault is on.

use crate::config::{Durability, Fault, SeedParams, SimConfig};
use crate::disk::Disk;
use crate::history::{Clock, OpRecord, SimOp, SimOutcome};
use crate::protocol::{ClientSpec, NodeSpec, SimProtocol};
use crate::rng::{Rng, Stream};
use quorumkv_core::protocol::{Command, LinkEvent, Out, Protocol};
use quorumkv_core::{ClientRef, NodeId, Peer, Request, Response, Time};
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// Record a trace line (formatting only happens when tracing).
macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if $w.trace.is_some() {
            let line = format!($($arg)*);
            $w.push_trace(line);
        }
    };
}

mod actor;
mod nemesis;

use actor::{ClientIx, NodeIx};

type NodeTimer<P> = <<P as SimProtocol>::Node as Protocol>::Timer;
type ClientTimer<P> = <<P as SimProtocol>::Client as Protocol>::Timer;
type NodeOut<P> = Out<<P as SimProtocol>::Msg, NodeTimer<P>>;
type ClientOut<P> = Out<<P as SimProtocol>::Msg, ClientTimer<P>>;

/// Faults stop and the liveness phase starts at the latest at this instant.
const FAULT_PHASE_MAX_US: u64 = 30_000_000;
/// A run that has not finished by then is stuck.
const RUN_MAX_US: u64 = 300_000_000;
/// Events per operation before the run is declared runaway.
const EVENTS_PER_OP_MAX: u64 = 20_000;

/// Counters of one seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Protocol messages handed to the network (node↔node, node↔client).
    pub messages: u64,
    /// Client requests and replies carried in proxy mode.
    pub client_messages: u64,
    pub delivered: u64,
    pub lost: u64,
    pub cut: u64,
    pub duplicated: u64,
    pub events: u64,
    pub timers_fired: u64,
    pub crashes: u64,
    /// Crashes that fell between two commands of one handler call.
    pub crashes_inside: u64,
    /// Times the nemesis took more than f nodes down at once.
    pub outages: u64,
    pub partitions: u64,
    pub pauses: u64,
    pub ops_ok: u64,
    pub ops_fail: u64,
    pub ops_unknown: u64,
    /// Virtual time at the end of the run, µs.
    pub virtual_us: u64,
    /// When the faults healed, µs.
    pub healed_at_us: u64,
}

/// How a seed's run ended, before the history is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Every client issued all its operations and got an outcome.
    Finished,
    /// Liveness failure: an operation issued after the heal did not complete
    /// in time, or the run did not finish.
    Stuck(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ep {
    Node(usize),
    Client(usize),
}

enum Ev<P: SimProtocol> {
    NodeMsg {
        node: usize,
        from: Peer,
        msg: P::Msg,
    },
    ClientMsg {
        client: usize,
        from: Peer,
        msg: P::Msg,
    },
    NodeTimer {
        node: usize,
        timer: NodeTimer<P>,
        gen: u64,
    },
    ClientTimer {
        client: usize,
        timer: ClientTimer<P>,
        gen: u64,
    },
    /// Proxy mode: a client's request reaches a server node.
    ProxyRequest {
        node: usize,
        cref: ClientRef,
        req: Request,
    },
    /// Proxy mode: the server's answer reaches the client.
    ProxyReply {
        client: usize,
        cref: ClientRef,
        resp: Response,
    },
    ClientIssue {
        client: usize,
    },
    ClientTimeout {
        client: usize,
        req_no: u64,
    },
    Nemesis,
    Restart {
        node: usize,
    },
    Resume {
        node: usize,
        incarnation: u64,
    },
    HealPartition {
        epoch: u64,
    },
    HealAll,
}

impl<P: SimProtocol> Ev<P> {
    /// A copy for the duplicating network: protocol messages, and client
    /// requests too if the protocol deduplicates them (a retry that arrives
    /// after the first attempt; [`SimProtocol::DEDUPLICATES_REQUESTS`]).
    /// Replies travel on one TCP stream and are never duplicated.
    fn duplicate(&self) -> Option<Ev<P>> {
        Some(match self {
            Ev::NodeMsg { node, from, msg } => Ev::NodeMsg {
                node: *node,
                from: *from,
                msg: msg.clone(),
            },
            Ev::ClientMsg { client, from, msg } => Ev::ClientMsg {
                client: *client,
                from: *from,
                msg: msg.clone(),
            },
            Ev::ProxyRequest { node, cref, req } if P::DEDUPLICATES_REQUESTS => Ev::ProxyRequest {
                node: *node,
                cref: *cref,
                req: req.clone(),
            },
            _ => return None,
        })
    }

    fn describe(&self) -> String {
        match self {
            Ev::NodeMsg { msg, .. } | Ev::ClientMsg { msg, .. } => format!("{msg:?}"),
            Ev::ProxyRequest { cref, req, .. } => format!("request#{:x} {req:?}", cref.0),
            Ev::ProxyReply { cref, resp, .. } => format!("reply#{:x} {resp:?}", cref.0),
            _ => String::new(),
        }
    }
}

struct Entry<P: SimProtocol> {
    at: u64,
    seq: u64,
    ev: Ev<P>,
}

impl<P: SimProtocol> PartialEq for Entry<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<P: SimProtocol> Eq for Entry<P> {}
impl<P: SimProtocol> PartialOrd for Entry<P> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<P: SimProtocol> Ord for Entry<P> {
    /// Reversed: the heap pops the earliest event, ties in scheduling order.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

struct NodeSlot<P: SimProtocol> {
    /// `None` while crashed.
    core: Option<P::Node>,
    /// Pending timers and the generation that may fire them.
    timers: HashMap<NodeTimer<P>, u64>,
    /// What the node persisted; what survives a crash depends on the mode.
    disk: Disk,
    /// Whether the nemesis has chosen this node to crash inside a coming
    /// handler call, and which.
    crash_armed: Armed,
    paused: bool,
    /// Events that reached the node while paused, in arrival order.
    deferred: Vec<Ev<P>>,
    incarnation: u64,
}

/// A crash the nemesis has armed to fall inside a handler call of a node:
/// between two of the call's commands, so that the later ones never happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    No,
    /// The next call with two commands or more.
    AnyCall,
    /// The next call with two commands or more that persists something:
    /// crashes cluster around disk writes, and so do ordering bugs.
    PersistCall,
}

impl Armed {
    fn fires<M, T>(self, cmds: &[Command<M, T>]) -> bool {
        let persists = || cmds.iter().any(|c| matches!(c, Command::Persist(_)));
        match self {
            Armed::No => false,
            Armed::AnyCall => cmds.len() >= 2,
            Armed::PersistCall => cmds.len() >= 2 && persists(),
        }
    }
}

struct Pending {
    req_no: u64,
    record: usize,
}

struct ClientSlot<P: SimProtocol> {
    coord: Option<P::Client>,
    timers: HashMap<ClientTimer<P>, u64>,
    process: u64,
    issued: u32,
    quota: u32,
    pending: Option<Pending>,
    next_req: u64,
    done: bool,
    /// The next operation is a read (divergence bias: set when a partition heals).
    read_next: bool,
}

/// The outcome of [`World::run`].
pub struct RunResult {
    pub end: RunEnd,
    pub history: Vec<OpRecord>,
    pub stats: Stats,
    pub trace: Option<Vec<String>>,
}

pub struct World<'a, P: SimProtocol> {
    cfg: &'a SimConfig,
    p: SeedParams,
    bug: Option<P::Bug>,
    members: Vec<NodeId>,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Entry<P>>,
    nodes: Vec<NodeSlot<P>>,
    clients: Vec<ClientSlot<P>>,
    /// `blocked[from * E + to]`: the partition cuts messages from → to.
    blocked: Vec<bool>,
    /// FIFO links: the latest delivery instant per (from, to).
    link_last: Vec<u64>,
    /// Latency multiplier per (from, to): persistently slow links.
    link_mult: Vec<u64>,
    partition_epoch: u64,
    partition_active: bool,
    net_rng: Rng,
    nemesis_rng: Rng,
    work_rng: Rng,
    timer_rng: Rng,
    timer_gen: u64,
    healed: bool,
    /// Operations invoked from this instant on must complete in time.
    liveness_from_us: u64,
    issued_total: u32,
    clients_done: usize,
    next_process: u64,
    clock: Clock,
    history: Vec<OpRecord>,
    stuck: Option<String>,
    stats: Stats,
    trace: Option<Vec<String>>,
    node_out: NodeOut<P>,
    client_out: ClientOut<P>,
}

impl<'a, P: SimProtocol> World<'a, P> {
    pub fn new(cfg: &'a SimConfig, params: SeedParams, bug: Option<P::Bug>) -> Self {
        let seed = params.seed;
        let n = params.replicas as usize;
        let c = cfg.clients as usize;
        let e = n + c;
        let mut w = World {
            cfg,
            bug,
            members: (1..=params.replicas).collect(),
            now: 0,
            seq: 0,
            queue: BinaryHeap::with_capacity(1024),
            nodes: Vec::with_capacity(n),
            clients: Vec::with_capacity(c),
            blocked: vec![false; e * e],
            link_last: vec![0; e * e],
            link_mult: {
                let mut r = Rng::stream(seed, Stream::Links);
                let (p, max) = (params.slow_link_p, params.slow_link_max);
                (0..e * e)
                    .map(|_| if r.chance(p) { r.range(2, max) } else { 1 })
                    .collect()
            },
            partition_epoch: 0,
            partition_active: false,
            net_rng: Rng::stream(seed, Stream::Network),
            nemesis_rng: Rng::stream(seed, Stream::Nemesis),
            work_rng: Rng::stream(seed, Stream::Workload),
            timer_rng: Rng::stream(seed, Stream::Timers),
            timer_gen: 0,
            healed: false,
            liveness_from_us: u64::MAX,
            issued_total: 0,
            clients_done: 0,
            next_process: c as u64,
            clock: Clock::default(),
            history: Vec::with_capacity(cfg.ops as usize),
            stuck: None,
            stats: Stats::default(),
            trace: cfg.trace.then(Vec::new),
            node_out: Out::new(),
            client_out: Out::new(),
            p: params,
        };
        for _ in 0..n {
            w.nodes.push(NodeSlot {
                core: None,
                timers: HashMap::new(),
                disk: Disk::default(),
                crash_armed: Armed::No,
                paused: false,
                deferred: Vec::new(),
                incarnation: 0,
            });
        }
        for i in 0..c {
            // Ops are dealt round-robin so the quotas add up to `ops`.
            let quota = cfg.ops / cfg.clients + u32::from((i as u32) < cfg.ops % cfg.clients);
            let coord = if w.p.client_driven {
                let spec = ClientSpec {
                    writer_id: 1_000_000 + i as u64,
                    members: &w.members,
                    bug,
                    timing: cfg.timing,
                    knobs: w.p.knobs,
                };
                P::client(&spec)
            } else {
                None
            };
            w.clients.push(ClientSlot {
                coord,
                timers: HashMap::new(),
                process: i as u64,
                issued: 0,
                quota,
                pending: None,
                next_req: 1,
                done: quota == 0,
                read_next: false,
            });
        }
        w.clients_done = w.clients.iter().filter(|s| s.done).count();
        w
    }

    // ------------------------------------------------------------ plumbing

    fn schedule(&mut self, at: u64, ev: Ev<P>) {
        self.seq += 1;
        self.queue.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    fn push_trace(&mut self, line: String) {
        let now = self.now;
        if let Some(t) = self.trace.as_mut() {
            t.push(format!("{:>12.3}ms {line}", now as f64 / 1000.0));
        }
    }

    fn faults_on(&self) -> bool {
        !self.healed
    }

    fn e(&self, ep: Ep) -> usize {
        match ep {
            Ep::Node(i) => i,
            Ep::Client(c) => self.nodes.len() + c,
        }
    }

    fn ep_name(ep: Ep) -> String {
        match ep {
            Ep::Node(i) => format!("n{}", i + 1),
            Ep::Client(c) => format!("c{c}"),
        }
    }

    fn node_up(&self, i: usize) -> bool {
        self.nodes[i].core.is_some()
    }

    /// Nodes crashed, up but not yet taking part in quorums, or about to
    /// crash (armed).
    fn down_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|s| {
                s.crash_armed != Armed::No || s.core.as_ref().is_none_or(|c| !P::available(c))
            })
            .count()
    }

    /// Nodes out of quorums right now: crashed, not yet available, or
    /// paused (a node armed to crash still serves until it does).
    fn out_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|s| s.paused || s.core.as_ref().is_none_or(|c| !P::available(c)))
            .count()
    }

    // ------------------------------------------------------------- network

    fn latency(&mut self, from: Ep, link: usize) -> u64 {
        let (lo, hi) = self.p.latency_us;
        let mut d = self.net_rng.range(lo, hi);
        if self.faults_on() {
            d *= self.link_mult[link];
        }
        if self.faults_on() && self.net_rng.chance(self.p.tail_p) {
            d += self.net_rng.range(0, self.p.tail_max_us);
        }
        if matches!(from, Ep::Node(i) if Some(i) == self.p.slow_node) {
            d *= 10;
        }
        d
    }

    /// Put a network event on the wire from `from` to `to`, applying the
    /// partition, loss, delay, FIFO and duplication rules.
    fn transmit(&mut self, from: Ep, to: Ep, ev: Ev<P>) {
        let (fi, ti) = (self.e(from), self.e(to));
        let link = fi * (self.nodes.len() + self.clients.len()) + ti;
        let what = if self.tracing() {
            ev.describe()
        } else {
            String::new()
        };
        // A proxy client's requests and replies ride its TCP connection to
        // the server: partitions and loss act between nodes (and between
        // client-side coordinators and nodes), not on that connection.
        let tcp = matches!(ev, Ev::ProxyRequest { .. } | Ev::ProxyReply { .. });
        if self.blocked[link] && !tcp {
            self.stats.cut += 1;
            trace!(
                self,
                "{} -x {} CUT {what}",
                Self::ep_name(from),
                Self::ep_name(to)
            );
            return;
        }
        if !tcp && self.faults_on() && self.net_rng.chance(self.p.loss_p) {
            self.stats.lost += 1;
            trace!(
                self,
                "{} -x {} LOST {what}",
                Self::ep_name(from),
                Self::ep_name(to)
            );
            return;
        }
        let copy = if self.faults_on() && self.net_rng.chance(self.p.dup_p) {
            ev.duplicate()
        } else {
            None
        };
        for (k, ev) in std::iter::once(ev).chain(copy).enumerate() {
            let mut at = self.now + self.latency(from, link);
            if !self.p.reorder {
                at = at.max(self.link_last[link]);
                self.link_last[link] = at;
            }
            if k == 1 {
                self.stats.duplicated += 1;
            }
            let tag = if k == 1 { " DUP" } else { "" };
            trace!(
                self,
                "{} -> {} +{}us{tag} {what}",
                Self::ep_name(from),
                Self::ep_name(to),
                at - self.now
            );
            self.schedule(at, ev);
        }
    }

    // --------------------------------------------------------------- nodes

    /// Call a handler of node `i` and execute its commands; if the node is
    /// armed to crash and the call has two commands or more, it crashes
    /// after a random, proper prefix of them.
    fn with_node(&mut self, i: usize, f: impl FnOnce(&mut P::Node, Time, &mut NodeOut<P>)) {
        let now = Time(self.now);
        let mut out = std::mem::take(&mut self.node_out);
        match self.nodes[i].core.as_mut() {
            Some(core) => f(core, now, &mut out),
            None => return self.node_out = out,
        }
        let len = out.len();
        let cut = if self.nodes[i].crash_armed.fires(out.commands()) && !self.healed {
            self.nemesis_rng.range(1, len as u64 - 1) as usize
        } else {
            usize::MAX
        };
        for (k, cmd) in out.drain().enumerate() {
            if k == cut {
                self.stats.crashes_inside += 1;
                trace!(
                    self,
                    "CRASH n{} inside a handler: {k} of {len} commands ran",
                    i + 1
                );
                self.crash_for_a_while(i);
                break;
            }
            self.exec(NodeIx(i), cmd);
        }
        self.node_out = out;
    }

    /// When a timer set now with `after` fires: late with some probability
    /// under the `pause` fault (a descheduled process, a slow clock).
    /// A timer's generation (a re-armed timer's earlier firing is then
    /// ignored) and when it fires (possibly late, under the pause fault).
    fn arm_timer(&mut self, after: Duration) -> (u64, u64) {
        self.timer_gen += 1;
        (self.timer_gen, self.timer_at(after))
    }

    fn timer_at(&mut self, after: Duration) -> u64 {
        let mut at = self.now + after.as_micros() as u64;
        if self.faults_on() && self.timer_rng.chance(self.p.late_timer_p) {
            at += self.timer_rng.range(0, self.p.late_timer_max_us);
        }
        at
    }

    fn boot(&mut self, i: usize) {
        let spec = NodeSpec {
            id: i as NodeId + 1,
            incarnation: self.nodes[i].incarnation,
            members: &self.members,
            durable: self.p.durability == Durability::Durable,
            bug: self.bug,
            timing: self.cfg.timing,
            knobs: self.p.knobs,
        };
        let mut core = P::node(&spec);
        for rec in self.nodes[i].disk.synced().iter().cloned() {
            core.restore(rec);
        }
        self.nodes[i].core = Some(core);
        self.with_node(i, |core, now, out| core.on_start(now, out));
    }

    fn crash(&mut self, i: usize) {
        let slot = &mut self.nodes[i];
        slot.core = None;
        slot.timers.clear();
        slot.deferred.clear();
        slot.paused = false;
        slot.crash_armed = Armed::No;
        slot.incarnation += 1;
        match self.p.durability {
            Durability::Durable => {
                slot.disk.crash();
            }
            Durability::Memory => slot.disk.wipe(),
        }
        self.stats.crashes += 1;
        trace!(self, "CRASH n{}", i + 1);
        for j in 0..self.nodes.len() {
            if j != i && self.connected(i, j) {
                self.link_event(j, LinkEvent::Down(Peer::Node(i as NodeId + 1)));
            }
        }
    }

    fn restart(&mut self, i: usize) {
        if self.node_up(i) {
            return;
        }
        trace!(
            self,
            "RESTART n{} ({} durable records)",
            i + 1,
            self.nodes[i].disk.synced().len()
        );
        self.boot(i);
        for j in 0..self.nodes.len() {
            if j != i && self.node_up(j) && self.connected(i, j) {
                self.link_event(j, LinkEvent::Up(Peer::Node(i as NodeId + 1)));
                self.link_event(i, LinkEvent::Up(Peer::Node(j as NodeId + 1)));
            }
        }
    }

    fn link_event(&mut self, i: usize, ev: LinkEvent) {
        self.with_node(i, |core, now, out| core.on_link(now, ev, out));
    }

    /// A node-to-node link works in both directions (TCP needs both).
    fn connected(&self, a: usize, b: usize) -> bool {
        let e = self.nodes.len() + self.clients.len();
        !self.blocked[a * e + b] && !self.blocked[b * e + a]
    }

    /// Deliver a node-bound event, or hold it while the node is paused.
    fn node_event(&mut self, i: usize, ev: Ev<P>) {
        if !self.node_up(i) {
            self.stats.cut += 1;
            return;
        }
        if self.nodes[i].paused {
            self.nodes[i].deferred.push(ev);
            return;
        }
        match ev {
            Ev::NodeMsg { from, msg, .. } => {
                self.stats.delivered += 1;
                self.with_node(i, |core, now, out| core.on_msg(now, from, msg, out));
            }
            Ev::NodeTimer { timer, gen, .. } => {
                if self.nodes[i].timers.get(&timer) == Some(&gen) {
                    self.nodes[i].timers.remove(&timer);
                    self.stats.timers_fired += 1;
                    self.with_node(i, |core, now, out| core.on_timer(now, timer, out));
                }
            }
            Ev::ProxyRequest { cref, req, .. } => {
                self.stats.delivered += 1;
                self.with_node(i, |core, now, out| core.on_client(now, cref, req, out));
            }
            _ => unreachable!("not a node event"),
        }
    }

    // ------------------------------------------------------------- clients

    fn with_client(&mut self, c: usize, f: impl FnOnce(&mut P::Client, Time, &mut ClientOut<P>)) {
        let now = Time(self.now);
        let mut out = std::mem::take(&mut self.client_out);
        match self.clients[c].coord.as_mut() {
            Some(coord) => f(coord, now, &mut out),
            None => return self.client_out = out,
        }
        for cmd in out.drain() {
            self.exec(ClientIx(c), cmd);
        }
        self.client_out = out;
    }

    fn random_op(&mut self, c: usize) -> SimOp {
        let key = format!("k{}", self.work_rng.below(self.p.keys as u64));
        let mut roll = self.work_rng.below(100);
        if std::mem::take(&mut self.clients[c].read_next) {
            roll = 0;
        }
        let n = self.clients[c].issued;
        let puts = self.p.read_pct + (100 - self.p.read_pct) * 85 / 100;
        if roll < self.p.read_pct {
            SimOp::Get { key }
        } else if roll < puts {
            SimOp::Put {
                key,
                value: format!("c{c}.{n}"),
            }
        } else {
            SimOp::Delete { key }
        }
    }

    fn issue(&mut self, c: usize) {
        if self.clients[c].issued >= self.clients[c].quota {
            return;
        }
        if !self.healed && self.issued_total >= self.p.heal_after_ops {
            self.heal_all();
        }
        self.issued_total += 1;
        let op = self.random_op(c);
        let req = op.to_request();
        let slot = &mut self.clients[c];
        slot.issued += 1;
        let req_no = slot.next_req;
        slot.next_req += 1;
        let process = slot.process;
        let invoke_ns = self.clock.stamp(self.now);
        trace!(self, "c{c} INVOKE p{process} {op}");
        self.history.push(OpRecord {
            process,
            op,
            invoke_ns,
            complete_ns: 0,
            outcome: SimOutcome::Unknown,
        });
        self.clients[c].pending = Some(Pending {
            req_no,
            record: self.history.len() - 1,
        });
        let deadline = self.now + self.cfg.timing.client_timeout.as_micros() as u64;
        self.schedule(deadline, Ev::ClientTimeout { client: c, req_no });
        let cref = ClientRef(((c as u64) << 32) | req_no);
        if self.clients[c].coord.is_some() {
            self.with_client(c, |coord, now, out| coord.on_client(now, cref, req, out));
        } else {
            let node = self.work_rng.below(self.nodes.len() as u64) as usize;
            self.stats.client_messages += 1;
            self.transmit(
                Ep::Client(c),
                Ep::Node(node),
                Ev::ProxyRequest { node, cref, req },
            );
        }
    }

    /// Client `c` learnt the outcome of request `req_no` (stale answers to
    /// requests it already gave up on are ignored).
    fn complete(&mut self, c: usize, req_no: u64, outcome: SimOutcome) {
        match &self.clients[c].pending {
            Some(p) if p.req_no == req_no => {}
            _ => return,
        }
        let p = self.clients[c].pending.take().expect("checked");
        let complete_ns = self.clock.stamp(self.now);
        let rec = &mut self.history[p.record];
        rec.complete_ns = complete_ns;
        rec.outcome = outcome.clone();
        match outcome {
            SimOutcome::Ok(_) => self.stats.ops_ok += 1,
            SimOutcome::Fail => self.stats.ops_fail += 1,
            SimOutcome::Unknown => self.stats.ops_unknown += 1,
        }
        let invoked_after_heal = self.healed && rec.invoke_ns >= self.liveness_from_us * 1000;
        let took = complete_ns - rec.invoke_ns;
        let late = took > self.cfg.timing.liveness_bound.as_nanos() as u64
            || outcome == SimOutcome::Unknown;
        if P::PROMISES_LIVENESS && invoked_after_heal && late && self.stuck.is_none() {
            let line = rec.to_string();
            self.stuck = Some(format!(
                "after the faults healed, an operation did not complete in time: {line}"
            ));
        }
        trace!(self, "c{c} COMPLETE {outcome}");
        if outcome == SimOutcome::Unknown {
            // Jepsen's rule: the process may still be "inside" that operation.
            self.clients[c].process = self.next_process;
            self.next_process += 1;
        }
        let slot = &mut self.clients[c];
        if slot.issued >= slot.quota {
            slot.done = true;
            self.clients_done += 1;
            return;
        }
        let think = self.work_rng.range(0, self.p.think_max_us);
        self.schedule(self.now + think, Ev::ClientIssue { client: c });
    }

    // ---------------------------------------------------------------- run

    /// Run the seed to its end.
    pub fn run(mut self) -> RunResult {
        for i in 0..self.nodes.len() {
            self.boot(i);
        }
        for c in 0..self.clients.len() {
            let start = self.work_rng.range(0, self.p.think_max_us);
            self.schedule(start, Ev::ClientIssue { client: c });
        }
        let f = self.p.faults;
        let nemesis = [Fault::Partition, Fault::Crash, Fault::Pause, Fault::Outage];
        if nemesis.iter().any(|&x| f.has(x)) {
            let first = self.nemesis_rng.range(0, self.p.nemesis_gap_us);
            self.schedule(first, Ev::Nemesis);
        }
        self.schedule(FAULT_PHASE_MAX_US, Ev::HealAll);
        let max_events = EVENTS_PER_OP_MAX * (self.cfg.ops as u64 + 10);
        let end = loop {
            if self.clients_done == self.clients.len() {
                break RunEnd::Finished;
            }
            let Some(Entry { at, ev, .. }) = self.queue.pop() else {
                break RunEnd::Stuck("the event queue ran dry before every client finished".into());
            };
            if at > RUN_MAX_US {
                break RunEnd::Stuck(format!(
                    "clients had not finished after {}s of virtual time",
                    RUN_MAX_US / 1_000_000
                ));
            }
            if self.stats.events >= max_events {
                break RunEnd::Stuck(format!("runaway: more than {max_events} events"));
            }
            debug_assert!(at >= self.now, "time went backwards");
            self.now = at;
            self.stats.events += 1;
            self.dispatch(ev);
        };
        self.stats.virtual_us = self.now;
        let end = match (end, self.stuck.take()) {
            (RunEnd::Finished, Some(why)) => RunEnd::Stuck(why),
            (end, _) => end,
        };
        RunResult {
            end,
            history: self.history,
            stats: self.stats,
            trace: self.trace,
        }
    }

    fn dispatch(&mut self, ev: Ev<P>) {
        match ev {
            Ev::NodeMsg { node, .. }
            | Ev::NodeTimer { node, .. }
            | Ev::ProxyRequest { node, .. } => self.node_event(node, ev),
            Ev::ClientMsg { client, from, msg } => {
                self.stats.delivered += 1;
                self.with_client(client, |coord, now, out| coord.on_msg(now, from, msg, out));
            }
            Ev::ClientTimer { client, timer, gen } => {
                if self.clients[client].timers.get(&timer) == Some(&gen) {
                    self.clients[client].timers.remove(&timer);
                    self.stats.timers_fired += 1;
                    self.with_client(client, |coord, now, out| coord.on_timer(now, timer, out));
                }
            }
            Ev::ProxyReply { client, cref, resp } => {
                self.stats.delivered += 1;
                self.complete(
                    client,
                    cref.0 & 0xFFFF_FFFF,
                    SimOutcome::from_response(&resp),
                );
            }
            Ev::ClientIssue { client } => self.issue(client),
            Ev::ClientTimeout { client, req_no } => {
                if matches!(&self.clients[client].pending, Some(p) if p.req_no == req_no) {
                    trace!(self, "c{client} TIMEOUT");
                }
                self.complete(client, req_no, SimOutcome::Unknown);
            }
            Ev::Nemesis => self.nemesis(),
            Ev::Restart { node } => {
                if !self.healed {
                    self.restart(node);
                }
            }
            Ev::Resume { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation {
                    self.resume(node);
                }
            }
            Ev::HealPartition { epoch } => {
                if epoch == self.partition_epoch {
                    self.heal_partition();
                }
            }
            Ev::HealAll => self.heal_all(),
        }
    }
}
