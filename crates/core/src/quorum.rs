//! The one quorum helper every protocol uses.

use crate::types::NodeId;

/// Majority of `n`: ⌊n/2⌋ + 1.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The most of `n` replicas that may fail with a majority left: N − Q =
/// ⌈n/2⌉ − 1. A recovering replica merges `minority(n) + 1` peers' state:
/// with the Q − 1 others holding any completed write, (f+1)+(Q−1) > N−1.
pub fn minority(n: usize) -> usize {
    n - majority(n)
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
/// never global. Replicas that said no (a denied lock, a lost link) are
/// counted apart, so the tracker can tell when the quorum can no longer be
/// reached and the caller should give up early instead of waiting for a
/// timeout. Works for ids up to 63 (a bitset) — plenty for N ≤ 9.
#[derive(Clone, Debug)]
pub struct QuorumTracker {
    seen: u64,
    count: u32,
    need: u32,
    members: u32,
    /// Replicas that will not count (refused, or unreachable).
    lost: u64,
}

impl QuorumTracker {
    /// A tracker for a quorum of `quorum` out of `members` replicas.
    pub fn new(members: usize, quorum: usize) -> Self {
        assert!(quorum >= 1, "a quorum needs at least one member");
        assert!(quorum <= members, "a quorum of {quorum} out of {members}");
        QuorumTracker {
            seen: 0,
            count: 0,
            need: quorum as u32,
            members: members as u32,
            lost: 0,
        }
    }
    /// A majority of `members`.
    pub fn majority(members: usize) -> Self {
        Self::new(members, majority(members))
    }

    /// Replica `from` will not count towards this quorum (it refused, or
    /// its link is down). Ignored if it already counted.
    pub fn lose(&mut self, from: NodeId) {
        assert!(from < 64, "node ids must be < 64");
        if self.seen & (1u64 << from) == 0 {
            self.lost |= 1u64 << from;
        }
    }
    /// False once so many replicas are lost that `need` can never be reached.
    pub fn still_possible(&self) -> bool {
        let lost = self.lost.count_ones();
        let open = self.members.saturating_sub(self.count + lost);
        self.count + open >= self.need
    }

    pub fn record(&mut self, from: NodeId) -> QuorumStatus {
        assert!(from < 64, "node ids must be < 64");
        let bit = 1u64 << from;
        if self.seen & bit != 0 {
            return QuorumStatus::Duplicate;
        }
        self.seen |= bit;
        self.lost &= !bit;
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
        let f: Vec<_> = (1..=6).map(minority).collect();
        assert_eq!(f, [0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn duplicates_never_count() {
        let mut t = QuorumTracker::new(3, 2);
        assert_eq!(t.record(1), QuorumStatus::Pending);
        assert_eq!(t.record(1), QuorumStatus::Duplicate);
        assert!(!t.won());
        assert_eq!(t.record(3), QuorumStatus::Won);
        assert_eq!(t.record(2), QuorumStatus::AlreadyWon);
        assert_eq!(t.record(3), QuorumStatus::Duplicate);
        assert_eq!(t.count(), 3);
    }

    #[test]
    fn a_quorum_becomes_impossible_when_too_many_are_lost() {
        let mut t = QuorumTracker::majority(5);
        assert_eq!(t.need(), 3);
        t.record(1);
        t.lose(2);
        t.lose(3);
        assert!(t.still_possible(), "1 counted + 4, 5 open");
        t.lose(3);
        assert!(t.still_possible(), "losing one twice counts once");
        t.lose(4);
        assert!(!t.still_possible(), "1 counted + only 5 open < 3");
        t.lose(1);
        assert!(!t.still_possible());
        assert_eq!(t.count(), 1, "losing a counted replica changes nothing");
        // A replica that answers after all is no longer lost.
        t.record(4);
        assert!(t.still_possible());
    }
}
