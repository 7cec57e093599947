//! quorumkv-sim: the deterministic simulator behind `quorumkv sim`.
//!
//! It drives the real sans-IO protocol cores of `quorumkv-core` (server nodes
//! and client-side coordinators) under a seeded, virtual-time scheduler with
//! injected faults, records each seed's client history and hands it to the
//! linearizability checker. The same seed gives the same run, byte for byte.
//!
//! * Protocols plug in through core's `ProtocolDef` and its one registry;
//!   [`registry::registry`] is that list, type-erased for the CLI (no
//!   protocol is named in this crate).
//! * [`world::World`]: the scheduler, network, nemesis and clients of one seed.
//! * [`run::run_seed`]: one seed, checked; [`sweep::sweep`]: many seeds;
//!   [`panics`]: a core that panics fails its seed, not the sweep.
//! * [`rounds`]: the synchronous round model of seed 004 (`--rounds`).
//! * [`cli`]: `quorumkv sim`.

pub mod checks;
pub mod cli;
pub mod config;
pub mod disk;
pub mod explore;
pub mod history;
pub mod panics;
pub mod registry;
pub mod rng;
pub mod rounds;
pub mod run;
pub mod sweep;
pub mod verify;
pub mod world;

pub use config::{
    ClientMode, Durability, Fault, FaultSet, SeedParams, SeedRange, SimConfig, Timing,
};
pub use registry::{registry, Registered};
pub use run::{run_seed, SeedReport, Verdict};
pub use sweep::{sweep, Summary};
