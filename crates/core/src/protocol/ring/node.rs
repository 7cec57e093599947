//! The ring server: client requests, the two phases of a write and the
//! queue handler that feeds the successor (pc 18-84).

use super::bugs::InjectedBug;
use super::counters::Counters;
use super::msg::{Entry, Msg, Timer};
use super::ops::OpTable;
use super::queue::{ClientWrite, Fairness, Next, Queues};
use super::register::{Register, Waiter};
use super::restart::{Census, DiskOp};
use crate::protocol::contract::{LinkEvent, Out, Protocol, Record};
use crate::types::{ClientRef, NodeId, OpError, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::Duration;

/// Settings of a ring server (from [`super::RingOptions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    pub fairness: Fairness,
    /// Ring messages in flight to the successor before waiting for its
    /// credit; 0 = no limit (the queues never fill, fairness has no effect).
    pub window: u64,
    /// Client writes queued beyond this are refused (definite: not started).
    pub max_queued_writes: usize,
    /// Operations remembered for deduplication.
    pub max_ops: usize,
    /// Outside, `Join` is sent again this often.
    pub join_retry: Duration,
    /// Let restarted servers back in (d, the default); off: they stay
    /// fenced for ever.
    pub rejoin: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            fairness: Fairness::NbMsg,
            window: 16,
            max_queued_writes: 10_000,
            max_ops: 100_000,
            join_retry: Duration::from_millis(200),
            rejoin: true,
        }
    }
}

/// Where an own write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    PreWrite,
    Write,
}

/// Flow control towards the successor, and receipts from predecessors.
/// Counts belong to the connection: kept while the successor or the
/// predecessor changes, dropped only when the failure detector reports the
/// other end down (`LinkEvent::Down`). A view can lose and regain a server
/// whose connection stayed up (a `Gone` for an old life of it, a `Hail`
/// of its new life), and that server's successor did not change (seed
/// 1856 at N = 3: the receiver counted from 0 again, the sender did not,
/// and its window never opened again).
#[derive(Debug, Default)]
pub(super) struct Link {
    /// Ring messages sent to the current successor, and its last credit.
    pub sent: u64,
    pub credited: u64,
    /// `(sent, credited)` of earlier successors still alive.
    pub others: BTreeMap<NodeId, (u64, u64)>,
    pub received: BTreeMap<NodeId, u64>,
    /// Writes sent to the current successor (`(key, tag, void, home)`),
    /// cleared when the successor changes or drops what was sent (`fresh`).
    /// Rounds of one write that end at different servers are different
    /// rounds (`write_again`, `write_round_for`): each goes once.
    pub writes: HashSet<(Bytes, Tag, bool, NodeId)>,
}

/// Beyond this many, `Link::writes` starts afresh (a copy more is harmless).
const LINK_WRITES_KEPT: usize = 65_536;

impl Link {
    /// A successor that dropped everything sent to it (outside).
    pub(super) fn fresh(&mut self) {
        self.sent = 0;
        self.credited = 0;
        self.writes.clear();
    }
    /// The successor changes from `from` to `to`.
    pub(super) fn switch(&mut self, from: NodeId, to: NodeId) {
        self.others.insert(from, (self.sent, self.credited));
        (self.sent, self.credited) = self.others.remove(&to).unwrap_or_default();
        self.writes.clear();
    }
    /// The connection to `j` broke: a new life of it counts from 0.
    pub(super) fn forget(&mut self, j: NodeId) {
        self.others.remove(&j);
        self.received.remove(&j);
    }
    /// A credit from `from`, the successor or an earlier one.
    pub(super) fn credit(&mut self, from: NodeId, next: NodeId, received: u64) -> bool {
        let c = if from == next {
            &mut self.credited
        } else if let Some((_, c)) = self.others.get_mut(&from) {
            c
        } else {
            return false;
        };
        *c = (*c).max(received);
        true
    }
}

/// Writes forwarded lately, re-sent if the successor crashes (pc 88 keeps
/// one per key; a crashed successor may also have swallowed older ones).
pub(super) const SENT_WRITES_KEPT: usize = 1024;

/// `(key, tag)`s of the writes seen lately (the last [`WRITTEN_KEPT`]).
#[derive(Debug, Default)]
pub(super) struct Recent {
    set: HashSet<(Bytes, Tag)>,
    order: VecDeque<(Bytes, Tag)>,
}

pub(super) const WRITTEN_KEPT: usize = 65_536;

impl Recent {
    pub(super) fn insert(&mut self, key: &Bytes, tag: Tag) {
        if self.set.insert((key.clone(), tag)) {
            self.order.push_back((key.clone(), tag));
            if self.order.len() > WRITTEN_KEPT {
                let old = self.order.pop_front().expect("non-empty");
                self.set.remove(&old);
            }
        }
    }
    pub(super) fn contains(&self, key: &Bytes, tag: Tag) -> bool {
        self.set.contains(&(key.clone(), tag))
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = &(Bytes, Tag)> {
        self.order.iter()
    }
}

/// One ring server (proxy-only: clients talk to any server).
#[derive(Debug)]
pub struct RingNode {
    pub id: NodeId,
    /// Goes into tags: node id plus incarnation (`NodeSpec::writer_id`).
    pub(super) writer: u64,
    /// Ring order: the members sorted; `alive` is the current view.
    pub(super) members: Vec<NodeId>,
    pub(super) alive: BTreeSet<NodeId>,
    /// The view number: bumped by each join (rejoin.rs).
    pub(super) view: u64,
    /// Writer ids of servers that joined, as far as known here.
    pub(super) lives: BTreeMap<NodeId, u64>,
    /// Lives seen crashing: a late `ViewChange` of one must not bring it back.
    pub(super) dead_lives: HashSet<u64>,
    /// Peers the failure detector reports down now (`Down` not yet
    /// followed by `Up`), members of the view or not.
    pub(super) link_down: BTreeSet<NodeId>,
    pub(super) next: NodeId,
    /// The live predecessor: ring messages come from it.
    pub(super) pred: NodeId,
    pub(super) cfg: RingConfig,
    pub(super) bug: Option<InjectedBug>,
    /// A restarted server: the others dropped it from their view and it
    /// lost its registers, so it answers nobody (fencing) until its
    /// predecessor welcomes it back (rejoin.rs).
    pub(super) outside: bool,
    /// Welcomed back, but its `ViewChange` has not come round yet: some
    /// live server may not know it and skip it, so it serves no client.
    pub(super) announcing: bool,
    /// Outside: where the last `Join` went.
    pub(super) join_sent_to: Option<NodeId>,
    /// Joins received while outside, handled once in.
    pub(super) stash: Vec<(NodeId, u64)>,
    /// In: joins this server must accept but holds, while a live peer is
    /// neither in its view nor joining here (rejoin.rs, `blocked`).
    pub(super) held: Vec<(NodeId, u64)>,
    /// In: servers whose `Join` passed here and that are not in the view
    /// (yet): outside, so no reason to hold another join (`blocked`).
    pub(super) joining: BTreeMap<NodeId, u64>,
    /// Lives welcomed a second time here (`welcome_again`, once each).
    pub(super) welcomed_again: HashSet<u64>,
    /// Lives whose held `Join` this server told the view about.
    pub(super) told_held: HashSet<u64>,
    /// `ViewChange`s received while outside (`(view, node, writer)`): a
    /// new successor of this one's welcomer can announce itself first.
    pub(super) stashed_views: Vec<(u64, NodeId, u64)>,
    /// Members hailed since the view last missed them (`hail`).
    pub(super) hailed: BTreeSet<NodeId>,
    /// Ring messages from servers reported up but not in the view, kept
    /// until they are (`fence`).
    pub(super) fenced_msgs: Vec<(NodeId, Msg)>,
    /// `Gone` notices received while outside (`(node, life)`): the snapshot
    /// may still count that life in, and the `Down` was seen here too early.
    pub(super) stashed_gone: Vec<(NodeId, Option<u64>)>,
    pub(super) regs: BTreeMap<Bytes, Register>,
    pub(super) queues: Queues,
    pub(super) link: Link,
    /// This server's writes in flight, by key and tag (a tag is unique per
    /// key only: two keys' writes can share one).
    pub(super) own: BTreeMap<(Bytes, Tag), Phase>,
    /// Crashed origins' pre-writes this server converted (takeover).
    pub(super) taken: BTreeSet<(Bytes, Tag)>,
    /// A crash left messages to take over, not done yet (`take_over`).
    pub(super) takeover_due: bool,
    /// Joiners this server let in (welcomed) so far (`lap.rs`).
    pub(super) welcomes: u64,
    /// Own pre-writes in their first round: `welcomes` when they began.
    pub(super) began: BTreeMap<(Bytes, Tag), u64>,
    /// Pre-writes on their `Lap` from here (home) / that passed here.
    pub(super) lapping: BTreeSet<(Bytes, Tag)>,
    /// Pre-writes whose lap sent by this life came back round (`on_lap`):
    /// every live server holds them pending, no second lap is needed.
    pub(super) lapped: BTreeSet<(Bytes, Tag)>,
    pub(super) laps: BTreeMap<(Bytes, Tag), u64>,
    /// Laps the snapshot named: they did not pass here (a copy that comes
    /// is passed on), but re-sent from here, they go as laps.
    pub(super) lap_hints: BTreeMap<(Bytes, Tag), u64>,
    pub(super) sent_writes: VecDeque<Entry>,
    /// Writes seen lately, to drop stale copies of their pre-writes.
    pub(super) written: Recent,
    /// Of those, the ones seen here as applied (not void) writes: a
    /// copy of their pre-write is answered with a write round
    /// (`write_round_for`).
    pub(super) live_writes: Recent,
    /// Pre-writes pending here when a `Welcome` went out (`lap.rs`,
    /// `write_again`): if their write ends here, it goes round once more.
    pub(super) welcomed_pending: BTreeSet<(Bytes, Tag)>,
    /// Writes sent round again from here (`write_again`), not back yet.
    pub(super) rounds_again: BTreeSet<(Bytes, Tag)>,
    /// Pending here (a joiner's snapshot) but owed by the predecessor.
    pub(super) owed: BTreeSet<(Bytes, Tag)>,
    pub(super) owed_writes: Vec<Entry>,
    /// The server that welcomed this one: what it sent its old successor
    /// before the join went past this one's position, and is lost if it
    /// crashes; this one then re-sends all it holds.
    pub(super) welcomed_by: Option<NodeId>,
    pub(super) ops: OpTable,
    /// Records go to disk (`NodeSpec::durable`; `durable.rs`).
    pub(super) durable: bool,
    /// The disk says this server ran before: it starts outside.
    pub(super) restored: bool,
    /// Operations read back from disk, `(seq, op)`, until `on_start`.
    pub(super) restored_ops: Vec<DiskOp>,
    /// The next applied operation's sequence number on disk.
    pub(super) op_seq: u64,
    /// Restarted without its state (`NodeSpec::lost_state`).
    pub(super) lost: bool,
    /// Kill-all: the census this server takes (`reform.rs`).
    pub(super) census: Option<Census>,
    pub(super) census_round: u64,
    /// Why this server cannot go on (`Protocol::fatal`).
    pub(super) fatal: Option<String>,
    pub counters: Counters,
}

type O = Out<Msg, Timer>;

impl RingNode {
    /// `members` are all server ids (including `id`), in any order.
    pub fn new(id: NodeId, members: Vec<NodeId>, cfg: RingConfig) -> Self {
        let mut members = members;
        members.sort_unstable();
        members.dedup();
        assert!(members.contains(&id), "node {id} is not a member");
        let mut n = RingNode {
            id,
            writer: u64::from(id),
            alive: members.iter().copied().collect(),
            members,
            view: 0,
            lives: BTreeMap::new(),
            dead_lives: HashSet::new(),
            link_down: BTreeSet::new(),
            next: id,
            pred: id,
            ops: OpTable::new(cfg.max_ops),
            cfg,
            bug: None,
            outside: false,
            announcing: false,
            join_sent_to: None,
            stash: Vec::new(),
            held: Vec::new(),
            joining: BTreeMap::new(),
            welcomed_again: HashSet::new(),
            told_held: HashSet::new(),
            stashed_views: Vec::new(),
            hailed: BTreeSet::new(),
            fenced_msgs: Vec::new(),
            stashed_gone: Vec::new(),
            regs: BTreeMap::new(),
            queues: Queues::default(),
            link: Link::default(),
            own: BTreeMap::new(),
            taken: BTreeSet::new(),
            takeover_due: false,
            welcomes: 0,
            began: BTreeMap::new(),
            lapping: BTreeSet::new(),
            lapped: BTreeSet::new(),
            laps: BTreeMap::new(),
            lap_hints: BTreeMap::new(),
            sent_writes: VecDeque::new(),
            written: Recent::default(),
            live_writes: Recent::default(),
            welcomed_pending: BTreeSet::new(),
            rounds_again: BTreeSet::new(),
            owed: BTreeSet::new(),
            owed_writes: Vec::new(),
            welcomed_by: None,
            durable: false,
            restored: false,
            restored_ops: Vec::new(),
            op_seq: 0,
            lost: false,
            census: None,
            census_round: 0,
            fatal: None,
            counters: Counters::default(),
        };
        n.next = n.successor();
        n.pred = n.live_pred(id);
        n
    }
    pub fn with_writer(mut self, writer: u64) -> Self {
        self.writer = writer;
        self
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        if bug == Some(InjectedBug::FifoForwarding) {
            self.cfg.fairness = Fairness::ForwardFirst;
        }
        self
    }
    /// Start fenced: this is a restarted server that lost its state (see
    /// `outside`).
    pub fn restarted(mut self) -> Self {
        self.outside = true;
        self.lost = true;
        self
    }
    /// Persist registers and applied operations (`durable.rs`).
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }
    /// Outside the view, or not yet known to every live server.
    pub fn is_outside(&self) -> bool {
        self.outside || self.announcing
    }
    pub fn successor_id(&self) -> NodeId {
        self.next
    }
    pub fn register(&self, key: &[u8]) -> Option<&Register> {
        self.regs.get(key)
    }
    pub(super) fn reg(&mut self, key: &Bytes) -> &mut Register {
        self.regs.entry(key.clone()).or_default()
    }

    fn on_get(&mut self, client: ClientRef, key: Bytes, out: &mut O) {
        let wait = self.bug != Some(InjectedBug::ReadNoWait);
        match self.reg(&key).read(client, wait) {
            Some(v) => out.reply(client, Response::Value(v)),
            None => self.counters.parked_reads += 1,
        }
    }

    /// pc 18-19: queue the write; refuse (nothing done) when full.
    fn on_put(&mut self, client: ClientRef, key: Bytes, value: Option<Bytes>, out: &mut O) {
        if self.known_op(client, &key, out) {
            return;
        }
        if self.queues.writes.len() >= self.cfg.max_queued_writes {
            self.counters.refused_writes += 1;
            let err = OpError::refused("write queue full");
            return out.reply(client, Response::Failed(err));
        }
        let op = client.op;
        let client = Some(client);
        self.queues.push_write(ClientWrite {
            client,
            op,
            key,
            value,
        });
    }

    /// pc 21-27: tag it, make it pending, pre-write it to the successor.
    fn originate(&mut self, w: ClientWrite, out: &mut O) {
        let handled = match w.client {
            Some(c) => self.known_op(c, &w.key, out), // a duplicate queued meanwhile
            None => self.ops.applied(w.op) || self.live_copy(&w.key, w.op, None),
        };
        if handled {
            return;
        }
        let (writer, origin, op) = (self.writer, self.id, w.op);
        let home = origin;
        let from_held = self.bug == Some(InjectedBug::TagFromHeld);
        let reg = self.reg(&w.key);
        let tag = match from_held {
            true => reg.tag.next(writer),
            false => reg.next_tag(writer),
        };
        let Some(tag) = tag else {
            // Nothing was pre-written: a definite refusal.
            self.counters.tag_space_exhausted += 1;
            if let Some(client) = w.client {
                let err = OpError::refused(crate::types::TAG_SPACE_EXHAUSTED);
                out.reply(client, Response::Failed(err));
            }
            return;
        };
        let e = Entry {
            key: w.key,
            tag,
            value: w.value,
            origin,
            home,
            op,
            void: false,
        };
        reg.pending.insert(tag, e.clone());
        if let Some(client) = w.client {
            let converted = false;
            reg.wait_for_write(Waiter {
                client,
                op,
                tag,
                converted,
            });
        }
        self.own.insert((e.key.clone(), tag), Phase::PreWrite);
        self.began.insert((e.key.clone(), tag), self.welcomes);
        self.send_ring(Msg::PreWrite(e), out);
    }

    /// The queue handler (pc 53-75): send while the window allows.
    pub(super) fn pump(&mut self, out: &mut O) {
        self.hail(out);
        self.take_over(out);
        if self.outside || self.uncertain() {
            return;
        }
        while self.cfg.window == 0
            || self.link.sent.saturating_sub(self.link.credited) < self.cfg.window
        {
            match self.queues.pick(self.id, self.cfg.fairness) {
                None => break,
                Some(Next::Own(w)) => self.originate(w, out),
                Some(Next::Ready(m)) => self.send_ready(m, out),
                Some(Next::Forward(m)) => self.forward(m, out),
            }
        }
        // (b): a crashed origin has no share to keep; its leftovers count 0
        // and so drain first, which frees the reads waiting on them.
        let alive = &self.alive;
        self.queues.nb_msg.retain(|n, _| alive.contains(n));
    }

    /// A message made here (a re-send, a lap, a write): a pre-write whose
    /// write passed here since it was queued is a late copy, as in
    /// `forward`. Sent, it reached a server where its round ends, which
    /// took it for one of its own to end, held it pending and lapped it
    /// while every other server had the write already: a stale entry for
    /// ever (fuzz seed 2745 at N = 5: a re-send after a crash waited in
    /// the queue behind a window of 1 while the write went by).
    fn send_ready(&mut self, m: Msg, out: &mut O) {
        if let Msg::PreWrite(e) = &m {
            if self.written.contains(&e.key, e.tag) {
                self.counters.duplicates += 1;
                return;
            }
        }
        self.send_ring(m, out);
    }

    /// pc 68-71: forward; a pre-write is pending from the moment it leaves.
    fn forward(&mut self, m: Msg, out: &mut O) {
        if let Msg::PreWrite(e) = &m {
            if self.written.contains(&e.key, e.tag) {
                // Its write passed while it waited here: a late copy.
                self.counters.duplicates += 1;
                let pending =
                    (self.regs.get(&e.key)).is_some_and(|r| r.pending.contains_key(&e.tag));
                if pending && self.live_writes.contains(&e.key, e.tag) {
                    // Still pending here: a joiner's entry (its snapshot)
                    // whose write an earlier life applied (its disk). The
                    // servers after it may hold it owed too, and keep it
                    // for ever (durable fuzz seeds 8654 at N = 4, 6178 at
                    // N = 6): the write goes round instead, as for a copy
                    // that reaches a server that saw it applied.
                    let e = e.clone();
                    self.drop_pending(&e, out);
                    self.write_round_for(e);
                }
                return;
            }
            if self.bug != Some(InjectedBug::ForwardNotPending) {
                self.reg(&e.key).pending.insert(e.tag, e.clone());
            }
        }
        self.send_ring(m, out);
    }

    fn send_ring(&mut self, m: Msg, out: &mut O) {
        if let Msg::Write(e) = &m {
            // A copy of a write sent to this successor already: the link
            // loses nothing while both ends live, and if the successor
            // crashes the next one gets it again (`resend`). Re-sends after
            // crashes put copies of up to 1024 writes on the ring each, and
            // forwarding every copy kept a slow ring busy for over 100 ms
            // after the faults healed (seed 11 at N = 5, rejoin on).
            let id = (e.key.clone(), e.tag, e.void, e.home);
            if self.link.writes.len() >= LINK_WRITES_KEPT {
                self.link.writes.clear();
            }
            if !self.link.writes.insert(id) {
                self.counters.duplicates += 1;
                return;
            }
            self.sent_writes.push_back(e.clone());
            if self.sent_writes.len() > SENT_WRITES_KEPT {
                self.sent_writes.pop_front();
            }
        }
        self.link.sent += 1;
        if self.acks_before_sync() && matches!(m, Msg::Write(_)) {
            return out.send_now(Peer::Node(self.next), m);
        }
        out.send(Peer::Node(self.next), m);
    }

    /// Count a ring message from `from` and credit it back every half window.
    pub(super) fn receipt(&mut self, from: NodeId, out: &mut O) {
        let n = self.link.received.entry(from).or_default();
        *n += 1;
        let batch = (self.cfg.window / 2).max(1);
        if self.cfg.window > 0 && n.is_multiple_of(batch) {
            out.send(Peer::Node(from), Msg::Credit { received: *n });
        }
    }

    /// pc 29-40: a pre-write from the predecessor.
    fn on_pre_write(&mut self, mut e: Entry, out: &mut O) {
        if self.ends_here(e.home) {
            if self.end_waits(&e) {
                return self.queues.push_forward(Msg::PreWrite(e));
            }
            return self.pre_write_back(e, out);
        }
        // A copy re-sent after a crash, of a pre-write forwarded already
        // (then pending here) or written already: the first copy did or
        // does the round; this one would leave pending entries behind.
        let pending = self
            .regs
            .get(&e.key)
            .is_some_and(|r| r.pending.contains_key(&e.tag));
        let owed = pending && self.owed.remove(&(e.key.clone(), e.tag));
        if !owed && (pending || self.written.contains(&e.key, e.tag)) {
            self.counters.duplicates += 1;
            if !pending {
                self.write_round_for(e);
            }
            return;
        }
        if self.void_here(&e) {
            e.void = true;
            self.counters.voided += 1;
        }
        self.queues.push_forward(Msg::PreWrite(e));
    }

    /// The pre-write went round: every live server has it pending.
    pub(super) fn pre_write_home(&mut self, mut e: Entry, out: &mut O) {
        let mine = self.is_mine(&e);
        self.began.remove(&(e.key.clone(), e.tag));
        self.lapped.remove(&(e.key.clone(), e.tag));
        let fresh = if mine {
            self.own.get(&(e.key.clone(), e.tag)) == Some(&Phase::PreWrite)
        } else {
            // (a) takeover of a crashed origin's write (or of an earlier
            // life of this server's: never its own, `own` forgot them).
            self.taken.insert((e.key.clone(), e.tag))
        };
        if !fresh {
            self.counters.duplicates += 1;
            return;
        }
        if !mine {
            self.counters.taken_over += 1;
            e.home = self.id; // its write ends here, whoever joins meanwhile
        }
        // Another copy of the same operation won meanwhile (dedup.rs).
        if self.void_here(&e) {
            e.void = true;
            self.counters.voided += 1;
        }
        let any_tag = self.bug == Some(InjectedBug::ApplyAnyTag);
        let reg = self.reg(&e.key);
        reg.pending.remove(&e.tag); // pc 35
        let mut retries = Vec::new();
        let mut applied = false;
        if !e.void {
            applied = match any_tag {
                true => reg.apply_any(&e),
                false => reg.apply(&e), // pc 32-33
            };
            reg.mark_converted(e.tag);
            // Applied here: `known_op` answers a retry of it at once from
            // now on, so one parked before goes now too (its write may end
            // at a taker before it comes back here: fuzz seed 48632 at N = 4).
            retries = reg.release_retries(e.op);
        }
        let reads = reg.release_reads();
        if applied {
            // On disk before the retries' `Done`, the reads and the write.
            self.persist_applied(&e, out);
        }
        if !e.void {
            // Applied here now: a joiner's snapshot must say so (its write
            // may go round without passing the joiner). On disk with the
            // register, before anything answers: a restart must know the
            // operation of the value it holds (seed 353 at N = 5).
            self.applied_op(e.op, (&e.key, e.tag), out);
            self.written.insert(&e.key, e.tag);
            self.live_writes.insert(&e.key, e.tag);
        }
        for client in retries {
            self.done(client, out);
        }
        self.answer_reads(reads, out);
        if mine {
            self.own.insert((e.key.clone(), e.tag), Phase::Write);
        }
        self.queues.ready.push_back(Msg::Write(e)); // pc 37
    }

    /// The predecessor that owed this joiner some pre-writes is gone: no
    /// copy of them will come, so pass them on (or end them) from here.
    pub(super) fn release_owed(&mut self, out: &mut O) {
        let owed = std::mem::take(&mut self.owed);
        self.pass_on(owed, out);
        for e in std::mem::take(&mut self.owed_writes) {
            if !self.ends_here(e.home) {
                self.queues.push_forward(Msg::Write(e));
            }
        }
    }

    /// Pass pending pre-writes on from here (or end them here), as the
    /// copies a predecessor would have sent.
    pub(super) fn pass_on(&mut self, ids: impl IntoIterator<Item = (Bytes, Tag)>, out: &mut O) {
        for (key, tag) in ids {
            let Some(e) = self.regs.get(&key).and_then(|r| r.pending.get(&tag)) else {
                continue; // ended meanwhile
            };
            let e = e.clone();
            if self.ends_here(e.home) {
                self.pre_write_back(e, out);
            } else {
                self.queues.push_forward(Msg::PreWrite(e));
            }
        }
    }

    /// Forget a pending entry whose write was applied here: the reads and
    /// the retries of its operation parked on it go now.
    fn drop_pending(&mut self, e: &Entry, out: &mut O) {
        let reg = self.reg(&e.key);
        reg.pending.remove(&e.tag);
        let retries = reg.release_retries(e.op);
        let reads = reg.release_reads();
        for client in retries {
            self.done(client, out);
        }
        self.answer_reads(reads, out);
    }

    /// pc 41-52: a write from the predecessor; at home it ends (write_ack).
    fn on_write(&mut self, mut e: Entry, out: &mut O) {
        self.written.insert(&e.key, e.tag);
        let id = (e.key.clone(), e.tag);
        self.laps.remove(&id);
        self.lap_hints.remove(&id);
        self.lapped.remove(&id);
        let reg = self.regs.entry(e.key.clone()).or_default();
        let pre = reg.pending.remove(&e.tag); // pc 47
        if e.op.is_none() && !e.void {
            // A value re-sent from a register that lost its op id: its
            // pre-write (one tag, one write) names it (seed 353 at N = 5).
            e.op = pre.filter(|p| !p.void).map_or(e.op, |p| p.op);
        }
        let mut done = Vec::new();
        let mut applied = false;
        if !e.void {
            applied = reg.apply(&e); // pc 42-46
            done = reg.release_writers(e.op, e.tag);
        }
        let reads = reg.release_reads();
        if applied {
            // On disk before `Done`, the reads and the forward (durable.rs).
            self.persist_applied(&e, out);
        }
        if !e.void {
            self.applied_op(e.op, (&e.key, e.tag), out);
            self.live_writes.insert(&e.key, e.tag);
        }
        for client in done {
            self.done(client, out); // pc 50
        }
        self.answer_reads(reads, out);
        if self.ends_here(e.home) && self.end_waits(&e) {
            return self.queues.push_forward(Msg::Write(e));
        }
        let again = self.welcomed_pending.remove(&id);
        if !self.ends_here(e.home) {
            return self.queues.push_forward(Msg::Write(e)); // pc 48
        }
        let second = self.rounds_again.remove(&id);
        if again {
            self.write_again(e.clone());
        }
        if second {
            return; // its extra round is back: it ended here before
        }
        if e.void {
            self.void_came_home(e);
        } else if self.is_mine(&e) && self.own.remove(&id).is_some() {
            self.counters.completed += 1;
        }
    }

    /// A write acknowledged (after every record persisted before it).
    fn done(&mut self, client: ClientRef, out: &mut O) {
        if self.acks_before_sync() {
            out.reply_now(client, Response::Done);
        } else {
            out.reply(client, Response::Done);
        }
    }

    fn answer_reads(&mut self, reads: Vec<(ClientRef, Option<Bytes>)>, out: &mut O) {
        for (client, v) in reads {
            out.reply(client, Response::Value(v));
        }
    }

    /// Handle a queued message again as if it had just arrived.
    pub(super) fn redeliver(&mut self, m: Msg, out: &mut O) {
        match m {
            Msg::PreWrite(e) => self.on_pre_write(e, out),
            Msg::Write(e) => self.on_write(e, out),
            Msg::Lap(e, by) => self.on_lap(e, by, out),
            _ => {}
        }
    }

    /// A credit from `from`: it counts the connection, not the view
    /// (`Link`), so it counts whether or not `from` is in the view now.
    fn on_credit(&mut self, from: NodeId, received: u64) {
        if !self.link.credit(from, self.next, received) {
            self.counters.stale_credits += 1;
        }
    }

    pub(super) fn on_ring_msg(&mut self, from: NodeId, msg: Msg, out: &mut O) {
        match msg {
            Msg::Credit { received } => self.on_credit(from, received),
            Msg::PreWrite(e) => {
                self.receipt(from, out);
                self.on_pre_write(e, out);
            }
            Msg::Write(e) => {
                self.receipt(from, out);
                self.on_write(e, out);
            }
            Msg::Lap(e, by) => {
                self.receipt(from, out);
                self.on_lap(e, by, out);
            }
            _ => unreachable!("membership messages go to rejoin.rs"),
        }
    }
}

impl Protocol for RingNode {
    type Msg = Msg;
    type Timer = Timer;

    fn on_start(&mut self, _now: Time, out: &mut O) {
        self.start_durable(out);
        if self.outside && self.cfg.rejoin {
            self.ask_to_join(out);
            out.set_timer(self.cfg.join_retry, Timer::Join);
            self.census(out);
        }
    }
    fn restore(&mut self, rec: Record) {
        self.restore_record(rec);
    }
    fn fatal(&self) -> Option<String> {
        self.fatal.clone()
    }
    fn on_client(&mut self, _now: Time, client: ClientRef, req: Request, out: &mut O) {
        if let Some(why) = &self.fatal {
            return out.reply(client, Response::Failed(OpError::refused(why)));
        }
        if self.is_outside() {
            // Definite: nothing was done, the client may try another server.
            let err = OpError::refused("restarted: outside the ring view until it rejoins");
            return out.reply(client, Response::Failed(err));
        }
        match req {
            Request::Get { key } => self.on_get(client, key, out),
            Request::Put { key, value } => self.on_put(client, key, Some(value), out),
            Request::Delete { key } => self.on_put(client, key, None, out),
            req @ Request::Znode(_) => out.reply(client, req.refusal().expect("not KV")),
        }
        self.pump(out);
    }
    fn on_msg(&mut self, _now: Time, from: Peer, msg: Msg, out: &mut O) {
        match (from, msg) {
            (Peer::Conn(_), _) => self.counters.misrouted += 1,
            (Peer::Node(j), Msg::Census { round }) => self.on_census(j, round, out),
            (
                Peer::Node(j),
                Msg::Roll {
                    round,
                    writer,
                    lost,
                    state,
                },
            ) => self.on_roll(j, (round, writer, lost), *state, out),
            (Peer::Node(_), Msg::Unrecoverable { lost }) => self.on_unrecoverable(lost),
            (Peer::Node(j), Msg::Join { node, writer }) => {
                if j == node {
                    self.join_from_life(node, writer, out);
                }
                self.on_join(node, writer, out)
            }
            (Peer::Node(j), Msg::Welcome(s)) => self.on_welcome(j, *s, out),
            (Peer::Node(_), Msg::ViewChange { view, node, writer }) => {
                self.on_view_change(view, node, writer, out)
            }
            (
                Peer::Node(j),
                Msg::Hail {
                    node,
                    writer,
                    answer,
                },
            ) => {
                // Only straight from the node: it proves that life runs.
                if j == node {
                    self.on_hail(node, writer, answer, out)
                }
            }
            (Peer::Node(_), Msg::Gone { node, life }) if self.outside => {
                self.stashed_gone.push((node, life))
            }
            (Peer::Node(j), msg) if self.outside => {
                // Dropped, but counted: credits count what came on the
                // connection (`Link`; seed 8763 at N = 3: a server welcomed
                // with this one's old life in its snapshot sent its new life
                // 16 messages, and its window never opened again).
                if msg.entry().is_some() {
                    self.receipt(j, out);
                }
                self.counters.fenced += 1
            }
            // Flow control is not fenced: a credit counts what the
            // connection carried (`Link`), and the view can lose and regain
            // a server while its connection stays up (seed 2370 at N = 5: a
            // `Join` of a new life of 2 ended the life 1 had welcomed, the
            // credits for 1's first 16 messages to it arrived while 2 was
            // out of 1's view and were dropped, and once its `Hail` had
            // brought 2 back, 1's window to its successor stayed closed).
            (Peer::Node(j), Msg::Credit { received }) => self.on_credit(j, received),
            // The predecessor's failure detector, as good as this one's.
            (Peer::Node(j), Msg::Gone { node, life }) if self.alive.contains(&j) => {
                if self.lives.get(&node).copied() == life {
                    self.on_crash(node, out)
                }
            }
            // Fencing: nothing from a server outside the view (d).
            (Peer::Node(j), msg) if !self.alive.contains(&j) => self.fence(j, msg, out),
            (Peer::Node(j), msg) => self.on_ring_msg(j, msg, out),
        }
        self.unfence(out);
        self.retry_held(out);
        self.pump(out);
    }
    fn on_timer(&mut self, _now: Time, timer: Timer, out: &mut O) {
        match timer {
            // Given up (`reform.rs`): nothing more to ask.
            Timer::Join if self.fatal.is_some() => {}
            Timer::Join if self.outside => {
                self.join_sent_to = None; // again, to the same target
                self.ask_to_join(out);
                out.set_timer(self.cfg.join_retry, Timer::Join);
                self.census(out);
            }
            Timer::Join => {
                // In: hail again the members the view still misses, and
                // tell the view again of the joins held here (seed 595 at
                // N = 5: two servers each held a join until it learnt of
                // the other's joiner; the one notice each had sent was
                // dropped while its joiner was reported down, and both
                // waited for ever).
                self.hailed.clear();
                self.told_held.clear();
                self.retry_held(out);
                self.hail(out);
            }
        }
    }
    fn on_link(&mut self, _now: Time, ev: LinkEvent, out: &mut O) {
        match ev {
            LinkEvent::Down(Peer::Node(j)) => {
                self.link_down.insert(j);
                if !self.outside {
                    self.on_crash(j, out);
                } else {
                    self.census_down();
                }
                self.link.forget(j);
            }
            LinkEvent::Up(Peer::Node(j)) => {
                // A restarted server's new life: it comes in by `Join` only.
                self.link_down.remove(&j);
                self.census(out);
            }
            LinkEvent::Down(Peer::Conn(s)) if s != ClientRef::LOCAL => {
                self.regs.values_mut().for_each(|r| r.forget_session(s));
            }
            LinkEvent::Down(Peer::Conn(_)) | LinkEvent::Up(Peer::Conn(_)) => {}
        }
        self.ask_to_join(out);
        self.unfence(out);
        self.retry_held(out);
        self.pump(out);
    }
    fn role(&self) -> &'static str {
        if self.is_outside() {
            "fenced"
        } else {
            "replica"
        }
    }
    fn status(&self) -> String {
        let pending: usize = self.regs.values().map(|r| r.pending.len()).sum();
        let few: Vec<_> = (self.regs.values())
            .flat_map(|r| r.pending.values())
            .take(4)
            .map(|e| (e.tag.ts, e.tag.writer, e.home, e.void))
            .collect();
        format!(
            "ring out={} ann={} next={} view={}:{:?} keys={} pending={pending}{few:?} queued={}+{}+{} own={} \
             writer={} lives={:?} down={:?} held={:?} joining={:?} stash={:?} link={}/{} fenced={} \
             uncertain={} takeover_due={}",
            self.outside,
            self.announcing,
            self.next,
            self.view,
            self.alive,
            self.regs.len(),
            self.queues.writes.len(),
            self.queues.forward.len(),
            self.queues.ready.len(),
            self.own.len(),
            self.writer,
            self.lives,
            self.link_down,
            self.held,
            self.joining,
            self.stash,
            self.link.sent,
            self.link.credited,
            self.fenced_msgs.len(),
            self.uncertain(),
            self.takeover_due,
        )
    }
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        self.counters.metrics(self.alive.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Command;
    use crate::protocol::ring::testing::{entry, get, put, sends, tag, value, T0};
    use crate::types::OpId;

    fn node(id: NodeId, n: u32, window: u64) -> RingNode {
        let cfg = RingConfig {
            window,
            rejoin: true,
            ..RingConfig::default()
        };
        RingNode::new(id, (1..=n).collect(), cfg)
    }
    fn replies(out: &mut O) -> Vec<Response> {
        (out.drain())
            .filter_map(|c| match c {
                Command::Reply { resp, .. } => Some(resp),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_client_write_is_tagged_and_pre_written_to_the_successor_only() {
        // pc 21-27.
        let mut n = node(2, 3, 16).with_writer(42);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("v"), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 1);
        let (to, Msg::PreWrite(e)) = &s[0] else {
            panic!("{s:?}")
        };
        assert_eq!((*to, e.tag, e.origin), (Peer::Node(3), tag(1, 42), 2));
        assert!(n.register(b"k").unwrap().pending.contains_key(&tag(1, 42)));
        assert_eq!(
            n.own.get(&(Bytes::from("k"), tag(1, 42))),
            Some(&Phase::PreWrite)
        );
    }

    #[test]
    fn a_forwarded_pre_write_is_pending_from_the_moment_it_leaves() {
        // pc 71, with a window of 1: the second waits in the forward queue.
        let mut n = node(2, 3, 1);
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(1, 1, "a")), &mut out);
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(2, 1, "b")), &mut out);
        let pending = |n: &RingNode| n.register(b"k").unwrap().pending.len();
        assert_eq!(pending(&n), 1, "the queued one is not pending yet");
        let s = sends(&mut out);
        let fwd = s.iter().filter(|(to, _)| *to == Peer::Node(3)).count();
        assert_eq!(
            (fwd, s.len()),
            (1, 3),
            "one forwarded, a credit each: {s:?}"
        );
        n.on_msg(T0, Peer::Node(3), Msg::Credit { received: 1 }, &mut out);
        assert_eq!(pending(&n), 2);
        assert_eq!(n.link.sent, 2);
        // A read now waits for the highest pending tag.
        n.on_client(T0, ClientRef::local(9), get(), &mut out);
        assert!(replies(&mut out).is_empty());
        n.on_msg(T0, Peer::Node(1), Msg::Write(entry(2, 1, "b")), &mut out);
        assert_eq!(replies(&mut out), vec![value("b")]);
    }

    #[test]
    fn a_pre_write_back_home_is_applied_and_written_and_its_write_back_home_acked() {
        // pc 32-37, 49-50.
        let mut n = node(1, 3, 16);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("v"), &mut out);
        let (_, pw) = sends(&mut out).pop().unwrap();
        n.on_msg(T0, Peer::Node(3), pw.clone(), &mut out);
        assert_eq!(n.register(b"k").unwrap().tag, tag(1, 1));
        let s = sends(&mut out);
        assert!(matches!(&s[..], [(Peer::Node(2), Msg::Write(e))] if e.tag == tag(1, 1)));
        // A copy of the pre-write coming back again is a duplicate.
        n.on_msg(T0, Peer::Node(3), pw, &mut out);
        assert_eq!(n.counters.duplicates, 1);
        assert!(sends(&mut out).is_empty());
        n.on_msg(T0, Peer::Node(3), s[0].1.clone(), &mut out);
        assert_eq!(replies(&mut out), vec![Response::Done]);
        assert!(n.own.is_empty() && n.counters.completed == 1);
        assert!(n.queues.forward.is_empty(), "a write ends at home");
    }

    #[test]
    fn a_write_from_elsewhere_is_applied_if_newer_and_forwarded_either_way() {
        // pc 41-48.
        let mut n = node(2, 3, 16);
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(1), Msg::Write(entry(5, 1, "new")), &mut out);
        n.on_msg(T0, Peer::Node(1), Msg::Write(entry(3, 3, "old")), &mut out);
        let r = n.register(b"k").unwrap();
        assert_eq!((r.tag, r.value.as_deref()), (tag(5, 1), Some(&b"new"[..])));
        let fwd: Vec<_> = sends(&mut out).into_iter().map(|(to, _)| to).collect();
        assert_eq!(fwd, vec![Peer::Node(3), Peer::Node(3)]);
    }

    #[test]
    fn a_full_write_queue_refuses_and_closed_sessions_are_forgotten() {
        let cfg = RingConfig {
            window: 1,
            max_queued_writes: 1,
            ..RingConfig::default()
        };
        let mut n = RingNode::new(1, vec![1, 2], cfg);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("a"), &mut out); // sent
        n.on_client(T0, ClientRef::local(2), put("b"), &mut out); // queued
        n.on_client(T0, ClientRef::local(3), put("c"), &mut out); // refused
        let r = replies(&mut out);
        assert!(
            matches!(&r[..], [Response::Failed(e)] if e.is_definite()),
            "{r:?}"
        );
        assert_eq!(n.counters.refused_writes, 1);
        let c = ClientRef {
            id: 4,
            session: 7,
            op: OpId::NONE,
        };
        n.on_client(T0, c, get(), &mut out);
        assert_eq!(n.register(b"k").unwrap().waiting(), (1, 1));
        n.on_link(T0, LinkEvent::Down(Peer::Conn(7)), &mut out);
        assert_eq!(n.register(b"k").unwrap().waiting(), (0, 1));
    }

    /// A copy of a write already sent to this successor is not sent again
    /// (counted); the writes kept for re-sending are the last
    /// `SENT_WRITES_KEPT`; a pre-write whose write already passed here is
    /// a late copy: dropped, counted.
    #[test]
    fn copies_are_sent_once_and_the_resend_buffer_is_bounded() {
        let mut n = node(2, 3, 0);
        let mut out = O::new();
        n.send_ring(Msg::Write(entry(5, 1, "v")), &mut out);
        n.send_ring(Msg::Write(entry(5, 1, "v")), &mut out);
        assert_eq!((sends(&mut out).len(), n.counters.duplicates), (1, 1));
        for ts in 6..6 + SENT_WRITES_KEPT as u64 {
            n.send_ring(Msg::Write(entry(ts, 1, "v")), &mut out);
        }
        assert_eq!(n.sent_writes.len(), SENT_WRITES_KEPT);
        assert_eq!(n.sent_writes.front().map(|e| e.tag), Some(tag(6, 1)));
        let late = entry(3, 3, "late");
        n.written.insert(&late.key, late.tag);
        sends(&mut out);
        n.forward(Msg::PreWrite(late), &mut out);
        assert_eq!((sends(&mut out).len(), n.counters.duplicates), (0, 2));
    }

    /// Without a window (0) no credits are sent; a pre-write that arrives
    /// twice is forwarded once, the copy counted.
    #[test]
    fn no_credits_without_a_window_and_a_repeated_pre_write_is_counted() {
        let mut n = node(2, 3, 0);
        let mut out = O::new();
        n.receipt(1, &mut out);
        assert!(sends(&mut out).is_empty());
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(5, 1, "v")), &mut out);
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(5, 1, "v")), &mut out);
        assert_eq!((sends(&mut out).len(), n.counters.duplicates), (1, 1));
    }

    /// Fuzz seed 2745: a re-sent pre-write waited in `ready` while its
    /// write went by; sent, it was lapped again by the server where its
    /// round ends and left pending there for ever.
    #[test]
    fn a_queued_pre_write_whose_write_passed_since_is_not_sent() {
        for written in [false, true] {
            let mut n = RingNode::new(2, vec![1, 2, 3], RingConfig::default());
            let e = entry(4, 1, "a");
            n.queues.ready.push_back(Msg::PreWrite(e.clone()));
            if written {
                n.written.insert(&e.key, e.tag);
            }
            let mut out = O::new();
            n.pump(&mut out);
            let sent = sends(&mut out).len();
            assert_eq!(
                (sent, n.counters.duplicates),
                (usize::from(!written), u64::from(written))
            );
        }
    }

    /// `Recent` keeps exactly the last `WRITTEN_KEPT` writes.
    #[test]
    fn recent_writes_are_bounded_at_exactly_written_kept() {
        let mut r = Recent::default();
        let k = Bytes::from_static(b"k");
        for ts in 1..=WRITTEN_KEPT as u64 {
            r.insert(&k, tag(ts, 1));
        }
        r.insert(&k, tag(1, 1)); // seen: no change
        assert!(r.contains(&k, tag(1, 1)) && r.iter().count() == WRITTEN_KEPT);
        r.insert(&k, tag(WRITTEN_KEPT as u64 + 1, 1));
        assert!(!r.contains(&k, tag(1, 1)) && r.contains(&k, tag(2, 1)));
        assert_eq!(r.iter().next(), Some(&(k, tag(2, 1))));
    }

    #[test]
    fn messages_from_clients_or_from_outside_the_view_are_ignored() {
        let mut n = node(2, 3, 16);
        let mut out = O::new();
        n.on_msg(T0, Peer::Conn(5), Msg::PreWrite(entry(1, 1, "a")), &mut out);
        assert_eq!(n.counters.misrouted, 1);
        n.on_link(T0, LinkEvent::Down(Peer::Node(1)), &mut out);
        let gone = sends(&mut out);
        let life = None;
        assert_eq!(gone, vec![(Peer::Node(3), Msg::Gone { node: 1, life })]);
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(1, 1, "a")), &mut out);
        n.on_link(T0, LinkEvent::Up(Peer::Node(1)), &mut out);
        assert_eq!(n.counters.fenced, 1, "(d): back only through Join");
        // Up but not in the view: hailed (it may be in already, rejoin.rs).
        let hail = Msg::Hail {
            node: 2,
            writer: 2,
            answer: true,
        };
        assert_eq!(sends(&mut out), vec![(Peer::Node(1), hail)]);
        // Its ring messages now wait for it to be in.
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(2, 1, "b")), &mut out);
        assert_eq!((n.fenced_msgs.len(), n.counters.fenced), (1, 1));
        assert!(out.is_empty());
        // Credits are not fenced (they count connections), but 1's broke
        // and 2 (itself) was never a successor: both stale.
        n.on_msg(T0, Peer::Node(1), Msg::Credit { received: 1 }, &mut out);
        n.on_msg(T0, Peer::Node(2), Msg::Credit { received: 1 }, &mut out);
        assert_eq!(n.counters.stale_credits, 2, "only successors credit");
        assert_eq!(n.counters.fenced, 1);
        assert!(n.status().contains("next=3"));
        assert!(n
            .metrics()
            .iter()
            .any(|(k, _, v)| *k == "ring_view_size" && *v == 2));
    }

    #[test]
    fn a_credit_from_a_successor_out_of_the_view_counts_for_its_connection() {
        // Seed 2370 at N = 5: the view lost the successor (here a `Gone`
        // from the predecessor; there a `Join` of another life) while its
        // connection stayed up; its credits came while it was out, and
        // once back (`Hail`) its window must be open, not closed for good.
        let mut n = node(1, 3, 2);
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("a"), &mut out);
        n.on_client(T0, ClientRef::local(2), put("b"), &mut out);
        let to_2 = |s: Vec<(Peer, Msg)>| s.iter().filter(|(p, _)| *p == Peer::Node(2)).count();
        assert_eq!(to_2(sends(&mut out)), 2, "a full window");
        let gone = Msg::Gone {
            node: 2,
            life: None,
        };
        n.on_msg(T0, Peer::Node(3), gone, &mut out);
        assert_eq!(n.successor_id(), 3);
        n.on_msg(T0, Peer::Node(2), Msg::Credit { received: 2 }, &mut out);
        assert_eq!(n.counters.stale_credits, 0, "its connection is up");
        let hail = Msg::Hail {
            node: 2,
            writer: 2,
            answer: false,
        };
        n.on_msg(T0, Peer::Node(2), hail, &mut out);
        assert_eq!(n.successor_id(), 2, "back in the view");
        assert_eq!(n.link.credited, 2, "its window opened");
        assert!(to_2(sends(&mut out)) > 0, "the re-sends went out");
    }

    #[test]
    fn a_restarted_server_is_fenced_until_welcomed_and_asks_its_live_predecessor() {
        // (d): a restarted server (registers lost, dropped from every view)
        // must not serve stale values: it refuses and sends nothing but
        // `Join`, to its first predecessor not reported down.
        let mut n = node(2, 3, 16).restarted();
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), get(), &mut out);
        n.on_client(T0, ClientRef::local(2), put("v"), &mut out);
        let r = replies(&mut out);
        assert_eq!(r.len(), 2);
        assert!(r
            .iter()
            .all(|r| matches!(r, Response::Failed(e) if e.is_definite())));
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(entry(1, 1, "a")), &mut out);
        n.on_msg(
            T0,
            Peer::Node(3),
            Msg::ViewChange {
                view: 1,
                node: 3,
                writer: 3,
            },
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!((n.counters.fenced, n.successor_id()), (1, 3));
        assert_eq!(n.stashed_views.len(), 1, "applied once welcomed");
        assert_eq!(n.role(), "fenced");
        let joins = |out: &mut O| {
            (sends(out).into_iter())
                .map(|(to, m)| match m {
                    Msg::Join { node: 2, writer: 2 } => to,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        n.on_start(T0, &mut out);
        assert_eq!(joins(&mut out), vec![Peer::Node(1)]);
        n.on_link(T0, LinkEvent::Down(Peer::Node(3)), &mut out);
        assert!(joins(&mut out).is_empty(), "1 is still the target");
        n.on_link(T0, LinkEvent::Up(Peer::Node(3)), &mut out);
        n.on_link(T0, LinkEvent::Down(Peer::Node(1)), &mut out);
        assert_eq!(joins(&mut out), vec![Peer::Node(3)]);
        n.on_timer(T0, Timer::Join, &mut out);
        assert_eq!(joins(&mut out), vec![Peer::Node(3)], "again on the timer");
        assert_eq!(n.counters.joins_sent, 3);
    }

    #[test]
    fn only_a_restarted_server_with_rejoin_on_asks_to_join_at_start() {
        // A member of the first view is in: no join and no join timer (a
        // timer would hail and retry joins for nothing). Mutation testing:
        // `outside && rejoin` -> `||` survived.
        let start = |mut n: RingNode| {
            let mut out = O::new();
            n.on_start(T0, &mut out);
            out.drain().collect::<Vec<_>>()
        };
        assert!(start(node(2, 3, 16)).is_empty());
        let mut off = node(2, 3, 16).restarted();
        off.cfg.rejoin = false;
        assert!(start(off).is_empty(), "rejoin off: it stays out");
        let cmds = start(node(2, 3, 16).restarted());
        assert!(
            matches!(
                cmds.as_slice(),
                [
                    Command::Send {
                        msg: Msg::Join { node: 2, .. },
                        ..
                    },
                    Command::SetTimer {
                        timer: Timer::Join,
                        ..
                    }
                ]
            ),
            "{cmds:?}"
        );
    }
}
