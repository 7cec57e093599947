//! The one quorum helper every protocol uses.

use crate::types::NodeId;

/// Majority of `n`: ⌊n/2⌋ + 1.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuorumStatus {
    /// Not enough replies yet.
    Pending,
    /// Exactly reached the quorum with this reply (reported once).
    Won,
    /// Already won earlier; this reply is surplus.
    AlreadyWon,
    /// This replica had already answered; the reply is ignored.
    Duplicate,
}

/// Counts distinct repliers out of a cluster of `n`, with quorum size `q`.
/// Duplicates (the same replica answering twice, e.g. after a retransmit or
/// a duplicating network) never count twice. Cluster size is passed in,
/// never global. Works for ids up to 63 (a bitset) — plenty for N ≤ 9.
#[derive(Clone, Debug)]
pub struct QuorumTracker {
    seen: u64,
    count: u32,
    need: u32,
}

impl QuorumTracker {
    pub fn new(quorum: usize) -> Self {
        assert!(quorum >= 1, "a quorum needs at least one member");
        QuorumTracker {
            seen: 0,
            count: 0,
            need: quorum as u32,
        }
    }

    pub fn record(&mut self, from: NodeId) -> QuorumStatus {
        assert!(from < 64, "node ids must be < 64");
        let bit = 1u64 << from;
        if self.seen & bit != 0 {
            return QuorumStatus::Duplicate;
        }
        self.seen |= bit;
        self.count += 1;
        match self.count.cmp(&self.need) {
            std::cmp::Ordering::Less => QuorumStatus::Pending,
            std::cmp::Ordering::Equal => QuorumStatus::Won,
            std::cmp::Ordering::Greater => QuorumStatus::AlreadyWon,
        }
    }

    pub fn has(&self, from: NodeId) -> bool {
        from < 64 && self.seen & (1u64 << from) != 0
    }
    /// The replicas counted so far, as a bitmask of ids.
    pub fn members(&self) -> u64 {
        self.seen
    }
    pub fn count(&self) -> u32 {
        self.count
    }
    pub fn need(&self) -> u32 {
        self.need
    }
    pub fn won(&self) -> bool {
        self.count >= self.need
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_sizes() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }

    #[test]
    fn duplicates_never_count() {
        let mut t = QuorumTracker::new(2);
        assert_eq!(t.record(1), QuorumStatus::Pending);
        assert_eq!(t.record(1), QuorumStatus::Duplicate);
        assert!(!t.won());
        assert_eq!(t.record(3), QuorumStatus::Won);
        assert_eq!(t.record(2), QuorumStatus::AlreadyWon);
        assert_eq!(t.record(3), QuorumStatus::Duplicate);
        assert_eq!(t.count(), 3);
    }
}
