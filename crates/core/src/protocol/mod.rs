//! The protocol core contract, shared by every replication protocol.
//!
//! A protocol role is a plain struct implementing [`Protocol`]. Its handlers
//! take `&mut self`, the current [`Time`] and an [`Out`] in which they record
//! what should happen as data ([`Command`]s). The driver then executes them.
//!
//! ## The driver's contract
//! 1. Handlers are called one at a time (no concurrency inside a core).
//! 2. Commands of one handler call are executed in order. Every
//!    [`Command::Persist`] is durable (according to the durability mode)
//!    before any *later* `Send` or `Reply` of the same call leaves the node —
//!    the raft-rs rule, which Zab and crash-recovery ABD rely on. The node
//!    runtime keeps a stronger rule: a `Send`, `Reply` or `Notify` leaves
//!    only after every `Persist` issued before it, *by any earlier handler
//!    call too*, is durable. So a later call's read reply never shows a
//!    value that is still off disk. Persists of many calls are synced
//!    together (group commit) while the driver goes on handling inputs;
//!    timers and sends to the node itself are not held back.
//!    Three commands relax this for cores that track their own durability
//!    (Zab's broadcast): [`Command::SendNow`] and [`Command::ReplyNow`] do
//!    not wait for earlier records (the core vouches that they reveal
//!    nothing that must be durable first; a `SendNow` still never overtakes
//!    an earlier held `Send` to the same peer, so links stay FIFO), and
//!    [`Command::WhenDurable`] hands a message back to the node itself once
//!    every record persisted before it is durable (the core's "it is on
//!    disk" signal, ZooKeeper's SyncRequestProcessor → AckRequestProcessor).
//! 3. `Send` to the node itself is delivered back through `on_msg` (after the
//!    current call returns), so a coordinator can count its own replica
//!    without special cases.
//! 4. Links are FIFO per (sender, receiver) pair in the node runtime; the
//!    simulator may break that, and protocols that need FIFO say so.
//! 5. `on_start` is called once, after any `restore`, before other handlers.
//! 6. A timer fires at most once per `SetTimer`; setting a timer that is
//!    already pending replaces it. Cores must tolerate timers for work that
//!    has since finished (they are not required to cancel them).
//! 7. A client connection is a *session*: every request on it carries the
//!    same `ClientRef::session`, the core sees `on_link(Up(Peer::Conn(s)))`
//!    when it opens and `on_link(Down(Peer::Conn(s)))` when it closes or its
//!    heartbeats stop, and `Command::Notify` pushes events to it.
//! 8. `Down` comes from TCP closing or from the heartbeat failure detector
//!    (no frame for the heartbeat timeout), in the node runtime and in the
//!    simulator alike.
//!
//! A protocol plugs in through its [`ProtocolDef`] and one line in
//! [`registry`]; `protocol/README.md` is the author's guide.

#[cfg(feature = "abd")]
pub mod abd;
pub mod catch_up;
#[cfg(feature = "lamport")]
pub mod lamport;
#[cfg(feature = "lease-lock")]
pub mod lease_lock;
pub mod options;
pub mod registry;
#[cfg(feature = "ring")]
pub mod ring;
#[cfg(feature = "zab")]
pub mod zab;

pub use options::{NoOptions, OptSpec, ProtocolOptions};
pub use registry::{
    client_may_send_fn, BugInfo, ClientMaySend, ClientSpec, InjectedBugs, LinkModel, NamedVariant,
    NoBugs, NodeSpec, ProtocolDef, ProtocolInfo, ProtocolKind, Timing, Visitor,
};

use crate::types::{ClientRef, Event, NodeId, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

/// Something that happened to a link, reported by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// A link to this peer is (again) established.
    Up(Peer),
    /// The link to this peer closed (TCP close or heartbeat loss): the
    /// "perfect failure detector" of the ring protocol, and how a server
    /// learns that a client-side coordinator went away.
    Down(Peer),
}

/// A record a core asks the driver to make durable before it speaks again.
/// Register-based protocols (ABD, lease-lock, ring) persist `(key, tag,
/// value)`; log-based protocols (Zab) use the log-shaped variants.
///
/// After a restart `Protocol::restore` gets, in this order: every `Meta`,
/// the latest `Snapshot`, every register's latest `Register`, then the
/// log's `Entry`s above the snapshot in index order (truncations applied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// The register `key` now holds `value` (None = deleted) at `tag`.
    Register {
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// The log holds `data` at `index`, written in `epoch` (replaces an
    /// entry already at `index`).
    Entry { index: u64, epoch: u64, data: Bytes },
    /// Drop every log entry at `index` or above.
    TruncateFrom { index: u64 },
    /// The state up to and including log `index`; entries at or below it
    /// may be discarded.
    Snapshot { index: u64, data: Bytes },
    /// A small named value (current epoch, vote, …); the last write wins.
    Meta { key: String, value: Bytes },
}

/// One effect of a handler call, executed by the driver.
#[derive(Clone, Debug, PartialEq)]
pub enum Command<M, T> {
    Send {
        to: Peer,
        msg: M,
    },
    Reply {
        client: ClientRef,
        resp: Response,
    },
    /// Push `event` to the client connection `session` unprompted (a watch
    /// fired, a lock was granted, a session expired). Dropped when the
    /// session is gone; `ClientRef::LOCAL` is the driver's in-process client.
    Notify {
        session: u64,
        event: Event,
    },
    SetTimer {
        after: Duration,
        timer: T,
    },
    CancelTimer {
        timer: T,
    },
    Persist(Record),
    /// A `Send` that does not wait for the records persisted before it
    /// (rule 2 of the contract): `msg` must reveal nothing that has to be
    /// durable first. It never overtakes an earlier `Send` to the same peer
    /// that is still held (links stay FIFO).
    SendNow {
        to: Peer,
        msg: M,
    },
    /// A `Reply` that does not wait for the records persisted before it.
    ReplyNow {
        client: ClientRef,
        resp: Response,
    },
    /// Deliver `msg` to this node itself (`on_msg` from its own `Peer`) once
    /// every record it persisted before this command is durable; at once
    /// (after the call, like a send to oneself) when nothing is pending.
    /// Dropped by a crash, like every held output.
    WhenDurable(M),
}

/// Collects the commands of one handler call.
#[derive(Debug)]
pub struct Out<M, T> {
    cmds: Vec<Command<M, T>>,
}

impl<M, T> Default for Out<M, T> {
    fn default() -> Self {
        Out { cmds: Vec::new() }
    }
}

impl<M: Clone, T> Out<M, T> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn send(&mut self, to: Peer, msg: M) {
        self.cmds.push(Command::Send { to, msg });
    }
    /// Send `msg` to every replica in `members` (the coordinator's broadcast).
    pub fn broadcast(&mut self, members: &[NodeId], msg: M) {
        for &n in members {
            self.cmds.push(Command::Send {
                to: Peer::Node(n),
                msg: msg.clone(),
            });
        }
    }
    pub fn reply(&mut self, client: ClientRef, resp: Response) {
        self.cmds.push(Command::Reply { client, resp });
    }
    pub fn notify(&mut self, session: u64, event: Event) {
        self.cmds.push(Command::Notify { session, event });
    }
    pub fn set_timer(&mut self, after: Duration, timer: T) {
        self.cmds.push(Command::SetTimer { after, timer });
    }
    pub fn cancel_timer(&mut self, timer: T) {
        self.cmds.push(Command::CancelTimer { timer });
    }
    pub fn persist(&mut self, rec: Record) {
        self.cmds.push(Command::Persist(rec));
    }
    /// Send without waiting for earlier persists ([`Command::SendNow`]).
    pub fn send_now(&mut self, to: Peer, msg: M) {
        self.cmds.push(Command::SendNow { to, msg });
    }
    /// Reply without waiting for earlier persists ([`Command::ReplyNow`]).
    pub fn reply_now(&mut self, client: ClientRef, resp: Response) {
        self.cmds.push(Command::ReplyNow { client, resp });
    }
    /// Get `msg` back once what was persisted so far is durable
    /// ([`Command::WhenDurable`]).
    pub fn when_durable(&mut self, msg: M) {
        self.cmds.push(Command::WhenDurable(msg));
    }
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }
    pub fn len(&self) -> usize {
        self.cmds.len()
    }
    /// Take the commands, leaving `self` empty (and its allocation reusable).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Command<M, T>> {
        self.cmds.drain(..)
    }
    pub fn commands(&self) -> &[Command<M, T>] {
        &self.cmds
    }
}

/// A protocol role: a deterministic state machine driven by the caller.
pub trait Protocol {
    /// The messages this protocol exchanges between roles.
    type Msg: Clone + Debug + Serialize + DeserializeOwned + Send + 'static;
    /// The timers it sets.
    type Timer: Clone + Debug + Eq + Hash + Send + 'static;

    /// Called once by the driver before anything else (after `restore`):
    /// arm first timers, ask peers for state, start an election.
    fn on_start(&mut self, _now: Time, _out: &mut Out<Self::Msg, Self::Timer>) {}
    /// A client asks for `req`; answer later with `Out::reply(client, …)`.
    fn on_client(
        &mut self,
        now: Time,
        client: ClientRef,
        req: Request,
        out: &mut Out<Self::Msg, Self::Timer>,
    );
    /// A protocol message arrived from `from`.
    fn on_msg(
        &mut self,
        now: Time,
        from: Peer,
        msg: Self::Msg,
        out: &mut Out<Self::Msg, Self::Timer>,
    );
    /// A timer set earlier fired.
    fn on_timer(&mut self, now: Time, timer: Self::Timer, out: &mut Out<Self::Msg, Self::Timer>);
    /// A link came up or went down. Most protocols ignore it.
    fn on_link(&mut self, _now: Time, _ev: LinkEvent, _out: &mut Out<Self::Msg, Self::Timer>) {}
    /// Rebuild state from durable records after a restart (before any other
    /// call). Protocols without durable state ignore it.
    fn restore(&mut self, _rec: Record) {}
    /// `Some(why)` once this node cannot go on: its state cannot be
    /// recovered and serving would risk acknowledged data (a ring whose
    /// every server restarted and some lost its state). The driver logs
    /// `why` and stops the replica with an error. Checked after each call.
    fn fatal(&self) -> Option<&str> {
        None
    }
    /// This node's part in the protocol right now, one word for `quorumkv
    /// endpoints status`: `replica` (all equal), `leader`, `follower`,
    /// `recovering`, …
    fn role(&self) -> &'static str {
        "replica"
    }
    /// One-line status for `INFO` and logs.
    fn status(&self) -> String {
        String::new()
    }
    /// Protocol counters for the metrics endpoint: `(name, help, value)`,
    /// names in Prometheus style without the `quorumkv_` prefix.
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        Vec::new()
    }
}
