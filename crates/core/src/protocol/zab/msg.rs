//! Zab's messages, zxids, votes and timers.

use super::codec::Reader;
use super::state_machine::{Op, Payload};
use crate::types::NodeId;
use crate::znode::op::ZnodeOp;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A proposal's identity: `(epoch, counter)`, ordered by epoch then counter.
/// The counter is the proposal's position in the log (it does not restart
/// at each epoch, see the module doc); `(0, 0)` is the empty log.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Zxid {
    pub epoch: u64,
    pub counter: u64,
}

/// A fast-leader-election vote: `leader` with its current epoch and last
/// zxid. Votes compare by `(cur_epoch, last, leader)` (ZooKeeper's total
/// order predicate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    pub leader: NodeId,
    pub cur_epoch: u64,
    pub last: Zxid,
}

impl Vote {
    pub fn key(&self) -> (u64, Zxid, NodeId) {
        (self.cur_epoch, self.last, self.leader)
    }
}

/// What a server says it is doing, in its election notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerState {
    Looking,
    Following,
    Leading,
}

/// One log entry as it travels (proposal, synchronisation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub index: u64,
    pub epoch: u64,
    pub data: Bytes,
}

/// A log's shape for synchronisation: its snapshot index and, over
/// `[base, last]`, its runs of entries of one epoch `(epoch, first, last)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub base: u64,
    pub runs: Vec<(u64, u64, u64)>,
}

impl Summary {
    /// The zxid of the log's last entry.
    pub fn last(&self) -> Zxid {
        match self.runs.last() {
            Some(&(epoch, _, last)) => Zxid {
                epoch,
                counter: last,
            },
            None => Zxid::default(),
        }
    }
}

/// How a leader brings a follower's log to its own (ZooKeeper's DIFF,
/// TRUNC and SNAP): `snap` replaces the follower's state and log; else
/// `trunc` drops the follower's divergent suffix from that index; then
/// `entries` are appended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncData {
    pub snap: Option<(u64, Bytes)>,
    pub trunc: Option<u64>,
    pub entries: Vec<LogEntry>,
}

/// Server-to-server messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// FLE notification: my election round, my vote, my state, and the
    /// last epoch I led established under A1.1 (`broadcast.rs`, 0 if none).
    Notify {
        round: u64,
        vote: Option<Vote>,
        state: PeerState,
        recovering: bool,
        led: u64,
    },
    /// F → prospective leader: my accepted epoch (CEPOCH) and the leader
    /// I promised it to.
    FollowerInfo {
        accepted: u64,
        promised: NodeId,
        recovering: bool,
    },
    /// A server that lost its state (this `life` of it) asks for the
    /// epoch its peers promised (`recovery.rs`).
    Recover { life: u64 },
    /// The answer: my accepted epoch and the leader I promised it to.
    RecoverOk {
        life: u64,
        accepted: u64,
        promised: NodeId,
        recovering: bool,
    },
    /// L → F: the new epoch (NEWEPOCH).
    NewEpoch { epoch: u64 },
    /// F → L: epoch accepted; my current epoch and my log (ACKEPOCH).
    AckEpoch {
        epoch: u64,
        cur_epoch: u64,
        summary: Summary,
        recovering: bool,
    },
    /// L → F: the leader's history as a DIFF / TRUNC / SNAP (NEWLEADER).
    NewLeader { epoch: u64, sync: SyncData },
    /// F → L: history logged, current epoch set (ACKNEWLEADER).
    AckNewLeader { epoch: u64, last: u64 },
    /// L → F: log this entry (PROPOSAL).
    Proposal { epoch: u64, entry: LogEntry },
    /// F → L: logged everything up to `index` (ACK).
    Ack { epoch: u64, index: u64 },
    /// F → L, adaptive ct-q (`adaptive.rs`): an ACK the follower stamped
    /// with its own clock `at` (µs), to be echoed back (§5.2.1, d without
    /// synchronised clocks).
    AckAt { epoch: u64, index: u64, at: u64 },
    /// L → F, adaptive ct-q: a PROPOSAL carrying back the stamp `at` of
    /// the follower's last stamped ACK and how long the leader `held` it
    /// (µs, receipt to this proposal): the follower's d = (now − at −
    /// held) / 2.
    ProposalEcho {
        epoch: u64,
        entry: LogEntry,
        at: u64,
        held: u64,
    },
    /// F → F heartbeat (A3, line 1020): following this epoch's leader.
    Beat { epoch: u64 },
    /// To the server itself only (`Command::WhenDurable`): its log's entries
    /// up to `index` are on disk, unless the log lost entries since (`gen`
    /// moved: a synchronisation). Never sent to another server.
    Logged { index: u64, gen: u64 },
    /// L → F: everything up to `index` is committed (COMMIT, in order).
    Commit { epoch: u64, index: u64 },
    /// L → F heartbeat, also a read-index round.
    Ping {
        epoch: u64,
        round: u64,
        commit: u64,
        last: u64,
    },
    /// F → L: alive and following in `epoch`; logged up to `last`.
    Pong { epoch: u64, round: u64, last: u64 },
    /// F → L: a client's write (or, with `read=log`, read) to broadcast.
    Forward {
        epoch: u64,
        origin: u64,
        rid: u64,
        op: Bytes,
    },
    /// L → F: a forwarded request was not proposed (not in our broadcast).
    Dropped { rid: u64 },
    /// Protocol switching (seed 003 §3.6.2, §4.3.3), variants only: F → L
    /// a vote (`zab`: a follower is suspected), L → F the decision.
    Prot { epoch: u64, zab: bool },
    /// F → L: confirm leadership for a read (read index).
    ReadIndex { epoch: u64, rid: u64 },
    /// L → F: leadership confirmed; serve the read once applied `index`.
    ReadIndexOk { epoch: u64, rid: u64, index: u64 },
    /// F → L: these znode sessions were heard of here since the last
    /// tick (`sessions.rs`: the leader expires silent sessions).
    Touch { sessions: Vec<u64> },
}

/// The largest epoch, zxid counter, log index or round a peer's message
/// may carry: 2^63. Each of them grows by one per election, proposal or
/// heartbeat, so no run gets near it; a larger value is forged or corrupt,
/// and taking it would leave no room for the `+ 1` of the next epoch,
/// index or round (issue 31). `ZabNode::on_msg` refuses such messages
/// (`zab_edge_values_refused_total`), so every counter this server derives
/// from a message stays below 2^63 plus its own events, far from
/// `u64::MAX`.
pub const COUNTER_LIMIT: u64 = 1 << 63;

impl Msg {
    /// The log entries `self` hands to another server (PROPOSAL, and the
    /// DIFF of NEWLEADER).
    pub fn entries(&self) -> &[LogEntry] {
        match self {
            Msg::Proposal { entry, .. } | Msg::ProposalEcho { entry, .. } => {
                std::slice::from_ref(entry)
            }
            Msg::NewLeader { sync, .. } => &sync.entries,
            _ => &[],
        }
    }
    /// The znode operations among [`Self::entries`], with the session
    /// that asked.
    pub fn znode_entries(&self) -> Vec<(u64, ZnodeOp)> {
        let znode = |e: &LogEntry| {
            let p = Payload::from_bytes(&e.data)?;
            match Op::decode(&mut Reader(&p.op))? {
                Op::Znode(z) => Some((z.session, z.op)),
                _ => None,
            }
        };
        self.entries().iter().filter_map(znode).collect()
    }
    /// The largest epoch, zxid counter, log index or round in `self`
    /// (payload ids such as `rid`, `origin`, sessions and timestamps are
    /// not counters: nothing adds to them).
    pub fn largest_counter(&self) -> u64 {
        let entries = |e: &[LogEntry]| e.iter().map(|e| e.index.max(e.epoch)).max().unwrap_or(0);
        match self {
            Msg::Notify {
                round, vote, led, ..
            } => {
                let v = vote.map_or(0, |v| v.cur_epoch.max(v.last.epoch).max(v.last.counter));
                (*round).max(v).max(*led)
            }
            Msg::FollowerInfo { accepted, .. } | Msg::RecoverOk { accepted, .. } => *accepted,
            Msg::Recover { .. } | Msg::Dropped { .. } | Msg::Touch { .. } => 0,
            Msg::NewEpoch { epoch } | Msg::Beat { epoch } | Msg::Prot { epoch, .. } => *epoch,
            Msg::AckEpoch {
                epoch,
                cur_epoch,
                summary,
                ..
            } => {
                let runs = (summary.runs.iter())
                    .map(|&(e, first, last)| e.max(first).max(last))
                    .max()
                    .unwrap_or(0);
                (*epoch).max(*cur_epoch).max(summary.base).max(runs)
            }
            Msg::NewLeader { epoch, sync } => {
                let snap = sync.snap.as_ref().map_or(0, |(i, _)| *i);
                let trunc = sync.trunc.unwrap_or(0);
                (*epoch).max(snap).max(trunc).max(entries(&sync.entries))
            }
            Msg::AckNewLeader { epoch, last } => (*epoch).max(*last),
            Msg::Proposal { epoch, entry } | Msg::ProposalEcho { epoch, entry, .. } => {
                (*epoch).max(entries(std::slice::from_ref(entry)))
            }
            Msg::Ack { epoch, index }
            | Msg::AckAt { epoch, index, .. }
            | Msg::Commit { epoch, index }
            | Msg::ReadIndexOk { epoch, index, .. } => (*epoch).max(*index),
            Msg::Logged { index, .. } => *index,
            Msg::Ping {
                epoch,
                round,
                commit,
                last,
            } => (*epoch).max(*round).max(*commit).max(*last),
            Msg::Pong { epoch, round, last } => (*epoch).max(*round).max(*last),
            Msg::Forward { epoch, .. } | Msg::ReadIndex { epoch, .. } => *epoch,
        }
    }
}

/// Zab's timers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic: election notifications, pings, timeouts.
    Tick,
    /// The election's wait for better votes before deciding.
    Finalize,
}

#[cfg(test)]
mod tests {
    use super::super::codec::Writer;
    use super::super::zentry::{stamp, ZEntry};
    use super::*;
    use crate::types::{ClientRef, OpId, Time};

    /// A log entry as the leader makes it: client `session`'s `op`.
    fn entry(index: u64, session: u64, op: Option<ZnodeOp>) -> LogEntry {
        let client = ClientRef {
            id: 9,
            session: 4,
            op: OpId {
                client: session,
                seq: 1,
            },
        };
        let op = match op {
            Some(op) => Op::Znode(ZEntry::new(op, &client)),
            None => Op::Put {
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
            },
        };
        let mut w = Writer::default();
        op.encode(&mut w);
        let p = Payload {
            origin: 1,
            rid: 2,
            op: w.finish(),
        };
        let data = stamp(p.to_bytes(), Time::from_micros(5_000));
        LogEntry {
            index,
            epoch: 1,
            data,
        }
    }

    fn create(path: &str) -> ZnodeOp {
        ZnodeOp::Create {
            path: path.into(),
            data: Bytes::from_static(b"d"),
            ephemeral: false,
            sequential: false,
        }
    }

    /// PROPOSAL and NEWLEADER's DIFF hand entries to another server; the
    /// simulator reads the znode operations (stamped with the leader's
    /// clock) and who asked from them, and nothing from other messages.
    #[test]
    fn the_znode_entries_a_message_carries() {
        let proposal = Msg::Proposal {
            epoch: 1,
            entry: entry(3, 7, Some(create("/a"))),
        };
        assert_eq!(proposal.znode_entries(), vec![(7, create("/a"))]);
        let echo = Msg::ProposalEcho {
            epoch: 1,
            entry: entry(3, 7, Some(create("/e"))),
            at: 0,
            held: 0,
        };
        assert_eq!(echo.znode_entries(), vec![(7, create("/e"))]);
        let sync = SyncData {
            snap: None,
            trunc: None,
            entries: vec![
                entry(1, 5, Some(create("/b"))),
                entry(2, 6, None),
                entry(3, 8, Some(ZnodeOp::CloseSession)),
            ],
        };
        let diff = Msg::NewLeader { epoch: 2, sync };
        let want = vec![(5, create("/b")), (8, ZnodeOp::CloseSession)];
        assert_eq!(diff.znode_entries(), want, "KV entries are left out");
        assert!(Msg::Commit { epoch: 1, index: 3 }
            .znode_entries()
            .is_empty());
    }
}
