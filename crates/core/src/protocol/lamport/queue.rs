//! The lock queues: one per scope, ordered by (Lamport clock, node id).

use super::disk::Kept;
use super::msg::{ReqId, Scope, Staged};
use crate::types::NodeId;
use bytes::Bytes;
use std::collections::BTreeMap;

/// A queued request, with the write made under it once it arrives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// The key and value (`None` = delete) its holder wrote, once known.
    pub write: Option<(Bytes, Option<Bytes>)>,
    /// The write is in the store.
    pub applied: bool,
    /// Its holder released it; it leaves the queue when at the head and
    /// its write (if any) is applied.
    pub released: bool,
    /// A staged write of a holder that restarted since: only its verdict
    /// (`Resolve`) takes it out, never its new life's `Outstanding`.
    pub orphan: bool,
}

impl Slot {
    /// A staged write: known, not applied yet.
    pub fn staged(&self) -> Option<&Bytes> {
        match &self.write {
            Some((key, _)) if !self.applied => Some(key),
            _ => None,
        }
    }
}

/// Every scope's queue. An empty queue is removed, so the map stays as
/// small as the set of contended scopes.
#[derive(Clone, Debug, Default)]
pub struct Queues {
    queues: BTreeMap<Scope, BTreeMap<ReqId, Slot>>,
}

impl Queues {
    /// Queue `req` (a no-op if it is there already: a resend).
    pub fn insert(&mut self, scope: &Scope, req: ReqId) {
        (self.queues.entry(scope.clone()).or_default())
            .entry(req)
            .or_default();
    }
    pub fn get_mut(&mut self, scope: &Scope, req: ReqId) -> Option<&mut Slot> {
        self.queues.get_mut(scope)?.get_mut(&req)
    }
    /// The request first in line for `scope`.
    pub fn head(&self, scope: &Scope) -> Option<ReqId> {
        self.queues.get(scope)?.keys().next().copied()
    }
    pub fn head_slot_mut(&mut self, scope: &Scope) -> Option<(ReqId, &mut Slot)> {
        let (&req, slot) = self.queues.get_mut(scope)?.iter_mut().next()?;
        Some((req, slot))
    }
    pub fn remove(&mut self, scope: &Scope, req: ReqId) -> Option<Slot> {
        let q = self.queues.get_mut(scope)?;
        let slot = q.remove(&req);
        if q.is_empty() {
            self.queues.remove(scope);
        }
        slot
    }
    /// The scopes and requests of `node`, in order.
    pub fn of_node(&self, node: NodeId) -> Vec<(Scope, ReqId)> {
        let mut v = Vec::new();
        for (scope, q) in &self.queues {
            v.extend(
                q.keys()
                    .filter(|r| r.node == node)
                    .map(|&r| (scope.clone(), r)),
            );
        }
        v
    }
    /// The nodes whose request heads a queue with others behind it.
    pub fn blocking_heads(&self) -> impl Iterator<Item = NodeId> + '_ {
        (self.queues.values())
            .filter(|q| q.len() > 1)
            .filter_map(|q| q.keys().next().map(|r| r.node))
    }
    /// Every staged write, all scopes (for a recovering peer).
    pub fn staged_writes(&self) -> Vec<Staged> {
        let mut v = Vec::new();
        for (scope, q) in &self.queues {
            for (&req, slot) in q {
                if let (Some((key, value)), false) = (&slot.write, slot.applied) {
                    v.push(Staged {
                        req,
                        scope: scope.clone(),
                        key: key.clone(),
                        value: value.clone(),
                        orphan: slot.orphan,
                    });
                }
            }
        }
        v
    }
    /// Every staged write with its release mark, per scope: what a
    /// durable server keeps on disk (`durable.rs`).
    pub fn kept(&self) -> BTreeMap<Scope, Vec<Kept>> {
        let mut m = BTreeMap::new();
        for (scope, q) in &self.queues {
            let v: Vec<Kept> = (q.iter())
                .filter_map(|(&req, slot)| {
                    let (key, value) = slot.write.as_ref().filter(|_| !slot.applied)?;
                    let staged = Staged {
                        req,
                        scope: scope.clone(),
                        key: key.clone(),
                        value: value.clone(),
                        orphan: slot.orphan,
                    };
                    let released = slot.released;
                    Some(Kept { staged, released })
                })
                .collect();
            if !v.is_empty() {
                m.insert(scope.clone(), v);
            }
        }
        m
    }
    /// Whether a write of `node` is staged here, waiting for its release.
    pub fn has_staged_of(&self, node: NodeId) -> bool {
        (self.queues.values().flat_map(|q| q.iter()))
            .any(|(r, s)| r.node == node && s.staged().is_some())
    }
    /// The staged writes of `node`'s previous lives.
    pub fn orphans_of(&self, node: NodeId) -> Vec<Staged> {
        let mut v = self.staged_writes();
        v.retain(|s| s.req.node == node && s.orphan);
        v
    }
    /// Whether a staged write of `node`'s previous life waits here.
    pub fn has_orphan_of(&self, node: NodeId) -> bool {
        (self.queues.values().flat_map(|q| q.iter())).any(|(r, s)| r.node == node && s.orphan)
    }
    /// Whether a write of `key` is staged (known, not applied) anywhere.
    pub fn is_staged(&self, key: &[u8]) -> bool {
        (self.queues.values().flat_map(|q| q.values()))
            .any(|s| s.staged().is_some_and(|k| k == key))
    }
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
    /// Queued requests, all scopes.
    pub fn len(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(ts: u64, node: NodeId) -> ReqId {
        ReqId { ts, node, life: 0 }
    }

    /// Lamport's total order: clock first, node id breaks ties (§3.2.2 item 1).
    #[test]
    fn the_head_is_the_lowest_clock_then_the_lowest_node() {
        let mut q = Queues::default();
        let g = Scope::Global;
        q.insert(&g, r(5, 1));
        q.insert(&g, r(3, 2));
        q.insert(&g, r(3, 1));
        q.insert(&g, r(3, 1));
        assert_eq!(q.len(), 3, "a resent request is queued once");
        assert_eq!(q.head(&g), Some(r(3, 1)));
        q.remove(&g, r(3, 1));
        assert_eq!(q.head(&g), Some(r(3, 2)));
        q.remove(&g, r(3, 2));
        assert_eq!(q.head(&g), Some(r(5, 1)));
        q.remove(&g, r(5, 1));
        assert!(q.is_empty(), "an empty scope leaves the map");
    }

    #[test]
    fn scopes_are_independent_queues() {
        let mut q = Queues::default();
        let (a, b) = (Scope::Key("a".into()), Scope::Key("b".into()));
        q.insert(&a, r(9, 2));
        q.insert(&b, r(4, 3));
        q.insert(&a, r(7, 3));
        assert_eq!(q.head(&a), Some(r(7, 3)));
        assert_eq!(q.head(&b), Some(r(4, 3)));
        assert_eq!(q.of_node(3), vec![(a.clone(), r(7, 3)), (b, r(4, 3))]);
        let heads: Vec<_> = q.blocking_heads().collect();
        assert_eq!(heads, vec![3], "b's queue has nobody waiting");
        q.get_mut(&a, r(9, 2)).unwrap().write = Some(("a".into(), None));
        assert!(q.is_staged(b"a") && !q.is_staged(b"b"));
        q.get_mut(&a, r(9, 2)).unwrap().applied = true;
        assert!(!q.is_staged(b"a"));
    }
}
