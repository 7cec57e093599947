//! Lamport mutex: a replicated store whose writes take a distributed lock
//! by Lamport's mutual-exclusion algorithm (seed 002 §3.2; Lamport, "Time,
//! Clocks, and the Ordering of Events", 1978). PROTOCOLS.md §3.
//!
//! Clients talk to one server, which serves them alone (no client-side
//! coordinator). Every server holds the whole store:
//! * **GET** is answered from the local store (§3.2.1 item 2).
//! * **PUT / DELETE** (§3.2.1 items 2-4): take the lock, apply locally,
//!   SERVER_WRITE to every peer, wait until every peer acknowledged (the
//!   seed's "keep attempting to distribute the write"), answer, release.
//!
//! The lock, per scope (the store, or one key with `lock-scope = key`):
//! 1. Request: clock += 1; queue `(clock, my id)`; REQUEST_LOCK to all peers.
//! 2. On REQUEST_LOCK: queue it, answer REPLY_LOCK at once.
//! 3. Enter when my request heads my queue (order: clock, then node id)
//!    **and** I received a message stamped later than it from every peer.
//!    With FIFO links the second half means no earlier request is still on
//!    its way; the reply of step 2 provides that message at the latest.
//! 4. Leave: RELEASE_LOCK to all; everyone drops the request.
//!
//! Every message carries the sender's clock; a receiver moves its clock
//! past it. SERVER_WRITE is queued with its request on arrival and applied
//! once that request heads the queue (§3.2.2 item 4), then acknowledged.
//!
//! | message (server → server)              | answer                         |
//! |----------------------------------------|--------------------------------|
//! | `RequestLock { req, scope }`           | `ReplyLock { req }` (always)   |
//! | `ServerWrite { req, scope, key, value }` | `WriteAck { req, applied }`  |
//! | `ReleaseLock { req, scope }`           | —                              |
//! | `Outstanding { reqs }` (after `Up`)    | `ReplyLock` for each           |
//! | `SyncRequest` (recovering, rejoining)  | `Outstanding`, `SyncReply { entries, recovering }` |
//! | `Repair { entries }` (recovery done)   | —                              |
//! | `Evicted` (lock timeout)               | the receiver rejoins (`SyncRequest`) |
//! | `Commit { req, scope, key, value }` (restarted holder) | `WriteAck { req }` |
//! | `Resolve { req, scope, commit }` (its verdict) | —                    |
//! | `Orphans { staged }` (polling a holder) | the holder commits those it forgot |
//!
//! No quorum: every active peer must answer (a lock reply, a write ack).
//!
//! Where we depart from the seed, and decisions it leaves open:
//! * **REPLY_LOCK is never deferred.** The seed holds back its reply while
//!   its own request lacks replies (§3.2.2 item 3) and enters only with
//!   every reply: two servers requesting at once wait for each other
//!   forever (N = 2 suffices). Kept as [`InjectedBug::SeedDeferral`].
//! * **Tags.** A write carries its request's `(clock, node, life)` as
//!   version. Writes are applied in lock order without comparing versions
//!   (as the seed; a version check would hide a broken lock, and
//!   `out_of_order_applies` counts what it would have caught), except one
//!   whose turn comes when a *merge* (recovery, `Repair`) brought a newer
//!   version of its key: a later write can arrive that way ahead of an
//!   earlier one still staged in the queue (its RELEASE_LOCK lost, the
//!   holder's `Outstanding` on its way). Applying it then put a completed
//!   delete back over the later put (sim seed 272, N = 3): it is skipped
//!   (`superseded`).
//! * **Op timeout.** A write still waiting for the lock at the op timeout
//!   is withdrawn (RELEASE_LOCK) and refused (definite: it never entered).
//!   One inside its critical section is already applied here: the client
//!   gets `Timeout` (unknown) and the write still runs to completion.
//! * **Links** (`LinkModel::FifoReliable`). `Down` changes nothing: the
//!   peer may only have lost the connection while holding the lock, so its
//!   requests stay queued. On `Up` each side sends `Outstanding` (its full
//!   list of queued requests: the peer drops the others, whose RELEASE_LOCK
//!   was lost, and queues and answers these) then re-sends unacknowledged
//!   SERVER_WRITEs (§3.2.1 item 3). Until the peer's own `Outstanding`
//!   arrives (we ask with `Poll`), after our `Up` or our restart, its
//!   messages do not count for the entry rule: the reset may be seen on
//!   our side only (`lock.rs`, `unsync`; sim seeds 104 and 118).
//! * **Polling** (found by the simulator: `Up` may reach one side only,
//!   and a message sent just before a reset or a pause can vanish). Every
//!   tick a recovering server sends `SyncRequest` again to each peer that
//!   has not answered, and any other server `Poll`s each peer it has
//!   awaited for a whole tick (its reply or ack, or its request heading a
//!   queue with others behind): it resyncs to it, and the peer answers
//!   with its own resync (`Outstanding` drops a request whose RELEASE_LOCK
//!   was lost; unacknowledged writes go again). The tick runs while any
//!   queue is non-empty or the server recovers.
//! * **`lock-timeout`** (§4.4.1's "fair timeout"; 0 = off, the seed). A
//!   peer we wait for (its reply or ack to one of our writes, or its
//!   request heading a queue with others behind it) that stays silent that
//!   long is evicted: its requests leave our queues
//!   (a write of theirs already queued here still applies, in order), we
//!   stop waiting for it and ignore it, and send it `Evicted`. An evicted
//!   server refuses its waiting writes, answers `Unknown` for one inside
//!   its critical section, withdraws them and rejoins as in recovery.
//!   This buys liveness with safety: a holder that was only slow (paused,
//!   partitioned) keeps writing while another server enters, which the
//!   simulator should show; the stall of a crashed holder becomes about
//!   one lock timeout.
//! * **Recovery** (§2, `r`; `NodeSpec::lost_state`: a restart in memory
//!   mode, or `server --recover`). The server asks every peer for its store
//!   (`SyncRequest`); each peer first drops the requests of the server's
//!   previous life and re-sends its own (`Outstanding`), then sends its
//!   store. The recovering server takes part in locking meanwhile (queues,
//!   replies, applies writes) but refuses clients. With every peer's store
//!   merged (newest version per key; a peer recovering too has nothing to
//!   give), it pushes the merge to all (`Repair`): a holder that crashed
//!   mid-broadcast left its write on some servers only.
//! * **`read-wait`** (candidate repair of local reads, which are not
//!   linearizable: a read at the holder sees a write that a later read
//!   elsewhere does not). SERVER_WRITE is staged everywhere and
//!   acknowledged; the holder applies at its release, its peers when the
//!   RELEASE_LOCK arrives (from the queue's head again); reads of a key
//!   with a staged write wait, up to the op timeout.
//! * **A holder that crashes inside its critical section** (`read-wait`)
//!   leaves its write staged on the peers that got it. They keep it staged
//!   (its key's reads wait) when its new life syncs (`orphan` slots; its
//!   `Outstanding` cannot drop them) and list every staged write in their
//!   `SyncReply`, with the requests of its previous life they queued
//!   without a write. The new life commits such a write iff some peer
//!   applied it, or no peer queued it without the write and every peer
//!   not recovering staged it (a holder answers Done only after every
//!   ack); else it aborts it (`Resolve`, at once).
//!   **A commit is run like a live holder's write**: the holder stages
//!   the write itself (its reads of the key wait, its later requests
//!   queue behind it), sends `Commit` (the write, with its data) to every
//!   peer, and only once every peer acknowledged applies it (unless a
//!   version as new is there) and sends `Resolve`; a peer that lost its
//!   state meanwhile (`SyncRequest`) gets `Commit` again. A peer stages
//!   a `Commit` it does not hold (a recovering one when its recovery
//!   ends) unless a newer version of the key is applied there. Why: a
//!   peer that is recovering when the holder asks is no witness, yet it
//!   may have lived through the write without ever getting it (the
//!   SERVER_WRITE on a slow link died with the holder); applying at once
//!   let the holder and the witnesses serve the value while that peer
//!   finished its recovery from stores taken before the write and served
//!   the old one (sim seed 91). With `Commit`, nobody applies before
//!   every server holds the write staged. Two more holes the simulator
//!   showed: a holder whose recovery heard of an orphan from nobody
//!   (every peer was recovering) left it staged for good, its key's
//!   reads waiting past the op timeout (the liveness failures): peers
//!   polling a holder for their orphans now send them (`Orphans`) and it
//!   commits those it has no verdict for (safe: the write's outcome was
//!   unknown to its client, and versions keep a later write on top); and
//!   a recovering server lists the writes it will stage (a `Commit` may
//!   have reached it only) in its `SyncReply`. A verdict is re-sent with
//!   every resync, and peers poll a holder whose orphans they keep. A
//!   recovering server stages the other holders' staged writes it is told
//!   of, and a holder re-sends its write to a peer that lost state (its
//!   ack came from the previous life). The former rule (apply at the
//!   sync) is [`InjectedBug::ApplyOrphans`].
//! * **A recovery needs a source.** A recovering server ends its recovery
//!   only once every peer answered *and* at least one of them held the
//!   state (was not recovering itself); with only recovering answers it
//!   asks them all again, every tick. Ending with answers from recovering
//!   peers only let it serve, and count as holding the state (the
//!   simulator's crash bound counts only unavailable servers), with
//!   nothing: sim seed 566 (N = 3), where the last two holders of a
//!   completed delete then crashed. With every server having lost its
//!   state at once (memory mode, or `server --recover` everywhere) there
//!   is nothing to recover from: once every peer has said so (`lost` in
//!   its `SyncReply`: it lost its state and merged nobody's yet) for two
//!   op timeouts, the server gives up (`Protocol::fatal`; the node runtime
//!   logs why and exits with an error) instead of answering "recovering"
//!   for ever. Not at the first such round: a peer that copied a store
//!   just before its source was lost answers with it a round later.
//! * **Lives.** A request id carries its requester's life
//!   (`NodeSpec::incarnation`; a durable server takes one above the last
//!   on its disk), and `Outstanding` its sender's: a restarted server's
//!   new life's
//!   `Outstanding` must not release (as a lost RELEASE_LOCK) a request of
//!   its previous life, whose staged write only its verdict may apply: a
//!   peer that learnt of that write after the new life synced with it
//!   never marked it orphan, and applied a write never finished (sim seed
//!   291, N = 5). Such a request becomes an orphan there, as on
//!   `SyncRequest`.
//!
//! * **Acks across a reset.** When a peer's link comes back `Up`, every
//!   write (and orphan commit) in progress waits for its ack again: the
//!   peer may have restarted (its new SyncRequest still on its way), and
//!   an ack of its previous life let a holder answer Done for a write the
//!   new life never got; the holder's next life, told the request was
//!   queued there without its write, then aborted it (sim seed 786,
//!   N = 5). The former rule is [`InjectedBug::AckAcrossResets`].
//!
//!   Simulator (`quorumkv sim --protocol lamport --replicas N`): seeds
//!   0..2000, `--faults delay,crash,pause`: N = 3: 0 failures, N = 5: 0
//!   (before these rules: 5 and 7); seeds 0..10000, `--faults all`: N = 3:
//!   0, N = 5: 0 (before: 22 and 65).
//! * **`max_crashed` = N − 1**: a write needs every server, so while one is
//!   down writes stall; but data survives while one server lives, and
//!   returning servers recover from the rest, after which writes resume.
//!   The bound is for servers that forget (memory mode); durable servers
//!   survive every server down at once (below).
//!
//! ## Durability (`--durability fsync|buffered`; issue 32)
//!
//! The seed keeps its store in its own LSM tree (§3.2.1 item 2: "at least
//! placed in the c0 tree") and never says what survives a crash. Here a
//! durable server persists, before anything it sends or answers in the
//! same handler call leaves (`durable.rs`: the call's records go in front
//! of its commands; the driver holds a `Send`/`Reply` until the records
//! before it are durable, with group commit):
//! * **The applied store** (`Record::Register`, key → version, value):
//!   what a read answers, and what the holder's Done covers (§3.2.1 items
//!   2-3: it applies at its release, and answers after).
//! * **The staged writes** (`Record::Meta` `lamport/staged/<scope>`: each
//!   scope's SERVER_WRITEs queued with their requests, not applied yet,
//!   with their release marks). A WriteAck is a promise (§3.2.2 item 4):
//!   the holder answers Done once every server acknowledged, so every
//!   server must still hold the write after any crash, all of them at
//!   once included; it leaves only once the staged write is on disk. The
//!   same holds for a `Commit`'s ack. A staged write's end is persisted
//!   after the value it applies (a crash between the two leaves the write
//!   applied and staged, which the restart drops; the other order loses
//!   it: [`InjectedBug::ReleasePersistedBeforeWrite`];
//!   [`InjectedBug::AckBeforeSync`] acknowledges before the sync).
//! * **The clock's mark** (`lamport/clock`, in blocks of [`CLOCK_BLOCK`]):
//!   no message stamped above the mark leaves, and a restart takes the
//!   mark as its clock, so a new life's requests (and versions) come after
//!   every one it made before: Lamport's IR1 across crashes. One record
//!   per 65 536 ticks, not one per message.
//! * **The life** (`lamport/life`): a restart takes one above it (the
//!   runtime's boot id is random; a counter never repeats).
//! * **The holder's own in-flight write** is one of the staged writes: a
//!   restarted holder commits its previous life's writes it finds on its
//!   disk as it commits those its peers report (`Commit`, then `Resolve`;
//!   committing is always safe, the outcome was unknown or Done).
//!
//! Not persisted: lock requests without a write (a restarted server's
//! peers re-send theirs, `Outstanding` on `Up`, before any later message,
//! so the entry rule still sees them; its own died with their clients'
//! connections), replies and acks received, verdicts (a peer still
//! staging an orphan polls for it, and it is committed again).
//!
//! **A restart with its data resumes at once, without peer help**
//! (without `lock-timeout`, the seed's setting): every write answered
//! Done was acknowledged by every server, so it is in the restarted
//! server's store or staged there; a staged one is applied when its
//! holder's `Outstanding` (or a poll of the holder) shows it released, or
//! committed by the holder's next life. Writes still in progress wait
//! for this server's ack, which it gives once the holder re-sends them.
//! So **a crash of every server at once** loses nothing acknowledged:
//! each comes back with every Done write, and serves. With a lock
//! timeout, peers may have evicted the server while it was down and
//! completed writes without it: it resyncs from every peer first, its own
//! store as the base (recovery, not `lost`). (All of them down at once
//! with a lock timeout then waits for a peer that is not recovering: a
//! known limit.) In memory mode a restart is a recovery, as before, and a
//! loss of every server at once is reported and the server exits.
//!
//! Where each piece lives:
//! * `msg.rs`: [`Msg`] (clock + [`Body`]), [`ReqId`], [`Scope`], [`Timer`];
//! * `queue.rs`: the per-scope lock queues; `store.rs`: the local copy;
//! * `node.rs`: [`LamportNode`], its state, client entry points, dispatch;
//! * `lock.rs`: the lock rules and the critical section;
//! * `recovery.rs`: links coming back, recovery, the lock timeout;
//!   `recovering.rs`: what a recovering server has learnt so far;
//! * `durable.rs`: what is persisted, restore, the restart; `disk.rs`: the
//!   records' keys and encodings and the persistence bookkeeping;
//! * `bugs.rs`: [`InjectedBug`]; `def.rs`: [`Lamport`], options, bounds;
//! * `invariants.rs`: [`LamportInvariants`], checked by the simulator after
//!   every step (one server in a critical section per scope);
//! * `testing.rs`: a FIFO in-memory cluster for the unit tests.

mod bugs;
mod counters;
mod def;
mod disk;
mod durable;
mod invariants;
mod lock;
mod msg;
mod node;
mod queue;
mod recovering;
mod recovery;
mod store;
#[cfg(test)]
mod testing;

pub use bugs::InjectedBug;
pub use counters::Counters;
pub use def::{Lamport, LamportOptions};
pub use disk::{Kept, CLOCK_BLOCK};
pub use invariants::LamportInvariants;
pub use msg::{Body, Entry, Msg, ReqId, Scope, Staged, Timer};
pub use node::{Config, LamportNode, LockScope};
