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
    /// Where the current phase ends: `origin` for a pre-write and for the
    /// origin's own write; the taker for a write it converted (takeover).
    /// The life that made the message is `tag.writer`.
    pub home: NodeId,
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
    /// Phase 1 again, once more round the ring (rejoin on): a pre-write
    /// back home at a server that has let a joiner in since it left. The
    /// joiner's snapshot came from that server, which had not seen it
    /// yet, so the joiner (and servers welcomed from it in turn) may not
    /// hold it pending: each server holds it pending and passes it on,
    /// and home applies it only when it is back (`lap.rs`). The number is
    /// the writer id (life) of the server that sent it round (a taker of
    /// the home, or the home's new life, sends its own).
    Lap(Entry, u64),
    /// Flow control back to the predecessor: "I have received `received`
    /// ring messages from you", so it may send `window` more. Not in the
    /// seed: it stands for the seed's one-message-per-round link.
    Credit { received: u64 },
    /// A restarted server `node` (life `writer`) asks to be let back in,
    /// sent to its live predecessor (forwarded there by a server that is not).
    Join { node: NodeId, writer: u64 },
    /// The predecessor's answer: its state and view, first on the link.
    Welcome(Box<Snapshot>),
    /// `node` (life `writer`) joined in view `view`: from the joiner around
    /// the ring, each server adding it and passing it on once.
    ViewChange {
        view: u64,
        node: NodeId,
        writer: u64,
    },
    /// "`node` crashed" (this server's failure detector said so), to the
    /// successor: one welcomed lately may have seen that `Down` while
    /// outside and taken it for nothing, with `node` in its snapshot.
    /// `life`: the writer id of the life that crashed, if it joined (a
    /// notice of an old life must not remove a new one).
    Gone { node: NodeId, life: Option<u64> },
    /// `node` (life `writer`), in the view, straight to a member its
    /// failure detector reports up but its view misses: "count me in";
    /// with `answer`, "and tell me you are in" (`rejoin.rs`, `hail`).
    Hail {
        node: NodeId,
        writer: u64,
        answer: bool,
    },
    /// Kill-all (`reform.rs`): the lowest member, outside, asks every
    /// other member whether it is outside too, and for its state.
    Census { round: u64 },
    /// The answer of a server outside: its life, whether it lost its
    /// state (memory durability, `--recover`), and its registers and
    /// applied operations.
    Roll {
        round: u64,
        writer: u64,
        lost: bool,
        state: Box<Snapshot>,
    },
    /// The census found every server outside and some state lost: the
    /// ring cannot re-form without risking acknowledged writes.
    Unrecoverable { lost: Vec<NodeId> },
}

/// What a joining server gets from its predecessor: everything that went
/// past the predecessor so far (later messages follow on the same link).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub view: u64,
    pub alive: Vec<NodeId>,
    /// Known lives (`writer` of servers that joined).
    pub lives: Vec<(NodeId, u64)>,
    /// Per key: the value held as a write, and the pending pre-writes.
    pub regs: Vec<(Entry, Vec<Entry>)>,
    /// Operations applied (dedup, newest last).
    pub ops: Vec<OpId>,
    /// Of those, the write that applied each, where known: a joiner that
    /// knows an operation but not its write would take a copy of that
    /// very write for a second one and void it (`dedup.rs`).
    #[serde(default)]
    pub op_writes: Vec<(OpId, Bytes, Tag)>,
    /// Writes seen lately. (Not the pre-writes the predecessor took over:
    /// a copy of one reaching the joiner as their new home must be ended
    /// again, its first write may have died with a crash.)
    pub written: Vec<(Bytes, Tag)>,
    /// Of those, the ones the predecessor saw applied (not void): a copy
    /// of their pre-write is answered with a write round
    /// (`write_round_for`).
    #[serde(default)]
    pub live_written: Vec<(Bytes, Tag)>,
    /// Pending pre-writes the predecessor has yet to (re-)send: copies of
    /// them will come, to be passed on, not dropped as copies.
    pub owed: Vec<(Bytes, Tag)>,
    /// Writes the predecessor applied and has yet to send (its own, or
    /// re-sends): if it crashes first, the joiner sends them on.
    pub owed_writes: Vec<Entry>,
    /// Pre-writes on a lap that passed the predecessor (or that it sent
    /// round), with who sent the lap: re-sent, they go as laps.
    pub laps: Vec<(Bytes, Tag, u64)>,
    /// Writes the predecessor forwarded lately: they went to the old
    /// successor, now the joiner's, which may crash with them unsent.
    pub sent_writes: Vec<Entry>,
    /// A re-formed ring's state after a kill-all (`reform.rs`): the joiner
    /// welcomes its own successor with it, instead of a `ViewChange`.
    #[serde(default)]
    pub reform: bool,
    /// Pre-writes the predecessor gave a joiner pending (`write_again`):
    /// that joiner sits after this one now, and a write round that ends
    /// here must go round once more to reach it.
    #[serde(default)]
    pub welcomed_pending: Vec<(Bytes, Tag)>,
}

impl Msg {
    /// The write a ring message carries (`None` for `Credit`).
    pub fn entry(&self) -> Option<&Entry> {
        match self {
            Msg::PreWrite(e) | Msg::Write(e) | Msg::Lap(e, _) => Some(e),
            _ => None,
        }
    }
}

/// The ring's one timer: failures come from the failure detector
/// (`on_link(Down)`), and clients time out on their own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Outside: send `Join` again (it is lost if its target crashes, or
    /// if the driver opens the new life's links after `on_start`).
    Join,
}
