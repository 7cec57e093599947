//! The coordinator role, part 2: with Q locks held, READ them, take the
//! highest tag, and for a put (or a get with `write-back`) WRITE to the
//! same Q, then UNLOCK (seed 000 §4.1).

use super::bugs::Bug;
use super::coordinator::{Coordinator, Kind, Pending, Phase};
use super::msg::{LockId, Msg, Timer};
use crate::protocol::contract::Out;
use crate::quorum::{QuorumStatus, QuorumTracker};
use crate::types::{NodeId, OpError, Response, Tag, Time, TAG_SPACE_EXHAUSTED};
use bytes::Bytes;

impl Coordinator {
    /// The operation of round `lock` if it is ours and still pending.
    pub(super) fn pending_of(&mut self, lock: LockId) -> Option<&mut Pending> {
        if lock.owner != self.id {
            return None;
        }
        self.pending.get_mut(&lock.round)
    }

    /// Send `msg(lock, key)` to the locked replicas and enter the phase
    /// `phase(locked, tracker)` whose quorum only they can make up.
    fn enter(
        &mut self,
        now: Time,
        round: u64,
        msg: impl FnOnce(LockId, Bytes) -> Msg,
        phase: impl FnOnce(u64, QuorumTracker) -> Phase,
        out: &mut Out<Msg, Timer>,
    ) {
        let p = &self.pending[&round];
        let locked = p.phase.locked();
        self.send_to(locked, &msg(self.lock_id(round), p.key.clone()), out);
        let tracker = self.tracker(locked);
        let p = self.pending.get_mut(&round).expect("present");
        p.phase = phase(locked, tracker);
        p.retry_at = now.saturating_add(self.cfg.retry_interval);
    }

    /// Q grants are in: READ the locked replicas (and no others).
    pub(super) fn enter_read(&mut self, now: Time, round: u64, out: &mut Out<Msg, Timer>) {
        let epoch = self.epoch;
        let msg = |lock, key| Msg::Read { lock, key, epoch };
        let phase = |locked, replies| Phase::Reading {
            locked,
            replies,
            highest: Tag::ZERO,
            value: None,
        };
        self.enter(now, round, msg, phase, out);
    }

    pub(super) fn on_read_reply(
        &mut self,
        now: Time,
        from: NodeId,
        lock: LockId,
        tag: Tag,
        value: Option<Bytes>,
        out: &mut Out<Msg, Timer>,
    ) {
        let Some(Pending {
            phase:
                Phase::Reading {
                    locked,
                    replies,
                    highest,
                    value: best,
                },
            ..
        }) = self.pending_of(lock)
        else {
            self.counters.stale_replies += 1;
            return;
        };
        if *locked & 1 << from == 0 {
            self.counters.stale_replies += 1; // never asked: not from this round
            return;
        }
        if replies.record(from) == QuorumStatus::Duplicate {
            self.counters.duplicate_replies += 1;
            return;
        }
        if tag > *highest || replies.count() == 1 {
            *highest = tag;
            *best = value;
        }
        if replies.won() {
            let read = (*highest, best.take());
            self.finish_read(now, lock.round, read, out);
        }
    }

    /// All Q locked replicas answered with `(tag, value)` the highest: a get
    /// returns it (after a write-back if asked); a put / delete writes its
    /// value under tag + 1 with this coordinator's id.
    fn finish_read(
        &mut self,
        now: Time,
        round: u64,
        (tag, value): (Tag, Option<Bytes>),
        out: &mut Out<Msg, Timer>,
    ) {
        match self.pending[&round].kind.clone() {
            Kind::Get if self.cfg.write_back => {
                let result = Response::Value(value.clone());
                self.enter_write(now, round, (tag, value), result, out);
            }
            Kind::Get => self.finish(round, Response::Value(value), out),
            Kind::Write(new) => {
                // Never reuse a ts: if leases ran out, two writers may have
                // read the same max tag (the writer id would still differ,
                // but a coordinator's concurrent puts share it).
                let floor = Tag {
                    ts: tag.ts.max(self.last_ts),
                    writer: 0,
                };
                // Checked (issue 31): no tag is newer than `ts = u64::MAX`;
                // refused before any WRITE, so definitely without effect.
                let Some(tag) = floor.next(self.id) else {
                    self.counters.tag_space_exhausted += 1;
                    let why = OpError::refused(TAG_SPACE_EXHAUSTED);
                    return self.finish(round, Response::Failed(why), out);
                };
                self.last_ts = tag.ts;
                self.enter_write(now, round, (tag, new), Response::Done, out);
            }
        }
    }

    pub(super) fn enter_write(
        &mut self,
        now: Time,
        round: u64,
        (tag, value): (Tag, Option<Bytes>),
        result: Response,
        out: &mut Out<Msg, Timer>,
    ) {
        let (v, epoch) = (value.clone(), self.epoch);
        let msg = |lock, key| Msg::Write {
            lock,
            key,
            tag,
            value: v,
            epoch,
        };
        let phase = |locked, acks| Phase::Writing {
            locked,
            acks,
            tag,
            value,
            result,
        };
        self.enter(now, round, msg, phase, out);
    }

    pub(super) fn on_ack(&mut self, from: NodeId, lock: LockId, out: &mut Out<Msg, Timer>) {
        let Some(Pending {
            phase:
                Phase::Writing {
                    locked,
                    acks,
                    result,
                    ..
                },
            ..
        }) = self.pending_of(lock)
        else {
            self.counters.stale_replies += 1;
            return;
        };
        if *locked & 1 << from == 0 {
            self.counters.stale_replies += 1;
            return;
        }
        match acks.record(from) {
            QuorumStatus::Duplicate => self.counters.duplicate_replies += 1,
            QuorumStatus::Pending => {}
            QuorumStatus::Won => {
                let result = result.clone();
                self.finish(lock.round, result, out);
            }
            QuorumStatus::AlreadyWon => unreachable!("the op ends at the Q-th ack"),
        }
    }

    /// A locked replica refused the WRITE: the lease ran out (or the lock
    /// was lost) mid-write. The replicas that acknowledged hold the value,
    /// so the outcome is unknown, never a definite failure.
    pub(super) fn on_write_denied(
        &mut self,
        from: NodeId,
        lock: LockId,
        out: &mut Out<Msg, Timer>,
    ) {
        let Some(Pending {
            phase: Phase::Writing { acks, .. },
            kind,
            ..
        }) = self.pending_of(lock)
        else {
            self.counters.stale_replies += 1;
            return;
        };
        let get = matches!(kind, Kind::Get);
        if acks.has(from) {
            self.counters.duplicate_replies += 1; // acked, then a late re-send denied
            return;
        }
        acks.lose(from);
        if acks.still_possible() {
            return;
        }
        let why = format!("replica {from} denied the write: its lease ran out mid-write");
        // A get's write-back spreads a value some replica already holds:
        // failing it definitely is safe.
        let err = if get || self.bug == Some(Bug::DeniedWriteIsFailure) {
            OpError::refused(why)
        } else {
            OpError::unknown(why)
        };
        self.finish(lock.round, Response::Failed(err), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Command;
    use crate::protocol::lease_lock::testing::*;
    use crate::protocol::lease_lock::CoordinatorConfig;
    use crate::types::{ClientRef, Peer};

    fn read_reply(
        c: &mut Coordinator,
        from: NodeId,
        l: LockId,
        ts: u64,
        w: u64,
        v: &str,
        out: &mut O,
    ) {
        let value = Some(Bytes::copy_from_slice(v.as_bytes()));
        let msg = Msg::ReadReply {
            lock: l,
            tag: Tag { ts, writer: w },
            value,
        };
        c.handle(T0, Peer::Node(from), msg, out);
    }
    fn ack(c: &mut Coordinator, from: NodeId, l: LockId, out: &mut O) {
        c.handle(T0, Peer::Node(from), Msg::Ack { lock: l }, out);
    }
    fn unlock_of(l: LockId) -> Msg {
        Msg::Unlock {
            lock: l,
            key: key(),
        }
    }

    /// §4.1 get: the highest tag of the Q locked replicas, then UNLOCK them.
    #[test]
    fn a_get_returns_the_highest_tag_of_the_locked_quorum_and_unlocks() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, get(), &[1, 3], &mut out);
        out.drain();
        read_reply(&mut c, 2, l, 9, 9, "not asked", &mut out);
        assert_eq!(
            c.counters.stale_replies, 1,
            "replica 2 holds no lock of ours"
        );
        read_reply(&mut c, 1, l, 2, 5, "old", &mut out);
        read_reply(&mut c, 1, l, 2, 5, "old", &mut out);
        assert!(out.is_empty());
        assert_eq!(c.counters.duplicate_replies, 1);
        // Same ts: the higher writer id wins (seed 000 §2.2 tag order).
        read_reply(&mut c, 3, l, 2, 7, "new", &mut out);
        let cmds: Vec<_> = out.drain().collect();
        let unlocks: Vec<_> = (1..=3)
            .filter(|&n| n != 2)
            .map(|n| Command::Send {
                to: Peer::Node(n),
                msg: unlock_of(l),
            })
            .collect();
        assert_eq!(cmds[..2], unlocks[..]);
        assert_eq!(
            cmds[2],
            Command::Reply {
                client: ClientRef::local(1),
                resp: value(b"new")
            }
        );
        assert_eq!((c.completed, c.in_flight()), (1, 0));
    }

    /// Issue 31: a locked replica holding `ts = u64::MAX` leaves no newer
    /// tag: the put is refused definitely, no WRITE leaves, the locks are
    /// released, and no ts is issued.
    #[test]
    fn a_put_after_the_last_tag_is_refused_not_wrapped() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1, 2], &mut out);
        out.drain();
        read_reply(&mut c, 1, l, u64::MAX, 999, "forged", &mut out);
        read_reply(&mut c, 2, l, 4, 1, "a", &mut out);
        let cmds: Vec<_> = out.drain().collect();
        let unlocks: Vec<_> = [1, 2]
            .map(|n| Command::Send {
                to: Peer::Node(n),
                msg: unlock_of(l),
            })
            .to_vec();
        assert_eq!(cmds[..2], unlocks[..], "no WRITE, only UNLOCKs");
        assert_eq!(
            cmds[2..],
            [Command::Reply {
                client: ClientRef::local(1),
                resp: Response::Failed(OpError::refused(TAG_SPACE_EXHAUSTED)),
            }]
        );
        assert_eq!((c.refused, c.in_flight(), c.last_ts), (1, 0, 0));
        assert_eq!(c.counters.tag_space_exhausted, 1);
    }

    /// Replies from an id that is no replica of the cluster (64 would not
    /// fit the lock bitsets) are ignored, and panic nothing.
    #[test]
    fn replies_from_outside_the_cluster_are_ignored() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1, 2], &mut out);
        out.drain();
        for n in [4, 64, u32::MAX] {
            read_reply(&mut c, n, l, 9, 9, "x", &mut out);
            ack(&mut c, n, l, &mut out);
            let granted = Msg::LockGranted {
                lock: l,
                key: key(),
            };
            c.handle(T0, Peer::Node(n), granted, &mut out);
        }
        assert!(out.is_empty());
        assert_eq!(c.counters.misrouted, 9);
    }

    /// §4.1 put: tag = (max ts + 1, own id) to the locked Q; done at Q acks.
    #[test]
    fn a_put_writes_max_ts_plus_one_to_the_locked_quorum() {
        let mut c = coord(5);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1, 2, 4], &mut out);
        out.drain();
        read_reply(&mut c, 1, l, 3, 1, "a", &mut out);
        read_reply(&mut c, 2, l, 6, 2, "b", &mut out);
        assert!(out.is_empty());
        read_reply(&mut c, 4, l, 1, 1, "c", &mut out);
        let s = sends(&mut out);
        assert_eq!(to_ids(&s), vec![1, 2, 4]);
        let tag = Tag { ts: 7, writer: ME };
        let write = Msg::Write {
            lock: l,
            key: key(),
            tag,
            value: Some(Bytes::from_static(b"v")),
            epoch: 0,
        };
        assert!(s.iter().all(|(_, m)| *m == write));
        ack(&mut c, 3, l, &mut out);
        assert_eq!(c.counters.stale_replies, 1, "not a locked replica");
        ack(&mut c, 1, l, &mut out);
        ack(&mut c, 1, l, &mut out);
        ack(&mut c, 2, l, &mut out);
        assert!(out.is_empty(), "all Q locked replicas must ack");
        ack(&mut c, 4, l, &mut out);
        let cmds: Vec<_> = out.drain().collect();
        assert_eq!(cmds.len(), 4, "3 UNLOCKs and the reply");
        assert_eq!(
            cmds[3],
            Command::Reply {
                client: ClientRef::local(1),
                resp: Response::Done
            }
        );
        ack(&mut c, 4, l, &mut out);
        assert_eq!(c.counters.stale_replies, 2, "after completion");
        // The next put never reuses ts 7, even if it reads an older tag.
        let l = locked(&mut c, put(b"w"), &[1, 2, 3], &mut out);
        for n in 1..=3 {
            read_reply(&mut c, n, l, 1, 1, "x", &mut out);
        }
        let Some((_, Msg::Write { tag, .. })) = sends(&mut out).pop() else {
            panic!()
        };
        assert_eq!(tag, Tag { ts: 8, writer: ME });
    }

    #[test]
    fn write_back_stores_what_a_get_read_before_it_returns() {
        let cfg = CoordinatorConfig {
            write_back: true,
            ..Default::default()
        };
        let mut c = coord_with(3, cfg);
        let mut out = O::new();
        let l = locked(&mut c, get(), &[2, 3], &mut out);
        out.drain();
        read_reply(&mut c, 2, l, 4, 1, "v", &mut out);
        read_reply(&mut c, 3, l, 1, 1, "u", &mut out);
        let s = sends(&mut out);
        let tag = Tag { ts: 4, writer: 1 };
        let write = Msg::Write {
            lock: l,
            key: key(),
            tag,
            value: Some(Bytes::from_static(b"v")),
            epoch: 0,
        };
        assert_eq!(
            s,
            vec![(Peer::Node(2), write.clone()), (Peer::Node(3), write)]
        );
        ack(&mut c, 2, l, &mut out);
        assert!(out.is_empty());
        ack(&mut c, 3, l, &mut out);
        assert_eq!(replies(&mut out), vec![value(b"v")]);
    }

    /// A WRITE_DENIED from a locked replica makes Q acks impossible: the
    /// put ends at once with an unknown outcome, and unlocks.
    #[test]
    fn a_denied_write_ends_the_put_as_unknown() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1, 2], &mut out);
        read_reply(&mut c, 1, l, 0, 0, "", &mut out);
        read_reply(&mut c, 2, l, 0, 0, "", &mut out);
        out.drain();
        ack(&mut c, 1, l, &mut out);
        c.handle(T0, Peer::Node(1), Msg::WriteDenied { lock: l }, &mut out);
        assert!(out.is_empty(), "an ack then a denial of a re-send: ignored");
        c.handle(T0, Peer::Node(2), Msg::WriteDenied { lock: l }, &mut out);
        let r = replies(&mut out);
        let [Response::Failed(e)] = &r[..] else {
            panic!("{r:?}")
        };
        assert!(matches!(e, OpError::Unknown { .. }) && e.to_string().contains("replica 2"));
        assert_eq!((c.unknown, c.refused, c.in_flight()), (1, 0, 0));
    }
}
