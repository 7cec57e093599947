//! The sim clients: the workload they issue, their sessions (a client's
//! connection; a proxy client that gives up on a request reconnects), the
//! one retry of protocols that deduplicate requests, `Notify` delivery,
//! and the history they record.

use super::{ClientIx, ClientOut, Ep, Ev, Pending, World};
use crate::history::{Brief, OpRecord};
use bytes::Bytes;
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::protocol::registry::client_writer_id;
use quorumkv_core::protocol::{LinkEvent, Protocol, ProtocolDef};
use quorumkv_core::{ClientRef, Event, OpId, Peer, Request, Response, Time};

impl<D: ProtocolDef> World<'_, D> {
    pub(super) fn with_client(
        &mut self,
        c: usize,
        f: impl FnOnce(&mut D::Client, Time, &mut ClientOut<D>),
    ) {
        let now = Time(self.now);
        let mut out = std::mem::take(&mut self.client_out);
        match self.clients[c].coord.as_mut() {
            Some(coord) => f(coord, now, &mut out),
            None => return self.client_out = out,
        }
        self.check_invariants(quorumkv_core::protocol::Stepped::Client(c));
        for cmd in out.drain() {
            self.exec(ClientIx(c), cmd);
        }
        self.client_out = out;
    }

    fn random_op(&mut self, c: usize) -> Request {
        if let Some(req) = self.round_request(c) {
            return req;
        }
        if self.cfg.znode {
            return self.znode_op(c);
        }
        let key = Bytes::from(format!("k{}", self.work_rng.below(self.p.keys as u64)));
        let mut roll = self.work_rng.below(100);
        if std::mem::take(&mut self.clients[c].read_next) {
            roll = 0;
        }
        let n = self.clients[c].issued;
        let puts = self.p.read_pct + (100 - self.p.read_pct) * 85 / 100;
        if roll < self.p.read_pct || self.read_only(&key) {
            Request::Get { key }
        } else if roll < puts {
            Request::Put {
                key,
                value: Bytes::from(format!("c{c}.{n}")),
            }
        } else {
            Request::Delete { key }
        }
    }

    pub(super) fn issue(&mut self, c: usize) {
        if self.clients[c].issued >= self.clients[c].quota {
            return;
        }
        if !self.healed && self.issued_total >= self.p.heal_after_ops {
            self.heal_all();
        }
        self.issued_total += 1;
        let load = self.is_load_client(c);
        let probe = self.probe_request(c);
        let probing = probe.is_some();
        let req = match probe {
            Some(req) => req,
            None if load => self.load_request(c),
            None => self.random_op(c),
        };
        let op = Op::from(&req);
        let slot = &mut self.clients[c];
        slot.issued += 1;
        let req_no = slot.next_req;
        slot.next_req += 1;
        let process = slot.process;
        let invoke_ns = self.clock.stamp(self.now);
        trace!(self, "c{c} INVOKE p{process} {}", Brief(&op));
        self.history.push(OpRecord {
            process,
            op,
            invoke_ns,
            complete_ns: 0,
            outcome: Outcome::Unknown,
        });
        self.znode_asked(c, ((c as u64) << 32) | req_no, &req);
        let op = OpId {
            client: client_writer_id(c as u64),
            seq: req_no,
        };
        self.clients[c].pending = Some(Pending {
            req_no,
            record: self.history.len() - 1,
            op,
            node: None,
            retry: None,
            retried: false,
        });
        let deadline = self.now + self.patience_us(c);
        self.schedule(deadline, Ev::ClientTimeout { client: c, req_no });
        let id = ((c as u64) << 32) | req_no;
        if self.clients[c].coord.is_some() {
            // The client library's own coordinator: an in-process client.
            let session = ClientRef::LOCAL;
            let cref = ClientRef { id, session, op };
            self.znode_delivered(id);
            self.with_client(c, |coord, now, out| coord.on_client(now, cref, req, out));
        } else {
            let probe = self.probe_node(c).filter(|_| probing);
            let node = match (self.round_server(c), probe) {
                (Some(node), _) | (None, Some(node)) => node,
                // No live server when the load began (a ring re-forming
                // after a kill-all): any node, like the others.
                _ if load && !self.load.servers.is_empty() => self.load_node(c),
                _ => self.work_rng.below(self.nodes.len() as u64) as usize,
            };
            let p = self.clients[c].pending.as_mut().expect("just set");
            p.node = Some(node);
            if D::DEDUPLICATES_REQUESTS && self.nodes.len() > 1 {
                p.retry = Some((req.clone(), node));
            }
            self.send_request(c, node, id, op, req);
        }
    }

    fn send_request(&mut self, c: usize, node: usize, id: u64, op: OpId, req: Request) {
        let session = self.clients[c].session;
        let cref = ClientRef { id, session, op };
        self.stats.client_messages += 1;
        let ev = Ev::ProxyRequest { node, cref, req };
        self.transmit(Ep::Client(c), Ep::Node(node), ev);
    }

    /// The client's patience ran out: it retries once at another node (same
    /// `OpId`, new connection) if the protocol deduplicates requests, and
    /// otherwise records the outcome as unknown and reconnects.
    pub(super) fn client_timeout(&mut self, c: usize, req_no: u64) {
        let proxy = self.clients[c].coord.is_none();
        let Some(p) = self.clients[c].pending.as_mut() else {
            return;
        };
        if p.req_no != req_no {
            return;
        }
        if let Some((req, first)) = p.retry.take() {
            let op = p.op;
            p.retried = true;
            let n = self.nodes.len() as u64;
            let node = (first + 1 + self.work_rng.below(n - 1) as usize) % n as usize;
            trace!(self, "c{c} TIMEOUT: retry at n{} as {op:?}", node + 1);
            self.stats.retries += 1;
            self.reconnect(c);
            self.send_request(c, node, ((c as u64) << 32) | req_no, op, req);
            let deadline = self.now + self.patience_us(c);
            self.schedule(deadline, Ev::ClientTimeout { client: c, req_no });
            return;
        }
        trace!(self, "c{c} TIMEOUT");
        self.complete(c, req_no, Outcome::Unknown);
        if proxy {
            self.reconnect(c);
        }
    }

    /// A proxy client opens a new connection; the servers that knew the old
    /// one see it go `Down` when its heartbeats stop.
    fn reconnect(&mut self, c: usize) {
        let old = self.clients[c].session;
        let new = self.next_session;
        self.next_session += 1;
        self.clients[c].session = new;
        self.stats.reconnects += 1;
        trace!(self, "c{c} RECONNECT s{old} -> s{new}");
        self.closed_sessions.insert(old);
        let at = self.now + self.cfg.timing.heartbeat_timeout().as_micros() as u64;
        for i in 0..self.nodes.len() {
            if self.nodes[i].sessions.remove(&old) {
                self.schedule_link(at, i, LinkEvent::Down(Peer::Conn(old)));
            }
        }
    }

    /// Node `i` hears from session `s` (a request, or a client-side
    /// coordinator's message): the first time in this life of the node, its
    /// core sees the connection come `Up`. A message of a session that has
    /// closed meanwhile (it was in flight) opens it for a moment.
    pub(super) fn open_session(&mut self, i: usize, s: u64) {
        if s == ClientRef::LOCAL || !self.nodes[i].sessions.insert(s) {
            return;
        }
        self.stats.link_ups += 1;
        trace!(self, "n{} Up(Conn({s}))", i + 1);
        let ev = LinkEvent::Up(Peer::Conn(s));
        self.with_node(i, |core, now, out| core.on_link(now, ev, out));
        if self.closed_sessions.contains(&s) {
            self.nodes[i].sessions.remove(&s);
            let at = self.now + self.cfg.timing.heartbeat_timeout().as_micros() as u64;
            self.schedule_link(at, i, LinkEvent::Down(Peer::Conn(s)));
        }
    }

    /// The client whose current connection is `session`.
    pub(super) fn session_client(&self, session: u64) -> Option<usize> {
        // Sessions 1..=C are the clients' first ones, in order.
        let guess = (session as usize).wrapping_sub(1);
        match self.clients.get(guess) {
            Some(slot) if slot.session == session => Some(guess),
            _ => self.clients.iter().position(|s| s.session == session),
        }
    }

    /// A core's `Notify` for `session`, from a node (to a connection it
    /// has) or from a client-side coordinator (to `LOCAL`, its own client).
    pub(super) fn notify(&mut self, from: Ep, session: u64, event: Event) {
        if let (Ep::Node(_), true) = (from, self.cfg.znode) {
            self.znode_expiry_seen(&event);
        }
        let target = match from {
            Ep::Node(i) if self.nodes[i].sessions.contains(&session) => {
                self.session_client(session)
            }
            Ep::Node(_) => None,
            Ep::Client(c) => {
                (session == ClientRef::LOCAL || session == self.clients[c].session).then_some(c)
            }
        };
        match (from, target) {
            (Ep::Node(i), Some(c)) => {
                self.stats.client_messages += 1;
                let ev = Ev::Notify {
                    node: i,
                    client: c,
                    session,
                    event,
                };
                self.transmit(Ep::Node(i), Ep::Client(c), ev);
            }
            (Ep::Client(c), Some(_)) => self.notified(None, c, session, event),
            (_, None) => {
                self.stats.notifies_dropped += 1;
                trace!(
                    self,
                    "NOTIFY s{session} DROPPED (no such session) {event:?}"
                );
            }
        }
    }

    /// A notification (from server `node`, or from the client's own
    /// coordinator) reaches client `c`, unless its session has closed.
    pub(super) fn notified(&mut self, node: Option<usize>, c: usize, session: u64, event: Event) {
        let live = session == ClientRef::LOCAL || session == self.clients[c].session;
        if live {
            self.stats.notifies += 1;
            trace!(self, "c{c} NOTIFIED s{session} {event:?}");
            self.znode_notified(node, c, &event);
        } else {
            self.stats.notifies_dropped += 1;
            trace!(
                self,
                "c{c} NOTIFY s{session} DROPPED (session closed) {event:?}"
            );
        }
    }

    /// Server `node`'s answer on connection `cref.session`: the client takes
    /// it only on its current connection (a closed one delivers nothing).
    pub(super) fn proxy_reply(&mut self, node: usize, c: usize, cref: ClientRef, resp: Response) {
        if cref.session != self.clients[c].session {
            return;
        }
        self.znode_answered(node, c, &resp);
        let mut outcome = Outcome::from_response(&resp);
        let retried = self.clients[c].pending.as_ref().is_some_and(|p| p.retried);
        if retried && outcome == Outcome::Fail {
            // The retry was refused, but the first attempt may have applied.
            outcome = Outcome::Unknown;
        }
        self.complete(c, cref.id & 0xFFFF_FFFF, outcome);
    }

    /// Client `c` learnt the outcome of request `req_no` (stale answers to
    /// requests it already gave up on are ignored).
    pub(super) fn complete(&mut self, c: usize, req_no: u64, outcome: Outcome) {
        match &self.clients[c].pending {
            Some(p) if p.req_no == req_no => {}
            _ => return,
        }
        let p = self.clients[c].pending.take().expect("checked");
        let complete_ns = self.clock.stamp(self.now);
        let probe = self.is_probe(p.record);
        let load = self.is_load_client(c);
        let bursting = self.probe_bursting();
        let rec = &mut self.history[p.record];
        rec.complete_ns = complete_ns;
        rec.outcome = outcome.clone();
        self.stats.ops_after_workload += u64::from(probe || load || bursting);
        match outcome {
            Outcome::Ok(_) => self.stats.ops_ok += 1,
            Outcome::Fail => self.stats.ops_fail += 1,
            Outcome::Unknown => self.stats.ops_unknown += 1,
        }
        let invoked_after_heal = self.healed && rec.invoke_ns >= self.liveness_from_us * 1000;
        let took = complete_ns - rec.invoke_ns;
        let late =
            took > self.cfg.timing.liveness_bound.as_nanos() as u64 || outcome == Outcome::Unknown;
        // Lone probes and the load have checks of their own; the probe's
        // burst has none (five writers on one key may queue past the bound).
        let own_check = probe || load || bursting;
        if D::PROMISES_LIVENESS && invoked_after_heal && late && self.stuck.is_none() && !own_check
        {
            let line = rec.to_string();
            self.stuck = Some(format!(
                "after the faults healed, an operation did not complete in time: {line}"
            ));
        }
        trace!(self, "c{c} COMPLETE {outcome}");
        if probe {
            self.judge_probe(p.record);
        }
        if load {
            self.load_completed(c, p.record);
        }
        if outcome == Outcome::Unknown {
            // Jepsen's rule: the process may still be "inside" that operation.
            self.clients[c].process = self.next_process;
            self.next_process += 1;
        }
        let slot = &mut self.clients[c];
        if slot.issued >= slot.quota {
            slot.done = true;
            self.clients_done += 1;
            self.znode_client_done(c);
            if self.clients_done == self.clients.len()
                && !self.advance_probe()
                && !self.start_load()
            {
                self.judge_load();
            }
            return;
        }
        let think = if probe {
            self.probe_gap_us()
        } else if load {
            0
        } else {
            self.work_rng.range(0, self.p.think_max_us)
        };
        self.schedule(self.now + think, Ev::ClientIssue { client: c });
    }
}
