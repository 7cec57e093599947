//! Counters shared by both roles.

/// Counters of what happened, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Replica: locks granted / denied (a re-sent request of the holder counts again).
    pub grants: u64,
    pub denials: u64,
    /// Replica: a lease found expired and dropped when the key was next touched.
    pub expired_leases: u64,
    /// Replica: locks released because the client connection they were
    /// granted on went down (`Replica::on_conn_down`).
    pub released_on_disconnect: u64,
    /// Replica: UNLOCKs of a lock the sender did not hold (late, or duplicated).
    pub foreign_unlocks: u64,
    /// Replica: WRITEs refused (not the holder, or the lease ran out).
    pub writes_denied: u64,
    /// Replica: accepted WRITEs whose tag was not newer (a re-sent write).
    pub older_writes: u64,
    /// Replica: WRITEs denied because their tag jumped more than
    /// `MAX_TAG_JUMP` ahead of the held one (or was `u64::MAX`).
    pub tag_jumps_refused: u64,
    /// Coordinator: puts refused because the key's tag space is used up
    /// (`Tag::next`: no ts follows `u64::MAX - 1`).
    pub tag_space_exhausted: u64,
    /// Coordinator: grants it will not use (after the Q-th, or for a round
    /// that ended), released at once or left to expire (`surplus-grants`).
    pub surplus_grants: u64,
    /// Coordinator: replies for operations that already finished or moved on.
    pub stale_replies: u64,
    /// Coordinator: replies from a replica that had already answered this phase.
    pub duplicate_replies: u64,
    /// Coordinator: lock rounds retried after backoff.
    pub retries: u64,
    /// Coordinator: operations that released their locks and locked anew
    /// because a replica whose lock they held went down.
    pub relocks: u64,
    /// Coordinator: writes answered before their deadline because a locked
    /// replica that had not acknowledged went down.
    pub writes_cut: u64,
    /// Retry timers for operations that had already finished.
    pub stale_timers: u64,
    /// Messages that reached the wrong role (e.g. a reply at a bare replica).
    pub misrouted: u64,
}
