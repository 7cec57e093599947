//! What is checked on every step of every path.
//!
//! [`check_step`] is THE call point for per-step invariants: it runs after
//! every event the explorer executes, on the state that event produced,
//! and a violation fails the path with its trace. The protocol's own
//! invariants (`ProtocolDef::Invariants`, the simulator's per-step hook)
//! run after every handler call of the step (`System::check_invariants`);
//! the first one broken is reported here. Linearizability, the other
//! property, is checked by the search whenever an operation completes
//! ([`super::search`]).

use super::state::System;
use quorumkv_core::protocol::{Protocol, ProtocolDef};

/// Per-step invariants of `s`; `Err` names the violation.
pub(super) fn check_step<D: ProtocolDef>(s: &System<'_, D>) -> Result<(), String> {
    // Generic: a core that knows it cannot go on says so.
    for (i, n) in s.nodes.iter().enumerate() {
        if let Some(why) = n.core.as_ref().and_then(|c| c.fatal()) {
            return Err(format!("n{} is fatally stuck: {why}", i + 1));
        }
    }
    match &s.violation {
        Some(why) => Err(why.clone()),
        None => Ok(()),
    }
}
