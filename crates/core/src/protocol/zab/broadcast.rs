//! The thesis' broadcast variants (seed 003 chapter 3, §3.5-3.6, lines
//! 1041-1200; chapter 4 §4.2; PROTOCOLS.md §6): `--opt broadcast=`
//! `zab|ac|aa|ct|ct-q|aa-q`. Only the broadcast phase changes; election,
//! discovery and synchronisation stay Zab's (`election.rs`, `leader.rs`,
//! `follower.rs`), and so does the COMMIT that ends a synchronisation.
//!
//! Common to every variant (L1-L4, §3.6): the leader proposes, logs, counts
//! its own durable log and the follower ACKs it receives, and delivers on a
//! quorum, as in Zab, but sends **no COMMIT** (§3.5.2). ACKs are
//! **cumulative** (§3.5.1): `Ack { index }` says "logged everything up to
//! `index`" (FIFO links, A2). Followers decide delivery themselves, on the
//! **follower invariant** (§3.5.3): a follower delivers `m` once `k`
//! followers, itself included, are known to have logged it:
//!
//! | variant | thesis | a follower's ACK goes to | `k` | assumptions |
//! |---|---|---|---|---|
//! | `ac` | ZabAc (N = 3 only) | the leader | f = 1: its own | A1.1, A1.2 |
//! | `aa` | ZabAa | leader and followers | f = ⌈(N−1)/2⌉ | A1.1, A1.2 |
//! | `ct` | ZabCt | on Head (coin p), leader and followers | f | A1.1, A1.2 |
//! | `ct-q` | ZabCT | as `ct` | f + 1 (a quorum) | Zab's A1 |
//! | `aa-q` | ZabAA | leader and followers (p = 1) | f + 1 | Zab's A1 |
//!
//! With `k = f` the followers that logged `m` plus the leader form a quorum
//! only once the leader logged it too, so a leader that crashes before its
//! write is durable must not help elect the next one (A1.1): here a server
//! that restarts having promised its current epoch to itself (it led it)
//! stays out, as a recovering server does (no vote, counted in no quorum),
//! until a leader of a newer epoch synchronised it or, A1.1's "until its
//! successor has been installed", it hears that a newer epoch was
//! established (`successor_installed`): a majority outage then ends.
//! A1.2 (never fewer than a quorum up) is the simulator's job:
//! `Zab::bounds_durable_crashes`; its `outage` fault breaks it.
//!
//! Reads by read index: a follower may deliver (and answer) a write the
//! leader has not committed yet, so the leader's read index is its last
//! *proposed* index in these variants, not its commit index.
//!
//! The thesis' enforced tossing (timer D, §4.2.3) is played by the
//! heartbeat: each tick the leader's PING carries its commit index and each
//! PONG the follower's logged index, so a proposal that tails left
//! uncommittable is delivered within a tick at the leader and two at the
//! followers even when no later proposal comes.

use super::msg::Msg;
use super::node::{Role, ZabNode, O};
use super::roles::FStage;
use super::variant::{Bcast, Variant, META_LED};
use crate::protocol::contract::{LinkEvent, Record};
use crate::types::{NodeId, Peer, Time};
use bytes::Bytes;
use std::collections::BTreeSet;

impl ZabNode {
    /// Run broadcast variant `variant` with coin `p`, tossed from `seed`.
    pub fn with_broadcast(mut self, variant: Variant, p: f64, seed: u64) -> Self {
        self.bcast = Bcast::new(variant, p, seed);
        self
    }
    /// `false`: break A1.1 (restarted old leaders rejoin at once).
    pub fn with_stay_out(mut self, on: bool) -> Self {
        self.bcast.stay_out = on;
        self
    }
    pub fn variant(&self) -> Variant {
        self.bcast.variant
    }

    fn a11(&self) -> bool {
        self.bcast.variant.restricted() && self.bcast.stay_out
    }

    /// A1.1 (§3.3, lines 1000-1008): under the restricted assumptions, a
    /// server that restarts having led its current epoch (`META_LED`)
    /// stays out (as a recovering server: no vote, in no quorum) until a
    /// leader of a newer epoch synchronised it, or one was established
    /// (`successor_installed`): its own proposals may be missing from its
    /// disk while followers delivered them.
    pub(super) fn stay_out_if_old_leader(&mut self) {
        let led = self.bcast.led;
        if self.a11() && led > 0 && led == self.current_epoch && !self.recovering {
            self.recovering = true;
            self.bcast.out_for = Some(led);
            self.counters.stayed_out += 1;
        }
    }

    /// A1.1 keeps a restarted leader out "until its successor has been
    /// installed" (§3.3, line 1002); §4.4.1 (line 1566) asks for "f+1
    /// servers excluding the *previous* leader". A peer's `led` (from its
    /// notification) is an epoch it established: its history was on a
    /// quorum's disks. If that is above the epoch we stay out for, we are
    /// no longer the previous leader and rejoin with our log as it is.
    ///
    /// Why that is safe: what our log may lack is the tail of our own
    /// epoch `e`, delivered by followers on f follower logs (k = f). A
    /// leader of `e' > e` established its history, which holds every entry
    /// delivered in `e` (its discovery quorum left us out or had our whole
    /// log), on a quorum that persisted current epoch `e'`; every quorum we
    /// can join has a member of it, whose vote `(current epoch, last)`
    /// beats ours, so our short log can elect no one. The newest epoch's
    /// leader still stays out, so its followers' deliveries stay covered
    /// (any f + 1 servers without it meet the f that logged them).
    ///
    /// Without this, two old leaders out at once (a majority outage after
    /// a leader change) wait for each other: at N = 3 the one server left
    /// is no quorum, and no newer leader can come to synchronise them
    /// (simulator seeds in `crates/sim/tests/zab_variants.rs`).
    pub(super) fn successor_installed(&mut self, led: u64, out: &mut O) {
        match self.bcast.out_for {
            Some(e) if self.recovering && led > e => {}
            _ => return,
        }
        self.bcast.out_for = None;
        self.recovering = false;
        self.counters.rejoined += 1;
        if matches!(self.role, Role::Looking) {
            // Vote again, now counted.
            self.look(out);
        }
    }

    /// "A process logs the epoch number in which it acts as a leader"
    /// (line 1004): once established, before its first proposal leaves.
    /// Proposals wait (`Send`, held until the record is durable) until a
    /// durability report covers the first of them, then go at once again.
    pub(super) fn mark_led(&mut self, out: &mut O) {
        let epoch = self.current_epoch;
        if !self.a11() || self.bcast.led == epoch {
            return;
        }
        self.bcast.led = epoch;
        self.bcast.unmarked_from = Some(self.log.last() + 1);
        out.persist(Record::Meta {
            key: META_LED.into(),
            value: Bytes::copy_from_slice(&epoch.to_le_bytes()),
        });
    }

    /// Whether a proposal must wait for `META_LED` (see `mark_led`).
    pub(super) fn proposal_waits(&mut self) -> bool {
        match self.bcast.unmarked_from {
            Some(i) if self.logged >= i => {
                self.bcast.unmarked_from = None;
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// An ACK: the leader counts it (L3), a follower under a variant
    /// counts another follower's (F3/F4).
    pub(super) fn on_any_ack(&mut self, from: NodeId, epoch: u64, index: u64, out: &mut O) {
        match &self.role {
            Role::Leading(l) => {
                if l.epoch == epoch {
                    self.counters.acks_received += 1;
                }
                self.on_ack(from, epoch, index, out);
                if self.bcast.zab_mode {
                    // A follower back in the broadcast may end the switch.
                    self.prot_decide(out);
                }
            }
            Role::Following(_) => self.on_peer_ack(from, epoch, index, out),
            Role::Looking => {}
        }
    }

    /// Followers decide delivery now: a variant, not switched to Zab.
    pub(super) fn deciding(&self) -> bool {
        self.bcast.variant.followers_decide() && !self.bcast.zab_mode
    }

    fn on_peer_ack(&mut self, from: NodeId, epoch: u64, index: u64, out: &mut O) {
        if !self.bcast.variant.followers_decide() {
            return;
        }
        // A3: we hear from it, so it is up.
        if self.bcast.suspected.remove(&from) {
            self.maybe_vote(out);
        }
        self.heard_peer(from, epoch, out);
        match &self.role {
            Role::Following(f)
                if f.leader != from
                    && f.epoch == epoch
                    && matches!(f.stage, FStage::Synced | FStage::Serving) => {}
            _ => return,
        }
        self.peer_epoch_is(epoch);
        let a = self.bcast.peer_acks.entry(from).or_default();
        *a = (*a).max(index);
        self.follower_advance(out);
    }

    fn peer_epoch_is(&mut self, epoch: u64) {
        if self.bcast.peer_epoch != epoch {
            self.bcast.peer_epoch = epoch;
            self.bcast.peer_acks.clear();
        }
    }

    /// Our log is durable up to `self.logged` (F1-F3): Zab ACKs to the
    /// leader; ac ACKs to the leader and itself; aa and aa-q to everyone;
    /// ct and ct-q toss a coin for each proposal logged since the last
    /// toss and, on any Head, ACK the highest to everyone (one cumulative
    /// ACK covers the tails before it, §3.5.1).
    pub(super) fn follower_logged(&mut self, out: &mut O) {
        let Role::Following(f) = &self.role else {
            return;
        };
        let (leader, epoch, index) = (f.leader, f.epoch, self.logged);
        let v = self.bcast.variant;
        if self.bcast.gen != self.log_gen {
            // Synchronised since: the history's ACK goes as in Zab.
            (self.bcast.gen, self.bcast.tossed, self.bcast.sent_upto) = (self.log_gen, 0, 0);
        }
        let zab_mode = self.bcast.zab_mode;
        let fresh = index.saturating_sub(self.bcast.tossed);
        let first = self.bcast.tossed == 0;
        self.bcast.tossed = self.bcast.tossed.max(index);
        let send = if v.tosses() && !first && !zab_mode {
            let p = self.bcast.p;
            let heads = (0..fresh).filter(|_| self.bcast.rng.chance(p)).count() as u64;
            self.counters.coin_tosses += fresh;
            self.counters.coin_heads += heads;
            heads > 0
        } else {
            true
        };
        if send {
            self.send_ack(
                leader,
                epoch,
                index,
                v.acks_to_followers() && !zab_mode,
                out,
            );
        }
        if v.followers_decide() {
            self.peer_epoch_is(epoch);
            self.follower_advance(out);
        }
        self.maybe_vote(out);
    }

    /// Our ACK of `index` to the leader (stamped, for the adaptive coin's
    /// d, if one is due) and, if `all`, to the other followers.
    pub(super) fn send_ack(
        &mut self,
        leader: NodeId,
        epoch: u64,
        index: u64,
        all: bool,
        out: &mut O,
    ) {
        self.bcast.sent_upto = self.bcast.sent_upto.max(index);
        let first = self.ack_msg(epoch, index);
        out.send_now(Peer::Node(leader), first);
        self.counters.bcast_msgs += 1;
        if all {
            let others: Vec<NodeId> = self.peers().filter(|&n| n != leader).collect();
            self.counters.bcast_msgs += others.len() as u64;
            for n in others {
                out.send_now(Peer::Node(n), Msg::Ack { epoch, index });
            }
        }
    }

    /// F4/F5: deliver up to the highest index `k` followers (us included)
    /// logged, k = f or f + 1 (`Variant::follower_quorum`), once serving.
    pub(super) fn follower_advance(&mut self, out: &mut O) {
        let serving = matches!(&self.role, Role::Following(f) if f.stage == FStage::Serving);
        if !serving || !self.deciding() {
            return;
        }
        let last = self.log.last();
        let k = self.bcast.variant.follower_quorum(self.members.len());
        let mut acks: Vec<u64> = self
            .bcast
            .peer_acks
            .values()
            .map(|&a| a.min(last))
            .collect();
        acks.push(self.logged.min(last));
        acks.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&index) = acks.get(k - 1) else {
            return;
        };
        if index > self.commit {
            let holders = acks.iter().filter(|&&a| a >= index).count();
            self.invariant(
                holders >= k,
                "a follower delivered without k followers logging it",
            );
            self.commit = index;
            self.deliver(out);
        }
    }

    /// L3 at the leader: a quorum logged up to `index`. Zab COMMITs to every
    /// follower; the variants deliver here only (§3.5.2).
    pub(super) fn broadcast_commit(&mut self, index: u64, out: &mut O) {
        self.counters.leader_commits += index.saturating_sub(self.commit);
        if self.deciding() {
            self.commit = self.commit.max(index);
            return self.deliver(out);
        }
        if let Role::Leading(l) = &self.role {
            self.counters.bcast_msgs += l.synced().count() as u64;
        }
        self.commit_to(index, out);
    }

    /// L1: a proposal left for `to` followers.
    pub(super) fn on_proposed(&mut self, to: usize) {
        self.counters.bcast_msgs += to as u64;
    }

    /// A write of ours was delivered here and is answered now: the thesis'
    /// latency, from the server receiving the request to its abdelivery
    /// (§5.1.1). The request came `op_timeout` before its deadline.
    pub(super) fn note_answered(&mut self, deadline: Time) {
        let got = deadline
            .as_micros()
            .saturating_sub(self.cfg.op_timeout.as_micros() as u64);
        let us = self.now.as_micros().saturating_sub(got);
        self.counters.delivery_us += us;
        self.counters.delivery_max_us = self.counters.delivery_max_us.max(us);
        self.counters.deliveries_timed += 1;
    }

    /// A3 (§3.3): the driver's view of the links to the other followers
    /// (a crash or a reset closes them; our ACKs reopen them).
    pub(super) fn peer_link(&mut self, ev: &LinkEvent, out: &mut O) {
        if !self.bcast.variant.switches() {
            return;
        }
        let (n, down) = match ev {
            LinkEvent::Down(Peer::Node(n)) => (*n, true),
            LinkEvent::Up(Peer::Node(n)) => (*n, false),
            _ => return,
        };
        if n == self.id || !self.members.contains(&n) {
            return;
        }
        if down {
            self.bcast.suspected.insert(n);
        } else {
            self.bcast.suspected.remove(&n);
        }
        self.maybe_vote(out);
    }

    /// Vote with `Prot` when our view changes (§4.3.3): Zab once more
    /// followers are suspected than the variant tolerates, the variant
    /// again once they are back. A follower that never voted Zab in this
    /// epoch says nothing: silence is a vote for the variant.
    pub(super) fn maybe_vote(&mut self, out: &mut O) {
        let Role::Following(f) = &self.role else {
            return;
        };
        let synced = matches!(f.stage, FStage::Synced | FStage::Serving);
        if !synced || !self.bcast.variant.switches() {
            return;
        }
        let (leader, epoch) = (f.leader, f.epoch);
        let down = self
            .bcast
            .suspected
            .iter()
            .filter(|&&n| n != leader)
            .count();
        let adaptive = self.bcast.adapt.as_ref().is_some_and(|a| a.want_zab);
        let zab = adaptive || down > self.bcast.variant.tolerated(self.members.len());
        let last = self
            .bcast
            .voted
            .filter(|&(e, _)| e == epoch)
            .map(|(_, z)| z);
        if last.unwrap_or(false) == zab {
            self.bcast.voted = Some((epoch, zab));
            return;
        }
        self.bcast.voted = Some((epoch, zab));
        out.send_now(Peer::Node(leader), Msg::Prot { epoch, zab });
    }

    /// `Prot`: a follower's vote at the leader, the decision at a follower.
    pub(super) fn on_prot(&mut self, from: NodeId, epoch: u64, zab: bool, out: &mut O) {
        match &self.role {
            Role::Leading(l) if l.epoch == epoch && l.fols.contains_key(&from) => {
                self.votes_for(epoch);
                if zab {
                    self.bcast.zab_votes.insert(from);
                } else {
                    self.bcast.zab_votes.remove(&from);
                }
                self.prot_decide(out);
            }
            Role::Following(f) if f.leader == from && f.epoch == epoch => {
                if self.bcast.zab_mode != zab {
                    self.counters.switches += 1;
                }
                self.bcast.zab_mode = zab;
                self.follower_advance(out);
            }
            _ => {}
        }
    }

    fn votes_for(&mut self, epoch: u64) {
        if self.bcast.votes_epoch != epoch {
            self.bcast.votes_epoch = epoch;
            self.bcast.zab_votes.clear();
            self.bcast.zab_mode = false;
        }
    }

    /// The leader decides (§3.6.2): one vote for Zab switches everyone to
    /// Zab; back to the variant once no follower votes Zab and every
    /// follower the variant needs is in the broadcast (all N − 1 for ct and
    /// ct-q, N − 1 − (f − 1) for aa-q). Tells every follower on a change.
    fn prot_decide(&mut self, out: &mut O) {
        let Role::Leading(l) = &self.role else {
            return;
        };
        let (epoch, n) = (l.epoch, self.members.len());
        let inside: BTreeSet<NodeId> = l.synced().collect();
        self.votes_for(epoch);
        let v = self.bcast.variant;
        self.bcast.zab_votes.retain(|f| inside.contains(f));
        let missing = (n - 1).saturating_sub(inside.len());
        let zab = !self.bcast.zab_votes.is_empty() || missing > v.tolerated(n);
        if zab == self.bcast.zab_mode {
            return;
        }
        self.bcast.zab_mode = zab;
        self.counters.switches += 1;
        let index = self.commit;
        for f in inside {
            out.send_now(Peer::Node(f), Msg::Prot { epoch, zab });
            if zab {
                out.send_now(Peer::Node(f), Msg::Commit { epoch, index });
            }
        }
    }

    /// Each tick at the leader: decide, and repeat the decision to every
    /// follower (one that joined since, or follows us after another leader,
    /// keeps its previous mode until told; either mode is safe).
    pub(super) fn prot_tick(&mut self, out: &mut O) {
        if !self.bcast.variant.switches() {
            return;
        }
        let Role::Leading(l) = &self.role else {
            return;
        };
        if !l.established {
            return;
        }
        self.prot_decide(out);
        let Role::Leading(l) = &self.role else {
            return;
        };
        let (epoch, zab) = (l.epoch, self.bcast.zab_mode);
        let to: Vec<NodeId> = l.synced().collect();
        for f in to {
            out.send_now(Peer::Node(f), Msg::Prot { epoch, zab });
        }
    }

    /// The index a read must wait for (read index): the commit index in
    /// Zab; the last proposed index in the variants, where a follower may
    /// have delivered (and answered) what the leader has not committed.
    pub(super) fn read_point(&self) -> u64 {
        if self.bcast.variant.followers_decide() {
            self.log.last()
        } else {
            self.commit
        }
    }

    pub(super) fn broadcast_metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let c = &self.counters;
        vec![
            (
                "zab_acks_received",
                "follower ACKs received as leader in the broadcast phase",
                c.acks_received,
            ),
            (
                "zab_leader_commits",
                "entries committed as leader in the broadcast phase (acks per commit = acks_received / this)",
                c.leader_commits,
            ),
            (
                "zab_bcast_msgs",
                "broadcast-phase messages sent (PROPOSAL, ACK, COMMIT; not heartbeats)",
                c.bcast_msgs,
            ),
            (
                "zab_delivery_us_sum",
                "sum over writes answered here of request receipt to delivery here, microseconds (seed 003 §5.1.1)",
                c.delivery_us,
            ),
            (
                "zab_delivery_us_max",
                "largest request-receipt-to-delivery latency here, microseconds",
                c.delivery_max_us,
            ),
            (
                "zab_deliveries_timed",
                "deliveries whose latency is in zab_delivery_us_sum",
                c.deliveries_timed,
            ),
            ("zab_coin_tosses", "coin tosses (ct, ct-q)", c.coin_tosses),
            ("zab_coin_heads", "coin tosses that came up Head", c.coin_heads),
            (
                "zab_coin_p_permille",
                "the coin's probability of Head, in thousandths",
                (self.bcast.p * 1000.0).round() as u64,
            ),
            (
                "zab_switches",
                "switches between a variant and Zab's broadcast (prot, §4.3.3)",
                c.switches,
            ),
            (
                "zab_stayed_out",
                "restarts kept out of quorums as an old leader (A1.1)",
                c.stayed_out,
            ),
            (
                "zab_rejoined",
                "old leaders kept out that rejoined once a newer epoch was established (A1.1)",
                c.rejoined,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::msg::PeerState;
    use super::super::node::Config;
    use super::super::testing::{at, ct_q_three, get, hear, lone, notify, put, value, Cluster};
    use super::*;
    use crate::protocol::contract::{Command, Protocol};
    use std::collections::BTreeMap;

    /// Broadcast messages per write and follower ACKs per commit at the
    /// leader over `writes` writes made one at a time at the leader.
    fn per_write(v: Variant, n: u32, p: f64, writes: u64) -> (f64, f64, Cluster) {
        let mut c = Cluster::running(n, Config::default(), (v, p, true));
        let l = c.settle();
        let total = |c: &Cluster| -> u64 {
            (c.nodes.iter().flatten())
                .map(|x| x.counters.bcast_msgs)
                .sum()
        };
        let (m0, a0, k0) = (total(&c), c.node(l).counters.acks_received, {
            c.node(l).counters.leader_commits
        });
        for i in 0..writes {
            let r = c.ask(l, put("k", &i.to_string()));
            assert!(r.is_some(), "{} N={n}: write {i} not answered", v.name());
        }
        let lc = &c.node(l).counters;
        let msgs = (total(&c) - m0) as f64 / writes as f64;
        let acks = (lc.acks_received - a0) as f64 / (lc.leader_commits - k0) as f64;
        (msgs, acks, c)
    }

    /// Remark 1 of §3.6.2 and §3.6.1's counts: messages per broadcast are
    /// Zab 3(N−1), ZabAc 4, ZabAa and ZabAA N(N−1), ZabCt and ZabCT
    /// (N−1) + p(N−1)² in expectation; the leader receives N−1 ACKs per
    /// commit, or p(N−1) with the coin (Remark 2).
    #[test]
    fn messages_per_broadcast_match_the_thesis_formulas() {
        for n in [3u32, 5, 7] {
            let f = f64::from(n - 1);
            let (m, a, _) = per_write(Variant::Zab, n, 0.5, 50);
            assert_eq!((m, a), (3.0 * f, f), "zab N={n}");
            for v in [Variant::Aa, Variant::AaQ] {
                let (m, a, _) = per_write(v, n, 0.5, 50);
                assert_eq!((m, a), (f64::from(n) * f, f), "{} N={n}", v.name());
            }
            for (v, p) in [(Variant::Ct, 0.5), (Variant::CtQ, 0.5), (Variant::Ct, 0.25)] {
                let (m, a, _) = per_write(v, n, p, 400);
                let want = f + p * f * f;
                assert!(
                    (m - want).abs() < 0.1 * want,
                    "{} N={n} p={p}: {m} vs {want}",
                    v.name()
                );
                assert!(
                    (a - p * f).abs() < 0.15 * p * f,
                    "{} N={n}: {a} acks/commit",
                    v.name()
                );
            }
        }
        let (m, a, _) = per_write(Variant::Ac, 3, 0.5, 50);
        assert_eq!((m, a), (4.0, 2.0), "ac");
    }

    /// §3.5.2, F3: with f = 1 (N = 3) a follower delivers on its own ACK,
    /// without a COMMIT, and counts its receipt-to-delivery latency.
    #[test]
    fn followers_deliver_without_a_commit() {
        for v in [Variant::Ac, Variant::Aa, Variant::Ct] {
            let (_, _, c) = per_write(v, 3, 0.5, 5);
            let last = c.nodes[0].as_ref().expect("up").log().last();
            for x in c.nodes.iter().flatten() {
                assert_eq!(x.applied(), last, "{}: n{}", v.name(), x.id);
            }
        }
    }

    /// A1.1 (lines 1000-1008): under ac, aa and ct a restarted leader of
    /// its current epoch stays out (no vote, no quorum) until a newer
    /// leader synchronised it; not under zab or ct-q, nor with
    /// `stay-out=false`.
    #[test]
    fn a_restarted_old_leader_stays_out_until_a_newer_epoch() {
        for (v, stay_out, out) in [
            (Variant::Ct, true, true),
            (Variant::Ac, true, true),
            (Variant::Ct, false, false),
            (Variant::CtQ, true, false),
            (Variant::Zab, true, false),
        ] {
            let mut c = Cluster::running(3, Config::default(), (v, 0.5, stay_out));
            let l = c.settle();
            assert!(c.ask(l, put("k", "v")).is_some());
            let epoch = c.node(l).epochs().1;
            let marked = (c.disks[l as usize - 1].records().iter())
                .any(|r| matches!(r, Record::Meta { key, .. } if key == META_LED));
            assert_eq!(
                marked,
                out,
                "{}: the leader logs the epoch it leads",
                v.name()
            );
            // A follower never led: it rejoins at once.
            let f = if l == 1 { 2 } else { 1 };
            c.crash(f);
            c.restart(f);
            assert_eq!(c.node(f).role(), "looking");
            assert_eq!(c.settle(), l);
            c.crash(l);
            c.restart(l);
            let back = c.node(l);
            assert_eq!(back.role() == "recovering", out, "{} {stay_out}", v.name());
            assert_eq!(back.counters.stayed_out, u64::from(out));
            if out {
                let l2 = c.settle();
                assert_ne!(l2, l, "{}: the old leader led again", v.name());
                assert!(c.node(l).epochs().1 > epoch && c.node(l).role() == "follower");
            }
        }
    }

    /// A majority outage after a leader change (N = 3): the leader of epoch
    /// e crashes, a successor establishes e' and takes a write, then it
    /// crashes too and both return. Both stay out (A1.1); the older one
    /// hears the successor's `led` = e' > e and rejoins, with the third it
    /// elects a leader (the third: current epoch e', the newest vote), and
    /// that leader synchronises the successor. The write survives. Before
    /// `successor_installed` the two waited for each other for good.
    #[test]
    fn two_old_leaders_out_after_an_outage_the_older_rejoins() {
        for v in [Variant::Ac, Variant::Aa, Variant::Ct] {
            let mut c = Cluster::running(3, Config::default(), (v, 0.5, true));
            let l1 = c.settle();
            assert!(c.ask(l1, put("k", "v1")).is_some());
            c.crash(l1);
            let l2 = c.settle();
            assert_ne!(l2, l1);
            let e2 = c.node(l2).epochs().1;
            assert!(c.ask(l2, put("k", "v2")).is_some());
            let third = 6 - l1 - l2;
            c.crash(l2);
            c.restart(l1);
            c.restart(l2);
            c.run();
            let (a, b) = (c.node(l1), c.node(l2));
            assert_ne!(a.role(), "recovering", "{}", v.name());
            assert_eq!(b.role(), "recovering", "{}", v.name());
            assert_eq!(a.counters.rejoined, 1, "{}: l1 rejoined at once", v.name());
            assert_eq!((a.counters.stayed_out, b.counters.stayed_out), (1, 1));
            let l3 = c.settle();
            assert_eq!(l3, third, "{}: the newest vote leads", v.name());
            assert!(c.node(l2).epochs().1 > e2 && c.node(l2).role() == "follower");
            assert_eq!(
                c.node(l2).counters.rejoined,
                0,
                "synchronised, not rejoined"
            );
            assert_eq!(c.ask(l1, get("k")), Some(value("v2")), "{}", v.name());
        }
    }

    /// A restarted leader stays out on an older or equal `led` (its own
    /// epoch from a peer that never led a newer one), and a server that
    /// lost its state never rejoins by `led`: it has no epoch of its own.
    #[test]
    fn an_old_leader_stays_out_unless_a_newer_epoch_was_established() {
        let mut c = Cluster::running(3, Config::default(), (Variant::Ac, 0.5, true));
        let l = c.settle();
        let e = c.node(l).epochs().1;
        c.crash(l);
        c.restart(l);
        let f = if l == 1 { 2 } else { 1 };
        for led in [0, e] {
            let msg = notify_led(led);
            at(&mut c, l, f, msg);
            assert_eq!(c.node(l).role(), "recovering", "led {led}");
        }
        at(&mut c, l, f, notify_led(e + 1));
        assert_eq!(c.node(l).role(), "looking");
        let mut lost = lone(1, 3, 0, &[])
            .with_broadcast(Variant::Ac, 0.5, 1)
            .recovering();
        hear(&mut lost, 2, notify_led(9));
        assert!(lost.is_recovering());
    }

    fn notify_led(led: u64) -> Msg {
        match notify(1, None, PeerState::Looking, true) {
            Msg::Notify {
                round,
                vote,
                state,
                recovering,
                ..
            } => Msg::Notify {
                round,
                vote,
                state,
                recovering,
                led,
            },
            m => m,
        }
    }

    /// ct-q with a follower down (N = 3): the other follower can never
    /// count f + 1 = 2 follower ACKs, so it votes for Zab (`Prot`, A3 from
    /// the link going down), the leader switches everyone to Zab's COMMITs
    /// (§3.6.2, §4.3.3) and writes at the follower complete at once; when
    /// the crashed follower is back (its ACKs reach the other), the vote
    /// returns, the leader switches back, and followers decide again.
    #[test]
    fn ct_q_switches_to_zab_on_a_follower_crash_and_back() {
        let (mut c, l, f1, f2) = ct_q_three();
        let waits = |c: &mut Cluster| -> Vec<u64> {
            (0..20)
                .map(|i| {
                    let t0 = c.now;
                    assert!(c.ask(f1, put("k", &i.to_string())).is_some(), "write {i}");
                    c.now.as_micros() - t0.as_micros()
                })
                .collect()
        };
        let s0 = c.node(l).counters.switches;
        c.crash(f2);
        c.run();
        assert!(c.node(l).bcast.zab_mode && c.node(f1).bcast.zab_mode);
        let down = waits(&mut c);
        // Zab's COMMIT: every write completes without waiting for a tick.
        assert!(down.iter().all(|&w| w == 0), "{down:?}");
        c.restart(f2);
        assert_eq!(c.settle(), l);
        let back = waits(&mut c);
        assert!(!c.node(l).bcast.zab_mode && !c.node(f1).bcast.zab_mode);
        assert!(c.node(l).counters.switches >= s0 + 2);
        assert!(back.iter().all(|&w| w <= 30_000), "{back:?}");
        // The latency counter (§5.1.1): request receipt to delivery here.
        let k = &c.node(f1).counters;
        let sum: u64 = down.iter().chain(&back).sum();
        assert_eq!((k.deliveries_timed, k.delivery_us), (40, sum));
        assert_eq!(k.delivery_max_us, *down.iter().chain(&back).max().unwrap());
    }

    /// When no rule fires (ac and aa never switch; before a switch), the
    /// leader's heartbeat still carries its commit index: here one follower
    /// stops acknowledging to the other (nothing is suspected, no vote),
    /// and every write at the other is delivered within three ticks.
    #[test]
    fn the_heartbeat_delivers_when_no_rule_fires() {
        let (mut c, _, f1, f2) = ct_q_three();
        // f2 stops acknowledging to f1 only: f1 counts one follower ACK.
        c.nodes[f1 as usize - 1].as_mut().expect("up").bcast.variant = Variant::AaQ;
        c.nodes[f2 as usize - 1].as_mut().expect("up").bcast.variant = Variant::Ac;
        for i in 0..10 {
            let t0 = c.now;
            assert!(c.ask(f1, put("k", &i.to_string())).is_some());
            let w = c.now.as_micros() - t0.as_micros();
            assert!(w > 0 && w <= 30_000, "write {i}: {w} us");
        }
    }

    #[test]
    fn ac_is_for_three_servers_only() {
        assert!(Variant::Ac.check_size(3).is_ok());
        let e = Variant::Ac.check_size(5).unwrap_err();
        assert!(e.contains("N = 3") && e.contains("N = 5"), "{e}");
        assert!(Variant::ALL
            .iter()
            .all(|v| Variant::parse(v.name()) == Some(*v)));
        assert_eq!(Variant::Aa.follower_quorum(5), 2);
        assert_eq!(Variant::CtQ.follower_quorum(5), 3);
        assert_eq!(Variant::Ct.follower_quorum(4), 2);
    }

    /// §4.4.2: aa-q leaves its fast path only once more than f − 1
    /// followers are down (at N = 5, f = 2: one down is tolerated), ct-q on
    /// the first.
    #[test]
    fn aa_q_tolerates_f_minus_one_followers_down() {
        for (v, tolerated) in [(Variant::AaQ, 1), (Variant::CtQ, 0)] {
            let mut c = Cluster::running(5, Config::default(), (v, 0.5, true));
            let l = c.settle();
            let followers: Vec<NodeId> = (1..=5).filter(|&n| n != l).collect();
            for (down, &f) in followers[..2].iter().enumerate() {
                c.crash(f);
                for _ in 0..3 {
                    c.tick();
                }
                let switched = c.node(l).bcast.zab_mode;
                assert_eq!(
                    switched,
                    down + 1 > tolerated,
                    "{}: {} down",
                    v.name(),
                    down + 1
                );
            }
            assert!(c.ask(followers[2], put("k", "v")).is_some(), "{}", v.name());
        }
    }

    /// A1.1 made durable before it matters: a leader under ac, aa or ct
    /// holds its first proposals until its `led-epoch` record is durable
    /// (`Send`: after the persists before it), then sends at once again.
    #[test]
    fn the_first_proposals_of_a_leader_under_a1_1_wait_for_its_record() {
        let proposals = |v: Variant, before: usize| -> Vec<bool> {
            let mut c = Cluster::running(3, Config::default(), (v, 0.5, true));
            let l = c.settle();
            for i in 0..before {
                assert!(c.ask(l, put("k", &i.to_string())).is_some());
            }
            let cmds = c.exec(l, |n, now, out| {
                n.on_client(now, crate::types::ClientRef::local(999), put("k", "x"), out)
            });
            let held = |c: &Command<Msg, super::super::Timer>| match c {
                Command::Send {
                    msg: Msg::Proposal { .. },
                    ..
                } => Some(true),
                Command::SendNow {
                    msg: Msg::Proposal { .. },
                    ..
                } => Some(false),
                _ => None,
            };
            cmds.iter().filter_map(held).collect()
        };
        assert_eq!(proposals(Variant::Ac, 0), vec![true, true], "held");
        assert_eq!(proposals(Variant::Ac, 1), vec![false, false], "at once");
        assert_eq!(proposals(Variant::CtQ, 0), vec![false, false], "no A1.1");
    }

    /// A follower counts another follower's ACK toward delivery only when
    /// it is of the epoch it follows and not the leader's; the first ACK of
    /// a new epoch forgets the old epoch's.
    #[test]
    fn peer_acks_count_only_in_the_epoch_followed() {
        let mut c = Cluster::running(5, Config::default(), (Variant::Aa, 0.5, true));
        let l = c.settle();
        assert!(c.ask(l, put("k", "v")).is_some());
        let f: Vec<NodeId> = (1..=5).filter(|&n| n != l).collect();
        let epoch = c.node(f[0]).current_epoch;
        let acks = |c: &Cluster| c.node(f[0]).bcast.peer_acks.clone();
        let before = acks(&c);
        c.exec(f[0], |n, _, out| n.on_any_ack(f[1], epoch - 1, 99, out));
        c.exec(f[0], |n, _, out| n.on_any_ack(l, epoch, 99, out));
        assert_eq!(acks(&c), before, "an old epoch's ACK, the leader's");
        {
            let n = c.nodes[f[0] as usize - 1].as_mut().expect("up");
            n.bcast.peer_epoch = epoch - 1;
            n.bcast.peer_acks.insert(f[1], 99);
        }
        c.exec(f[0], |n, _, out| n.on_any_ack(f[2], epoch, 1, out));
        assert_eq!(acks(&c), BTreeMap::from([(f[2], 1)]), "a new epoch");
    }

    /// Every proposal a ct follower logs is one toss (the first after a
    /// synchronisation goes untossed), and about p of them come up Head.
    #[test]
    fn each_logged_proposal_is_one_toss() {
        let (_, _, c) = per_write(Variant::Ct, 3, 0.5, 200);
        for x in c.nodes.iter().flatten().filter(|x| x.role() == "follower") {
            let k = &x.counters;
            assert!((199..=200).contains(&k.coin_tosses), "{}", k.coin_tosses);
            assert!((60..=140).contains(&k.coin_heads), "{}", k.coin_heads);
        }
    }

    /// The leader losing a follower on its own (a one-sided partition: the
    /// followers still hear each other, so nobody votes) is enough: ct-q
    /// needs all N − 1 in the broadcast, so the leader switches to Zab at
    /// its next tick and tells the follower it still has.
    #[test]
    fn the_leader_switches_on_a_follower_it_lost_without_any_vote() {
        let (mut c, l, f1, f2) = ct_q_three();
        c.exec(l, |n, now, out| {
            n.on_link(now, LinkEvent::Down(Peer::Node(f2)), out)
        });
        assert!(!c.node(l).bcast.zab_mode);
        c.tick();
        assert!(c.node(l).bcast.zab_mode);
        assert!(c.node(f1).bcast.zab_mode, "told");
        assert!(c.node(f1).bcast.suspected.is_empty(), "no vote");
    }

    /// `Prot` is heard only from the right peer in the right epoch: a
    /// follower ignores a decision that is not its leader's or is of
    /// another epoch (and counts each change of mode once); the leader
    /// counts a vote only from a follower in its broadcast, this epoch.
    #[test]
    fn prot_is_heard_only_from_the_right_peer_and_epoch() {
        let (mut c, l, f1, f2) = ct_q_three();
        let epoch = c.node(l).current_epoch;
        c.exec(f1, |n, _, out| n.on_prot(f2, epoch, true, out));
        c.exec(f1, |n, _, out| n.on_prot(l, epoch - 1, true, out));
        assert!(!c.node(f1).bcast.zab_mode);
        let s0 = c.node(f1).counters.switches;
        c.exec(f1, |n, _, out| n.on_prot(l, epoch, true, out));
        assert!(c.node(f1).bcast.zab_mode);
        assert_eq!(c.node(f1).counters.switches, s0 + 1);
        c.exec(f1, |n, _, out| n.on_prot(l, epoch, true, out));
        assert_eq!(c.node(f1).counters.switches, s0 + 1, "no change");
        c.exec(l, |n, _, out| n.on_prot(f1, epoch - 1, true, out));
        c.exec(l, |n, _, out| n.on_prot(9, epoch, true, out));
        assert!(!c.node(l).bcast.zab_mode);
        c.exec(l, |n, _, out| n.on_prot(f1, epoch, true, out));
        assert!(c.node(l).bcast.zab_mode, "a follower's vote, this epoch");
        // A late vote of an older epoch takes nothing back.
        c.exec(l, |n, _, out| n.on_prot(f1, epoch - 1, false, out));
        c.exec(l, |n, _, out| n.on_prot(9, epoch, false, out));
        assert!(c.node(l).bcast.zab_mode, "still the vote of this epoch");
    }

    /// Votes belong to a leadership: a leader elected again forgets the
    /// Zab votes of its previous epoch (a follower that voted then says
    /// nothing now: silence is a vote for the variant).
    #[test]
    fn votes_of_an_earlier_leadership_are_forgotten() {
        let (mut c, l, f1, _) = ct_q_three();
        let epoch = c.node(l).current_epoch;
        {
            let n = c.nodes[l as usize - 1].as_mut().expect("up");
            n.bcast.zab_votes.insert(f1);
            n.bcast.votes_epoch = epoch - 1;
        }
        c.tick();
        assert!(!c.node(l).bcast.zab_mode);
        assert!(c.node(l).bcast.zab_votes.is_empty());
    }

    /// ac and aa never switch (they have no Zab fallback in the thesis):
    /// a follower down is no vote, and a link event about a server outside
    /// the cluster is no suspicion in any variant.
    #[test]
    fn variants_that_never_switch_ignore_a_crash() {
        for v in [Variant::Ac, Variant::Aa] {
            let mut c = Cluster::running(3, Config::default(), (v, 0.5, true));
            let l = c.settle();
            let f: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
            c.crash(f[1]);
            for _ in 0..3 {
                c.tick();
            }
            assert!(!c.node(l).bcast.zab_mode, "{}", v.name());
            assert!(c.ask(f[0], put("k", "v")).is_some(), "{}", v.name());
        }
        let (mut c, _, f1, _) = ct_q_three();
        c.exec(f1, |n, now, out| {
            n.on_link(now, LinkEvent::Down(Peer::Node(9)), out)
        });
        c.exec(f1, |n, now, out| {
            n.on_link(now, LinkEvent::Down(Peer::Node(f1)), out)
        });
        assert!(c.node(f1).bcast.suspected.is_empty());
    }
}
