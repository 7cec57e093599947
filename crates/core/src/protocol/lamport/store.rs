//! The local copy of the data: a version and a value per key.

use super::msg::Entry;
use crate::types::Tag;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// One server's copy. Deletes keep a tombstone (`None`) with its version,
/// so that a recovery merge cannot resurrect a deleted value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Store {
    map: BTreeMap<Bytes, (Tag, Option<Bytes>)>,
    /// Keys whose version came by a merge, not by a write at its turn.
    merged: BTreeSet<Bytes>,
    /// Keys changed since the last [`Store::take_dirty`] (to persist).
    dirty: BTreeSet<Bytes>,
}

impl Store {
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.map.get(key).and_then(|(_, v)| v.clone())
    }
    pub fn tag(&self, key: &[u8]) -> Tag {
        self.map.get(key).map(|(t, _)| *t).unwrap_or(Tag::ZERO)
    }
    /// Whether a merge brought a version of `key` newer than `tag`: a
    /// write made before it, whose turn comes now, is stale.
    pub fn merged_newer(&self, key: &[u8], tag: Tag) -> bool {
        self.merged.contains(key) && self.tag(key) > tag
    }
    /// Apply a write at its turn in lock order, unconditionally (the
    /// seed's rule: the lock orders writes, and a version check would hide
    /// a broken lock). Returns false if the stored version was newer,
    /// which a correct run never sees (counted as an invariant breach).
    pub fn apply(&mut self, key: Bytes, tag: Tag, value: Option<Bytes>) -> bool {
        let in_order = tag >= self.tag(&key);
        self.merged.remove(&key);
        self.dirty.insert(key.clone());
        self.map.insert(key, (tag, value));
        in_order
    }
    /// Keep the newer version of each entry (recovery and repair).
    pub fn merge(&mut self, entries: Vec<Entry>) {
        for (key, tag, value) in entries {
            if tag > self.tag(&key) {
                self.merged.insert(key.clone());
                self.dirty.insert(key.clone());
                self.map.insert(key, (tag, value));
            }
        }
    }
    /// A register read back from disk after a restart (the last record
    /// of a key wins, as the storage keeps it).
    pub fn restore(&mut self, key: Bytes, tag: Tag, value: Option<Bytes>) {
        self.map.insert(key, (tag, value));
    }
    /// The keys changed since the last call, with their current entry.
    pub fn take_dirty(&mut self) -> Vec<Entry> {
        let keys = std::mem::take(&mut self.dirty);
        (keys.into_iter())
            .filter_map(|k| self.map.get(&k).map(|(t, v)| (k.clone(), *t, v.clone())))
            .collect()
    }
    pub fn snapshot(&self) -> Vec<Entry> {
        (self.map.iter())
            .map(|(k, (t, v))| (k.clone(), *t, v.clone()))
            .collect()
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ts: u64) -> Tag {
        Tag { ts, writer: 1 }
    }

    #[test]
    fn apply_is_unconditional_but_reports_order_and_merge_keeps_the_newer() {
        let mut s = Store::default();
        assert!(s.apply("k".into(), t(2), Some("b".into())));
        assert!(!s.apply("k".into(), t(1), Some("a".into())), "older");
        assert_eq!(s.get(b"k"), Some("a".into()), "applied anyway");
        s.merge(vec![("k".into(), t(1), Some("x".into()))]);
        assert_eq!(s.get(b"k"), Some("a".into()), "not newer: kept");
        s.merge(vec![("k".into(), t(3), None)]);
        assert_eq!((s.get(b"k"), s.tag(b"k")), (None, t(3)), "tombstone");
        assert_eq!(s.snapshot(), vec![("k".into(), t(3), None)]);
        assert_eq!(s.take_dirty(), vec![("k".into(), t(3), None)]);
        assert!(s.take_dirty().is_empty(), "taken");
        s.merge(vec![("k".into(), t(2), Some("old".into()))]);
        assert!(s.take_dirty().is_empty(), "an older merge changes nothing");
    }

    #[test]
    fn restored_registers_are_not_dirty() {
        let mut s = Store::default();
        s.restore("a".into(), t(7), Some("x".into()));
        s.restore("b".into(), t(3), None);
        assert!(s.take_dirty().is_empty());
        assert_eq!((s.get(b"a"), s.tag(b"b")), (Some("x".into()), t(3)));
        assert!(!s.merged_newer(b"a", t(1)), "a restored key was not merged");
    }
}
