//! The extra lap of a pre-write (rejoin on; module doc, "Rejoin").
//!
//! A joiner `r` gets its state from its live predecessor `p`. A pre-write
//! that went past `r`'s position before `r` came back, and had not reached
//! `p` yet, is in neither: it ends its round at `p` (its home, or the taker
//! of a crashed origin's) without passing `r` again. Applied at `p` then,
//! it could be read there while `r`, which does not hold it pending,
//! answers reads with the older value until the write comes (seed 110 at
//! N = 5: a new life took over its old life's pre-write and answered a
//! read with it; two servers welcomed from it in a chain still served the
//! value before). So a pre-write back home at a server that has welcomed
//! a joiner since the write began (own writes) or at all (taken over, its
//! start unknown) goes round once more as a `Lap`: every server holds it
//! pending (it passes on copies it holds already) and home applies it
//! when the lap is back. With rejoin off nobody joins: no lap.

use super::msg::{Entry, Msg, Timer};
use super::node::{Phase, RingNode};
use crate::protocol::contract::Out;

type O = Out<Msg, Timer>;

impl RingNode {
    /// A pre-write back at the server where its round ends.
    pub(super) fn pre_write_back(&mut self, e: Entry, out: &mut O) {
        let id = (e.key.clone(), e.tag);
        if self.lapping.contains(&id) {
            self.counters.duplicates += 1; // its lap is on its way
            return;
        }
        if !self.needs_lap(&e) {
            return self.pre_write_home(e, out);
        }
        self.lapping.insert(id);
        self.counters.laps += 1;
        self.reg(&e.key).pending.insert(e.tag, e.clone());
        self.queues.ready.push_back(Msg::Lap(e, self.writer));
    }

    /// Whether a joiner may have missed `e` (see the module doc).
    fn needs_lap(&self, e: &Entry) -> bool {
        if !self.cfg.rejoin || e.void {
            return false;
        }
        let id = (e.key.clone(), e.tag);
        if self.lapped.contains(&id) {
            return false; // its lap from here came round: held everywhere
        }
        if self.is_mine(e) {
            self.own.get(&id) == Some(&Phase::PreWrite)
                && self.began.get(&id).is_none_or(|&w| w < self.welcomes)
        } else {
            !self.taken.contains(&id)
        }
    }

    /// A lap from the predecessor: hold it pending and pass it on, or, at
    /// its home, end the pre-write round.
    /// A lap is named by the life that sent it (its writer id): if that
    /// one crashes, the next taker of the home, or a new life of the home
    /// itself, sends its own, which must pass where the first one did
    /// (seed 55 of the fuzz test; seed 224 at N = 3, rejoin on: named by
    /// node id, the new life's lap was dropped as a copy of its old
    /// life's, and the pre-write stayed pending everywhere). A lap sent from here as
    /// home, which this server is no longer (a new life of the crashed
    /// origin joined since, seed 1099 at N = 3), goes on to the new home.
    pub(super) fn on_lap(&mut self, e: Entry, by: u64, out: &mut O) {
        let id = (e.key.clone(), e.tag);
        self.lapping.remove(&id);
        if by == self.writer {
            // Its own lap back round (home moved on meanwhile, or not):
            // every server on the way holds it pending, a joiner welcomed
            // since gets it in its snapshot. If this server becomes its
            // end again (a new life of home crashed), it ends it at once:
            // a second lap of the same life would be dropped as a copy of
            // the first by every server it passed (fuzz seed 19442 at
            // N = 4: the pre-write stayed pending at every server).
            self.lapped.insert(id.clone());
        }
        if self.ends_here(e.home) {
            if self.end_waits(&e) {
                return self.queues.push_forward(Msg::Lap(e, by));
            }
            return self.pre_write_home(e, out);
        }
        if self.laps.insert(id, by) == Some(by) {
            self.counters.duplicates += 1; // a re-sent copy
            if !self.reg(&e.key).pending.contains_key(&e.tag) {
                // Its write passed here: the predecessor holds the lap's
                // pre-write pending and the lap sent first may have died
                // in a crash, so answer with the write, as for a copy of
                // a pre-write (`write_round_for`; fuzz seed 12681 at N = 5:
                // the home's new life re-sent its lap, every server dropped
                // it as a copy, and the entry stayed at the home for ever).
                self.write_round_for(e);
            }
            return;
        }
        if !self.written.contains(&e.key, e.tag) {
            self.reg(&e.key).pending.insert(e.tag, e.clone());
        }
        self.queues.push_forward(Msg::Lap(e, by));
    }

    /// A write whose round ends here, and whose pre-write was pending here
    /// when this server welcomed a joiner: the write passed the joiner's
    /// place before the joiner came (back), so the joiner, and any server
    /// welcomed from it in turn, holds the pre-write pending from the
    /// snapshot and would never see the write (fuzz seed 7103 at N = 7: a
    /// taker ended a crashed origin's write; the joiner kept the pre-write
    /// pending, and a client's retry parked on it there for ever). So it
    /// goes round once more from here, as the write's home; servers that
    /// sent it on the same link before drop it (`send_ring`), those
    /// welcomed since apply it and clear the pending entry.
    pub(super) fn write_again(&mut self, mut e: Entry) {
        self.counters.resent += 1;
        e.home = self.id;
        let id = (e.key.clone(), e.tag, e.void, e.home);
        self.link.writes.remove(&id); // sent before the joiner came: again
        self.rounds_again.insert((e.key.clone(), e.tag));
        self.queues.ready.push_back(Msg::Write(e));
    }

    /// A copy of a pre-write whose write was applied here came from the
    /// predecessor, which sent it because it holds the pre-write pending
    /// without its write (or passed on such a copy): a joiner whose
    /// snapshot held it pending, the write having passed its place before
    /// it came back. The round that should end it there, `write_again`
    /// from the welcomer, may die in crashes (fuzz seed 6634 at N = 6: it
    /// waited in the welcomer's queue, went to the next joiner's snapshot
    /// as owed, and both crashed with it unsent; the joiner kept the entry
    /// pending with a client's retry parked on it). So it is answered with
    /// the write, round the ring to the predecessor: every server on the
    /// way applies it or drops the entry (pc 41-48). Only a write seen
    /// here applied: a void one must stay void (`dedup.rs`). Applying it
    /// early is safe, its pre-write round ended (pc 32-37), and a copy
    /// more is idempotent. Dropped copies are re-sends after crashes and
    /// welcomes, so this is rare; with one server the round would be empty.
    /// A *copy* may come void while its tag was applied here: a server
    /// that knew its operation applied but not under which tag (a snapshot
    /// or a restart said so) voided it. One tag names one write, so the
    /// write seen here applied is the copy's, and it goes round applied;
    /// kept void, it died here and left its void entries pending on the
    /// way (durable fuzz seed 6178 at N = 6).
    pub(super) fn write_round_for(&mut self, mut e: Entry) {
        if !self.live_writes.contains(&e.key, e.tag) || self.pred == self.id {
            return;
        }
        self.counters.resent += 1;
        e.void = false;
        e.home = self.pred;
        self.queues.ready.push_back(Msg::Write(e));
    }

    /// Remember the pre-writes a `Welcome` carries pending (`write_again`).
    pub(super) fn welcomed_with(&mut self, s: &super::msg::Snapshot) {
        if self.welcomed_pending.len() > super::node::WRITTEN_KEPT {
            self.welcomed_pending.clear(); // writes that ended elsewhere
        }
        let pending = s.regs.iter().flat_map(|(_, p)| p);
        (self.welcomed_pending).extend(pending.map(|e| (e.key.clone(), e.tag)));
    }

    /// A pending pre-write as re-sent to a new successor: on its lap if
    /// it is on one.
    pub(super) fn phase_one(&self, e: &Entry) -> Msg {
        let id = (e.key.clone(), e.tag);
        if self.lapping.contains(&id) {
            // This server's own lap, sent since any lap that passed here
            // (fuzz seed 3790 at N = 6: a taker re-sent the crashed home's
            // lap instead of its own, every server dropped it as a copy,
            // and the pre-write stayed pending with a retry parked on it).
            Msg::Lap(e.clone(), self.writer)
        } else if let Some(&by) = self.laps.get(&id).or(self.lap_hints.get(&id)) {
            Msg::Lap(e.clone(), by)
        } else {
            Msg::PreWrite(e.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::{LinkEvent, Protocol};
    use crate::protocol::ring::node::RingConfig;
    use crate::protocol::ring::testing::{entry, key, put, sends, tag, T0};
    use crate::types::{ClientRef, NodeId, Peer, Tag};

    fn node(id: NodeId, rejoin: bool) -> RingNode {
        let cfg = RingConfig {
            rejoin,
            ..RingConfig::default()
        };
        RingNode::new(id, vec![1, 2, 3], cfg)
    }
    fn held(n: &RingNode) -> Tag {
        n.register(b"k").map_or(Tag::ZERO, |r| r.tag)
    }
    fn pending(n: &RingNode, t: Tag) -> bool {
        n.register(b"k").is_some_and(|r| r.pending.contains_key(&t))
    }
    /// Node 1 pre-writes a client's value; with `welcome`, it lets 2's
    /// new life in while the pre-write is on its way (2 crashed first).
    /// Returns the pre-write as it comes back from 3.
    fn own_write(n: &mut RingNode, welcome: bool) -> Msg {
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("v"), &mut out);
        let (_, pw) = sends(&mut out).pop().expect("pre-write sent");
        if welcome {
            n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
            n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
            let join = Msg::Join { node: 2, writer: 7 };
            n.on_msg(T0, Peer::Node(2), join, &mut out);
            assert_eq!(n.welcomes, 1);
        }
        pw
    }

    #[test]
    fn an_own_pre_write_back_after_a_welcome_laps_once_then_is_applied() {
        let mut n = node(1, true);
        let pw = own_write(&mut n, true);
        let t = pw.entry().unwrap().tag;
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(3), pw.clone(), &mut out);
        // Not applied: it goes round once more, still pending here.
        assert_eq!((held(&n), n.counters.laps), (Tag::ZERO, 1));
        assert!(pending(&n, t) && n.lapping.contains(&(key(), t)));
        let lap: Vec<_> = (sends(&mut out).into_iter())
            .filter(|(_, m)| matches!(m, Msg::Lap(..)))
            .collect();
        assert!(
            matches!(&lap[..], [(Peer::Node(2), Msg::Lap(e, 1))] if e.tag == t),
            "{lap:?}"
        );
        // A copy of the pre-write meanwhile: its lap is on its way.
        let dups = n.counters.duplicates;
        n.on_msg(T0, Peer::Node(3), pw, &mut out);
        assert_eq!(n.counters.duplicates, dups + 1);
        assert_eq!(n.counters.laps, 1);
        assert!(sends(&mut out).is_empty());
        // The lap back home ends the pre-write round: applied, written.
        let (_, Msg::Lap(e, by)) = &lap[0] else {
            unreachable!()
        };
        n.on_msg(T0, Peer::Node(3), Msg::Lap(e.clone(), *by), &mut out);
        assert_eq!(held(&n), t);
        assert!(!pending(&n, t) && n.lapping.is_empty());
        let s = sends(&mut out);
        assert!(
            s.iter()
                .any(|(_, m)| matches!(m, Msg::Write(w) if w.tag == t)),
            "{s:?}"
        );
    }

    #[test]
    fn no_lap_without_a_welcome_since_it_began_or_with_rejoin_off() {
        for (rejoin, welcome) in [(true, false), (false, false)] {
            let mut n = node(1, rejoin);
            let pw = own_write(&mut n, welcome);
            let t = pw.entry().unwrap().tag;
            let mut out = O::new();
            n.on_msg(T0, Peer::Node(3), pw, &mut out);
            assert_eq!((held(&n), n.counters.laps), (t, 0), "rejoin {rejoin}");
        }
        // A write begun after the welcome: its round started from the
        // welcomer's view, which has the joiner in it.
        let mut n = node(1, true);
        own_write(&mut n, true);
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(3), Msg::Credit { received: 8 }, &mut out);
        n.on_client(T0, ClientRef::local(2), put("w"), &mut out);
        let pw = (sends(&mut out).into_iter())
            .map(|(_, m)| m)
            .find(|m| matches!(m, Msg::PreWrite(e) if e.value.as_deref() == Some(&b"w"[..])))
            .expect("the second pre-write");
        let t = pw.entry().unwrap().tag;
        n.on_msg(T0, Peer::Node(3), pw, &mut out);
        assert_eq!(held(&n), t, "applied at once");
        assert_eq!(n.counters.laps, 0);
    }

    #[test]
    fn a_void_copy_and_a_pre_write_taken_over_twice_take_no_lap() {
        let mut n = node(1, true);
        let mut e = entry(4, 2, "x");
        e.home = 1; // a crashed origin's, ending here
        e.void = true;
        assert!(!n.needs_lap(&e), "void: never applied");
        e.void = false;
        assert!(n.needs_lap(&e), "taken over: its start is unknown");
        n.taken.insert((e.key.clone(), e.tag));
        assert!(!n.needs_lap(&e), "ended already");
        let off = node(1, false);
        assert!(!off.needs_lap(&e), "rejoin off: nobody joins");
    }

    #[test]
    fn a_lap_passing_through_is_held_pending_and_passed_on_once_per_sender() {
        let mut n = node(2, true);
        let mut out = O::new();
        let e = entry(5, 1, "a");
        n.on_msg(T0, Peer::Node(1), Msg::Lap(e.clone(), 1), &mut out);
        assert!(pending(&n, tag(5, 1)));
        assert_eq!(n.laps.get(&(key(), tag(5, 1))), Some(&1));
        let fwd = |out: &mut O| {
            (sends(out).into_iter())
                .filter_map(|(to, m)| match m {
                    Msg::Lap(e, by) => Some((to, e.tag, by)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(fwd(&mut out), vec![(Peer::Node(3), tag(5, 1), 1)]);
        // The same lap re-sent after a crash: a copy.
        n.on_msg(T0, Peer::Node(1), Msg::Lap(e.clone(), 1), &mut out);
        assert_eq!((n.counters.duplicates, fwd(&mut out).len()), (1, 0));
        // A lap of a new taker of the home must pass where the first did.
        n.on_msg(T0, Peer::Node(1), Msg::Lap(e.clone(), 3), &mut out);
        assert_eq!(fwd(&mut out), vec![(Peer::Node(3), tag(5, 1), 3)]);
        // So must one of a new life of a server that sent one (seed 224).
        let new_life = 3 + (1 << 32);
        n.on_msg(T0, Peer::Node(1), Msg::Lap(e.clone(), new_life), &mut out);
        assert_eq!(fwd(&mut out), vec![(Peer::Node(3), tag(5, 1), new_life)]);
        // Its write came meanwhile: the lap goes on but is not pending.
        n.on_msg(T0, Peer::Node(1), Msg::Write(e.clone()), &mut out);
        assert!(!pending(&n, tag(5, 1)) && n.laps.is_empty());
        n.on_msg(T0, Peer::Node(1), Msg::Lap(e, 1), &mut out);
        assert!(!pending(&n, tag(5, 1)));
        assert_eq!(fwd(&mut out), vec![(Peer::Node(3), tag(5, 1), 1)]);
    }

    #[test]
    fn a_pending_pre_write_is_re_sent_as_the_lap_it_is_on() {
        let mut n = node(2, true);
        let e = entry(5, 1, "a");
        let id = (key(), e.tag);
        assert_eq!(n.phase_one(&e), Msg::PreWrite(e.clone()));
        n.lap_hints.insert(id.clone(), 3);
        assert_eq!(
            n.phase_one(&e),
            Msg::Lap(e.clone(), 3),
            "named by the snapshot"
        );
        n.laps.insert(id.clone(), 1);
        assert_eq!(n.phase_one(&e), Msg::Lap(e.clone(), 1), "passed here");
        // Its own lap, begun here since (a taker of the home that sent
        // lap 1): re-sent as lap 1, every server would drop it as a copy.
        n.lapping.insert(id);
        assert_eq!(n.phase_one(&e), Msg::Lap(e, 2), "its own lap");
    }

    #[test]
    fn a_lap_from_here_reaching_a_server_no_longer_its_home_goes_on() {
        // 1 sent 2's old life's pre-write round as 2's taker; 2's new life
        // joined since, so the lap ends there, not here.
        let mut n = node(1, true);
        let e = entry(5, 2, "a");
        let id = (key(), e.tag);
        n.lapping.insert(id.clone());
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(3), Msg::Lap(e, 1), &mut out);
        assert!(!n.lapping.contains(&id));
        assert_eq!(held(&n), Tag::ZERO, "not applied here");
        let s = sends(&mut out);
        assert!(
            matches!(&s[..], [(Peer::Node(2), Msg::Lap(e, 1))] if e.tag == tag(5, 2)),
            "{s:?}"
        );
    }

    /// Writes among `out`'s sends: `(to, tag, home, void)`.
    fn writes_sent(out: &mut O) -> Vec<(Peer, Tag, NodeId, bool)> {
        (sends(out).into_iter())
            .filter_map(|(to, m)| match m {
                Msg::Write(e) => Some((to, e.tag, e.home, e.void)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_copy_of_a_pre_write_applied_here_is_answered_with_a_write_round_to_the_predecessor() {
        // 2 forwarded 3's write already; a joiner upstream still holds its
        // pre-write pending and passes a copy on (fuzz seed 6634).
        let mut n = node(2, true);
        let mut out = O::new();
        let e = entry(5, 3, "a");
        n.on_msg(T0, Peer::Node(1), Msg::Write(e.clone()), &mut out);
        assert_eq!(
            writes_sent(&mut out),
            vec![(Peer::Node(3), tag(5, 3), 3, false)]
        );
        let dups = n.counters.duplicates;
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(e.clone()), &mut out);
        assert_eq!(
            n.counters.duplicates,
            dups + 1,
            "not forwarded as a pre-write"
        );
        // The same write, ending at 1 this time: sent on the same link,
        // it is another round, not a copy of the first.
        assert_eq!(
            writes_sent(&mut out),
            vec![(Peer::Node(3), tag(5, 3), 1, false)]
        );
        assert!(!pending(&n, tag(5, 3)));
        // A second copy: that round was sent on this link already.
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(e), &mut out);
        assert_eq!(writes_sent(&mut out), vec![]);
    }

    #[test]
    fn a_copy_whose_write_was_void_here_or_pending_here_gets_no_write_round() {
        let mut n = node(2, true);
        let mut out = O::new();
        let mut v = entry(5, 3, "a");
        v.void = true;
        n.on_msg(T0, Peer::Node(1), Msg::Write(v.clone()), &mut out);
        assert_eq!(
            writes_sent(&mut out),
            vec![(Peer::Node(3), tag(5, 3), 3, true)]
        );
        // The void write names the tag, but no value was applied under it:
        // a write round from here would apply a voided copy (dedup.rs).
        v.void = false;
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(v), &mut out);
        assert_eq!(writes_sent(&mut out), vec![]);
        // A copy of a pre-write pending here: its round goes on.
        let p = entry(6, 3, "b");
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(p.clone()), &mut out);
        assert!(pending(&n, tag(6, 3)));
        let _ = sends(&mut out);
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(p), &mut out);
        assert_eq!(writes_sent(&mut out), vec![]);
    }

    #[test]
    fn a_void_copy_of_a_write_applied_here_is_answered_with_the_applied_write() {
        // 2 applied and forwarded 3's write; a server that knew the
        // operation applied but not its tag voided a copy of the pre-write
        // (durable fuzz seed 6178). One tag, one write: the round that
        // answers it applies, it does not stay void.
        let mut n = node(2, true);
        let mut out = O::new();
        let e = entry(5, 3, "a");
        n.on_msg(T0, Peer::Node(1), Msg::Write(e.clone()), &mut out);
        let _ = sends(&mut out);
        let mut v = e;
        v.void = true;
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(v), &mut out);
        assert_eq!(
            writes_sent(&mut out),
            vec![(Peer::Node(3), tag(5, 3), 1, false)]
        );
    }

    #[test]
    fn a_lap_sent_again_past_a_server_that_applied_its_write_gets_a_write_round() {
        // 3 re-sends its lap of 2's pre-write; 1 had applied the write when
        // the first copy came by (fuzz seed 12681 at N = 5): that copy may
        // have died, so this one is answered with the write, round to 3.
        let mut n = node(1, true);
        let mut out = O::new();
        let e = entry(5, 2, "a");
        n.on_msg(T0, Peer::Node(3), Msg::Write(e.clone()), &mut out);
        n.on_msg(T0, Peer::Node(3), Msg::Lap(e.clone(), 9), &mut out);
        assert!(!pending(&n, tag(5, 2)), "its write passed here");
        let _ = sends(&mut out);
        n.on_msg(T0, Peer::Node(3), Msg::Lap(e, 9), &mut out);
        assert_eq!(
            writes_sent(&mut out),
            vec![(Peer::Node(2), tag(5, 2), 3, false)]
        );
    }

    #[test]
    fn a_taker_whose_own_lap_came_round_ends_the_pre_write_without_a_second_lap() {
        // 1 took 2's old life's pre-write over and lapped it; 2's new life
        // joined meanwhile, so the lap came back and went on to 2; 2 then
        // crashed again (fuzz seed 19442: a second lap of 1 was dropped as
        // a copy of the first by every server).
        let mut n = node(1, true);
        let mut out = O::new();
        let e = entry(5, 2, "a");
        n.on_msg(T0, Peer::Node(3), Msg::Lap(e.clone(), 1), &mut out);
        assert!(n.lapped.contains(&(key(), tag(5, 2))));
        assert_eq!(n.counters.laps, 0);
        n.reg(&key()).pending.insert(e.tag, e.clone());
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        assert_eq!(held(&n), tag(5, 2), "ended at once");
        assert_eq!(n.counters.laps, 0, "no second lap");
        assert!(
            !n.lapped.contains(&(key(), tag(5, 2))),
            "forgotten once ended"
        );
        let s = writes_sent(&mut out);
        assert!(s.contains(&(Peer::Node(3), tag(5, 2), 1, false)), "{s:?}");
        // Another server's lap back here proves nothing: this one laps.
        let mut m = node(1, true);
        let f = entry(6, 2, "b");
        m.on_msg(T0, Peer::Node(3), Msg::Lap(f.clone(), 3), &mut out);
        assert!(m.lapped.is_empty());
        m.reg(&key()).pending.insert(f.tag, f);
        m.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        assert_eq!((held(&m), m.counters.laps), (Tag::ZERO, 1));
    }
}
