//! Liveness checks on a finished history, beyond "every operation of the
//! liveness phase completed in time" (which `world/clients.rs` applies as
//! operations complete):
//!
//! * [`stalls`]: after the heal, an operation that fails (refused) although
//!   nothing on its key could have been in its way. A refusal is a definite
//!   outcome, so the bound alone takes it for progress; a protocol that
//!   leaves a lock behind refuses every later operation on the key.
//! * [`starvation`]: under the load phase's saturating writes, spread evenly
//!   over the servers, each server's writers complete a fair share.

use crate::config::SeedParams;
use crate::history::OpRecord;

/// The longest one-way trip of a message once the faults have healed, µs
/// (the slow node's links stay slow).
pub fn slowest_trip_us(p: &SeedParams) -> u64 {
    let slow = if p.slow_node.is_some() { 10 } else { 1 };
    p.latency_us.1 * slow
}

