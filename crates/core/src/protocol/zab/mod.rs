//! Zab, the ZooKeeper atomic broadcast (seed 003 chapter 2, §2.2.1 lines
//! 531-692; Junqueira, Reed, Serafini, DSN 2011), as a replicated KV store.
//! PROTOCOLS.md §5.
//!
//! Servers only: a client talks to any server (no client coordinator);
//! writes go to the leader (forwarded by a follower) and are broadcast;
//! only the server the client asked answers, on delivery (Fig. 2.1, line
//! 542). A server is LOOKING, FOLLOWING or LEADING (Fig. 2.2) and runs
//! the three phases in order:
//!
//! 1. **Election** (fast leader election, lines 614-635, `election.rs`):
//!    LOOKING servers broadcast votes `(current epoch, last zxid, sid)` in
//!    numbered rounds, adopt a better vote, and decide when a quorum agrees
//!    (after a tick's wait for a better one). A server that is FOLLOWING or
//!    LEADING answers a looking one with its leader, which it then joins.
//! 2. **Discovery and synchronisation** (lines 637-656, `leader.rs`,
//!    `follower.rs`): FOLLOWERINFO(accepted epoch) → on a quorum, the
//!    leader picks e' above every accepted epoch → NEWEPOCH(e') → each
//!    follower promises e' (persisted, to this leader only) → ACKEPOCH(current
//!    epoch, log summary) → on a quorum, the leader checks its history is
//!    the newest (else it abdicates), sets its current epoch to e' and sends
//!    NEWLEADER(e', H) as ZooKeeper's DIFF, TRUNC + DIFF, or SNAP → the
//!    follower makes its log H (truncating a divergent suffix), sets its
//!    current epoch (persisted) → ACKNEWLEADER → on a quorum the leader
//!    commits H and the broadcast phase begins. Late followers go through
//!    the same steps alone.
//! 3. **Broadcast** (lines 658-668): L1 the leader appends the proposal
//!    (zxid = (e', index)), logs it and sends PROPOSAL to every follower,
//!    any number in flight; F1 a follower logs it (`Record::Entry`) and
//!    ACKs once it is durable; L2 on a quorum of durable logs (the leader
//!    included) the leader COMMITs in zxid order; F2/L3 deliver on COMMIT.
//!
//! | message | from → to | answer |
//! |---|---|---|
//! | `Notify { round, vote, state, led }` | any → any | a notification back, if behind or not looking |
//! | `Recover { life }` | a server that lost its state → all | `RecoverOk { accepted, promised }` |
//! | `FollowerInfo { accepted }` | F → L | `NewEpoch` |
//! | `NewEpoch { epoch }` | L → F | `AckEpoch { cur_epoch, summary }` |
//! | `NewLeader { epoch, sync }` | L → F | `AckNewLeader { last }` |
//! | `Proposal { epoch, entry }` | L → F | `Ack { index }` |
//! | `Commit { epoch, index }` | L → F | — |
//! | `Ping { round, commit, last }` | L → F | `Pong { round, last }` |
//! | `Forward { origin, rid, op }` | F → L | a `Proposal` |
//! | `ReadIndex { rid }` | F → L | `ReadIndexOk { index }` after a quorum round |
//! | `Touch { sessions }` | F → L | — (znode sessions heard of, `znode_sm.rs`) |
//!
//! Quorum rule: a majority, the same in every phase, of every configuration
//! in effect (membership change, `members.rs`, `reconfig.rs`: old and new
//! while a reconfiguration entry is uncommitted). **Crash-tolerance
//! invariant** (lines 683-691): a proposal is delivered anywhere only once
//! a quorum logged it; `advance_commit` asserts it in debug builds.
//!
//! Failures: SC1, a leader crash or a broken link to it (`LinkEvent::Down`)
//! or silence for `sync-limit`: its followers go back to LOOKING and requests
//! they handed to it are answered `Unknown` (never retried). SC2: a leader
//! that heard from no quorum within `sync-limit` steps down. SC3: a
//! follower that returns goes through synchronisation. A gap in the
//! leader's FIFO stream (a proposal, commit or ping beyond the follower's
//! log: messages lost with a connection) also sends the follower back.
//!
//! Reads (`reads.rs`): `read=index` (default, linearizable) confirms the
//! leader with a quorum ping round after noting its commit index, and the
//! serving server answers once it applied that index; `read=log` broadcasts
//! reads; `read=local` is ZooKeeper's local read (line 535), sequentially
//! consistent only. There is no `sync` request for KV (the KV API has
//! none); the znode service (`znode_sm.rs`: ZooKeeper's tree, sessions and
//! watches on this machine) logs all its operations, reads and `sync`
//! included.
//!
//! Where we depart from the seed, and decisions it leaves open:
//! * **The zxid counter is the log index**: it does not restart at 0 with
//!   each epoch. Zxids order the same way (an epoch's proposals are
//!   consecutive in every log), and a truncation point is then a position.
//! * **Votes and the history check compare the current epoch first**
//!   (ZooKeeper's order), then the last zxid: a server whose history a new
//!   leader committed by NEWLEADER alone beats one holding an older epoch's
//!   uncommitted suffix with a higher zxid.
//! * **The new leader's history must be the newest of its ACKEPOCH quorum**
//!   (ZooKeeper relies on the election for it): otherwise it abdicates, so
//!   safety does not rest on the election. The paper's discovery instead
//!   adopts the newest follower history; we never copy history to a leader.
//! * **NEWEPOCH equal to the promised epoch** is accepted again from the
//!   same leader only (the promise records the leader, persisted with the
//!   epoch): a follower that lost its link rejoins the leader of its epoch.
//!   A follower that promised the epoch to a losing candidate could never
//!   join the winner (found by the simulator: a server stalled for good), so
//!   FOLLOWERINFO names the promise and the leader then starts over with a
//!   new epoch. (ZooKeeper accepts an equal epoch from anyone.)
//! * **Stale leaders learn fast**: an established leader announces itself
//!   each tick to the servers outside its broadcast; a server in a newer
//!   epoch answers, and the leader (or a follower of it) steps down at once
//!   instead of after `sync-limit`. A server that is not leading answers a
//!   FOLLOWERINFO with whom it follows; a looking server joins a leader only
//!   if its own history is not newer, and leads once a quorum follows it.
//! * **COMMIT and ACK are cumulative** (FIFO links: "up to index"), which
//!   is the seed's commit-in-order rule without one message per proposal.
//! * **Disk and network in parallel** (as ZooKeeper's leader): the leader
//!   sends a PROPOSAL while its own write is in flight and counts its own
//!   vote only once the driver reports its log durable (`Msg::Logged`, via
//!   `Command::WhenDurable`); a follower ACKs on that report (ignored if a
//!   synchronisation moved `log_gen` since). What leaves with
//!   `send_now`/`reply_now` (PROPOSAL, COMMIT, PING/PONG, FORWARD, read
//!   traffic, answers) reveals only committed state, which is on a quorum's
//!   disks, so none of it waits for this server's later records; many
//!   proposals share each sync (group commit). A leader is established
//!   (serves) once its history is on a quorum's disks, its own included.
//! * **Servers that lost their state** (memory mode, `NodeSpec::lost_state`;
//!   the seed assumes durable state, line 571) recover as in Viewstamped
//!   Replication (`recovery.rs`): first they learn the highest epoch that a
//!   quorum of peers *that kept their state* promised (RECOVER /
//!   RECOVEROK), and accept no NEWEPOCH below it afterwards; until then they
//!   follow and lead no one. They vote for no one, and their FOLLOWERINFO
//!   and ACKEPOCH count in no discovery quorum (an empty history would hide
//!   the proposals they ACKed), until a NEWLEADER of an epoch at least the
//!   learned one synchronised them. A peer that answers RECOVER forgets
//!   what the previous life told it (as on `Down`). Without the first step
//!   a stale candidate (discovery done for epoch e, while e' > e was
//!   established since) could recruit a server that had ACKed e''s
//!   proposals before losing them, and serve older values (simulator seed
//!   2138; `zab-recover-without-epoch` keeps that code). If a majority lose
//!   their state at once, no one leads again: recovery waits for a quorum
//!   that kept its state.
//! * **Snapshots** every `snapshot-every` deliveries (`Record::Snapshot`,
//!   the log below is dropped): restart replays at most that many entries;
//!   a follower behind the leader's snapshot gets SNAP.
//! * **Requests across leader changes**: a write handed to a leader stays
//!   pending when the leader changes: the next history may hold it (it is
//!   then delivered and answered here) or it ends `Unknown` at the op
//!   timeout. It is sent again only when that is known to be safe: the
//!   leader answered `Dropped` (it did not propose it), or a TRUNC removed
//!   our own entry of it (an exact TRUNC, not a SNAP: the new epoch was
//!   promised by a quorum, so no one can commit it any more). A write that
//!   never reached a leader is refused at the op timeout (definite). Reads
//!   in flight at a leader change are refused (a read has no effect). A
//!   write we logged that comes back inside a SNAP (same index and epoch
//!   in the snapshot's history) is answered then, if its answer does not
//!   depend on the state (`StateMachine::blind_answer`: PUT, DELETE).
//!
//! Where each piece lives, from the bottom up (a file imports only files
//! listed before it):
//! * `msg.rs` (messages, zxids, votes), `codec.rs` (byte encoding),
//!   `members.rs` (configurations, their codec and quorum rule), `log.rs`
//!   (log, matching, the configuration entries it holds), `zentry.rs` (a logged znode operation),
//!   `state_machine.rs` (the machine trait, the KV store), `znode_sm.rs`
//!   (the znode machine), `coin.rs` and `measure.rs` (the adaptive coin),
//!   `variant.rs` (broadcast variants and their state), `roles.rs` (each
//!   role's state);
//! * `node.rs`: [`ZabNode`] and its shared state, clients, delivery,
//!   dispatch (the `Protocol` impl);
//! * what each role does, as methods of [`ZabNode`]: `election.rs`,
//!   `leader.rs`, `follower.rs`, `broadcast.rs`, `adaptive.rs`, `reads.rs`,
//!   `recovery.rs`, `sessions.rs` (znode sessions), `reconfig.rs`
//!   (membership change at the leader);
//! * `bugs.rs`, `def.rs` ([`Zab`], options);
//! * `read_rounds.rs`: the read-index rule checked over the messages the
//!   simulator sees pass (a quorum answered a round begun after the read);
//! * `reconfig_invariants.rs`: the membership invariants;
//! * `invariants.rs`: [`ZabInvariants`], checked by the simulator after
//!   every step (one leader per epoch, delivered prefixes agree, nothing
//!   delivered is truncated), holding the read-index rule's state.

mod adaptive;
mod broadcast;
mod bugs;
mod codec;
pub mod coin;
mod def;
mod election;
#[cfg(test)]
mod election_tests;
mod follower;
#[cfg(test)]
mod follower_tests;
mod invariants;
mod leader;
#[cfg(test)]
mod leader_tests;
mod log;
mod measure;
mod members;
mod msg;
mod node;
mod read_rounds;
mod reads;
mod reconfig;
mod reconfig_invariants;
#[cfg(test)]
mod reconfig_tests;
mod recovery;
mod roles;
#[cfg(test)]
mod scenarios;
mod sessions;
mod state_machine;
#[cfg(test)]
mod testing;
mod variant;
mod zentry;
mod znode_sm;

pub use bugs::InjectedBug;
pub use def::{Zab, ZabOptions};
pub use invariants::ZabInvariants;
pub use log::Log;
pub use measure::{AdaptConfig, BACK_AFTER};
pub use members::Members;
pub use msg::{LogEntry, Msg, PeerState, Summary, SyncData, Timer, Vote, Zxid};
pub use node::{Config, Counters, ReadMode, ZabNode};
pub use state_machine::{KvStore, Op, Payload, StateMachine};
pub use variant::Variant;
pub use zentry::ZEntry;
pub use znode_sm::Machine;
