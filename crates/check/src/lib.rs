//! quorumkv-check: is a recorded concurrent history linearizable?
//!
//! * [`history`]: the operations, outcomes and the JSONL format;
//! * [`recorder`]: a lock-free-on-the-hot-path recorder for clients and the bench;
//! * [`formats`]: JSONL, JSON lines with invoke/complete/ok, Jepsen EDN
//!   histories, Jepsen register logs, the EDN key-value format;
//! * [`check()`]: the Wing–Gong/Lowe search with memoisation, per key, in parallel;
//! * [`znode`]: the znode service's model and the lock recipes' mutual-exclusion check;
//! * [`html`]: a self-contained picture of a violation; [`cli`]: `quorumkv check`.
//!
//! The design follows Porcupine (anishathalye/porcupine): a small API, a
//! model with `init`/`step`, a memo on (linearized set, state), partitions
//! checked in parallel, and a visual explanation of a failure.
pub mod cli;
pub mod formats;
pub mod gen;
pub mod history;
pub mod html;
pub mod recorder;
pub mod report;
pub mod znode;

mod check;
mod edn;
mod explain;
mod foreign;
mod model;
mod pairing;
mod schedule;
mod search;

pub use check::{
    check, check_spec, check_with, KeyReport, Options, Report, SpecOp, Verdict, Violation,
};
pub use history::{History, Op, Operation, Outcome};
pub use model::{Model, Spec};
pub use recorder::{ClientLog, OpHandle, Recorder};
pub use search::Progress;
