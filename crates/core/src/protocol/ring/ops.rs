//! The operations applied here, to apply a retried write at most once
//! (the seed leaves it open, line 191).

use crate::types::OpId;
use std::collections::{HashSet, VecDeque};

/// Operation ids whose write was applied here, the oldest forgotten first
/// beyond `limit`. Copies still travelling are found in `pending`.
#[derive(Debug)]
pub struct OpTable {
    applied: HashSet<OpId>,
    order: VecDeque<OpId>,
    limit: usize,
}

impl OpTable {
    pub fn new(limit: usize) -> Self {
        OpTable {
            applied: HashSet::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
        }
    }
    /// Whether a write of `op` was applied here (never for `OpId::NONE`).
    pub fn applied(&self, op: OpId) -> bool {
        !op.is_none() && self.applied.contains(&op)
    }
    pub fn len(&self) -> usize {
        self.applied.len()
    }
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }
    /// The operations remembered, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &OpId> {
        self.order.iter()
    }
    /// A (non-void) write of `op` was applied here. True if it is new.
    pub fn on_write(&mut self, op: OpId) -> bool {
        if op.is_none() || !self.applied.insert(op) {
            return false;
        }
        self.order.push_back(op);
        if self.order.len() > self.limit {
            let old = self.order.pop_front().expect("non-empty");
            self.applied.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_operations_are_remembered_within_the_bound() {
        let mut t = OpTable::new(2);
        let op = |seq| OpId { client: 1, seq };
        assert!(t.is_empty());
        for s in 1..=3 {
            assert!(t.on_write(op(s)));
        }
        assert!(!t.on_write(op(3)), "known");
        assert!(!t.on_write(OpId::NONE));
        assert_eq!(t.len(), 2);
        assert!(!t.applied(op(1)), "forgotten");
        assert!(t.applied(op(2)) && t.applied(op(3)));
        assert!(!t.applied(OpId::NONE));
    }
}
