//! The stall probe, after the liveness phase's workload, in the healed
//! cluster. Once whatever the fault phase left has ended (a lease after
//! its last operations), a *burst*: every client puts one key, all at the
//! same instant, so that operations conflict and some fail. Then *lone*
//! operations: one client puts then gets every key, one at a time, each
//! after a pause long enough for the previous operations' last messages to
//! land (and for what the protocol leaves to expire,
//! [`ProtocolDef::linger`]). Nothing conflicts with them, so each must
//! succeed, quickly: a refusal or a slow answer means the protocol left
//! something behind on the key (a lock a failed attempt kept, a queue no
//! one serves) — a stall the liveness bound takes for progress, since a
//! refusal is a definite, timely outcome. With `--read-after-crash` the
//! keys frozen by a crash are only read (the burst too, if it is one).

use super::World;
use crate::checks::slowest_trip_us;
use bytes::Bytes;
use quorumkv_core::op::Outcome;
use quorumkv_core::protocol::ProtocolDef;
use quorumkv_core::Request;
use std::collections::VecDeque;

/// The client that probes.
const PROBER: usize = 0;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    NotYet,
    /// Every client puts one key, all at the same instant: contention.
    Burst,
    /// The prober alone, one operation at a time.
    Lone,
    Over,
}

#[derive(Debug, Default)]
pub(super) struct Probe {
    stage: Stage,
    /// Each client's burst request, until issued.
    burst: Vec<Option<Request>>,
    /// The prober's requests still to issue, in order.
    lone: VecDeque<Request>,
    /// The lone operations are the history's records from this one on.
    first_lone: Option<usize>,
}

impl<D: ProtocolDef> World<'_, D> {
    /// Every client has finished its operations: start the probe's next
    /// stage, if the protocol promises liveness (not in the round model,
    /// which measures, without faults). Returns whether one started.
    pub(super) fn advance_probe(&mut self) -> bool {
        if !D::PROMISES_LIVENESS || !self.healed || self.rounds.is_some() {
            return false;
        }
        let keys = self.p.keys as usize;
        let key = |k: usize| Bytes::from(format!("k{k}"));
        let (stage, at) = match self.probe.stage {
            Stage::NotYet => {
                let frozen = self.read_only(&key(0));
                self.probe.burst = (0..self.clients.len())
                    .map(|c| {
                        let (key, value) = (key(0), Bytes::from(format!("burst.{c}")));
                        Some(match frozen {
                            true => Request::Get { key },
                            false => Request::Put { key, value },
                        })
                    })
                    .collect();
                // Not before the fault phase's FIFO backlog has drained
                // (`liveness_from_us`): a message delayed before the heal
                // holds back every later one on its link.
                let at = (self.now + self.probe_gap_us())
                    .max(self.fault_phase_shadow_us())
                    .max(self.liveness_from_us);
                (Stage::Burst, at)
            }
            Stage::Burst => {
                for k in 0..keys {
                    let value = Bytes::from(format!("probe.{k}"));
                    if !self.read_only(&key(k)) {
                        (self.probe.lone).push_back(Request::Put { key: key(k), value });
                    }
                    (self.probe.lone).push_back(Request::Get { key: key(k) });
                }
                self.probe.first_lone = Some(self.history.len());
                (Stage::Lone, self.now + self.probe_gap_us())
            }
            Stage::Lone | Stage::Over => {
                self.probe.stage = Stage::Over;
                return false;
            }
        };
        self.probe.stage = stage;
        trace!(self, "PROBE {stage:?}");
        for c in 0..self.clients.len() {
            let n = match stage {
                Stage::Burst => 1,
                _ if c == PROBER => self.probe.lone.len() as u32,
                _ => continue,
            };
            let slot = &mut self.clients[c];
            slot.quota += n;
            slot.done = false;
            self.clients_done -= 1;
            self.schedule(at, super::Ev::ClientIssue { client: c });
        }
        true
    }

    /// The pause before each lone operation, and before the burst.
    pub(super) fn probe_gap_us(&self) -> u64 {
        let linger = D::linger(&self.opts, &self.cfg.timing.core());
        2 * slowest_trip_us(&self.p) + linger.as_micros() as u64
    }

    /// The probe's next request for client `c`, if it is probing.
    pub(super) fn probe_request(&mut self, c: usize) -> Option<Request> {
        match self.probe.stage {
            Stage::Burst => self.probe.burst[c].take(),
            Stage::Lone if c == PROBER => self.probe.lone.pop_front(),
            _ => None,
        }
    }

    /// Whether the probe's burst is under way.
    pub(super) fn probe_bursting(&self) -> bool {
        self.probe.stage == Stage::Burst
    }

    /// Whether history record `record` is one of the lone operations.
    pub(super) fn is_probe(&self, record: usize) -> bool {
        self.probe.stage == Stage::Lone && self.probe.first_lone.is_some_and(|f| record >= f)
    }

    /// A server that takes part in quorums, for a probing client `c` in
    /// proxy mode: the clients spread over them.
    pub(super) fn probe_node(&self, c: usize) -> Option<usize> {
        let live = self.live_nodes();
        (!live.is_empty()).then(|| live[c % live.len()])
    }

    /// The nodes that are up and take part in quorums.
    pub(super) fn live_nodes(&self) -> Vec<usize> {
        let up = |i: &usize| {
            self.nodes[*i]
                .core
                .as_ref()
                .is_some_and(|x| D::available(x))
        };
        (0..self.nodes.len()).filter(up).collect()
    }

    /// When whatever the fault phase left behind has ended: an operation
    /// invoked before the heal, or one whose outcome is unknown, may have a
    /// coordinator still running, or locks held, for an op timeout after
    /// its client gave up (leases last as long).
    fn fault_phase_shadow_us(&self) -> u64 {
        let t = &self.cfg.timing;
        let linger = (t.op_timeout + t.client_timeout).as_micros() as u64;
        let from_ns = self.liveness_from_us.saturating_mul(1000);
        (self.history.iter())
            .filter(|r| r.invoke_ns < from_ns || r.outcome == Outcome::Unknown)
            .map(|r| r.complete_ns.max(r.invoke_ns) / 1000 + linger)
            .max()
            .unwrap_or(0)
    }

    /// A probe operation completed: it must have succeeded within half an
    /// op timeout (a lone operation in a healed cluster waits for nothing),
    /// plus its client's round trip when client links are slower.
    pub(super) fn judge_probe(&mut self, record: usize) {
        let r = &self.history[record];
        let t = &self.cfg.timing;
        let client_rtt_ns = t.client_link_us.map_or(0, |(_, hi)| 2 * hi * 1000);
        let bound_ns = t.op_timeout.as_nanos() as u64 / 2 + client_rtt_ns;
        let slow = r.complete_ns - r.invoke_ns > bound_ns;
        let failed = !matches!(r.outcome, Outcome::Ok(_));
        if (slow || failed) && self.stuck.is_none() {
            self.stuck = Some(format!(
                "stall: alone on its key in the healed cluster, an operation {} (probe, bound {}ms): {r}",
                if failed { "failed" } else { "was slow" },
                bound_ns / 1_000_000
            ));
        }
    }
}
