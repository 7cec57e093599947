//! Counters of a server, for INFO and `/metrics`.

use crate::protocol::contract::{read_metrics, Metric};

/// Things that happened, most of them needing no action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Writes answered `Done` (or `Unknown` when a peer refused).
    pub completed: u64,
    /// Writes refused because the lock did not come within the op timeout.
    pub refused: u64,
    /// Writes answered `Timeout` from inside their critical section.
    pub timed_out: u64,
    /// Reads that waited for a staged write (`read-wait`).
    pub reads_waited: u64,
    /// Messages about requests this server no longer knows (late, resent).
    pub stale: u64,
    /// SERVER_WRITEs for a request not queued here (answered `applied: false`).
    pub unknown_writes: u64,
    /// Writes not applied at their turn: a newer version of the key came
    /// first, by a merge (recovery, `Repair`).
    pub superseded: u64,
    /// Writes applied at their turn over a newer version that no merge
    /// brought: never in a correct run (a broken lock).
    pub out_of_order_applies: u64,
    /// Peers evicted by the lock timeout.
    pub evictions: u64,
    /// Messages ignored because their sender was evicted.
    pub from_evicted: u64,
    /// Messages from nowhere expected (a client connection, a stranger).
    pub misrouted: u64,
    pub links_down: u64,
    /// Writes sent again after a peer without their request refused them
    /// (it lost our REQUEST_LOCK in a reset: see `on_write_ack`).
    pub requeued: u64,
    /// Peers polled after a whole tick awaited (see `poll_stalled`).
    pub polls: u64,
    /// Staged writes of a previous life this server ruled on at restart.
    pub orphans_resolved: u64,
    /// Recovery rounds in which every peer was recovering too (asked again).
    pub sourceless_rounds: u64,
    /// Messages refused: their clock was past `CLOCK_LIMIT` (issue 31).
    pub clock_refused: u64,
    /// Writes refused because this server's clock reached `u64::MAX`.
    pub clock_exhausted: u64,
}

impl Counters {
    pub fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        read_metrics(METRICS, self)
    }
}

/// Every counter, in the order `/metrics` shows them.
const METRICS: &[Metric<Counters>] = &[
    (
        "lamport_orphans_resolved_total",
        "staged writes of a previous life committed or aborted at restart",
        |c| c.orphans_resolved,
    ),
    (
        "lamport_sourceless_recovery_rounds_total",
        "recovery rounds in which every peer was recovering too (asked again)",
        |c| c.sourceless_rounds,
    ),
    (
        "lamport_writes_requeued_total",
        "writes re-sent after a peer without their request refused them",
        |c| c.requeued,
    ),
    (
        "lamport_polls_total",
        "peers polled after a whole tick awaited",
        |c| c.polls,
    ),
    (
        "lamport_writes_completed_total",
        "writes this server completed",
        |c| c.completed,
    ),
    (
        "lamport_writes_refused_total",
        "writes that got no lock within the op timeout",
        |c| c.refused,
    ),
    (
        "lamport_writes_timed_out_total",
        "writes answered Timeout inside their critical section",
        |c| c.timed_out,
    ),
    (
        "lamport_reads_waited_total",
        "reads that waited for a staged write",
        |c| c.reads_waited,
    ),
    (
        "lamport_stale_messages_total",
        "messages about requests no longer known",
        |c| c.stale,
    ),
    (
        "lamport_unknown_writes_total",
        "SERVER_WRITEs for a request not queued here",
        |c| c.unknown_writes,
    ),
    (
        "lamport_superseded_writes_total",
        "writes skipped at their turn: a newer version came first by a merge",
        |c| c.superseded,
    ),
    (
        "lamport_out_of_order_applies_total",
        "writes applied over a newer version (never in a correct run)",
        |c| c.out_of_order_applies,
    ),
    (
        "lamport_evictions_total",
        "peers evicted by the lock timeout",
        |c| c.evictions,
    ),
    (
        "lamport_from_evicted_total",
        "messages ignored from evicted peers",
        |c| c.from_evicted,
    ),
    (
        "lamport_misrouted_total",
        "messages from unexpected senders",
        |c| c.misrouted,
    ),
    (
        "lamport_clocks_refused_total",
        "messages refused: clock past 2^63",
        |c| c.clock_refused,
    ),
    (
        "lamport_clock_exhausted_total",
        "writes refused: this server's clock reached 2^64-1",
        |c| c.clock_exhausted,
    ),
    (
        "lamport_links_down_total",
        "peer links that went down",
        |c| c.links_down,
    ),
];
