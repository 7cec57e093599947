//! quorumkv-core: the sans-IO layer.
//!
//! Everything here is a deterministic state machine. A *driver* (the tokio node
//! runtime in `quorumkv-node`, the simulator in `quorumkv-sim`, or a unit test)
//! feeds it client requests, messages and timer firings together with the
//! current time, and executes the [`protocol::Command`]s it returns. Nothing in
//! this crate reads a clock, touches a socket or spawns a thread, which is why
//! the simulator can replay any interleaving from a seed.

pub mod op;
pub mod protocol;
pub mod quorum;
pub mod rng;
pub mod types;
pub mod znode;

pub use protocol::{Command, Out, Protocol};
pub use quorum::{QuorumStatus, QuorumTracker};
pub use types::*;
