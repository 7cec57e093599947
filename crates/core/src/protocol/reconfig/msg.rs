//! What a change is made of: configurations, ballots, its messages, its
//! injected bugs, and the register store it freezes and transfers.

use crate::protocol::contract::Out;
use crate::quorum::{majority, QuorumTracker};
use crate::types::{NodeId, Tag};
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};

/// A register store's whole state: `(key, tag, value)`.
pub type Entries = Vec<(Bytes, Tag, Option<Bytes>)>;

/// The configuration epoch a request is for. Last in its variant, so a
/// frame from a release without epochs (before membership change) decodes
/// with epoch 0, the configuration of the cluster file, and an older
/// replica ignores it (postcard ignores trailing bytes).
pub fn trailing_epoch<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
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
    pub(crate) fn tracker(&self) -> QuorumTracker {
        QuorumTracker::new(self.members.len(), self.quorum())
    }
    /// Whether a coordinator can run in it: members, each id below 64
    /// (the quorum bitsets stop at 63).
    pub fn usable(&self) -> bool {
        !self.members.is_empty() && self.members.iter().all(|&m| m < 64)
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
    pub fn above(self, node: NodeId) -> Option<Ballot> {
        let round = self.round.checked_add(1)?;
        Some(Ballot { round, node })
    }
}

/// The messages of a change, between servers only. A protocol carries
/// them in its own message type (`From<ChangeMsg>` and back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeMsg {
    /// Phase 1 (Paxos prepare) to the members of epoch `epoch − 1`:
    /// promise `ballot` for deciding epoch `epoch`, and stop serving the
    /// old epoch.
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

/// The injected bugs of membership change (each protocol names its own,
/// e.g. `abd-reconfig-no-freeze`, and maps it to one of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeBug {
    /// A replica that promised the next epoch still serves its own.
    NoFreeze,
    /// The state transfer takes one old member's store, not a quorum's.
    TransferFromOne,
    /// A new member serves as soon as it accepts, before the transfer.
    InstallOnAccept,
    /// A proposer ignores members accepted earlier.
    IgnoreAccepted,
}

/// The register store a change freezes, transfers and merges.
pub trait Registers<M, T> {
    /// Every register, sorted by key.
    fn snapshot(&self) -> Entries;
    /// Keep the newer of each entry and what is held (persisted when
    /// durable).
    fn merge(&mut self, entries: Entries, out: &mut Out<M, T>);
}
