//! Lamport's mutual exclusion, one mutex per scope (seed 002 §3.2.2), and
//! the critical section: apply, SERVER_WRITE, acks, RELEASE_LOCK.

use super::bugs::InjectedBug;
use super::msg::{Body, Msg, ReqId, Scope, Timer};
use super::node::{LamportNode, Op, Phase};
use crate::protocol::contract::Out;
use crate::types::{ClientRef, NodeId, OpError, Response, Time};
use bytes::Bytes;
use std::collections::BTreeSet;

type O = Out<Msg, Timer>;

impl LamportNode {
    /// A client's PUT (`Some`) or DELETE (`None`): queue a request stamped
    /// with a fresh clock and send REQUEST_LOCK to every peer.
    pub(super) fn request(
        &mut self,
        now: Time,
        client: ClientRef,
        key: Bytes,
        value: Option<Bytes>,
        out: &mut O,
    ) {
        // Checked (issue 31): a clock at `u64::MAX` has no later stamp; a
        // wrapped one would put this request ahead of every queued one.
        let Some(ts) = self.clock.checked_add(1) else {
            self.counters.clock_exhausted += 1;
            let e = OpError::refused("Lamport clock exhausted");
            return out.reply(client, Response::Failed(e));
        };
        self.clock = ts;
        let req = ReqId {
            ts,
            node: self.id,
            life: self.life,
        };
        let scope = self.scope_of(&key);
        self.queues.insert(&scope, req);
        let op = Op {
            client: Some(client),
            scope: scope.clone(),
            key,
            value,
            deadline: now.saturating_add(self.cfg.op_timeout),
            phase: Phase::Waiting {
                replies: BTreeSet::new(),
            },
        };
        self.ops.insert(req, op);
        self.broadcast(Body::RequestLock { req, scope }, out);
    }

    pub(super) fn dispatch(&mut self, from: NodeId, body: Body, out: &mut O) {
        match body {
            Body::RequestLock { req, scope } => self.on_request(from, req, scope, out),
            Body::ReplyLock { req } => self.on_reply(from, req),
            Body::ReleaseLock { req, scope } => self.on_release(from, req, scope, out),
            Body::ServerWrite {
                req,
                scope,
                key,
                value,
            } => self.on_server_write(from, req, scope, key, value, out),
            Body::WriteAck { req, applied } => self.on_write_ack(from, req, applied, out),
            Body::Outstanding { life, reqs } => self.on_outstanding(from, life, reqs, out),
            Body::SyncRequest => self.on_sync_request(from, out),
            Body::SyncReply {
                entries,
                staged,
                unwritten,
                recovering,
                lost,
            } => self.on_sync_reply(from, entries, staged, unwritten, (recovering, lost), out),
            Body::Commit {
                req,
                scope,
                key,
                value,
            } => self.on_commit(from, req, scope, key, value, out),
            Body::Orphans { staged } => self.on_orphans(staged, out),
            Body::Resolve { req, scope, commit } => self.on_resolve(from, req, scope, commit, out),
            Body::Repair { entries } => self.store.merge(entries),
            Body::Evicted => self.on_evicted(from, out),
            Body::Poll => self.resync(from, out),
        }
    }

    /// Queue the request and reply at once (Lamport's rule). The seed
    /// defers the reply while its own request lacks replies (the bug).
    pub(super) fn on_request(&mut self, from: NodeId, req: ReqId, scope: Scope, out: &mut O) {
        if req.node != from {
            self.counters.misrouted += 1;
            return;
        }
        self.queues.insert(&scope, req);
        if self.bug == Some(InjectedBug::SeedDeferral) && self.waiting_for_replies() {
            self.deferred.push((from, req));
        } else {
            self.send(from, Body::ReplyLock { req }, out);
        }
    }

    fn on_reply(&mut self, from: NodeId, req: ReqId) {
        match self.ops.get_mut(&req).map(|op| &mut op.phase) {
            Some(Phase::Waiting { replies }) => {
                replies.insert(from);
            }
            // Already entered, or withdrawn: the reply is surplus.
            _ => self.counters.stale += 1,
        }
    }

    fn on_release(&mut self, from: NodeId, req: ReqId, scope: Scope, out: &mut O) {
        if req.node != from {
            self.counters.misrouted += 1;
        } else if !self.release_slot(&scope, req, out) {
            self.counters.stale += 1;
            if let Some(r) = &mut self.recovery {
                r.released.insert(req); // its write must not be staged here later
            }
        }
    }

    /// Whether peer `p` no longer holds up request `req` (the second half
    /// of the entry rule): Lamport's "a message timestamped later than the
    /// request" — FIFO links then guarantee every earlier request of `p`
    /// is already queued here. The seed asks for `p`'s REPLY_LOCK instead.
    pub(super) fn peer_clear(&self, p: NodeId, req: ReqId, replies: &BTreeSet<NodeId>) -> bool {
        match self.bug {
            Some(InjectedBug::SeedDeferral) => replies.contains(&p),
            Some(InjectedBug::EnterWithoutLaterMessage) => true,
            _ => self.last_recv.get(&p).is_some_and(|&c| c > req.ts),
        }
    }

    /// Count `msg`'s stamp for the entry rule (`last_recv`), unless `from`
    /// is unsynced; its `Outstanding` syncs it, and counts.
    pub(super) fn note_stamp(&mut self, from: NodeId, msg: &Msg) {
        if matches!(msg.body, Body::Outstanding { .. }) {
            self.unsynced.remove(&from);
        }
        if !self.unsynced.contains(&from) {
            let seen = self.last_recv.entry(from).or_default();
            *seen = (*seen).max(msg.clock);
        }
    }

    /// `p`'s messages to us may have a gap: we restarted (what it sent our
    /// previous life is gone), or we saw its link come back `Up` (what it
    /// sent meanwhile is gone). Lamport's entry rule counts a message
    /// stamped later than our request as proof that every earlier request
    /// of `p` reached us, which holds on a FIFO link without gaps only.
    /// The seed assumes exactly that (§3.2.2: every server connected to
    /// every other; REPLY_LOCK "confirms its current right of ownership")
    /// while §3.3 admits that messages are lost. So until `p`'s complete
    /// list of requests (`Outstanding`) has arrived, nothing from `p`
    /// counts, and we ask for that list (`Poll`): `p` may not have seen
    /// the reset at all (a pause on our side, a crash of ours it did not
    /// notice) and would never send it. Sim seeds 104 and 118 (N = 3,
    /// fsync): the reset was seen on one side only; the side that saw it
    /// took the other's REPLY_LOCK, stamped later, as proof, though that
    /// peer's own REQUEST_LOCK, stamped earlier, had been lost in it: two
    /// holders. Entering is what waits; requesting does not need to (a
    /// low request only orders first). The former rule is
    /// [`InjectedBug::EnterBeforeResync`].
    pub(super) fn unsync(&mut self, p: NodeId, out: &mut O) {
        if self.bug == Some(InjectedBug::EnterBeforeResync) {
            return;
        }
        self.unsynced.insert(p);
        self.last_recv.remove(&p);
        self.send(p, Body::Poll, out);
    }

    /// At a restart (from disk, or recovering): every peer's stream may
    /// have a gap. A recovering server needs no `Poll`: each peer answers
    /// its `SyncRequest` with `Outstanding` first.
    pub(super) fn unsync_all(&mut self, out: &mut O) {
        let restarted = self.durable.restored || self.life > 0;
        let bug = self.bug == Some(InjectedBug::EnterBeforeResync);
        if bug || (!restarted && self.recovery.is_none()) {
            return;
        }
        for p in self.active() {
            if self.recovery.is_some() {
                self.unsynced.insert(p);
            } else {
                self.unsync(p, out);
            }
        }
    }

    /// Enter every critical section whose request heads its queue and is
    /// clear with every active peer.
    pub(super) fn try_enter(&mut self, out: &mut O) {
        let active = self.active();
        let ready: Vec<ReqId> = (self.ops.iter())
            .filter(|(&req, op)| match &op.phase {
                Phase::Waiting { replies } => {
                    self.queues.head(&op.scope) == Some(req)
                        && active.iter().all(|&p| self.peer_clear(p, req, replies))
                }
                Phase::Writing { .. } => false,
            })
            .map(|(&r, _)| r)
            .collect();
        for req in ready {
            self.enter(req, out);
        }
    }

    /// The critical section: apply locally (or stage, with `read-wait`),
    /// SERVER_WRITE to every active peer, then wait for their acks.
    fn enter(&mut self, req: ReqId, out: &mut O) {
        let op = &self.ops[&req];
        let (scope, key, value) = (op.scope.clone(), op.key.clone(), op.value.clone());
        let slot = self
            .queues
            .get_mut(&scope, req)
            .expect("own request queued");
        slot.write = Some((key.clone(), value.clone()));
        if !self.cfg.read_wait {
            slot.applied = true;
            self.apply(req, key.clone(), value.clone());
        }
        let unacked: BTreeSet<NodeId> = self.active().into_iter().collect();
        let body = Body::ServerWrite {
            req,
            scope,
            key,
            value,
        };
        self.broadcast(body, out);
        let done = unacked.is_empty();
        self.ops.get_mut(&req).expect("present").phase = Phase::Writing {
            unacked,
            refused: false,
        };
        if done {
            self.finish(req, out);
        }
    }

    fn on_write_ack(&mut self, from: NodeId, req: ReqId, applied: bool, out: &mut O) {
        if self.committing.contains_key(&req) {
            return self.on_commit_ack(from, req, out);
        }
        let Some(Phase::Writing { unacked, refused }) =
            self.ops.get_mut(&req).map(|o| &mut o.phase)
        else {
            self.counters.stale += 1;
            return;
        };
        if !unacked.contains(&from) {
            self.counters.stale += 1; // a duplicate, after a resend
            return;
        }
        // Without a lock timeout nobody evicts us: a peer without our
        // request lost our REQUEST_LOCK in a reset we did not see (it was
        // paused while we restarted from disk: sim seed 79, N = 3). Our
        // `Outstanding` queues it there again and the write follows; a
        // refusal taken as final left the write on the others only.
        if !applied && self.cfg.lock_timeout.is_none() {
            self.counters.requeued += 1;
            return self.resync(from, out);
        }
        unacked.remove(&from);
        *refused |= !applied;
        if unacked.is_empty() {
            self.finish(req, out);
        }
    }

    /// Every active peer acknowledged: leave the critical section (apply
    /// here first with `read-wait`), answer the client, RELEASE_LOCK.
    pub(super) fn finish(&mut self, req: ReqId, out: &mut O) {
        let op = self.ops.remove(&req).expect("finishing a known op");
        let Phase::Writing { refused, .. } = op.phase else {
            unreachable!("only a critical section finishes")
        };
        self.release_slot(&op.scope, req, out);
        self.counters.completed += 1;
        if let Some(client) = op.client {
            let resp = if refused {
                // A peer had dropped our request (it evicted us): the write
                // is here and maybe elsewhere, not everywhere.
                Response::Failed(OpError::unknown("a peer refused the write"))
            } else {
                Response::Done
            };
            out.reply(client, resp);
        }
        let scope = op.scope;
        self.broadcast(Body::ReleaseLock { req, scope }, out);
    }

    /// Give up a request: one still waiting (op timeout), or any of ours
    /// when a peer evicted us. Its write, if made, stays in queue order.
    pub(super) fn withdraw(&mut self, req: ReqId, out: &mut O) {
        let op = self.ops.remove(&req).expect("withdrawing a known op");
        self.release_slot(&op.scope, req, out);
        let scope = op.scope;
        self.broadcast(Body::ReleaseLock { req, scope }, out);
    }

    /// RELEASE_LOCK of `req` here: a request without a write leaves at
    /// once; one with a write leaves from the head, once applied.
    pub(super) fn release_slot(&mut self, scope: &Scope, req: ReqId, out: &mut O) -> bool {
        let Some(slot) = self.queues.get_mut(scope, req) else {
            return false;
        };
        if slot.write.is_none() {
            self.queues.remove(scope, req);
        } else {
            slot.released = true;
        }
        self.drain(scope, out);
        true
    }

    /// Work at the head of `scope`'s queue: apply its write when its turn
    /// has come (on arrival at the head; with `read-wait`, once released)
    /// and acknowledge it; drop released heads.
    pub(super) fn drain(&mut self, scope: &Scope, out: &mut O) {
        let read_wait = self.cfg.read_wait;
        while let Some((req, slot)) = self.queues.head_slot_mut(scope) {
            let due = !slot.applied && (!read_wait || slot.released);
            if let (Some((key, value)), true) = (slot.write.clone(), due) {
                slot.applied = true;
                self.apply(req, key, value);
                if !read_wait && req.node != self.id {
                    self.send_ack(req.node, req, true, out);
                }
                continue;
            }
            if !slot.released || (slot.write.is_some() && !slot.applied) {
                break;
            }
            self.queues.remove(scope, req);
        }
    }

    /// SERVER_WRITE from the holder of `req`: stage it with its request;
    /// apply from the queue's head (§3.2.2 item 4), acknowledge once
    /// applied. With `read-wait`, acknowledge once staged.
    fn on_server_write(
        &mut self,
        from: NodeId,
        req: ReqId,
        scope: Scope,
        key: Bytes,
        value: Option<Bytes>,
        out: &mut O,
    ) {
        let read_wait = self.cfg.read_wait;
        let Some(slot) = self
            .queues
            .get_mut(&scope, req)
            .filter(|_| req.node == from)
        else {
            self.counters.unknown_writes += 1;
            self.send(
                from,
                Body::WriteAck {
                    req,
                    applied: false,
                },
                out,
            );
            return;
        };
        if slot.write.is_some() {
            // A resend after a link reset: ack again if we already did.
            if slot.applied || read_wait {
                self.send_ack(from, req, true, out);
            }
            return;
        }
        slot.write = Some((key.clone(), value.clone()));
        if self.bug == Some(InjectedBug::ApplyOnArrival) {
            slot.applied = true;
            self.apply(req, key, value);
            self.send_ack(from, req, true, out);
        } else if read_wait {
            self.send_ack(from, req, true, out);
        } else {
            self.drain(&scope, out);
        }
    }

    /// Apply a write at its turn in the queue, unless a newer version of
    /// its key came first by a merge (see the module doc, **Tags**).
    pub(super) fn apply(&mut self, req: ReqId, key: Bytes, value: Option<Bytes>) {
        let stale = self.store.merged_newer(&key, req.tag());
        if stale && self.bug != Some(InjectedBug::ApplyOverNewer) {
            self.counters.superseded += 1;
        } else if !self.store.apply(key, req.tag(), value) {
            self.counters.out_of_order_applies += 1;
        }
    }

    /// Whether one of our requests still lacks a peer's REPLY_LOCK.
    fn waiting_for_replies(&self) -> bool {
        let active = self.active();
        (self.ops.values()).any(|op| match &op.phase {
            Phase::Waiting { replies } => active.iter().any(|p| !replies.contains(p)),
            Phase::Writing { .. } => false,
        })
    }

    /// The seed's deferred replies go out once our own are all in.
    pub(super) fn flush_deferred(&mut self, out: &mut O) {
        if self.deferred.is_empty() || self.waiting_for_replies() {
            return;
        }
        for (to, req) in std::mem::take(&mut self.deferred) {
            if !self.evicted.contains(&to) {
                self.send(to, Body::ReplyLock { req }, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bugs::InjectedBug;
    use super::super::msg::{Body, ReqId, Scope};
    use super::super::node::{Config, LamportNode};
    use super::super::testing::*;
    use crate::protocol::contract::{LinkEvent, Protocol};
    use crate::types::{ClientRef, Peer, Response};

    fn node(id: u32, n: u32) -> LamportNode {
        LamportNode::new(id, &(1..=n).collect::<Vec<_>>(), Config::default())
    }
    /// A server of two with `read-wait`.
    fn read_wait_node(id: u32, bug: Option<InjectedBug>) -> LamportNode {
        let cfg = Config {
            read_wait: true,
            ..Config::default()
        };
        LamportNode::new(id, &[1, 2], cfg).with_bug(bug)
    }
    fn request(req: ReqId) -> Body {
        Body::RequestLock {
            req,
            scope: Scope::Global,
        }
    }
    fn release(req: ReqId) -> Body {
        Body::ReleaseLock {
            req,
            scope: Scope::Global,
        }
    }
    fn ack(req: ReqId) -> Body {
        Body::WriteAck { req, applied: true }
    }

    /// A write asks every peer with a fresh clock (§3.2.2 item 1); a peer
    /// queues it and replies at once, even while it waits itself.
    #[test]
    fn a_request_goes_to_every_peer_and_is_always_answered() {
        let mut n = node(1, 3);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        assert_eq!(
            sent(&mut out),
            vec![(2, request(r(1, 1))), (3, request(r(1, 1)))]
        );
        deliver(&mut n, 2, 1, request(r(1, 2)), &mut out);
        assert_eq!(sent(&mut out), vec![(2, Body::ReplyLock { req: r(1, 2) })]);
        assert_eq!(n.clock, 2, "past the received clock");
    }

    /// Issue 31: a message stamped past `CLOCK_LIMIT` is refused (counted,
    /// nothing changes); a clock at `u64::MAX` refuses a write definitely
    /// instead of wrapping to 0.
    #[test]
    fn clocks_at_the_edge_are_refused_never_wrapped() {
        use crate::protocol::lamport::node::CLOCK_LIMIT;
        let mut n = node(1, 3);
        let mut out = O::new();
        for clock in [u64::MAX, CLOCK_LIMIT + 1] {
            deliver(&mut n, 2, clock, request(r(1, 2)), &mut out);
            assert!(out.is_empty(), "no reply to a refused message");
        }
        assert_eq!((n.clock, n.counters.clock_refused), (0, 2));
        deliver(&mut n, 2, CLOCK_LIMIT, request(r(1, 2)), &mut out);
        assert_eq!(n.clock, CLOCK_LIMIT + 1, "the limit itself is taken");
        out.drain();
        n.clock = u64::MAX;
        n.on_client(T0, ClientRef::local(7), put("k", "v"), &mut out);
        let err = crate::types::OpError::refused("Lamport clock exhausted");
        let cmds: Vec<_> = out.drain().collect();
        assert!(
            cmds.contains(&crate::protocol::Command::Reply {
                client: ClientRef::local(7),
                resp: crate::types::Response::Failed(err),
            }),
            "{cmds:?}"
        );
        assert_eq!((n.clock, n.counters.clock_exhausted), (u64::MAX, 1));
        assert!(!n.holds_lock());
    }

    /// Entry: own request at the head and a message stamped later than it
    /// from every peer; any message will do, not only a reply.
    #[test]
    fn entry_needs_the_head_and_a_later_message_from_every_peer() {
        let mut n = node(1, 3);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        out.drain();
        deliver(&mut n, 2, 4, Body::ReplyLock { req: r(1, 1) }, &mut out);
        // Not later than the request (clock 1): it proves nothing.
        deliver(&mut n, 3, 1, outstanding(0), &mut out);
        assert!(!n.holds_lock() && out.is_empty());
        // Node 3's own request, stamped 2 > 1: queued behind ours, and later.
        deliver(&mut n, 3, 2, request(r(2, 3)), &mut out);
        assert!(n.holds_lock());
        assert_eq!(n.value(b"k"), Some(b("v")), "applied on entry");
        let s = sent(&mut out);
        assert!(s.contains(&(2, write(r(1, 1), "v"))) && s.contains(&(3, write(r(1, 1), "v"))));
    }

    /// Ties in clock go to the lower node id; a lower request from a peer
    /// holds ours back until its RELEASE_LOCK.
    #[test]
    fn an_earlier_request_goes_first_until_released() {
        let mut n = node(2, 2);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "mine"), &mut out);
        deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
        assert_eq!(
            n.queues.head(&Scope::Global),
            Some(r(1, 1)),
            "(1,1) before (1,2)"
        );
        deliver(&mut n, 1, 3, Body::ReplyLock { req: r(1, 2) }, &mut out);
        assert!(!n.holds_lock());
        deliver(&mut n, 1, 4, write(r(1, 1), "theirs"), &mut out);
        deliver(&mut n, 1, 5, release(r(1, 1)), &mut out);
        assert!(n.holds_lock());
        assert_eq!(n.value(b"k"), Some(b("mine")), "theirs first, then mine");
    }

    /// With every ack in: answer the client, RELEASE_LOCK to all, leave the queue.
    #[test]
    fn the_last_ack_answers_and_releases() {
        let mut n = node(1, 3);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        deliver(&mut n, 2, 2, Body::ReplyLock { req: r(1, 1) }, &mut out);
        deliver(&mut n, 3, 2, Body::ReplyLock { req: r(1, 1) }, &mut out);
        out.drain();
        deliver(&mut n, 2, 3, ack(r(1, 1)), &mut out);
        deliver(&mut n, 2, 3, ack(r(1, 1)), &mut out);
        assert!(
            out.is_empty() && n.holds_lock(),
            "a duplicate ack is not 3's"
        );
        assert_eq!(n.counters.stale, 1);
        deliver(&mut n, 3, 3, ack(r(1, 1)), &mut out);
        let (s, a) = split(&mut out);
        assert_eq!(a, vec![Response::Done]);
        assert_eq!(s, vec![(2, release(r(1, 1))), (3, release(r(1, 1)))]);
        assert!(!n.holds_lock() && n.queues.is_empty());
    }

    /// SERVER_WRITE is applied only when its request heads the queue
    /// (§3.2.2 item 4) and acknowledged then; the bug applies on arrival.
    #[test]
    fn writes_apply_from_the_head_in_lock_order() {
        for bug in [None, Some(InjectedBug::ApplyOnArrival)] {
            let mut n = node(3, 3).with_bug(bug);
            let mut out = O::new();
            deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
            deliver(&mut n, 2, 2, request(r(2, 2)), &mut out);
            out.drain();
            deliver(&mut n, 2, 5, write(r(2, 2), "second"), &mut out);
            if bug.is_some() {
                assert_eq!(n.value(b"k"), Some(b("second")), "bug: applied on arrival");
                assert_eq!(sent(&mut out), vec![(2, ack(r(2, 2)))]);
                continue;
            }
            assert_eq!(
                (n.value(b"k"), sent(&mut out)),
                (None, vec![]),
                "not the head"
            );
            deliver(&mut n, 1, 3, write(r(1, 1), "first"), &mut out);
            assert_eq!(n.value(b"k"), Some(b("first")));
            assert_eq!(sent(&mut out), vec![(1, ack(r(1, 1)))]);
            deliver(&mut n, 1, 4, release(r(1, 1)), &mut out);
            assert_eq!(n.value(b"k"), Some(b("second")));
            assert_eq!(sent(&mut out), vec![(2, ack(r(2, 2)))]);
            deliver(&mut n, 2, 6, release(r(2, 2)), &mut out);
            assert!(n.queues.is_empty());
            assert_eq!(n.counters.out_of_order_applies, 0);
        }
    }

    /// Sim seed 272: a `Repair` brought a later write ahead of an earlier
    /// one still staged here (its RELEASE_LOCK lost); applying the earlier
    /// at its turn put a completed delete back over the later put. It is
    /// skipped now; the bug applies it.
    #[test]
    fn a_write_whose_turn_comes_after_a_newer_merged_version_is_skipped() {
        for bug in [None, Some(InjectedBug::ApplyOverNewer)] {
            let mut n = read_wait_node(2, bug);
            let mut out = O::new();
            deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
            let delete = Body::ServerWrite {
                req: r(1, 1),
                scope: Scope::Global,
                key: b("k"),
                value: None,
            };
            deliver(&mut n, 1, 3, delete, &mut out);
            let newer = vec![(b("k"), r(5, 1).tag(), Some(b("new")))];
            deliver(&mut n, 1, 4, Body::Repair { entries: newer }, &mut out);
            deliver(&mut n, 1, 6, release(r(1, 1)), &mut out);
            assert!(n.queues.is_empty());
            let kept = n.value(b"k") == Some(b("new"));
            assert_eq!(kept, bug.is_none(), "{bug:?}");
            assert_eq!(n.counters.superseded, u64::from(bug.is_none()));
        }
    }

    /// A write for a request not queued here is refused, not applied.
    #[test]
    fn a_write_without_its_request_is_refused() {
        let mut n = node(2, 2);
        let mut out = O::new();
        deliver(&mut n, 1, 3, write(r(1, 1), "v"), &mut out);
        let refusal = Body::WriteAck {
            req: r(1, 1),
            applied: false,
        };
        assert_eq!(sent(&mut out), vec![(1, refusal)]);
        assert_eq!((n.value(b"k"), n.counters.unknown_writes), (None, 1));
    }

    /// SERVER_WRITE is re-sent until acknowledged (§3.2.1 item 3): after a
    /// link reset the holder lists its requests and re-sends unacked writes.
    #[test]
    fn an_unacknowledged_write_is_resent_when_the_link_comes_back() {
        let mut n = node(1, 2);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        deliver(&mut n, 2, 2, Body::ReplyLock { req: r(1, 1) }, &mut out);
        out.drain();
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        let listed = Body::Outstanding {
            life: 0,
            reqs: vec![(r(1, 1), Scope::Global)],
        };
        // Then `Poll`: 2's messages count again only after its `Outstanding`.
        let w = write(r(1, 1), "v");
        assert_eq!(sent(&mut out), vec![(2, listed), (2, w), (2, Body::Poll)]);
        deliver(&mut n, 2, 4, ack(r(1, 1)), &mut out);
        out.drain();
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        let none = outstanding(0);
        let s = sent(&mut out);
        assert_eq!(
            s,
            vec![(2, none), (2, Body::Poll)],
            "acknowledged: not resent"
        );
        // The bug resends nothing at all.
        let mut n = node(1, 2).with_bug(Some(InjectedBug::NoResyncOnUp));
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        assert!(out.is_empty());
    }

    /// Sim seeds 104 and 118: after `Up` a peer's messages count for entry
    /// only from its `Outstanding` on: its REQUEST_LOCK, stamped earlier,
    /// may be lost in the reset, and a peer that did not see the reset
    /// replies without re-sending it. The bug lets its reply in at once.
    #[test]
    fn after_up_a_peer_counts_for_entry_only_from_its_outstanding() {
        for bug in [None, Some(InjectedBug::EnterBeforeResync)] {
            let mut n = node(1, 2).with_bug(bug);
            let mut out = O::new();
            n.clock = 10;
            n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
            n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
            n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
            out.drain();
            deliver(&mut n, 2, 20, Body::ReplyLock { req: r(11, 1) }, &mut out);
            assert_eq!(n.holds_lock(), bug.is_some(), "{bug:?}");
            if bug.is_some() {
                continue;
            }
            let listed = Body::Outstanding {
                life: 0,
                reqs: vec![(r(5, 2), Scope::Global)],
            };
            deliver(&mut n, 2, 21, listed, &mut out);
            assert!(
                !n.holds_lock(),
                "(5,2) was lost in the reset: it goes first"
            );
            deliver(&mut n, 2, 22, release(r(5, 2)), &mut out);
            assert!(n.holds_lock());
        }
    }

    /// A restarted server (a later life) asks every peer for its list and
    /// counts nobody until it arrives; a first start asks nobody.
    #[test]
    fn a_restarted_server_polls_every_peer_and_waits_for_their_lists() {
        let mut out = O::new();
        node(1, 3).on_start(T0, &mut out);
        assert!(out.is_empty());
        let mut n = node(1, 3).with_life(1);
        n.on_start(T0, &mut out);
        assert_eq!(sent(&mut out), vec![(2, Body::Poll), (3, Body::Poll)]);
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        deliver(&mut n, 2, 9, Body::ReplyLock { req: r(1, 1) }, &mut out);
        deliver(&mut n, 3, 9, Body::ReplyLock { req: r(1, 1) }, &mut out);
        assert!(!n.holds_lock());
        deliver(&mut n, 2, 10, outstanding(0), &mut out);
        deliver(&mut n, 3, 10, outstanding(0), &mut out);
        assert!(n.holds_lock());
    }

    /// `Outstanding` names every queued request of its sender: the others
    /// lost their RELEASE_LOCK with the connection and leave the queue.
    #[test]
    fn outstanding_drops_requests_whose_release_was_lost() {
        let mut n = node(2, 2);
        let mut out = O::new();
        deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        deliver(&mut n, 1, 5, Body::ReplyLock { req: r(3, 2) }, &mut out);
        assert!(!n.holds_lock());
        out.drain();
        deliver(&mut n, 1, 6, outstanding(0), &mut out);
        assert!(n.holds_lock(), "(1,1) dropped: ours heads the queue");
    }

    /// The op timeout withdraws a write still waiting (definite refusal);
    /// one inside its critical section gets Timeout and still completes.
    #[test]
    fn the_op_timeout_refuses_a_waiting_write_and_times_out_an_entered_one() {
        let mut n = node(1, 2);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "a"), &mut out);
        out.drain();
        let late = T0.saturating_add(Config::default().op_timeout);
        n.on_timer(late, super::Timer::Tick, &mut out);
        let (s, refused) = split(&mut out);
        assert!(matches!(&refused[..], [Response::Failed(e)] if e.is_definite()));
        assert_eq!(s, vec![(2, release(r(1, 1)))]);
        assert!(n.queues.is_empty() && n.ops.is_empty());
        out.drain();
        n.on_client(late, ClientRef::local(2), put("k", "b"), &mut out);
        deliver(&mut n, 2, 9, Body::ReplyLock { req: r(2, 1) }, &mut out);
        assert!(n.holds_lock());
        out.drain();
        let later = late.saturating_add(Config::default().op_timeout);
        n.on_timer(later, super::Timer::Tick, &mut out);
        let e = answers(&mut out);
        assert!(
            matches!(&e[..], [Response::Failed(e)] if !e.is_definite()),
            "{e:?}"
        );
        deliver(&mut n, 2, 10, ack(r(2, 1)), &mut out);
        let (s, a) = split(&mut out);
        assert!(a.is_empty(), "answered once, at the timeout");
        assert_eq!(s, vec![(2, release(r(2, 1)))]);
    }

    /// read-wait: SERVER_WRITE is staged and acknowledged at once, applied
    /// at RELEASE_LOCK; a read of the staged key waits for it.
    #[test]
    fn read_wait_stages_writes_and_holds_reads_of_the_key() {
        let mut n = read_wait_node(2, None);
        let mut out = O::new();
        deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
        out.drain();
        deliver(&mut n, 1, 3, write(r(1, 1), "v"), &mut out);
        assert_eq!(sent(&mut out), vec![(1, ack(r(1, 1)))], "acked when staged");
        assert_eq!(n.value(b"k"), None);
        n.on_client(T0, ClientRef::local(7), get("k"), &mut out);
        n.on_client(T0, ClientRef::local(8), get("other"), &mut out);
        assert_eq!(
            answers(&mut out),
            vec![Response::Value(None)],
            "other key: at once"
        );
        deliver(&mut n, 1, 4, release(r(1, 1)), &mut out);
        assert_eq!(answers(&mut out), vec![Response::Value(Some(b("v")))]);
    }

    /// The bug applies a staged write on arrival: a read sees it before
    /// the holder has every ack (and before other peers have it at all).
    #[test]
    fn apply_on_arrival_shows_a_write_before_its_release_under_read_wait() {
        let mut n = read_wait_node(2, Some(InjectedBug::ApplyOnArrival));
        let mut out = O::new();
        deliver(&mut n, 1, 1, request(r(1, 1)), &mut out);
        deliver(&mut n, 1, 3, write(r(1, 1), "v"), &mut out);
        out.drain();
        n.on_client(T0, ClientRef::local(7), get("k"), &mut out);
        assert_eq!(answers(&mut out), vec![Response::Value(Some(b("v")))]);
    }

    /// The holder itself applies only once every peer staged the write.
    #[test]
    fn read_wait_holder_applies_at_its_release() {
        let mut n = read_wait_node(1, None);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        deliver(&mut n, 2, 2, Body::ReplyLock { req: r(1, 1) }, &mut out);
        assert!(n.holds_lock() && n.value(b"k").is_none());
        n.on_client(T0, ClientRef::local(2), get("k"), &mut out);
        out.drain();
        deliver(&mut n, 2, 3, ack(r(1, 1)), &mut out);
        assert_eq!(n.value(b"k"), Some(b("v")));
        let a = answers(&mut out);
        assert!(a.contains(&Response::Done) && a.contains(&Response::Value(Some(b("v")))));
    }
}
