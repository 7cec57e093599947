//! Membership change (ZooKeeper 3.5's `reconfig`; Shraer, Reed, Malkhi,
//! Junqueira, "Dynamic Reconfiguration of Primary/Backup Clusters", USENIX
//! ATC 2012): a configuration is the set of voting servers, and a change
//! of it is a log entry like any other. `docs/src/protocols/zab.md`,
//! "Membership change", holds the rules; this file holds the set, its
//! codec and the quorum rule over the configurations in effect.
//!
//! A configuration entry is an ordinary payload (origin, request id, op)
//! whose op starts with [`CONFIG_TAG`], a tag no KV or znode op uses, then
//! a version byte: logs and snapshots written before membership change
//! decode as before, and a later format can be told apart.

use super::codec::{Reader, Writer};
use crate::quorum::majority;
use crate::types::NodeId;
use bytes::Bytes;
use std::collections::BTreeMap;

/// First byte of a configuration op (KV ops use 0..=2, znode ops 3).
pub const CONFIG_TAG: u8 = 0xC5;
/// The encoding's version (the only one so far).
const VERSION: u8 = 1;
/// The most voting members a configuration may have: a larger one in a
/// log or message is refused as corrupt.
pub const MAX_MEMBERS: usize = 64;

/// A configuration: the voting servers, sorted, without duplicates,
/// never empty, no id 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Members(Vec<NodeId>);

impl Members {
    /// The configuration of `ids` (any order, duplicates merged); `None`
    /// if it is empty, too large or names server 0.
    pub fn new(ids: &[NodeId]) -> Option<Members> {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v.dedup();
        let ok = !v.is_empty() && v.len() <= MAX_MEMBERS && v[0] != 0;
        ok.then_some(Members(v))
    }
    pub fn ids(&self) -> &[NodeId] {
        &self.0
    }
    pub fn contains(&self, n: NodeId) -> bool {
        self.0.binary_search(&n).is_ok()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Whether the servers for which `has` holds are a majority of this
    /// configuration.
    pub fn majority_in(&self, has: impl Fn(NodeId) -> bool) -> bool {
        self.0.iter().filter(|&&n| has(n)).count() >= majority(self.0.len())
    }

    pub fn encode(&self, w: &mut Writer) {
        w.u8(CONFIG_TAG);
        w.u8(VERSION);
        w.u64(self.0.len() as u64);
        for &n in &self.0 {
            w.u64(u64::from(n));
        }
    }
    /// Decode after the tag byte was read (and matched).
    pub fn decode_after_tag(r: &mut Reader<'_>) -> Option<Members> {
        if r.u8()? != VERSION {
            return None;
        }
        let n = usize::try_from(r.u64()?).ok()?;
        if n == 0 || n > MAX_MEMBERS {
            return None;
        }
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(NodeId::try_from(r.u64()?).ok()?);
        }
        let m = Members::new(&ids)?;
        // A sorted, duplicate-free list only: one encoding per set.
        (m.0 == ids).then_some(m)
    }
    /// The op of a configuration entry.
    pub fn to_op(&self) -> Bytes {
        let mut w = Writer::default();
        self.encode(&mut w);
        w.finish()
    }
    /// The configuration an op sets, if it is a configuration op.
    pub fn from_op(op: &[u8]) -> Option<Members> {
        let mut r = Reader(op);
        if r.u8()? != CONFIG_TAG {
            return None;
        }
        let m = Self::decode_after_tag(&mut r)?;
        r.0.is_empty().then_some(m)
    }
    /// The configuration a log entry's data sets, if any. The data is a
    /// payload (`state_machine::Payload`: origin, request id, op).
    pub fn from_entry(data: &[u8]) -> Option<Members> {
        let mut r = Reader(data);
        r.u64()?;
        r.u64()?;
        let op = r.bytes()?;
        if !r.0.is_empty() {
            return None;
        }
        Self::from_op(&op)
    }
}

/// Whether the servers for which `has` holds contain a majority of every
/// configuration in `cfgs` (ZooKeeper 3.5: while a reconfiguration is
/// pending, a quorum of the old configuration and one of the new).
pub fn quorum_of_each(cfgs: &[&Members], has: impl Fn(NodeId) -> bool) -> bool {
    cfgs.iter().all(|c| c.majority_in(&has))
}

/// The highest value `v` such that the servers whose value in `vals` is at
/// least `v` hold a majority of every configuration in `cfgs` (a commit
/// index from ACKs, a confirmed round from PONGs); `None` if none does.
pub fn quorum_value_in(cfgs: &[&Members], vals: &BTreeMap<NodeId, u64>) -> Option<u64> {
    let mut cands: Vec<u64> = vals.values().copied().collect();
    cands.sort_unstable_by(|a, b| b.cmp(a));
    cands.dedup();
    let at_least = |v: u64| move |n: NodeId| vals.get(&n).is_some_and(|&x| x >= v);
    (cands.into_iter()).find(|&v| quorum_of_each(cfgs, at_least(v)))
}

#[cfg(test)]
mod tests {
    use super::super::state_machine::Payload;
    use super::*;

    #[test]
    fn sets_are_normalised_and_bounded() {
        assert_eq!(Members::new(&[3, 1, 2, 1]).unwrap().ids(), &[1, 2, 3]);
        assert!(Members::new(&[]).is_none());
        assert!(Members::new(&[0, 1]).is_none());
        let many: Vec<NodeId> = (1..=MAX_MEMBERS as NodeId + 1).collect();
        assert!(Members::new(&many).is_none());
        assert!(Members::new(&many[..MAX_MEMBERS]).is_some());
    }

    #[test]
    fn entries_round_trip_and_other_ops_are_not_configs() {
        let m = Members::new(&[1, 2, 4]).unwrap();
        let p = Payload {
            origin: 7,
            rid: 9,
            op: m.to_op(),
        };
        assert_eq!(Members::from_entry(&p.to_bytes()), Some(m.clone()));
        assert_eq!(Members::from_op(&m.to_op()), Some(m.clone()));
        // A KV put is no configuration, nor is a truncated or padded one.
        let put = super::super::state_machine::Op::Put {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        };
        let p = Payload {
            origin: 1,
            rid: 1,
            op: put.to_bytes(),
        };
        assert_eq!(Members::from_entry(&p.to_bytes()), None);
        let op = m.to_op();
        assert_eq!(Members::from_op(&op[..op.len() - 1]), None);
        let mut long = op.to_vec();
        long.push(0);
        assert_eq!(Members::from_op(&long), None);
        // Another version, an unsorted list, a count past the bound.
        let mut v2 = op.to_vec();
        v2[1] = 2;
        assert_eq!(Members::from_op(&v2), None);
        let mut w = Writer::default();
        w.u8(CONFIG_TAG);
        w.u8(VERSION);
        w.u64(2);
        w.u64(2);
        w.u64(1);
        assert_eq!(Members::from_op(&w.finish()), None);
        let mut w = Writer::default();
        w.u8(CONFIG_TAG);
        w.u8(VERSION);
        w.u64(u64::MAX);
        assert_eq!(Members::from_op(&w.finish()), None);
        let mut w = Writer::default();
        w.u8(CONFIG_TAG);
        w.u8(VERSION);
        w.u64(1);
        w.u64(u64::from(u32::MAX) + 1);
        assert_eq!(Members::from_op(&w.finish()), None, "an id past u32");
    }

    #[test]
    fn a_quorum_of_each_configuration() {
        let old = Members::new(&[1, 2, 3]).unwrap();
        let new = Members::new(&[2, 3, 4, 5]).unwrap();
        let has = |s: &'static [NodeId]| move |n: NodeId| s.contains(&n);
        assert!(quorum_of_each(&[&old], has(&[1, 2])));
        assert!(!quorum_of_each(&[&old, &new], has(&[1, 2, 4])));
        assert!(quorum_of_each(&[&old, &new], has(&[2, 3, 4])));
        assert!(!quorum_of_each(&[&old, &new], has(&[1, 4, 5])));
        assert!(quorum_of_each(&[&new], has(&[3, 4, 5])));
        // Values: 1 and 2 hold 9, 3 holds 5, 4 holds 7, 5 holds 0.
        let vals: BTreeMap<NodeId, u64> = [(1, 9), (2, 9), (3, 5), (4, 7), (5, 0)].into();
        assert_eq!(quorum_value_in(&[&old], &vals), Some(9));
        assert_eq!(quorum_value_in(&[&new], &vals), Some(5));
        assert_eq!(quorum_value_in(&[&old, &new], &vals), Some(5));
        let none: BTreeMap<NodeId, u64> = [(9, 4)].into();
        assert_eq!(quorum_value_in(&[&old], &none), None);
    }
}
