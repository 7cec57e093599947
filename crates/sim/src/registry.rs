//! The protocols `quorumkv sim --protocol` knows, type-erased for the CLI
//! and the sweep. They come from core's one registry
//! (`quorumkv_core::protocol::registry`): a [`Visitor`] turns each
//! [`ProtocolDef`] into a [`Registered`] entry whose `run_seed` is
//! [`run_seed::<D>`](run_seed). No protocol is named in this crate.

use crate::config::SimConfig;
use crate::rounds::{self, RoundReport, RoundSettings};
use crate::run::{run_seed, SeedReport};
use quorumkv_core::protocol::registry::{self as core_registry, ProtocolInfo};
use quorumkv_core::protocol::{InjectedBugs, LinkModel, ProtocolDef, ProtocolOptions, Visitor};
use std::fmt::Debug;

pub use quorumkv_core::protocol::BugInfo;

/// Checks `--opt` pairs against a protocol's options.
pub type CheckOptions = fn(&[(String, String)]) -> Result<(), String>;

/// A registered protocol, type-erased for the CLI.
#[derive(Clone, Copy)]
pub struct Registered {
    pub name: &'static str,
    pub promises_liveness: bool,
    pub has_client_coordinator: bool,
    pub link_model: LinkModel,
    pub bugs: fn() -> Vec<BugInfo>,
    /// Whether `pairs` are valid `--opt` options of the protocol.
    pub check_options: CheckOptions,
    /// Run one seed; `Err` = a configuration error (e.g. unknown bug).
    pub run_seed: fn(&SimConfig, u64) -> Result<SeedReport, String>,
    /// The round model's four runs at one N (`--rounds`).
    pub measure_rounds: fn(&SimConfig, u32, &RoundSettings) -> Result<RoundReport, String>,
}

impl Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("name", &self.name)
            .finish()
    }
}

/// The type-erased entry of protocol `D` (tests register their own).
pub fn register<D: ProtocolDef>() -> Registered {
    Registered {
        name: D::NAME,
        promises_liveness: D::PROMISES_LIVENESS,
        has_client_coordinator: D::HAS_CLIENT_COORDINATOR,
        link_model: D::LINK_MODEL,
        bugs: || {
            (D::Bug::all().iter())
                .map(|&b| BugInfo {
                    name: b.name(),
                    about: b.about(),
                })
                .collect()
        },
        check_options: |p| D::Options::from_pairs(p).map(drop),
        run_seed: run_seed::<D>,
        measure_rounds: rounds::measure::<D>,
    }
}

struct Register;

impl Visitor for Register {
    type Output = Registered;
    fn visit<D: ProtocolDef>(self) -> Registered {
        register::<D>()
    }
}

/// Every protocol of core's registry, in registration order.
pub fn registry() -> Vec<Registered> {
    core_registry::visit_all(&|| Register)
}

/// What `--help` shows of every protocol (name, options, assumptions).
pub fn infos() -> &'static [ProtocolInfo] {
    core_registry::infos()
}

/// The registered protocol called `name` (any case).
pub fn find(name: &str) -> Result<Registered, String> {
    core_registry::visit_named(name, Register).map_err(|_| {
        let names: Vec<_> = registry().iter().map(|r| r.name).collect();
        format!(
            "unknown protocol '{name}' (the simulator knows: {})",
            names.join(", ")
        )
    })
}
