//! Counters shared by both roles.

/// Counters of things that happened but needed no action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Replies for operations that already finished (late or duplicate).
    pub stale_replies: u64,
    /// Replies from a replica that had already answered this phase.
    pub duplicate_replies: u64,
    /// Messages that reached the wrong role (e.g. a reply at a bare replica).
    pub misrouted: u64,
    /// Stores ignored because the replica held a newer or equal tag.
    pub older_stores: u64,
}
