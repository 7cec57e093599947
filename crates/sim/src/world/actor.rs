//! One executor for the commands of a handler call, whoever made it: a
//! server node or a client-side coordinator. [`Actor`] gives the parts that
//! differ (the source peer, the timer table and event, where replies go,
//! whether `Persist` applies); [`World::exec`] handles each command once.

use super::{ClientTimer, Ep, Ev, NodeTimer, World};
use crate::history::SimOutcome;
use crate::protocol::SimProtocol;
use quorumkv_core::protocol::{Command, Record};
use quorumkv_core::{ClientRef, NodeId, Peer, Response};
use std::collections::HashMap;
use std::hash::Hash;

/// Who executes a command: node `i` ([`NodeIx`]) or client `c` ([`ClientIx`]).
pub(super) trait Actor<P: SimProtocol>: Copy {
    type Timer: Clone + Eq + Hash;
    /// The peer the actor's messages come from.
    fn peer(self) -> Peer;
    fn ep(self) -> Ep;
    /// Panics on a send this actor must never make.
    fn check_send(self, w: &World<'_, P>, to: Peer);
    fn timers<'w>(self, w: &'w mut World<'_, P>) -> &'w mut HashMap<Self::Timer, u64>;
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<P>;
    fn reply(self, w: &mut World<'_, P>, cref: ClientRef, resp: Response);
    fn persist(self, w: &mut World<'_, P>, rec: Record);
}

#[derive(Clone, Copy)]
pub(super) struct NodeIx(pub usize);

#[derive(Clone, Copy)]
pub(super) struct ClientIx(pub usize);

impl<P: SimProtocol> Actor<P> for NodeIx {
    type Timer = NodeTimer<P>;
    fn peer(self) -> Peer {
        Peer::Node(self.0 as NodeId + 1)
    }
    fn ep(self) -> Ep {
        Ep::Node(self.0)
    }
    fn check_send(self, w: &World<'_, P>, to: Peer) {
        if let Peer::Node(id) = to {
            let j = id as usize - 1;
            assert!(
                j < w.nodes.len(),
                "n{} sent to unknown node {id}",
                self.0 + 1
            );
        }
    }
    fn timers<'w>(self, w: &'w mut World<'_, P>) -> &'w mut HashMap<Self::Timer, u64> {
        &mut w.nodes[self.0].timers
    }
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<P> {
        Ev::NodeTimer {
            node: self.0,
            timer,
            gen,
        }
    }
    fn reply(self, w: &mut World<'_, P>, cref: ClientRef, resp: Response) {
        w.stats.client_messages += 1;
        let c = (cref.0 >> 32) as usize;
        let ev = Ev::ProxyReply {
            client: c,
            cref,
            resp,
        };
        w.transmit(Ep::Node(self.0), Ep::Client(c), ev);
    }
    fn persist(self, w: &mut World<'_, P>, rec: Record) {
        // Durable (fsync) mode: synced before the next command runs.
        let disk = &mut w.nodes[self.0].disk;
        disk.write(rec);
        disk.sync();
    }
}

impl<P: SimProtocol> Actor<P> for ClientIx {
    type Timer = ClientTimer<P>;
    fn peer(self) -> Peer {
        Peer::Conn(self.0 as u64)
    }
    fn ep(self) -> Ep {
        Ep::Client(self.0)
    }
    fn check_send(self, _: &World<'_, P>, to: Peer) {
        if let Peer::Conn(_) = to {
            panic!("client coordinator c{} sent to a connection", self.0);
        }
    }
    fn timers<'w>(self, w: &'w mut World<'_, P>) -> &'w mut HashMap<Self::Timer, u64> {
        &mut w.clients[self.0].timers
    }
    fn timer_event(self, timer: Self::Timer, gen: u64) -> Ev<P> {
        Ev::ClientTimer {
            client: self.0,
            timer,
            gen,
        }
    }
    fn reply(self, w: &mut World<'_, P>, cref: ClientRef, resp: Response) {
        let req_no = cref.0 & 0xFFFF_FFFF;
        w.complete(self.0, req_no, SimOutcome::from_response(&resp));
    }
    fn persist(self, _: &mut World<'_, P>, _: Record) {} // a client library has no durable storage
}

impl<P: SimProtocol> World<'_, P> {
    /// Execute one command of `actor`'s handler call.
    pub(super) fn exec<A: Actor<P>>(&mut self, actor: A, cmd: Command<P::Msg, A::Timer>) {
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
        }
    }

    /// A message to oneself comes back without the network's faults.
    fn send<A: Actor<P>>(&mut self, actor: A, to: Peer, msg: P::Msg) {
        let me = actor.peer();
        actor.check_send(self, to);
        self.stats.messages += 1;
        let (ep, ev) = match to {
            Peer::Node(id) => {
                let node = id as usize - 1;
                let ev = Ev::NodeMsg {
                    node,
                    from: me,
                    msg,
                };
                (Ep::Node(node), ev)
            }
            Peer::Conn(c) => {
                let client = c as usize;
                let ev = Ev::ClientMsg {
                    client,
                    from: me,
                    msg,
                };
                (Ep::Client(client), ev)
            }
        };
        if to == me {
            trace!(self, "{} -> self {}", Self::ep_name(ep), ev.describe());
            self.schedule(self.now, ev);
        } else {
            self.transmit(actor.ep(), ep, ev);
        }
    }
}
