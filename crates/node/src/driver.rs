//! The driver: owns one protocol core and executes its commands with real
//! time, real connections and real storage. One task, no locks: every input
//! (client request, protocol message, link event) arrives on one channel and
//! is handled to completion before the next, exactly as the simulator does.
//!
//! Used by the server (a replica node) and by the client library (a bare
//! client-side coordinator) alike.

use crate::codec::Frame;
use crate::node_status::NodeStatus;
use crate::resp_render::{resp_reply, RespKind, RespTx};
use crate::storage::Storage;
use quorumkv_core::protocol::{Command, Export, LinkEvent, Membership, Out, Protocol};
use quorumkv_core::{ClientRef, Event, NodeId, OpId, Peer, Request, Response, Time};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

mod info_text;
mod latency;
mod metrics_text;

pub use crate::net::FrameTx;

/// Where the answer to a client request goes.
#[derive(Debug)]
pub enum ReplyTo<M> {
    /// A native connection, as a `Frame::Response` with this id.
    Native { tx: FrameTx<M>, id: u64 },
    /// A RESP connection, at this position of its pipeline.
    Resp {
        tx: RespTx,
        seq: u64,
        kind: RespKind,
    },
    /// A task in this process (the client library).
    Local(oneshot::Sender<Response>),
}

impl<M: serde::Serialize> ReplyTo<M> {
    fn send(self, resp: Response) {
        // A closed receiver means the client went away: nothing to do.
        match self {
            ReplyTo::Native { tx, id } => drop(tx.send(Frame::Response { id, resp })),
            ReplyTo::Resp { tx, seq, kind } => drop(tx.send((seq, resp_reply(kind, resp)))),
            ReplyTo::Local(tx) => drop(tx.send(resp)),
        }
    }
}

/// Inputs of the driver.
#[derive(Debug)]
pub enum Input<M> {
    /// A client request that came on `session` (a connection id;
    /// `ClientRef::LOCAL` for in-process callers), named `op` across retries.
    Client {
        req: Request,
        session: u64,
        op: OpId,
        reply: ReplyTo<M>,
    },
    Msg {
        from: Peer,
        msg: M,
    },
    /// A link to `peer` is up; frames for it go to `tx` (`None` for a
    /// session that cannot carry protocol frames or events: RESP).
    LinkUp {
        peer: Peer,
        tx: Option<FrameTx<M>>,
    },
    /// A server pushed `event` to this process (client library).
    Notified {
        event: Event,
    },
    /// The link to `peer` that fed `tx` is gone. A `Down` for a link that
    /// has since been replaced (a late report of an old connection) is
    /// ignored: the peer is up on the new one.
    LinkDown {
        peer: Peer,
        tx: Option<FrameTx<M>>,
    },
    /// A replica that dialled us passed the handshake on the link that feeds
    /// `tx`. If a live link to it exists already, an `authenticated` hello
    /// (it proved the cluster secret or its certificate) replaces it; any
    /// other is refused with the reason on `answer`, so that a stray
    /// connection claiming a connected replica's id cannot take its link.
    PeerHello {
        node: NodeId,
        tx: FrameTx<M>,
        authenticated: bool,
        answer: oneshot::Sender<Result<(), String>>,
    },
    /// Several inputs from one read of one connection, handed over at once.
    Batch(Vec<Input<M>>),
    /// Ask for the INFO text.
    Info {
        reply: oneshot::Sender<String>,
    },
    /// Ask for the metrics in Prometheus text format.
    Metrics {
        reply: oneshot::Sender<String>,
    },
    /// Ask for the replica's status (`quorumkv endpoints status`).
    Status {
        reply: oneshot::Sender<NodeStatus>,
    },
    /// Ask for the replica's whole state (`quorumkv snapshot save`).
    Export {
        reply: oneshot::Sender<Result<Export, String>>,
    },
    /// `quorumkv member`: without `voters`, who votes; with them, propose
    /// them as the voting servers (refused where the protocol's servers
    /// are fixed, off the leader, or when the replica keeps no log).
    Member {
        voters: Option<Vec<NodeId>>,
        reply: oneshot::Sender<Result<Membership, String>>,
    },
}

/// Static facts the driver reports in INFO.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub id: NodeId,
    pub protocol: String,
    pub members: Vec<NodeId>,
    /// Each client port's buffer budget, by port name (INFO and metrics).
    pub budgets: Vec<(&'static str, crate::budget::Budget)>,
}

/// Counters the driver keeps about itself.
#[derive(Clone, Debug, Default)]
pub struct DriverStats {
    pub inputs: u64,
    pub client_requests: u64,
    pub sent: u64,
    /// Messages for a peer with no link at the moment (the protocol retransmits).
    pub dropped_no_link: u64,
    /// Messages held for a member whose link has not come up yet (startup),
    /// sent when it does.
    pub held_until_up: u64,
    /// `LinkDown`s of connections already replaced by a newer one (ignored).
    pub stale_link_downs: u64,
    /// Live replica links replaced by an authenticated hello from the same
    /// replica (a redial overlapping a half-open old connection).
    pub links_replaced: u64,
    /// Hellos refused because the replica they name has a live link.
    pub duplicate_hellos: u64,
    /// Events pushed to clients (`Command::Notify`).
    pub notified: u64,
    /// Events for a session that is gone.
    pub notify_dropped: u64,
    /// Client request latency (arrival to answer).
    pub latency: latency::Latency,
}

pub struct Driver<P: Protocol + Send + 'static> {
    core: P,
    info: NodeInfo,
    storage: Box<dyn Storage>,
    start: Instant,
    links: HashMap<Peer, FrameTx<P::Msg>>,
    /// Messages for members no link event has been seen for yet. Dropping
    /// them (as for a peer that went down) would lose messages that a
    /// protocol assuming reliable links never re-sends: no `Down` tells it
    /// to. Flushed at the peer's first `Up`, dropped at its first `Down`.
    held: HashMap<Peer, Vec<P::Msg>>,
    /// Where each open client request's answer goes, and when it arrived.
    replies: HashMap<u64, (ReplyTo<P::Msg>, Instant)>,
    next_client: u64,
    timers: BTreeMap<(Instant, u64), P::Timer>,
    timer_index: HashMap<P::Timer, (Instant, u64)>,
    timer_seq: u64,
    local: VecDeque<P::Msg>,
    /// Where events for `ClientRef::LOCAL` go (the client library's).
    local_events: Option<mpsc::UnboundedSender<Event>>,
    out: Out<P::Msg, P::Timer>,
    /// Sequence number of the last record handed to storage.
    last_persist: u64,
    /// Outputs waiting for the records persisted before them to be
    /// durable, with the sequence number they wait for (in issue order).
    gated: VecDeque<(u64, Gated<P::Msg>)>,
    /// How many `Gated::Send`s to each peer wait in `gated`: a `SendNow`
    /// to a peer with one waiting queues behind it (links stay FIFO).
    gated_to: HashMap<Peer, usize>,
    /// Notified when storage's durable watermark moves; `None` for storage
    /// that is durable at once (memory): nothing is ever gated then.
    waker: Option<Arc<Notify>>,
    /// Told why, when the core says it cannot go on (`Protocol::fatal`).
    fatal: Option<oneshot::Sender<String>>,
    pub stats: DriverStats,
}

/// A `Send`, `Reply`, `Notify` or `WhenDurable` held back until storage
/// catches up.
#[derive(Debug)]
enum Gated<M> {
    /// A message `to` a peer.
    Send(Peer, M),
    /// A reply to a client.
    Reply(ClientRef, Response),
    /// An event for a session.
    Notify(u64, Event),
    /// Back to the core itself (`Command::WhenDurable`).
    Own(M),
}

impl<P: Protocol + Send + 'static> Driver<P> {
    /// At most this many messages are held for one member that never came up.
    const MAX_HELD: usize = 65_536;

    pub fn new(core: P, info: NodeInfo, mut storage: Box<dyn Storage>) -> std::io::Result<Self> {
        let mut core = core;
        for rec in storage.load()? {
            core.restore(rec);
        }
        let waker = storage.waker();
        let held = (info.members.iter())
            .filter(|&&m| m != info.id)
            .map(|&m| (Peer::Node(m), Vec::new()))
            .collect();
        Ok(Driver {
            core,
            info,
            storage,
            start: Instant::now(),
            links: HashMap::new(),
            held,
            replies: HashMap::new(),
            next_client: 1,
            timers: BTreeMap::new(),
            timer_index: HashMap::new(),
            timer_seq: 0,
            local: VecDeque::new(),
            local_events: None,
            out: Out::new(),
            last_persist: 0,
            gated: VecDeque::new(),
            gated_to: HashMap::new(),
            waker,
            fatal: None,
            stats: DriverStats::default(),
        })
    }

    /// Stop and send the reason to `tx` when the core reports that it
    /// cannot go on ([`Protocol::fatal`]): the server exits with an error.
    pub fn on_fatal(mut self, tx: oneshot::Sender<String>) -> Self {
        self.fatal = Some(tx);
        self
    }

    /// Whether the core gave up: logged, reported, and the loop ends.
    fn gave_up(&mut self) -> bool {
        let Some(why) = self.core.fatal() else {
            return false;
        };
        tracing::error!("cannot go on: {why}");
        if let Some(tx) = self.fatal.take() {
            drop(tx.send(why));
        }
        true
    }

    /// Deliver events for in-process clients (`ClientRef::LOCAL`) to `tx`.
    pub fn with_local_events(mut self, tx: mpsc::UnboundedSender<Event>) -> Self {
        self.local_events = Some(tx);
        self
    }

    fn now(&self) -> Time {
        Time(self.start.elapsed().as_micros() as u64)
    }

    /// Run until every input sender is dropped.
    pub async fn run(mut self, mut rx: mpsc::Receiver<Input<P::Msg>>) {
        let far = Instant::now() + std::time::Duration::from_secs(86400 * 365);
        let mut sleep = pin!(tokio::time::sleep_until(far));
        let mut armed = far;
        let mut out = std::mem::take(&mut self.out);
        self.core.on_start(self.now(), &mut out);
        self.execute(&mut out);
        self.out = out;
        let waker = self.waker.clone();
        loop {
            let next = self
                .timers
                .first_key_value()
                .map(|(k, _)| k.0)
                .unwrap_or(far);
            if next != armed {
                sleep.as_mut().reset(next);
                armed = next;
            }
            let waiting = !self.gated.is_empty();
            tokio::select! {
                biased;
                // First, so that a flood of inputs cannot hold back the
                // acknowledgements of what is already durable.
                () = async { waker.as_ref().expect("gated only with a waker").notified().await },
                    if waiting => self.release(),
                input = rx.recv() => {
                    let Some(input) = input else { break };
                    self.handle(input);
                    // Drain what is already queued before yielding, so the
                    // writers see a batch and coalesce it into one write.
                    // What became durable meanwhile is released at once, not
                    // after up to 1024 inputs: a flood of cheap reads must
                    // not hold back the acknowledgements (and commits) that
                    // a sync just allowed.
                    let mut durable = self.storage.durable();
                    for _ in 0..1024 {
                        match rx.try_recv() {
                            Ok(input) => self.handle(input),
                            Err(_) => break,
                        }
                        if !self.gated.is_empty() && self.storage.durable() > durable {
                            durable = self.storage.durable();
                            self.release();
                        }
                    }
                    self.release();
                }
                _ = &mut sleep => self.fire_due_timers(),
            }
            if self.gave_up() {
                break;
            }
        }
        // Inputs are over (shutdown): send what waits for storage once it
        // is durable. A stalled disk never gets there; the server stops
        // the driver after its grace period then.
        while let (Some(w), false) = (&waker, self.gated.is_empty()) {
            w.notified().await;
            self.release();
        }
    }

    pub fn handle(&mut self, input: Input<P::Msg>) {
        let input = match input {
            Input::Batch(inputs) => return inputs.into_iter().for_each(|i| self.handle(i)),
            Input::PeerHello {
                node,
                tx,
                authenticated,
                answer,
            } => return self.peer_hello(node, tx, authenticated, answer),
            other => other,
        };
        self.stats.inputs += 1;
        let now = self.now();
        let mut out = std::mem::take(&mut self.out);
        match input {
            Input::Client {
                req,
                session,
                op,
                reply,
            } => {
                self.stats.client_requests += 1;
                let id = self.next_client;
                self.next_client += 1;
                self.replies.insert(id, (reply, Instant::now()));
                let client = ClientRef { id, session, op };
                self.core.on_client(now, client, req, &mut out);
            }
            Input::Msg { from, msg } => self.core.on_msg(now, from, msg, &mut out),
            Input::LinkUp { peer, tx } => {
                let held = self.held.remove(&peer).unwrap_or_default();
                if let Some(tx) = tx {
                    for msg in held {
                        self.stats.sent += 1;
                        drop(tx.send(Frame::Proto(msg)));
                    }
                    self.links.insert(peer, tx);
                }
                self.core.on_link(now, LinkEvent::Up(peer), &mut out);
            }
            Input::Notified { event } => self.notify(ClientRef::LOCAL, event),
            Input::LinkDown { peer, tx } => {
                let current = self.links.get(&peer);
                let stale =
                    matches!((current, &tx), (Some(cur), Some(old)) if !cur.same_queue(old));
                if stale {
                    self.stats.stale_link_downs += 1;
                } else {
                    self.links.remove(&peer);
                    if let Some(held) = self.held.remove(&peer) {
                        self.stats.dropped_no_link += held.len() as u64;
                    }
                    self.core.on_link(now, LinkEvent::Down(peer), &mut out);
                }
            }
            Input::Batch(_) | Input::PeerHello { .. } => unreachable!("handled above"),
            Input::Info { reply } => drop(reply.send(self.info_text())),
            Input::Metrics { reply } => drop(reply.send(self.metrics_text())),
            Input::Status { reply } => drop(reply.send(self.node_status())),
            Input::Export { reply } => {
                let why = |e| format!("replica {} ({}): {e}", self.info.id, self.info.protocol);
                drop(reply.send(self.core.export().map_err(why)));
            }
            Input::Member { voters, reply } => {
                drop(reply.send(self.member(now, voters.as_deref(), &mut out)));
            }
        }
        self.execute(&mut out);
        self.out = out;
    }

    /// See [`Input::Member`]. A server that keeps no log would forget a
    /// configuration on restart and come back with the initial one
    /// ("Membership change" in `docs/src/protocols/zab.md`): no change
    /// there.
    fn member(
        &mut self,
        now: Time,
        voters: Option<&[NodeId]>,
        out: &mut Out<P::Msg, P::Timer>,
    ) -> Result<Membership, String> {
        let who = format!("replica {} ({})", self.info.id, self.info.protocol);
        let fixed = || format!("{who}: its servers are fixed at start (the cluster file)");
        if let Some(voters) = voters {
            if self.core.membership().is_none() {
                return Err(fixed());
            }
            if self.storage.mode() == crate::storage::Durability::Memory {
                return Err(format!(
                    "{who} keeps its log in memory only: a membership change needs \
                     --durability fsync or buffered"
                ));
            }
            (self.core.change_membership(now, voters, out)).map_err(|e| format!("{who}: {e}"))?;
        }
        self.core.membership().ok_or_else(fixed)
    }

    /// See [`Input::PeerHello`].
    fn peer_hello(
        &mut self,
        node: NodeId,
        tx: FrameTx<P::Msg>,
        authenticated: bool,
        answer: oneshot::Sender<Result<(), String>>,
    ) {
        let peer = Peer::Node(node);
        if let Some(live) = self.links.get(&peer).filter(|l| !l.is_closed()) {
            if !authenticated {
                self.stats.duplicate_hellos += 1;
                let why = format!(
                    "replica {node} is connected already; an unauthenticated hello cannot \
                     replace its link"
                );
                drop(answer.send(Err(why)));
                return;
            }
            live.shut("replaced by a newer authenticated link from the same replica");
            self.stats.links_replaced += 1;
        }
        if answer.send(Ok(())).is_ok() {
            self.handle(Input::LinkUp { peer, tx: Some(tx) });
        }
    }

    fn fire_due_timers(&mut self) {
        let now_i = Instant::now();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now_i {
                break;
            }
            let timer = entry.remove();
            self.timer_index.remove(&timer);
            let mut out = std::mem::take(&mut self.out);
            self.core.on_timer(self.now(), timer, &mut out);
            self.execute(&mut out);
            self.out = out;
        }
    }

    /// Execute the commands of one handler call, then deliver messages the
    /// node sent to itself (which may produce more commands). Messages,
    /// replies and events wait (in order) for every record persisted before
    /// them; timers and messages to the node itself do not.
    fn execute(&mut self, out: &mut Out<P::Msg, P::Timer>) {
        loop {
            for cmd in out.drain() {
                match cmd {
                    Command::Send { to, msg } if to == Peer::Node(self.info.id) => {
                        self.local.push_back(msg);
                    }
                    Command::Send { to, msg } => self.output(Gated::Send(to, msg)),
                    Command::Reply { client, resp } => self.output(Gated::Reply(client, resp)),
                    Command::Notify { session, event } => {
                        self.output(Gated::Notify(session, event))
                    }
                    Command::SetTimer { after, timer } => self.set_timer(after, timer),
                    Command::CancelTimer { timer } => {
                        if let Some(k) = self.timer_index.remove(&timer) {
                            self.timers.remove(&k);
                        }
                    }
                    Command::Persist(rec) => self.last_persist = self.storage.append(rec),
                    Command::SendNow { to, msg } if to == Peer::Node(self.info.id) => {
                        self.local.push_back(msg);
                    }
                    Command::SendNow { to, msg } => self.send_now(to, msg),
                    Command::ReplyNow { client, resp } => self.emit(Gated::Reply(client, resp)),
                    Command::WhenDurable(msg) => self.output(Gated::Own(msg)),
                }
            }
            let Some(msg) = self.local.pop_front() else {
                break;
            };
            let now = self.now();
            self.core.on_msg(now, Peer::Node(self.info.id), msg, out);
        }
    }

    /// Emit `g` now if nothing persisted before it is still in flight,
    /// else queue it behind the records it waits for.
    fn output(&mut self, g: Gated<P::Msg>) {
        if self.waker.is_some()
            && (!self.gated.is_empty() || self.last_persist > self.storage.durable())
        {
            self.hold(self.last_persist, g);
        } else {
            self.emit(g);
        }
    }

    fn hold(&mut self, seq: u64, g: Gated<P::Msg>) {
        if let Gated::Send(to, _) = &g {
            *self.gated_to.entry(*to).or_default() += 1;
        }
        self.gated.push_back((seq, g));
    }

    /// `Command::SendNow`: out at once, unless a held message to the same
    /// peer must leave first; then right behind the outputs held before it.
    fn send_now(&mut self, to: Peer, msg: P::Msg) {
        if self.gated_to.get(&to).is_some_and(|&n| n > 0) {
            self.hold(0, Gated::Send(to, msg));
        } else {
            self.send(to, msg);
        }
    }

    /// Emit the queued outputs whose records are durable now, then hand
    /// the core the `WhenDurable` messages among them.
    fn release(&mut self) {
        let durable = self.storage.durable();
        while let Some((seq, _)) = self.gated.front() {
            if *seq > durable {
                break;
            }
            let (_, g) = self.gated.pop_front().expect("front exists");
            if let Gated::Send(to, _) = &g {
                if let Some(n) = self.gated_to.get_mut(to) {
                    *n -= 1;
                    if *n == 0 {
                        self.gated_to.remove(to);
                    }
                }
            }
            self.emit(g);
        }
        if !self.local.is_empty() {
            let mut out = std::mem::take(&mut self.out);
            self.execute(&mut out);
            self.out = out;
        }
    }

    fn emit(&mut self, g: Gated<P::Msg>) {
        match g {
            Gated::Own(msg) => self.local.push_back(msg),
            Gated::Send(to, msg) => self.send(to, msg),
            Gated::Reply(client, resp) => {
                if let Some((r, since)) = self.replies.remove(&client.id) {
                    self.stats.latency.record(since.elapsed());
                    r.send(resp);
                }
            }
            Gated::Notify(session, event) => self.notify(session, event),
        }
    }

    fn send(&mut self, to: Peer, msg: P::Msg) {
        if let Some(tx) = self.links.get(&to) {
            self.stats.sent += 1;
            if tx.send(Frame::Proto(msg)).is_err() {
                self.links.remove(&to);
                self.stats.dropped_no_link += 1;
            }
        } else if let Some(held) = self.held.get_mut(&to).filter(|h| h.len() < Self::MAX_HELD) {
            self.stats.held_until_up += 1;
            held.push(msg);
        } else {
            self.stats.dropped_no_link += 1;
        }
    }

    /// Push `event` to client connection `session`, if it is still there.
    fn notify(&mut self, session: u64, event: Event) {
        let sent = if session == ClientRef::LOCAL {
            (self.local_events.as_ref()).is_some_and(|tx| tx.send(event).is_ok())
        } else {
            (self.links.get(&Peer::Conn(session)))
                .is_some_and(|tx| tx.send(Frame::Notify(event)).is_ok())
        };
        if sent {
            self.stats.notified += 1;
        } else {
            self.stats.notify_dropped += 1;
        }
    }

    fn set_timer(&mut self, after: std::time::Duration, timer: P::Timer) {
        if let Some(k) = self.timer_index.remove(&timer) {
            self.timers.remove(&k);
        }
        self.timer_seq += 1;
        let key = (Instant::now() + after, self.timer_seq);
        self.timers.insert(key, timer.clone());
        self.timer_index.insert(timer, key);
    }

    fn node_status(&self) -> NodeStatus {
        let me = self.info.id;
        let peers_up = (self.info.members.iter().copied())
            .filter(|&m| m != me && self.links.contains_key(&Peer::Node(m)))
            .collect();
        let persisted = self.storage.report();
        NodeStatus {
            id: me,
            protocol: self.info.protocol.clone(),
            role: self.core.role().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            members: self.info.members.clone(),
            peers_up,
            durability: self.storage.mode().to_string(),
            uptime_secs: self.start.elapsed().as_secs(),
            persist_records: persisted.records,
            persist_syncs: persisted.syncs,
            counters: (self.core.metrics().into_iter())
                .map(|(name, _, v)| (name.to_string(), v))
                .collect(),
            wire: Some(crate::version::Version::ours()),
            persist_sync_us: Some(persisted.sync_us_sum),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::link_queue;
    use crate::storage::MemoryStorage;

    /// A core that only records the link events it sees.
    #[derive(Default)]
    struct Links(Vec<LinkEvent>);

    impl Protocol for Links {
        type Msg = ();
        type Timer = ();
        fn on_client(&mut self, _: Time, _: ClientRef, _: Request, _: &mut Out<(), ()>) {}
        fn on_msg(&mut self, _: Time, _: Peer, _: (), _: &mut Out<(), ()>) {}
        fn on_timer(&mut self, _: Time, _: (), _: &mut Out<(), ()>) {}
        fn on_link(&mut self, _: Time, ev: LinkEvent, _: &mut Out<(), ()>) {
            self.0.push(ev);
        }
    }

    #[tokio::test]
    async fn a_late_down_of_a_replaced_link_is_ignored() {
        let info = NodeInfo {
            id: 1,
            protocol: "test".into(),
            members: vec![1, 2],
            budgets: Vec::new(),
        };
        let mut d =
            Driver::new(Links::default(), info, Box::new(MemoryStorage::default())).unwrap();
        let peer = Peer::Node(2);
        let (old, _old_rx) = link_queue();
        let (new, _new_rx) = link_queue();
        d.handle(Input::LinkUp {
            peer,
            tx: Some(old.clone()),
        });
        d.handle(Input::LinkUp {
            peer,
            tx: Some(new.clone()),
        });
        // The old connection's reader reports its end after the new one is up.
        d.handle(Input::LinkDown {
            peer,
            tx: Some(old),
        });
        assert_eq!(d.core.0, vec![LinkEvent::Up(peer), LinkEvent::Up(peer)]);
        assert!(d.links.get(&peer).is_some_and(|l| l.same_queue(&new)));
        assert_eq!(d.stats.stale_link_downs, 1);
        // The current link's own end is a real Down.
        d.handle(Input::LinkDown {
            peer,
            tx: Some(new),
        });
        assert_eq!(d.core.0.last(), Some(&LinkEvent::Down(peer)));
        assert!(!d.links.contains_key(&peer));
    }

    /// A core that sends its client's request number to nodes 2 and 3.
    struct Sender;

    impl Protocol for Sender {
        type Msg = u64;
        type Timer = ();
        fn on_client(&mut self, _: Time, c: ClientRef, _: Request, out: &mut Out<u64, ()>) {
            out.send(Peer::Node(2), c.id);
            out.send(Peer::Node(3), c.id);
        }
        fn on_msg(&mut self, _: Time, _: Peer, _: u64, _: &mut Out<u64, ()>) {}
        fn on_timer(&mut self, _: Time, _: (), _: &mut Out<u64, ()>) {}
    }

    #[tokio::test]
    async fn messages_for_a_member_not_up_yet_are_held_until_its_first_up() {
        let info = NodeInfo {
            id: 1,
            protocol: "test".into(),
            members: vec![1, 2, 3],
            budgets: Vec::new(),
        };
        let mut d = Driver::new(Sender, info, Box::new(MemoryStorage::default())).unwrap();
        let request = |d: &mut Driver<Sender>| {
            let (tx, _rx) = oneshot::channel();
            d.handle(Input::Client {
                req: Request::Get { key: "k".into() },
                session: 0,
                op: OpId::default(),
                reply: ReplyTo::Local(tx),
            });
        };
        request(&mut d);
        request(&mut d);
        // Node 3 is reported down before it ever came up: its messages go.
        d.handle(Input::LinkDown {
            peer: Peer::Node(3),
            tx: None,
        });
        assert_eq!(d.stats.held_until_up, 4);
        assert_eq!(d.stats.dropped_no_link, 2);
        let (tx, mut rx) = link_queue();
        d.handle(Input::LinkUp {
            peer: Peer::Node(2),
            tx: Some(tx),
        });
        request(&mut d);
        let got: Vec<u64> = std::iter::from_fn(|| match rx.try_recv()? {
            Frame::Proto(n) => Some(n),
            other => panic!("unexpected frame {other:?}"),
        })
        .collect();
        assert_eq!(got, vec![1, 2, 3], "held messages first, in order");
        // After its first Down a member's messages are dropped, not held
        // (requests 3 and 4 for node 3).
        request(&mut d);
        assert_eq!(d.stats.dropped_no_link, 4);
        assert_eq!(d.stats.held_until_up, 4);
    }

    /// Persist a PUT as a register record tagged with the request number;
    /// whether `req` was one.
    fn persist_put<M: Clone, T>(out: &mut Out<M, T>, c: ClientRef, req: Request) -> bool {
        let Request::Put { key, value } = req else {
            return false;
        };
        out.persist(quorumkv_core::protocol::Record::Register {
            key,
            tag: quorumkv_core::Tag {
                ts: c.id,
                writer: 1,
            },
            value: Some(value),
        });
        true
    }

    /// A core that, for each request, persists (PUTs only), sends the
    /// request number to node 2 and replies with it.
    struct Persister;

    impl Protocol for Persister {
        type Msg = u64;
        type Timer = ();
        fn on_client(&mut self, _: Time, c: ClientRef, req: Request, out: &mut Out<u64, ()>) {
            persist_put(out, c, req);
            out.send(Peer::Node(2), c.id);
            out.reply(c, Response::Value(Some(c.id.to_string().into())));
        }
        fn on_msg(&mut self, _: Time, _: Peer, _: u64, _: &mut Out<u64, ()>) {}
        fn on_timer(&mut self, _: Time, _: (), _: &mut Out<u64, ()>) {}
    }

    /// Storage whose durable watermark the test moves by hand.
    #[derive(Default)]
    struct Manual {
        appended: u64,
        durable: Arc<std::sync::atomic::AtomicU64>,
        notify: Arc<Notify>,
    }

    impl Storage for Manual {
        fn append(&mut self, _: quorumkv_core::protocol::Record) -> u64 {
            self.appended += 1;
            self.appended
        }
        fn durable(&self) -> u64 {
            self.durable.load(std::sync::atomic::Ordering::Relaxed)
        }
        fn waker(&self) -> Option<Arc<Notify>> {
            Some(self.notify.clone())
        }
        fn load(&mut self) -> std::io::Result<Vec<quorumkv_core::protocol::Record>> {
            Ok(Vec::new())
        }
        fn mode(&self) -> crate::storage::Durability {
            crate::storage::Durability::Fsync
        }
        fn report(&self) -> crate::storage::PersistReport {
            Default::default()
        }
    }

    fn put(k: &str) -> Request {
        Request::Put {
            key: k.to_string().into(),
            value: "v".into(),
        }
    }

    fn info(members: Vec<NodeId>) -> NodeInfo {
        NodeInfo {
            id: 1,
            protocol: "test".into(),
            members,
            budgets: Vec::new(),
        }
    }

    fn ask<P: Protocol + Send + 'static>(
        d: &mut Driver<P>,
        req: Request,
    ) -> oneshot::Receiver<Response> {
        let (tx, rx) = oneshot::channel();
        d.handle(Input::Client {
            req,
            session: 0,
            op: OpId::default(),
            reply: ReplyTo::Local(tx),
        });
        rx
    }

    #[tokio::test]
    async fn nothing_overtakes_a_persist_issued_before_it() {
        let storage = Manual::default();
        let durable = storage.durable.clone();
        let mut d = Driver::new(Persister, info(vec![1, 2]), Box::new(storage)).unwrap();
        let (tx, mut link) = link_queue();
        d.handle(Input::LinkUp {
            peer: Peer::Node(2),
            tx: Some(tx),
        });
        let mut a = ask(&mut d, put("a")); // record 1
                                           // A later call that persists nothing: its message and reply must
                                           // not show what record 1 holds before it is durable.
        let mut b = ask(&mut d, Request::Get { key: "a".into() });
        let mut c = ask(&mut d, put("c")); // record 2
        d.release();
        assert!(link.try_recv().is_none(), "a message overtook its persist");
        assert!(a.try_recv().is_err() && b.try_recv().is_err());
        durable.store(1, std::sync::atomic::Ordering::Relaxed);
        d.release();
        let sent: Vec<u64> = std::iter::from_fn(|| match link.try_recv()? {
            Frame::Proto(n) => Some(n),
            other => panic!("unexpected frame {other:?}"),
        })
        .collect();
        assert_eq!(sent, vec![1, 2], "requests 1 and 2 only, in order");
        assert!(a.try_recv().is_ok() && b.try_recv().is_ok());
        assert!(c.try_recv().is_err(), "record 2 is not durable yet");
        durable.store(2, std::sync::atomic::Ordering::Relaxed);
        d.release();
        assert!(c.try_recv().is_ok());
    }

    /// The whole loop with the real pipeline over a slow engine: every
    /// reply finds its record synced.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replies_wait_for_a_slow_sync() {
        use crate::storage::pipeline::{tests::FakeEngine, Pipeline};
        let engine = FakeEngine {
            delay: std::time::Duration::from_millis(15),
            ..FakeEngine::default()
        };
        let p = Pipeline::start(engine.clone(), crate::storage::Durability::Fsync, None).unwrap();
        let d = Driver::new(Persister, info(vec![1]), Box::new(p)).unwrap();
        let (tx, rx) = mpsc::channel(64);
        let run = tokio::spawn(d.run(rx));
        let mut waiting = Vec::new();
        for i in 0..40 {
            let (rtx, rrx) = oneshot::channel();
            let input = Input::Client {
                req: put(&format!("k{i}")),
                session: 0,
                op: OpId::default(),
                reply: ReplyTo::Local(rtx),
            };
            tx.send(input).await.unwrap();
            waiting.push(rrx);
        }
        for (i, r) in waiting.into_iter().enumerate() {
            r.await.unwrap();
            let synced = engine.synced.lock().unwrap().len();
            assert!(
                synced > i,
                "reply {i} came with only {synced} records synced"
            );
        }
        assert!(engine.syncs.load(std::sync::atomic::Ordering::Relaxed) < 40);
        drop(tx);
        run.await.unwrap();
    }

    /// A core for the `SendNow` / `ReplyNow` / `WhenDurable` rules: a PUT
    /// persists, sends its number to node 2 the ordinary way and to node 3
    /// at once, answers at once and asks to hear when it is durable; a GET
    /// sends its number to nodes 2 and 3 at once. Messages back to itself
    /// are kept.
    #[derive(Default)]
    struct Now {
        back: Vec<(Peer, u64)>,
    }

    impl Protocol for Now {
        type Msg = u64;
        type Timer = ();
        fn on_client(&mut self, _: Time, c: ClientRef, req: Request, out: &mut Out<u64, ()>) {
            if persist_put(out, c, req) {
                out.send(Peer::Node(2), c.id);
                out.send_now(Peer::Node(3), c.id);
                out.reply_now(c, Response::Done);
                out.when_durable(c.id);
            } else {
                out.send_now(Peer::Node(2), c.id);
                out.send_now(Peer::Node(3), c.id);
            }
        }
        fn on_msg(&mut self, _: Time, from: Peer, n: u64, _: &mut Out<u64, ()>) {
            self.back.push((from, n));
        }
        fn on_timer(&mut self, _: Time, _: (), _: &mut Out<u64, ()>) {}
    }

    fn drain(link: &mut crate::net::OutQueueRx<Frame<u64>>) -> Vec<u64> {
        std::iter::from_fn(|| match link.try_recv()? {
            Frame::Proto(n) => Some(n),
            other => panic!("unexpected frame {other:?}"),
        })
        .collect()
    }

    #[tokio::test]
    async fn send_now_waits_for_no_record_but_never_overtakes_a_held_send() {
        let storage = Manual::default();
        let durable = storage.durable.clone();
        let mut d = Driver::new(Now::default(), info(vec![1, 2, 3]), Box::new(storage)).unwrap();
        let (tx2, mut link2) = link_queue();
        let (tx3, mut link3) = link_queue();
        d.handle(Input::LinkUp {
            peer: Peer::Node(2),
            tx: Some(tx2),
        });
        d.handle(Input::LinkUp {
            peer: Peer::Node(3),
            tx: Some(tx3),
        });
        let mut a = ask(&mut d, put("a")); // record 1; request 1
        assert!(a.try_recv().is_ok(), "reply_now waits for no record");
        assert_eq!(drain(&mut link3), vec![1], "send_now waits for no record");
        assert!(drain(&mut link2).is_empty(), "an ordinary send waits");
        let _b = ask(&mut d, Request::Get { key: "a".into() }); // request 2
        assert_eq!(drain(&mut link3), vec![2]);
        assert!(
            drain(&mut link2).is_empty(),
            "a send_now stays behind a held send to the same peer"
        );
        assert!(d.core.back.is_empty(), "not durable yet");
        durable.store(1, std::sync::atomic::Ordering::Relaxed);
        d.release();
        assert_eq!(drain(&mut link2), vec![1, 2], "in order");
        assert_eq!(
            d.core.back,
            vec![(Peer::Node(1), 1)],
            "durable: back to itself"
        );
        assert!(d.gated_to.is_empty() && d.gated.is_empty());
        let _c = ask(&mut d, Request::Get { key: "a".into() }); // request 3
        assert_eq!(drain(&mut link2), vec![3], "nothing held any more");
    }

    #[tokio::test]
    async fn when_durable_comes_back_at_once_without_group_commit() {
        let storage = Box::new(MemoryStorage::default());
        let mut d = Driver::new(Now::default(), info(vec![1, 2, 3]), storage).unwrap();
        let _a = ask(&mut d, put("a"));
        assert_eq!(d.core.back, vec![(Peer::Node(1), 1)]);
    }

    #[tokio::test]
    async fn metrics_and_info_name_the_persistence_counters() {
        let d = Driver::new(Persister, info(vec![1]), Box::new(Manual::default())).unwrap();
        let m = d.metrics_text();
        for name in [
            "quorumkv_durability_info{replica=\"1\",durability=\"fsync\"} 1",
            "quorumkv_persist_records_total{replica=\"1\"} 0",
            "quorumkv_persist_syncs_total{replica=\"1\"} 0",
            "quorumkv_persist_sync_seconds_sum{replica=\"1\"} 0",
            "quorumkv_persist_sync_seconds_count{replica=\"1\"} 0",
            "quorumkv_persist_stalled{replica=\"1\"} 0",
        ] {
            assert!(m.contains(name), "{name} missing in {m}");
        }
        let i = d.info_text();
        for f in [
            "# Persistence\r\ndurability:fsync\r\n",
            "persist_records:0\r\n",
            "persist_syncs:0\r\n",
            "persist_sync_us_avg:0\r\n",
            "persist_sync_us_max:0\r\n",
            "persist_pending:0\r\n",
            "persist_stalled:\r\n",
        ] {
            assert!(i.contains(f), "{f} missing in {i}");
        }
    }
}
