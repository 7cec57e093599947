//! ABD: the Attiya–Bar-Noy–Dolev multi-writer atomic register, one register
//! per key (seed 000 §3, seed 002 §3.1).
//!
//! Two roles:
//! * [`Replica`] stores `(tag, value)` per key and answers queries and stores.
//! * [`Coordinator`] runs one client operation in two phases against all N
//!   replicas, waiting each time for the first Q = ⌊N/2⌋+1 distinct replies:
//!   - get: **query** → max tag → **write-back** that (tag, value) → return value;
//!   - put / delete: **query** → tag = (max.ts + 1, my id) → **store** → done.
//!
//! Any two quorums intersect, so a completed store is seen by every later
//! query, and the write-back makes a returned value visible to every later
//! read (no read inversion).
//!
//! Decisions beyond the seeds (see the README, "Where we depart from the seeds"):
//! * Send to all N and take the first Q replies (seed 002), not "the first R
//!   servers" of the configuration (seed 000), which blocks on one slow server.
//! * Fast read: when the Q query replies all carry the same tag, that tag is
//!   already on a quorum and the write-back is skipped (one round trip).
//!   Switch off with [`CoordinatorConfig::fast_read`].
//! * Delete stores a tombstone (`value = None`) with a fresh tag.
//! * Lost messages are retransmitted to the replicas that have not answered;
//!   both replica handlers are idempotent, so duplicates are harmless.
//! * In durable mode a replica persists before it acknowledges a store.
//!
//! [`AbdNode`] puts a replica and a coordinator in one server, for thin
//! clients (RESP, CLI): the *proxy* mode. Client libraries run a bare
//! [`Coordinator`]: the *client-driven* mode the seeds built.
//!
//! Where each piece lives:
//! * [`msg`]: the messages ([`Msg`]) and timers ([`Timer`]);
//! * [`replica`]: the replica role;
//! * [`coordinator`]: the two phases of get / put / delete, retransmits, timeouts;
//! * [`thrifty`]: thrifty mode, each phase to Q replicas instead of N;
//! * [`node`]: [`AbdNode`], the server, and recovery after a restart without data;
//! * [`bugs`]: deliberate bugs for the simulator's self-test;
//! * [`counters`]: counters of things that needed no action.

pub mod bugs;
pub mod coordinator;
pub mod counters;
pub mod msg;
pub mod node;
pub mod replica;
#[cfg(test)]
mod testing;
pub mod thrifty;

pub use bugs::InjectedBug;
pub use coordinator::{Coordinator, CoordinatorConfig};
pub use counters::Counters;
pub use msg::{Msg, Timer};
pub use node::AbdNode;
pub use replica::Replica;
