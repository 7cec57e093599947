//! Rejoin (d): a restarted server's way back into the ring (module doc,
//! "Rejoin"): `Join` to the live predecessor, which answers `Welcome`
//! (view and state) and makes the joiner its successor; the joiner sends
//! `ViewChange` round the ring, then serves.

use super::msg::Snapshot;
use super::node::RingNode;
use super::register::Register;
use super::{Msg, Timer};
use crate::protocol::Out;
use crate::types::{NodeId, Peer};

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
        }
    }

    /// A `Join` from `node` (life `writer`), direct or forwarded.
    pub(super) fn on_join(&mut self, node: NodeId, writer: u64, out: &mut O) {
        if self.outside {
            // Handled once this server is in: it precedes `node` then.
            if !self.stash.contains(&(node, writer)) {
                self.stash.push((node, writer));
            }
            return;
        }
        let down = self.link_down.contains(&node) || self.dead_lives.contains(&writer);
        if self.alive.contains(&node) || node == self.id || down {
            // Joined already (a copy; an old life's `Down` comes before
            // its new life's `Join`), or crashed since (a kept `Join`).
            self.counters.duplicates += 1;
            return;
        }
        let pred = self.live_pred(node);
        if pred != self.id {
            self.counters.joins_forwarded += 1;
            return out.send(Peer::Node(pred), Msg::Join { node, writer });
        }
        self.accept(node, writer, out);
    }

    /// In one handler: a new view with `node` in it, `Welcome` to it, and
    /// it becomes the successor. The link to it is FIFO, so the snapshot
    /// arrives before every message sent to it later: between them, it sees
    /// all that went past this server, as if it had been here all along.
    fn accept(&mut self, node: NodeId, writer: u64, out: &mut O) {
        self.view += 1;
        self.alive.insert(node);
        self.lives.insert(node, writer);
        self.counters.joins_accepted += 1;
        let snap = self.snapshot();
        out.send(Peer::Node(node), Msg::Welcome(Box::new(snap)));
        // No re-send: the snapshot holds all of it.
        self.view_changed(false, out);
        debug_assert_eq!(self.next, node);
    }

    fn snapshot(&self) -> Snapshot {
        let regs = (self.regs.iter())
            .map(|(k, r)| (r.as_write(k), r.pending.values().cloned().collect()))
            .collect();
        Snapshot {
            view: self.view,
            alive: self.alive.iter().copied().collect(),
            lives: self.lives.iter().map(|(&n, &w)| (n, w)).collect(),
            regs,
            ops: self.ops.iter().copied().collect(),
            written: self.written.iter().cloned().collect(),
            owed: (self.queues.ready.iter())
                .filter_map(|m| match m {
                    Msg::PreWrite(e) => Some((e.key.clone(), e.tag)),
                    _ => None,
                })
                .chain(self.owed.iter().cloned()) // owed to this one in turn
                .collect(),
            sent_writes: self.sent_writes.iter().cloned().collect(),
            owed_writes: (self.queues.ready.iter())
                .filter_map(|m| match m {
                    Msg::Write(e) => Some(e.clone()),
                    _ => None,
                })
                .chain(self.owed_writes.iter().cloned())
                .collect(),
        }
    }

    /// The predecessor's `Welcome`: install its view and state, announce
    /// the new view to the successor first, then serve.
    pub(super) fn on_welcome(&mut self, from: NodeId, s: Snapshot, out: &mut O) {
        if !self.outside {
            self.counters.duplicates += 1;
            return;
        }
        self.outside = false;
        self.join_sent_to = None;
        self.view = s.view;
        self.alive = s.alive.into_iter().collect();
        self.lives = s.lives.into_iter().collect();
        debug_assert!(self.alive.contains(&self.id) && self.alive.contains(&from));
        for (held, pending) in s.regs {
            self.regs
                .insert(held.key.clone(), Register::from_snapshot(&held, pending));
        }
        for op in s.ops {
            self.ops.on_write(op);
        }
        for (k, t) in s.written {
            self.written.insert(&k, t);
        }
        // Every pending entry of the snapshot is owed: it went past this
        // position but not through this server, so a copy that comes must
        // be passed on once (a copy that may be all that is left of it).
        self.owed = s.owed.into_iter().collect();
        for (k, r) in &self.regs {
            self.owed.extend(r.pending.keys().map(|t| (k.clone(), *t)));
        }
        self.sent_writes = s.sent_writes.into();
        self.owed_writes = s.owed_writes;
        self.counters.rejoined += 1;
        self.announcing = true;
        self.welcomed_by = Some(from);
        self.next = self.successor();
        self.pred = self.live_pred(self.id);
        if self.next != self.id {
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
        for (view, node, writer) in std::mem::take(&mut self.stashed_views) {
            self.on_view_change(view, node, writer, out);
        }
        for (node, writer) in std::mem::take(&mut self.stash) {
            self.on_join(node, writer, out);
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
        if !self.alive.contains(&node) {
            self.counters.views_installed += 1;
            self.alive.insert(node);
            self.lives.insert(node, writer);
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
