//! ABD: the Attiya–Bar-Noy–Dolev multi-writer atomic register, one register
//! per key (seed 000 §3, seed 002 §3.1).
//!
//! Two roles:
//! * [`Replica`] stores `(tag, value)` per key and answers queries and stores.
//! * [`Coordinator`] runs one client operation in two phases against all N
//!   replicas (or Q of them first, in thrifty mode), waiting each time for the
//!   first Q = ⌊N/2⌋+1 distinct replies (the quorum rule):
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
//! Messages ([`Msg`]; `op` is the coordinator's id for the operation):
//!
//! | request (coordinator → replica) | reply (replica → coordinator)   |
//! |---------------------------------|---------------------------------|
//! | `Query { op, key }`             | `QueryReply { op, tag, value }` |
//! | `Store { op, key, tag, value }` | `StoreAck { op }` (always sent) |
//! | `SyncRequest` (recovering node) | `SyncReply { entries }`         |
//!
//! Queries and stores name the configuration epoch their coordinator runs
//! in; a replica of a newer one answers `Moved { op, config }`. Membership
//! change (`Prepare` … `InstallRequest`) is in `reconfig.rs`.
//!
//! A replica that restarted without its data (memory mode) answers no query
//! until it merged the stores of f+1 = N−Q+1 peers (seed 002's recovery mode
//! `r`; seed 000's replicas never restart): see [`AbdNode::recovering`].
//!
//! Where each piece lives (one file each, tests beside the code):
//! * `msg.rs`: [`Msg`] and the [`Timer`]s;
//! * `replica.rs`: [`Replica`], the `(tag, value)` store and its two handlers;
//! * `coordinator.rs`: [`Coordinator`], the two phases of get / put / delete,
//!   the quorum rule, retransmits and timeouts; [`CoordinatorConfig`];
//! * `thrifty.rs`: thrifty mode, each phase to Q replicas instead of N;
//! * `node.rs`: [`AbdNode`], replica + coordinator in one server, and recovery;
//! * `reconfig.rs`: membership change, configurations decided by Paxos
//!   among the previous one, with a state transfer ([`Config`], [`Ballot`]);
//! * `membership.rs`: a server's part in it (routing, takeover, the
//!   `quorumkv member` view, the simulator's draw);
//! * `bugs.rs`: [`InjectedBug`], deliberate bugs for the simulator's self-test;
//! * `def.rs`: [`Abd`], the registration: options, link model, crash bound;
//! * `invariants.rs`: [`AbdInvariants`], checked by the simulator after
//!   every step (a tag names one value; one configuration per epoch);
//! * `counters.rs`: [`Counters`] of things that needed no action;
//! * `testing.rs`: helpers of the unit tests.

mod bugs;
mod coordinator;
mod counters;
mod def;
mod invariants;
mod membership;
mod msg;
mod node;
mod reconfig;
mod replica;
#[cfg(test)]
mod testing;
mod thrifty;

pub use crate::protocol::reconfig::{Ballot, Config};
pub use bugs::InjectedBug;
pub use coordinator::{Coordinator, CoordinatorConfig};
pub use counters::Counters;
pub use def::{Abd, AbdOptions};
pub use invariants::AbdInvariants;
pub use msg::{Entries, Msg, Timer};
pub use node::AbdNode;
pub use replica::Replica;
