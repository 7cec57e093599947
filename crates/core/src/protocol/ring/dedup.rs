//! Retried writes (c): a client re-sends a timed-out write to another
//! server with the same `OpId` (line 191); it must take effect once.
//!
//! Rules, with "a live copy of X here" = a non-void pre-write of X in this
//! server's pending set (forwarded from here, or this server's own):
//! * A client write of X: `Done` if X was applied here; else wait for a
//!   write of X if a live copy is here; else start a new copy.
//! * A copy of X arriving (or back home) is voided if X was applied here
//!   or a *lower* live copy of X is here. Void copies go round, clearing
//!   pending entries, and are never applied.
//! * A void copy back home, with X neither applied nor live here, starts
//!   a new copy (the lower copy that voided it died in crashes).
//!
//! Why at most one copy is seen: say a copy C1 of X is acknowledged at time
//! T; its pre-write round ended before T, so from T on every live server
//! holds C1 pending or X applied. A write Z begun after T is tagged above
//! C1. Another copy C2 above Z would reach Z's server after Z began (else
//! Z > C2), so after T, and be voided there. So no copy lands above a
//! write begun after the acknowledgement (a lower copy changes nothing).

use super::msg::{Entry, Msg, Timer};
use super::node::RingNode;
use super::queue::ClientWrite;
use super::register::Waiter;
use crate::protocol::contract::Out;
use crate::types::{ClientRef, OpId, Response, Tag};
use bytes::Bytes;

impl RingNode {
    /// A live copy of `op` is pending here, below `below` if given.
    pub(super) fn live_copy(&self, key: &Bytes, op: OpId, below: Option<Tag>) -> bool {
        let Some(reg) = self.regs.get(key) else {
            return false;
        };
        (reg.pending.values()).any(|e| e.op == op && !e.void && below.is_none_or(|b| e.tag < b))
    }

    /// Whether copy `e` must be voided here. Never when this very write
    /// (same tag) was applied here: it is no second copy, and a void copy
    /// would clear its pending entries at servers its write has not reached
    /// yet, which then answer reads with an older value than one already
    /// read elsewhere (seed 264 at N = 3, rejoin on: a taker applied an
    /// old life's write and welcomed the new life, whose late copy of the
    /// pre-write came home voided).
    pub(super) fn void_here(&self, e: &Entry) -> bool {
        !e.void
            && !e.op.is_none()
            && !self.applied_same(e)
            && (self.ops.applied(e.op) || self.live_copy(&e.key, e.op, Some(e.tag)))
    }

    /// The write with `e`'s tag was applied here (held or seen lately).
    fn applied_same(&self, e: &Entry) -> bool {
        self.regs.get(&e.key).is_some_and(|r| r.tag == e.tag)
            || self.written.contains(&e.key, e.tag)
    }

    /// A client write whose operation is known here: answered or parked.
    /// False if it must start (a first attempt, or no copy left here).
    pub(super) fn known_op(
        &mut self,
        client: ClientRef,
        key: &Bytes,
        out: &mut Out<Msg, Timer>,
    ) -> bool {
        let op = client.op;
        if op.is_none() {
            return false;
        }
        if self.ops.applied(op) {
            self.counters.deduplicated += 1;
            out.reply(client, Response::Done);
            return true;
        }
        if !self.live_copy(key, op, None) {
            return false;
        }
        self.counters.deduplicated += 1;
        let w = Waiter {
            client,
            op,
            tag: Tag::ZERO,
            converted: false,
        };
        self.reg(key).wait_for_write(w);
        true
    }

    /// A void copy ended its round here: start X again if nothing else
    /// will apply it (its clients wait here by `OpId`).
    pub(super) fn void_came_home(&mut self, e: Entry) {
        if e.origin == self.id {
            self.own.remove(&(e.key.clone(), e.tag));
        }
        if self.ops.applied(e.op) || self.live_copy(&e.key, e.op, None) {
            return;
        }
        self.counters.restarted += 1;
        let (key, value, op) = (e.key, e.value, e.op);
        self.queues.push_write(ClientWrite {
            client: None,
            op,
            key,
            value,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Protocol;
    use crate::protocol::ring::node::RingConfig;
    use crate::protocol::ring::testing::{entry, put, sends, tag, T0};
    use crate::types::Peer;

    /// Seed 264 at N = 3: a copy of a pre-write whose own write was applied
    /// here (held, or seen lately under a newer value) is no second copy of
    /// its operation and must not be voided when it comes home (taken over
    /// from an earlier life): a void copy would clear pending entries ahead
    /// of its own write. (Mutation testing: `applied_same` survived.)
    #[test]
    fn a_copy_whose_own_write_was_applied_here_is_not_voided() {
        let cfg = RingConfig {
            rejoin: false, // no extra lap: home ends the round at once
            ..RingConfig::default()
        };
        let mut n = RingNode::new(2, vec![1, 2, 3], cfg);
        let mut out = Out::new();
        // Operation x, written by an earlier life of 2 (writer 7).
        let mut x = entry(1, 7, "a");
        (x.origin, x.home, x.op) = (2, 2, OpId { client: 9, seq: 1 });
        n.on_msg(T0, Peer::Node(1), Msg::Write(x.clone()), &mut out);
        // A newer write y is held; x's write is only in `written` now.
        let mut y = entry(2, 5, "b");
        (y.origin, y.home, y.op) = (1, 1, OpId { client: 9, seq: 2 });
        n.on_msg(T0, Peer::Node(1), Msg::Write(y), &mut out);
        assert_eq!(n.register(b"k").unwrap().tag, tag(2, 5));
        // A late copy of x's pre-write comes home: taken over, not voided.
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(x), &mut out);
        assert_eq!(n.counters.taken_over, 1);
        assert_eq!(n.counters.voided, 0, "x was applied here with this tag");
    }

    /// Server 1 of 3 (`cfg`) pre-writes client write `X` ("a"); the copy
    /// was voided on the way and comes home as a void write, so `X` starts
    /// again. Returns the server, the first copy and what was sent since.
    fn voided_at_home(cfg: RingConfig) -> (RingNode, Entry, Out<Msg, Timer>) {
        let client = ClientRef {
            id: 1,
            session: 1,
            op: X,
        };
        let mut n = RingNode::new(1, vec![1, 2, 3], cfg);
        let mut out = Out::new();
        n.on_client(T0, client, put("a"), &mut out);
        let first = match &sends(&mut out)[..] {
            [(Peer::Node(2), Msg::PreWrite(e))] => e.clone(),
            s => panic!("{s:?}"),
        };
        let void = Entry {
            void: true,
            ..first.clone()
        };
        n.on_msg(T0, Peer::Node(3), Msg::Write(void), &mut out);
        assert_eq!(n.counters.restarted, 1);
        (n, first, out)
    }
    const X: OpId = OpId { client: 9, seq: 1 };

    /// A void copy back home with its operation neither applied nor live
    /// here starts the operation again (the lower copy that voided it died
    /// in crashes; its client waits by `OpId`), unless a live copy is here.
    /// (Mutation testing: `void_came_home` survived whole.)
    #[test]
    fn a_void_copy_home_restarts_its_operation_unless_a_live_copy_is_here() {
        let x = X;
        let (mut n, first, mut out) = voided_at_home(RingConfig::default());
        assert!(!n.own.contains_key(&(first.key.clone(), first.tag)));
        let again: Vec<Entry> = (sends(&mut out).into_iter())
            .filter_map(|(_, m)| match m {
                Msg::PreWrite(e) => Some(e),
                _ => None,
            })
            .collect();
        assert!(
            again
                .iter()
                .any(|e| e.op == x && !e.void && e.tag > first.tag),
            "x starts again: {again:?}"
        );
        // Now a live copy of x is pending here: another void copy home
        // (of an older tag) starts nothing.
        let older = Entry {
            tag: tag(0, 1),
            void: true,
            ..first
        };
        n.on_msg(T0, Peer::Node(3), Msg::Write(older), &mut out);
        assert_eq!(n.counters.restarted, 1, "the live copy will apply x");
    }

    /// A restarted operation waits in the write queue (here behind a
    /// closed window); if another copy of it is applied meanwhile, it is
    /// not originated again: a second application, under a newer tag, could
    /// land after a later write. (Mutation testing: `originate`'s
    /// `applied || live_copy` -> `&&` survived.)
    #[test]
    fn a_restarted_operation_applied_meanwhile_is_not_originated_again() {
        let x = X;
        let cfg = RingConfig {
            window: 1,
            ..RingConfig::default()
        };
        let (mut n, first, mut out) = voided_at_home(cfg);
        let pre_writes = |out: &mut Out<Msg, Timer>| {
            (sends(out).into_iter())
                .filter(|(_, m)| matches!(m, Msg::PreWrite(e) if e.op == x))
                .count()
        };
        assert_eq!(pre_writes(&mut out), 0, "the window is closed");
        // Another server's copy of x is applied here meanwhile.
        let other = Entry {
            tag: tag(5, 3),
            origin: 3,
            home: 3,
            ..first
        };
        n.on_msg(T0, Peer::Node(3), Msg::Write(other), &mut out);
        for received in 1..=3 {
            n.on_msg(T0, Peer::Node(2), Msg::Credit { received }, &mut out);
        }
        assert_eq!(pre_writes(&mut out), 0, "x is not applied twice");
        assert!(n.queues.is_empty(), "and its restart left the queue");
    }
}
