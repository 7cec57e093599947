//! [`ZabNode`]: one server's state, the client entry points, delivery,
//! snapshots and the dispatch of the `Protocol` handlers.

use super::bugs::InjectedBug;
use super::log::Log;
use super::members::{quorum_of_each, quorum_value_in, Members};
use super::msg::{Msg, Timer, COUNTER_LIMIT};
use super::roles::{Election, FStage, Following, Leading, Reads, Recovery};
use super::state_machine::{encode_snapshot, KvStore, Op, Payload, StateMachine};
use super::variant::Bcast;
use super::znode_sm::Machine;
use crate::protocol::contract::{Export, LinkEvent, Membership, Out, Protocol, Record};
use crate::types::{ClientRef, NodeId, OpError, Peer, Request, Response, Time};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

pub type O = Out<Msg, Timer>;

/// How a GET is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// The leader confirms it still leads with a quorum round, then the
    /// read is served once the server applied the leader's commit index.
    Index,
    /// Reads are broadcast like writes and answered on delivery.
    Log,
    /// ZooKeeper's reads: the server's own state (sequentially consistent).
    Local,
}

/// Timing and modes of a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Period of notifications, pings and timeout checks.
    pub tick: Duration,
    /// A leader that heard from no quorum for this long steps down; a
    /// follower that heard nothing from its leader goes back to election.
    pub sync_limit: Duration,
    /// A leader not established, or a follower not synchronised, by then
    /// goes back to election.
    pub init_limit: Duration,
    /// Snapshot (and forget the log below) every this many deliveries.
    /// Each snapshot writes the whole state, so the default is ZooKeeper's
    /// `snapCount` and etcd's `--snapshot-count` (100 000): at 1 000 a
    /// store of 1 000 keys of 1 KB wrote as many snapshot bytes as log
    /// bytes, with a 1 MB write in every fifteenth sync (PUT p99 about 2×).
    /// The log below a snapshot is kept in memory until then.
    pub snapshot_every: u64,
    pub read: ReadMode,
    pub op_timeout: Duration,
    /// How long the leader sees a container empty (after it had children)
    /// before it proposes its deletion (`sessions.rs`).
    pub container_grace: Duration,
    /// How often the leader looks for expired TTL nodes (`sessions.rs`):
    /// one goes between its TTL and its TTL plus two of these after its
    /// last change (ZooKeeper's `znode.container.checkIntervalMs`).
    pub ttl_check: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            tick: Duration::from_millis(10),
            sync_limit: Duration::from_millis(80),
            init_limit: Duration::from_millis(150),
            snapshot_every: 100_000,
            read: ReadMode::Index,
            op_timeout: Duration::from_secs(2),
            container_grace: Duration::from_secs(1),
            ttl_check: Duration::from_secs(1),
        }
    }
}

/// Where a server is in Zab (Fig. 2.2).
#[derive(Debug)]
pub enum Role {
    Looking,
    Following(Following),
    Leading(Leading),
}

/// A client write (or logged read) waiting for its delivery here.
#[derive(Debug)]
pub struct Waiter {
    pub client: ClientRef,
    pub deadline: Time,
    pub op: Bytes,
    /// The leader it was handed to (us, or the leader we forwarded it to):
    /// from then on its outcome is unknown until delivered here, or until
    /// that server says it dropped it unproposed.
    pub sent: Option<NodeId>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub elections: u64,
    pub led: u64,
    pub step_downs: u64,
    pub proposals: u64,
    pub delivered: u64,
    pub sync_diff: u64,
    pub sync_trunc: u64,
    pub sync_snap: u64,
    pub snapshots: u64,
    pub read_rounds: u64,
    pub unknown: u64,
    pub recoveries: u64,
    /// Broadcast variants (`broadcast.rs`): follower ACKs received as
    /// leader, entries committed as leader, broadcast messages sent,
    /// receipt-to-delivery latency, coin tosses, A1.1 restarts kept out.
    pub acks_received: u64,
    pub leader_commits: u64,
    pub bcast_msgs: u64,
    pub delivery_us: u64,
    pub delivery_max_us: u64,
    pub deliveries_timed: u64,
    pub coin_tosses: u64,
    pub coin_heads: u64,
    pub stayed_out: u64,
    /// A1.1: servers that stayed out and rejoined on hearing that a newer
    /// epoch was established (`successor_installed`).
    pub rejoined: u64,
    pub switches: u64,
    /// Adaptive ct-q (`adaptive.rs`): windows closed, windows without a
    /// feasible p, C_m expiries, timer-D re-tosses.
    pub coin_windows: u64,
    pub coin_infeasible: u64,
    pub coin_cm_expiries: u64,
    pub coin_d_retosses: u64,
    /// Messages refused: an epoch, index or round past `COUNTER_LIMIT`.
    pub edge_values_refused: u64,
    /// Elections given up because no epoch follows the highest accepted.
    pub epochs_exhausted: u64,
    /// Configuration entries delivered (`reconfig.rs`).
    pub reconfigs: u64,
    /// Reconfiguration requests refused (`reconfig.rs`).
    pub reconfigs_refused: u64,
}

/// One Zab server.
#[derive(Debug)]
pub struct ZabNode {
    pub(super) id: NodeId,
    /// The initial configuration, as given (the broadcast variants and a
    /// recovering server's epoch floor count over it).
    pub(super) members: Vec<NodeId>,
    /// The same as a configuration: in effect until the log names another
    /// (`members.rs`).
    pub(super) initial: Members,
    /// Servers outside the initial configuration that may join (spares):
    /// they are heard and told who leads, and count in no quorum until a
    /// configuration names them.
    pub(super) spares: Vec<NodeId>,
    pub(super) cfg: Config,
    pub(super) bug: Option<InjectedBug>,
    /// Origin of this life's requests in log entries.
    pub(super) writer: u64,
    /// Durable: the last epoch promised, and to which leader.
    pub(super) accepted: (u64, NodeId),
    /// Durable: the epoch whose history this server accepted (NEWLEADER).
    pub(super) current_epoch: u64,
    pub(super) log: Log,
    pub(super) sm: Machine,
    pub(super) applied: u64,
    pub(super) commit: u64,
    /// Our log is on disk up to here (`Msg::Logged`, this life): the
    /// leader's own vote in commits, the follower's ACKs and PONGs.
    pub(super) logged: u64,
    /// Moves when a synchronisation may drop log entries (TRUNC, SNAP):
    /// a `Logged` from before then says nothing of the log now.
    pub(super) log_gen: u64,
    /// The index the `Logged` in flight was asked for (this `log_gen`).
    pub(super) log_asked: u64,
    /// Lost its state (memory mode): counts in no quorum, votes for no
    /// one, until a leader synchronised it.
    pub(super) recovering: bool,
    /// Lost its state and still learning the epoch floor from its peers
    /// (`recovery.rs`): it follows and leads no one meanwhile.
    pub(super) recovery: Option<Recovery>,
    pub(super) role: Role,
    pub(super) election: Election,
    pub(super) now: Time,
    pub(super) next_rid: u64,
    pub(super) writes: BTreeMap<u64, Waiter>,
    pub(super) reads: Reads,
    /// The broadcast variant and its state (`broadcast.rs`).
    pub(super) bcast: Bcast,
    pub counters: Counters,
}

pub const META_ACCEPTED: &str = "zab.accepted-epoch";
pub const META_CURRENT: &str = "zab.current-epoch";

impl ZabNode {
    pub fn new(id: NodeId, members: &[NodeId], writer: u64, cfg: Config) -> ZabNode {
        ZabNode {
            id,
            members: members.to_vec(),
            initial: Members::new(members).unwrap_or_else(|| {
                // A cluster file or spec without members: this server alone.
                Members::new(&[id]).expect("a server id is not 0")
            }),
            spares: Vec::new(),
            cfg,
            bug: None,
            writer,
            accepted: (0, 0),
            current_epoch: 0,
            log: Log::default(),
            sm: Machine::default(),
            applied: 0,
            commit: 0,
            logged: 0,
            log_gen: 0,
            log_asked: 0,
            recovering: false,
            recovery: None,
            role: Role::Looking,
            election: Election::default(),
            now: Time::ZERO,
            next_rid: 1,
            writes: BTreeMap::new(),
            reads: Reads::default(),
            bcast: Bcast::default(),
            counters: Counters::default(),
        }
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        self.sm.keep_ephemerals = bug == Some(InjectedBug::ZnodeKeepEphemerals);
        self.sm.orphan_ephemerals = bug == Some(InjectedBug::ZnodeOrphanEphemerals);
        self.sm.watch_early = bug == Some(InjectedBug::ZnodeWatchEarly);
        self
    }
    /// A server that lost its state: it learns its epoch floor from a
    /// quorum of peers, then takes part in no quorum until a leader of an
    /// epoch at least that floor has synchronised it (`recovery.rs`).
    pub fn recovering(mut self) -> Self {
        self.recovering = true;
        self.start_recovery();
        self
    }
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn epochs(&self) -> (u64, u64) {
        (self.accepted.0, self.current_epoch)
    }
    pub fn log(&self) -> &Log {
        &self.log
    }
    pub fn applied(&self) -> u64 {
        self.applied
    }
    pub fn store(&self) -> &KvStore {
        &self.sm.kv
    }
    /// The replicated machine: the KV store and the znode tree.
    pub fn machine(&self) -> &Machine {
        &self.sm
    }
    pub fn leader(&self) -> Option<NodeId> {
        match &self.role {
            Role::Leading(l) if l.established => Some(self.id),
            Role::Following(f) if f.stage == FStage::Serving => Some(f.leader),
            _ => None,
        }
    }
    pub(super) fn has_bug(&self, b: InjectedBug) -> bool {
        self.bug == Some(b)
    }
    /// Servers that may join later (spares), besides the initial ones.
    pub fn with_spares(mut self, spares: &[NodeId]) -> Self {
        self.spares = spares.to_vec();
        self
    }
    /// The configurations in effect here ("Membership change" in
    /// `docs/src/protocols/zab.md`): the last committed one (at our commit
    /// index, or the initial one), then every one our log holds above it,
    /// in log order (at most one when a single leader proposed them; more
    /// if our commit index lags).
    pub fn configs(&self) -> Vec<&Members> {
        let at = self.commit.max(self.log.base());
        let committed = self.log.members_at(at).unwrap_or(&self.initial);
        let mut v = vec![committed];
        v.extend(self.log.members_above(at).map(|(_, m)| m));
        v
    }
    /// The last committed configuration known here.
    pub fn committed_config(&self) -> &Members {
        let at = self.commit.max(self.log.base());
        self.log.members_at(at).unwrap_or(&self.initial)
    }
    /// Whether the servers for which `has` holds are a quorum: a majority
    /// of every configuration in effect (old and new while one is pending).
    pub(super) fn is_quorum(&self, has: impl Fn(NodeId) -> bool) -> bool {
        quorum_of_each(&self.configs(), has)
    }
    /// The highest value `v` such that the servers whose value in `vals`
    /// is at least `v` are a quorum (commit index from ACKs, confirmed
    /// read round from PONGs); `None` if no value is.
    pub(super) fn quorum_value(&self, vals: &BTreeMap<NodeId, u64>) -> Option<u64> {
        quorum_value_in(&self.configs(), vals)
    }
    /// Whether this server votes in some configuration in effect here: a
    /// server that does not is a learner, never a candidate or leader.
    pub fn voter(&self) -> bool {
        self.is_voter(self.id)
    }
    /// Whether `n` votes in some configuration in effect here.
    pub(super) fn is_voter(&self, n: NodeId) -> bool {
        self.configs().iter().any(|c| c.contains(n))
    }
    /// Whether `n` is a server we talk to: initial, spare, or named by a
    /// configuration in our log.
    pub(super) fn knows(&self, n: NodeId) -> bool {
        self.members.contains(&n)
            || self.spares.contains(&n)
            || self.log.all_members().any(|m| m.contains(n))
    }
    /// Every server we talk to but ourselves.
    pub(super) fn peers(&self) -> std::vec::IntoIter<NodeId> {
        let mut v: Vec<NodeId> = self.members.clone();
        v.extend_from_slice(&self.spares);
        for m in self.log.all_members() {
            v.extend_from_slice(m.ids());
        }
        v.sort_unstable();
        v.dedup();
        v.retain(|&n| n != self.id);
        v.into_iter()
    }
    /// The crash-tolerance invariant and its kin, checked in debug builds
    /// (an injected bug may break them on purpose).
    pub(super) fn invariant(&self, ok: bool, what: &str) {
        if self.bug.is_none() {
            debug_assert!(ok, "zab n{}: {what}", self.id);
        }
    }

    pub(super) fn persist_accepted(&mut self, epoch: u64, leader: NodeId, out: &mut O) {
        self.accepted = (epoch, leader);
        if self.has_bug(InjectedBug::ReuseEpoch) {
            return;
        }
        let mut v = epoch.to_le_bytes().to_vec();
        v.extend_from_slice(&u64::from(leader).to_le_bytes());
        out.persist(Record::Meta {
            key: META_ACCEPTED.into(),
            value: Bytes::from(v),
        });
    }
    pub(super) fn persist_current(&mut self, epoch: u64, out: &mut O) {
        self.current_epoch = epoch;
        if self.has_bug(InjectedBug::ReuseEpoch) {
            return;
        }
        out.persist(Record::Meta {
            key: META_CURRENT.into(),
            value: Bytes::copy_from_slice(&epoch.to_le_bytes()),
        });
    }
    pub(super) fn persist_entry(&mut self, index: u64, epoch: u64, data: Bytes, out: &mut O) {
        let ok = self.log.put(index, epoch, data.clone());
        debug_assert!(ok, "entry {index} out of the log's range");
        out.persist(Record::Entry { index, epoch, data });
    }

    /// Ask the driver for `Msg::Logged` once what we persisted so far, our
    /// whole log included, is durable. One request at a time: entries
    /// logged while one is in flight are asked for when it comes back, so
    /// a sync covering many proposals gives one report, one ACK per
    /// follower and one commit step, not one per proposal.
    pub(super) fn when_logged(&mut self, out: &mut O) {
        if self.log_asked > self.logged {
            return;
        }
        let (index, gen) = (self.log.last(), self.log_gen);
        self.log_asked = index;
        out.when_durable(Msg::Logged { index, gen });
    }

    /// The driver says our log is on disk up to `index`. A leader counts
    /// it in its quorums (and may now be established); a follower ACKs it
    /// (F2 of broadcast: logged before ACK) without waiting for the
    /// records it wrote since.
    fn on_logged(&mut self, index: u64, gen: u64, out: &mut O) {
        if gen != self.log_gen {
            return;
        }
        self.logged = self.logged.max(index);
        if self.log.last() > self.logged {
            self.when_logged(out);
        }
        match &self.role {
            Role::Leading(l) if l.established => self.advance_commit(out),
            Role::Leading(_) => self.check_established(out),
            Role::Following(f) if matches!(f.stage, FStage::Synced | FStage::Serving) => {
                self.follower_logged(out)
            }
            _ => {}
        }
    }

    /// Deliver every committed entry not yet delivered (abdeliver, in
    /// order), answering the clients that asked here. What is delivered is
    /// committed, on a quorum's disks: the answer need not wait for this
    /// server's later records (`reply_now`).
    pub(super) fn deliver(&mut self, out: &mut O) {
        let upto = self.commit.min(self.log.last());
        while self.applied < upto {
            let i = self.applied + 1;
            let Some(data) = self.log.get(i) else {
                // Only an injected bug gets here (a SNAP or TRUNC below
                // what was delivered).
                self.invariant(false, "delivering an entry the log lacks");
                break;
            };
            let Some(p) = Payload::from_bytes(data) else {
                self.applied = i;
                continue;
            };
            let here = p.origin == self.writer && self.writes.contains_key(&p.rid);
            let resp = if Members::from_op(&p.op).is_some() {
                // A configuration: in effect from its commit on
                // (`configs`), nothing to apply (`reconfig.rs`).
                self.counters.reconfigs += 1;
                Response::Done
            } else {
                self.sm.apply_at(i, &p.op, here)
            };
            self.applied = i;
            self.counters.delivered += 1;
            for (conn, event) in self.sm.take_events() {
                out.notify(conn, event);
            }
            if here {
                let w = self.writes.remove(&p.rid).expect("here: waiting");
                self.note_answered(w.deadline);
                super::znode_sm::answer(out, w.client, resp);
            }
        }
        self.serve_reads(out);
        self.maybe_snapshot(out);
    }

    fn maybe_snapshot(&mut self, out: &mut O) {
        let every = self.cfg.snapshot_every.max(1);
        if self.applied < self.log.base() + every {
            return;
        }
        let runs = self.log.runs_upto(self.applied);
        let members = self.log.members_at(self.applied);
        let data = encode_snapshot(&runs, &self.sm.snapshot(), members);
        out.persist(Record::Snapshot {
            index: self.applied,
            data,
        });
        self.log.compact(self.applied);
        self.counters.snapshots += 1;
    }

    /// Leave the current role. Writes handed to a leader stay: the next
    /// leader's history may hold them (they are then delivered and
    /// answered here), else they end `Unknown` at their deadline; never
    /// sent again unless the leader said it dropped them. Reads in flight
    /// are refused.
    pub(super) fn abandon(&mut self, out: &mut O) {
        self.fail_sent_reads(out);
    }

    fn on_client_request(&mut self, client: ClientRef, req: Request, out: &mut O) {
        if self.znode_local(client, &req, out) {
            return;
        }
        let Some(mut op) = Op::from_client(&req, &client) else {
            out.reply(
                client,
                Response::Failed(OpError::refused("zab serves GET, PUT, DELETE and znodes")),
            );
            return;
        };
        // The connection's identities, held here, go with its entry.
        if let Op::Znode(e) = &mut op {
            e.ids = self.sm.ids_of(client.session);
        }
        let deadline = self.now.saturating_add(self.cfg.op_timeout);
        if req.is_read() && self.cfg.read != ReadMode::Log {
            return self.client_read(client, op.to_bytes(), deadline, out);
        }
        // exists / getData / getChildren take a read index (or, with
        // `read=local`, none), not a log position (`znode_sm.rs`); `sync`
        // stays in the log.
        if super::znode_sm::read_by_index(&req) && self.cfg.read != ReadMode::Log {
            return self.client_read(client, op.to_bytes(), deadline, out);
        }
        let rid = self.next_rid;
        self.next_rid += 1;
        let w = Waiter {
            client,
            deadline,
            op: op.to_bytes(),
            sent: None,
        };
        self.writes.insert(rid, w);
        self.send_write(rid, out);
    }

    /// Hand write `rid` to the leader if one serves: propose it (we lead)
    /// or forward it (we follow). Otherwise it waits for one.
    pub(super) fn send_write(&mut self, rid: u64, out: &mut O) {
        let Some(w) = self.writes.get(&rid).filter(|w| w.sent.is_none()) else {
            return;
        };
        if self.behind_a_read(rid, &w.client, &w.op) {
            return;
        }
        let payload = Payload {
            origin: self.writer,
            rid,
            op: w.op.clone(),
        };
        match &self.role {
            Role::Leading(l) if l.established => {
                self.writes.get_mut(&rid).expect("got").sent = Some(self.id);
                self.propose(payload.to_bytes(), out);
            }
            Role::Following(f) if f.stage == FStage::Serving => {
                let msg = Msg::Forward {
                    epoch: f.epoch,
                    origin: payload.origin,
                    rid,
                    op: payload.op,
                };
                let to = f.leader;
                // A client's request reveals nothing of our disk.
                out.send_now(Peer::Node(to), msg);
                self.writes.get_mut(&rid).expect("got").sent = Some(to);
            }
            _ => {}
        }
    }

    /// Our leader did not propose write `rid`: it waits for a leader again.
    fn on_dropped(&mut self, from: NodeId, rid: u64, out: &mut O) {
        if let Some(w) = self.writes.get_mut(&rid).filter(|w| w.sent == Some(from)) {
            w.sent = None;
            self.send_write(rid, out);
        }
    }

    /// A leader now serves: send what waited for one.
    pub(super) fn flush_waiting(&mut self, out: &mut O) {
        let waiting: Vec<u64> = (self.writes.iter())
            .filter(|(_, w)| w.sent.is_none())
            .map(|(&r, _)| r)
            .collect();
        for rid in waiting {
            self.send_write(rid, out);
        }
        self.flush_reads(out);
    }

    /// Requests past their deadline: unknown if handed to a leader, else
    /// refused (nothing happened).
    fn expire(&mut self, out: &mut O) {
        let now = self.now;
        let late: Vec<u64> = (self.writes.iter())
            .filter(|(_, w)| w.deadline <= now)
            .map(|(&r, _)| r)
            .collect();
        for rid in late {
            let w = self.writes.remove(&rid).expect("listed");
            let err = if w.sent.is_some() {
                self.counters.unknown += 1;
                OpError::unknown("not delivered within the op timeout")
            } else {
                OpError::refused("no leader within the op timeout")
            };
            out.reply(w.client, Response::Failed(err));
        }
        self.expire_reads(out);
        // A znode read behind an expired write of its connection, or a
        // write behind an expired read.
        self.serve_reads(out);
        self.send_held_writes(out);
    }

    fn tick(&mut self, out: &mut O) {
        out.set_timer(self.cfg.tick, Timer::Tick);
        self.expire(out);
        self.ask_recovery(out);
        self.znode_tick(out);
        match &self.role {
            Role::Looking => self.election_tick(out),
            Role::Following(_) => {
                self.follower_tick(out);
                self.adaptive_tick(out);
            }
            Role::Leading(_) => {
                self.leader_tick(out);
                self.prot_tick(out);
            }
        }
    }

    fn restore_meta(&mut self, key: &str, value: &[u8]) {
        let word = |i: usize| {
            (value.get(i * 8..i * 8 + 8))
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        match key {
            META_ACCEPTED => {
                if let (Some(e), Some(l)) = (word(0), word(1)) {
                    self.accepted = (e, l as NodeId);
                }
            }
            META_CURRENT => {
                if let Some(e) = word(0) {
                    self.current_epoch = e;
                }
            }
            super::variant::META_LED => self.bcast.led = word(0).unwrap_or(0),
            _ => {}
        }
    }

    fn dispatch(&mut self, from: NodeId, msg: Msg, out: &mut O) {
        match msg {
            Msg::Notify {
                round,
                vote,
                state,
                recovering,
                led,
            } => {
                self.successor_installed(led, out);
                self.on_notify(from, round, vote, state, recovering, out)
            }
            Msg::FollowerInfo {
                accepted,
                promised,
                recovering,
            } => self.on_follower_info(from, (accepted, promised), recovering, out),
            Msg::Recover { life } => self.on_recover(from, life, out),
            Msg::RecoverOk {
                life,
                accepted,
                promised,
                recovering,
            } => self.on_recover_ok(from, life, (accepted, promised), recovering, out),
            Msg::NewEpoch { epoch } => self.on_new_epoch(from, epoch, out),
            Msg::AckEpoch {
                epoch,
                cur_epoch,
                summary,
                recovering,
            } => self.on_ack_epoch(from, epoch, cur_epoch, summary, recovering, out),
            Msg::NewLeader { epoch, sync } => self.on_new_leader(from, epoch, sync, out),
            Msg::AckNewLeader { epoch, last } => self.on_ack_new_leader(from, epoch, last, out),
            Msg::Proposal { epoch, entry } => self.on_proposal_seen(from, epoch, entry, out),
            Msg::ProposalEcho {
                epoch,
                entry,
                at,
                held,
            } => self.on_proposal_echo(from, epoch, entry, (at, held), out),
            Msg::Ack { epoch, index } => self.on_any_ack(from, epoch, index, out),
            Msg::AckAt { epoch, index, at } => self.on_ack_at(from, epoch, index, at, out),
            Msg::Beat { epoch } => self.heard_peer(from, epoch, out),
            Msg::Logged { .. } => {} // only from ourselves
            Msg::Commit { epoch, index } => self.on_commit(from, epoch, index, out),
            Msg::Ping {
                epoch,
                round,
                commit,
                last,
            } => self.on_ping(from, epoch, round, commit, last, out),
            Msg::Pong { epoch, round, last } => self.on_pong(from, epoch, round, last, out),
            Msg::Forward {
                epoch,
                origin,
                rid,
                op,
            } => self.on_forward(from, epoch, origin, rid, op, out),
            Msg::Dropped { rid } => self.on_dropped(from, rid, out),
            Msg::Prot { epoch, zab } => self.on_prot(from, epoch, zab, out),
            Msg::ReadIndex { epoch, rid } => self.on_read_index(from, epoch, rid, out),
            Msg::ReadIndexOk { epoch, rid, index } => {
                self.on_read_index_ok(from, epoch, rid, index, out)
            }
            Msg::Touch { sessions } => self.on_touch(sessions),
        }
    }
}

impl Protocol for ZabNode {
    type Msg = Msg;
    type Timer = Timer;

    fn on_start(&mut self, now: Time, out: &mut O) {
        self.now = now;
        // Restored entries above the snapshot are not known committed: the
        // next leader's synchronisation decides.
        out.set_timer(self.cfg.tick, Timer::Tick);
        self.stay_out_if_old_leader();
        self.ask_recovery(out);
        self.look(out);
    }
    fn on_client(&mut self, now: Time, client: ClientRef, req: Request, out: &mut O) {
        self.now = now;
        self.on_client_request(client, req, out);
        self.echo_stamps(out);
    }
    fn on_msg(&mut self, now: Time, from: Peer, msg: Msg, out: &mut O) {
        self.now = now;
        if msg.largest_counter() > COUNTER_LIMIT {
            // Refused whoever sent it: see `COUNTER_LIMIT`.
            self.counters.edge_values_refused += 1;
            return;
        }
        if let Peer::Node(n) = from {
            if n != self.id && self.knows(n) {
                self.dispatch(n, msg, out);
                self.echo_stamps(out);
            } else if let (true, Msg::Logged { index, gen }) = (n == self.id, msg) {
                self.on_logged(index, gen, out);
            }
        }
    }
    fn on_timer(&mut self, now: Time, timer: Timer, out: &mut O) {
        self.now = now;
        match timer {
            Timer::Tick => {
                self.tick(out);
                self.echo_stamps(out);
            }
            Timer::Finalize => self.finalize(out),
        }
    }
    fn on_link(&mut self, now: Time, ev: LinkEvent, out: &mut O) {
        self.now = now;
        self.peer_link(&ev, out);
        match ev {
            LinkEvent::Down(Peer::Node(n)) => {
                self.forget_reads_of(n);
                self.link_down(n, out);
            }
            LinkEvent::Down(Peer::Conn(c)) => self.sm.drop_conn(c),
            LinkEvent::Up(_) => {}
        }
    }
    fn restore(&mut self, rec: Record) {
        match rec {
            Record::Meta { key, value } => self.restore_meta(&key, &value),
            Record::Snapshot { index, data } => {
                if let Some((runs, state, members)) = super::state_machine::decode_snapshot(&data) {
                    let epoch = runs.last().map_or(0, |&(e, _)| e);
                    if self.sm.restore(&state).is_ok() {
                        // Records may come in the order written (entries
                        // above the snapshot before it): keep them.
                        if self.log.epoch_at(index) == Some(epoch) {
                            self.log.compact(index);
                        } else {
                            self.log.install(index, runs, members);
                        }
                        self.applied = index;
                        self.commit = index;
                    }
                }
            }
            Record::Entry { index, epoch, data } => {
                if index > self.log.base() {
                    self.log.truncate_from(index + 1);
                    self.log.put(index, epoch, data);
                }
            }
            Record::TruncateFrom { index } => self.log.truncate_from(index.max(self.applied + 1)),
            Record::Register { .. } => {}
        }
        if self.has_bug(InjectedBug::ReuseEpoch) {
            // Epochs were never written: take them from the log.
            let e = self.log.last_zxid().epoch;
            (self.accepted, self.current_epoch) = ((e, 0), e);
        }
    }
    /// The state applied here, cut at `applied`: a snapshot record of it
    /// (sessions dropped) and the epochs a fresh server needs so that its
    /// next epoch follows the snapshot's.
    fn export(&self) -> Result<Export, String> {
        if self.recovering || self.recovery.is_some() {
            return Err("this server is recovering its state; ask another".into());
        }
        let runs = self.log.runs_upto(self.applied);
        let epoch = runs.last().map_or(0, |&(e, _)| e).max(self.current_epoch);
        let (state, entries) = self.sm.export_state();
        let word = |e: u64| Bytes::copy_from_slice(&e.to_le_bytes());
        let mut accepted = epoch.to_le_bytes().to_vec();
        accepted.extend_from_slice(&0u64.to_le_bytes());
        let records = vec![
            Record::Meta {
                key: META_ACCEPTED.into(),
                value: Bytes::from(accepted),
            },
            Record::Meta {
                key: META_CURRENT.into(),
                value: word(epoch),
            },
            Record::Snapshot {
                index: self.applied,
                data: encode_snapshot(&runs, &state, self.log.members_at(self.applied)),
            },
        ];
        Ok(Export {
            records,
            cut: self.applied,
            entries,
            merge_majority: false,
        })
    }
    fn membership(&self) -> Option<Membership> {
        Some(self.membership_view())
    }
    fn change_membership(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut O,
    ) -> Result<u64, String> {
        self.reconfig(now, voters, out)
    }
    fn role(&self) -> &'static str {
        match &self.role {
            _ if self.recovering => "recovering",
            Role::Looking => "looking",
            // Outside every configuration in effect: follows, never votes.
            Role::Following(_) if !self.voter() => "learner",
            Role::Following(_) => "follower",
            Role::Leading(_) => "leader",
        }
    }
    fn status(&self) -> String {
        let coin = self.adaptive_status().map(|s| format!(" {s}"));
        format!(
            "{} epoch={}/{} last={} commit={} applied={} base={} keys={} leader={}{}",
            self.role(),
            self.accepted.0,
            self.current_epoch,
            self.log.last(),
            self.commit,
            self.applied,
            self.log.base(),
            self.sm.len(),
            self.leader().map(|l| l.to_string()).unwrap_or("-".into()),
            coin.unwrap_or_default(),
        )
    }
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let c = &self.counters;
        let mut v = vec![
            (
                "zab_edge_values_refused_total",
                "messages refused: an epoch, index or round past 2^63",
                c.edge_values_refused,
            ),
            (
                "zab_epochs_exhausted_total",
                "leaderships given up: no epoch follows the highest accepted",
                c.epochs_exhausted,
            ),
            (
                "zab_elections",
                "times this server started an election",
                c.elections,
            ),
            (
                "zab_led",
                "times this server became a prospective leader",
                c.led,
            ),
            (
                "zab_step_downs",
                "leaderships given up (no quorum, newer epoch)",
                c.step_downs,
            ),
            (
                "zab_proposals",
                "proposals broadcast as leader",
                c.proposals,
            ),
            (
                "zab_delivered",
                "entries delivered (abdeliver)",
                c.delivered,
            ),
            (
                "zab_sync_diff",
                "followers synchronised by DIFF",
                c.sync_diff,
            ),
            (
                "zab_sync_trunc",
                "followers synchronised by TRUNC + DIFF",
                c.sync_trunc,
            ),
            (
                "zab_sync_snap",
                "followers synchronised by SNAP",
                c.sync_snap,
            ),
            (
                "zab_snapshots",
                "snapshots taken (log compactions)",
                c.snapshots,
            ),
            ("zab_read_rounds", "read-index quorum rounds", c.read_rounds),
            (
                "zab_unknown",
                "requests answered with an unknown outcome",
                c.unknown,
            ),
            (
                "zab_recoveries",
                "epoch floors learned after losing the state",
                c.recoveries,
            ),
            ("zab_last_index", "last log index", self.log.last()),
            ("zab_commit_index", "commit index known here", self.commit),
        ];
        v.extend(self.broadcast_metrics());
        v.extend(self.adaptive_metrics());
        v
    }
}
