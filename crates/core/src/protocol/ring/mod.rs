//! The ring atomic storage of Guerraoui, Kostić, Levy and Quéma ("A High
//! Throughput Atomic Storage Algorithm", seed 004; PROTOCOLS.md §4), one
//! register per key. Pseudo-code lines are cited as pc N (seed lines 58-189).
//!
//! Servers form a ring in id order; each sends only to its successor, the
//! next live server (§2). Clients talk to any one server (proxy only).
//! * **Read** (pc 76-84): with no pending pre-write newer than the value
//!   held, answer at once; else park until a write with a tag >= the
//!   highest pending one is applied here, and answer the value then held.
//! * **Write** (pc 18-52): queued in the write_queue; when the queue
//!   handler starts it, tag = `[max(highest pending ts, ts) + 1, i]` (pc 23)
//!   with `i` the writer id (node id + incarnation), and above any ts this
//!   server issued for the key (a void copy, below, leaves no trace, and a
//!   tag must never name two writes). It is pending here and a `PreWrite`
//!   goes round; every server forwards it and holds it pending (pc 71).
//!   Back home, the origin applies it and sends a `Write` round (pc 32-37);
//!   servers apply it if newer and drop it from pending (pc 42-48); back
//!   home again, the client gets `Done` (pc 49-50).
//! * A pending tag at or below the value held holds no read up (it cannot
//!   make the value older). A pre-write that arrives when its tag is
//!   pending here or its write passed already is a re-sent copy: dropped,
//!   the first copy does the round (otherwise it leaves pending entries).
//!
//! Per key: `ts, id, v`, pending_write_set, parked reads ([`Register`]).
//! Per server (fairness across keys): write_queue, forward_queue, nb_msg.
//!
//! | message | from → to | meaning |
//! |---|---|---|
//! | `PreWrite(entry)` | predecessor → successor | phase 1: hold it pending |
//! | `Write(entry)` | predecessor → successor | phase 2: apply it |
//! | `Credit { received }` | successor → predecessor | flow control (ours) |
//!
//! **The queue handler** (pc 53-75 are garbled; rebuilt from lines
//! 205-209). It runs whenever the successor may take a message:
//! ```text
//! if forward_queue = ∅:                       (pc 54)
//!     nb_msg[p] ← 0 for all p                 (pc 55)
//!     if write_queue ≠ ∅: write(write_queue.first); nb_msg[i] += 1
//! else:
//!     p_j ← the origin in forward_queue with the least nb_msg
//!           (ties: the oldest message)        (pc 61-63)
//!     if write_queue ≠ ∅ and nb_msg[i] < nb_msg[p_j]:
//!         write(write_queue.first); nb_msg[i] += 1      (pc 65-66)
//!     else:
//!         m ← first message of p_j in forward_queue; send m to successor;
//!         pending ∪= m.tag if m is a pre_write; nb_msg[p_j] += 1  (pc 68-73)
//! ```
//! Ties go to forwarding: a server favouring its clients stops the ring
//! (line 207). A write message made at home (pc 37) and re-sends after a
//! crash (pc 88-91) go first. "May take a message" is a credit window
//! (`window`, default 16 messages in flight): the seed's model sends one
//! message per round (§2 line 50); without a bound the queues never fill
//! and no rule is needed. The successor credits on *receipt*, so the ring
//! cannot deadlock on full windows. Counts and credits belong to the
//! connection, not the view: a credit is never fenced (seed 2370 at N = 5:
//! credits that came while their sender was out of the view were dropped,
//! and its window stayed closed once it was back).
//!
//! **Failures** (perfect failure detector: `on_link(Down(Peer::Node(j)))`,
//! TCP close or heartbeat loss, §2). `j` leaves the view for good.
//! * (a) **Takeover.** A crashed origin's messages would circulate for
//!   ever (writes) or stay pending everywhere (pre-writes), and reads wait
//!   on their tags. Its *live predecessor* becomes their home: a message
//!   that reaches it went past every other live server. It converts their
//!   pre-writes into writes and ends their writes, and at the crash it does
//!   so at once for those pending or queued here (they came round already;
//!   re-sent, they would be dropped as copies on the way). If the taker
//!   crashes too, its live predecessor takes over both.
//! * If `j` was the successor, link to the next live server and re-send,
//!   first, the latest write of every key, the writes forwarded lately
//!   (the last 1024: `j` may have swallowed older ones than the latest)
//!   and every pending pre-write (pc 85-92). Copies that went past already
//!   are dropped (pre-writes) or harmless (writes: idempotent, they end at
//!   their home). A re-send drops the copies an earlier one left queued
//!   (seed 1836 at N = 5: crashes in a row piled them up in front of a
//!   client's pre-write), and a server sends each write once per successor
//!   link (`Link::writes`; the link loses nothing while both ends live, and
//!   a new successor gets it again): otherwise every re-sent copy goes round
//!   to its home, and a slow ring stayed busy with them past the liveness
//!   bound (seed 11 at N = 5).
//! * (b) nb_msg forgets `j`, and any crashed origin after each send: its
//!   leftovers count 0, so they drain first and free the reads on them.
//! * An own write past its pre-write round is acknowledged by any write of
//!   the same key at or above its tag (its own write message may have died
//!   in a crashed successor: every server already has it pending or
//!   applied, so it is atomic).
//!
//! **Retried writes (c)** (`dedup.rs` has the rules and the argument).
//! Clients re-send to another server on timeout (line 191) with the same
//! `OpId`, which ring messages carry. A client write is `Done` at once if
//! its operation was applied here ([`OpTable`], bounded), waits if a copy
//! of it is pending here, and only else starts a copy. Two copies can
//! still start (a retry at a server the first has not reached): a copy
//! reaching a server that applied the operation or holds a *lower* copy
//! pending is *voided*: it goes round, clearing pending entries, and is
//! never applied. A void copy back home with no other copy left starts the
//! operation again (the lower copy died in crashes). A copy whose own tag
//! was applied here is no second copy and is never voided: its void would
//! clear pending entries ahead of its own write (seed 264 at N = 3 with
//! rejoin on: a new life got an old life's pre-write its taker had applied).
//!
//! **Rejoin (d)** (`rejoin.rs`; on by default, `rejoin=off` keeps a
//! restarted server fenced for ever). A restarted server was dropped from
//! every view (its disk, if any, keeps its registers: see Durability): it
//! starts *outside*, refusing clients (definite) and ignoring ring messages.
//! * Lives: every server writes under its writer id (node id plus
//!   incarnation), and a message's life is `tag.writer`. A round ends at
//!   `home` (`Entry::home`: the origin, or the taker of a converted write)
//!   while that node is in the view, *whichever life*: a new life sits where
//!   the old one sat, so a message that reaches it went past every other
//!   live server. An old life's pre-write reaching the new life is taken
//!   over (`taken`), never taken for its own (`own` is per life).
//! * The restarted `r` sends `Join` to its first member predecessor that the
//!   failure detector does not report down, again whenever that changes
//!   and on a timer (`join_retry`: the driver may open the new life's
//!   links after `on_start`). A server outside keeps a `Join` (and any
//!   `ViewChange`) until it is in; one in the view that is not `r`'s live
//!   predecessor passes it there; copies, and `Join`s of servers down
//!   again, are dropped.
//! * `r`'s live predecessor `p`, in one handler: bumps the view, adds `r`,
//!   sends `Welcome` (view, lives, registers with their pending sets,
//!   applied op ids, writes seen and forwarded lately) and makes `r` its
//!   successor. The link is FIFO (`LinkModel::Reliable`): the snapshot
//!   precedes every later message, so `r` sees all that went past `p`.
//! * Pending entries of the snapshot did not go *through* `r`: they are
//!   *owed*. A copy that comes is passed on once instead of dropped, and
//!   if `p` crashes first `r` passes them on itself, with the writes `p`
//!   applied but had not sent (its `ready` queue), and re-sends what it
//!   holds (what `p` sent its old successor may have died with `p`).
//! * `r` installs the snapshot (and crashes at once the servers its own
//!   detector reported down while it was outside), sends `ViewChange`
//!   first to its successor (which fences senders outside its view), and
//!   each server adds `r` and passes the `ViewChange` on, round to `r`.
//!   `r` serves clients only then: a server that does not know `r` may
//!   think itself alone and end a write without it. A new successor (a
//!   crash) gets the known joins again, before any ring message.
//! * **Who may be let in** (seeds 144, 554 and 1763 at N = 3: a view
//!   that misses a server already in made two rings). The live predecessor
//!   *holds* a `Join` while some member its failure detector reports up is
//!   neither in its view nor known to be joining (its `Join` passed here);
//!   it tells the view of a held `Join` once, so two holders waiting on each
//!   other's joiner both learn. Servers outside pass the `Join`s they keep
//!   on towards the ring. With rejoin on, a server whose view misses a
//!   member reported up sends no ring message until its view is complete:
//!   its successor may be wrong and a round could end without that member.
//! * A `Join` from a life already in the view: its `Welcome` died with the
//!   welcomer (seed 66 at N = 5). Its live predecessor welcomes it again
//!   (once per life), counts the link from zero and re-sends. `Gone`
//!   notices received while outside are applied after the `Welcome` (a
//!   `Down` seen outside may be hidden by the new life's `Up`, seed 22).
//! * `Gone { node, life }`: each server tells its successor of the crashes
//!   its detector reports; a server welcomed lately may have seen that
//!   `Down` while outside, with `node` still in its snapshot. The life
//!   keeps a notice about an old life from removing a new one, and a late
//!   `ViewChange` of a life seen crashing is dropped.
//! * Takeovers wait while the view misses a live member (`take_over`,
//!   seed 112 at N = 5): a server that thinks itself alone must not end a
//!   round a newcomer never saw. A `Join` straight from a node ends the
//!   other life of it that the view counts in (`join_from_life`, seed 5).
//! * **Laps** (`lap.rs`, seed 110 at N = 5): a pre-write back home at a
//!   server that welcomed a joiner since it began (or taken over: start
//!   unknown) goes round once more as a `Lap` before home applies it: the
//!   joiner's snapshot came from home, which had not seen it yet.
//! * **Writes again** (`write_again`, fuzz seed 7103 at N = 7): a write
//!   whose round ends at a server whose `Welcome` carried its pre-write
//!   pending passed the joiner's place before the joiner came: it goes
//!   round once more from there, or the joiner keeps the entry pending.
//!   A taker re-sends its own lap, not the one it saw pass (seed 3790).
//!   That round may die in crashes; a copy of a pre-write whose write was
//!   applied here is answered with the write, round to the predecessor
//!   (`write_round_for`, fuzz seed 6634; pc 41-48).
//! * A taker whose own lap came round ends the pre-write without a second
//!   lap (`lapped`, seed 19442); a round that would end at a taker waits
//!   while its view misses a member reported up (`end_waits`, seed 5111).
//! * **Rounds sent home** (`send_home`, seed 1137 at N = 3): a server that
//!   welcomes `r` sends it, after the snapshot, every pre-write it holds
//!   pending whose round ends at `r` (any life of `r`), as a pre-write:
//!   its only copy may have died with `r`'s old life (re-sent past the
//!   crash, the next server dropped it as a copy, and nobody took it over:
//!   the view missed `r`, reported up, until `r` joined and was its home
//!   again). At `r` it takes one more lap before it is applied.
//! * **Hails** (`hail`, seed 1236 at N = 3): a server in the view whose
//!   failure detector reports up a member its view misses sends it `Hail`;
//!   that member, if in, answers with its own `Hail` (first: the hailer
//!   fences ring messages from outside its view) and counts the hailer in
//!   (not into `lives`: first lives are in none). Outside, a hail is dropped.
//!   Two servers in, each missing the other, are both `uncertain` and send
//!   nothing; without the hail nothing else would tell them (a `Join` that
//!   passed a server leaves a stale `joining` entry, so `blocked` can let a
//!   joiner in with a view that misses a server welcomed meanwhile, and the
//!   `ViewChange` that would have fixed it can die in a crash). Once per
//!   missed member, and again on the `Join` timer. It only adds servers
//!   that are in, and no round completes while they miss each other.
//! * A server with a disk installs the snapshot over its own registers:
//!   per key the higher tag wins (`install_register`). Its own can be the
//!   higher one only for a write the live servers hold pending or applied
//!   (it reached this server after every other had it pending, pc 24-37),
//!   so serving it is no read inversion; never going below it is the rule
//!   that keeps a value once read here.
//! * Departures from the first design: view numbers are carried by
//!   `Welcome`/`ViewChange` only (lives, not views, tell messages apart;
//!   they are informational), and "a server that sees a view without itself
//!   fences itself" is not built: with a perfect failure detector a live
//!   server never leaves a view, and with concurrent joins a view number
//!   does not order views, so the rule would fence live servers. A false
//!   suspicion (a partition) splits the ring: outside the model (§2), as
//!   the README must say.
//!
//! **Durability** (`durable.rs`). The seed keeps nothing on disk: its model
//! lets all servers but one crash, never all, and none come back (§2 line 44:
//! "at least one server should be correct in every computation"). Records
//! go through `Out::persist`, and the driver makes them durable before any
//! later send or reply leaves (protocol contract, rule 2): each rule below
//! is "persist, then speak".
//! * **Applied writes**: a register's `(tag, value)` whenever it changes
//!   (pc 32-33 at home, pc 42-46 on the way, a `Welcome`'s newer value):
//!   on disk before the `Write` goes on (pc 37, 48), before `Done` (pc 50)
//!   and before a read answers it (pc 78, 82). So an acknowledged write is
//!   on the disk of every server in the view when it went round
//!   (write-all-available, §3 line 193), and a value read is on the
//!   disk where it was read.
//! * **Applied operation ids** (the dedup table (c), bounded like it): a
//!   kill-all leaves no snapshot to bring them back, and a retry whose
//!   `Done` was lost would be applied again above a later write. Each with
//!   the write (key, tag) that applied it, once known (a `Welcome` names
//!   it, `Snapshot::op_writes`): a restart that knew the operation but not
//!   its tag would take a copy of that very write for a second copy and
//!   void it (durable fuzz seed 6178).
//! * **"Ran here"**, a mark at the first start: a restart that applied
//!   nothing still knows it was dropped from every view.
//! * Not persisted, **pending pre-writes** (pc 24, 71): a pending entry
//!   only holds reads up (pc 80) and raises the next tag (pc 23). A
//!   restarted server gets every pending set in its `Welcome` before it
//!   serves or tags anything. After a kill-all, a pre-write whose write
//!   was applied nowhere was never read (reads answer applied values) nor
//!   acknowledged (pc 49-50 follow the write round): it dies, and its
//!   client, timed out (unknown outcome), retries; one applied somewhere
//!   is on that server's disk.
//! * Not persisted, **the highest ts issued** (pc 23): a tag names its
//!   writer's *life* (`NodeSpec::writer_id`), so no later life can issue
//!   an earlier life's tag, whatever the ts; within a life
//!   `Register::issued` does it.
//! * Not persisted, **the view** (pc 85-92): the others took the crash for
//!   good (perfect failure detector, §2), so an old view is void; the
//!   restarted server rejoins (d) from its own registers.
//!
//! **Kill-all (e)** (`reform.rs`). With every server restarted nobody is in,
//! and no `Join` is ever answered. The lowest member, outside, takes a
//! census (`Census`; an outside server answers `Roll` with its life and
//! state; a server in answers nothing, and `Down` of any member starts it
//! again). With every other member's answer, nobody is in: it merges all
//! registers by highest tag and all applied operations, forms the view of
//! every member and welcomes its successor, which installs the state and
//! welcomes its own, round the ring (FIFO: each `Welcome` precedes every
//! ring message on its link). Every disk is in the merge, so nothing
//! acknowledged or read is lost. A member that lost its state (memory
//! durability, `--recover`) may have been the last one in: then the ring
//! cannot re-form safely, and every member says so (`Protocol::fatal`:
//! the server exits with the reason) instead of refusing clients for ever.
//! The census waits for every member: a kill-all with a server gone for
//! good needs it back (or the cluster started afresh).
//!
//! Where each piece lives: `msg.rs` ([`Msg`], [`Entry`]); `register.rs`
//! (the read rule, tags); `queue.rs` (the fairness rule); `node.rs`
//! ([`RingNode`], the handlers); `failure.rs` (view, re-send, takeover);
//! `rejoin.rs` (Join, Welcome, ViewChange, Hail); `lap.rs` (the extra lap);
//! `durable.rs` (records, restore); `reform.rs` (kill-all census);
//! `dedup.rs` and `ops.rs` (retried writes); `bugs.rs`; `def.rs` ([`Ring`],
//! options, link model); `counters.rs`; test-only: `testing.rs` (a
//! multi-node harness), `scenarios.rs` (its tests) and `fuzz.rs` (random
//! runs with crashes and retries, checked; `ring_sweep` is the long one).
//! Sets that are iterated are `BTree*`: a `Hash*` order changes from one
//! process to the next, and the simulator's runs of one seed differed.

mod bugs;
mod counters;
mod dedup;
mod def;
mod durable;
mod failure;
#[cfg(test)]
mod fuzz;
mod invariants;
mod lap;
mod msg;
mod node;
mod ops;
mod queue;
mod reform;
mod register;
mod rejoin;
mod restart;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod testing;

pub use bugs::InjectedBug;
pub use counters::Counters;
pub use def::{Ring, RingOptions};
pub use invariants::RingInvariants;
pub use msg::{Entry, Msg, Snapshot, Timer};
pub use node::{RingConfig, RingNode};
pub use ops::OpTable;
pub use queue::Fairness;
pub use register::Register;
