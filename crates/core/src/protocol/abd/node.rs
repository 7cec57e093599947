//! The server: a replica plus a coordinator (proxy mode), and recovery.

use super::bugs::InjectedBug;
use super::coordinator::first_op;
use super::coordinator::{Coordinator, CoordinatorConfig};
use super::msg::{Msg, Timer};
use super::reconfig::{change_bug, KEYS};
use super::replica::Replica;
use crate::protocol::catch_up::{self, CatchUp};
use crate::protocol::contract::{Export, LinkEvent, Membership, Out, Protocol, Record};
use crate::protocol::reconfig::{Admit, Changes, Config, Epochs};
use crate::quorum::minority;
use crate::types::{ClientRef, NodeId, Peer, Request, Time};

/// A server: one replica plus a coordinator for clients that do not run
/// their own (proxy mode). Messages are routed by kind: requests to the
/// replica, replies to the coordinator.
#[derive(Debug)]
pub struct AbdNode {
    pub id: NodeId,
    pub replica: Replica,
    pub coord: Coordinator,
    /// Its peers, and how far a restart that lost its state caught up.
    catch_up: CatchUp,
    /// Queries left unanswered because this replica was still recovering.
    pub queries_held_back: u64,
    /// Its membership: the configuration it serves in, its part in
    /// deciding the next, the change it runs (`protocol::reconfig`).
    pub changes: Changes,
}

impl AbdNode {
    /// `members` are all replica ids of the cluster (including `id`).
    pub fn new(id: NodeId, members: Vec<NodeId>, durable: bool, cfg: CoordinatorConfig) -> Self {
        let initial = Config::new(0, members.clone());
        AbdNode {
            id,
            replica: Replica::new(durable),
            coord: Coordinator::new(id as u64, members.clone(), cfg),
            changes: Changes::new(id, Epochs::new(id, members.clone(), initial, durable, KEYS)),
            catch_up: CatchUp::new(id, members),
            queries_held_back: 0,
        }
        .timed(None)
    }
    /// The change's retry and timeout are the coordinator's.
    fn timed(mut self, bug: Option<InjectedBug>) -> Self {
        let cfg = &self.coord.cfg;
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
        self = self.timed(None);
        self.coord.members = initial.members;
        self.coord.quorum = crate::quorum::majority(self.coord.members.len());
        self
    }
    /// Use `writer` as the coordinator's writer id instead of the node id.
    /// A restarted node has forgotten which tags it issued before the crash,
    /// so each boot must write under a fresh id (e.g. node id plus a boot
    /// counter): otherwise one tag can end up naming two values.
    pub fn with_writer(mut self, writer: u64) -> Self {
        self.coord.id = writer;
        self.coord.next_op = first_op(writer);
        self
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.replica = self.replica.with_bug(bug);
        self.coord = self.coord.with_bug(bug);
        self.timed(bug)
    }

    /// Start in recovery: this replica restarted without its state (memory
    /// mode) and must not answer queries until it has merged the stores of
    /// f+1 = N−Q+1 live peers. Every completed write is on Q replicas, at
    /// least Q−1 of them other than this one, and (f+1)+(Q−1) > N−1, so
    /// those peers hold every completed write. Stores are accepted and
    /// acknowledged meanwhile (holding a value is always safe). Seed 002's
    /// recovery mode `r`; not in seed 000, whose replicas never restart.
    pub fn recovering(mut self) -> Self {
        if self.coord.bug == Some(InjectedBug::NoRecovery) {
            return self;
        }
        let mut need = minority(self.catch_up.replicas()) + 1;
        if self.coord.bug == Some(InjectedBug::RecoveryOnePeerShort) {
            need = need.saturating_sub(1).max(1);
        }
        self.catch_up.start(need);
        self
    }

    pub fn is_recovering(&self) -> bool {
        self.catch_up.active()
    }
}

impl Protocol for AbdNode {
    type Msg = Msg;
    type Timer = Timer;
    fn on_start(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.catch_up.ask(Msg::SyncRequest, Timer::Sync, out);
        self.changes.on_start(now, out);
        let installed = self.changes.epochs.installed.clone();
        self.coord.adopt(now, &installed, out);
    }
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut Out<Msg, Timer>) {
        self.coord.start(now, client, req, out);
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::Query { .. } if self.catch_up.active() => self.queries_held_back += 1,
            Msg::Query { op, epoch, .. } | Msg::Store { op, epoch, .. } => {
                match self.changes.epochs.admit(now, epoch, out) {
                    Admit::Serve => self.replica.handle(from, msg, out),
                    Admit::Moved(config) => out.send(from, Msg::Moved { op, config }),
                    Admit::Hold => {}
                }
            }
            Msg::QueryReply { .. } | Msg::StoreAck { .. } => self.coord.handle(now, from, msg, out),
            Msg::Moved { ref config, .. } => {
                if config.epoch > self.changes.epochs.installed.epoch {
                    self.changes.epochs.ask(now, config.epoch, out);
                }
                self.coord.handle(now, from, msg, out)
            }
            // A recovering replica has nothing trustworthy to give.
            Msg::SyncRequest if self.catch_up.active() => {}
            Msg::SyncRequest => out.send(
                from,
                Msg::SyncReply {
                    entries: self.replica.snapshot(),
                },
            ),
            Msg::SyncReply { entries } => {
                (self.catch_up).on_reply(from, false, entries, &mut self.replica)
            }
            msg => {
                // Membership change: between servers only.
                if let (Peer::Node(node), Ok(change)) = (from, msg.into_change()) {
                    self.on_reconfig(now, node, change, out);
                }
            }
        }
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut Out<Msg, Timer>) {
        match timer {
            Timer::Tick => self.coord.tick(now, out),
            Timer::Sync => self.catch_up.ask(Msg::SyncRequest, Timer::Sync, out),
            Timer::Reconfig => self.changes.tick(now, out),
        }
    }
    fn on_link(&mut self, _now: Time, _ev: LinkEvent, _out: &mut Out<Msg, Timer>) {
        // ABD needs no failure detector: quorums tolerate silent replicas and
        // the retransmit tick covers messages lost on a broken link.
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
        let (r, c) = (&self.replica.counters, &self.coord.counters);
        vec![
            (
                "abd_ops_completed_total",
                "operations this server coordinated to completion",
                self.coord.completed,
            ),
            (
                "abd_ops_timed_out_total",
                "operations this server coordinated that found no quorum in time",
                self.coord.timed_out,
            ),
            (
                "abd_replica_keys",
                "keys held by this replica",
                self.replica.len() as u64,
            ),
            (
                "abd_older_stores_total",
                "stores ignored because a newer tag was held",
                r.older_stores,
            ),
            (
                "abd_tag_jumps_refused_total",
                "stores refused (unanswered): tag more than 2^32 ahead of the one held, or ts = 2^64-1",
                r.tag_jumps_refused,
            ),
            (
                "abd_tag_space_exhausted_total",
                "writes refused: the key's tag space is used up",
                c.tag_space_exhausted,
            ),
            (
                "abd_catch_up_write_backs_total",
                "writes that first wrote back a tag more than 2^32 ahead of a replica",
                c.catch_up_write_backs,
            ),
            (
                "abd_stale_replies_total",
                "replies for operations already finished",
                c.stale_replies,
            ),
            (
                "abd_duplicate_replies_total",
                "replies from a replica that had already answered",
                c.duplicate_replies,
            ),
            (
                "abd_misrouted_total",
                "messages that reached the wrong role",
                r.misrouted + c.misrouted,
            ),
            (
                "abd_queries_held_back_total",
                "queries unanswered while recovering",
                self.queries_held_back,
            ),
            (
                "abd_recovering",
                "1 while this replica catches up after a restart",
                self.catch_up.active() as u64,
            ),
        ]
        .into_iter()
        .chain(self.reconfig_metrics())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::types::Tag;
    use bytes::Bytes;

    /// `n` receives `entries` from peer `from`, answering its `SyncRequest`.
    fn sync(n: &mut AbdNode, from: NodeId, entries: Vec<(Bytes, Tag, Option<Bytes>)>, out: &mut O) {
        n.on_msg(T0, Peer::Node(from), Msg::SyncReply { entries }, out);
    }

    /// Issue 31: a peer's entry at `ts = u64::MAX` (no write could
    /// supersede it) is not merged; the others are; it is counted.
    #[test]
    fn a_recovering_replica_skips_an_entry_at_the_last_tag() {
        let mut n =
            AbdNode::new(1, vec![1, 2, 3], false, CoordinatorConfig::default()).recovering();
        let mut out = O::new();
        let last = Tag {
            ts: u64::MAX,
            writer: 9,
        };
        let entries = vec![
            (key(), last, None),
            (Bytes::from_static(b"ok"), Tag { ts: 4, writer: 2 }, None),
        ];
        sync(&mut n, 2, entries, &mut out);
        assert!(n.replica.get(b"k").is_none(), "not merged");
        assert_eq!(n.replica.get(b"ok").unwrap().0.ts, 4);
        assert_eq!(n.replica.counters.tag_jumps_refused, 1);
    }

    #[test]
    fn a_recovering_replica_answers_no_query_until_f_plus_one_peers_synced() {
        // N = 5, Q = 3: a recovering replica needs N - Q + 1 = 3 peers.
        let mut n =
            AbdNode::new(1, vec![1, 2, 3, 4, 5], false, CoordinatorConfig::default()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let asked: Vec<_> = sent_to(&mut out);
        assert_eq!(
            asked,
            vec![Peer::Node(2), Peer::Node(3), Peer::Node(4), Peer::Node(5)]
        );
        let query = Msg::Query {
            op: 1,
            key: key(),
            epoch: 0,
        };
        n.on_msg(T0, Peer::Conn(9), query.clone(), &mut out);
        assert!(out.is_empty(), "no answer while recovering");
        assert_eq!(n.queries_held_back, 1);
        let entry = |ts, v: &str| {
            vec![(
                key(),
                Tag { ts, writer: 1 },
                Some(Bytes::copy_from_slice(v.as_bytes())),
            )]
        };
        sync(&mut n, 2, entry(3, "new"), &mut out);
        sync(&mut n, 2, entry(3, "new"), &mut out);
        sync(&mut n, 3, entry(1, "old"), &mut out);
        assert!(n.is_recovering(), "a duplicate reply must not count twice");
        // A recovering replica refuses to serve as a sync source itself.
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        assert!(out.is_empty());
        sync(&mut n, 5, vec![], &mut out);
        assert!(!n.is_recovering());
        n.on_msg(T0, Peer::Conn(9), query, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Conn(9), query_reply(1, 3, 1, b"new"))],
            "the highest tag of the merged stores"
        );
        n.on_msg(T0, Peer::Node(4), Msg::SyncRequest, &mut out);
        let sync = vec![(
            key(),
            Tag { ts: 3, writer: 1 },
            Some(Bytes::from_static(b"new")),
        )];
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Node(4), Msg::SyncReply { entries: sync })]
        );
    }
}
