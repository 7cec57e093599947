//! Membership change for the quorum-register protocols (ABD and
//! lease-lock): a sequence of configurations, each decided by the one
//! before it (issue 37). Each protocol routes the messages ([`ChangeMsg`])
//! and tags its requests with the epoch they run in; the rules are here.
//!
//! The design follows the reconfigurable atomic storage of RAMBO (Lynch
//! and Shvartsman, 2002) with its configuration sequence decided by
//! single-decree Paxos among the old configuration, as RAMBO II does, and
//! a stop-the-world state transfer in the manner of Vertical Paxos
//! (Lamport, Malkhi, Zhou, 2009): simpler than RAMBO's concurrent
//! old-and-new quorums, at the cost of a short pause of the key space
//! while a change runs (about three round trips).
//!
//! Configuration `k` ([`Config`]) has an epoch `k` and its members; epoch
//! 0 is the cluster file's (minus its spares). Every request names the
//! epoch its coordinator believes in; a replica serves only its own
//! installed epoch, answers an older one with the newer configuration (the
//! protocol's `Moved`: the coordinator adopts it and runs the operation's
//! phase again) and a newer one by asking to be brought up to date
//! ([`ChangeMsg::InstallRequest`]).
//!
//! A change from epoch `k` to `k+1`, run by a [`Proposer`] on any server:
//! 1. **Prepare** (Paxos phase 1) to the members of `k`. A replica that
//!    promises is *frozen*: it serves no request of epoch `k` any more,
//!    and sends its whole store with the promise. Every operation of epoch
//!    `k` that completed did so on a quorum of `k` before those members
//!    froze, so the stores of a promise quorum hold all of them.
//! 2. **Accept** (Paxos phase 2): the members of `k+1` are the value
//!    accepted under the highest ballot among the promises, or the
//!    proposer's own if none: at most one configuration is ever decided
//!    for an epoch.
//! 3. **Install**: the decided configuration and the merged stores go to
//!    the members of both; a replica merges them and serves epoch `k+1`.
//!    The change is done when a quorum of `k+1` installed.
//!
//! So every replica that serves epoch `k+1` holds every write completed
//! before it (the invariant that makes the old quorum safe to forget), and
//! a replica catching up later takes its state from one that installed.
//!
//! A proposer that dies halfway leaves members frozen; a frozen member
//! that sees no installation for a while runs the change itself, proposing
//! no change: Paxos then finishes whatever was accepted, or moves the same
//! members to the next epoch. Epochs and ballot rounds are checked: at
//! `u64::MAX` a change is refused.
//!
//! * `msg.rs`: [`Config`], [`Ballot`], [`ChangeMsg`], the injected bugs
//!   and the store a change transfers ([`Registers`]);
//! * `epochs.rs`: [`Epochs`], every replica's side (what it serves in, its
//!   acceptor state);
//! * `proposer.rs`: [`Proposer`], one change in progress;
//! * `server.rs`: [`Changes`], a server's part: route, run, take over.

mod epochs;
mod msg;
mod proposer;
mod server;

pub use epochs::{Admit, Epochs};
pub use msg::{trailing_epoch, Ballot, ChangeBug, ChangeMsg, Config, Entries, Registers};
pub use proposer::{Outcome, Proposer};
pub use server::{ChangeCounts, ChangeTimer, Changes, STALL_RETRIES};
