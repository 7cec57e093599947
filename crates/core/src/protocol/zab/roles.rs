//! Each role's state, below the node (`node.rs`) that holds one: the
//! election's votes, a follower's and a leader's view of each other, the
//! reads in flight and a recovering server's answers. What the roles do is
//! in their own files (`election.rs`, `follower.rs`, `leader.rs`,
//! `reads.rs`, `recovery.rs`).

use super::msg::{Summary, Vote};
use crate::types::{ClientRef, NodeId, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
pub struct Election {
    /// The election round (ZooKeeper's logical clock), not persisted.
    pub round: u64,
    pub vote: Option<Vote>,
    /// The latest vote of each non-recovering server in this round.
    pub received: BTreeMap<NodeId, Vote>,
    /// The finalize timer is pending (re-arming it would postpone it).
    pub armed: bool,
    /// Servers that already follow us (their notification or FOLLOWERINFO
    /// said so) while we still look: with a quorum of them, we lead.
    pub followers: BTreeSet<NodeId>,
    /// Looking servers whose vote in this round is not for themselves:
    /// not candidates, so no vote for them is adopted (a learner never
    /// runs, and votes for it would otherwise circulate for good).
    pub declined: BTreeSet<NodeId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FStage {
    /// FOLLOWERINFO sent.
    Info,
    /// NEWEPOCH accepted, ACKEPOCH sent.
    Epoch,
    /// NEWLEADER logged, ACKNEWLEADER sent.
    Synced,
    /// The leader's first COMMIT came: broadcast phase, serving clients.
    Serving,
}

#[derive(Clone, Debug)]
pub struct Following {
    pub leader: NodeId,
    pub stage: FStage,
    /// The epoch accepted from this leader (0 before NEWEPOCH).
    pub epoch: u64,
    /// Last message from the leader.
    pub heard: Time,
    /// When we started following it.
    pub since: Time,
}

/// Where a follower is in its leader's eyes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// FOLLOWERINFO received (before the epoch is chosen).
    Info { accepted: u64 },
    /// NEWEPOCH sent.
    EpochSent,
    /// ACKEPOCH received, NEWLEADER not sent yet.
    Acked(Summary),
    /// NEWLEADER sent; `acked` once ACKNEWLEADER came (it then holds our
    /// history and counts in the broadcast's quorums).
    Synced { acked: bool },
}

#[derive(Clone, Debug)]
pub struct Fol {
    pub stage: Stage,
    pub recovering: bool,
    /// Highest index it logged (ACK, ACKNEWLEADER, PONG).
    pub acked: u64,
    /// Highest ping round it answered.
    pub ponged: u64,
    pub heard: Time,
}

impl Fol {
    pub(super) fn counts(&self) -> bool {
        self.stage == Stage::Synced { acked: true }
    }
}

#[derive(Clone, Debug)]
pub struct Leading {
    /// The new epoch, 0 until a quorum's FOLLOWERINFO chose it.
    pub epoch: u64,
    /// NEWLEADER sent (our current epoch is `epoch`).
    pub syncing: bool,
    /// A quorum acknowledged NEWLEADER: broadcast phase.
    pub established: bool,
    pub since: Time,
    pub fols: BTreeMap<NodeId, Fol>,
    /// Heartbeat / read-index rounds sent.
    pub ping_round: u64,
    /// A round sent for reads, not yet confirmed by a quorum.
    pub read_round: Option<u64>,
}

impl Leading {
    pub fn new(now: Time) -> Leading {
        Leading {
            epoch: 0,
            syncing: false,
            established: false,
            since: now,
            fols: BTreeMap::new(),
            ping_round: 0,
            read_round: None,
        }
    }
    /// Followers in the broadcast (holding our history).
    pub fn synced(&self) -> impl Iterator<Item = NodeId> + '_ {
        (self.fols.iter())
            .filter(|(_, f)| matches!(f.stage, Stage::Synced { .. }))
            .map(|(&n, _)| n)
    }
}

/// A read at this server.
#[derive(Debug)]
pub struct Read {
    pub client: ClientRef,
    pub op: Bytes,
    pub deadline: Time,
    /// Asked of the leader (or queued at it).
    pub sent: bool,
    /// The index to have applied before answering, once confirmed.
    pub index: Option<u64>,
}

/// Who asked the leader for a read index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    Me(u64),
    Follower(NodeId, u64),
}

/// A read waiting at the leader for its round's quorum.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    pub asker: Asker,
    pub index: u64,
    pub round: u64,
    /// When the read reached the leader.
    pub arrived: Time,
}

/// The last read indexes a leader handed out, for the invariants: how
/// many batches so far, the earliest arrival among the last batch's reads
/// and the epoch they were handed out in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handed {
    pub batches: u64,
    pub arrived: Time,
    pub epoch: u64,
}

#[derive(Debug, Default)]
pub struct Reads {
    pub mine: BTreeMap<u64, Read>,
    pub at_leader: Vec<Pending>,
    pub handed: Handed,
}

/// The answers gathered so far by a server learning its epoch floor.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Accepted epoch and the leader it was promised to, per peer that is
    /// not recovering itself.
    pub answers: BTreeMap<NodeId, (u64, NodeId)>,
}
