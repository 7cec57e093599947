//! The messages between coordinators and replicas (seed 000 §4.2), and the timers.

use crate::protocol::reconfig::{trailing_epoch, ChangeMsg, ChangeTimer, Config};
use crate::types::{Tag, Time};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Who holds a lock: the coordinator's writer id and its lock round. A
/// fresh round per lock attempt (a retry after backoff takes a new one), so
/// a late message of an earlier attempt never passes for the current one,
/// whatever the order the network delivers them in.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LockId {
    /// The coordinator's writer id (unique per coordinator and per life).
    pub owner: u64,
    /// The lock round, unique per coordinator.
    pub round: u64,
}

/// Messages between a coordinator and the replicas. Every one names the
/// lock round it belongs to; replies go back to the sender. A request that
/// changes or reads a register names the configuration epoch it runs in
/// (`protocol::reconfig`), last in its variant: a frame of a release
/// without epochs decodes with epoch 0, and an older replica ignores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// "Lock `key` for `lock` for one lease" (`LOCK_REQ key client_id`).
    LockReq {
        lock: LockId,
        key: Bytes,
        #[serde(deserialize_with = "trailing_epoch")]
        epoch: u64,
    },
    /// The lock is `lock`'s until its lease ends (`LOCK_GRANTED`); names the
    /// key so that a grant the coordinator will not use can be released.
    LockGranted { lock: LockId, key: Bytes },
    /// Another holder's lease is still running (`LOCK_DENIED`).
    LockDenied { lock: LockId },
    /// Release `key` if `lock` holds it (`UNLOCK key client_id`); no reply.
    Unlock { lock: LockId, key: Bytes },
    /// "What tag and value do you hold for `key`?" (`READ_REQ`), allowed
    /// whoever holds the lock; `lock` only routes the reply.
    Read {
        lock: LockId,
        key: Bytes,
        #[serde(deserialize_with = "trailing_epoch")]
        epoch: u64,
    },
    /// A replica's answer to `Read`.
    ReadReply {
        lock: LockId,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// "Hold `value` at `tag`" (`WRITE_REQ`), only from the lock's holder
    /// while its lease runs.
    Write {
        lock: LockId,
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
        #[serde(deserialize_with = "trailing_epoch")]
        epoch: u64,
    },
    /// The write was accepted (applied if `tag` was newer) (`ACK`).
    Ack { lock: LockId },
    /// Not the holder, or the lease ran out: nothing written (`WRITE_DENIED`).
    WriteDenied { lock: LockId },
    /// A restarted replica that lost its state asks a peer for its registers.
    SyncRequest,
    /// A peer's registers `(key, tag, value)` at its time `at`, answering
    /// `SyncRequest`.
    SyncReply {
        at: Time,
        entries: Vec<(Bytes, Tag, Option<Bytes>)>,
    },
    /// A replica's answer to a request of an older epoch: that
    /// configuration is over, `config` is the newest this replica knows.
    Moved { lock: LockId, config: Config },
    /// Membership change, between servers (`protocol::reconfig`).
    Change(ChangeMsg),
}

impl Msg {
    /// Whether a coordinator sends it to the replicas: one of the four
    /// requests (seed 000 §4.1). Replies (grants, denials, read replies,
    /// acks) and the recovery exchange (`SyncRequest` / `SyncReply`) only
    /// a replica sends.
    pub fn is_request(&self) -> bool {
        match self {
            Msg::LockReq { .. } | Msg::Unlock { .. } | Msg::Read { .. } | Msg::Write { .. } => true,
            Msg::LockGranted { .. }
            | Msg::LockDenied { .. }
            | Msg::ReadReply { .. }
            | Msg::Ack { .. }
            | Msg::WriteDenied { .. }
            | Msg::SyncRequest
            | Msg::SyncReply { .. }
            | Msg::Moved { .. }
            | Msg::Change(_) => false,
        }
    }
}

/// Timers of the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic while operations are pending: retransmit and expire them.
    Tick,
    /// `lock-retry=backoff`: the operation whose lock round `round` was
    /// denied tries again.
    Retry { round: u64 },
    /// Periodic while a restarted replica catches up: ask again.
    Sync,
    /// Periodic while a membership change runs here or this replica is
    /// frozen by one: retransmit, finish a stalled change.
    Reconfig,
}

impl From<ChangeMsg> for Msg {
    fn from(m: ChangeMsg) -> Msg {
        Msg::Change(m)
    }
}

impl ChangeTimer for Timer {
    fn reconfig() -> Timer {
        Timer::Reconfig
    }
}
