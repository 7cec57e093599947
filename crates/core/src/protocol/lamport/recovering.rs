//! What a recovering server has learnt from its peers so far (seed 002
//! §2); the recovery itself is `recovery.rs`.

use super::msg::{Entry, ReqId, Staged};
use crate::types::{NodeId, Time};
use std::collections::{BTreeMap, BTreeSet};

/// What a server copying state from its peers has learnt so far.
#[derive(Clone, Debug, Default)]
pub(super) struct Recovery {
    /// The peers that answered.
    pub answered: BTreeSet<NodeId>,
    /// Those that answered while recovering too (nothing to give).
    pub empty: BTreeSet<NodeId>,
    /// Writes of our previous lives left staged, and the peers staging each.
    pub orphans: BTreeMap<ReqId, (Staged, BTreeSet<NodeId>)>,
    /// Other holders' staged writes, staged here when recovery ends.
    pub others: BTreeMap<ReqId, Staged>,
    /// Requests released meanwhile that were not queued here.
    pub released: BTreeSet<ReqId>,
    /// Our previous lives' requests some peer queued without their write.
    pub unwritten: BTreeSet<ReqId>,
    /// We lost our state (memory restart, `server --recover`) and have
    /// merged nobody's yet: we have nothing to give.
    pub lost: bool,
    /// The peers whose last answer said the same of them.
    pub lost_peers: BTreeSet<NodeId>,
    /// When a tick first saw us lost.
    pub lost_since: Option<Time>,
    /// The stores of peers that answered while recovering from their own
    /// disks (not lost): used only if every peer did (`lock-timeout`
    /// restarts after a crash of every replica).
    pub disk_bases: BTreeMap<NodeId, Vec<Entry>>,
}
