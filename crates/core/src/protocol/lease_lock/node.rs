//! The server: a replica plus a coordinator for clients that do not run
//! their own (proxy mode).

use super::bugs::Bug;
use super::coordinator::{Coordinator, CoordinatorConfig};
use super::msg::{Msg, Timer};
use super::reconfig::{change_bug, KEYS};
use super::replica::Replica;
use crate::protocol::catch_up::{self, CatchUp};
use crate::protocol::contract::Membership;
use crate::protocol::contract::{read_metrics, Export, LinkEvent, Metric, Out, Protocol, Record};
use crate::protocol::reconfig::{Changes, Config, Epochs};
use crate::quorum::minority;
use crate::types::{ClientRef, NodeId, Peer, Request, Time};
use std::time::Duration;

/// A lease-lock server. Messages are routed by kind: requests to the
/// replica, replies to the coordinator.
#[derive(Debug)]
pub struct LeaseNode {
    pub id: NodeId,
    pub replica: Replica,
    pub coord: Coordinator,
    /// Its peers, and how far a restart that lost its state caught up.
    catch_up: CatchUp,
    /// Peers' registers count for recovery only as of this time.
    sync_from: Time,
    /// LOCK_REQs denied because this replica was still recovering.
    pub denied_recovering: u64,
    /// READs left unanswered because this replica was still recovering.
    pub reads_ignored_recovering: u64,
    /// Its membership: the configuration it serves in, its part in
    /// deciding the next, the change it runs (`protocol::reconfig`).
    pub changes: Changes,
}

impl LeaseNode {
    /// `members` are all replica ids of the cluster (including `id`).
    pub fn new(
        id: NodeId,
        members: Vec<NodeId>,
        lease: Duration,
        durable: bool,
        cfg: CoordinatorConfig,
    ) -> Self {
        let initial = Config::new(0, members.clone());
        let epochs = Epochs::new(id, members.clone(), initial, durable, KEYS);
        LeaseNode {
            id,
            replica: Replica::new(lease, durable),
            coord: Coordinator::new(u64::from(id), members.clone(), cfg),
            catch_up: CatchUp::new(id, members),
            sync_from: Time(0),
            denied_recovering: 0,
            reads_ignored_recovering: 0,
            changes: Changes::new(id, epochs),
        }
        .timed(None)
    }
    /// The change's retry and timeout are the coordinator's.
    fn timed(mut self, bug: Option<Bug>) -> Self {
        let cfg = self.coord.config();
        (self.changes).set(cfg.retry_interval, cfg.op_timeout, change_bug(bug));
        self
    }
    /// The last `spares` servers of the cluster file wait outside the
    /// first configuration (epoch 0) until a membership change adds them.
    /// Before `with_bug`, which may shrink the coordinator's quorum.
    pub fn with_spares(mut self, spares: usize) -> Self {
        let servers = self.changes.epochs.servers.clone();
        let keep = servers.len().saturating_sub(spares).max(1);
        let initial = Config::new(0, servers[..keep].to_vec());
        let durable = self.replica.durable();
        let epochs = Epochs::new(self.id, servers, initial.clone(), durable, KEYS);
        self.changes = Changes::new(self.id, epochs);
        self.coord.members = initial.members;
        self.coord.quorum = crate::quorum::majority(self.coord.members.len());
        self.timed(None)
    }
    /// Write and lock under `writer` (the spec's writer id: a fresh one per
    /// life, so a late reply to an earlier life's round is never taken for
    /// one of this life's).
    pub fn with_writer(mut self, writer: u64) -> Self {
        self.coord.id = writer;
        self
    }
    pub fn with_bug(mut self, bug: Option<Bug>) -> Self {
        self.replica = self.replica.with_bug(bug);
        self.coord = self.coord.with_bug(bug);
        self.timed(bug)
    }
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.coord = self.coord.with_seed(seed);
        self
    }

    /// Start in recovery: this replica restarted without its state and
    /// denies every lock (so it is in no quorum: reads and writes go to
    /// locked replicas only) until it merged the registers of N−Q+1 peers.
    /// Every completed write is on a locked Q, at least Q−1 of them others,
    /// and (N−Q+1)+(Q−1) > N−1, so those peers hold every completed write.
    /// Not in the seed, whose servers never restart; as ABD's recovery.
    pub fn recovering(mut self) -> Self {
        self.catch_up.start(minority(self.catch_up.replicas()) + 1);
        self
    }
    pub fn is_recovering(&self) -> bool {
        self.catch_up.active()
    }
}

impl Protocol for LeaseNode {
    type Msg = Msg;
    type Timer = Timer;
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.coord.start(now, client, req, out);
    }
    /// A recovering replica first waits out one lease. Its acks of the
    /// previous life may still complete a write whose WRITE is in flight
    /// to a peer (sim seed 1753, N=3, memory); that write can only land
    /// under a lock granted before the crash, so within a lease of the
    /// restart. Registers read after that hold it.
    fn on_start(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.changes.on_start(now, out);
        let installed = self.changes.epochs.installed.clone();
        self.coord.adopt(now, &installed, out);
        if self.catch_up.active() {
            let lease = self.replica.lease();
            self.sync_from = now.saturating_add(lease);
            out.set_timer(lease, Timer::Sync);
        }
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::LockReq { lock, .. } if self.catch_up.active() => {
                self.denied_recovering += 1;
                out.send(from, Msg::LockDenied { lock });
            }
            // A READ under a lock granted before the crash (its coordinator
            // re-sends it): the half-merged registers would pass for a
            // locked replica's and hide a completed write.
            Msg::Read { .. } if self.catch_up.active() => self.reads_ignored_recovering += 1,
            Msg::LockReq { .. } | Msg::Read { .. } | Msg::Write { .. } => {
                if self.admit(now, from, &msg, out) {
                    self.replica.handle(now, from, msg, out)
                }
            }
            // Releasing a lock is safe in any epoch.
            Msg::Unlock { .. } => self.replica.handle(now, from, msg, out),
            Msg::Moved { ref config, .. } => {
                if config.epoch > self.changes.epochs.installed.epoch {
                    self.changes.epochs.ask(now, config.epoch, out);
                }
                self.coord.handle(now, from, msg, out)
            }
            // Membership change: between servers only.
            Msg::Change(change) => {
                if let Peer::Node(node) = from {
                    self.on_change(now, node, change, out);
                }
            }
            // A recovering replica has nothing trustworthy to give.
            Msg::SyncRequest if self.catch_up.active() => {}
            Msg::SyncRequest => {
                let entries = self.replica.snapshot();
                out.send(from, Msg::SyncReply { at: now, entries });
            }
            Msg::SyncReply { at, entries } => {
                let stale = at < self.sync_from;
                (self.catch_up).on_reply(from, stale, entries, &mut self.replica)
            }
            Msg::LockGranted { .. }
            | Msg::LockDenied { .. }
            | Msg::ReadReply { .. }
            | Msg::Ack { .. }
            | Msg::WriteDenied { .. } => self.coord.handle(now, from, msg, out),
        }
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Sync => self.catch_up.ask(Msg::SyncRequest, Timer::Sync, out),
            Timer::Reconfig => self.changes.tick(now, out),
            Timer::Tick | Timer::Retry { .. } => self.coord.timer(now, timer, out),
        }
    }
    fn on_link(&mut self, now: Time, ev: LinkEvent, out: &mut Out<Msg, Timer>) {
        // The replica role: locks end by UNLOCK, by their lease (the
        // seed's design), or with the client connection they were granted
        // on (`Replica::on_conn_down`). Lost messages are re-sent by the
        // coordinator's tick. The coordinator role stops counting on a
        // replica that is down.
        match ev {
            LinkEvent::Down(Peer::Node(n)) => self.coord.on_down(now, n, out),
            LinkEvent::Down(Peer::Conn(c)) => self.replica.on_conn_down(c),
            LinkEvent::Up(_) => {}
        }
    }
    fn restore(&mut self, rec: Record) {
        match rec {
            Record::Meta { key, value } => {
                self.changes.epochs.restore(&key, &value);
            }
            rec => self.replica.restore(rec),
        }
    }
    fn membership(&self) -> Option<Membership> {
        Some(self.membership_view())
    }
    fn change_membership(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut Out<Msg, Timer>,
    ) -> Result<u64, String> {
        self.propose(now, voters, out)
    }
    fn export(&self) -> Result<Export, String> {
        catch_up::export(self.catch_up.active(), self.replica.snapshot())
    }
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        read_metrics(METRICS, self)
    }
    fn role(&self) -> &'static str {
        if !self.catch_up.active() && !self.changes.epochs.installed.has(self.id) {
            return "learner";
        }
        catch_up::role(self.catch_up.active())
    }
    fn status(&self) -> String {
        let coord = self.coord.status();
        catch_up::status(self.replica.len(), self.catch_up.active(), &coord)
    }
}

/// Every counter, in the order `/metrics` shows them.
const METRICS: &[Metric<LeaseNode>] = &[
    (
        "lease_lock_ops_completed_total",
        "operations this server coordinated to completion",
        |n| n.coord.completed,
    ),
    (
        "lease_lock_ops_refused_total",
        "operations failed definitely (lock denied, no quorum in time)",
        |n| n.coord.refused,
    ),
    (
        "lease_lock_ops_unknown_total",
        "operations with an unknown outcome (write denied or timed out)",
        |n| n.coord.unknown,
    ),
    (
        "lease_lock_grants_total",
        "locks this replica granted",
        |n| n.replica.counters.grants,
    ),
    (
        "lease_lock_denials_total",
        "locks this replica denied",
        |n| n.replica.counters.denials,
    ),
    (
        "lease_lock_expired_leases_total",
        "leases found expired",
        |n| n.replica.counters.expired_leases,
    ),
    (
        "lease_lock_released_on_disconnect_total",
        "locks released because the client connection holding them closed",
        |n| n.replica.counters.released_on_disconnect,
    ),
    (
        "lease_lock_writes_denied_total",
        "writes refused: not the holder or lease over",
        |n| n.replica.counters.writes_denied,
    ),
    (
        "lease_lock_tag_jumps_refused_total",
        "writes denied: tag more than 2^32 ahead of the one held, or ts = 2^64-1",
        |n| n.replica.counters.tag_jumps_refused,
    ),
    (
        "lease_lock_tag_space_exhausted_total",
        "puts refused: the key's tag space is used up",
        |n| n.coord.counters.tag_space_exhausted,
    ),
    (
        "lease_lock_surplus_grants_total",
        "grants this coordinator did not use",
        |n| n.coord.counters.surplus_grants,
    ),
    (
        "lease_lock_retries_total",
        "lock rounds retried after backoff",
        |n| n.coord.counters.retries,
    ),
    (
        "lease_lock_stale_replies_total",
        "replies for finished rounds or phases",
        |n| n.coord.counters.stale_replies,
    ),
    (
        "lease_lock_denied_recovering_total",
        "locks denied while this replica recovered",
        |n| n.denied_recovering,
    ),
    (
        "lease_lock_recovering",
        "1 while this replica catches up after a restart",
        |n| n.catch_up.active() as u64,
    ),
    (
        "lease_lock_config_epoch",
        "the membership configuration this replica serves in",
        |n| n.changes.counts().epoch,
    ),
    (
        "lease_lock_reconfig_held_back_total",
        "requests unanswered: frozen by a membership change, or not a member",
        |n| n.changes.counts().held_back,
    ),
    (
        "lease_lock_reconfig_moved_total",
        "requests of an older configuration answered with the newer one",
        |n| n.changes.counts().moved,
    ),
    (
        "lease_lock_reconfig_changes_total",
        "membership changes this server ran to completion",
        |n| n.changes.counts().done,
    ),
    (
        "lease_lock_reconfig_taken_over_total",
        "stalled membership changes this frozen replica finished",
        |n| n.changes.counts().taken_over,
    ),
    (
        "lease_lock_misrouted_total",
        "messages that reached the wrong role",
        |n| n.replica.counters.misrouted + n.coord.counters.misrouted,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Command;
    use crate::protocol::lease_lock::testing::*;
    use crate::types::Tag;
    use bytes::Bytes;

    #[test]
    fn requests_go_to_the_replica_and_replies_to_the_coordinator() {
        let mut n = LeaseNode::new(
            1,
            vec![1],
            Duration::from_secs(1),
            false,
            Default::default(),
        );
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(5), put(b"v"), &mut out);
        // One node: LOCK_REQ, grant, READ, reply, WRITE, ACK, each to itself.
        for _ in 0..6 {
            let s = sends(&mut out);
            assert_eq!(s.len(), 1, "one request or one reply at a time");
            n.on_msg(T0, Peer::Node(1), s[0].1.clone(), &mut out);
        }
        let s = sends(&mut out);
        assert!(matches!(&s[..], [(_, Msg::Unlock { .. })]), "{s:?}");
        n.on_msg(T0, Peer::Node(1), s[0].1.clone(), &mut out);
        assert!(n.replica.holder(b"k", T0).is_none());
        assert_eq!(n.coord.completed, 1);
        assert_eq!(
            n.replica.get(b"k").unwrap().value.as_deref(),
            Some(&b"v"[..])
        );
        let m = n.metrics();
        assert!(m
            .iter()
            .any(|(name, _, v)| *name == "lease_lock_grants_total" && *v == 1));
        assert!(n.status().contains("keys=1"));
        n.on_timer(Time(5_000_000), Timer::Tick, &mut out);
        assert!(out.is_empty(), "a tick with nothing pending");
    }

    /// The node hands a client connection's `Down` to its replica, which
    /// releases the locks granted on it; a replica link's `Down` does not.
    #[test]
    fn a_client_connection_down_frees_its_keys_at_once() {
        let mut n = LeaseNode::new(
            1,
            vec![1, 2, 3],
            Duration::from_secs(1),
            false,
            Default::default(),
        );
        let mut out = O::new();
        let (a, b) = (lock(7, 1), lock(8, 1));
        n.on_msg(
            T0,
            Peer::Conn(4),
            Msg::LockReq {
                lock: a,
                key: key(),
                epoch: 0,
            },
            &mut out,
        );
        n.on_link(T0, LinkEvent::Down(Peer::Node(2)), &mut out);
        assert_eq!(n.replica.holder(b"k", T0), Some(a));
        n.on_link(T0, LinkEvent::Down(Peer::Conn(4)), &mut out);
        assert_eq!(n.replica.holder(b"k", T0), None);
        n.on_msg(
            T0,
            Peer::Conn(5),
            Msg::LockReq {
                lock: b,
                key: key(),
                epoch: 0,
            },
            &mut out,
        );
        assert_eq!(
            n.replica.holder(b"k", T0),
            Some(b),
            "the next client gets it"
        );
        let m = n.metrics();
        let released = "lease_lock_released_on_disconnect_total";
        assert!(m.iter().any(|(name, _, v)| *name == released && *v == 1));
    }

    fn sync(n: &mut LeaseNode, from: NodeId, ts: u64, v: &'static [u8], out: &mut O) {
        let entries = vec![(key(), Tag { ts, writer: 1 }, Some(Bytes::from_static(v)))];
        let at = Time(u64::MAX);
        n.on_msg(T0, Peer::Node(from), Msg::SyncReply { at, entries }, out);
    }

    /// Issue 31: a peer's register at `ts = u64::MAX` (no write could
    /// supersede it) is not merged; the others are; it is counted.
    #[test]
    fn a_recovering_replica_skips_a_register_at_the_last_tag() {
        let cfg = CoordinatorConfig::default();
        let mut n =
            LeaseNode::new(1, vec![1, 2, 3], Duration::from_secs(1), false, cfg).recovering();
        let mut out = O::new();
        let entries = vec![
            (
                key(),
                Tag {
                    ts: u64::MAX,
                    writer: 9,
                },
                None,
            ),
            (Bytes::from_static(b"ok"), Tag { ts: 4, writer: 2 }, None),
        ];
        let at = Time(u64::MAX);
        n.on_msg(T0, Peer::Node(2), Msg::SyncReply { at, entries }, &mut out);
        assert!(n.replica.get(b"k").is_none(), "not merged");
        assert_eq!(n.replica.get(b"ok").unwrap().tag.ts, 4);
        assert_eq!(n.replica.counters.tag_jumps_refused, 1);
    }

    /// A replica that lost its state is in no quorum (it denies every
    /// lock) until N−Q+1 peers' registers are merged, then holds the newest.
    #[test]
    fn a_recovering_replica_denies_locks_until_n_minus_q_plus_one_peers_synced() {
        let cfg = CoordinatorConfig::default();
        let mut n =
            LeaseNode::new(1, vec![1, 2, 3, 4, 5], Duration::from_secs(1), false, cfg).recovering();
        assert_eq!(n.role(), "recovering");
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let cmds: Vec<_> = out.drain().collect();
        let wait = Command::SetTimer {
            after: Duration::from_secs(1),
            timer: Timer::Sync,
        };
        assert_eq!(cmds, vec![wait], "first a lease passes");
        // A snapshot older than a lease after the restart may miss a write
        // that the previous life's acks complete: not counted.
        let entries = vec![(key(), Tag { ts: 9, writer: 1 }, None)];
        let early = Msg::SyncReply {
            at: Time(999_999),
            entries,
        };
        n.on_msg(T0, Peer::Node(2), early, &mut out);
        n.on_timer(Time(1_000_000), Timer::Sync, &mut out);
        let cmds: Vec<_> = out.drain().collect();
        let asked: Vec<_> = (cmds.iter())
            .filter_map(|c| match c {
                Command::Send {
                    to,
                    msg: Msg::SyncRequest,
                } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(asked, [2, 3, 4, 5].map(Peer::Node));
        assert!(cmds.contains(&Command::SetTimer {
            after: catch_up::SYNC_RETRY,
            timer: Timer::Sync
        }));
        let req = Msg::LockReq {
            lock: lock(7, 1),
            key: key(),
            epoch: 0,
        };
        n.on_msg(T0, Peer::Conn(7), req.clone(), &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Conn(7), Msg::LockDenied { lock: lock(7, 1) })]
        );
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        assert!(out.is_empty(), "no state to give while recovering");
        sync(&mut n, 2, 3, b"new", &mut out);
        sync(&mut n, 2, 3, b"new", &mut out);
        sync(&mut n, 3, 1, b"old", &mut out);
        assert!(n.is_recovering(), "a duplicate reply counts once");
        n.on_timer(T0, Timer::Sync, &mut out);
        assert_eq!(
            sent_to_sync(&mut out),
            [4, 5].map(Peer::Node),
            "asks the silent peers again"
        );
        sync(&mut n, 5, 2, b"mid", &mut out);
        assert!(!n.is_recovering() && n.role() == "replica");
        assert_eq!(n.denied_recovering, 1);
        n.on_msg(T0, Peer::Conn(7), req, &mut out);
        assert!(matches!(
            &sends(&mut out)[..],
            [(_, Msg::LockGranted { .. })]
        ));
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        let entries = vec![(
            key(),
            Tag { ts: 3, writer: 1 },
            Some(Bytes::from_static(b"new")),
        )];
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Node(4), Msg::SyncReply { at: T0, entries })]
        );
        sync(&mut n, 4, 9, b"late", &mut out);
        assert_eq!(
            n.replica.get(b"k").unwrap().tag.ts,
            3,
            "late replies are ignored"
        );
    }

    /// Found by `sim --faults crash,pause` seed 138 (N=3, memory): a
    /// coordinator locked {1, 3}, 3 crashed before its READ reply, came
    /// back empty, merged one peer's registers (not the newest write) and
    /// answered the re-sent READ: the get returned a deleted value.
    #[test]
    fn a_recovering_replica_answers_no_read_until_synced() {
        let cfg = CoordinatorConfig::default();
        let mut n =
            LeaseNode::new(3, vec![1, 2, 3], Duration::from_secs(1), false, cfg).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        out.drain();
        sync(&mut n, 1, 10, b"old", &mut out);
        let read = Msg::Read {
            lock: lock(1, 42),
            key: key(),
            epoch: 0,
        };
        n.on_msg(T0, Peer::Node(1), read.clone(), &mut out);
        assert!(
            sends(&mut out).is_empty(),
            "half-merged state is not a reply"
        );
        assert_eq!(n.reads_ignored_recovering, 1);
        sync(&mut n, 2, 11, b"deleted", &mut out);
        assert!(!n.is_recovering());
        n.on_msg(T0, Peer::Node(1), read, &mut out);
        let s = sends(&mut out);
        assert!(
            matches!(&s[..], [(_, Msg::ReadReply { tag, .. })] if tag.ts == 11),
            "{s:?}"
        );
    }

    fn sent_to_sync(out: &mut O) -> Vec<Peer> {
        (sends(out).into_iter())
            .filter(|(_, m)| *m == Msg::SyncRequest)
            .map(|(to, _)| to)
            .collect()
    }
}
