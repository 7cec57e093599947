//! The messages between coordinators and replicas, and the timers.

use crate::types::Tag;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Messages between a coordinator and the replicas. `op` is chosen by the
/// coordinator and echoed back; it is unique per coordinator only, which is
/// enough because replies go back to the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1: "what tag and value do you hold for `key`?"
    Query { op: u64, key: Bytes },
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
    },
    /// A replica's acknowledgement of `Store` (sent whether or not it applied).
    StoreAck { op: u64 },
    /// A restarted replica that lost its state asks a peer for everything it holds.
    SyncRequest,
    /// A peer's whole store, answering `SyncRequest`.
    SyncReply {
        entries: Vec<(Bytes, Tag, Option<Bytes>)>,
    },
}

/// Timers of the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic while operations are pending: retransmit and expire them.
    Tick,
    /// Periodic while a restarted replica recovers: ask again.
    Sync,
}
