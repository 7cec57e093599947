//! The nemesis of a seed: partitions, crashes (between events or inside a
//! handler call), pauses and outages of more than f nodes, and the heal
//! that ends the fault phase.

use super::{Armed, Ev, World};
use crate::config::{Durability, Fault};
use crate::rng::derive;
use quorumkv_core::protocol::ProtocolDef;

/// With `--long-pauses`, one pause in this many is long: a stop-the-world
/// collection or a swapped-out process, longer than the failure
/// detectors' timeouts (Zab's `sync-limit`, 30 or 80 ms here), so the
/// others move on while the paused node still believes in its old role: a
/// replaced leader that serves reads as it resumes, before its own timers
/// tell it. Off by default: it moves every seed's schedule that pauses.
const LONG_PAUSE_ONE_IN: u64 = 6;
/// A long pause's length range, µs (before the time scale).
const LONG_PAUSE_US: (u64, u64) = (120_000, 300_000);
/// Stream label of the long-pause draws.
const LONG_PAUSE: u64 = 0x10_6e;

impl<D: ProtocolDef> World<'_, D> {
    /// One nemesis action, then schedule the next. Diverging seeds pick
    /// partitions twice as often; outages are rarer than the other actions.
    pub(super) fn nemesis(&mut self) {
        if self.healed {
            return;
        }
        let f = self.p.faults;
        let mut actions = Vec::with_capacity(6);
        for a in [
            Fault::Partition,
            Fault::Crash,
            Fault::Pause,
            Fault::Outage,
            Fault::Reconfig,
        ] {
            if f.has(a) {
                actions.push(a);
            }
        }
        if f.has(Fault::Partition) && self.p.diverge {
            actions.push(Fault::Partition);
        }
        if actions.is_empty() {
            return;
        }
        match self.nemesis_rng.pick(&actions) {
            Fault::Partition if !self.partition_active => self.form_partition(),
            Fault::Crash => self.nemesis_crash(),
            Fault::Pause => self.nemesis_pause(),
            Fault::Outage if self.nemesis_rng.chance(0.3) => self.outage(),
            Fault::Reconfig => self.nemesis_reconfig(),
            _ => {}
        }
        let gap = self.p.nemesis_gap_us;
        let next = self.now + self.nemesis_rng.range(gap / 2, gap * 3 / 2);
        self.schedule(next, Ev::Nemesis);
    }

    /// Where nodes forget (memory mode, or a protocol that persists
    /// nothing), never more than the protocol's `max_crashed(N)` nodes down
    /// at once (ABD: f, so quorums stay possible). Where they keep their
    /// records (fsync, buffered) there is no bound, and a tenth of the
    /// crashes take every node down at once (a power cut of the cluster):
    /// now, or (half of them) at a random instant inside the next sync
    /// that starts, when records are on their way to disk.
    /// The crash falls between events, or is armed to fall inside the
    /// node's next handler call that has two commands or more.
    fn nemesis_crash(&mut self) {
        let n = self.nodes.len();
        let keeps = self.keeps_data();
        let bounded = !keeps || D::bounds_durable_crashes(&self.opts);
        if bounded && self.down_count() >= D::max_crashed(n) {
            return;
        }
        if !bounded && self.nemesis_rng.chance(0.1) {
            if self.nemesis_rng.chance(0.5) && self.p.durability == Durability::Fsync {
                trace!(self, "ARM power cut inside the next sync");
                self.power_cut_armed = true;
                return;
            }
            return self.crash_all();
        }
        let up: Vec<usize> = (0..n)
            .filter(|&i| self.node_up(i) && self.nodes[i].crash_armed == Armed::No)
            .collect();
        if up.is_empty() {
            return;
        }
        let i = self.nemesis_rng.pick(&up);
        if self.nemesis_rng.chance(self.p.crash_inside_p) {
            let armed = if self.p.durability.keeps_data() && self.nemesis_rng.chance(0.5) {
                Armed::PersistCall
            } else {
                Armed::AnyCall
            };
            trace!(
                self,
                "ARM crash of n{} inside a handler call: {armed:?}",
                i + 1
            );
            self.nodes[i].crash_armed = armed;
        } else {
            self.crash_for_a_while(i);
        }
    }

    /// Membership change (`ProtocolDef::reconfigure`): every server that is
    /// up is offered one draw, and the leader (if any is established with
    /// no change in flight) proposes it. Only where nodes keep their
    /// records: a server that lost its state cannot know the current
    /// configuration (Zab's `recovery.rs` counts over the initial one).
    fn nemesis_reconfig(&mut self) {
        let draw = self.nemesis_rng.next_u64();
        if !self.keeps_data() {
            return;
        }
        let all: Vec<u32> = (1..=self.nodes.len() as u32).collect();
        for i in 0..self.nodes.len() {
            if !self.node_up(i) || self.nodes[i].paused {
                continue;
            }
            let mut said = None;
            self.with_node(i, |core, now, out| {
                said = D::reconfigure(core, now, &all, draw, out);
            });
            if let Some(s) = said {
                self.stats.reconfigs += 1;
                trace!(self, "RECONFIG n{}: {s}", i + 1);
                return;
            }
        }
    }

    /// Crash every node that is up, now; each restarts 5–50 ms later.
    pub(super) fn crash_all(&mut self) {
        if self.healed {
            return;
        }
        let up: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.node_up(i)).collect();
        if up.is_empty() {
            return;
        }
        self.stats.cluster_crashes += 1;
        trace!(self, "CRASH ALL: {} nodes", up.len());
        for i in up {
            self.crash_for_a_while(i);
        }
    }

    /// Crash node `i` now and restart it 5–50 ms later.
    pub(super) fn crash_for_a_while(&mut self, i: usize) {
        self.crash(i);
        let k = self.p.time_scale;
        let back = self.now + self.nemesis_rng.range(5_000 * k, 50_000 * k);
        self.schedule(back, Ev::Restart { node: i });
    }

    /// Take nodes down until more than f = `max_crashed(N)` are (f+1 up to
    /// all N) for 5–40 ms, deliberately beyond the protocol's bound:
    /// no quorum is reachable, so operations must end unknown (timeout),
    /// never succeed wrongly, and the cluster must recover afterwards. Where
    /// nodes keep their records (fsync, buffered) they crash; where they
    /// forget (memory mode, or a protocol that persists nothing) they
    /// freeze instead (a majority that loses its memory has lost
    /// acknowledged writes for good, which no protocol survives).
    fn outage(&mut self) {
        let n = self.nodes.len();
        let f = D::max_crashed(n);
        if f >= n {
            return; // the protocol survives every node down: nothing to exceed
        }
        let target = self.nemesis_rng.range(f as u64 + 1, n as u64) as usize;
        let k = self.p.time_scale;
        let until = self.now + self.nemesis_rng.range(5_000 * k, 40_000 * k);
        self.stats.outages += 1;
        trace!(
            self,
            "OUTAGE: {target} of {n} nodes down until {:.3}ms",
            until as f64 / 1000.0
        );
        let crash = self.keeps_data();
        let mut order: Vec<usize> = (0..n).collect();
        for k in (1..n).rev() {
            order.swap(k, self.nemesis_rng.below(k as u64 + 1) as usize);
        }
        for i in order {
            if self.out_count() >= target {
                break;
            }
            if crash && self.node_up(i) {
                self.crash(i);
                self.schedule(until, Ev::Restart { node: i });
            } else if !crash && self.node_up(i) && !self.nodes[i].paused {
                self.pause_until(i, until);
            }
        }
    }

    fn nemesis_pause(&mut self) {
        let cands: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.node_up(i) && !self.nodes[i].paused)
            .collect();
        if cands.is_empty() {
            return;
        }
        let i = self.nemesis_rng.pick(&cands);
        let k = self.p.time_scale;
        let mut until = self.now + self.nemesis_rng.range(1_000 * k, 30_000 * k);
        // Drawn apart from the nemesis' stream, which stays as it was.
        let d = derive(self.p.seed, &[LONG_PAUSE, self.stats.pauses]);
        if self.cfg.long_pauses && d.is_multiple_of(LONG_PAUSE_ONE_IN) {
            let (lo, hi) = (LONG_PAUSE_US.0 * k, LONG_PAUSE_US.1 * k);
            until = self.now + lo + (d >> 16) % (hi - lo);
        }
        self.pause_until(i, until);
    }

    fn pause_until(&mut self, i: usize, until: u64) {
        self.nodes[i].paused = true;
        self.stats.pauses += 1;
        let incarnation = self.nodes[i].incarnation;
        trace!(
            self,
            "PAUSE n{} until {:.3}ms",
            i + 1,
            until as f64 / 1000.0
        );
        self.schedule(
            until,
            Ev::Resume {
                node: i,
                incarnation,
            },
        );
        self.refresh_links();
    }

    pub(super) fn resume(&mut self, i: usize) {
        if !self.nodes[i].paused {
            return;
        }
        self.nodes[i].paused = false;
        trace!(self, "RESUME n{}", i + 1);
        let held = std::mem::take(&mut self.nodes[i].deferred);
        for ev in held {
            if self.fifo {
                // Now, in order: a message arriving at this very instant
                // must not overtake the ones that waited.
                self.node_event(i, ev);
            } else {
                self.schedule(self.now, ev);
            }
        }
        self.refresh_links();
    }

    /// Cut the cluster: a split into two sides (clients take sides too), an
    /// isolated node, or a one-way cut (asymmetric).
    fn form_partition(&mut self) {
        let n = self.nodes.len();
        let e = n + self.clients.len();
        if n < 2 {
            return;
        }
        let r = &mut self.nemesis_rng;
        let kind = r.below(3);
        let mut side = vec![false; e];
        if kind == 1 {
            side[r.below(n as u64) as usize] = true; // isolate one node
        } else {
            // A random non-empty proper subset of the nodes.
            let mask = r.range(1, (1u64 << n) - 2);
            for (i, s) in side.iter_mut().enumerate().take(n) {
                *s = mask & (1 << i) != 0;
            }
        }
        for s in side.iter_mut().skip(n) {
            *s = r.chance(0.5);
        }
        let one_way = kind == 2;
        for a in 0..e {
            for b in 0..e {
                if side[a] && !side[b] {
                    self.blocked[a * e + b] = true;
                    if !one_way {
                        self.blocked[b * e + a] = true;
                    }
                }
            }
        }
        self.partition_active = true;
        self.partition_epoch += 1;
        self.stats.partitions += 1;
        let k = self.p.time_scale;
        let dur = self.nemesis_rng.range(5_000 * k, 60_000 * k);
        let label: Vec<String> = (0..n)
            .filter(|&i| side[i])
            .map(|i| format!("n{}", i + 1))
            .collect();
        let kind = ["split", "isolate", "one-way"][kind as usize];
        trace!(
            self,
            "PARTITION {kind} {{{}}} for {:.3}ms",
            label.join(","),
            dur as f64 / 1000.0
        );
        self.schedule(
            self.now + dur,
            Ev::HealPartition {
                epoch: self.partition_epoch,
            },
        );
        self.refresh_links();
    }

    pub(super) fn heal_partition(&mut self) {
        if !self.partition_active {
            return;
        }
        self.blocked.iter_mut().for_each(|b| *b = false);
        self.partition_active = false;
        trace!(self, "HEAL partition");
        if self.p.diverge {
            // Reads right after the heal see the replicas at their most divergent.
            self.clients.iter_mut().for_each(|c| c.read_next = true);
        }
        self.release_held();
        self.refresh_links();
    }

    /// End of the fault phase: heal partitions, restart crashed nodes,
    /// resume paused ones; the network stops losing, duplicating and
    /// delaying messages abnormally.
    pub(super) fn heal_all(&mut self) {
        if self.healed {
            return;
        }
        trace!(self, "HEAL ALL: fault phase over, liveness phase begins");
        self.healed = true;
        self.stats.healed_at_us = self.now;
        // FIFO links still carry the fault phase's slow messages; operations
        // are held to the liveness bound once that backlog has drained.
        self.liveness_from_us = self.link_last.iter().copied().fold(self.now, u64::max);
        self.heal_partition();
        self.power_cut_armed = false;
        for i in 0..self.nodes.len() {
            self.nodes[i].crash_armed = Armed::No;
            self.restart(i);
            self.resume(i);
        }
    }
}
