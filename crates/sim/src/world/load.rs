//! The load phase, last, for protocols that promise fairness
//! ([`ProtocolDef::PROMISES_FAIRNESS`]): in the healed cluster,
//! [`WRITERS_PER_SERVER`] extra clients per server, each pinned to its
//! server, put back to back for [`LOAD_US`] of virtual time: a saturating
//! write load spread evenly over the servers (seed 004 §4.2: "each client
//! machine roughly observed the same write throughput"). Then each
//! server's writers must have completed a fair share of the writes
//! ([`crate::checks::starvation`]). The extra clients exist from the start
//! (idle), so the network's tables never change size during a run.

use super::World;
use crate::checks;
use bytes::Bytes;
use quorumkv_core::op::Outcome;
use quorumkv_core::protocol::ProtocolDef;
use quorumkv_core::Request;

/// Writers pinned to each server during the load phase: enough to keep
/// every link of a ring full (more than its default window of 16).
pub const WRITERS_PER_SERVER: usize = 24;
/// How long the load lasts, virtual µs.
pub const LOAD_US: u64 = 100_000;
/// A load client waits this many client timeouts before it gives up: the
/// check wants to see the longest waits, not cut them at the timeout.
const PATIENCE: u32 = 10;

#[derive(Debug, Default)]
pub(super) struct Load {
    /// The first load client (the workload's clients come before).
    pub first_client: usize,
    /// When the load started and when its clients stop issuing, µs.
    pub window: Option<(u64, u64)>,
    /// The servers that take part (available when the load started).
    pub servers: Vec<usize>,
    /// The writes invoked inside the window.
    pub waits: Vec<checks::Wait>,
    pub judged: bool,
}

impl<D: ProtocolDef> World<'_, D> {
    /// Idle load clients to add at construction, if the protocol promises
    /// fairness and the seed drew the load phase.
    pub(super) fn load_clients(n: usize, drawn: bool) -> usize {
        if D::PROMISES_FAIRNESS && drawn {
            n * WRITERS_PER_SERVER
        } else {
            0
        }
    }

    pub(super) fn is_load_client(&self, c: usize) -> bool {
        c >= self.load.first_client
    }

    /// Every client has finished and the probe is over: start the load,
    /// once. Returns whether it started.
    pub(super) fn start_load(&mut self) -> bool {
        let first = self.load.first_client;
        if !self.p.load
            || self.rounds.is_some()
            || !self.healed
            || self.load.window.is_some()
            || first == self.clients.len()
        {
            return false;
        }
        self.load.servers = self.live_nodes();
        if self.load.servers.is_empty() {
            return false;
        }
        let at = self.now + 2 * checks::slowest_trip_us(&self.p);
        self.load.window = Some((at, at + LOAD_US));
        trace!(self, "LOAD: {} writers", self.clients.len() - first);
        for c in first..self.clients.len() {
            let slot = &mut self.clients[c];
            slot.quota = u32::MAX;
            slot.done = false;
            self.clients_done -= 1;
            self.schedule(at, super::Ev::ClientIssue { client: c });
        }
        true
    }

    /// How long client `c` waits for an answer before giving up, µs.
    pub(super) fn patience_us(&self, c: usize) -> u64 {
        let t = self.cfg.timing.client_timeout;
        let t = if self.is_load_client(c) {
            t * PATIENCE
        } else {
            t
        };
        t.as_micros() as u64
    }

    /// The server load client `c` is pinned to (its index among the live).
    fn load_server(&self, c: usize) -> usize {
        (c - self.load.first_client) % self.load.servers.len()
    }

    /// The node load client `c` sends to.
    pub(super) fn load_node(&self, c: usize) -> usize {
        self.load.servers[self.load_server(c)]
    }

    /// Load client `c`'s next put.
    pub(super) fn load_request(&mut self, c: usize) -> Request {
        let slot = &self.clients[c];
        let key = Bytes::from(format!("k{}", slot.issued as usize % self.p.keys as usize));
        let value = Bytes::from(format!("load{c}.{}", slot.issued));
        Request::Put { key, value }
    }

    /// Load client `c` got the outcome of history record `record`: a write
    /// invoked inside the window counts, whatever its outcome; the client
    /// stops once the window has closed.
    pub(super) fn load_completed(&mut self, c: usize, record: usize) {
        let Some((from, until)) = self.load.window else {
            return;
        };
        let r = &self.history[record];
        if (from * 1000..until * 1000).contains(&r.invoke_ns) {
            let server = self.load_server(c);
            let wait = checks::Wait {
                server: self.load.servers[server] as u32 + 1,
                ns: r.complete_ns - r.invoke_ns,
                ok: matches!(r.outcome, Outcome::Ok(_)),
            };
            self.load.waits.push(wait);
        }
        if self.now >= until {
            let slot = &mut self.clients[c];
            slot.quota = slot.issued;
        }
    }

    /// The load is over (every client has stopped): judge it, once.
    pub(super) fn judge_load(&mut self) {
        if self.load.window.is_none() || self.load.judged {
            return;
        }
        self.load.judged = true;
        if self.stuck.is_none() {
            let writers = WRITERS_PER_SERVER * self.load.servers.len();
            self.stuck = checks::starvation(&self.load.waits, writers, LOAD_US);
        }
    }
}
