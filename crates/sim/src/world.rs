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
//! handlers run one at a time; the commands of a call execute in order; a
//! `Send` or `Reply` leaves only once every `Persist` the node issued
//! before it is on its [`Disk`] per the durability mode (group commit in
//! `fsync`, `group_commit.rs`); a crash may fall between two commands of
//! one call (the later ones never happen), as real crashes do; a send to oneself comes
//! back through `on_msg` after the call returns, without network faults;
//! setting a pending timer replaces it (generation numbers); links are FIFO
//! unless the `reorder` fault is on. Link events come from a heartbeat
//! failure detector and, for protocols that assume FIFO-reliable links,
//! from connection resets (`links.rs`); client sessions, retries and
//! notifications are in `clients.rs`.

use crate::config::{Fault, SeedParams, SimConfig};
use crate::disk::Disk;
use crate::history::{Clock, OpRecord};
use crate::rng::{derive, Rng, Stream};
use quorumkv_core::op::Op;
use quorumkv_core::protocol::{
    ClientSpec, Command, LinkEvent, LinkModel, NodeSpec, Out, Protocol, ProtocolDef, Seen, Stepped,
};
use quorumkv_core::{ClientRef, Event, NodeId, OpId, Peer, Request, Response, Time};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
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
mod clients;
mod group_commit;
mod invariants;
mod links;
mod load;
mod nemesis;
mod probe;
mod rounds;
pub mod znode;

pub use invariants::check_step;
pub use rounds::round_of;

use actor::{ClientIx, NodeIx};

type NodeTimer<D> = <<D as ProtocolDef>::Node as Protocol>::Timer;
type ClientTimer<D> = <<D as ProtocolDef>::Client as Protocol>::Timer;
type NodeOut<D> = Out<<D as ProtocolDef>::Msg, NodeTimer<D>>;
type ClientOut<D> = Out<<D as ProtocolDef>::Msg, ClientTimer<D>>;
type NodeCmd<D> = Command<<D as ProtocolDef>::Msg, NodeTimer<D>>;

/// Faults stop and the liveness phase starts at the latest at this instant.
const FAULT_PHASE_MAX_US: u64 = 30_000_000;
/// A run that has not finished by then is stuck.
const RUN_MAX_US: u64 = 300_000_000;
/// Events per operation before the run is declared runaway (a run averages
/// 5-20; a message storm reaches this bound in well under a second).
const EVENTS_PER_OP_MAX: u64 = 2_000;
/// Domains of [`derive`]d seeds.
const NODE_SEED: u64 = 1;
const CLIENT_SEED: u64 = 2;

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
    /// Times the nemesis crashed every node at once (modes that keep data).
    pub cluster_crashes: u64,
    /// Membership changes a leader took from the nemesis (`reconfig`).
    pub reconfigs: u64,
    /// Records persisted, fsync batches (group commits), outputs held
    /// behind a sync, and records a crash dropped before they were synced.
    pub persisted: u64,
    pub syncs: u64,
    pub held_outputs: u64,
    pub records_lost: u64,
    /// The most nodes crashed at once (a sweep keeps the maximum).
    pub peak_down: u64,
    pub partitions: u64,
    pub pauses: u64,
    pub ops_ok: u64,
    pub ops_fail: u64,
    pub ops_unknown: u64,
    /// Of those, operations of the stall probe and the load phase, which
    /// come after the workload's `--ops`.
    pub ops_after_workload: u64,
    /// Virtual time at the end of the run, µs.
    pub virtual_us: u64,
    /// Link events the failure detector (and resets) reported to cores.
    pub link_downs: u64,
    pub link_ups: u64,
    /// FIFO model: connection resets (the `loss` fault), messages dropped
    /// with their reset connection, messages held across a partition.
    pub resets: u64,
    pub reset_dropped: u64,
    pub held: u64,
    /// Client connections opened after the first (proxy failover).
    pub reconnects: u64,
    /// Proxy retries of an operation at another node (same `OpId`).
    pub retries: u64,
    /// `Command::Notify` delivered to their session's client, and dropped
    /// (no such session, or it had closed).
    pub notifies: u64,
    pub notifies_dropped: u64,
    /// Znode sessions abandoned by their clients, and `expired` events
    /// clients received (the leader expired a session they had used).
    pub sessions_abandoned: u64,
    pub expired_events: u64,
    /// Unanswered znode requests that reached a server but that no message
    /// carried to a second one as a log entry: left out of the history.
    pub znode_uncarried: u64,
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

/// The connection a message was sent on: its directed link and that
/// link's epoch then (see `World::link_epoch`).
#[derive(Clone, Copy, Debug)]
struct Conn {
    link: u32,
    epoch: u32,
}

enum Ev<D: ProtocolDef> {
    NodeMsg {
        node: usize,
        from: Peer,
        msg: D::Msg,
        conn: Conn,
    },
    ClientMsg {
        client: usize,
        from: Peer,
        msg: D::Msg,
        conn: Conn,
    },
    NodeTimer {
        node: usize,
        timer: NodeTimer<D>,
        gen: u64,
    },
    ClientTimer {
        client: usize,
        timer: ClientTimer<D>,
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
        node: usize,
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
    /// A core's `Notify` reaches the client connection `session`.
    Notify {
        node: usize,
        client: usize,
        session: u64,
        event: Event,
    },
    /// Bookkeeping (not counted as an event): a link event for a node,
    /// held like a message while the node is paused.
    Link {
        node: usize,
        ev: LinkEvent,
        incarnation: u64,
    },
    /// Bookkeeping: the failure detector's verdict on the link of nodes
    /// `a` and `b` if it has been bad since `since`.
    Detect {
        a: usize,
        b: usize,
        since: u64,
    },
    /// Bookkeeping: a reset connection may reconnect.
    Reconnect,
    /// Bookkeeping: node `node`'s sync (fsync mode) completed.
    SyncDone {
        node: usize,
        incarnation: u64,
    },
    /// Bookkeeping: node `node`'s page cache is flushed (buffered mode).
    Flush {
        node: usize,
        incarnation: u64,
    },
    Nemesis,
    /// Every node crashes at once (armed to fall inside a sync).
    PowerCut,
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

impl<D: ProtocolDef> Ev<D> {
    /// A copy for the duplicating network: protocol messages, and client
    /// requests too if the protocol deduplicates them (a retry that arrives
    /// after the first attempt; [`ProtocolDef::DEDUPLICATES_REQUESTS`]).
    /// Replies travel on one TCP stream and are never duplicated.
    fn duplicate(&self) -> Option<Ev<D>> {
        Some(match self {
            Ev::NodeMsg {
                node,
                from,
                msg,
                conn,
            } => Ev::NodeMsg {
                node: *node,
                from: *from,
                msg: msg.clone(),
                conn: *conn,
            },
            Ev::ClientMsg {
                client,
                from,
                msg,
                conn,
            } => Ev::ClientMsg {
                client: *client,
                from: *from,
                msg: msg.clone(),
                conn: *conn,
            },
            Ev::ProxyRequest { node, cref, req } if D::DEDUPLICATES_REQUESTS => Ev::ProxyRequest {
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
            Ev::ProxyRequest { cref, req, .. } => {
                format!("request#{:x} s{} {req:?}", cref.id, cref.session)
            }
            Ev::ProxyReply { cref, resp, .. } => format!("reply#{:x} {resp:?}", cref.id),
            Ev::Notify { session, event, .. } => format!("notify s{session} {event:?}"),
            _ => String::new(),
        }
    }

    /// Driver bookkeeping rather than something that happens in the
    /// system: not counted in `Stats::events` (nor in the runaway bound),
    /// so that adding the failure detector left every count as it was.
    fn bookkeeping(&self) -> bool {
        matches!(
            self,
            Ev::Link { .. }
                | Ev::Detect { .. }
                | Ev::Reconnect
                | Ev::SyncDone { .. }
                | Ev::Flush { .. }
        )
    }
}

/// A scheduled event: the heap orders these small keys; the events
/// themselves (100+ bytes) stay put in [`Events`] while the heap sifts.
#[derive(PartialEq, Eq)]
struct Entry {
    at: u64,
    seq: u64,
    slot: u32,
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap pops the earliest event, ties in scheduling order.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The pending events, by slot; freed slots are reused.
struct Events<D: ProtocolDef> {
    slots: Vec<Option<Ev<D>>>,
    free: Vec<u32>,
}

impl<D: ProtocolDef> Events<D> {
    fn insert(&mut self, ev: Ev<D>) -> u32 {
        match self.free.pop() {
            Some(k) => {
                self.slots[k as usize] = Some(ev);
                k
            }
            None => {
                self.slots.push(Some(ev));
                self.slots.len() as u32 - 1
            }
        }
    }
    fn take(&mut self, k: u32) -> Ev<D> {
        self.free.push(k);
        self.slots[k as usize].take().expect("a scheduled event")
    }
}

struct NodeSlot<D: ProtocolDef> {
    /// `None` while crashed.
    core: Option<D::Node>,
    /// Pending timers and the generation that may fire them.
    timers: HashMap<NodeTimer<D>, u64>,
    /// What the node persisted; what survives a crash depends on the mode.
    disk: Disk,
    /// Syncs in flight and the outputs waiting for them.
    commit: group_commit::Commit<D>,
    /// Whether the nemesis has chosen this node to crash inside a coming
    /// handler call, and which.
    crash_armed: Armed,
    paused: bool,
    /// Events that reached the node while paused, in arrival order.
    deferred: Vec<Ev<D>>,
    incarnation: u64,
    /// Client sessions this life of the node has seen (got `Up` for).
    sessions: HashSet<u64>,
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
    /// The operation's identity on every attempt.
    op: OpId,
    /// Proxy mode: the node of the first attempt.
    node: Option<usize>,
    /// Proxy mode: the request and the node of the first attempt, kept
    /// for the one retry of protocols that deduplicate requests.
    retry: Option<(Request, usize)>,
    /// The retry went out: a definite failure of it says nothing of the
    /// first attempt, which may have taken effect.
    retried: bool,
}

struct ClientSlot<D: ProtocolDef> {
    coord: Option<D::Client>,
    timers: HashMap<ClientTimer<D>, u64>,
    process: u64,
    issued: u32,
    quota: u32,
    pending: Option<Pending>,
    next_req: u64,
    /// The client's connection: requests carry it as `ClientRef::session`,
    /// a client-side coordinator speaks as `Peer::Conn(session)`. A proxy
    /// client that gives up on a request reconnects (a new session).
    session: u64,
    done: bool,
    /// The next operation is a read (divergence bias: set when a partition heals).
    read_next: bool,
}

/// The outcome of [`World::run`].
pub struct RunResult {
    pub end: RunEnd,
    pub history: Vec<OpRecord>,
    /// The znode requests of the history (`SimConfig::znode`).
    pub znode: Vec<znode::Asked>,
    /// The watch events the znode clients received.
    pub watch_events: Vec<znode::WatchEvent>,
    /// Sessions the znode clients abandoned (`znode::Abandoned`): each may
    /// expire at any time after its opening was asked.
    pub abandoned: Vec<znode::Abandoned>,
    pub stats: Stats,
    pub trace: Option<Vec<String>>,
    /// The first per-step invariant the run broke (it stopped there).
    pub invariant: Option<String>,
}

pub struct World<'a, D: ProtocolDef> {
    cfg: &'a SimConfig,
    p: SeedParams,
    bug: Option<D::Bug>,
    opts: D::Options,
    /// Keep to the FIFO-reliable link model (`D::LINK_MODEL`, unless
    /// `--break-assumptions`): loss is a connection reset, no dup, no reorder.
    fifo: bool,
    /// Keep to the `Reliable` model too: no reset between live nodes, and
    /// the failure detector suspects no live node a partition leaves alone.
    perfect_fd: bool,
    /// Connection number per directed link (`from * E + to`): a reset
    /// bumps it, and messages sent on an older connection are dropped.
    link_epoch: Vec<u32>,
    /// FIFO model: messages held on a partitioned link until it heals
    /// (TCP retransmits) or the failure detector resets the connection.
    held: Vec<Vec<Ev<D>>>,
    /// The failure detector: see `links.rs`.
    links: links::Detector,
    next_session: u64,
    /// Sessions of proxy clients that reconnected since.
    closed_sessions: HashSet<u64>,
    members: Vec<NodeId>,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Entry>,
    events: Events<D>,
    nodes: Vec<NodeSlot<D>>,
    clients: Vec<ClientSlot<D>>,
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
    disk_rng: Rng,
    timer_gen: u64,
    /// The nemesis crashes every node inside the next sync that starts.
    power_cut_armed: bool,
    healed: bool,
    /// Operations invoked from this instant on must complete in time.
    liveness_from_us: u64,
    issued_total: u32,
    clients_done: usize,
    next_process: u64,
    clock: Clock,
    history: Vec<OpRecord>,
    znode: Vec<znode::Asked>,
    watch_events: Vec<znode::WatchEvent>,
    /// Znode clients that got a data event: their next request reads the
    /// path again and sets a new watch (what a watcher does).
    znode_reread: BTreeMap<usize, String>,
    abandoned: Vec<znode::Abandoned>,
    /// The protocol names the log entries its messages carry
    /// (`znode::Asked::carried`).
    entries_told: bool,
    stuck: Option<String>,
    probe: probe::Probe,
    /// `--read-after-crash`: keys only read from now on.
    read_only: std::collections::BTreeSet<String>,
    load: load::Load,
    stats: Stats,
    trace: Option<Vec<String>>,
    node_out: NodeOut<D>,
    client_out: ClientOut<D>,
    /// Round mode (`rounds.rs`): inboxes instead of the event queue.
    rounds: Option<Box<rounds::Rounds<D>>>,
    /// The protocol's per-step invariants (`None`: `--no-invariants`).
    invariants: Option<D::Invariants>,
    violation: Option<String>,
}

impl<'a, D: ProtocolDef> World<'a, D> {
    pub fn new(
        cfg: &'a SimConfig,
        params: SeedParams,
        bug: Option<D::Bug>,
        opts: D::Options,
    ) -> Self {
        let seed = params.seed;
        let n = params.replicas as usize;
        let c = cfg.clients as usize;
        let load = Self::load_clients(n, params.load);
        let e = n + c + load;
        let mut w = World {
            cfg,
            bug,
            opts,
            fifo: D::LINK_MODEL.is_fifo() && !cfg.break_assumptions,
            perfect_fd: D::LINK_MODEL == LinkModel::Reliable && !cfg.break_assumptions,
            link_epoch: vec![0; e * e],
            held: (0..e * e).map(|_| Vec::new()).collect(),
            links: links::Detector::new(n),
            next_session: (c + load) as u64 + 1,
            closed_sessions: HashSet::new(),
            members: (1..=params.replicas).collect(),
            now: 0,
            seq: 0,
            queue: BinaryHeap::with_capacity(1024),
            events: Events {
                slots: Vec::with_capacity(1024),
                free: Vec::with_capacity(1024),
            },
            nodes: Vec::with_capacity(n),
            clients: Vec::with_capacity(c),
            blocked: vec![false; e * e],
            link_last: vec![0; e * e],
            link_mult: Self::slow_links(&params, n + c, e),
            partition_epoch: 0,
            partition_active: false,
            net_rng: Rng::stream(seed, Stream::Network),
            nemesis_rng: Rng::stream(seed, Stream::Nemesis),
            work_rng: Rng::stream(seed, Stream::Workload),
            timer_rng: Rng::stream(seed, Stream::Timers),
            disk_rng: Rng::stream(seed, Stream::Disk),
            timer_gen: 0,
            power_cut_armed: false,
            healed: false,
            liveness_from_us: u64::MAX,
            issued_total: 0,
            clients_done: 0,
            next_process: (c + load) as u64,
            clock: Clock::default(),
            history: Vec::with_capacity(cfg.ops as usize),
            znode: Vec::new(),
            watch_events: Vec::new(),
            znode_reread: BTreeMap::new(),
            abandoned: Vec::new(),
            entries_told: false,
            stuck: None,
            probe: probe::Probe::default(),
            read_only: Default::default(),
            load: load::Load {
                first_client: c,
                ..load::Load::default()
            },
            stats: Stats::default(),
            trace: cfg.trace.then(Vec::new),
            node_out: Out::new(),
            client_out: Out::new(),
            rounds: None,
            invariants: (!cfg.no_invariants).then(D::Invariants::default),
            violation: None,
            p: params,
        };
        w.add_slots(n, c + load);
        w.clients_done = w.clients.iter().filter(|s| s.done).count();
        w
    }

    /// The latency multiplier of every link (`from * e + to`), drawn among
    /// the first `drawn` endpoints (the nodes and workload clients) only, in
    /// the same order with load clients or not.
    fn slow_links(params: &SeedParams, drawn: usize, e: usize) -> Vec<u64> {
        let mut r = Rng::stream(params.seed, Stream::Links);
        let (p, max) = (params.slow_link_p, params.slow_link_max);
        let mut m = vec![1; e * e];
        for from in 0..drawn {
            for to in 0..drawn {
                m[from * e + to] = if r.chance(p) { r.range(2, max) } else { 1 };
            }
        }
        m
    }

    /// `n` node slots (booted later) and `c` client slots with their quotas
    /// and, in client-driven seeds, their coordinators.
    fn add_slots(&mut self, n: usize, c: usize) {
        let (cfg, seed, bug) = (self.cfg, self.p.seed, self.bug);
        for _ in 0..n {
            self.nodes.push(NodeSlot {
                core: None,
                timers: HashMap::new(),
                disk: Disk::default(),
                commit: group_commit::Commit::default(),
                crash_armed: Armed::No,
                paused: false,
                deferred: Vec::new(),
                incarnation: 0,
                sessions: HashSet::new(),
            });
        }
        for i in 0..c {
            // Ops are dealt round-robin so the quotas add up to `ops`.
            // Load clients (after the workload's) start idle.
            let quota = match i < cfg.clients as usize {
                true => cfg.ops / cfg.clients + u32::from((i as u32) < cfg.ops % cfg.clients),
                false => 0,
            };
            let coord = self.p.client_driven.then(|| {
                let spec = ClientSpec {
                    // Not `client_writer_id`: these ids order ABD's tags
                    // exactly as before the registry moved to core.
                    writer_id: 1_000_000 + i as u64,
                    members: &self.members,
                    timing: cfg.timing.core(),
                    seed: derive(seed, &[CLIENT_SEED, i as u64]),
                };
                D::client(&spec, &self.opts, bug)
            });
            self.clients.push(ClientSlot {
                coord,
                timers: HashMap::new(),
                process: i as u64,
                issued: 0,
                quota,
                pending: None,
                next_req: 1,
                session: i as u64 + 1,
                done: quota == 0,
                read_next: false,
            });
        }
    }

    // ------------------------------------------------------------ plumbing

    fn schedule(&mut self, at: u64, ev: Ev<D>) {
        if self.rounds.is_some() {
            return self.round_schedule(at, ev);
        }
        self.seq += 1;
        let slot = self.events.insert(ev);
        self.queue.push(Entry {
            at,
            seq: self.seq,
            slot,
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
                s.crash_armed != Armed::No || s.core.as_ref().is_none_or(|c| !D::available(c))
            })
            .count()
    }

    /// Nodes out of quorums right now: crashed, not yet available, or
    /// paused (a node armed to crash still serves until it does).
    fn out_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|s| s.paused || s.core.as_ref().is_none_or(|c| !D::available(c)))
            .count()
    }

    // ------------------------------------------------------------- network

    fn latency(&mut self, from: Ep, to: Ep, link: usize) -> u64 {
        let client_link = matches!(from, Ep::Client(_)) || matches!(to, Ep::Client(_));
        let wan = self.p.client_latency_us.filter(|_| client_link);
        let (lo, hi) = wan.unwrap_or(self.p.latency_us);
        let mut d = self.net_rng.range(lo, hi);
        if self.faults_on() {
            d *= self.link_mult[link];
        }
        if self.faults_on() && self.net_rng.chance(self.p.tail_p) {
            d += self.net_rng.range(0, self.p.tail_max_us);
        }
        if matches!(from, Ep::Node(i) if Some(i) == self.p.slow_node) {
            match wan {
                // A slow machine adds its own slowness (nine more server
                // link delays), not ten times a wide-area client link.
                Some(_) => {
                    let (lo, hi) = self.p.latency_us;
                    d += 9 * self.net_rng.range(lo, hi);
                }
                None => d *= 10,
            }
        }
        d
    }

    /// Whether the connection `conn` was reset since the message left
    /// (then it is dropped, and counted).
    fn reset_since(&mut self, conn: Conn) -> bool {
        let stale = conn.epoch != self.link_epoch[conn.link as usize];
        self.stats.reset_dropped += u64::from(stale);
        stale
    }

    fn link(&self, from: Ep, to: Ep) -> usize {
        self.e(from) * (self.nodes.len() + self.clients.len()) + self.e(to)
    }

    /// Put a network event on the wire from `from` to `to`, applying the
    /// partition, loss, delay, FIFO and duplication rules.
    fn transmit(&mut self, from: Ep, to: Ep, ev: Ev<D>) {
        let link = self.link(from, to);
        let what = if self.tracing() {
            ev.describe()
        } else {
            String::new()
        };
        let names = || (Self::ep_name(from), Self::ep_name(to));
        // A proxy client's requests and replies ride its TCP connection to
        // the server: partitions and loss act between nodes (and between
        // client-side coordinators and nodes), not on that connection.
        let tcp = matches!(
            ev,
            Ev::ProxyRequest { .. } | Ev::ProxyReply { .. } | Ev::Notify { .. }
        );
        if let (Ep::Node(a), Ep::Node(b)) = (from, to) {
            if self.conn_down(a, b) {
                self.stats.cut += 1;
                trace!(self, "n{} -x n{} NO CONNECTION {what}", a + 1, b + 1);
                return;
            }
        }
        if self.blocked[link] && !tcp {
            let (f, t) = names();
            if self.fifo {
                // TCP retransmits across a partition: the message waits for
                // the heal, or for the failure detector to reset the link.
                trace!(self, "{f} -| {t} HELD {what}");
                self.stats.held += 1;
                self.held[link].push(ev);
                return;
            }
            self.stats.cut += 1;
            trace!(self, "{f} -x {t} CUT {what}");
            return;
        }
        if !tcp && !self.perfect_fd && self.faults_on() && self.net_rng.chance(self.p.loss_p) {
            let (f, t) = names();
            match (self.fifo, from, to) {
                (false, ..) => {
                    self.stats.lost += 1;
                    trace!(self, "{f} -x {t} LOST {what}");
                    return;
                }
                (true, Ep::Node(a), Ep::Node(b)) => {
                    trace!(self, "{f} -x {t} RESET {what}");
                    self.reset_connection(a, b);
                    return;
                }
                // Resets of a client-side coordinator's connections are
                // not modelled: under the FIFO model the message goes on.
                (true, ..) => {}
            }
        }
        self.wire(from, to, ev, &what);
    }

    /// Schedule the delivery of `ev` (and maybe a duplicate) after the
    /// link's latency, in FIFO order unless the `reorder` fault is on.
    fn wire(&mut self, from: Ep, to: Ep, ev: Ev<D>, what: &str) {
        if self.rounds.is_some() {
            // Round mode: to the receiver's inbox, for the next round on.
            trace!(
                self,
                "{} -> {} {what}",
                Self::ep_name(from),
                Self::ep_name(to)
            );
            return self.schedule(self.now, ev);
        }
        let link = self.link(from, to);
        let copy = if self.faults_on() && self.net_rng.chance(self.p.dup_p) {
            ev.duplicate()
        } else {
            None
        };
        for (k, ev) in std::iter::once(ev).chain(copy).enumerate() {
            let mut at = self.now + self.latency(from, to, link);
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
    fn with_node(&mut self, i: usize, f: impl FnOnce(&mut D::Node, Time, &mut NodeOut<D>)) {
        let now = Time(self.now);
        let mut out = std::mem::take(&mut self.node_out);
        match self.nodes[i].core.as_mut() {
            Some(core) => f(core, now, &mut out),
            None => return self.node_out = out,
        }
        self.check_invariants(Stepped::Node(i));
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
            if let Some(cmd) = self.hold(i, cmd) {
                self.exec(NodeIx(i), cmd);
            }
        }
        self.node_out = out;
        self.start_sync(i);
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
        let incarnation = self.nodes[i].incarnation;
        let durable = self.p.durability.keeps_data();
        let id = i as NodeId + 1;
        let spec = NodeSpec {
            id,
            members: &self.members,
            incarnation,
            durable,
            // A protocol that keeps nothing on disk loses it all in any mode.
            lost_state: (!durable || !D::PERSISTS_STATE) && incarnation > 0,
            timing: self.cfg.timing.core(),
            seed: derive(self.p.seed, &[NODE_SEED, id.into(), incarnation]),
        };
        let mut core = D::node(&spec, &self.opts, self.bug);
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
        slot.sessions.clear();
        slot.paused = false;
        slot.crash_armed = Armed::No;
        slot.incarnation += 1;
        self.crash_disk(i);
        self.invariants_crashed(i);
        self.stats.crashes += 1;
        let down = self.nodes.iter().filter(|s| s.core.is_none()).count() as u64;
        self.stats.peak_down = self.stats.peak_down.max(down);
        trace!(self, "CRASH n{}", i + 1);
        self.crashed_links(i);
        if self.cfg.read_after_crash {
            self.freeze_writes_through(i);
        }
    }

    /// `--read-after-crash`: the keys of the writes in flight through node
    /// `i` are only read from now on (`random_op`, the probe).
    fn freeze_writes_through(&mut self, i: usize) {
        let writes: Vec<String> = (self.clients.iter())
            .filter_map(|c| c.pending.as_ref().filter(|p| p.node == Some(i)))
            .filter_map(|p| match &self.history[p.record].op {
                Op::Put { key, .. } | Op::Delete { key } | Op::Append { key, .. } => {
                    Some(key.clone())
                }
                _ => None,
            })
            .collect();
        for key in writes {
            if self.read_only.insert(key.clone()) {
                trace!(self, "READ ONLY {key}: its write went through n{}", i + 1);
            }
        }
    }

    /// Whether `--read-after-crash` froze `key`.
    fn read_only(&self, key: &[u8]) -> bool {
        std::str::from_utf8(key).is_ok_and(|k| self.read_only.contains(k))
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
        self.new_life_links(i);
        self.boot(i);
        self.restarted_links(i);
    }

    /// A node-to-node link works in both directions (TCP needs both).
    fn connected(&self, a: usize, b: usize) -> bool {
        let e = self.nodes.len() + self.clients.len();
        !self.blocked[a * e + b] && !self.blocked[b * e + a]
    }

    /// Deliver a node-bound event, or hold it while the node is paused.
    fn node_event(&mut self, i: usize, ev: Ev<D>) {
        if let Ev::Link { .. } | Ev::SyncDone { .. } = ev {
            if !self.node_up(i) {
                return; // the node's next life starts with fresh links
            }
        } else if !self.node_up(i) {
            self.stats.cut += 1;
            return;
        }
        if self.nodes[i].paused {
            self.nodes[i].deferred.push(ev);
            return;
        }
        match ev {
            Ev::NodeMsg {
                from, msg, conn, ..
            } => {
                let closed = matches!(from, Peer::Node(x) if self.conn_down(i, x as usize - 1));
                if self.reset_since(conn) {
                    return;
                }
                if closed {
                    self.stats.reset_dropped += 1;
                    return;
                }
                self.stats.delivered += 1;
                if let Peer::Conn(s) = from {
                    self.open_session(i, s);
                }
                let to = i;
                self.znode_carried(&msg);
                self.observe(
                    i,
                    Seen::Delivered {
                        to,
                        from,
                        msg: &msg,
                    },
                );
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
                self.znode_delivered(cref.id);
                self.open_session(i, cref.session);
                self.observe_request(i, cref, &req);
                self.with_node(i, |core, now, out| core.on_client(now, cref, req, out));
            }
            Ev::Link {
                ev, incarnation, ..
            } => {
                if incarnation == self.nodes[i].incarnation {
                    match ev {
                        LinkEvent::Down(_) => self.stats.link_downs += 1,
                        LinkEvent::Up(_) => self.stats.link_ups += 1,
                    }
                    trace!(self, "n{} {ev:?}", i + 1);
                    self.with_node(i, |core, now, out| core.on_link(now, ev, out));
                }
            }
            Ev::SyncDone { incarnation, .. } => {
                if incarnation == self.nodes[i].incarnation {
                    self.sync_done(i);
                }
            }
            _ => unreachable!("not a node event"),
        }
    }

    // ---------------------------------------------------------------- run

    /// Run the seed to its end.
    pub fn run(mut self) -> RunResult {
        let end = self.simulate();
        self.finish(end)
    }

    /// [`Self::run`], but a panic (inside a core) ends the run: the
    /// history, counters and trace up to it, and the panic's message.
    pub fn run_catching(mut self) -> (RunResult, Option<String>) {
        match crate::panics::catch(|| self.simulate()) {
            Ok(end) => (self.finish(end), None),
            Err(msg) => {
                // No END lines: the cores' state is not to be trusted now.
                let end = RunEnd::Stuck(format!("panic: {msg}"));
                (self.into_result(end), Some(msg))
            }
        }
    }

    /// Boots the nodes and runs the events until every client is done or
    /// the run is stuck.
    fn simulate(&mut self) -> RunEnd {
        for i in 0..self.nodes.len() {
            self.boot(i);
        }
        for c in 0..self.load.first_client {
            let start = self.work_rng.range(0, self.p.think_max_us);
            self.schedule(start, Ev::ClientIssue { client: c });
        }
        let f = self.p.faults;
        let nemesis = [
            Fault::Partition,
            Fault::Crash,
            Fault::Pause,
            Fault::Outage,
            Fault::Reconfig,
        ];
        if nemesis.iter().any(|&x| f.has(x)) {
            let first = self.nemesis_rng.range(0, self.p.nemesis_gap_us);
            self.schedule(first, Ev::Nemesis);
        }
        self.schedule(FAULT_PHASE_MAX_US, Ev::HealAll);
        // The bound grows with the operations issued: the probe and the load
        // phase add their own to the workload's.
        let max_events = |w: &Self| EVENTS_PER_OP_MAX * (w.cfg.ops.max(w.issued_total) as u64 + 10);
        loop {
            if self.clients_done == self.clients.len() {
                match self.sessions_due() {
                    Ok(None) => return RunEnd::Finished,
                    Ok(Some(_)) => {} // on to the next expiry due
                    Err(why) => return RunEnd::Stuck(why),
                }
            }
            if self.violation.is_some() {
                return RunEnd::Stuck("stopped at a broken invariant".into());
            }
            let Some(Entry { at, slot, .. }) = self.queue.pop() else {
                return RunEnd::Stuck(
                    "the event queue ran dry before every client finished".into(),
                );
            };
            if at > RUN_MAX_US {
                return RunEnd::Stuck(format!(
                    "clients had not finished after {}s of virtual time",
                    RUN_MAX_US / 1_000_000
                ));
            }
            if self.stats.events >= max_events(self) {
                let max = max_events(self);
                return RunEnd::Stuck(format!("runaway: more than {max} events"));
            }
            debug_assert!(at >= self.now, "time went backwards");
            self.now = at;
            let ev = self.events.take(slot);
            if !ev.bookkeeping() {
                self.stats.events += 1;
            }
            self.dispatch(ev);
        }
    }

    /// The result of a run that ended with `end`.
    fn finish(mut self, end: RunEnd) -> RunResult {
        // Where each node ended (a stuck run's trace says why).
        for i in 0..self.nodes.len() {
            let status = self.nodes[i].core.as_ref().map(|c| c.status());
            let status = status.unwrap_or_else(|| "crashed".into());
            trace!(self, "END n{} {status}", i + 1);
        }
        let end = match (end, self.stuck.take()) {
            (RunEnd::Finished, Some(why)) => RunEnd::Stuck(why),
            (end, _) => end,
        };
        self.into_result(end)
    }

    /// What the run leaves: its end, history, counters and trace.
    fn into_result(mut self, end: RunEnd) -> RunResult {
        self.stats.virtual_us = self.now;
        self.znode_settle_carried();
        RunResult {
            end,
            history: self.history,
            znode: self.znode,
            watch_events: self.watch_events,
            abandoned: self.abandoned,
            stats: self.stats,
            trace: self.trace,
            invariant: self.violation,
        }
    }

    fn dispatch(&mut self, ev: Ev<D>) {
        match ev {
            Ev::NodeMsg { node, .. }
            | Ev::NodeTimer { node, .. }
            | Ev::ProxyRequest { node, .. }
            | Ev::Link { node, .. }
            | Ev::SyncDone { node, .. } => self.node_event(node, ev),
            // The kernel flushes whether the process runs or not.
            Ev::Flush { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation {
                    self.flush(node);
                }
            }
            Ev::ClientMsg {
                client,
                from,
                msg,
                conn,
            } => {
                if self.reset_since(conn) {
                    return;
                }
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
            Ev::ProxyReply {
                node,
                client,
                cref,
                resp,
            } => {
                self.stats.delivered += 1;
                self.proxy_reply(node, client, cref, resp);
            }
            Ev::ClientIssue { client } => self.issue(client),
            Ev::ClientTimeout { client, req_no } => self.client_timeout(client, req_no),
            Ev::Notify {
                node,
                client,
                session,
                event,
            } => self.notified(Some(node), client, session, event),
            Ev::Detect { a, b, since } => self.detect(a, b, since),
            Ev::Reconnect => self.refresh_links(),
            Ev::Nemesis => self.nemesis(),
            Ev::PowerCut => self.crash_all(),
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
