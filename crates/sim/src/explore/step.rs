//! Executing one [`Choice`] on a [`System`]: handler calls, the commands
//! they return (the driver's contract of `quorumkv_core::protocol`, as the
//! simulator keeps it), crashes and restarts, and the clients' history.

use super::choice::{Choice, Ep};
use super::config::workload_op;
use super::state::{debug_id, Budgets, ClientSt, NodeSt, Packet, Payload, Pending, Setup, System};
use crate::history::{Brief, OpRecord};
use crate::world::check_step;
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::protocol::registry::client_writer_id;
use quorumkv_core::protocol::{
    ClientSpec, Command, LinkEvent, LinkModel, NodeSpec, Out, Protocol, ProtocolDef,
    StepInvariants, Stepped,
};
use quorumkv_core::{ClientRef, NodeId, OpId, Peer, Time};
use std::collections::VecDeque;

/// The simulator's seed domains, so a core draws the same as in `sim`.
const NODE_SEED: u64 = 1;
const CLIENT_SEED: u64 = 2;
/// A step that keeps sending itself messages is a bug in the core.
const SELF_MSGS_MAX: usize = 10_000;
/// Events of the warm-up at most.
const WARMUP_MAX: usize = 10_000;

impl<'s, D: ProtocolDef> System<'s, D> {
    /// The initial state: every node booted (`on_start` run), no
    /// operation issued yet.
    pub fn new(setup: &'s Setup<D>, trace: bool) -> Self {
        let cfg = &setup.cfg;
        let mut s = System {
            setup,
            nodes: Vec::new(),
            clients: Vec::new(),
            net: Vec::new(),
            selfq: VecDeque::new(),
            now: 0,
            budgets: Budgets {
                crashes: cfg.crashes,
                losses: cfg.losses,
                dups: cfg.dups,
                timers: cfg.timers,
            },
            history: Vec::new(),
            stamp: 0,
            next_process: u64::from(cfg.clients),
            completed: false,
            cuts: Vec::new(),
            core_hashes: vec![None; (cfg.replicas + cfg.clients) as usize],
            trace: trace.then(Vec::new),
            inv: Default::default(),
            violation: None,
        };
        for c in 0..cfg.clients as usize {
            let coord = setup.coordinator_clients().then(|| {
                let spec = ClientSpec {
                    writer_id: 1_000_000 + c as u64,
                    members: &setup.members,
                    timing: crate::config::Timing::default().core(),
                    seed: crate::rng::derive(0, &[CLIENT_SEED, c as u64]),
                };
                D::client(&spec, &setup.opts, setup.bug)
            });
            s.clients.push(ClientSt {
                coord,
                timers: Vec::new(),
                issued: 0,
                pending: None,
                process: c as u64,
            });
        }
        for _ in 0..cfg.replicas {
            s.nodes.push(NodeSt {
                core: None,
                timers: Vec::new(),
                disk: Vec::new(),
                incarnation: 0,
                sessions: Default::default(),
                links: VecDeque::new(),
            });
        }
        for i in 0..s.nodes.len() {
            s.boot(i);
        }
        if cfg.warmup {
            s.warm_up();
        }
        s
    }

    /// `--warmup`: run a fault-free, fair schedule (oldest deliverable
    /// message first, else the timer due first) until nothing is in
    /// flight and every node has a settled role (no `looking`,
    /// `recovering`…): a leader elected and its followers synced. The
    /// search then starts from there. Deterministic, so replays agree.
    fn warm_up(&mut self) {
        let (budgets, trace) = (self.budgets, self.trace.take());
        self.budgets.timers = u32::MAX;
        let mut events = 0;
        for step in 0..WARMUP_MAX {
            events = step;
            let next = self
                .enabled()
                .into_iter()
                .find(|c| matches!(c, Choice::Deliver { .. }));
            let next = match next {
                Some(c) => c,
                None if self.settled() => break,
                None => match self.first_timer() {
                    Some(c) => c,
                    None => break,
                },
            };
            if self.apply(next).is_err() {
                break;
            }
        }
        (self.budgets, self.trace) = (budgets, trace);
        let how = if self.settled() {
            "settled"
        } else {
            "NOT settled"
        };
        let now = self.now;
        self.note(|| format!("  warm-up: {how} after {events} events, t={now}us"));
    }

    fn settled(&self) -> bool {
        let settled =
            |r: &str| matches!(r, "leader" | "follower" | "learner" | "replica" | "holder");
        (self.nodes.iter()).all(|n| n.core.as_ref().is_some_and(|c| settled(c.role())))
    }

    /// The pending timer due first (nodes before clients, then by id).
    fn first_timer(&self) -> Option<Choice> {
        let nodes = (self.nodes.iter().enumerate())
            .flat_map(|(i, n)| n.timers.iter().map(move |t| (t.due, Ep::Node(i), t.id)));
        let clients = (self.clients.iter().enumerate())
            .flat_map(|(c, n)| n.timers.iter().map(move |t| (t.due, Ep::Client(c), t.id)));
        let (_, at, id) = nodes.chain(clients).min()?;
        Some(Choice::Timer { at, id, cut: None })
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = self.trace.as_mut() {
            t.push(line());
        }
    }

    fn boot(&mut self, i: usize) {
        let setup = self.setup;
        let incarnation = self.nodes[i].incarnation;
        let id = i as NodeId + 1;
        let spec = NodeSpec {
            id,
            members: &setup.members,
            incarnation,
            // As the simulator: the mode keeps records; a protocol that
            // persists nothing still loses its state at every restart.
            durable: setup.cfg.durability != crate::config::Durability::Memory,
            lost_state: !setup.durable() && incarnation > 0,
            timing: crate::config::Timing::default().core(),
            seed: crate::rng::derive(0, &[NODE_SEED, id.into(), incarnation]),
        };
        let mut core = D::node(&spec, &setup.opts, setup.bug);
        for rec in self.nodes[i].disk.iter().cloned() {
            core.restore(rec);
        }
        self.nodes[i].core = Some(core);
        self.call_node(i, None, false, |core, now, out| core.on_start(now, out));
    }

    /// Execute `choice`. Returns how many commands the handler call it
    /// made returned (0 for events without one), or why it cannot happen
    /// here (a replayed trace that does not fit).
    pub fn apply(&mut self, choice: Choice) -> Result<usize, String> {
        self.completed = false;
        self.cuts.clear();
        let cut = match choice {
            Choice::Deliver { cut, .. } | Choice::Timer { cut, .. } | Choice::Link { cut, .. } => {
                cut
            }
            _ => None,
        };
        if cut.is_some() && !(self.setup.cfg.crash_inside && self.may_crash_now()) {
            return Err("no crash allowed here".into());
        }
        let n = self.apply_event(choice)?;
        if cut.is_some_and(|k| k as usize >= n) {
            return Err(format!(
                "the call made {n} commands: no crash after {cut:?}"
            ));
        }
        Ok(n)
    }

    fn apply_event(&mut self, choice: Choice) -> Result<usize, String> {
        let n = match choice {
            Choice::Issue { client } => self.issue(client)?,
            Choice::Deliver { from, to, id, cut } => {
                let k = (self.find_packet(from, to, id)).ok_or("no such message in flight")?;
                let p = self.net.remove(k);
                self.deliver(p, cut)?
            }
            Choice::Drop { from, to, id } => {
                let k = (self.find_packet(from, to, id)).ok_or("no such message in flight")?;
                self.budgets.losses = self.budgets.losses.checked_sub(1).ok_or("no loss left")?;
                self.net.remove(k);
                0
            }
            Choice::Dup { from, to, id } => {
                let k = (self.find_packet(from, to, id)).ok_or("no such message in flight")?;
                self.budgets.dups = self.budgets.dups.checked_sub(1).ok_or("no dup left")?;
                let Payload::Msg(m) = &self.net[k].payload else {
                    return Err("only protocol messages are duplicated".into());
                };
                let (m, fifo) = (m.clone(), self.net[k].fifo);
                let p = Packet {
                    payload: Payload::Msg(m),
                    fifo,
                    ..self.net[k]
                };
                self.net.push(p);
                0
            }
            Choice::Reset { a, b } => self.reset(a, b)?,
            Choice::Timer { at, id, cut } => self.fire(at, id, cut)?,
            Choice::Link { node, cut } => {
                let ev = (self.nodes.get_mut(node))
                    .and_then(|n| n.links.pop_front())
                    .ok_or("no link event pending")?;
                self.call_node(node, cut, true, |core, now, out| core.on_link(now, ev, out))
            }
            Choice::Crash { node } => {
                if !self.may_crash_now() || node >= self.nodes.len() {
                    return Err("no crash allowed here".into());
                }
                self.crash(node);
                0
            }
            Choice::Restart { node } => {
                if self.nodes.get(node).is_none_or(|n| n.core.is_some()) {
                    return Err("the node is not down".into());
                }
                self.boot(node);
                self.node_links_all(node, LinkEvent::Up(Peer::Node(node as NodeId + 1)));
                0
            }
        };
        Ok(n)
    }

    fn issue(&mut self, c: usize) -> Result<usize, String> {
        let cl = self.clients.get(c).ok_or("no such client")?;
        if cl.pending.is_some() || cl.issued >= self.setup.cfg.ops {
            return Err(format!("c{c} cannot issue now"));
        }
        let req = workload_op(c, cl.issued);
        let req_no = u64::from(cl.issued) + 1;
        self.stamp += 1_000; // 1 µs per history event
        let op = Op::from(&req);
        self.note(|| format!("  c{c} INVOKE {}", Brief(&op)));
        self.history.push(OpRecord {
            process: self.clients[c].process,
            op,
            invoke_ns: self.stamp,
            complete_ns: 0,
            outcome: Outcome::Unknown,
        });
        let cl = &mut self.clients[c];
        cl.issued += 1;
        cl.pending = Some((req_no, self.history.len() - 1));
        let op = OpId {
            client: client_writer_id(c as u64),
            seq: req_no,
        };
        let id = ((c as u64) << 32) | req_no;
        if cl.coord.is_some() {
            let cref = ClientRef {
                id,
                session: ClientRef::LOCAL,
                op,
            };
            return Ok(self.call_client(c, |k, now, out| k.on_client(now, cref, req, out)));
        }
        let session = c as u64 + 1;
        let cref = ClientRef { id, session, op };
        let to = Ep::Node(c % self.nodes.len());
        self.put_packet(Ep::Client(c), to, Payload::Request { cref, req }, true);
        Ok(0)
    }

    /// Client `c`'s open operation `req_no` ends with `outcome`.
    pub(super) fn complete(&mut self, c: usize, req_no: u64, outcome: Outcome) {
        let Some((open, rec)) = self.clients[c].pending else {
            return;
        };
        if open != req_no {
            return;
        }
        self.stamp += 1_000; // 1 µs per history event
        self.note(|| format!("  c{c} RETURN {outcome}"));
        let r = &mut self.history[rec];
        r.complete_ns = self.stamp;
        r.outcome = outcome.clone();
        self.clients[c].pending = None;
        self.completed = true;
        if outcome == Outcome::Unknown {
            // Jepsen's rule: the client goes on as a new process.
            self.clients[c].process = self.next_process;
            self.next_process += 1;
        }
    }

    pub(super) fn put_packet(&mut self, from: Ep, to: Ep, payload: Payload<D::Msg>, tcp: bool) {
        let id = debug_id(&payload);
        let fifo = tcp || self.link_model().is_fifo();
        self.note(|| format!("  {from} -> {to} @{id:016x} {payload:?}"));
        self.net.push(Packet {
            from,
            to,
            payload,
            id,
            fifo,
        });
    }

    fn deliver(&mut self, p: Packet<D::Msg>, cut: Option<u32>) -> Result<usize, String> {
        let n = match (p.to, p.payload) {
            (Ep::Node(j), Payload::Msg(msg)) => {
                let from = match p.from {
                    Ep::Node(i) => Peer::Node(i as NodeId + 1),
                    Ep::Client(c) => {
                        let s = c as u64 + 1;
                        self.open_session(j, s);
                        Peer::Conn(s)
                    }
                };
                self.call_node(j, cut, true, |core, now, out| {
                    core.on_msg(now, from, msg, out)
                })
            }
            (Ep::Node(j), Payload::Request { cref, req }) => {
                self.open_session(j, cref.session);
                self.call_node(j, cut, true, |core, now, out| {
                    core.on_client(now, cref, req, out)
                })
            }
            (Ep::Client(c), Payload::Msg(msg)) => {
                let Ep::Node(i) = p.from else {
                    return Err("client to client".into());
                };
                let from = Peer::Node(i as NodeId + 1);
                self.call_client(c, |k, now, out| k.on_msg(now, from, msg, out))
            }
            (Ep::Client(c), Payload::Reply { cref, resp }) => {
                self.complete(c, cref.id & 0xFFFF_FFFF, Outcome::from_response(&resp));
                0
            }
            _ => return Err("a packet with nowhere to go".into()),
        };
        Ok(n)
    }

    /// The first message of session `s` in this life of node `i` is
    /// preceded by `Up(Conn(s))`, as the simulator reports it.
    fn open_session(&mut self, i: usize, s: u64) {
        if s == ClientRef::LOCAL || !self.nodes[i].sessions.insert(s) {
            return;
        }
        let ev = LinkEvent::Up(Peer::Conn(s));
        self.call_node(i, None, false, |core, now, out| core.on_link(now, ev, out));
    }

    fn fire(&mut self, at: Ep, id: u64, cut: Option<u32>) -> Result<usize, String> {
        self.budgets.timers = self.budgets.timers.checked_sub(1).ok_or("no timer left")?;
        let n = match at {
            Ep::Node(i) => {
                let ts = &mut self.nodes.get_mut(i).ok_or("no such node")?.timers;
                let k = ts.iter().position(|t| t.id == id).ok_or("no such timer")?;
                let t = ts.remove(k);
                self.now = self.now.max(t.due);
                self.call_node(i, cut, true, |core, now, out| {
                    core.on_timer(now, t.timer, out)
                })
            }
            Ep::Client(c) => {
                let ts = &mut self.clients.get_mut(c).ok_or("no such client")?.timers;
                let k = ts.iter().position(|t| t.id == id).ok_or("no such timer")?;
                let t = ts.remove(k);
                self.now = self.now.max(t.due);
                self.call_client(c, |k, now, out| k.on_timer(now, t.timer, out))
            }
        };
        Ok(n)
    }

    fn reset(&mut self, a: usize, b: usize) -> Result<usize, String> {
        if self.link_model() != LinkModel::FifoReliable || a == b || b >= self.nodes.len() {
            return Err("no reset here".into());
        }
        self.budgets.losses = self.budgets.losses.checked_sub(1).ok_or("no loss left")?;
        let (ea, eb) = (Ep::Node(a), Ep::Node(b));
        self.net
            .retain(|p| !((p.from == ea && p.to == eb) || (p.from == eb && p.to == ea)));
        for (x, y) in [(a, b), (b, a)] {
            let peer = Peer::Node(y as NodeId + 1);
            let links = &mut self.nodes[x].links;
            links.push_back(LinkEvent::Down(peer));
            links.push_back(LinkEvent::Up(peer));
        }
        Ok(0)
    }

    /// Node `i` crashes: its core, timers, sessions and pending link events
    /// are gone, its disk keeps what the durability mode keeps; FIFO links
    /// (and every client connection) close, so what was in flight to or
    /// from it is gone; datagrams may still arrive after a restart.
    pub(super) fn crash(&mut self, i: usize) {
        self.budgets.crashes = self.budgets.crashes.saturating_sub(1);
        self.note(|| format!("  CRASH n{}", i + 1));
        let durable = self.setup.durable();
        self.touch(Ep::Node(i));
        self.inv.crashed(i);
        let n = &mut self.nodes[i];
        n.core = None;
        n.timers.clear();
        n.sessions.clear();
        n.links.clear();
        n.incarnation += 1;
        if !durable {
            n.disk.clear();
        }
        self.selfq.retain(|(j, _)| *j != i);
        let me = Ep::Node(i);
        self.net
            .retain(|p| !(p.fifo && (p.from == me || p.to == me)));
        self.node_links_all(i, LinkEvent::Down(Peer::Node(i as NodeId + 1)));
    }

    /// Report `ev` about node `i` to every other live node.
    fn node_links_all(&mut self, i: usize, ev: LinkEvent) {
        for (j, n) in self.nodes.iter_mut().enumerate() {
            if j != i && n.core.is_some() {
                n.links.push_back(ev);
            }
        }
    }

    /// Call a handler of node `i` and run its commands; with `cut`, the
    /// node crashes after that many of them. Then messages the node sent
    /// itself come back. Returns the call's command count.
    pub(super) fn call_node(
        &mut self,
        i: usize,
        cut: Option<u32>,
        main: bool,
        f: impl FnOnce(&mut D::Node, Time, &mut Out<D::Msg, super::state::NodeTimer<D>>),
    ) -> usize {
        let now = Time(self.now);
        let mut out = Out::new();
        self.touch(Ep::Node(i));
        match self.nodes[i].core.as_mut() {
            Some(core) => f(core, now, &mut out),
            None => return 0,
        }
        let len = out.len();
        if main {
            self.cuts = self.cut_points(out.commands());
        }
        for (k, cmd) in out.drain().enumerate() {
            if cut == Some(k as u32) {
                self.note(|| format!("  (crash after {k} of {len} commands)"));
                self.crash(i);
                return len;
            }
            self.exec_node(i, cmd);
        }
        self.check_invariants(Stepped::Node(i));
        self.run_self_messages();
        len
    }

    /// The protocol's per-step invariants after a handler call of
    /// `stepped`; the first violation is kept (the search fails the path).
    fn check_invariants(&mut self, stepped: Stepped) {
        if self.violation.is_some() {
            return;
        }
        let nodes: Vec<Option<&D::Node>> = self.nodes.iter().map(|n| n.core.as_ref()).collect();
        let clients: Vec<Option<&D::Client>> =
            self.clients.iter().map(|c| c.coord.as_ref()).collect();
        let now = Time(self.now);
        if let Err(why) = check_step::<D>(&mut self.inv, now, stepped, &nodes, &clients) {
            let at = match stepped {
                Stepped::Node(i) => format!("n{}", i + 1),
                Stepped::Client(c) => format!("c{c}"),
            };
            self.violation = Some(format!("invariant broken after a step of {at}: {why}"));
        }
    }

    /// The crash points of a call that differ in what survives: after a
    /// command whose effect outlives the crash (a record on a durable
    /// disk, a datagram on its way). A crash after any other command (a
    /// timer set, a FIFO send that the closing connection drops) leaves
    /// the same state as one before it.
    fn cut_points(&self, cmds: &[Command<D::Msg, super::state::NodeTimer<D>>]) -> Vec<u32> {
        let lasting = |c: &Command<D::Msg, _>| match c {
            Command::Persist(_) => self.setup.durable(),
            Command::Send {
                to: Peer::Node(_), ..
            }
            | Command::SendNow {
                to: Peer::Node(_), ..
            } => !self.link_model().is_fifo(),
            Command::Send { .. } | Command::SendNow { .. } => true, // to a client coordinator
            _ => false,
        };
        (1..cmds.len())
            .filter(|&k| lasting(&cmds[k - 1]))
            .map(|k| k as u32)
            .collect()
    }

    fn run_self_messages(&mut self) {
        for _ in 0..SELF_MSGS_MAX {
            let Some((i, msg)) = self.selfq.pop_front() else {
                return;
            };
            let from = Peer::Node(i as NodeId + 1);
            self.note(|| format!("  n{} -> self {msg:?}", i + 1));
            self.call_node(i, None, false, |core, now, out| {
                core.on_msg(now, from, msg, out)
            });
        }
        panic!("a node keeps sending itself messages ({SELF_MSGS_MAX} in one step)");
    }

    fn exec_node(&mut self, i: usize, cmd: Command<D::Msg, super::state::NodeTimer<D>>) {
        match cmd {
            Command::Send { to, msg } | Command::SendNow { to, msg } => self.node_send(i, to, msg),
            Command::WhenDurable(msg) => self.selfq.push_back((i, msg)),
            Command::Reply { client, resp } | Command::ReplyNow { client, resp } => {
                let c = (client.id >> 32) as usize;
                if client.session != ClientRef::LOCAL && c < self.clients.len() {
                    let payload = Payload::Reply { cref: client, resp };
                    self.put_packet(Ep::Node(i), Ep::Client(c), payload, true);
                }
            }
            Command::Notify { .. } => {} // the KV workload opens no watches
            Command::SetTimer { after, timer } => {
                let due = self.now + after.as_micros() as u64;
                set_timer(&mut self.nodes[i].timers, timer, due);
            }
            Command::CancelTimer { timer } => self.nodes[i].timers.retain(|t| t.timer != timer),
            Command::Persist(rec) => self.nodes[i].disk.push(rec),
        }
    }

    fn node_send(&mut self, i: usize, to: Peer, msg: D::Msg) {
        match to {
            Peer::Node(id) if id as usize == i + 1 => self.selfq.push_back((i, msg)),
            Peer::Node(id) if (1..=self.nodes.len()).contains(&(id as usize)) => self.put_packet(
                Ep::Node(i),
                Ep::Node(id as usize - 1),
                Payload::Msg(msg),
                false,
            ),
            Peer::Node(id) => panic!("n{} sent to unknown node {id}", i + 1),
            Peer::Conn(s) => {
                // A client-side coordinator's connection is session c + 1.
                let c = s.wrapping_sub(1) as usize;
                if self.setup.coordinator_clients() && c < self.clients.len() {
                    self.put_packet(Ep::Node(i), Ep::Client(c), Payload::Msg(msg), false);
                }
            }
        }
    }

    fn call_client(
        &mut self,
        c: usize,
        f: impl FnOnce(&mut D::Client, Time, &mut Out<D::Msg, super::state::ClientTimer<D>>),
    ) -> usize {
        let now = Time(self.now);
        let mut out = Out::new();
        self.touch(Ep::Client(c));
        match self.clients[c].coord.as_mut() {
            Some(k) => f(k, now, &mut out),
            None => return 0,
        }
        let len = out.len();
        for cmd in out.drain() {
            match cmd {
                Command::Send { to, msg } | Command::SendNow { to, msg } => {
                    let Peer::Node(id) = to else {
                        panic!("client coordinator c{c} sent to a connection");
                    };
                    let j = (id as usize).wrapping_sub(1);
                    assert!(j < self.nodes.len(), "c{c} sent to unknown node {id}");
                    let to = Ep::Node(j);
                    self.put_packet(Ep::Client(c), to, Payload::Msg(msg), false);
                }
                Command::Reply { client, resp } | Command::ReplyNow { client, resp } => {
                    self.complete(c, client.id & 0xFFFF_FFFF, Outcome::from_response(&resp));
                }
                Command::SetTimer { after, timer } => {
                    let due = self.now + after.as_micros() as u64;
                    set_timer(&mut self.clients[c].timers, timer, due);
                }
                Command::CancelTimer { timer } => {
                    self.clients[c].timers.retain(|t| t.timer != timer)
                }
                Command::Persist(_) | Command::Notify { .. } | Command::WhenDurable(_) => {}
            }
        }
        self.check_invariants(Stepped::Client(c));
        len
    }
}

/// Setting a pending timer replaces it.
fn set_timer<T: PartialEq + std::fmt::Debug>(timers: &mut Vec<Pending<T>>, timer: T, due: u64) {
    timers.retain(|t| t.timer != timer);
    let id = debug_id(&timer);
    timers.push(Pending { timer, due, id });
}
