//! What a restarted server holds while it comes back: the operations read
//! back from its disk (`durable.rs`) and, at the lowest member after a
//! kill-all, the census in progress (`reform.rs`). Kept apart from both so
//! that `node.rs` can hold them without importing the files that extend it.

use super::msg::Snapshot;
use crate::types::{NodeId, OpId, Tag};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A restored operation: `(seq, op, key, tag)`.
pub(super) type DiskOp = (u64, OpId, Bytes, Tag);

/// A census in progress at the lowest member.
#[derive(Debug, Default)]
pub(super) struct Census {
    pub round: u64,
    /// Answers: node → (life, lost its state, its state).
    pub rolls: BTreeMap<NodeId, (u64, bool, Snapshot)>,
}
