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
    /// Replica: stores refused, unanswered, because their tag jumped more
    /// than `MAX_TAG_JUMP` ahead of the one held (or was `u64::MAX`).
    pub tag_jumps_refused: u64,
    /// Coordinator: writes refused because the key's tag space is used up
    /// (`Tag::next`: no ts follows `u64::MAX - 1`).
    pub tag_space_exhausted: u64,
    /// Coordinator: writes that first wrote the quorum's highest tag back
    /// because their own would have jumped more than `MAX_TAG_JUMP` ahead
    /// of a replica of the quorum.
    pub catch_up_write_backs: u64,
}
