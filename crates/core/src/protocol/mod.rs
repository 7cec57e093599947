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
pub mod contract;
#[cfg(feature = "lamport")]
pub mod lamport;
#[cfg(feature = "lease-lock")]
pub mod lease_lock;
pub mod options;
#[cfg(any(feature = "abd", feature = "lease-lock"))]
pub mod reconfig;
pub mod registry;
#[cfg(feature = "ring")]
pub mod ring;
#[cfg(test)]
pub mod test_harness;
#[cfg(feature = "zab")]
pub mod zab;

pub use contract::{
    client_may_send_fn, BugInfo, ClientMaySend, ClientSpec, Command, Export, InjectedBugs,
    LinkEvent, LinkModel, Membership, NamedVariant, NoBugs, NoInvariants, NodeSpec, Out, Protocol,
    ProtocolDef, ProtocolInfo, Record, Roles, Seen, ServerOnly, StepInvariants, Stepped, Timing,
    Visitor,
};
pub use options::{NoOptions, OptSpec, ProtocolOptions};
pub use registry::ProtocolKind;
