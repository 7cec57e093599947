//! The protocols `quorumkv sim --protocol` knows, type-erased for the CLI
//! and the sweep: each [`Registered`] entry pairs a [`SimProtocol`] with its
//! [`run_seed`]. This module sits above both, so `protocol` (how a protocol
//! plugs in) does not depend on `run` (how a seed runs).

use crate::config::SimConfig;
use crate::protocol::{Abd, SimProtocol};
use crate::run::{run_seed, SeedReport};
use std::fmt::Debug;

/// A bug of some protocol, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BugInfo {
    pub name: &'static str,
    pub about: &'static str,
}

/// A registered protocol, type-erased for the CLI.
#[derive(Clone, Copy)]
pub struct Registered {
    pub name: &'static str,
    pub promises_liveness: bool,
    pub bugs: fn() -> Vec<BugInfo>,
    pub has_client_coordinator: fn() -> bool,
    /// Run one seed; `Err` = a configuration error (e.g. unknown bug).
    pub run_seed: fn(&SimConfig, u64) -> Result<SeedReport, String>,
}

impl Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("name", &self.name)
            .finish()
    }
}

/// The type-erased entry of protocol `P`.
pub fn register<P: SimProtocol>() -> Registered {
    Registered {
        name: P::NAME,
        promises_liveness: P::PROMISES_LIVENESS,
        bugs: || {
            P::bugs()
                .iter()
                .map(|&b| BugInfo {
                    name: P::bug_name(b),
                    about: P::bug_about(b),
                })
                .collect()
        },
        has_client_coordinator: P::has_client_coordinator,
        run_seed: run_seed::<P>,
    }
}

/// Every protocol the simulator knows. Later protocols add one line each.
pub fn registry() -> Vec<Registered> {
    vec![register::<Abd>()]
}

/// The registered protocol called `name`.
pub fn find(name: &str) -> Result<Registered, String> {
    let all = registry();
    all.iter()
        .copied()
        .find(|r| r.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|r| r.name).collect();
            format!(
                "unknown protocol '{name}' (the simulator knows: {})",
                names.join(", ")
            )
        })
}
