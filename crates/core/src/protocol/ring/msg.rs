//! The messages between ring neighbours, and the (absent) timers.

use crate::types::{NodeId, OpId, Tag};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// One write as it travels the ring, in either phase. `(key, tag)` names
/// it; `origin` is the server that took it from its client (its "home",
/// where each phase ends); `op` is the client's operation id (retries of
/// one operation share it, `OpId::NONE` when the client gave none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: Bytes,
    pub tag: Tag,
    /// The value written; `None` is a delete (a tombstone).
    pub value: Option<Bytes>,
    pub origin: NodeId,
    pub op: OpId,
    /// A copy of an operation already travelling under a lower tag (a
    /// client's retry met the original): it clears `pending` entries but is
    /// never applied. See the module doc, "Retried writes".
    pub void: bool,
}

/// Messages; each goes to the sender's successor only (pc 25, 37, 49),
/// except `Credit`, which goes back to the predecessor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Phase 1 of a write: "this value is about to be written" (pc 25).
    PreWrite(Entry),
    /// Phase 2: "apply this value" (pc 37, 49).
    Write(Entry),
    /// Flow control back to the predecessor: "I have received `received`
    /// ring messages from you", so it may send `window` more. Not in the
    /// seed: it stands for the seed's one-message-per-round link.
    Credit { received: u64 },
}

impl Msg {
    /// The write a ring message carries (`None` for `Credit`).
    pub fn entry(&self) -> Option<&Entry> {
        match self {
            Msg::PreWrite(e) | Msg::Write(e) => Some(e),
            Msg::Credit { .. } => None,
        }
    }
}

/// The ring sets no timers: failures come from the failure detector
/// (`on_link(Down)`), and clients time out on their own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {}
