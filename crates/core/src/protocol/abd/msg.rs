//! The messages between coordinators and replicas, and the timers.

use crate::quorum::{majority, QuorumTracker};
use crate::types::{NodeId, Tag};
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};

/// A register's whole state as one replica holds it: `(key, tag, value)`.
pub type Entries = Vec<(Bytes, Tag, Option<Bytes>)>;

/// The configuration epoch a query or store is for. Last in its variant,
/// so a frame from a release without epochs (before membership change)
/// decodes with epoch 0, the configuration of the cluster file, and an
/// older replica ignores it (postcard ignores trailing bytes).
fn trailing_epoch<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(u64::deserialize(d).unwrap_or(0))
}

/// One configuration: its epoch and the replicas that form its quorums.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub epoch: u64,
    /// Sorted, distinct.
    pub members: Vec<NodeId>,
}

impl Config {
    pub fn new(epoch: u64, mut members: Vec<NodeId>) -> Config {
        members.sort_unstable();
        members.dedup();
        Config { epoch, members }
    }
    pub fn quorum(&self) -> usize {
        majority(self.members.len())
    }
    pub fn has(&self, n: NodeId) -> bool {
        self.members.contains(&n)
    }
    pub(super) fn tracker(&self) -> QuorumTracker {
        QuorumTracker::new(self.members.len(), self.quorum())
    }
}

/// A Paxos ballot: a round, then the proposer's id to break ties.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

impl Ballot {
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };
    /// The next ballot of `node` above `self`; `None` once rounds run out.
    pub(super) fn above(self, node: NodeId) -> Option<Ballot> {
        let round = self.round.checked_add(1)?;
        Some(Ballot { round, node })
    }
}

/// Messages between a coordinator and the replicas. `op` is chosen by the
/// coordinator and echoed back; it is unique per coordinator only, which is
/// enough because replies go back to the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1: "what tag and value do you hold for `key`?"
    Query {
        op: u64,
        key: Bytes,
        #[serde(deserialize_with = "trailing_epoch")]
        epoch: u64,
    },
    /// A replica's answer to `Query`.
    QueryReply {
        op: u64,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// Phase 2: "hold `value` at `tag` for `key`, unless you hold a newer tag."
    Store {
        op: u64,
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
        #[serde(deserialize_with = "trailing_epoch")]
        epoch: u64,
    },
    /// A replica's acknowledgement of `Store` (sent whether or not it applied).
    StoreAck { op: u64 },
    /// A restarted replica that lost its state asks a peer for everything it holds.
    SyncRequest,
    /// A peer's whole store, answering `SyncRequest`.
    SyncReply { entries: Entries },
    /// A replica's answer to a query or store of an older epoch: that
    /// configuration is over, `config` is the newest this replica knows.
    Moved { op: u64, config: Config },
    /// Membership change, phase 1 (Paxos prepare) to the members of epoch
    /// `epoch − 1`: promise `ballot` for deciding epoch `epoch`, and stop
    /// serving the old epoch.
    Prepare { epoch: u64, ballot: Ballot },
    /// The promise, with what this replica accepted for `epoch` and its
    /// whole store (frozen: nothing of the old epoch changes it any more).
    Promise {
        epoch: u64,
        ballot: Ballot,
        accepted: Option<(Ballot, Vec<NodeId>)>,
        entries: Entries,
    },
    /// A prepare or accept refused: this replica promised `promised`.
    Refuse {
        epoch: u64,
        ballot: Ballot,
        promised: Ballot,
    },
    /// Phase 2 (Paxos accept): take `members` as epoch `epoch`'s.
    Accept {
        epoch: u64,
        ballot: Ballot,
        members: Vec<NodeId>,
    },
    /// The accept taken.
    Accepted { epoch: u64, ballot: Ballot },
    /// Phase 3, the state transfer: `config` is decided; merge `entries`
    /// (the old epoch's state, from a quorum of it) and serve in it.
    Install { config: Config, entries: Entries },
    /// A member of the new configuration installed it.
    Installed { epoch: u64 },
    /// A replica saw epoch `epoch` and is behind it: send `Install`.
    InstallRequest { epoch: u64 },
}

/// Timers of the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic while operations are pending: retransmit and expire them.
    Tick,
    /// Periodic while a restarted replica recovers: ask again.
    Sync,
    /// Periodic while a membership change runs here or this replica is
    /// frozen by one (`reconfig.rs`): retransmit, finish a stalled change.
    Reconfig,
}
