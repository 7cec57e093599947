//! The adaptive coin's inputs as one server measures them (λ, d, timer
//! C_m and timer D) and the vote it wants; the algorithm, and how a server
//! uses them, is `adaptive.rs`.

use super::coin::{self, Choice, Decision, Measured};
use crate::types::{NodeId, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Feasible windows with unchanged suspicions before a vote back for ct-q.
pub const BACK_AFTER: u32 = 3;

/// The adaptive coin's settings (`--opt p=`, `lambda-window`, `timer-d`,
/// `timer-cm`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptConfig {
    pub choice: Choice,
    pub window: Duration,
    pub timer_d: Duration,
    pub timer_cm: Duration,
}

impl Default for AdaptConfig {
    fn default() -> Self {
        AdaptConfig {
            choice: Choice::Upper,
            window: Duration::from_secs(1),
            timer_d: Duration::from_millis(20),
            timer_cm: Duration::from_millis(100),
        }
    }
}

/// One follower's measurements and vote (and, at a leader, the stamps to
/// echo).
#[derive(Clone, Debug)]
pub struct Adaptive {
    pub cfg: AdaptConfig,
    /// The current window: its start (once `begun`), proposals seen, d
    /// samples (µs).
    pub(super) begun: bool,
    pub(super) start: Time,
    pub(super) proposals: u64,
    pub(super) d_sum: u64,
    pub(super) d_samples: u64,
    /// The last window's results.
    pub lambda: f64,
    pub d_us: u64,
    pub p1: f64,
    pub p2: f64,
    /// The vote this follower wants: Zab (no feasible p, C_m expired).
    pub want_zab: bool,
    /// Feasible windows in a row with the same suspicions.
    pub(super) streak: u32,
    pub(super) last_suspects: BTreeSet<NodeId>,
    /// As a follower: the stamp in flight, if any.
    pub(super) stamp_out: Option<u64>,
    /// As the leader: per follower, the last stamp and when it came.
    pub(super) echo: BTreeMap<NodeId, (u64, Time)>,
    /// C_m: proposals received while followers decide, not yet delivered.
    pub(super) pending: VecDeque<(u64, Time)>,
    /// Timer D's last reset.
    pub(super) d_reset: Time,
}

impl Adaptive {
    pub fn new(cfg: AdaptConfig) -> Adaptive {
        Adaptive {
            cfg,
            begun: false,
            start: Time::ZERO,
            proposals: 0,
            d_sum: 0,
            d_samples: 0,
            lambda: 0.0,
            d_us: 0,
            p1: 1.0,
            p2: 0.0,
            want_zab: true,
            streak: 0,
            last_suspects: BTreeSet::new(),
            stamp_out: None,
            echo: BTreeMap::new(),
            pending: VecDeque::new(),
            d_reset: Time::ZERO,
        }
    }

    /// F1: proposal `index` arrived at `now`; `timed` when the followers
    /// decide (C_m runs only then).
    pub fn on_proposal(&mut self, index: u64, now: Time, timed: bool) {
        self.proposals += 1;
        self.d_reset = now;
        if timed {
            self.pending.push_back((index, now));
        }
    }

    /// A stamp for the next ACK to the leader, if none is in flight (or
    /// the one in flight is older than a window: lost with a connection).
    pub fn stamp(&mut self, now: Time) -> Option<u64> {
        let at = now.as_micros();
        let fresh = self
            .stamp_out
            .is_some_and(|s| at.saturating_sub(s) < self.cfg.window.as_micros() as u64);
        if fresh {
            return None;
        }
        self.stamp_out = Some(at);
        Some(at)
    }

    /// The leader echoed stamp `at`, having held it `held` µs: one sample
    /// of d = (round trip − held) / 2, in this follower's clock only.
    pub fn on_echo(&mut self, at: u64, held: u64, now: Time) {
        if self.stamp_out == Some(at) {
            self.stamp_out = None;
        }
        let rtt = now.as_micros().saturating_sub(at).saturating_sub(held);
        // Saturating: `at` and `held` come from the message (issue 31).
        self.d_sum = self.d_sum.saturating_add(rtt / 2);
        self.d_samples = self.d_samples.saturating_add(1);
    }

    /// As the leader: a stamped ACK from `from` arrived at `now`.
    pub fn stamped(&mut self, from: NodeId, at: u64, now: Time) {
        self.echo.insert(from, (at, now));
    }

    /// As the leader: the echo for `to`'s next proposal, if a stamp waits.
    pub(super) fn take_echo(&mut self, to: NodeId, now: Time) -> Option<(u64, u64)> {
        let (at, got) = self.echo.remove(&to)?;
        Some((at, now.as_micros().saturating_sub(got.as_micros())))
    }

    /// Close the window if it is over: measure λ and d, decide p for
    /// `replicas` servers with `n` followers up, update the vote (with
    /// `suspects`, the followers suspected now). `None` while it runs.
    pub fn window(
        &mut self,
        now: Time,
        replicas: usize,
        n: usize,
        suspects: &BTreeSet<NodeId>,
    ) -> Option<Decision> {
        if !self.begun {
            (self.begun, self.start, self.proposals) = (true, now, 0);
            return None;
        }
        let len = now.as_micros().saturating_sub(self.start.as_micros());
        if len < self.cfg.window.as_micros() as u64 {
            return None;
        }
        self.lambda = self.proposals as f64 * 1e6 / len as f64;
        if let Some(d) = self.d_sum.checked_div(self.d_samples) {
            self.d_us = d;
        }
        (self.start, self.proposals, self.d_sum, self.d_samples) = (now, 0, 0, 0);
        let m = Measured {
            lambda: self.lambda,
            theta: self.lambda,
            d: self.d_us as f64 / 1e6,
        };
        let dec = coin::decide(
            m,
            replicas,
            n,
            self.cfg.timer_d.as_secs_f64(),
            self.cfg.choice,
        );
        (self.p1, self.p2) = (dec.p1, dec.p2);
        let stable = *suspects == self.last_suspects;
        self.last_suspects = suspects.clone();
        if dec.p.is_none() {
            self.want_zab = true;
            self.streak = 0;
        } else {
            self.streak = if stable { self.streak + 1 } else { 0 };
            if self.streak >= BACK_AFTER {
                self.want_zab = false;
            }
        }
        Some(dec)
    }

    /// C_m: forget what was delivered (up to `commit`); true (and a vote
    /// for Zab) when the oldest proposal left waited C_m.
    pub fn cm_expired(&mut self, commit: u64, now: Time) -> bool {
        while self.pending.front().is_some_and(|&(i, _)| i <= commit) {
            self.pending.pop_front();
        }
        let Some(&(_, t)) = self.pending.front() else {
            return false;
        };
        if now < t.saturating_add(self.cfg.timer_cm) {
            return false;
        }
        self.pending.clear();
        self.want_zab = true;
        self.streak = 0;
        true
    }

    /// Followers stopped deciding (Zab's broadcast, another leader):
    /// nothing to time.
    pub fn untimed(&mut self) {
        self.pending.clear();
    }

    /// Timer D: expired (and reset) at `now`?
    pub fn d_due(&mut self, now: Time) -> bool {
        if now < self.d_reset.saturating_add(self.cfg.timer_d) {
            return false;
        }
        self.d_reset = now;
        true
    }
}
