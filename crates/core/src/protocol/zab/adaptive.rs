//! Adaptive ZabCT (seed 003 chapter 4, §5.2.1; PROTOCOLS.md §6): the coin
//! of `broadcast=ct-q` with `p=upper|mid|low|p-star` (`adaptive` is
//! `upper`) running in the protocol. The mathematics is `coin.rs`; this
//! module measures its inputs, feeds it each window and turns its answer
//! into the coin's p or a vote for Zab. Sans-IO: time is the handler's
//! `now`, and every periodic check runs on Zab's tick.
//!
//! Each follower, per window of `lambda-window` (1 s on servers as in the
//! thesis, 100 ms in the simulator):
//! * **λ**: proposals received from the leader over the window's length;
//!   θ = λ (§5.2.1, line 1733).
//! * **d**, the one-way leader→follower delay, without synchronised clocks
//!   (line 1735): the follower stamps an ACK to the leader with its own
//!   clock (`Msg::AckAt`, one stamp in flight at a time); the leader
//!   echoes the stamp on its next proposal to that follower with the time
//!   it held it (`Msg::ProposalEcho`); d = (now − stamp − held) / 2, the
//!   mean of the window's samples (the last window's d if none came).
//! * `coin::decide` with n = the followers not suspected (itself included)
//!   gives P1, P2 and p. A feasible p becomes the coin's; none (P1 > P2,
//!   λ = 0 included) is a vote for Zab (§4.3.3 (i)).
//!
//! Timer C_m (`timer-cm`, §4.3.3 (ii)): a proposal received while the
//! followers decide and not delivered within C_m is a vote for Zab too. A
//! follower votes back for ct-q after [`BACK_AFTER`] consecutive feasible
//! windows in which its suspicions did not change ("several consecutive
//! iterations and membership unchanged"). Votes travel on the existing
//! `Prot` path (`broadcast.rs`): one vote for Zab switches every follower,
//! all must vote back. A follower starts voting for Zab: before its first
//! window it has no p ("cannot find p").
//!
//! Timer D (`timer-d`, §4.2.3 F4): reset on each proposal; when it expires
//! with a logged proposal neither acked by us nor delivered, toss again for
//! the highest logged one and on Head broadcast its ACK. Checked each tick,
//! so it fires within a tick of D.
//!
//! A3 (line 1020), for every switching variant (ct, ct-q, aa-q): followers
//! heartbeat each other (`Msg::Beat`, each tick), and a follower suspects
//! another after `sync-limit` without a beat or an ACK from it (besides the
//! driver's `LinkEvent::Down`); a change of suspicion feeds the vote.

use super::coin::{Choice, Decision};
use super::measure::{AdaptConfig, Adaptive};
use super::msg::{LogEntry, Msg};
use super::node::{Role, ZabNode, O};
use super::roles::FStage;
use super::variant::Bcast;
use crate::protocol::contract::Command;
use crate::types::{NodeId, Peer, Time};
use std::collections::BTreeSet;

/// The coin's p as the adaptation last set it.
fn set_p(b: &mut Bcast, dec: &Decision) {
    if let Some(p) = dec.p {
        b.p = p;
    }
}

/// `msg` to `to`, carrying the stamp to echo to `to` if it is a proposal
/// and one is waiting.
fn echoed(a: &mut Adaptive, to: Peer, msg: Msg, now: Time) -> Msg {
    match (to, msg) {
        (Peer::Node(n), Msg::Proposal { epoch, entry }) => match a.take_echo(n, now) {
            Some((at, held)) => Msg::ProposalEcho {
                epoch,
                entry,
                at,
                held,
            },
            None => Msg::Proposal { epoch, entry },
        },
        (_, msg) => msg,
    }
}

impl ZabNode {
    /// Run the adaptive coin (ct-q only; other variants ignore it).
    pub fn with_adaptive(mut self, cfg: AdaptConfig) -> Self {
        if self.bcast.variant == super::variant::Variant::CtQ
            && !matches!(cfg.choice, Choice::Fixed(_))
        {
            self.bcast.adapt = Some(Adaptive::new(cfg));
        }
        self
    }

    /// The followers we suspect, the leader aside.
    fn suspects(&self, leader: NodeId) -> BTreeSet<NodeId> {
        let s = &self.bcast.suspected;
        s.iter().copied().filter(|&n| n != leader).collect()
    }

    /// A3 and the adaptive coin, each tick as a follower.
    pub(super) fn adaptive_tick(&mut self, out: &mut O) {
        let Role::Following(f) = &self.role else {
            return;
        };
        let synced = matches!(f.stage, FStage::Synced | FStage::Serving);
        let serving = f.stage == FStage::Serving;
        let (leader, epoch) = (f.leader, f.epoch);
        if !synced || !self.bcast.variant.switches() {
            return;
        }
        self.beat(leader, epoch, out);
        let now = self.now;
        let deciding = serving && self.deciding();
        let (replicas, commit) = (self.members.len(), self.commit);
        let suspects = self.suspects(leader);
        let n = (replicas - 1).saturating_sub(suspects.len());
        let Some(a) = self.bcast.adapt.as_mut() else {
            return;
        };
        if let Some(dec) = a.window(now, replicas, n, &suspects) {
            self.counters.coin_windows += 1;
            if dec.p.is_none() {
                self.counters.coin_infeasible += 1;
            }
            set_p(&mut self.bcast, &dec);
        }
        let a = self.bcast.adapt.as_mut().expect("adaptive");
        if !deciding {
            a.untimed();
        } else if a.cm_expired(commit, now) {
            self.counters.coin_cm_expiries += 1;
        }
        let due = a.d_due(now);
        if due && deciding {
            self.enforced_toss(leader, epoch, out);
        }
        // Every tick, not only when the wish changes: a follower starts out
        // wanting Zab (no p before its first window), and an idle cluster
        // sends no proposal whose handling would carry that first vote.
        // `maybe_vote` sends only what differs from the last vote.
        self.maybe_vote(out);
    }

    /// A3: beat to the other followers; suspect those silent for
    /// `sync-limit` (heard: their beats and ACKs, since we follow `epoch`).
    fn beat(&mut self, leader: NodeId, epoch: u64, out: &mut O) {
        let now = self.now;
        if self.bcast.beats_epoch != epoch {
            // A new leadership: everyone gets a full sync-limit.
            self.bcast.beats_epoch = epoch;
            self.bcast.heard.clear();
        }
        let others: Vec<NodeId> = self.peers().filter(|&n| n != leader).collect();
        let mut changed = false;
        for n in others {
            out.send_now(Peer::Node(n), Msg::Beat { epoch });
            let heard = *self.bcast.heard.entry(n).or_insert(now);
            if now > heard.saturating_add(self.cfg.sync_limit) {
                changed |= self.bcast.suspected.insert(n);
            }
        }
        if changed {
            self.maybe_vote(out);
        }
    }

    /// A3: another follower is alive (a beat or an ACK of this epoch).
    pub(super) fn heard_peer(&mut self, from: NodeId, epoch: u64, out: &mut O) {
        let Role::Following(f) = &self.role else {
            return;
        };
        if f.leader == from || f.epoch != epoch || !self.bcast.variant.switches() {
            return;
        }
        if self.bcast.beats_epoch == epoch {
            self.bcast.heard.insert(from, self.now);
        }
        if self.bcast.suspected.remove(&from) {
            self.maybe_vote(out);
        }
    }

    /// F4 of §4.2.3: timer D expired; a logged proposal neither acked by
    /// us nor delivered gets a new toss, for the highest logged one.
    fn enforced_toss(&mut self, leader: NodeId, epoch: u64, out: &mut O) {
        let index = self.logged.min(self.log.last());
        if self.bcast.gen != self.log_gen || index <= self.commit || index <= self.bcast.sent_upto {
            return;
        }
        self.counters.coin_d_retosses += 1;
        self.counters.coin_tosses += 1;
        let p = self.bcast.p;
        if !self.bcast.rng.chance(p) {
            return;
        }
        self.counters.coin_heads += 1;
        self.send_ack(leader, epoch, index, true, out);
    }

    /// As a follower: a stamped ACK if the adaptive coin wants a d sample.
    pub(super) fn ack_msg(&mut self, epoch: u64, index: u64) -> Msg {
        let now = self.now;
        match self.bcast.adapt.as_mut().and_then(|a| a.stamp(now)) {
            Some(at) => Msg::AckAt { epoch, index, at },
            None => Msg::Ack { epoch, index },
        }
    }

    /// `AckAt`: as the leader keep the stamp for the echo; then an ACK.
    pub(super) fn on_ack_at(&mut self, from: NodeId, epoch: u64, index: u64, at: u64, out: &mut O) {
        let now = self.now;
        if let (Role::Leading(_), Some(a)) = (&self.role, self.bcast.adapt.as_mut()) {
            a.stamped(from, at, now);
        }
        self.on_any_ack(from, epoch, index, out);
    }

    /// `ProposalEcho`: a d sample from our leader, then the proposal.
    pub(super) fn on_proposal_echo(
        &mut self,
        from: NodeId,
        epoch: u64,
        entry: LogEntry,
        (at, held): (u64, u64),
        out: &mut O,
    ) {
        let now = self.now;
        let ours = matches!(&self.role, Role::Following(f) if f.leader == from && f.epoch == epoch);
        if let (true, Some(a)) = (ours, self.bcast.adapt.as_mut()) {
            a.on_echo(at, held, now);
        }
        self.on_proposal_seen(from, epoch, entry, out);
    }

    /// A proposal (F1): logged by `on_proposal`; counted for λ, C_m and
    /// timer D once accepted.
    pub(super) fn on_proposal_seen(&mut self, from: NodeId, epoch: u64, e: LogEntry, out: &mut O) {
        let before = self.log.last();
        let index = e.index;
        self.on_proposal(from, epoch, e, out);
        if self.log.last() != index || before >= index {
            return;
        }
        let timed = self.deciding()
            && matches!(&self.role, Role::Following(f) if f.stage == FStage::Serving);
        let now = self.now;
        if let Some(a) = self.bcast.adapt.as_mut() {
            a.on_proposal(index, now, timed);
        }
    }

    /// As the leader, after a handler: the proposals it sent to followers
    /// with a stamp waiting carry the echo (`ProposalEcho`), in place.
    pub(super) fn echo_stamps(&mut self, out: &mut O) {
        let waiting = matches!(&self.role, Role::Leading(_))
            && self
                .bcast
                .adapt
                .as_ref()
                .is_some_and(|a| !a.echo.is_empty());
        // Every handler of every Zab server comes here: leave at once
        // unless an adaptive leader has a stamp to echo.
        if !waiting {
            return;
        }
        let proposes = out.commands().iter().any(|c| {
            matches!(
                c,
                Command::Send {
                    msg: Msg::Proposal { .. },
                    ..
                } | Command::SendNow {
                    msg: Msg::Proposal { .. },
                    ..
                }
            )
        });
        if !proposes {
            return;
        }
        let now = self.now;
        let a = self.bcast.adapt.as_mut().expect("adaptive");
        let cmds: Vec<_> = out.drain().collect();
        for c in cmds {
            out.push(match c {
                Command::Send { to, msg } => Command::Send {
                    to,
                    msg: echoed(a, to, msg, now),
                },
                Command::SendNow { to, msg } => Command::SendNow {
                    to,
                    msg: echoed(a, to, msg, now),
                },
                c => c,
            });
        }
    }

    /// The adaptive coin's gauges and counters (INFO, /metrics).
    pub(super) fn adaptive_metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        let c = &self.counters;
        let a = self.bcast.adapt.as_ref();
        let permille = |x: f64| (x.clamp(0.0, 1.0) * 1000.0).round() as u64;
        vec![
            (
                "zab_coin_lambda",
                "adaptive ct-q: proposals per second the last window measured (lambda = theta)",
                a.map_or(0, |a| a.lambda.round() as u64),
            ),
            (
                "zab_coin_d_us",
                "adaptive ct-q: one-way leader-to-follower delay d from echoed ACK stamps, microseconds",
                a.map_or(0, |a| a.d_us),
            ),
            (
                "zab_coin_p1_permille",
                "adaptive ct-q: P1 (Algorithm 1) of the last window, thousandths (1000: none)",
                a.map_or(0, |a| permille(a.p1)),
            ),
            (
                "zab_coin_p2_permille",
                "adaptive ct-q: P2 (eq. 4.2) of the last window, thousandths",
                a.map_or(0, |a| permille(a.p2)),
            ),
            (
                "zab_coin_windows",
                "adaptive ct-q: measurement windows closed",
                c.coin_windows,
            ),
            (
                "zab_coin_infeasible",
                "adaptive ct-q: windows with no feasible p (P1 > P2): votes for Zab",
                c.coin_infeasible,
            ),
            (
                "zab_coin_cm_expiries",
                "adaptive ct-q: proposals not delivered within timer C_m: votes for Zab",
                c.coin_cm_expiries,
            ),
            (
                "zab_coin_d_retosses",
                "adaptive ct-q: enforced tosses on timer D (section 4.2.3 F4)",
                c.coin_d_retosses,
            ),
        ]
    }

    /// For `status()`: the adaptive coin in one word.
    pub(super) fn adaptive_status(&self) -> Option<String> {
        let a = self.bcast.adapt.as_ref()?;
        let c = &self.counters;
        Some(format!(
            "coin=p:{:.3},win:{},inf:{},cm:{},dre:{},lambda:{:.0},d_us:{},zab:{},sw:{}",
            self.bcast.p,
            c.coin_windows,
            c.coin_infeasible,
            c.coin_cm_expiries,
            c.coin_d_retosses,
            a.lambda,
            a.d_us,
            a.want_zab,
            c.switches
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::coin::{self, Measured};
    use super::super::measure::BACK_AFTER;
    use super::super::node::Config;
    use super::super::testing::{at as deliver, ct_q_three, put, sent, settled_three, Cluster};
    use super::super::variant::Variant;
    use super::*;
    use crate::protocol::contract::Protocol;
    use crate::types::Time;
    use std::time::Duration;

    const MS: u64 = 1000;

    fn at(us: u64) -> Time {
        Time::from_micros(us)
    }

    fn cfg(window_ms: u64) -> AdaptConfig {
        AdaptConfig {
            window: Duration::from_millis(window_ms),
            ..AdaptConfig::default()
        }
    }

    /// The thesis' load (Table F.1, N = 3, WR 10 %): λ = 2094/s, d = 13 ms.
    fn thesis_window(a: &mut Adaptive, start: u64, suspects: &BTreeSet<NodeId>) -> Decision {
        for k in 0..2094 {
            a.on_proposal(k, at(start + k * 477), false);
        }
        a.on_echo(start, 0, at(start + 26 * MS));
        a.window(at(start + 1_000 * MS), 3, 2, suspects)
            .expect("closed")
    }

    #[test]
    fn a_window_measures_lambda_and_d_and_decides_with_coin() {
        let mut a = Adaptive::new(cfg(100));
        let none = BTreeSet::new();
        assert!(a.window(at(5 * MS), 3, 2, &none).is_none(), "begins");
        for k in 0..40 {
            a.on_proposal(k + 1, at(5 * MS + k * 2 * MS), false);
        }
        a.on_echo(10 * MS, 0, at(14 * MS)); // d 2 ms
        a.on_echo(20 * MS, MS, at(27 * MS)); // d 3 ms
        assert!(a.window(at(104 * MS), 3, 2, &none).is_none(), "still open");
        let dec = a.window(at(105 * MS), 3, 2, &none).expect("closed");
        assert_eq!((a.lambda, a.d_us), (400.0, 2500));
        let m = Measured {
            lambda: 400.0,
            theta: 400.0,
            d: 0.0025,
        };
        assert_eq!(dec, coin::decide(m, 3, 2, 0.02, Choice::Upper));
        // P2 = 0.5 − δ at N = 3 (Table 5.2); R1: d·λ = 1 > W(0.499).
        assert!(
            (dec.p2 - 0.499).abs() < 1e-9 && dec.p == Some(dec.p2),
            "{dec:?}"
        );
        // A window without samples keeps the last d; without proposals λ = 0.
        let dec = a.window(at(205 * MS), 3, 2, &none).expect("closed");
        assert_eq!((a.lambda, a.d_us), (0.0, 2500));
        assert_eq!(dec.p, None, "no abcasts: no p");
    }

    /// d without synchronised clocks: the leader's clock is far off, only
    /// the time it held the stamp travels; one stamp in flight at a time.
    #[test]
    fn d_is_half_the_round_trip_less_the_leaders_hold() {
        let mut f = Adaptive::new(cfg(100));
        let mut l = Adaptive::new(cfg(100));
        let s = f.stamp(at(7 * MS)).expect("first stamp");
        assert_eq!(f.stamp(at(8 * MS)), None, "one in flight");
        // Leader's clock: 5 s ahead. The ACK takes 3 ms, it holds 4 ms.
        l.stamped(2, s, at(5_010 * MS));
        assert_eq!(l.take_echo(3, at(5_014 * MS)), None);
        let (echo, held) = l.take_echo(2, at(5_014 * MS)).expect("echo");
        assert_eq!((echo, held), (s, 4 * MS));
        assert_eq!(l.take_echo(2, at(5_015 * MS)), None, "echoed once");
        // The proposal takes 3 ms back: RTT 10 ms, held 4, d = 3 ms.
        f.on_echo(echo, held, at(17 * MS));
        assert!(f.stamp(at(18 * MS)).is_some(), "free again");
        f.window(at(0), 3, 2, &BTreeSet::new());
        let _ = f.window(at(100 * MS), 3, 2, &BTreeSet::new());
        assert_eq!(f.d_us, 3 * MS);
        // A stamp lost with a connection is replaced after a window.
        let mut g = Adaptive::new(cfg(100));
        assert!(g.stamp(at(0)).is_some());
        assert!(g.stamp(at(99 * MS)).is_none());
        assert!(g.stamp(at(100 * MS)).is_some());
    }

    /// Votes: Zab at start (no p yet) and on an infeasible window; back
    /// after `BACK_AFTER` feasible windows in a row with suspicions stable,
    /// a change restarting the count; C_m expiry is a vote for Zab.
    #[test]
    fn votes_zab_when_infeasible_and_back_after_three_stable_feasible_windows() {
        let mut a = Adaptive::new(cfg(1000));
        let none = BTreeSet::new();
        assert!(a.want_zab, "no p before the first window");
        a.window(at(1_000 * MS), 3, 2, &none);
        for w in 1..BACK_AFTER as u64 {
            assert!(thesis_window(&mut a, w * 1_000 * MS, &none).p.is_some());
            assert!(a.want_zab, "window {w}");
        }
        let dec = thesis_window(&mut a, 3_000 * MS, &none);
        assert!(!a.want_zab && (dec.p.unwrap() - 0.499).abs() < 1e-9);
        assert!((a.p1 - 0.018).abs() < 1e-9, "Table F.1's P1: {}", a.p1);
        // Idle: λ = 0, no p.
        a.window(at(5_000 * MS), 3, 2, &none).expect("closed");
        assert!(a.want_zab);
        // Feasible again, but the suspicions change in the middle.
        let one: BTreeSet<NodeId> = [3].into();
        thesis_window(&mut a, 5_000 * MS, &none);
        thesis_window(&mut a, 6_000 * MS, &none);
        thesis_window(&mut a, 7_000 * MS, &one);
        thesis_window(&mut a, 8_000 * MS, &one);
        assert!(a.want_zab, "the count restarted");
        thesis_window(&mut a, 9_000 * MS, &one);
        thesis_window(&mut a, 10_000 * MS, &one);
        assert!(!a.want_zab);
        // C_m: proposal 7 arrives at 11 s, not delivered by 11.1 s.
        a.on_proposal(6, at(11_000 * MS), true);
        a.on_proposal(7, at(11_010 * MS), true);
        assert!(!a.cm_expired(6, at(11_109 * MS)), "6 delivered, 7 young");
        assert!(!a.want_zab);
        assert!(a.cm_expired(6, at(11_110 * MS)));
        assert!(a.want_zab && !a.cm_expired(6, at(11_300 * MS)), "once");
    }

    #[test]
    fn timer_d_expires_d_after_the_last_proposal() {
        let mut a = Adaptive::new(cfg(100));
        a.on_proposal(1, at(50 * MS), false);
        assert!(!a.d_due(at(69 * MS)));
        assert!(a.d_due(at(70 * MS)));
        assert!(!a.d_due(at(89 * MS)), "reset when it fires");
        assert!(a.d_due(at(90 * MS)));
    }

    /// An adaptive ct-q cluster of three (every server runs the coin).
    fn adaptive_three(c: AdaptConfig) -> (Cluster, NodeId, NodeId, NodeId) {
        let mut cl = Cluster::running(3, Config::default(), (Variant::CtQ, 0.5, true));
        for n in cl.nodes.iter_mut().flatten() {
            n.bcast.adapt = Some(Adaptive::new(c));
        }
        settled_three(cl)
    }

    /// `adaptive_three` running ct-q: every follower wants the variant,
    /// and a first write carries their votes back (the leader leaves Zab).
    fn deciding_three(c: AdaptConfig) -> (Cluster, NodeId, NodeId, NodeId) {
        let (mut cl, l, f1, f2) = adaptive_three(c);
        for n in cl.nodes.iter_mut().flatten() {
            n.bcast.adapt.as_mut().expect("adaptive").want_zab = false;
        }
        assert!(cl.ask(f1, put("k", "v0")).is_some());
        assert!(!cl.node(l).bcast.zab_mode && !cl.node(f1).bcast.zab_mode);
        (cl, l, f1, f2)
    }

    /// In the protocol: an idle cluster has no λ, so its followers vote
    /// for Zab through `Prot` and the leader switches; writes still
    /// complete (Zab's COMMIT), and the counters show in the metrics.
    #[test]
    fn an_idle_cluster_votes_for_zab_and_keeps_delivering() {
        let (mut c, l, f1, _) = adaptive_three(cfg(100));
        for _ in 0..12 {
            c.tick();
        }
        assert!(c.node(l).bcast.zab_mode && c.node(f1).bcast.zab_mode);
        assert!(c.node(f1).counters.coin_infeasible >= 1);
        for i in 0..5 {
            assert!(c.ask(f1, put("k", &i.to_string())).is_some(), "write {i}");
        }
        let m = c.node(f1).metrics();
        let get = |k: &str| m.iter().find(|x| x.0 == k).map(|x| x.2);
        assert!(get("zab_coin_windows").unwrap() >= 1);
        assert_eq!(
            get("zab_coin_infeasible"),
            Some(c.node(f1).counters.coin_infeasible)
        );
        assert_eq!(get("zab_coin_p1_permille"), Some(1000));
        assert!(c.node(f1).status().contains("coin=p:"));
    }

    /// The stamps travel: a follower's stamped ACK comes back on the
    /// leader's next proposal to it, and the follower counts a sample.
    #[test]
    fn stamped_acks_are_echoed_on_the_next_proposal() {
        let (mut c, l, f1, _) = adaptive_three(cfg(100));
        for i in 0..3 {
            assert!(c.ask(l, put("k", &i.to_string())).is_some());
        }
        let a = c.node(f1).bcast.adapt.as_ref().expect("adaptive");
        assert!(a.d_samples >= 1, "{a:?}");
        // The in-memory cluster delivers at once: d = 0 there.
        assert_eq!(a.d_sum, 0);
    }

    /// F4 of §4.2.3: tails on every toss leave our log unacked; once D
    /// passes without a proposal the follower tosses again (here Head:
    /// p = 1) and broadcasts the ACK of its highest logged proposal.
    #[test]
    fn timer_d_tosses_again_for_what_is_left_unacked() {
        let slow = AdaptConfig {
            window: Duration::from_secs(3600),
            ..AdaptConfig::default()
        };
        let (mut c, _, f1, f2) = deciding_three(slow);
        for n in c.nodes.iter_mut().flatten() {
            n.bcast.p = 1e-9;
        }
        let client = c.send(f1, put("k", "v"));
        c.run();
        assert!(
            c.replies.iter().all(|r| r.1 != client),
            "tails: undelivered"
        );
        let before = c.node(f1).counters.coin_d_retosses;
        for f in [f1, f2] {
            c.nodes[f as usize - 1].as_mut().expect("up").bcast.p = 1.0;
        }
        // Timer D (20 ms) expires at the second tick after the proposal.
        let cmds = c.exec(f1, |n, now, out| {
            n.on_timer(
                now.saturating_add(Duration::from_millis(20)),
                super::super::Timer::Tick,
                out,
            )
        });
        let acks: Vec<Peer> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::SendNow {
                    to,
                    msg: Msg::Ack { .. } | Msg::AckAt { .. },
                } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(
            acks.len(),
            2,
            "to the leader and the other follower: {cmds:?}"
        );
        assert_eq!(c.node(f1).counters.coin_d_retosses, before + 1);
    }

    /// The ct-q cluster of three with a fixed p (no adaptation; A3 and the
    /// switch on suspicion still run), its leader and followers.
    fn fixed_three() -> (Cluster, NodeId, NodeId, NodeId) {
        let (mut cl, l, f1, f2) = ct_q_three();
        for _ in 0..3 {
            cl.tick();
        }
        (cl, l, f1, f2)
    }

    /// A3 (line 1020): a follower that falls silent (paused, its links up)
    /// is suspected by the other once `sync-limit` (8 ticks) passes without
    /// its beats, not a tick before; the other then votes for Zab and the
    /// leader switches (ct-q leaves its fast path on any follower crash,
    /// §4.4.2). Writes complete meanwhile; the first beat after the pause
    /// clears the suspicion and the cluster goes back to ct-q.
    #[test]
    fn a_silent_follower_is_suspected_after_sync_limit_and_cleared_by_its_beat() {
        let (mut c, l, f1, f2) = fixed_three();
        assert!(!c.node(l).bcast.zab_mode, "fixed p runs the variant");
        c.pause(f2);
        for _ in 0..8 {
            c.tick();
        }
        assert!(c.node(f1).bcast.suspected.is_empty(), "within sync-limit");
        assert!(!c.node(l).bcast.zab_mode);
        c.tick();
        assert_eq!(c.node(f1).bcast.suspected, BTreeSet::from([f2]));
        assert!(c.node(l).bcast.zab_mode, "f1's vote switched the leader");
        assert!(c.ask(f1, put("k", "v")).is_some(), "Zab's COMMIT delivers");
        c.resume(f2);
        for _ in 0..2 {
            c.tick();
        }
        assert!(c.node(f1).bcast.suspected.is_empty());
        assert!(!c.node(l).bcast.zab_mode, "back to ct-q");
        assert!(c.node(f1).bcast.heard.contains_key(&f2));
        assert!(
            !c.node(f1).bcast.heard.contains_key(&l),
            "no beats with the leader"
        );
    }

    /// A beat of an older epoch (delayed across an election) says nothing
    /// about the follower now: the suspicion stays.
    #[test]
    fn a_beat_of_an_older_epoch_clears_no_suspicion() {
        let (mut c, _, f1, f2) = fixed_three();
        c.pause(f2);
        for _ in 0..9 {
            c.tick();
        }
        assert!(c.node(f1).bcast.suspected.contains(&f2));
        let epoch = c.node(f1).current_epoch;
        deliver(&mut c, f1, f2, Msg::Beat { epoch: epoch - 1 });
        assert!(c.node(f1).bcast.suspected.contains(&f2), "old beat");
        deliver(&mut c, f1, f2, Msg::Beat { epoch });
        assert!(
            c.node(f1).bcast.suspected.is_empty(),
            "a beat of this epoch"
        );
    }

    /// Variants that never switch (here `aa`) send no beats: A3 is only
    /// needed where a suspicion changes the broadcast.
    #[test]
    fn followers_of_a_variant_that_never_switches_send_no_beats() {
        let mut c = Cluster::running(3, Config::default(), (Variant::Aa, 0.5, true));
        let l = c.settle();
        let f = (1..=3).find(|&n| n != l).expect("a follower");
        let later = c.now.saturating_add(Duration::from_millis(10));
        let cmds = c.exec(f, |n, _, out| {
            n.on_timer(later, super::super::Timer::Tick, out)
        });
        let beats = sent(&cmds)
            .into_iter()
            .filter(|(_, m)| matches!(m, Msg::Beat { .. }))
            .count();
        assert_eq!(beats, 0, "{cmds:?}");
    }

    /// The adaptation runs for ct-q with an adaptive choice of p only: a
    /// fixed p, or another variant, carries no measurements.
    #[test]
    fn only_ct_q_with_an_adaptive_p_adapts() {
        let node = |v, choice| {
            ZabNode::new(1, &[1, 2, 3], 1, Config::default())
                .with_broadcast(v, 0.5, 1)
                .with_adaptive(AdaptConfig {
                    choice,
                    ..AdaptConfig::default()
                })
        };
        assert!(node(Variant::CtQ, Choice::Upper).bcast.adapt.is_some());
        assert!(node(Variant::CtQ, Choice::Fixed(0.5)).bcast.adapt.is_none());
        assert!(node(Variant::Ct, Choice::Upper).bcast.adapt.is_none());
    }

    /// Timer C_m (§4.3.2): a proposal a deciding follower logged and has
    /// not delivered when C_m runs out is a vote for Zab; the leader
    /// switches and the write still completes.
    #[test]
    fn a_proposal_undelivered_for_c_m_is_a_vote_for_zab() {
        let quick = AdaptConfig {
            window: Duration::from_secs(3600),
            timer_cm: Duration::from_millis(1),
            ..AdaptConfig::default()
        };
        let (mut c, l, f1, f2) = deciding_three(quick);
        assert_eq!(c.node(f1).counters.coin_cm_expiries, 0, "delivered in time");
        // Tails everywhere: nobody ACKs, the proposal waits for the
        // heartbeat past C_m.
        for f in [f1, f2] {
            c.nodes[f as usize - 1].as_mut().expect("up").bcast.p = 1e-9;
        }
        let client = c.send(f1, put("k", "v1"));
        c.run();
        assert!(c.replies.iter().all(|r| r.1 != client), "undelivered");
        c.tick();
        assert!(c.node(f1).counters.coin_cm_expiries >= 1);
        assert!(c.node(f1).bcast.adapt.as_ref().expect("adaptive").want_zab);
        for _ in 0..3 {
            c.tick();
        }
        assert!(c.node(l).bcast.zab_mode);
        assert!(c.replies.iter().any(|r| r.1 == client), "delivered");
        // In Zab's broadcast nothing is timed.
        assert!(c.ask(f1, put("k", "v2")).is_some());
        let a = c.node(f1).bcast.adapt.as_ref().expect("adaptive");
        assert!(a.pending.is_empty(), "{a:?}");
    }

    /// Timer D re-tosses only for a proposal neither ACKed by us nor
    /// delivered: one the other follower's Head delivered needs no toss.
    #[test]
    fn timer_d_leaves_a_delivered_proposal_alone() {
        let slow = AdaptConfig {
            window: Duration::from_secs(3600),
            ..AdaptConfig::default()
        };
        let (mut c, _, f1, f2) = deciding_three(slow);
        c.nodes[f1 as usize - 1].as_mut().expect("up").bcast.p = 1e-9;
        c.nodes[f2 as usize - 1].as_mut().expect("up").bcast.p = 1.0;
        // f1 tosses Tail; f2's Head ACK and f1's own log deliver at f1.
        assert!(c.ask(f1, put("k", "v1")).is_some());
        let before = c.node(f1).counters.coin_d_retosses;
        let later = c.now.saturating_add(Duration::from_millis(20));
        c.exec(f1, |n, _, out| {
            n.on_timer(later, super::super::Timer::Tick, out)
        });
        assert_eq!(c.node(f1).counters.coin_d_retosses, before);
    }

    /// A proposal seen twice (a resend) counts once toward λ.
    #[test]
    fn a_proposal_seen_again_is_counted_once() {
        let (mut c, l, f1, _) = adaptive_three(cfg(3_600_000));
        assert!(c.ask(f1, put("k", "v")).is_some());
        let epoch = c.node(f1).current_epoch;
        let count = |c: &Cluster| c.node(f1).bcast.adapt.as_ref().expect("adaptive").proposals;
        let before = count(&c);
        let last = c.node(f1).log.last();
        let entry = LogEntry {
            index: last,
            epoch: c.node(f1).log.epoch_at(last).expect("logged"),
            data: c.node(f1).log.get(last).expect("logged").clone(),
        };
        c.exec(f1, |n, _, out| n.on_proposal_seen(l, epoch, entry, out));
        assert_eq!(count(&c), before);
    }
}
