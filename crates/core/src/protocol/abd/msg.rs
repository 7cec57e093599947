//! The messages between coordinators and replicas, and the timers.

use crate::protocol::reconfig::{trailing_epoch, ChangeMsg, ChangeTimer};
pub use crate::protocol::reconfig::{Ballot, Config, Entries};
use crate::types::{NodeId, Tag};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

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

/// The change messages are ABD's own variants (wire 1.3), the same
/// fields as [`ChangeMsg`]'s.
impl From<ChangeMsg> for Msg {
    fn from(m: ChangeMsg) -> Msg {
        match m {
            ChangeMsg::Prepare { epoch, ballot } => Msg::Prepare { epoch, ballot },
            ChangeMsg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            } => Msg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            },
            ChangeMsg::Refuse {
                epoch,
                ballot,
                promised,
            } => Msg::Refuse {
                epoch,
                ballot,
                promised,
            },
            ChangeMsg::Accept {
                epoch,
                ballot,
                members,
            } => Msg::Accept {
                epoch,
                ballot,
                members,
            },
            ChangeMsg::Accepted { epoch, ballot } => Msg::Accepted { epoch, ballot },
            ChangeMsg::Install { config, entries } => Msg::Install { config, entries },
            ChangeMsg::Installed { epoch } => Msg::Installed { epoch },
            ChangeMsg::InstallRequest { epoch } => Msg::InstallRequest { epoch },
        }
    }
}

impl Msg {
    /// The change message this is, or itself back.
    pub fn into_change(self) -> Result<ChangeMsg, Msg> {
        Ok(match self {
            Msg::Prepare { epoch, ballot } => ChangeMsg::Prepare { epoch, ballot },
            Msg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            } => ChangeMsg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            },
            Msg::Refuse {
                epoch,
                ballot,
                promised,
            } => ChangeMsg::Refuse {
                epoch,
                ballot,
                promised,
            },
            Msg::Accept {
                epoch,
                ballot,
                members,
            } => ChangeMsg::Accept {
                epoch,
                ballot,
                members,
            },
            Msg::Accepted { epoch, ballot } => ChangeMsg::Accepted { epoch, ballot },
            Msg::Install { config, entries } => ChangeMsg::Install { config, entries },
            Msg::Installed { epoch } => ChangeMsg::Installed { epoch },
            Msg::InstallRequest { epoch } => ChangeMsg::InstallRequest { epoch },
            other => return Err(other),
        })
    }
}

impl ChangeTimer for Timer {
    fn reconfig() -> Timer {
        Timer::Reconfig
    }
}
