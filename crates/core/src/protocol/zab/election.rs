//! Fast leader election (seed 003 §2.2.1 "Discovery Phase", lines
//! 614-635): LOOKING servers exchange votes `(current epoch, last zxid,
//! sid)` in numbered rounds, adopt any better vote, and decide once a
//! quorum agrees with theirs (after a short wait for better ones).

use super::bugs::InjectedBug;
use super::msg::{Msg, PeerState, Timer, Vote};
use super::node::{Role, ZabNode, O};
use super::roles::{FStage, Following, Leading};
use crate::types::{NodeId, Peer};

impl ZabNode {
    /// This server's own candidacy (none while recovering: its log is empty
    /// for having lost it, not for being behind).
    pub(super) fn own_vote(&self) -> Option<Vote> {
        // A learner (outside every configuration in effect) never runs.
        (!self.recovering && self.voter()).then(|| Vote {
            leader: self.id,
            cur_epoch: self.current_epoch,
            last: self.log.last_zxid(),
        })
    }

    /// Whether `a` beats `b` (ZooKeeper's total order predicate).
    pub(super) fn beats(&self, a: &Vote, b: &Vote) -> bool {
        if self.has_bug(InjectedBug::StaleLogLeader) {
            return a.leader > b.leader;
        }
        a.key() > b.key()
    }

    /// Leading an established epoch, or following one (synchronised).
    fn in_broadcast(&self) -> bool {
        match &self.role {
            Role::Leading(l) => l.established,
            Role::Following(f) => matches!(f.stage, FStage::Synced | FStage::Serving),
            Role::Looking => false,
        }
    }

    /// Leading, not established yet (discovery, synchronisation).
    fn candidate(&self) -> bool {
        matches!(&self.role, Role::Leading(l) if !l.established)
    }

    /// Whether a history `(cur_epoch, last)` is at least ours.
    fn not_behind(&self, v: &Vote) -> bool {
        match self.own_vote() {
            Some(me) => self.not_behind_of(v, &me),
            None => true,
        }
    }

    fn not_behind_of(&self, a: &Vote, b: &Vote) -> bool {
        self.has_bug(InjectedBug::StaleLogLeader) || (a.cur_epoch, a.last) >= (b.cur_epoch, b.last)
    }

    /// The better of two votes. A vote for a server that does not run is
    /// no vote: ourselves when we are a learner (outside every
    /// configuration in effect here), or a looking server whose own vote
    /// in this round is for another (`Election::declined`). Otherwise a
    /// learner holding the newest history would gather every vote and
    /// never lead. (ZooKeeper's FLE drops candidates that are not voting
    /// members in its view; views differ while a reconfiguration is
    /// pending, so a server's own word decides here.)
    fn best(&self, a: Option<Vote>, b: Option<Vote>) -> Option<Vote> {
        let runs = |v: &Vote| {
            let me = v.leader == self.id;
            (!me || self.voter()) && (me || !self.election.declined.contains(&v.leader))
        };
        let (a, b) = (a.filter(runs), b.filter(runs));
        match (a, b) {
            (Some(x), Some(y)) => Some(if self.beats(&y, &x) { y } else { x }),
            (x, y) => x.or(y),
        }
    }

    pub(super) fn notification(&self) -> Msg {
        let (vote, state) = match &self.role {
            Role::Looking => (self.election.vote, PeerState::Looking),
            Role::Following(f) => (Some(self.vote_for(f.leader)), PeerState::Following),
            Role::Leading(_) => (Some(self.vote_for(self.id)), PeerState::Leading),
        };
        Msg::Notify {
            round: self.election.round,
            vote,
            state,
            recovering: self.recovering,
            led: self.bcast.led,
        }
    }

    fn vote_for(&self, leader: NodeId) -> Vote {
        Vote {
            leader,
            cur_epoch: self.current_epoch,
            last: self.log.last_zxid(),
        }
    }

    /// Enter LOOKING: a new round, voting for ourselves.
    pub(super) fn look(&mut self, out: &mut O) {
        if matches!(self.role, Role::Leading(_)) {
            self.counters.step_downs += 1;
        }
        self.abandon(out);
        self.role = Role::Looking;
        self.counters.elections += 1;
        self.election.round += 1;
        self.election.vote = self.own_vote();
        self.election.received.clear();
        self.election.followers.clear();
        self.election.declined.clear();
        self.record_own_vote();
        self.broadcast_notification(out);
        self.check_election(out);
    }

    fn broadcast_notification(&self, out: &mut O) {
        let n = self.notification();
        for p in self.peers() {
            out.send(Peer::Node(p), n.clone());
        }
    }

    pub(super) fn election_tick(&mut self, out: &mut O) {
        self.broadcast_notification(out);
    }

    pub(super) fn on_notify(
        &mut self,
        from: NodeId,
        round: u64,
        vote: Option<Vote>,
        state: PeerState,
        recovering: bool,
        out: &mut O,
    ) {
        if !matches!(self.role, Role::Looking) {
            return self.notified_when_decided(from, vote, state, out);
        }
        match state {
            // Join a leader unless our history is newer (it would only
            // abdicate when it sees ours).
            PeerState::Leading => {
                if vote.is_some_and(|v| self.not_behind(&v)) {
                    self.follow(from, out);
                }
            }
            PeerState::Following => match vote {
                // It follows us, who still look (the others decided
                // first): with a quorum of them we lead.
                Some(v) if v.leader == self.id => {
                    let mine = self.own_vote();
                    if !recovering && mine.is_some_and(|me| self.not_behind_of(&me, &v)) {
                        self.followed_by(from, out);
                    }
                }
                // Ask its leader directly; it answers if it leads.
                Some(v) => out.send(Peer::Node(v.leader), self.notification()),
                None => {}
            },
            PeerState::Looking => self.count_vote(from, round, vote, recovering, out),
        }
    }

    /// A notification while we follow or lead.
    fn notified_when_decided(
        &mut self,
        from: NodeId,
        vote: Option<Vote>,
        state: PeerState,
        out: &mut O,
    ) {
        if let Role::Following(f) = &self.role {
            // Our leader left, or leads an epoch we are not in.
            let other_epoch = vote.is_none_or(|v| v.cur_epoch != f.epoch);
            let broadcasting = matches!(f.stage, FStage::Synced | FStage::Serving);
            let not_leading = state != PeerState::Leading;
            // A candidate that still looks but runs (votes for itself) may
            // not have its quorum yet: its quorums can be stricter than
            // ours while a reconfiguration is pending. We wait for it (up
            // to `init-limit`, FOLLOWERINFO each tick) rather than start a
            // new round, which would restart everyone's election. Only
            // once our log names a configuration: views never differ before.
            let runs = state == PeerState::Looking && vote.is_some_and(|v| v.leader == from);
            let reconfigured = self.log.all_members().next().is_some();
            let waiting = reconfigured && f.stage == FStage::Info && runs;
            if f.leader == from && !waiting && (not_leading || (broadcasting && other_epoch)) {
                return self.look(out);
            }
            // Still joining someone, and an established newer leader calls.
            let newer =
                vote.is_some_and(|v| v.cur_epoch > self.current_epoch && self.not_behind(&v));
            if f.leader != from && !broadcasting && state == PeerState::Leading && newer {
                return self.follow(from, out);
            }
        }
        let theirs = vote.map_or(0, |v| v.cur_epoch);
        if state == PeerState::Looking {
            // Tell a looking server who leads.
            out.send(Peer::Node(from), self.notification());
        } else if theirs > self.current_epoch && (self.in_broadcast() || self.candidate()) {
            // A newer epoch exists: our leadership (or our leader's)
            // is over.
            self.look(out);
        } else if state == PeerState::Leading && theirs < self.current_epoch {
            // A stale leader announcing itself: let it learn.
            out.send(Peer::Node(from), self.notification());
        }
    }

    /// A looking server's vote, while we look too.
    fn count_vote(
        &mut self,
        from: NodeId,
        round: u64,
        vote: Option<Vote>,
        recovering: bool,
        out: &mut O,
    ) {
        if round > self.election.round {
            self.election.round = round;
            self.election.received.clear();
            self.election.declined.clear();
            self.note_declined(from, vote);
            self.election.vote = self.best(self.own_vote(), vote);
            self.record_own_vote();
            self.broadcast_notification(out);
        } else if round < self.election.round {
            out.send(Peer::Node(from), self.notification());
            return;
        } else if self.note_declined(from, vote) {
            // Our vote was for `from`, which does not run: the best left.
            let all: Vec<Vote> = self.election.received.values().copied().collect();
            let mut best = self.own_vote();
            for v in all.into_iter().chain(vote) {
                best = self.best(best, Some(v));
            }
            self.election.vote = best;
            self.record_own_vote();
            self.broadcast_notification(out);
        } else if self.best(self.election.vote, vote) != self.election.vote {
            self.election.vote = self.best(self.election.vote, vote);
            self.record_own_vote();
            self.broadcast_notification(out);
        }
        match vote {
            Some(v) if !recovering => {
                self.election.received.insert(from, v);
            }
            _ => {
                self.election.received.remove(&from);
            }
        }
        self.check_election(out);
    }

    /// Note whether looking server `from` runs in this round (its vote is
    /// for itself); true if it stopped running while our vote was for it.
    fn note_declined(&mut self, from: NodeId, vote: Option<Vote>) -> bool {
        if vote.is_some_and(|v| v.leader == from) {
            self.election.declined.remove(&from);
            return false;
        }
        let ours = self.election.vote.is_some_and(|v| v.leader == from);
        self.election.declined.insert(from) && ours
    }

    /// `from` follows us while we look (a notification, a FOLLOWERINFO).
    pub(super) fn followed_by(&mut self, from: NodeId, out: &mut O) {
        if !matches!(self.role, Role::Looking) || self.recovering {
            return;
        }
        self.election.followers.insert(from);
        let (me, fs) = (self.id, &self.election.followers);
        if self.is_quorum(|n| n == me || fs.contains(&n)) {
            self.lead(out);
        }
    }

    fn record_own_vote(&mut self) {
        match (self.election.vote, self.recovering) {
            (Some(v), false) => self.election.received.insert(self.id, v),
            _ => self.election.received.remove(&self.id),
        };
    }

    /// A quorum of non-recovering servers agrees with our vote: decide
    /// after a tick, unless a better vote comes meanwhile.
    fn check_election(&mut self, out: &mut O) {
        if self.agreed() && !self.election.armed {
            self.election.armed = true;
            out.set_timer(self.cfg.tick, Timer::Finalize);
        }
    }

    fn agreed(&self) -> bool {
        let Some(v) = self.election.vote else {
            return false;
        };
        let got = &self.election.received;
        self.is_quorum(|n| got.get(&n).is_some_and(|r| r.leader == v.leader))
    }

    pub(super) fn finalize(&mut self, out: &mut O) {
        self.election.armed = false;
        if !matches!(self.role, Role::Looking) || !self.agreed() {
            return;
        }
        let leader = self.election.vote.expect("agreed").leader;
        if leader == self.id {
            self.lead(out);
        } else {
            self.follow(leader, out);
        }
    }

    /// FOLLOWING `leader`: announce ourselves (FOLLOWERINFO, F1 of sync).
    /// Not while learning the epoch floor after losing our state.
    pub(super) fn follow(&mut self, leader: NodeId, out: &mut O) {
        if self.learning() {
            return;
        }
        self.abandon(out);
        self.role = Role::Following(Following {
            leader,
            stage: FStage::Info,
            epoch: 0,
            heard: self.now,
            since: self.now,
        });
        self.send_follower_info(out);
    }

    /// LEADING: a prospective leader gathering FOLLOWERINFO.
    pub(super) fn lead(&mut self, out: &mut O) {
        if !self.voter() {
            return; // a learner: it follows, never leads
        }
        self.abandon(out);
        self.counters.led += 1;
        self.role = Role::Leading(Leading::new(self.now));
        self.check_discovery(out);
    }
}
