//! The contract between a protocol and its drivers, and nothing else: a
//! protocol module imports from here only, never the registry (the list of
//! protocols), so no protocol depends on the others.
//!
//! - `role.rs`: what a role implements and emits ([`Protocol`], [`Out`],
//!   [`Command`], [`Record`], [`LinkEvent`]);
//! - `def.rs`: how a protocol describes itself to the drivers
//!   ([`ProtocolDef`], [`NodeSpec`], [`ClientSpec`], [`InjectedBugs`], …);
//! - `invariants.rs`: per-step invariants a driver checks after every step
//!   ([`StepInvariants`], [`Roles`]), and what it saw pass for
//!   message-level checks ([`Seen`]);
//! - `server_only.rs`: [`ServerOnly`], the short form of a `ProtocolDef`
//!   for a protocol without a client-side coordinator or invariants.

mod def;
mod invariants;
mod role;
mod server_only;

pub use def::{
    client_may_send_fn, client_writer_id, BugInfo, ClientMaySend, ClientSpec, InjectedBugs,
    LinkModel, NamedVariant, NoBugs, NodeSpec, Over, PointRatio, ProtocolDef, ProtocolInfo, Timing,
    Visitor,
};
pub use invariants::{NoInvariants, Roles, Seen, StepInvariants, Stepped};
pub use role::{
    draw_members, read_metrics, Command, Export, LinkEvent, Membership, Metric, Out, Protocol,
    Record,
};
pub use server_only::ServerOnly;
