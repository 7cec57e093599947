//! The follower's side: F1/F2 of discovery and synchronisation (accept the
//! new epoch, log the leader's history, truncating a divergent suffix) and
//! of broadcast (log, ACK, deliver on COMMIT), seed 003 lines 637-668;
//! gaps in the leader's FIFO stream and silence send it back to election.

use super::bugs::InjectedBug;
use super::msg::{LogEntry, Msg, SyncData};
use super::node::{Role, ZabNode, O};
use super::roles::{FStage, Following};
use super::state_machine::{decode_snapshot, Payload, StateMachine};
use crate::protocol::contract::Record;
use crate::types::{NodeId, Peer};

impl ZabNode {
    /// The leader we follow, if `from` is it: note we heard from it.
    fn heard_leader(&mut self, from: NodeId) -> Option<&mut Following> {
        let now = self.now;
        match &mut self.role {
            Role::Following(f) if f.leader == from => {
                f.heard = now;
                Some(f)
            }
            _ => None,
        }
    }

    pub(super) fn send_follower_info(&self, out: &mut O) {
        if let Role::Following(f) = &self.role {
            let msg = Msg::FollowerInfo {
                accepted: self.accepted.0,
                promised: self.accepted.1,
                recovering: self.recovering,
            };
            out.send(Peer::Node(f.leader), msg);
        }
    }

    pub(super) fn on_new_epoch(&mut self, from: NodeId, epoch: u64, out: &mut O) {
        let ok = self.accepts_epoch(from, epoch);
        let Some(f) = self.heard_leader(from) else {
            return;
        };
        if f.stage == FStage::Epoch && f.epoch == epoch {
            // A repeat (our FOLLOWERINFO went twice): answer again.
            return self.send_ack_epoch(from, epoch, out);
        }
        if f.stage != FStage::Info {
            return;
        }
        if !ok {
            return self.look(out);
        }
        f.stage = FStage::Epoch;
        f.epoch = epoch;
        self.persist_accepted(epoch, from, out);
        self.send_ack_epoch(from, epoch, out);
    }

    /// Promise each epoch to one leader only (ACKEPOCH at most once); a
    /// recovering server's `accepted` is its learned floor.
    pub(super) fn accepts_epoch(&self, from: NodeId, epoch: u64) -> bool {
        let (e, to) = self.accepted;
        let reuse = self.has_bug(InjectedBug::ReuseEpoch);
        epoch > e || (epoch == e && (to == from || reuse))
    }

    fn send_ack_epoch(&self, to: NodeId, epoch: u64, out: &mut O) {
        let msg = Msg::AckEpoch {
            epoch,
            cur_epoch: self.current_epoch,
            summary: self.log.summary(),
            recovering: self.recovering,
        };
        out.send(Peer::Node(to), msg);
    }

    pub(super) fn on_new_leader(&mut self, from: NodeId, epoch: u64, sync: SyncData, out: &mut O) {
        let Some(f) = self.heard_leader(from) else {
            return;
        };
        if f.stage != FStage::Epoch || f.epoch != epoch {
            return;
        }
        f.stage = FStage::Synced;
        // What the driver reports durable from before may be truncated now.
        self.log_gen += 1;
        (self.logged, self.log_asked) = (0, 0);
        self.apply_sync(sync, out);
        if self.has_bug(InjectedBug::ZnodeSeqReuse) {
            self.sm.tree.restart_seq_counters();
        }
        self.persist_current(epoch, out);
        self.recovering = false;
        let last = self.log.last();
        out.send(Peer::Node(from), Msg::AckNewLeader { epoch, last });
    }

    /// Make our log the leader's history: SNAP, or TRUNC the divergent
    /// suffix, then DIFF (F2 of synchronisation).
    fn apply_sync(&mut self, sync: SyncData, out: &mut O) {
        if let Some(t) = sync.trunc {
            self.release_dead_writes(t);
        }
        if let Some((index, data)) = sync.snap {
            if let Some((runs, state, members)) = decode_snapshot(&data) {
                self.invariant(index >= self.applied, "SNAP behind what we delivered");
                if self.sm.restore(&state).is_ok() {
                    self.answer_writes_in_snapshot(index, &runs, out);
                    self.log.install(index, runs, members);
                    self.applied = index;
                    self.commit = index;
                    out.persist(Record::Snapshot { index, data });
                    out.persist(Record::TruncateFrom { index: index + 1 });
                }
            }
        } else if let Some(t) = sync.trunc {
            self.invariant(t > self.applied, "TRUNC below what we delivered");
            if !self.has_bug(InjectedBug::SkipTrunc) && t <= self.log.last() {
                self.log.truncate_from(t);
                out.persist(Record::TruncateFrom { index: t });
            }
        }
        for LogEntry { index, epoch, data } in sync.entries {
            if index > self.log.base() && index <= self.log.last() + 1 {
                self.persist_entry(index, epoch, data, out);
            }
        }
    }

    /// Our clients' writes that we logged and the SNAP covers (same index,
    /// same epoch in its history: the same proposal, seed 003's zxid
    /// uniqueness) are committed and in the snapshot: answer them now,
    /// since they will never be delivered here one by one. Only writes whose
    /// answer does not depend on the state; others end at their deadline.
    fn answer_writes_in_snapshot(&mut self, index: u64, runs: &[(u64, u64)], out: &mut O) {
        let from = self.applied.max(self.log.base()) + 1;
        for i in from..=index.min(self.log.last()) {
            let theirs = (runs.iter().rev()).find(|&&(_, first)| first <= i);
            if theirs.map(|&(e, _)| e) != self.log.epoch_at(i) {
                continue;
            }
            let Some(p) = self.log.get(i).and_then(|d| Payload::from_bytes(d)) else {
                continue;
            };
            if p.origin != self.writer || !self.writes.contains_key(&p.rid) {
                continue;
            }
            if let Some(resp) = self.sm.blind_answer(&p.op) {
                let w = self.writes.remove(&p.rid).expect("checked");
                out.reply(w.client, resp);
            }
        }
    }

    /// Our entries from `from` on are not in the new leader's history:
    /// they are dead (a quorum promised the new epoch, so their own leader
    /// can never commit them, and every later history descends from this
    /// one). Our clients' writes among them may go again: sent once more,
    /// they are not applied twice.
    fn release_dead_writes(&mut self, from: u64) {
        for i in from.max(self.log.base() + 1)..=self.log.last() {
            let Some(p) = self.log.get(i).and_then(|d| Payload::from_bytes(d)) else {
                continue;
            };
            if p.origin != self.writer {
                continue;
            }
            if let Some(w) = self.writes.get_mut(&p.rid) {
                w.sent = None;
            }
        }
    }

    pub(super) fn on_proposal(&mut self, from: NodeId, epoch: u64, e: LogEntry, out: &mut O) {
        let last = self.log.last();
        let skip_trunc = self.has_bug(InjectedBug::SkipTrunc);
        let Some(f) = self.heard_leader(from) else {
            return;
        };
        if !matches!(f.stage, FStage::Synced | FStage::Serving) || f.epoch != epoch {
            return;
        }
        let index = e.index;
        if skip_trunc && index <= last {
            // The bug: "already logged" (the untruncated suffix), ACK it.
            out.send(Peer::Node(from), Msg::Ack { epoch, index });
            return;
        }
        // FIFO: proposals come in order, right after the history.
        if index != last + 1 {
            return self.look(out);
        }
        self.persist_entry(index, e.epoch, e.data, out);
        if self.has_bug(InjectedBug::AckBeforePersist) {
            // The bug: "logged" as soon as written, not once on disk.
            out.send_now(Peer::Node(from), Msg::Ack { epoch, index });
        }
        // ACK once durable (`Msg::Logged`); proposals logged while a sync
        // is in flight share the next one.
        self.when_logged(out);
    }

    pub(super) fn on_commit(&mut self, from: NodeId, epoch: u64, index: u64, out: &mut O) {
        let last = self.log.last();
        let Some(f) = self.heard_leader(from) else {
            return;
        };
        if !matches!(f.stage, FStage::Synced | FStage::Serving) || f.epoch != epoch {
            return;
        }
        if index > last {
            return self.look(out); // a proposal went missing
        }
        let first = f.stage == FStage::Synced;
        f.stage = FStage::Serving;
        self.commit = self.commit.max(index);
        self.deliver(out);
        if first {
            self.flush_waiting(out);
        }
    }

    pub(super) fn on_ping(
        &mut self,
        from: NodeId,
        epoch: u64,
        round: u64,
        commit: u64,
        last: u64,
        out: &mut O,
    ) {
        let my_last = self.log.last();
        let Some(f) = self.heard_leader(from) else {
            return;
        };
        if !matches!(f.stage, FStage::Synced | FStage::Serving) || f.epoch != epoch {
            return;
        }
        if last > my_last {
            return self.look(out); // a proposal went missing
        }
        if f.stage == FStage::Serving {
            self.commit = self.commit.max(commit);
            self.deliver(out);
        }
        // What we report logged is on disk: no need to wait for the
        // records written since.
        let msg = Msg::Pong {
            epoch,
            round,
            last: self.logged.min(my_last),
        };
        out.send_now(Peer::Node(from), msg);
    }

    /// Silence from the leader, or synchronisation taking too long: back
    /// to election. Until NEWEPOCH, FOLLOWERINFO goes again each tick.
    pub(super) fn follower_tick(&mut self, out: &mut O) {
        let (now, sync, init) = (self.now, self.cfg.sync_limit, self.cfg.init_limit);
        let Role::Following(f) = &self.role else {
            return;
        };
        let broadcasting = matches!(f.stage, FStage::Synced | FStage::Serving);
        let silent = broadcasting && now > f.heard.saturating_add(sync);
        let slow = f.stage != FStage::Serving && now > f.since.saturating_add(init);
        if silent || slow {
            return self.look(out);
        }
        if f.stage == FStage::Info {
            self.send_follower_info(out);
        }
    }
}
