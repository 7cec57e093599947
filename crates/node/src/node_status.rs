//! [`NodeStatus`]: what a replica says about itself (`quorumkv endpoints
//! status`). Plain data, so the wire format and the driver can both name it
//! without depending on how it is asked for (`status`).

use quorumkv_core::NodeId;
use serde::{Deserialize, Serialize};

/// What a replica says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: NodeId,
    pub protocol: String,
    /// The replica's part in its protocol: for ABD every replica is an equal
    /// `replica` (no leader), or `recovering` until it has caught up.
    pub role: String,
    pub version: String,
    pub members: Vec<NodeId>,
    /// Peers with a live link right now.
    pub peers_up: Vec<NodeId>,
    pub durability: String,
    pub uptime_secs: u64,
    /// Records made durable and syncs (fsyncs, or flushes in `buffered`)
    /// since start: the bench reads them around a point to show group
    /// commit (writes per sync).
    #[serde(default)]
    pub persist_records: u64,
    #[serde(default)]
    pub persist_syncs: u64,
    /// The protocol's counters (`Protocol::metrics`), for the bench's
    /// per-point ratios (`ProtocolDef::POINT_RATIOS`).
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
    /// The replica's wire version; `None` from a release before version
    /// fields. Last, so older clients reading a status ignore it.
    #[serde(default, deserialize_with = "crate::version::trailing")]
    pub wire: Option<crate::version::Version>,
    /// Microseconds spent writing and syncing batches since start (with
    /// `persist_syncs`, the bench's mean sync time over a point); `None`
    /// from a release before it. Trailing, like `wire`.
    #[serde(default, deserialize_with = "crate::version::trailing")]
    pub persist_sync_us: Option<u64>,
}

impl NodeStatus {
    /// One of the protocol's counters, if this replica has it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|(n, _)| n == name).map(|c| c.1)
    }
}

impl NodeStatus {
    /// `0.1.0 (wire 1.1)`: the release and wire version, for a table.
    pub fn version_text(&self) -> String {
        let wire = crate::version::Version::of(self.wire.as_ref());
        format!("{} (wire {}.{})", self.version, wire.major, wire.minor)
    }

    /// Peers without a live link.
    pub fn peers_down(&self) -> Vec<NodeId> {
        self.members
            .iter()
            .copied()
            .filter(|m| *m != self.id && !self.peers_up.contains(m))
            .collect()
    }
    /// Whether this replica plus the peers it reaches form a majority.
    pub fn quorum_reachable(&self) -> bool {
        (self.peers_up.len() + 1) * 2 > self.members.len()
    }
    /// Why this replica should not be sent operations, or `None`: it
    /// answers but refuses them (`recovering`, `fenced`), or, with
    /// `quorum`, it does not reach a majority. `quorumkv health` and the
    /// metrics port's `/readyz` share this rule.
    pub fn unready(&self, quorum: bool) -> Option<String> {
        if NOT_SERVING.contains(&self.role.as_str()) {
            return Some(format!("role {}", self.role));
        }
        if quorum && !self.quorum_reachable() {
            return Some(format!(
                "reaches {} of {} replicas (no quorum)",
                self.peers_up.len() + 1,
                self.members.len()
            ));
        }
        None
    }
}

/// Roles of a replica that answers but refuses operations.
const NOT_SERVING: [&str; 2] = ["recovering", "fenced"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_down_and_quorum() {
        let s = NodeStatus {
            id: 2,
            protocol: "abd".into(),
            role: "replica".into(),
            version: "0".into(),
            members: vec![1, 2, 3, 4, 5],
            peers_up: vec![1, 4],
            durability: "memory".into(),
            uptime_secs: 1,
            persist_records: 0,
            persist_syncs: 0,
            counters: vec![("c".into(), 7)],
            wire: None,
            persist_sync_us: None,
        };
        assert_eq!(s.version_text(), "0 (wire 1.0)");
        assert_eq!((s.counter("c"), s.counter("d")), (Some(7), None));
        assert_eq!(s.peers_down(), vec![3, 5]);
        assert!(s.quorum_reachable());
        let alone = NodeStatus {
            peers_up: vec![1],
            ..s
        };
        assert!(!alone.quorum_reachable(), "2 of 5");
    }

    #[test]
    fn recovering_fenced_and_no_quorum_are_unready() {
        let s = NodeStatus {
            members: vec![1, 2, 3],
            peers_up: vec![2],
            role: "replica".into(),
            id: 1,
            protocol: "abd".into(),
            version: String::new(),
            durability: "fsync".into(),
            uptime_secs: 0,
            persist_records: 0,
            persist_syncs: 0,
            counters: vec![],
            wire: Some(crate::version::Version::ours()),
            persist_sync_us: Some(0),
        };
        assert_eq!(s.unready(true), None);
        let alone = NodeStatus {
            peers_up: vec![],
            ..s.clone()
        };
        assert_eq!(alone.unready(false), None);
        assert!(alone.unready(true).unwrap().contains("no quorum"));
        for role in ["recovering", "fenced"] {
            let r = NodeStatus {
                role: role.into(),
                ..s.clone()
            };
            assert_eq!(r.unready(false).unwrap(), format!("role {role}"));
        }
    }

    #[test]
    fn a_status_without_sync_time_decodes_and_an_older_reader_ignores_it() {
        use crate::codec::Frame;
        /// A status as releases before `persist_sync_us` sent it.
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Older {
            id: NodeId,
            protocol: String,
            role: String,
            version: String,
            members: Vec<NodeId>,
            peers_up: Vec<NodeId>,
            durability: String,
            uptime_secs: u64,
            persist_records: u64,
            persist_syncs: u64,
            counters: Vec<(String, u64)>,
            wire: Option<crate::version::Version>,
        }
        let older = Older {
            id: 1,
            protocol: "abd".into(),
            role: "replica".into(),
            version: "0".into(),
            members: vec![1],
            peers_up: vec![],
            durability: "fsync".into(),
            uptime_secs: 3,
            persist_records: 9,
            persist_syncs: 4,
            counters: vec![],
            wire: Some(crate::version::Version::ours()),
        };
        let bytes = postcard::to_allocvec(&older).unwrap();
        let read: NodeStatus = postcard::from_bytes(&bytes).unwrap();
        assert_eq!((read.persist_syncs, read.persist_sync_us), (4, None));
        assert_eq!(read.wire, older.wire);
        let new = NodeStatus {
            persist_sync_us: Some(812),
            ..read
        };
        let frame = postcard::to_allocvec(&Frame::<()>::Status(new.clone())).unwrap();
        match postcard::from_bytes::<Frame<()>>(&frame).unwrap() {
            Frame::Status(s) => assert_eq!(s, new),
            other => panic!("{other:?}"),
        }
        let bytes = postcard::to_allocvec(&new).unwrap();
        assert_eq!(postcard::from_bytes::<Older>(&bytes).unwrap(), older);
    }
}
