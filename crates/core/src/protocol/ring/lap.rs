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

use super::node::{Phase, RingNode};
use super::{Entry, Msg, Timer};
use crate::protocol::Out;
use crate::types::NodeId;

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
        self.queues.ready.push_back(Msg::Lap(e, self.id));
    }

    /// Whether a joiner may have missed `e` (see the module doc).
    fn needs_lap(&self, e: &Entry) -> bool {
        if !self.cfg.rejoin || e.void {
            return false;
        }
        let id = (e.key.clone(), e.tag);
        if self.is_mine(e) {
            self.own.get(&id) == Some(&Phase::PreWrite)
                && self.began.get(&id).is_none_or(|&w| w < self.welcomes)
        } else {
            !self.taken.contains(&id)
        }
    }

    /// A lap from the predecessor: hold it pending and pass it on, or, at
    /// its home, end the pre-write round.
    /// A lap is named by the server that sent it: if that one crashes, the
    /// next taker of the home sends its own, which must pass where the
    /// first one did (seed 55 of the fuzz test). A lap sent from here as
    /// home, which this server is no longer (a new life of the crashed
    /// origin joined since, seed 1099 at N = 3), goes on to the new home.
    pub(super) fn on_lap(&mut self, e: Entry, by: NodeId, out: &mut O) {
        let id = (e.key.clone(), e.tag);
        self.lapping.remove(&id);
        if self.ends_here(e.home) {
            return self.pre_write_home(e, out);
        }
        if self.laps.insert(id, by) == Some(by) {
            self.counters.duplicates += 1; // a re-sent copy
            return;
        }
        if !self.written.contains(&e.key, e.tag) {
            self.reg(&e.key).pending.insert(e.tag, e.clone());
        }
        self.queues.push_forward(Msg::Lap(e, by));
    }

    /// A pending pre-write as re-sent to a new successor: on its lap if
    /// it is on one.
    pub(super) fn phase_one(&self, e: &Entry) -> Msg {
        let id = (e.key.clone(), e.tag);
        if let Some(&by) = self.laps.get(&id).or(self.lap_hints.get(&id)) {
            Msg::Lap(e.clone(), by)
        } else if self.lapping.contains(&id) {
            Msg::Lap(e.clone(), self.id)
        } else {
            Msg::PreWrite(e.clone())
        }
    }
}
