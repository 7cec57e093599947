//! Rejoin (d): a restarted server's way back into the ring (module doc,
//! "Rejoin"): `Join` to the live predecessor, which answers `Welcome`
//! (view and state) and makes the joiner its successor; the joiner sends
//! `ViewChange` round the ring, then serves.

use super::msg::Snapshot;
use super::msg::{Msg, Timer};
use super::node::RingNode;
use crate::protocol::contract::Out;
use crate::types::{NodeId, Peer, Tag};
use bytes::Bytes;
use std::collections::BTreeSet;

type O = Out<Msg, Timer>;

impl RingNode {
    /// Outside: the first member before this one that the failure detector
    /// does not report down (its live predecessor once it is back in).
    fn join_target(&self) -> Option<NodeId> {
        let before = self.members.iter().rev().filter(|&&m| m < self.id);
        let wrap = self.members.iter().rev().filter(|&&m| m > self.id);
        before
            .chain(wrap)
            .find(|m| !self.link_down.contains(m))
            .copied()
    }

    /// Outside: send `Join` to the target whenever it changes (it crashed,
    /// or a server between it and this one came back). Copies are harmless.
    pub(super) fn ask_to_join(&mut self, out: &mut O) {
        if !self.outside || !self.cfg.rejoin {
            return;
        }
        let target = self.join_target();
        if target == self.join_sent_to {
            return;
        }
        self.join_sent_to = target;
        if let Some(t) = target {
            self.counters.joins_sent += 1;
            let (node, writer) = (self.id, self.writer);
            out.send(Peer::Node(t), Msg::Join { node, writer });
            // And the joins kept here: a server in the view must learn of
            // them to let anyone in (`blocked`), whatever crashed meanwhile.
            for &(node, writer) in &self.stash {
                out.send(Peer::Node(t), Msg::Join { node, writer });
            }
        }
    }

    /// A `Join` straight from `node`: its life `writer` runs now (a crash
    /// closes the old life's links, and what was in flight on them), so a
    /// different life of `node` that this view counts in crashed. A server
    /// outside when it crashed saw its `Down`, then the new life's `Up`,
    /// and may install a snapshot that still counts it in (seed 5 at
    /// N = 5: the new life's `Join` was dropped as a copy for ever, and
    /// the joins held behind it stalled the ring). A forwarded `Join` may
    /// be a stale one of an older life: it proves nothing.
    pub(super) fn join_from_life(&mut self, node: NodeId, writer: u64, out: &mut O) {
        let other_life = self.lives.get(&node) != Some(&writer);
        if !self.outside && node != self.id && self.alive.contains(&node) && other_life {
            self.on_crash(node, out);
        }
    }

    /// A `Join` from `node` (life `writer`), direct or forwarded.
    pub(super) fn on_join(&mut self, node: NodeId, writer: u64, out: &mut O) {
        if node == self.id {
            return; // its own, passed round by servers outside
        }
        if self.outside {
            // Handled once this server is in: it precedes `node` then.
            // Passed on once towards the ring meanwhile, so that a server
            // in the view learns `node` is joining (and lets others in).
            if !self.stash.contains(&(node, writer)) {
                self.stash.push((node, writer));
                if let Some(t) = self.join_target() {
                    out.send(Peer::Node(t), Msg::Join { node, writer });
                }
            }
            // (`ask_to_join` passes them on again on its timer.)
            return;
        }
        let down = self.link_down.contains(&node) || self.dead_lives.contains(&writer);
        if !down && self.lives.get(&node) == Some(&writer) {
            // This very life is in the view but still asks: its `Welcome`
            // died with the welcomer (seed 66 at N = 5: every other server
            // counted it in, dropped its `Join` as a copy, and the ring
            // stalled behind it). Its live predecessor welcomes it again.
            let pred = self.live_pred(node);
            if pred != self.id {
                self.counters.joins_forwarded += 1;
                return out.send(Peer::Node(pred), Msg::Join { node, writer });
            }
            if self.welcomed_again.insert(writer) {
                self.welcome_again(node, out);
            }
            return;
        }
        if self.alive.contains(&node) || node == self.id || down {
            // Joined already (a copy; an old life's `Down` comes before
            // its new life's `Join`), or crashed since (a kept `Join`).
            self.counters.duplicates += 1;
            return;
        }
        self.joining.insert(node, writer);
        let pred = self.live_pred(node);
        if pred != self.id {
            self.counters.joins_forwarded += 1;
            return out.send(Peer::Node(pred), Msg::Join { node, writer });
        }
        if self.blocked(node) {
            if !self.held.contains(&(node, writer)) {
                self.held.push((node, writer));
                // Tell the view: a server holding a join because of this
                // one's joiner must not wait for ever (two joins held at
                // two servers, each for the other's joiner). Each passes
                // it back here, where it is held already.
                // Once per life: retries re-hold it, and a notice each
                // time would multiply (a runaway at seed 129, N = 5).
                let first = self.told_held.insert(writer);
                for &m in self.alive.iter().filter(|_| first) {
                    if m != self.id {
                        out.send(Peer::Node(m), Msg::Join { node, writer });
                    }
                }
            }
            return;
        }
        self.held.retain(|&(n, _)| n != node);
        self.accept(node, writer, out);
    }

    /// A join must wait while a peer the failure detector reports up is
    /// neither in this server's view nor joining here: that peer may be in
    /// (welcomed by another server, its `ViewChange` still on its way), and
    /// a snapshot without it lets the joiner in with a view that misses
    /// it; after one more crash the two think themselves alone: two rings
    /// (seeds 144 and 1763 at N = 3). The peer's `ViewChange`, `Join` or
    /// crash releases the join.
    fn blocked(&self, node: NodeId) -> bool {
        self.members.iter().any(|&m| {
            m != self.id
                && m != node
                && !self.alive.contains(&m)
                && !self.link_down.contains(&m)
                && !self.joining.contains_key(&m)
        })
    }

    /// With rejoin on, a peer the failure detector reports up but that is
    /// not in the view may be in already (welcomed by a server that then
    /// crashed, its `ViewChange` on its way here): this server's successor
    /// may be wrong, and a round sent now could skip it and end without it
    /// (seed 554 at N = 3: a server that thought itself alone acknowledged
    /// a write the newcomer never saw, then the newcomer served a read). So
    /// no ring message leaves until the view is complete again.
    pub(super) fn uncertain(&self) -> bool {
        self.cfg.rejoin
            && self
                .members
                .iter()
                .any(|&m| m != self.id && !self.alive.contains(&m) && !self.link_down.contains(&m))
    }

    /// Try the held joins again (the view or the links changed).
    pub(super) fn retry_held(&mut self, out: &mut O) {
        if self.outside {
            return;
        }
        let (alive, down) = (&self.alive, &self.link_down);
        let dead = &self.dead_lives;
        self.joining
            .retain(|n, w| !alive.contains(n) && !down.contains(n) && !dead.contains(w));
        if self.held.is_empty() {
            return;
        }
        let held = self.held.clone();
        for (node, writer) in held {
            if !self.held.contains(&(node, writer)) {
                continue;
            }
            self.held.retain(|&h| h != (node, writer));
            self.on_join(node, writer, out);
        }
    }

    /// In one handler: a new view with `node` in it, `Welcome` to it, and
    /// it becomes the successor. The link to it is FIFO, so the snapshot
    /// arrives before every message sent to it later: between them, it sees
    /// all that went past this server, as if it had been here all along.
    fn accept(&mut self, node: NodeId, writer: u64, out: &mut O) {
        // Saturating: `view` is taken from peers' messages (`max`), and is
        // only shown and passed on, never compared for a decision.
        self.view = self.view.saturating_add(1);
        self.alive.insert(node);
        self.lives.insert(node, writer);
        self.counters.joins_accepted += 1;
        self.welcomes += 1;
        let snap = self.snapshot();
        self.welcomed_with(&snap);
        out.send(Peer::Node(node), Msg::Welcome(Box::new(snap)));
        // No re-send: the snapshot holds all of it, except the rounds that
        // end at `node` (`send_home`).
        self.view_changed(false, out);
        debug_assert_eq!(self.next, node);
        self.send_home(node);
    }

    /// Pre-writes pending here whose round ends at the joiner `node` (its
    /// old life's, whichever life made them): their only copy may have died
    /// with that old life. This server re-sent them past the crash, but its
    /// new successor held them pending already and dropped them as copies,
    /// and it did not take them over: its view missed a live member
    /// (`uncertain`) until `node` joined, and then `node` was their home
    /// again (seed 1137 at N = 3: three laps stayed pending everywhere with
    /// no copy left, and reads on their keys waited for ever). So they go
    /// to `node` after the snapshot, as pre-writes: back home there, each
    /// takes one more lap before it is applied (`lap.rs`). A copy that
    /// still comes is dropped at home (`lapping`, `taken`).
    fn send_home(&mut self, node: NodeId) {
        let back: Vec<Msg> = (self.regs.values())
            .flat_map(|r| r.pending.values())
            .filter(|e| e.home == node)
            .map(|e| Msg::PreWrite(e.clone()))
            .collect();
        // Laps of them this server made as `node`'s taker and has not sent
        // yet would now go straight to `node`, their end again, without
        // going round, and be applied there before the others hold them
        // (fuzz seed 23078 at N = 4: a read inversion). `node` laps them
        // itself from the pre-writes sent below.
        let me = self.writer;
        let queued_lap = |m: &Msg| matches!(m, Msg::Lap(e, by) if *by == me && e.home == node);
        let dropped: Vec<(Bytes, Tag)> = (self.queues.ready.iter())
            .filter(|m| queued_lap(m))
            .filter_map(|m| m.entry().map(|e| (e.key.clone(), e.tag)))
            .collect();
        self.queues.ready.retain(|m| !queued_lap(m));
        for id in dropped {
            self.lapping.remove(&id);
        }
        self.counters.resent += back.len() as u64;
        self.queues.ready.extend(back);
    }

    /// `accept` for a successor that never got its `Welcome`: it dropped
    /// all sent to it meanwhile (outside), so count the link from zero and
    /// re-send, after the snapshot, what a new successor gets (pc 86-91).
    fn welcome_again(&mut self, node: NodeId, out: &mut O) {
        debug_assert_eq!(self.next, node);
        self.view = self.view.saturating_add(1);
        self.counters.joins_accepted += 1;
        self.welcomes += 1;
        let snap = self.snapshot();
        self.welcomed_with(&snap);
        out.send(Peer::Node(node), Msg::Welcome(Box::new(snap)));
        self.link.fresh();
        self.resend();
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let regs = (self.regs.iter())
            .map(|(k, r)| (r.as_write(k), r.pending.values().cloned().collect()))
            .collect();
        Snapshot {
            view: self.view,
            alive: self.alive.iter().copied().collect(),
            lives: self.lives.iter().map(|(&n, &w)| (n, w)).collect(),
            regs,
            ops: self.ops.iter().copied().collect(),
            op_writes: (self.ops.iter())
                .filter_map(|&op| self.ops.write_of(op).map(|(k, t)| (op, k.clone(), t)))
                .collect(),
            written: self.written.iter().cloned().collect(),
            live_written: self.live_writes.iter().cloned().collect(),
            owed: (self.queues.ready.iter())
                .filter_map(|m| match m {
                    Msg::PreWrite(e) => Some((e.key.clone(), e.tag)),
                    _ => None,
                })
                .chain(self.owed.iter().cloned()) // owed to this one in turn
                .collect(),
            sent_writes: self.sent_writes.iter().cloned().collect(),
            laps: (self.laps.iter().chain(&self.lap_hints))
                .map(|((k, t), &by)| (k.clone(), *t, by))
                .chain(
                    self.lapping
                        .iter()
                        .map(|(k, t)| (k.clone(), *t, self.writer)),
                )
                .collect(),
            owed_writes: (self.queues.ready.iter())
                .filter_map(|m| match m {
                    Msg::Write(e) => Some(e.clone()),
                    _ => None,
                })
                .chain(self.owed_writes.iter().cloned())
                .collect(),
            reform: false,
            welcomed_pending: self.welcomed_pending.iter().cloned().collect(),
        }
    }

    /// A snapshot's registers, operations and writes over this server's
    /// own (restored from disk), taken out of it.
    fn install_writes(&mut self, s: &mut Snapshot, out: &mut O) {
        for (held, pending) in std::mem::take(&mut s.regs) {
            // The higher tag wins, a newer one is persisted before serving.
            self.install_register(held, pending, out);
        }
        let (ops, op_writes) = (std::mem::take(&mut s.ops), std::mem::take(&mut s.op_writes));
        self.applied_ops(ops, op_writes, out);
        for (k, t) in std::mem::take(&mut s.written) {
            self.written.insert(&k, t);
        }
        for (k, t) in std::mem::take(&mut s.live_written) {
            self.live_writes.insert(&k, t);
        }
    }

    /// The predecessor's `Welcome`: install its view and state, announce
    /// the new view to the successor first, then serve.
    pub(super) fn on_welcome(&mut self, from: NodeId, mut s: Snapshot, out: &mut O) {
        if !self.outside {
            self.counters.duplicates += 1;
            return;
        }
        self.outside = false;
        self.join_sent_to = None;
        self.view = s.view;
        self.alive = std::mem::take(&mut s.alive).into_iter().collect();
        self.lives = std::mem::take(&mut s.lives).into_iter().collect();
        debug_assert!(self.alive.contains(&self.id) && self.alive.contains(&from));
        self.install_writes(&mut s, out);
        // Every pending entry of the snapshot is owed: it went past this
        // position but not through this server, so a copy that comes must
        // be passed on once (a copy that may be all that is left of it).
        let coming: BTreeSet<(Bytes, Tag)> = s.owed.iter().cloned().collect();
        self.owed = s.owed.into_iter().collect();
        for (k, r) in &self.regs {
            self.owed.extend(r.pending.keys().map(|t| (k.clone(), *t)));
        }
        self.sent_writes = s.sent_writes.into();
        self.lap_hints = (s.laps.into_iter())
            .map(|(k, t, by)| ((k, t), by))
            .collect();
        self.owed_writes = s.owed_writes;
        // A joiner the predecessor welcomed with these pending sits after
        // this server now: a round of theirs that ends here (this is its
        // home, or takes it over) must go once more round to reach it
        // (durable fuzz seeds 86 at N = 4 and 9165 at N = 5: the write
        // ended at the home's new life, welcomed in between).
        self.welcomed_pending.extend(s.welcomed_pending);
        self.counters.rejoined += 1;
        self.announcing = true;
        self.welcomed_by = Some(from);
        self.next = self.successor();
        self.link.fresh();
        self.pred = self.live_pred(self.id);
        self.pass_on_snapshot(&coming, out);
        if s.reform {
            self.reformed(out);
        } else if self.next != self.id {
            let (view, node, writer) = (self.view, self.id, self.writer);
            out.send(
                Peer::Node(self.next),
                Msg::ViewChange { view, node, writer },
            );
        } else {
            self.announcing = false; // alone: nobody to tell
        }
        // Servers the predecessor still counted in but this one saw go.
        let gone: Vec<NodeId> = (self.alive.intersection(&self.link_down))
            .copied()
            .collect();
        for j in gone {
            self.on_crash(j, out);
        }
        // A life that crashed while this one was outside, and came back up
        // since (its `Down` no longer shows): seed 22 at N = 5 kept it in
        // the view for ever and dropped its new life's `Join` as a copy.
        for (j, life) in std::mem::take(&mut self.stashed_gone) {
            if self.lives.get(&j).copied() == life {
                self.on_crash(j, out);
            }
        }
        for (view, node, writer) in std::mem::take(&mut self.stashed_views) {
            self.on_view_change(view, node, writer, out);
        }
        for (node, writer) in std::mem::take(&mut self.stash) {
            self.on_join(node, writer, out);
        }
    }

    /// Just welcomed: pass on at once the pre-writes the snapshot holds
    /// pending that the predecessor will not send again (not queued
    /// there, `coming`), unless their round ends here. This place may be
    /// behind them and their write both, and the server that knew, the
    /// welcomer, may crash before it acts on it (`write_again`): a copy
    /// that reaches a server that applied the write comes back as the
    /// write (`write_round_for`), and one still pending on the way goes
    /// on. Durable fuzz seeds 15077 at N = 7 (a welcomer crashed, and
    /// the write ended at the home's new life just before two joiners)
    /// and 35067, 35419.
    fn pass_on_snapshot(&mut self, coming: &BTreeSet<(Bytes, Tag)>, out: &mut O) {
        let pass: Vec<(Bytes, Tag)> = (self.regs.iter())
            .flat_map(|(k, r)| r.pending.values().map(move |e| (k, e)))
            .filter(|(_, e)| !e.void && !self.ends_here(e.home))
            .map(|(k, e)| (k.clone(), e.tag))
            .filter(|id| !coming.contains(id) && self.owed.contains(id))
            .collect();
        for id in &pass {
            self.owed.remove(id);
        }
        self.pass_on(pass, out);
    }

    /// In the view, with a member `m` the failure detector reports up but
    /// the view misses (`uncertain`): hail `m` straight. `m` may be in
    /// already, welcomed by a server whose `ViewChange` for it died in a
    /// crash, or it let this server in without knowing it (a `Join` that
    /// passed a server leaves `m` in its `joining` though `m` was welcomed
    /// since, and `blocked` lets it welcome another). Neither then sends a
    /// ring message (`uncertain`), and nothing else would ever tell them
    /// (seed 1236 at N = 3: two servers, each alone in its view, each
    /// waiting for the other, for ever). `m`, if in, counts this server in
    /// and answers with its own `Hail`: both views gain the other. Once per
    /// member while the view misses it, and again on the `Join` timer (a
    /// hail dies with a crash). A server outside keeps it as a view change.
    pub(super) fn hail(&mut self, out: &mut O) {
        if self.outside || !self.cfg.rejoin {
            return;
        }
        let (alive, down) = (&self.alive, &self.link_down);
        self.hailed
            .retain(|m| !alive.contains(m) && !down.contains(m));
        let missing: Vec<NodeId> = (self.members.iter().copied())
            .filter(|&m| m != self.id && !alive.contains(&m) && !down.contains(&m))
            .filter(|m| !self.hailed.contains(m))
            .collect();
        for m in missing {
            self.hailed.insert(m);
            self.counters.hails += 1;
            let (node, writer, answer) = (self.id, self.writer, true);
            out.send(
                Peer::Node(m),
                Msg::Hail {
                    node,
                    writer,
                    answer,
                },
            );
            out.set_timer(self.cfg.join_retry, Timer::Join);
        }
    }

    /// A ring message from `j`, not in the view. With rejoin on, a server
    /// the failure detector reports up that sends ring messages is in
    /// (servers outside send none), and this view misses it: it was
    /// removed on a `Gone` for an old life of it, say, and its new life's
    /// `ViewChange` died in a crash. Dropped, the messages were lost on a
    /// live link, and the sender's credit window never opened again (seed
    /// 1856 at N = 3: the ring stopped for good). So they wait here until
    /// `j` is in (a `Hail` or `ViewChange` brings it; `hail` asks) and are
    /// handled then, in order; they die if `j` is reported down.
    pub(super) fn fence(&mut self, j: NodeId, msg: Msg, out: &mut O) {
        let ring = msg.entry().is_some();
        if ring && self.cfg.rejoin && !self.link_down.contains(&j) {
            self.fenced_msgs.push((j, msg));
        } else {
            if ring {
                self.receipt(j, out); // counted all the same (`Link`)
            }
            self.counters.fenced += 1;
        }
    }

    /// Handle the ring messages kept by `fence` whose sender is in now.
    pub(super) fn unfence(&mut self, out: &mut O) {
        if self.fenced_msgs.is_empty() || self.outside {
            return;
        }
        let (alive, down) = (&self.alive, &self.link_down);
        let before = self.fenced_msgs.len();
        self.fenced_msgs.retain(|(j, _)| !down.contains(j));
        self.counters.fenced += (before - self.fenced_msgs.len()) as u64;
        if !self.fenced_msgs.iter().any(|(j, _)| alive.contains(j)) {
            return;
        }
        let (now, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.fenced_msgs)
            .into_iter()
            .partition(|(j, _)| self.alive.contains(j));
        self.fenced_msgs = keep;
        for (j, m) in now {
            self.on_ring_msg(j, m, out);
        }
    }

    /// A `Hail` straight from `node` (life `writer`, in the view there).
    pub(super) fn on_hail(&mut self, node: NodeId, writer: u64, answer: bool, out: &mut O) {
        if self.outside {
            // Dropped: the snapshot will say whether `node` is in, and the
            // hailer hails again while its view misses this server. Kept as
            // a view change, it went round as a `ViewChange` of a first
            // life, brought back by servers that never knew it crashed
            // (fuzz seed 279).
            self.counters.fenced += 1;
            return;
        }
        // This life runs: another life of `node` in the view crashed. (A
        // server's first life is in no `lives`: nothing to compare.)
        if self.lives.get(&node).is_some_and(|&w| w != writer) {
            self.join_from_life(node, writer, out);
        }
        if self.link_down.contains(&node) || self.dead_lives.contains(&writer) {
            return;
        }
        if answer {
            // First: `node` fences ring messages from outside its view.
            let (node_, writer_) = (self.id, self.writer);
            let m = Msg::Hail {
                node: node_,
                writer: writer_,
                answer: false,
            };
            out.send(Peer::Node(node), m);
        }
        if !self.alive.contains(&node) {
            // Into the view, not into `lives`: a first life (never joined)
            // is in no `lives`, and one put there would be re-announced by
            // `ViewChange`s after it crashed, to servers that never knew
            // it and so cannot tell it is dead (fuzz seed 279: a server
            // put the crashed first life back into its view).
            self.counters.views_installed += 1;
            self.alive.insert(node);
            self.view_changed(true, out);
        }
    }

    /// `node` (life `writer`) joined: add it unless the failure detector
    /// reports it down again, and pass the news on, round to `node`
    /// itself, which then serves: every live server knows it (a server
    /// that did not could think itself alone and end a write without it).
    pub(super) fn on_view_change(&mut self, view: u64, node: NodeId, writer: u64, out: &mut O) {
        if self.outside {
            self.stashed_views.push((view, node, writer));
            return;
        }
        self.view = self.view.max(view);
        if node == self.id {
            // Back round: every live server knows this one now.
            self.announcing &= writer != self.writer;
            return;
        }
        if self.link_down.contains(&node) || self.dead_lives.contains(&writer) {
            return;
        }
        // Into `lives` even when a `Hail` put it in the view first: a new
        // successor gets the view changes of every life here, and this may
        // be the last copy of the joiner's own (fuzz seed 286 at N = 6: the
        // server after this one crashed with it, and the joiner waited for
        // it for ever, "announcing").
        self.lives.insert(node, writer);
        if !self.alive.contains(&node) {
            self.counters.views_installed += 1;
            self.alive.insert(node);
            self.view_changed(true, out);
        }
        if self.next != self.id {
            let view = self.view;
            out.send(
                Peer::Node(self.next),
                Msg::ViewChange { view, node, writer },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::{LinkEvent, Protocol};
    use crate::protocol::ring::testing::{rejoining, sends, T0};

    #[test]
    fn a_hail_answered_adds_the_member_and_releases_its_messages_kept_meanwhile() {
        // Seed 1236 / 1856 at N = 3: 2 dropped 1 from its view (a `Gone`)
        // while 1, in, kept sending it ring messages.
        let mut n = rejoining(2, 3);
        let mut out = O::new();
        n.on_msg(
            T0,
            Peer::Node(3),
            Msg::Gone {
                node: 1,
                life: None,
            },
            &mut out,
        );
        assert!(!n.alive.contains(&1) && n.uncertain());
        let hail = |node, writer, answer| Msg::Hail {
            node,
            writer,
            answer,
        };
        let s = sends(&mut out);
        assert!(s.contains(&(Peer::Node(1), hail(2, 2, true))), "{s:?}");
        assert_eq!(n.counters.hails, 1);
        // Once per member while it is missed; again on the timer.
        n.on_msg(T0, Peer::Node(3), Msg::Credit { received: 0 }, &mut out);
        assert!(!sends(&mut out)
            .iter()
            .any(|(_, m)| matches!(m, Msg::Hail { .. })));
        n.on_timer(T0, Timer::Join, &mut out);
        assert_eq!(sends(&mut out), vec![(Peer::Node(1), hail(2, 2, true))]);
        // 1's pre-write waits; a hail from someone else's name is ignored.
        let pw = crate::protocol::ring::testing::entry(4, 1, "a");
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(pw.clone()), &mut out);
        n.on_msg(T0, Peer::Node(3), hail(1, 1, false), &mut out);
        assert_eq!(n.fenced_msgs.len(), 1);
        assert!(!n.alive.contains(&1));
        // 1's answer: in the view again, and its pre-write is handled.
        n.on_msg(T0, Peer::Node(1), hail(1, 1, false), &mut out);
        assert!(n.alive.contains(&1) && n.fenced_msgs.is_empty());
        assert!(n.register(b"k").unwrap().pending.contains_key(&pw.tag));
        let s = sends(&mut out);
        assert!(
            s.iter()
                .any(|(to, m)| *to == Peer::Node(3) && *m == Msg::PreWrite(pw.clone())),
            "{s:?}"
        );
        assert!(!s.iter().any(|(to, _)| *to == Peer::Node(1)), "no answer");
    }

    #[test]
    fn a_hail_is_answered_before_the_hailer_is_counted_in() {
        let mut n = rejoining(1, 3);
        let mut out = O::new();
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        out.drain().for_each(drop);
        let hail = Msg::Hail {
            node: 2,
            writer: 9,
            answer: true,
        };
        n.on_msg(T0, Peer::Node(2), hail, &mut out);
        let s = sends(&mut out);
        let first = Msg::Hail {
            node: 1,
            writer: 1,
            answer: false,
        };
        assert_eq!(s.first(), Some(&(Peer::Node(2), first)), "{s:?}");
        assert!(n.alive.contains(&2) && !n.lives.contains_key(&2));
        assert_eq!((n.successor_id(), n.counters.views_installed), (2, 1));
        // A hail of a life seen crashing is dropped; outside, it is kept.
        n.dead_lives.insert(5);
        let mut m = rejoining(1, 3);
        m.dead_lives.insert(5);
        m.on_msg(
            T0,
            Peer::Node(3),
            Msg::Gone {
                node: 3,
                life: None,
            },
            &mut out,
        );
        out.drain().for_each(drop);
        let old = Msg::Hail {
            node: 3,
            writer: 5,
            answer: true,
        };
        m.on_msg(T0, Peer::Node(3), old.clone(), &mut out);
        assert!(!m.alive.contains(&3) && sends(&mut out).is_empty());
        let mut outside = rejoining(1, 3).restarted();
        outside.on_msg(T0, Peer::Node(3), old, &mut out);
        assert!(outside.stashed_views.is_empty() && sends(&mut out).is_empty());
        assert_eq!(outside.counters.fenced, 1);
    }

    #[test]
    fn a_welcome_sends_the_joiner_the_rounds_that_end_at_it() {
        // Seed 1137 at N = 3: 1 holds 2's old life's pre-write pending,
        // its only copy died with that life; 2's new life joins through 1.
        let mut n = rejoining(1, 3);
        let mut out = O::new();
        let mut e = crate::protocol::ring::testing::entry(4, 2, "a");
        e.home = 2;
        n.on_msg(T0, Peer::Node(3), Msg::PreWrite(e.clone()), &mut out);
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        out.drain().for_each(drop);
        n.on_msg(
            T0,
            Peer::Node(2),
            Msg::Join { node: 2, writer: 7 },
            &mut out,
        );
        let s = sends(&mut out);
        let welcome = s.iter().position(|(_, m)| matches!(m, Msg::Welcome(_)));
        let home = s
            .iter()
            .position(|(to, m)| *to == Peer::Node(2) && *m == Msg::PreWrite(e.clone()));
        assert!(welcome.is_some() && home > welcome, "{s:?}");
    }

    #[test]
    fn a_join_straight_from_a_new_life_ends_the_life_in_the_view() {
        // Seed 5 at N = 5: 3 counts 1's old life in, never having seen it
        // crash. A forwarded `Join` of another life may be a stale one of
        // an older life: dropped as a copy. One from 1 itself proves that
        // life runs: the old one crashed, and the new one is let in.
        let mut n = rejoining(3, 3);
        let mut out = O::new();
        let join = Msg::Join { node: 1, writer: 7 };
        n.on_msg(T0, Peer::Node(2), join.clone(), &mut out);
        assert!(n.alive.contains(&1) && n.counters.duplicates == 1);
        assert!(sends(&mut out).is_empty());
        n.on_msg(T0, Peer::Node(1), join, &mut out);
        assert_eq!(n.counters.crashes_seen, 1);
        assert_eq!(n.lives.get(&1), Some(&7));
        assert!(n.alive.contains(&1) && n.successor_id() == 1);
        let s = sends(&mut out);
        assert!(
            s.iter()
                .any(|(to, m)| *to == Peer::Node(1) && matches!(m, Msg::Welcome(_))),
            "{s:?}"
        );
        // The same life asking again is not taken for a crash.
        n.on_msg(
            T0,
            Peer::Node(1),
            Msg::Join { node: 1, writer: 7 },
            &mut out,
        );
        assert_eq!(n.counters.crashes_seen, 1);
    }
}
