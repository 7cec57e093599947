//! One executor for the commands of a handler call, whoever made it: a
//! server node or a client-side coordinator. [`Actor`] gives the parts that
//! differ (the source peer, the timer table and event, where replies go,
//! whether `Persist` applies); [`World::exec`] handles each command once.

use super::{ClientTimer, Conn, Ep, Ev, NodeTimer, World};
use quorumkv_core::op::Outcome;
use quorumkv_core::protocol::ProtocolDef;
use quorumkv_core::protocol::{Command, Record, Seen};
use quorumkv_core::{ClientRef, NodeId, Peer, Response};
use std::collections::HashMap;
use std::hash::Hash;

/// Who executes a command: node `i` ([`NodeIx`]) or client `c` ([`ClientIx`]).
pub(super) trait Actor<D: ProtocolDef>: Copy {
    type Timer: Clone + Eq + Hash;
    /// The peer the actor's messages come from.
    fn peer(self, w: &World<'_, D>) -> Peer;
    fn ep(self) -> Ep;
    /// Panics on a send this actor must never make.
    fn check_send(self, w: &World<'_, D>, to: Peer, msg: &D::Msg);
    fn timers<'w>(self, w: &'w mut World<'_, D>) -> &'w mut HashMap<Self::Timer, u64>;
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<D>;
    fn reply(self, w: &mut World<'_, D>, cref: ClientRef, resp: Response);
    fn persist(self, w: &mut World<'_, D>, rec: Record);
}

#[derive(Clone, Copy)]
pub(super) struct NodeIx(pub usize);

#[derive(Clone, Copy)]
pub(super) struct ClientIx(pub usize);

impl<D: ProtocolDef> Actor<D> for NodeIx {
    type Timer = NodeTimer<D>;
    fn peer(self, _: &World<'_, D>) -> Peer {
        Peer::Node(self.0 as NodeId + 1)
    }
    fn ep(self) -> Ep {
        Ep::Node(self.0)
    }
    fn check_send(self, w: &World<'_, D>, to: Peer, _: &D::Msg) {
        if let Peer::Node(id) = to {
            let j = id as usize - 1;
            assert!(
                j < w.nodes.len(),
                "n{} sent to unknown node {id}",
                self.0 + 1
            );
        }
    }
    fn timers<'w>(self, w: &'w mut World<'_, D>) -> &'w mut HashMap<Self::Timer, u64> {
        &mut w.nodes[self.0].timers
    }
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<D> {
        Ev::NodeTimer {
            node: self.0,
            timer,
            gen,
        }
    }
    fn reply(self, w: &mut World<'_, D>, cref: ClientRef, resp: Response) {
        let from = self.0;
        w.observe(
            from,
            Seen::Reply {
                from,
                cref,
                resp: &resp,
            },
        );
        w.stats.client_messages += 1;
        let c = (cref.id >> 32) as usize;
        let ev = Ev::ProxyReply {
            node: self.0,
            client: c,
            cref,
            resp,
        };
        w.transmit(Ep::Node(self.0), Ep::Client(c), ev);
    }
    fn persist(self, w: &mut World<'_, D>, rec: Record) {
        w.persist(self.0, rec);
    }
}

impl<D: ProtocolDef> Actor<D> for ClientIx {
    type Timer = ClientTimer<D>;
    fn peer(self, w: &World<'_, D>) -> Peer {
        Peer::Conn(w.clients[self.0].session)
    }
    fn ep(self) -> Ep {
        Ep::Client(self.0)
    }
    fn check_send(self, _: &World<'_, D>, to: Peer, msg: &D::Msg) {
        if let Peer::Conn(_) = to {
            panic!("client coordinator c{} sent to a connection", self.0);
        }
        // A server refuses anything else from a client connection (issue
        // 31): client mode would silently stall on it.
        assert!(
            D::client_may_send(msg),
            "client coordinator c{} sent {msg:?}, which servers refuse from a client \
             (ProtocolDef::client_may_send)",
            self.0
        );
    }
    fn timers<'w>(self, w: &'w mut World<'_, D>) -> &'w mut HashMap<Self::Timer, u64> {
        &mut w.clients[self.0].timers
    }
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<D> {
        Ev::ClientTimer {
            client: self.0,
            timer,
            gen,
        }
    }
    fn reply(self, w: &mut World<'_, D>, cref: ClientRef, resp: Response) {
        let req_no = cref.id & 0xFFFF_FFFF;
        w.complete(self.0, req_no, Outcome::from_response(&resp));
    }
    fn persist(self, _: &mut World<'_, D>, _: Record) {} // a client library has no durable storage
}

impl<D: ProtocolDef> World<'_, D> {
    /// Execute one command of `actor`'s handler call.
    pub(super) fn exec<A: Actor<D>>(&mut self, actor: A, cmd: Command<D::Msg, A::Timer>) {
        match cmd {
            Command::Send { to, msg } => self.send(actor, to, msg),
            Command::Reply { client, resp } => actor.reply(self, client, resp),
            Command::SetTimer { after, timer } => {
                let (gen, at) = self.arm_timer(after);
                actor.timers(self).insert(timer.clone(), gen);
                self.schedule(at, actor.timer_event(timer, gen));
            }
            Command::CancelTimer { timer } => {
                actor.timers(self).remove(&timer);
            }
            Command::Persist(rec) => actor.persist(self, rec),
            Command::Notify { session, event } => self.notify(actor.ep(), session, event),
            Command::SendNow { to, msg } => self.send(actor, to, msg),
            Command::ReplyNow { client, resp } => actor.reply(self, client, resp),
            Command::WhenDurable(msg) => {
                let me = actor.peer(self);
                self.send(actor, me, msg);
            }
        }
    }

    /// A message to oneself comes back without the network's faults.
    fn send<A: Actor<D>>(&mut self, actor: A, to: Peer, msg: D::Msg) {
        let me = actor.peer(self);
        actor.check_send(self, to, &msg);
        if let (Ep::Node(i), false) = (actor.ep(), to == me) {
            self.check_durable_claim(i, &msg);
            self.observe(
                i,
                Seen::Sent {
                    from: i,
                    to,
                    msg: &msg,
                },
            );
        }
        self.stats.messages += 1;
        let to_ep = match to {
            Peer::Node(id) => Ep::Node(id as usize - 1),
            Peer::Conn(s) => match self.session_client(s) {
                Some(c) => Ep::Client(c),
                None => {
                    // The client-side coordinator of that session is gone.
                    self.stats.cut += 1;
                    return;
                }
            },
        };
        let link = self.link(actor.ep(), to_ep);
        let conn = Conn {
            link: link as u32,
            epoch: self.link_epoch[link],
        };
        let ev = match to_ep {
            Ep::Node(node) => Ev::NodeMsg {
                node,
                from: me,
                msg,
                conn,
            },
            Ep::Client(client) => Ev::ClientMsg {
                client,
                from: me,
                msg,
                conn,
            },
        };
        if to == me {
            trace!(self, "{} -> self {}", Self::ep_name(to_ep), ev.describe());
            self.schedule(self.now, ev);
        } else {
            self.transmit(actor.ep(), to_ep, ev);
        }
    }
}
