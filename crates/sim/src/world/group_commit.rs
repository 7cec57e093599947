//! What a `Persist` costs in each durability mode, and the outputs that
//! wait for it.
//!
//! * `fsync`: group commit. A persist writes its record; at the end of the
//!   handler call, if no sync is in flight, one starts and covers every
//!   record written so far; it takes [`SYNC_US`] of virtual time. Records
//!   persisted while it runs join the next batch, which starts when it
//!   completes. A node's `Send` (to another), `Reply` and `Notify` wait,
//!   in order, until every record it persisted before them is synced — the
//!   node runtime's contract, by any earlier handler call too. Timers and
//!   sends to itself do not wait. A crash drops the held outputs (they
//!   never left) and the records not yet synced (nothing acknowledged them).
//!   `WhenDurable` waits the same way, then comes back to the node;
//!   `SendNow` and `ReplyNow` wait for no record, but a `SendNow` queues
//!   behind a held `Send` to the same peer (links stay FIFO).
//! * `buffered`: a persist writes its record and nothing waits; the page
//!   cache is flushed every [`FLUSH_US`]. A crash is a power cut: what
//!   followed the last flush is gone, acknowledged or not.
//! * `memory`: the record is kept until the next crash wipes it.
//!
//! The round engine (no crashes) keeps the plain rule: synced at once.

use super::{Ev, NodeCmd, NodeIx, World};
use crate::config::Durability;
use quorumkv_core::protocol::{Command, ProtocolDef, Record};
use quorumkv_core::{NodeId, Peer};
use std::collections::VecDeque;

/// How long one fsync takes, µs (drawn per sync).
pub const SYNC_US: (u64, u64) = (100, 500);
/// The page cache's flush period in `buffered` mode, µs.
pub const FLUSH_US: u64 = 5_000;

/// One node's persistence pipeline.
pub(super) struct Commit<D: ProtocolDef> {
    /// Records this node has persisted, over all its lives.
    written: u64,
    /// Of those, how many are synced, or were lost by a crash.
    settled: u64,
    /// The sync in flight settles the records up to this count.
    syncing: Option<u64>,
    /// Outputs waiting for the records up to their count to be synced.
    held: VecDeque<(u64, NodeCmd<D>)>,
    /// `buffered`: a flush is scheduled.
    flush_due: bool,
}

impl<D: ProtocolDef> Default for Commit<D> {
    fn default() -> Self {
        Commit {
            written: 0,
            settled: 0,
            syncing: None,
            held: VecDeque::new(),
            flush_due: false,
        }
    }
}

impl<D: ProtocolDef> Commit<D> {
    /// A crash: nothing is in flight any more.
    fn reset(&mut self) {
        self.settled = self.written;
        self.syncing = None;
        self.held.clear();
        self.flush_due = false;
    }
}

impl<D: ProtocolDef> World<'_, D> {
    /// Group commit and holds apply (not in the round engine).
    pub(super) fn group_commits(&self) -> bool {
        self.p.durability == Durability::Fsync && self.rounds.is_none()
    }

    /// Whether a restarted node of this seed finds its records: the mode
    /// keeps data and the protocol persists any. Only then may the nemesis
    /// take every node down (the `max_crashed` bound is for nodes that
    /// forget).
    pub(super) fn keeps_data(&self) -> bool {
        self.p.durability.keeps_data() && D::PERSISTS_STATE
    }

    /// Node `i` persists `rec`.
    pub(super) fn persist(&mut self, i: usize, rec: Record) {
        self.stats.persisted += 1;
        let slot = &mut self.nodes[i];
        slot.disk.write(rec);
        match self.p.durability {
            _ if self.rounds.is_some() => slot.disk.sync(),
            Durability::Memory => slot.disk.sync(),
            Durability::Fsync => slot.commit.written += 1,
            Durability::Buffered => {
                if !std::mem::replace(&mut slot.commit.flush_due, true) {
                    let incarnation = slot.incarnation;
                    let at = (self.now / FLUSH_US + 1) * FLUSH_US;
                    self.schedule(
                        at,
                        Ev::Flush {
                            node: i,
                            incarnation,
                        },
                    );
                }
            }
        }
    }

    /// Whether node `i` must hold `cmd` until earlier records are synced;
    /// if so it is queued.
    pub(super) fn hold(&mut self, i: usize, cmd: NodeCmd<D>) -> Option<NodeCmd<D>> {
        let me = Peer::Node(i as NodeId + 1);
        let output = match &cmd {
            Command::Send { to, .. } => *to != me,
            Command::Reply { .. } | Command::Notify { .. } | Command::WhenDurable(_) => true,
            _ => false,
        };
        let group = self.group_commits();
        let c = &mut self.nodes[i].commit;
        if let Command::SendNow { to, .. } = &cmd {
            // Waits for no record, only for a held send to the same peer
            // (FIFO links): then it leaves right behind it.
            let behind =
                |(_, h): &(u64, NodeCmd<D>)| matches!(h, Command::Send { to: t, .. } if t == to);
            if *to == me || !c.held.iter().any(behind) {
                return Some(cmd);
            }
            c.held.push_back((0, cmd));
            self.stats.held_outputs += 1;
            return None;
        }
        if !output || !group || c.written == c.settled {
            return Some(cmd);
        }
        c.held.push_back((c.written, cmd));
        self.stats.held_outputs += 1;
        None
    }

    /// After a handler call of node `i`: start a sync of what it wrote,
    /// unless one is in flight.
    pub(super) fn start_sync(&mut self, i: usize) {
        let c = &self.nodes[i].commit;
        if !self.group_commits() || c.syncing.is_some() || c.written == c.settled {
            return;
        }
        let (mark, batch) = (c.written, c.written - c.settled);
        self.nodes[i].commit.syncing = Some(mark);
        let took = self.disk_rng.range(SYNC_US.0, SYNC_US.1);
        trace!(self, "n{} SYNC {batch} records, {took}us", i + 1);
        let incarnation = self.nodes[i].incarnation;
        self.schedule(
            self.now + took,
            Ev::SyncDone {
                node: i,
                incarnation,
            },
        );
        if std::mem::take(&mut self.power_cut_armed) {
            let at = self.now + self.nemesis_rng.range(0, took);
            self.schedule(at, Ev::PowerCut);
        }
    }

    /// Node `i`'s sync completed: its records are durable, and the outputs
    /// that waited for them leave, in order. The next batch starts.
    pub(super) fn sync_done(&mut self, i: usize) {
        let c = &mut self.nodes[i].commit;
        let Some(mark) = c.syncing.take() else {
            return;
        };
        let batch = (mark - c.settled) as usize;
        c.settled = mark;
        self.nodes[i].disk.sync_first(batch);
        self.stats.syncs += 1;
        while let Some((need, _)) = self.nodes[i].commit.held.front() {
            if *need > mark {
                break;
            }
            let (_, cmd) = self.nodes[i].commit.held.pop_front().expect("a front");
            self.exec(NodeIx(i), cmd);
        }
        self.start_sync(i);
    }

    /// `buffered`: the page cache reaches the disk.
    pub(super) fn flush(&mut self, i: usize) {
        let slot = &mut self.nodes[i];
        slot.commit.flush_due = false;
        slot.disk.sync();
    }

    /// What a crash of node `i` leaves on its disk.
    pub(super) fn crash_disk(&mut self, i: usize) {
        let slot = &mut self.nodes[i];
        slot.commit.reset();
        if self.p.durability.keeps_data() {
            let lost = slot.disk.crash();
            self.stats.records_lost += lost as u64;
        } else {
            slot.disk.wipe();
        }
    }
}
