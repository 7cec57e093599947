//! The messages between servers, and the timers.

use crate::types::{NodeId, Tag};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A lock request's identity and its place in every queue: the requester's
/// Lamport clock when it asked, ties broken by node id (Lamport's total
/// order "⇒"). Derived `Ord` compares `ts` first, then `node`, then `life`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ReqId {
    pub ts: u64,
    pub node: NodeId,
    /// The requester's life (`NodeSpec::incarnation`): nothing is
    /// persisted, so a restarted server's clock starts again at 0 and its
    /// requests must not be taken for its previous life's (see
    /// `Body::Outstanding`). Only ties in `(ts, node)` compare it.
    pub life: u64,
}

impl ReqId {
    /// The version a write made under this request carries. Critical
    /// sections of one scope run in `ReqId` order, so tags grow with them;
    /// they only arbitrate merges (recovery, repair), never the normal path.
    pub fn tag(self) -> Tag {
        Tag {
            ts: self.ts,
            writer: u64::from(self.node) << 32 | (self.life & 0xFFFF_FFFF),
        }
    }
}

/// What a lock protects: the whole store (the seed's choice, §3.2.1 item 2)
/// or one key (`lock-scope = key`). Each scope is an independent mutex with
/// its own queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    Global,
    Key(Bytes),
}

/// One entry of a store snapshot: key, version, value (`None` = deleted).
pub type Entry = (Bytes, Tag, Option<Bytes>);

/// A write staged under its request, not applied yet (`read-wait`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    pub req: ReqId,
    pub scope: Scope,
    pub key: Bytes,
    pub value: Option<Bytes>,
    /// Its holder restarted since (see `queue::Slot::orphan`).
    pub orphan: bool,
}

/// Every message carries the sender's Lamport clock (Lamport 1978, IR1/IR2):
/// the receiver advances its own clock past it, and the entry rule asks for
/// a message *later* than one's request from every peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Msg {
    pub clock: u64,
    pub body: Body,
}

/// What the message says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// REQUEST_LOCK: queue my request `req` for `scope` (§3.2.2 item 1).
    RequestLock { req: ReqId, scope: Scope },
    /// REPLY_LOCK: I queued your request `req` (§3.2.2 item 3; always sent
    /// at once, Lamport's rule, not deferred as in the seed).
    ReplyLock { req: ReqId },
    /// RELEASE_LOCK: drop my request `req` (done, or withdrawn) (item 2).
    ReleaseLock { req: ReqId, scope: Scope },
    /// SERVER_WRITE: the write made under `req`, to apply from the queue's
    /// head (item 4); re-sent until acknowledged (§3.2.1 item 3).
    ServerWrite {
        req: ReqId,
        scope: Scope,
        key: Bytes,
        value: Option<Bytes>,
    },
    /// The write of `req` is applied (staged, with `read-wait`); `applied`
    /// false: no such request is queued here (it was dropped), nothing done.
    WriteAck { req: ReqId, applied: bool },
    /// After a link came back (messages may be missing): these are all my
    /// queued requests; drop any other of mine, queue these, reply to each.
    /// `life`: the sender's; a request of another life is not its to drop
    /// (its staged write waits for `Resolve`).
    Outstanding {
        life: u64,
        reqs: Vec<(ReqId, Scope)>,
    },
    /// A recovering or rejoining server asks for a peer's whole store.
    SyncRequest,
    /// A peer's whole store and the writes staged there (`read-wait`):
    /// the asker's own from a previous life, kept until it resolves them,
    /// and other holders'; `recovering`: the peer has nothing to give.
    /// `unwritten`: the asker's previous life's requests that were queued
    /// here without their write (it never had this peer's ack for them).
    SyncReply {
        entries: Vec<Entry>,
        staged: Vec<Staged>,
        unwritten: Vec<ReqId>,
        recovering: bool,
        /// The peer lost its state and has merged nobody's yet (not one
        /// rejoining with its own store): every peer saying so is a total
        /// loss (`fatal`).
        lost: bool,
    },
    /// A restarted holder commits a write of its previous life left staged:
    /// stage it if missing here (unless a version as new is applied) and
    /// acknowledge (`WriteAck`); `Resolve` follows once every peer did, as
    /// a live holder's RELEASE_LOCK follows its acks.
    Commit {
        req: ReqId,
        scope: Scope,
        key: Bytes,
        value: Option<Bytes>,
    },
    /// Writes of the receiver's previous lives still staged here, sent
    /// while we poll it for them: a holder whose recovery heard of them
    /// from nobody (every peer was recovering too) commits them now.
    Orphans { staged: Vec<Staged> },
    /// A restarted holder's verdict on a write of its previous life left
    /// staged: apply it in queue order (`commit`) or drop it.
    Resolve {
        req: ReqId,
        scope: Scope,
        commit: bool,
    },
    /// A server that finished recovering pushes its merged store to its
    /// peers, who keep the newer version of each key (writes of a holder
    /// that crashed mid-broadcast reach every replica).
    Repair { entries: Vec<Entry> },
    /// You were silent past the lock timeout while we waited for you: we
    /// dropped your requests and ignore you until you sync again.
    Evicted,
    /// We have waited on you for a whole tick: send me your `Outstanding`
    /// and your unacknowledged writes (a link reset may have been reported
    /// on one side only, or a RELEASE_LOCK lost while you were idle).
    Poll,
}

/// Timers of a server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Periodic while work is pending: op timeouts, lock timeouts.
    Tick,
}
