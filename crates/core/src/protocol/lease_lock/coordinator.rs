//! The coordinator role, part 1: operations, the lock round and its
//! failure (seed 000 §4.1), backoff, retransmission and deadlines. The
//! read and write phases under the locks are in `phases.rs`.

use super::bugs::Bug;
use super::counters::Counters;
use super::msg::{LockId, Msg, Timer};
use crate::protocol::contract::{LinkEvent, Out, Protocol};
use crate::quorum::{majority, QuorumStatus, QuorumTracker};
use crate::rng::SplitMix64;
use crate::types::{ClientRef, NodeId, OpError, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a coordinator does when a lock round cannot reach Q grants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LockRetry {
    /// Fail the operation at once, definitely (the seed, §6.1).
    #[default]
    None,
    /// Try again after a jittered exponential delay, until the op timeout.
    Backoff,
}

/// Settings of a coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// An operation not done by then fails: definitely if no WRITE left yet.
    pub op_timeout: Duration,
    /// Re-send a phase's message to replicas that have not answered.
    pub retry_interval: Duration,
    pub lock_retry: LockRetry,
    /// A get writes the (tag, value) it read back to its locked quorum
    /// before unlocking (candidate repair; the seed does not).
    pub write_back: bool,
    /// UNLOCK a grant at once when it will not be used (after the Q-th, or
    /// for a round that ended); false = let it expire (the seed).
    pub release_surplus: bool,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            op_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_millis(200),
            lock_retry: LockRetry::None,
            write_back: false,
            release_surplus: true,
        }
    }
}

/// The first backoff delay and the most one delay may grow to.
pub const BACKOFF_BASE: Duration = Duration::from_millis(1);
pub const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// Locking (rounds and backoff) may use this share of the op timeout; the
/// rest is left for READ and WRITE. Without a reserve, a round that wins
/// just before the op timeout starts writes that cannot finish: a put
/// whose outcome is unknown instead of a definite refusal.
pub const LOCK_SHARE: u32 = 2;

#[derive(Clone, Debug)]
pub(super) enum Kind {
    Get,
    /// Put (Some) or delete (None).
    Write(Option<Bytes>),
}

#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// Collecting grants; `denied` replicas are not asked again this round.
    Locking { grants: QuorumTracker, denied: u64 },
    /// Holding the locks of `locked` (a bitmask of Q ids), reading them.
    Reading {
        locked: u64,
        replies: QuorumTracker,
        highest: Tag,
        value: Option<Bytes>,
    },
    /// Writing `(tag, value)` to `locked`; `result` answers the client.
    Writing {
        locked: u64,
        acks: QuorumTracker,
        tag: Tag,
        value: Option<Bytes>,
        result: Response,
    },
    /// Between a denied round (its grants released) and the retry.
    Backoff,
}

impl Phase {
    /// The replicas whose locks this phase holds.
    pub(super) fn locked(&self) -> u64 {
        match self {
            Phase::Locking { grants, .. } => grants.members(),
            Phase::Reading { locked, .. } | Phase::Writing { locked, .. } => *locked,
            Phase::Backoff => 0,
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) client: ClientRef,
    pub(super) key: Bytes,
    pub(super) kind: Kind,
    pub(super) phase: Phase,
    pub(super) deadline: Time,
    /// The last instant a lock round may still run ([`LOCK_SHARE`]).
    pub(super) lock_deadline: Time,
    pub(super) retry_at: Time,
    /// Lock rounds denied so far (the backoff exponent).
    pub(super) attempt: u32,
    /// A write already sent in an older configuration, to run again under
    /// new locks with the same tag (`adopt`), and the client's answer.
    pub(super) fixed: Option<(Tag, Option<Bytes>, Response)>,
}

impl Pending {
    /// The last instant a lock round may run: the lock budget, or for a
    /// write that already left in an older configuration (`adopt`), the
    /// op timeout (giving up early would only make its outcome unknown).
    pub(super) fn lock_until(&self) -> Time {
        if self.fixed.is_some() {
            self.deadline
        } else {
            self.lock_deadline
        }
    }
    /// Still trying to get its locks (in a round or between two).
    fn locking(&self) -> bool {
        matches!(self.phase, Phase::Locking { .. } | Phase::Backoff)
    }
}

/// Runs lease-lock operations for clients. `id` is the writer id that goes
/// into tags and lock ids: unique among all coordinators of a cluster.
#[derive(Debug)]
pub struct Coordinator {
    pub(super) id: u64,
    pub(super) members: Vec<NodeId>,
    pub(super) quorum: usize,
    /// The configuration epoch its operations run in (`protocol::reconfig`).
    pub(super) epoch: u64,
    pub(super) cfg: CoordinatorConfig,
    pub(super) bug: Option<Bug>,
    next_round: u64,
    /// Highest ts this coordinator has put into a tag (tags stay unique
    /// even if a lease ran out and two writers overlapped).
    pub(super) last_ts: u64,
    /// By lock round. Ordered: `tick` iterates it into the output.
    pub(super) pending: BTreeMap<u64, Pending>,
    ticking: bool,
    rng: SplitMix64,
    pub counters: Counters,
    /// Operations answered: done, refused (definite), unknown outcome.
    pub completed: u64,
    pub refused: u64,
    pub unknown: u64,
}

impl Coordinator {
    pub fn new(id: u64, members: Vec<NodeId>, cfg: CoordinatorConfig) -> Self {
        assert!(!members.is_empty(), "a coordinator needs a replica");
        let quorum = majority(members.len());
        Coordinator {
            id,
            members,
            quorum,
            epoch: 0,
            cfg,
            bug: None,
            next_round: 1,
            last_ts: 0,
            pending: BTreeMap::new(),
            ticking: false,
            rng: SplitMix64(id),
            counters: Counters::default(),
            completed: 0,
            refused: 0,
            unknown: 0,
        }
    }
    pub fn with_bug(mut self, bug: Option<Bug>) -> Self {
        self.bug = bug;
        if bug == Some(Bug::MinorityQuorum) {
            self.quorum = (self.members.len() / 2).max(1);
        }
        self
    }
    /// Seed the backoff jitter (the spec's `seed`).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = SplitMix64(seed);
        self
    }
    pub fn quorum(&self) -> usize {
        self.quorum
    }
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
    pub fn config(&self) -> &CoordinatorConfig {
        &self.cfg
    }
    pub(super) fn lock_id(&self, round: u64) -> LockId {
        LockId {
            owner: self.id,
            round,
        }
    }
    pub(super) fn all(&self) -> u64 {
        self.members.iter().fold(0, |m, &n| m | 1 << n)
    }
    /// A Q-of-N tracker where only the replicas in `only` can still count.
    pub(super) fn tracker(&self, only: u64) -> QuorumTracker {
        let mut t = QuorumTracker::new(self.members.len(), self.quorum);
        for &n in self.members.iter().filter(|&&n| only & 1 << n == 0) {
            t.lose(n);
        }
        t
    }
    pub(super) fn send_to(&self, ids: u64, msg: &Msg, out: &mut Out<Msg, Timer>) {
        for &n in self.members.iter().filter(|&&n| ids & 1 << n != 0) {
            out.send(Peer::Node(n), msg.clone());
        }
    }

    /// Start an operation for `client`: its first lock round.
    pub fn start(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        let (key, kind) = match req {
            Request::Get { key } => (key, Kind::Get),
            Request::Put { key, value } => (key, Kind::Write(Some(value))),
            Request::Delete { key } => (key, Kind::Write(None)),
            req @ Request::Znode(_) => return out.reply(client, req.refusal().expect("not KV")),
        };
        let p = Pending {
            client,
            key,
            kind,
            phase: Phase::Backoff,
            deadline: now.saturating_add(self.cfg.op_timeout),
            lock_deadline: now.saturating_add(self.cfg.op_timeout / LOCK_SHARE),
            retry_at: now,
            attempt: 0,
            fixed: None,
        };
        self.lock_round(now, p, out);
        if !self.ticking {
            self.ticking = true;
            out.set_timer(self.tick_interval(), Timer::Tick);
        }
    }

    /// §4.1: LOCK_REQ to all N under a fresh round.
    pub(super) fn lock_round(&mut self, now: Time, mut p: Pending, out: &mut Out<Msg, Timer>) {
        let round = self.next_round;
        self.next_round += 1;
        let lock = self.lock_id(round);
        self.send_to(
            self.all(),
            &Msg::LockReq {
                lock,
                key: p.key.clone(),
                epoch: self.epoch,
            },
            out,
        );
        p.phase = Phase::Locking {
            grants: self.tracker(self.all()),
            denied: 0,
        };
        p.retry_at = now.saturating_add(self.cfg.retry_interval);
        self.pending.insert(round, p);
    }

    /// A grant the coordinator will not use: release it, or let it expire.
    fn surplus(&mut self, from: NodeId, lock: LockId, key: Bytes, out: &mut Out<Msg, Timer>) {
        self.counters.surplus_grants += 1;
        if self.cfg.release_surplus {
            out.send(Peer::Node(from), Msg::Unlock { lock, key });
        }
    }

    fn on_granted(
        &mut self,
        now: Time,
        from: NodeId,
        lock: LockId,
        key: Bytes,
        out: &mut Out<Msg, Timer>,
    ) {
        let Some(p) = self.pending_of(lock) else {
            return self.surplus(from, lock, key, out);
        };
        let Phase::Locking { grants, .. } = &mut p.phase else {
            // Q grants are in: a re-sent grant of a lock in use, or surplus.
            if p.phase.locked() & 1 << from != 0 {
                self.counters.duplicate_replies += 1;
                return;
            }
            return self.surplus(from, lock, key, out);
        };
        match grants.record(from) {
            QuorumStatus::Duplicate => self.counters.duplicate_replies += 1,
            QuorumStatus::Pending => {}
            QuorumStatus::Won => self.on_locked(now, lock.round, out),
            QuorumStatus::AlreadyWon => unreachable!("the phase changes at the Q-th grant"),
        }
    }

    fn on_denied(&mut self, now: Time, from: NodeId, lock: LockId, out: &mut Out<Msg, Timer>) {
        let Some(Pending {
            phase: Phase::Locking { grants, denied },
            ..
        }) = self.pending_of(lock)
        else {
            self.counters.stale_replies += 1;
            return;
        };
        if grants.has(from) || *denied & 1 << from != 0 {
            self.counters.duplicate_replies += 1;
            return;
        }
        *denied |= 1 << from;
        grants.lose(from);
        if !grants.still_possible() {
            self.lock_round_failed(now, lock.round, out);
        }
    }

    /// Fewer than Q grants are possible: release what the round got, then
    /// fail definitely (`none`) or retry after a backoff delay.
    fn lock_round_failed(&mut self, now: Time, round: u64, out: &mut Out<Msg, Timer>) {
        let p = self.pending.get_mut(&round).expect("present");
        let (granted, got) = match &p.phase {
            Phase::Locking { grants, .. } => (grants.members(), grants.count()),
            _ => unreachable!("only a lock round fails"),
        };
        let key = p.key.clone();
        p.phase = Phase::Backoff;
        p.attempt += 1;
        let (attempt, deadline) = (p.attempt, p.lock_until());
        if self.bug != Some(Bug::NoUnlockAfterFailure) {
            let lock = self.lock_id(round);
            self.send_to(granted, &Msg::Unlock { lock, key }, out);
        }
        let delay = match self.cfg.lock_retry {
            LockRetry::None => None,
            LockRetry::Backoff => Some(self.backoff(attempt)),
        };
        match delay.filter(|&d| now.saturating_add(d) < deadline) {
            Some(d) => out.set_timer(d, Timer::Retry { round }),
            None => {
                let why = format!("lock denied ({got} of {} grants)", self.quorum);
                let e = self.gave_up(&self.pending[&round], why);
                self.finish(round, Response::Failed(e), out);
            }
        }
    }

    /// The delay before retry `attempt` (1, 2, …): uniform in [d/2, d] for
    /// d = base · 2^(attempt−1), at most [`BACKOFF_MAX`] ("equal jitter":
    /// contenders spread out, and none retries at once).
    pub(super) fn backoff(&mut self, attempt: u32) -> Duration {
        let d = BACKOFF_BASE
            .saturating_mul(1 << attempt.saturating_sub(1).min(20))
            .min(BACKOFF_MAX);
        let half = (d / 2).as_micros() as u64;
        Duration::from_micros(half + self.rng.below(half + 1))
    }

    fn on_retry(&mut self, now: Time, round: u64, out: &mut Out<Msg, Timer>) {
        match self.pending.remove(&round) {
            Some(p) if matches!(p.phase, Phase::Backoff) => {
                self.counters.retries += 1;
                self.lock_round(now, p, out);
            }
            Some(p) => {
                self.pending.insert(round, p);
                self.counters.stale_timers += 1;
            }
            None => self.counters.stale_timers += 1,
        }
    }

    /// Replica `n`'s link went down (it crashed, or is paused or cut off):
    /// an operation that counts on its lock would wait for its READ reply
    /// or WRITE ack until the op timeout, holding its other locks, so its
    /// key stays blocked that long (a SIGKILLed replica stalled every
    /// key whose lock it held for a whole op timeout). Before any WRITE
    /// nothing happened: release the locks and start a new round at once
    /// (it needs Q grants of the others); a lock round stops counting on
    /// `n`. A write already sent that still lacks `n`'s ack is answered
    /// now as at its deadline (a put: unknown; a get's write-back: a
    /// definite failure) and its locks released: waiting could only end
    /// so, and it blocked the key meanwhile.
    pub fn on_down(&mut self, now: Time, n: NodeId, out: &mut Out<Msg, Timer>) {
        if self.bug == Some(Bug::WaitForDownReplica) || n >= 64 {
            return;
        }
        let bit = 1u64 << n;
        let rounds: Vec<u64> = self.pending.keys().copied().collect();
        for round in rounds {
            let p = self.pending.get_mut(&round).expect("listed");
            let relock = matches!(p.phase, Phase::Locking { .. } | Phase::Reading { .. })
                && p.phase.locked() & bit != 0;
            if let Phase::Locking { grants, denied } = &mut p.phase {
                if !relock && *denied & bit == 0 {
                    *denied |= bit;
                    grants.lose(n);
                    if !grants.still_possible() {
                        self.lock_round_failed(now, round, out);
                    }
                    continue;
                }
            }
            if let Phase::Writing { locked, acks, .. } = &p.phase {
                if *locked & bit != 0 && !acks.has(n) {
                    self.counters.writes_cut += 1;
                    let resp = Response::Failed(self.deadline_error(&self.pending[&round]));
                    self.finish(round, resp, out);
                }
                continue;
            }
            if !relock {
                continue;
            }
            self.counters.relocks += 1;
            let lock = self.lock_id(round);
            let mut p = self.pending.remove(&round).expect("listed");
            let key = p.key.clone();
            self.send_to(p.phase.locked(), &Msg::Unlock { lock, key }, out);
            p.phase = Phase::Backoff;
            if now < p.lock_until() {
                self.lock_round(now, p, out);
            } else {
                let e = self.gave_up(&p, format!("replica {n} went down, no time to relock"));
                self.pending.insert(round, p);
                self.finish(round, Response::Failed(e), out);
            }
        }
    }

    /// Answer the client: release the locks the operation holds, count it.
    pub(super) fn finish(&mut self, round: u64, resp: Response, out: &mut Out<Msg, Timer>) {
        let p = self.pending.remove(&round).expect("present");
        let lock = self.lock_id(round);
        self.send_to(p.phase.locked(), &Msg::Unlock { lock, key: p.key }, out);
        match &resp {
            Response::Failed(e) if e.is_definite() => self.refused += 1,
            Response::Failed(_) => self.unknown += 1,
            _ => self.completed += 1,
        }
        out.reply(p.client, resp);
    }

    fn tick_interval(&self) -> Duration {
        self.cfg.retry_interval.min(self.cfg.op_timeout) / 2
    }

    /// The periodic tick: fail operations past their deadline, re-send the
    /// current phase to the replicas that have not answered.
    pub fn tick(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.ticking = false;
        let expired: Vec<u64> = (self.pending.iter())
            .filter(|(_, p)| now >= p.deadline || (p.locking() && now >= p.lock_until()))
            .map(|(&r, _)| r)
            .collect();
        for round in expired {
            let resp = Response::Failed(self.deadline_error(&self.pending[&round]));
            self.finish(round, resp, out);
        }
        let due: Vec<u64> = (self.pending.iter())
            .filter(|(_, p)| now >= p.retry_at)
            .map(|(&r, _)| r)
            .collect();
        for round in due {
            self.resend(round, out);
            let p = self.pending.get_mut(&round).expect("present");
            p.retry_at = now.saturating_add(self.cfg.retry_interval);
        }
        if !self.pending.is_empty() {
            self.ticking = true;
            out.set_timer(self.tick_interval(), Timer::Tick);
        }
    }

    /// Before any WRITE left nothing happened: a definite failure. After,
    /// a put's write may have landed on some replicas: unknown. A get's
    /// write-back only spreads a value some replica already holds, so a get
    /// fails definitely in every phase.
    fn deadline_error(&self, p: &Pending) -> OpError {
        if p.fixed.is_some() && !matches!(p.phase, Phase::Writing { .. }) {
            return self.gave_up(p, "the op timeout passed while relocking".into());
        }
        match &p.phase {
            Phase::Writing { .. } if matches!(p.kind, Kind::Get) => {
                OpError::refused("the op timeout passed during the write-back")
            }
            Phase::Writing { acks, .. } => OpError::Timeout {
                got: acks.count(),
                need: acks.need(),
            },
            Phase::Locking { grants, .. } => OpError::refused(format!(
                "no lock quorum in time ({} of {} grants)",
                grants.count(),
                grants.need()
            )),
            Phase::Reading { .. } | Phase::Backoff => {
                OpError::refused("the op timeout passed before any write")
            }
        }
    }

    /// Re-send the current phase's message to the replicas yet to answer.
    fn resend(&self, round: u64, out: &mut Out<Msg, Timer>) {
        let p = &self.pending[&round];
        let (lock, key, epoch) = (self.lock_id(round), p.key.clone(), self.epoch);
        let (to, msg) = match &p.phase {
            Phase::Locking { grants, denied } => (
                self.all() & !grants.members() & !denied,
                Msg::LockReq { lock, key, epoch },
            ),
            Phase::Reading {
                locked, replies, ..
            } => (locked & !replies.members(), Msg::Read { lock, key, epoch }),
            Phase::Writing {
                locked,
                acks,
                tag,
                value,
                ..
            } => (
                locked & !acks.members(),
                Msg::Write {
                    lock,
                    key,
                    tag: *tag,
                    value: value.clone(),
                    epoch,
                },
            ),
            Phase::Backoff => return,
        };
        self.send_to(to, &msg, out);
    }

    /// Handle a reply addressed to the coordinator role.
    pub fn handle(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        let Peer::Node(n) = from else {
            self.counters.misrouted += 1; // replies come from replicas only
            return;
        };
        if !self.members.contains(&n) {
            // Not a replica of this cluster: it counts in no quorum (and
            // an id past 63 would not fit the quorum bitsets).
            self.counters.misrouted += 1;
            return;
        }
        match msg {
            Msg::LockGranted { lock, key } => self.on_granted(now, n, lock, key, out),
            Msg::LockDenied { lock } => self.on_denied(now, n, lock, out),
            Msg::ReadReply { lock, tag, value } => {
                self.on_read_reply(now, n, lock, tag, value, out)
            }
            Msg::Ack { lock } => self.on_ack(n, lock, out),
            Msg::WriteDenied { lock } => self.on_write_denied(n, lock, out),
            // A replica of our configuration has moved on: follow it.
            Msg::Moved { config, .. } => self.adopt(now, &config, out),
            Msg::LockReq { .. }
            | Msg::Change(_)
            | Msg::Unlock { .. }
            | Msg::Read { .. }
            | Msg::Write { .. }
            | Msg::SyncRequest
            | Msg::SyncReply { .. } => self.counters.misrouted += 1,
        }
    }

    /// Route a timer of the coordinator.
    pub fn timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Tick => self.tick(now, out),
            Timer::Retry { round } => self.on_retry(now, round, out),
            Timer::Sync | Timer::Reconfig => {} // only servers
        }
    }

    pub fn status(&self) -> String {
        format!(
            "coordinator id={} in_flight={} completed={} refused={} unknown={}",
            self.id,
            self.pending.len(),
            self.completed,
            self.refused,
            self.unknown
        )
    }
}

impl Protocol for Coordinator {
    type Msg = Msg;
    type Timer = Timer;
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.start(now, client, req, out);
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        self.handle(now, from, msg, out);
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        self.timer(now, timer, out);
    }
    fn on_link(&mut self, now: Time, ev: LinkEvent, out: &mut Out<Msg, Timer>) {
        if let LinkEvent::Down(Peer::Node(n)) = ev {
            self.on_down(now, n, out);
        }
    }
    fn status(&self) -> String {
        Coordinator::status(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Command;
    use crate::protocol::lease_lock::testing::*;

    fn grant(c: &mut Coordinator, from: NodeId, l: LockId, out: &mut O) {
        c.handle(
            T0,
            Peer::Node(from),
            Msg::LockGranted {
                lock: l,
                key: key(),
            },
            out,
        );
    }
    fn deny(c: &mut Coordinator, from: NodeId, l: LockId, out: &mut O) {
        c.handle(T0, Peer::Node(from), Msg::LockDenied { lock: l }, out);
    }
    fn unlock_of(l: LockId) -> Msg {
        Msg::Unlock {
            lock: l,
            key: key(),
        }
    }
    /// `out` holds exactly an UNLOCK to `to` and a failure: return it.
    fn unlock_and_failure(out: &mut O, to: NodeId, l: LockId) -> OpError {
        let cmds: Vec<_> = out.drain().collect();
        let unlock = Command::Send {
            to: Peer::Node(to),
            msg: unlock_of(l),
        };
        match &cmds[..] {
            [u, Command::Reply {
                resp: Response::Failed(e),
                ..
            }] if *u == unlock => e.clone(),
            _ => panic!("{cmds:?}"),
        }
    }
    fn backoff_cfg() -> CoordinatorConfig {
        CoordinatorConfig {
            lock_retry: LockRetry::Backoff,
            ..Default::default()
        }
    }

    /// §4.1: LOCK_REQ to all N, and the READ starts at the Q-th grant.
    #[test]
    fn a_lock_round_asks_all_and_stops_at_q_grants() {
        let mut c = coord(5);
        let mut out = O::new();
        c.start(T0, ClientRef::local(1), get(), &mut out);
        let s = sends(&mut out);
        assert_eq!(to_ids(&s), vec![1, 2, 3, 4, 5]);
        let l = lock(ME, 1);
        assert!(s.iter().all(|(_, m)| *m
            == Msg::LockReq {
                lock: l,
                key: key(),
                epoch: 0
            }));
        grant(&mut c, 2, l, &mut out);
        grant(&mut c, 4, l, &mut out);
        grant(&mut c, 4, l, &mut out);
        assert!(out.is_empty(), "2 of 5 (one twice) is no quorum");
        assert_eq!(c.counters.duplicate_replies, 1);
        grant(&mut c, 5, l, &mut out);
        let s = sends(&mut out);
        assert_eq!(to_ids(&s), vec![2, 4, 5], "READ the locked replicas only");
        assert!(s.iter().all(|(_, m)| matches!(m, Msg::Read { .. })));
        // A grant after the Q-th is released at once; a re-sent one is not.
        grant(&mut c, 1, l, &mut out);
        grant(&mut c, 2, l, &mut out);
        assert_eq!(sends(&mut out), vec![(Peer::Node(1), unlock_of(l))]);
        assert_eq!(
            (c.counters.surplus_grants, c.counters.duplicate_replies),
            (1, 2)
        );
    }

    /// §4.1: once Q grants are impossible the round fails at once (not at
    /// the timeout), releases what it got, and fails definitely.
    #[test]
    fn a_lost_lock_round_unlocks_its_grants_and_is_refused() {
        let mut c = coord(5);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[3], &mut out);
        deny(&mut c, 1, l, &mut out);
        deny(&mut c, 1, l, &mut out);
        deny(&mut c, 2, l, &mut out);
        assert!(out.is_empty(), "1 granted + 2 open can still make 3");
        assert_eq!(c.counters.duplicate_replies, 1);
        deny(&mut c, 5, l, &mut out);
        let e = unlock_and_failure(&mut out, 3, l);
        assert!(e.is_definite() && e.to_string().contains("1 of 3"), "{e}");
        assert_eq!((c.refused, c.in_flight()), (1, 0));
        // Replica 4's late grant is released; its late denial is stale.
        grant(&mut c, 4, l, &mut out);
        deny(&mut c, 4, l, &mut out);
        assert_eq!(sends(&mut out), vec![(Peer::Node(4), unlock_of(l))]);
        assert_eq!(c.counters.stale_replies, 1);
    }

    /// Messages of another coordinator (or of this one's earlier life) and
    /// of finished rounds change nothing; grants among them are released.
    #[test]
    fn stale_and_foreign_replies_are_counted_not_used() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, get(), &[1], &mut out);
        let other = lock(ME + 1, l.round);
        grant(&mut c, 2, other, &mut out);
        assert_eq!(sends(&mut out), vec![(Peer::Node(2), unlock_of(other))]);
        deny(&mut c, 2, other, &mut out);
        let read = Msg::ReadReply {
            lock: other,
            tag: Tag::ZERO,
            value: None,
        };
        c.handle(T0, Peer::Node(2), read, &mut out);
        c.handle(T0, Peer::Node(2), Msg::Ack { lock: other }, &mut out);
        c.handle(T0, Peer::Node(2), Msg::WriteDenied { lock: l }, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.counters.stale_replies, 4);
        c.handle(
            T0,
            Peer::Conn(7),
            Msg::LockGranted {
                lock: l,
                key: key(),
            },
            &mut out,
        );
        c.handle(
            T0,
            Peer::Node(2),
            Msg::LockReq {
                lock: l,
                key: key(),
                epoch: 0,
            },
            &mut out,
        );
        assert_eq!(c.counters.misrouted, 2);
        assert_eq!(c.in_flight(), 1, "the operation still waits for a grant");
    }

    /// Jittered exponential backoff: within [d/2, d], d doubling up to the
    /// cap, and the same from the same seed.
    #[test]
    fn backoff_doubles_with_jitter_up_to_a_cap_and_replays_from_its_seed() {
        let mut c = coord_with(3, backoff_cfg()).with_seed(42);
        let mut d = coord_with(3, backoff_cfg()).with_seed(42);
        for attempt in 1..12 {
            let cap = (BACKOFF_BASE * (1 << (attempt - 1))).min(BACKOFF_MAX);
            let got = c.backoff(attempt);
            assert!(got >= cap / 2 && got <= cap, "attempt {attempt}: {got:?}");
            assert_eq!(d.backoff(attempt), got);
        }
        let draws: std::collections::HashSet<_> = (0..20).map(|_| c.backoff(7)).collect();
        assert!(draws.len() > 10, "jittered: {draws:?}");
    }

    /// With backoff a denied round retries under a new round (so the late
    /// messages of the old one cannot act for it) after the Retry timer.
    #[test]
    fn a_denied_round_retries_under_a_new_round_after_backoff() {
        let mut c = coord_with(3, backoff_cfg());
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1], &mut out);
        timers(&mut out);
        deny(&mut c, 2, l, &mut out);
        deny(&mut c, 3, l, &mut out);
        let cmds: Vec<_> = out.drain().collect();
        assert_eq!(cmds.len(), 2, "no answer while backing off: {cmds:?}");
        assert_eq!(
            cmds[0],
            Command::Send {
                to: Peer::Node(1),
                msg: unlock_of(l)
            }
        );
        let Command::SetTimer { after, timer } = &cmds[1] else {
            panic!("{cmds:?}")
        };
        assert_eq!(*timer, Timer::Retry { round: 1 });
        assert!(*after <= BACKOFF_BASE);
        grant(&mut c, 1, l, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Node(1), unlock_of(l))],
            "old round's grant"
        );
        c.timer(Time(1_000), Timer::Retry { round: 1 }, &mut out);
        let s = sends(&mut out);
        let l2 = lock(ME, 2);
        assert_eq!(to_ids(&s), vec![1, 2, 3]);
        assert!(s.iter().all(|(_, m)| *m
            == Msg::LockReq {
                lock: l2,
                key: key(),
                epoch: 0
            }));
        assert_eq!(c.counters.retries, 1);
        c.timer(Time(1_000), Timer::Retry { round: 1 }, &mut out);
        assert!(out.is_empty());
        assert_eq!(
            c.counters.stale_timers, 1,
            "a timer after the round moved on"
        );
        deny(&mut c, 2, l2, &mut out);
        deny(&mut c, 3, l2, &mut out);
        assert_eq!(timers(&mut out)[0].1, Timer::Retry { round: 2 });
    }

    /// Backoff ends at the op timeout: a retry that would start after the
    /// deadline is not waited for.
    #[test]
    fn backoff_gives_up_definitely_at_the_deadline() {
        let cfg = CoordinatorConfig {
            op_timeout: Duration::from_micros(400),
            ..backoff_cfg()
        };
        let mut c = coord_with(3, cfg);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[], &mut out);
        timers(&mut out);
        deny(&mut c, 1, l, &mut out);
        deny(&mut c, 2, l, &mut out);
        // The first delay is in [500 us, 1 ms]: past the 400 us deadline.
        let r = replies(&mut out);
        assert!(
            matches!(&r[..], [Response::Failed(e)] if e.is_definite()),
            "{r:?}"
        );
        assert_eq!(c.in_flight(), 0);
    }

    /// Locking may use half the op timeout: found by `sim --opt
    /// write-back=true` (seeds 189, 199 at lease=100ms): backoff retries won
    /// the locks 2 ms before the op timeout, and the writes they started
    /// timed out (unknown) where a refusal was possible.
    #[test]
    fn locking_stops_at_half_the_op_timeout_and_fails_definitely() {
        let mut c = coord_with(3, backoff_cfg()); // timeout 2 s
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[1], &mut out);
        out.drain();
        c.tick(Time(999_999), &mut out);
        assert!(replies(&mut out).is_empty(), "still within the budget");
        c.tick(Time(1_000_000), &mut out);
        let e = unlock_and_failure(&mut out, 1, l);
        assert!(e.is_definite(), "{e}");
        assert_eq!(c.in_flight(), 0);

        // A backoff delay ending past the budget is not waited for.
        let mut c = coord_with(3, backoff_cfg());
        let l = locked(&mut c, put(b"v"), &[], &mut out);
        out.drain();
        c.handle(
            Time(999_900),
            Peer::Node(1),
            Msg::LockDenied { lock: l },
            &mut out,
        );
        c.handle(
            Time(999_900),
            Peer::Node(2),
            Msg::LockDenied { lock: l },
            &mut out,
        );
        let r = replies(&mut out);
        assert!(
            matches!(&r[..], [Response::Failed(e)] if e.is_definite()),
            "{r:?}"
        );
    }

    /// A get's write-back cut short (deadline or WRITE_DENIED) fails
    /// definitely: it only spread a value a replica already held.
    #[test]
    fn a_get_whose_write_back_is_cut_short_fails_definitely() {
        let cfg = CoordinatorConfig {
            write_back: true,
            ..Default::default()
        };
        for denied in [false, true] {
            let mut c = coord_with(3, cfg.clone());
            let mut out = O::new();
            let l = locked(&mut c, get(), &[1, 2], &mut out);
            for n in [1, 2] {
                let reply = Msg::ReadReply {
                    lock: l,
                    tag: Tag { ts: 4, writer: 9 },
                    value: None,
                };
                c.handle(T0, Peer::Node(n), reply, &mut out);
            }
            assert!(sends(&mut out)
                .iter()
                .any(|(_, m)| matches!(m, Msg::Write { .. })));
            c.handle(T0, Peer::Node(1), Msg::Ack { lock: l }, &mut out);
            if denied {
                c.handle(T0, Peer::Node(2), Msg::WriteDenied { lock: l }, &mut out);
            } else {
                c.tick(Time(2_000_000), &mut out);
            }
            let r = replies(&mut out);
            assert!(
                matches!(&r[..], [Response::Failed(e)] if e.is_definite()),
                "{r:?}"
            );
            assert_eq!((c.refused, c.unknown), (1, 0));
        }
    }

    /// The tick re-sends each phase to the silent replicas, and at the
    /// deadline fails the op: definitely before any WRITE, else unknown.
    #[test]
    fn the_tick_resends_and_fails_by_phase_at_the_deadline() {
        let mut c = coord(3); // retry 200 ms, timeout 2 s
        let mut out = O::new();
        assert!(timers(&mut O::new()).is_empty());
        c.start(T0, ClientRef::local(1), get(), &mut out);
        assert_eq!(
            timers(&mut out),
            vec![(Duration::from_millis(100), Timer::Tick)]
        );
        let l = lock(ME, 1);
        grant(&mut c, 1, l, &mut out);
        deny(&mut c, 3, l, &mut out);
        out.drain();
        c.tick(Time(100_000), &mut out);
        assert!(sends(&mut out).is_empty(), "not before the retry interval");
        c.tick(Time(200_000), &mut out);
        let s = sends(&mut out);
        assert_eq!(
            to_ids(&s),
            vec![2],
            "not the granted nor the denied replica"
        );
        c.timer(Time(2_000_000), Timer::Tick, &mut out);
        let e = unlock_and_failure(&mut out, 1, l);
        assert!(e.is_definite() && e.to_string().contains("1 of 2"), "{e}");

        // In the write phase the deadline leaves the outcome unknown.
        let mut c = coord(3);
        let l = writing(&mut c, put(b"v"), &[1, 2], &mut out);
        c.handle(T0, Peer::Node(1), Msg::Ack { lock: l }, &mut out);
        out.drain();
        c.tick(Time(300_000), &mut out);
        let s = sends(&mut out);
        assert_eq!(to_ids(&s), vec![2]);
        assert!(matches!(s[0].1, Msg::Write { .. }));
        c.tick(Time(2_000_000), &mut out);
        let r = replies(&mut out);
        assert_eq!(
            r,
            vec![Response::Failed(OpError::Timeout { got: 1, need: 2 })]
        );
        assert_eq!(c.unknown, 1);
    }

    /// A SIGKILLed replica whose lock an operation held stalled its key
    /// for a whole op timeout (the op waited for its READ reply, holding
    /// the other lock). On its link going down the op releases its locks
    /// and locks anew at once; a round only stops counting on a replica
    /// that had not granted; a write already sent is left to its deadline.
    #[test]
    fn a_replica_going_down_makes_an_op_holding_its_lock_lock_anew() {
        for bug in [None, Some(Bug::WaitForDownReplica)] {
            let mut c = coord(3).with_bug(bug);
            let mut out = O::new();
            let l = locked(&mut c, put(b"v"), &[1, 3], &mut out);
            out.drain();
            c.on_down(T0, 2, &mut out);
            assert!(sends(&mut out).is_empty(), "2's lock is not held: go on");
            c.on_down(T0, 3, &mut out);
            let s = sends(&mut out);
            if bug.is_some() {
                assert!(s.is_empty() && c.counters.relocks == 0);
                continue;
            }
            assert!(s.contains(&(Peer::Node(1), unlock_of(l))), "{s:?}");
            assert!(s.contains(&(Peer::Node(3), unlock_of(l))), "{s:?}");
            let next = (s.iter())
                .filter_map(|(to, m)| match m {
                    Msg::LockReq { lock, .. } => Some((*to, *lock)),
                    _ => None,
                })
                .collect::<Vec<_>>();
            assert_eq!(next.len(), 3, "a new round asks all: {s:?}");
            assert!(next.iter().all(|(_, lock)| lock.round != l.round));
            assert_eq!(c.counters.relocks, 1);
            // The new round: 3 is down; 1 and 2 grant and the op goes on.
            let l2 = next[0].1;
            c.on_down(T0, 3, &mut out);
            assert!(sends(&mut out).is_empty(), "not counted on: nothing to do");
            for n in [1, 2] {
                let g = Msg::LockGranted {
                    lock: l2,
                    key: key(),
                };
                c.handle(T0, Peer::Node(n), g, &mut out);
            }
            let s = sends(&mut out);
            assert!(s.iter().all(|(_, m)| matches!(m, Msg::Read { .. })) && s.len() == 2);
        }
    }

    /// In a lock round: a replica that granted and went down makes the
    /// round start anew (its grant is worth nothing); one that had not
    /// answered stops counting, so the round fails as soon as Q grants
    /// are out of reach instead of waiting for it.
    #[test]
    fn a_replica_going_down_during_a_lock_round() {
        let mut c = coord(3);
        let mut out = O::new();
        let l = locked(&mut c, put(b"v"), &[3], &mut out);
        out.drain();
        c.on_down(T0, 3, &mut out);
        let s = sends(&mut out);
        assert!(s.contains(&(Peer::Node(3), unlock_of(l))), "{s:?}");
        let round = |s: &[(Peer, Msg)]| {
            (s.iter()).find_map(|(_, m)| match m {
                Msg::LockReq { lock, .. } => Some(*lock),
                _ => None,
            })
        };
        let l2 = round(&s).expect("a new round");
        assert_ne!(l2, l);
        // The new round: 1 grants, 3 is down (not answered), 2 denies.
        let g = Msg::LockGranted {
            lock: l2,
            key: key(),
        };
        c.handle(T0, Peer::Node(1), g, &mut out);
        c.on_down(T0, 3, &mut out);
        assert!(sends(&mut out).is_empty());
        c.handle(T0, Peer::Node(2), Msg::LockDenied { lock: l2 }, &mut out);
        let s = sends(&mut out);
        assert!(s.contains(&(Peer::Node(1), unlock_of(l2))), "failed: {s:?}");
        assert_eq!(c.counters.relocks, 1);
    }

    /// A put whose WRITE still lacks the ack of a replica that went down
    /// is answered at once, as at its deadline (unknown), and unlocks; one
    /// that has that ack goes on.
    #[test]
    fn a_write_missing_the_ack_of_a_replica_gone_down_is_answered_at_once() {
        for acked_by_3 in [false, true] {
            let mut c = coord(3);
            let mut out = O::new();
            let l = writing(&mut c, put(b"v"), &[1, 3], &mut out);
            out.drain();
            c.handle(T0, Peer::Node(1), Msg::Ack { lock: l }, &mut out);
            if acked_by_3 {
                c.handle(T0, Peer::Node(3), Msg::Ack { lock: l }, &mut out);
                out.drain();
                assert_eq!(c.in_flight(), 0, "done");
                continue;
            }
            assert!(out.drain().next().is_none());
            c.on_down(T0, 3, &mut out);
            let (s, r) = (sends(&mut out), c.counters.writes_cut);
            assert_eq!(r, 1);
            assert!(s.contains(&(Peer::Node(1), unlock_of(l))), "{s:?}");
            assert_eq!(c.in_flight(), 0);
            assert_eq!(c.unknown, 1, "a put cut short: unknown");
        }
    }

    #[test]
    fn timers_after_completion_change_nothing() {
        let mut c = coord(1);
        let mut out = O::new();
        let l = locked(&mut c, get(), &[1], &mut out);
        let reply = Msg::ReadReply {
            lock: l,
            tag: Tag::ZERO,
            value: None,
        };
        c.handle(T0, Peer::Node(1), reply, &mut out);
        assert_eq!(replies(&mut out), vec![Response::Value(None)]);
        assert_eq!(c.completed, 1);
        c.timer(Time(5_000_000), Timer::Tick, &mut out);
        c.timer(Time(5_000_000), Timer::Retry { round: 1 }, &mut out);
        assert!(out.is_empty(), "{:?}", out.commands());
        assert_eq!(c.counters.stale_timers, 1);
        assert!(c.status().contains("completed=1"));
    }
}
