//! Counters of a ring server, for INFO and `/metrics`.

/// Things that happened, most of them needing no action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Own writes whose write message came back (pc 49).
    pub completed: u64,
    /// Reads that had to wait for a pending pre-write (pc 80).
    pub parked_reads: u64,
    /// Client writes refused because the write queue was full.
    pub refused_writes: u64,
    /// Client writes whose operation id was already known here (c).
    pub deduplicated: u64,
    /// Pre-writes voided: their operation travels under a lower tag (c).
    pub voided: u64,
    /// Operations started again after all their copies were voided (c).
    pub restarted: u64,
    /// Crashed origins' pre-writes this server converted (a).
    pub taken_over: u64,
    /// Copies of a round that had already ended here (re-sends).
    pub duplicates: u64,
    /// Messages re-sent to a new successor (pc 88-91).
    pub resent: u64,
    /// Servers seen crashing.
    pub crashes_seen: u64,
    /// `Down` for a server already out of the view (or this one).
    pub ignored_downs: u64,
    /// Messages from servers outside the view, ignored (d).
    pub fenced: u64,
    /// `Join`s sent while outside, accepted here, passed on to the
    /// joiner's live predecessor (d).
    pub joins_sent: u64,
    pub joins_accepted: u64,
    pub joins_forwarded: u64,
    /// Times this server was welcomed back (d).
    pub rejoined: u64,
    /// Rings re-formed here after every server restarted (e, `reform.rs`).
    pub reformed: u64,
    /// Joins of others learnt from a `ViewChange` (d).
    pub views_installed: u64,
    /// `Hail`s sent to a member the view missed (d).
    pub hails: u64,
    /// Pre-writes sent round once more from home (`lap.rs`).
    pub laps: u64,
    /// Credits from a server that is not the successor (any more).
    pub stale_credits: u64,
    /// Ring messages from a client connection.
    pub misrouted: u64,
    /// Client writes refused because the key's tag space is used up
    /// (`Tag::next`: no ts follows `u64::MAX - 1`; issue 31).
    pub tag_space_exhausted: u64,
}

impl Counters {
    /// `/metrics` lines; `view` is the number of live servers.
    pub fn metrics(&self, view: usize) -> Vec<(&'static str, &'static str, u64)> {
        let mut m = self.write_path();
        m.extend(self.faults_and_views(view));
        m
    }

    /// Counters of the write and read path.
    fn write_path(&self) -> Vec<(&'static str, &'static str, u64)> {
        vec![
            (
                "ring_writes_completed_total",
                "own writes whose write message came back",
                self.completed,
            ),
            (
                "ring_parked_reads_total",
                "reads that waited for a pending pre-write",
                self.parked_reads,
            ),
            (
                "ring_refused_writes_total",
                "writes refused with a full write queue",
                self.refused_writes,
            ),
            (
                "ring_deduplicated_total",
                "client writes whose operation was already known",
                self.deduplicated,
            ),
            (
                "ring_voided_total",
                "pre-writes voided as a retry's second copy",
                self.voided,
            ),
            (
                "ring_taken_over_total",
                "crashed servers' pre-writes converted here",
                self.taken_over,
            ),
            (
                "ring_duplicates_total",
                "copies of rounds already ended here",
                self.duplicates,
            ),
            (
                "ring_resent_total",
                "messages re-sent to a new successor",
                self.resent,
            ),
        ]
    }

    /// Counters of crashes, views, rejoins and refused senders; `view` is
    /// the number of live servers.
    fn faults_and_views(&self, view: usize) -> Vec<(&'static str, &'static str, u64)> {
        vec![
            (
                "ring_crashes_seen_total",
                "servers seen crashing",
                self.crashes_seen,
            ),
            (
                "ring_fenced_total",
                "messages or links from servers outside the view",
                self.fenced,
            ),
            (
                "ring_joins_accepted_total",
                "restarted servers welcomed back here",
                self.joins_accepted,
            ),
            (
                "ring_rejoined_total",
                "times this server was welcomed back",
                self.rejoined,
            ),
            (
                "ring_reformed_total",
                "rings re-formed here after every server restarted",
                self.reformed,
            ),
            (
                "ring_stale_credits_total",
                "credits from a former successor",
                self.stale_credits,
            ),
            (
                "ring_misrouted_total",
                "ring messages from a client connection",
                self.misrouted,
            ),
            (
                "ring_tag_space_exhausted_total",
                "writes refused: the key's tag space is used up",
                self.tag_space_exhausted,
            ),
            (
                "ring_view_size",
                "live servers in this server's view",
                view as u64,
            ),
        ]
    }
}
