//! Lease-lock: the blocking quorum protocol of seed 000 §4 — lock a
//! majority of replicas for a key, read, write, unlock.
//!
//! Two roles:
//! * [`Replica`] keeps per key a tag, a value, `locked_by` and
//!   `lock_expiry` (seed 000 §2.2) and applies the §4.2 rules: a LOCK_REQ is
//!   granted if the key is free or its lease has run out (the lease then
//!   starts: `expiry = now + lease`), else denied; UNLOCK clears the lock if
//!   the sender holds it or its lease ran out; READ is always answered;
//!   WRITE only from the holder while its lease runs (applied if the tag is
//!   newer, acknowledged either way), else WRITE_DENIED.
//! * [`Coordinator`] runs one operation (§4.1): LOCK_REQ to all N, stop at
//!   the first Q = ⌊N/2⌋+1 grants (the quorum rule); with Q grants no longer
//!   possible, UNLOCK what it got and fail **definitely** (`Refused`) — or,
//!   with `lock-retry=backoff`, try again later. With the Q locks held:
//!   - get: READ the Q locked replicas → highest tag → UNLOCK → value;
//!   - put / delete: READ → tag = (max.ts + 1, my id) → WRITE to the Q →
//!     Q ACKs → UNLOCK → done. A delete writes a tombstone (`None`).
//!
//! | request (coordinator → replica) | reply (replica → coordinator)         |
//! |---------------------------------|---------------------------------------|
//! | `LockReq { lock, key }`         | `LockGranted { lock, key }` / `LockDenied { lock }` |
//! | `Unlock { lock, key }`          | none                                  |
//! | `Read { lock, key }`            | `ReadReply { lock, tag, value }`      |
//! | `Write { lock, key, tag, value }` | `Ack { lock }` / `WriteDenied { lock }` |
//! | `SyncRequest` (recovering node) | `SyncReply { entries }`               |
//!
//! A lock is a [`LockId`] (the coordinator's writer id, a round number), not
//! the seed's client id: a coordinator serving many clients (proxy mode)
//! runs each operation under its own lock, and each retry under a new one.
//!
//! Decisions where the seed is silent or ambiguous:
//! * **Surplus grants** (after the Q-th, or for a round that already ended)
//!   are released with UNLOCK at once. The seed lets them expire, which for
//!   N = 3 locks the third replica for a whole lease and denies every other
//!   coordinator meanwhile; `surplus-grants=expire` keeps the seed's way for
//!   the comparison.
//! * **WRITE_DENIED** (a lease ran out mid-write) makes a put's outcome
//!   **unknown** (`OpError::Unknown`), never a failure: the replicas that
//!   acknowledged hold the value, and a later get may return it. Failures
//!   before the first WRITE are definite; a deadline during the writes is a
//!   `Timeout`. A write whose tag is not newer under a valid lock (a re-sent
//!   WRITE) is acknowledged without applying: the seed's "otherwise
//!   WRITE_DENIED" is read as "not the holder or expired".
//! * **Lease** default: the op timeout of the node or client (`Timing`; 2 s
//!   in servers, 100 ms in the simulator) unless `lease` is set: a lease
//!   starts at a grant, after the operation began, and the coordinator gives
//!   up (and unlocks) at its op timeout, so a live coordinator never
//!   outlives its lease, and a crashed one blocks its keys for one op
//!   timeout at most. Shorter leases let a slow put lose its lease mid-write.
//! * **Lock budget**: lock rounds and backoff may use the first half of the
//!   op timeout ([`LOCK_SHARE`]); an op still without its locks then fails
//!   definitely. The other half is for READ and WRITE, so a round won at
//!   the last moment does not start writes that the deadline cuts short
//!   (an unknown put, where a refusal was possible).
//! * A **get** fails definitely even when its write-back was cut short: the
//!   write-back only spreads a value some replica already holds.
//! * **Links** (`Unreliable`): every message names its lock round and the
//!   replica checks it, so duplicated, reordered or late messages cannot act
//!   for another round; lost ones are re-sent by the tick (a re-sent
//!   LOCK_REQ is granted again to its holder, a re-sent WRITE acknowledged
//!   again). A LOCK_REQ duplicated after its round ended grants a dead
//!   round; the grant comes back and is released like a surplus one. The
//!   seed's TCP FIFO is not needed. A lost UNLOCK is not re-sent: the lease
//!   ends that lock.
//! * **lock-retry=backoff**: after a denied round, wait uniform in [d/2, d]
//!   with d = 1 ms · 2^(attempt−1) up to 100 ms ([`BACKOFF_BASE`],
//!   [`BACKOFF_MAX`]), drawn from the spec's seed, then a new round; a retry
//!   that would start after the lock budget is not waited for (`Refused`).
//! * **Linearizability**: gets have no write-back (the seed), so a put cut
//!   short — lease expiry mid-write, a coordinator crashing between WRITEs —
//!   leaves its value on fewer than Q replicas, and two later gets can
//!   disagree. `write-back=true` repairs it: puts and gets are then ABD's,
//!   whose argument does not need the locks at all.
//! * Locks are not durable and a replica ignores link events: a restarted
//!   replica forgets its leases, and a vanished client's locks last their
//!   lease (the seed's design; what the stall experiments measure).
//! * **A replica that goes down** (link `Down`: killed, paused, cut off):
//!   a coordinator stops counting on it. An operation holding its lock
//!   before any WRITE releases its locks and locks anew at once; a WRITE
//!   still missing its ack is answered at once as at its deadline (put:
//!   unknown; write-back: refused). Waiting for the op timeout held the
//!   operation's other lock meanwhile, so every key whose lock the dead
//!   replica held was blocked for an op timeout after a SIGKILL
//!   ([`Coordinator::on_down`]; the former rule is the injected bug
//!   `lease-lock-wait-for-down-replica`).
//! * A replica restarted **without its data** (memory mode; the seed's
//!   servers never restart) denies every lock — so it is in no quorum —
//!   until it merged the registers of N−Q+1 peers (`SyncRequest` /
//!   `SyncReply`), as ABD's recovery: [`LeaseNode::recovering`]. It first
//!   waits one lease and counts only snapshots taken after it: its acks from
//!   before the crash may still complete a write in flight to a peer, which
//!   can land only under a pre-crash lock, so within that lease. Until
//!   synced it answers no READ (a lock from before the crash is re-sent).
//!
//! Files: `msg.rs` ([`Msg`], [`LockId`], [`Timer`]); `replica.rs`;
//! `coordinator.rs` (operations, the lock round, backoff, retransmission,
//! deadlines); `phases.rs` (read and write under the locks); `node.rs`
//! ([`LeaseNode`]: replica + proxy coordinator); `reconfig.rs` (what locks
//! add to the shared membership change: a moved coordinator relocks, a
//! write in flight keeps its tag) and `membership.rs` (a server's part);
//! `def.rs` (options and the registration); `bugs.rs`; `counters.rs`; `invariants.rs`
//! ([`LeaseInvariants`], checked by the simulator after every step: no
//! lease taken over, one holder per key); `testing.rs` (test helpers and
//! an in-memory multi-node network).

mod bugs;
mod coordinator;
mod counters;
mod def;
mod invariants;
mod membership;
mod msg;
mod node;
mod phases;
mod reconfig;
mod replica;
#[cfg(test)]
mod testing;

pub use bugs::Bug;
pub use coordinator::{
    Coordinator, CoordinatorConfig, LockRetry, BACKOFF_BASE, BACKOFF_MAX, LOCK_SHARE,
};
pub use counters::Counters;
pub use def::{LeaseLock, LeaseOptions, DEFAULT_LEASE};
pub use invariants::LeaseInvariants;
pub use msg::{LockId, Msg, Timer};
pub use node::LeaseNode;
pub use replica::{KeyState, Replica};
