//! The operations applied here, to apply a retried write at most once
//! (the seed leaves it open, line 191).

use crate::types::{OpId, Tag};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// Operation ids whose write was applied here, the oldest forgotten first
/// beyond `limit`, each with the write (key and tag) that applied it where
/// known. Copies still travelling are found in `pending`.
#[derive(Debug)]
pub struct OpTable {
    applied: HashMap<OpId, Option<(Bytes, Tag)>>,
    order: VecDeque<OpId>,
    limit: usize,
}

impl OpTable {
    pub fn new(limit: usize) -> Self {
        OpTable {
            applied: HashMap::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
        }
    }
    /// Whether a write of `op` was applied here (never for `OpId::NONE`).
    pub fn applied(&self, op: OpId) -> bool {
        !op.is_none() && self.applied.contains_key(&op)
    }
    /// The write that applied `op`, if known.
    pub fn write_of(&self, op: OpId) -> Option<(&Bytes, Tag)> {
        let at = self.applied.get(&op)?.as_ref()?;
        Some((&at.0, at.1))
    }
    /// `op`, applied here, was applied by the write `key`/`tag`. True if
    /// that was not known yet.
    pub fn learn_write(&mut self, op: OpId, key: &Bytes, tag: Tag) -> bool {
        match self.applied.get_mut(&op) {
            Some(at @ None) if tag > Tag::ZERO => {
                *at = Some((key.clone(), tag));
                true
            }
            _ => false,
        }
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
        if op.is_none() || self.applied.contains_key(&op) {
            return false;
        }
        self.applied.insert(op, None);
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
        let (k, tag) = (Bytes::from_static(b"k"), Tag { ts: 4, writer: 2 });
        assert_eq!(t.write_of(op(2)), None);
        assert!(!t.learn_write(op(2), &k, Tag::ZERO), "no write named");
        assert!(t.learn_write(op(2), &k, tag));
        assert!(
            !t.learn_write(op(2), &k, Tag { ts: 5, writer: 2 }),
            "one write"
        );
        assert_eq!(t.write_of(op(2)), Some((&k, tag)));
        assert!(!t.learn_write(op(1), &k, tag), "forgotten: not applied");
    }
}
