//! Exhaustive small-scope checking (`quorumkv verify`), in the spirit of
//! stateright and TLA+'s TLC: every interleaving of the enabled events of
//! a small configuration (3 replicas, 2 clients, 1–2 operations each on
//! one key), breadth-first up to a depth bound, with the faults the
//! protocol's link model admits (loss, duplication, reordering, resets),
//! one crash (also inside a handler call) and timers that may fire at any
//! point. The real protocol cores run through the same `Protocol` trait as
//! under the simulator and the node runtime.
//!
//! * [`config`]: the scope and its budgets; the workload.
//! * [`choice`]: one event of a path, and its text form.
//! * `state`, `step`: the explored system and how an event executes.
//! * `search`: the BFS (stateless: states are rebuilt by replay).
//! * `sleep`: the partial-order reduction (sleep sets).
//! * `invariants`: the per-step check, called after every event.
//! * [`trace`]: counterexamples printed and parsed back (`--replay`).
//! * [`report`]: counts and the verdict.
//!
//! The method, its bounds and the reduction are in the book's
//! `verification/exhaustive.md`.

pub mod choice;
pub mod config;
mod invariants;
pub mod report;
mod run;
mod search;
mod sleep;
mod state;
mod step;
pub mod trace;

pub use choice::{Choice, Ep};
pub use config::{workload_op, ExploreConfig};
pub use report::{Progress, Report, Violation};
pub use run::{explore, replay_path};
pub use trace::{parse, Replayed};
