//! One-shot watches (seed 001 §II.C): a server keeps the watches of the
//! sessions connected to it, and when it applies a transaction it fires the
//! ones the transaction's changes trigger, each once. Watches are not
//! replicated (as in ZooKeeper): a session that moves to another server
//! registers its watches there again ([`Rewatch`]: what it saw of each
//! node, so that a change made while it moved fires at once).
//!
//! Which change fires which watch is ZooKeeper's rule: `exists` and
//! `getData` set a *data* watch (fired by the node's creation, deletion or
//! data change), `getChildren` a *child* watch (fired by a child created or
//! deleted, or by the node's own deletion).

use super::tree::{Change, Tree};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a watch was set by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchKind {
    /// `exists` or `getData`.
    Data,
    /// `getChildren`.
    Child,
}

/// ZooKeeper's event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

impl EventType {
    /// The word an event frame carries (`Event::kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::NodeCreated => "created",
            EventType::NodeDeleted => "deleted",
            EventType::NodeDataChanged => "changed",
            EventType::NodeChildrenChanged => "children",
        }
    }
    pub fn parse(s: &str) -> Option<EventType> {
        Some(match s {
            "created" => EventType::NodeCreated,
            "deleted" => EventType::NodeDeleted,
            "changed" => EventType::NodeDataChanged,
            "children" => EventType::NodeChildrenChanged,
            _ => return None,
        })
    }
}

/// A watch a session set at another server, sent again when it moves
/// (ZooKeeper's `SetWatches`), with what its read saw of the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rewatch {
    /// Set by `exists` or `getData`; `mzxid`: the node's last change as
    /// read, `None`: there was no node.
    Data { path: String, mzxid: Option<u64> },
    /// Set by `getChildren`; the children as read.
    Child { path: String, children: Vec<String> },
    /// ZooKeeper's form (`SetWatches`' data watches): a data watch on a
    /// node that existed, by a client that has seen everything up to
    /// `zxid` (its `relativeZxid`): fired if the node is gone or changed
    /// after `zxid`.
    DataSince { path: String, zxid: u64 },
    /// ZooKeeper's form of a child watch: fired if the node is gone or its
    /// children changed (`pzxid`) after `zxid`.
    ChildSince { path: String, zxid: u64 },
}

impl Rewatch {
    pub fn path(&self) -> &str {
        match self {
            Rewatch::Data { path, .. }
            | Rewatch::Child { path, .. }
            | Rewatch::DataSince { path, .. }
            | Rewatch::ChildSince { path, .. } => path,
        }
    }
    pub fn kind(&self) -> WatchKind {
        match self {
            Rewatch::Data { .. } | Rewatch::DataSince { .. } => WatchKind::Data,
            Rewatch::Child { .. } | Rewatch::ChildSince { .. } => WatchKind::Child,
        }
    }
    /// The event this watch would have fired had it stayed, judged from
    /// `tree` now; `None`: the node is as the read saw it (register the
    /// watch). A child list changed and changed back is not seen.
    pub fn missed(&self, tree: &Tree) -> Option<EventType> {
        let now = tree.exists(self.path()).ok().flatten();
        match (self, now) {
            (Rewatch::Data { mzxid: None, .. }, Some(_)) => Some(EventType::NodeCreated),
            (Rewatch::Data { mzxid: None, .. }, None) => None,
            (Rewatch::Data { mzxid: Some(_), .. }, None) => Some(EventType::NodeDeleted),
            (Rewatch::Data { mzxid: Some(m), .. }, Some(stat)) => {
                (stat.mzxid != *m).then_some(EventType::NodeDataChanged)
            }
            (Rewatch::Child { .. }, None) => Some(EventType::NodeDeleted),
            (Rewatch::Child { path, children }, Some(_)) => {
                let same = tree.children(path).is_ok_and(|c| c == *children);
                (!same).then_some(EventType::NodeChildrenChanged)
            }
            (Rewatch::DataSince { .. } | Rewatch::ChildSince { .. }, None) => {
                Some(EventType::NodeDeleted)
            }
            (Rewatch::DataSince { zxid, .. }, Some(stat)) => {
                (stat.mzxid > *zxid).then_some(EventType::NodeDataChanged)
            }
            (Rewatch::ChildSince { zxid, .. }, Some(stat)) => {
                (stat.pzxid > *zxid).then_some(EventType::NodeChildrenChanged)
            }
        }
    }
}

/// A fired watch: tell `session` that `path` saw `event`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fired {
    pub session: u64,
    pub event: EventType,
    pub path: String,
}

/// The watches one server holds.
#[derive(Clone, Debug, Default)]
pub struct Watches {
    data: BTreeMap<String, BTreeSet<u64>>,
    child: BTreeMap<String, BTreeSet<u64>>,
}

impl Watches {
    pub fn add(&mut self, session: u64, path: &str, kind: WatchKind) {
        self.table(kind)
            .entry(path.to_string())
            .or_default()
            .insert(session);
    }

    fn table(&mut self, kind: WatchKind) -> &mut BTreeMap<String, BTreeSet<u64>> {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
        }
    }

    /// Fire (and forget) every watch `changes` trigger, in change order. A
    /// session with a data and a child watch on a deleted node hears of it
    /// once.
    pub fn fire(&mut self, changes: &[Change]) -> Vec<Fired> {
        let mut out: Vec<Fired> = Vec::new();
        let mut push = |sessions: Option<BTreeSet<u64>>, event, path: &str| {
            for session in sessions.into_iter().flatten() {
                let f = Fired {
                    session,
                    event,
                    path: path.to_string(),
                };
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        };
        for c in changes {
            match c {
                Change::Created(p) => push(self.data.remove(p), EventType::NodeCreated, p),
                Change::DataChanged(p) => push(self.data.remove(p), EventType::NodeDataChanged, p),
                Change::Deleted(p) => {
                    push(self.data.remove(p), EventType::NodeDeleted, p);
                    push(self.child.remove(p), EventType::NodeDeleted, p);
                }
                Change::ChildrenChanged(p) => {
                    push(self.child.remove(p), EventType::NodeChildrenChanged, p)
                }
            }
        }
        out
    }

    /// The watches `session` holds here, to register again elsewhere.
    pub fn of_session(&self, session: u64) -> Vec<(String, WatchKind)> {
        let pick = |t: &BTreeMap<String, BTreeSet<u64>>, kind| {
            t.iter()
                .filter(|(_, s)| s.contains(&session))
                .map(|(p, _)| (p.clone(), kind))
                .collect::<Vec<_>>()
        };
        let mut v = pick(&self.data, WatchKind::Data);
        v.extend(pick(&self.child, WatchKind::Child));
        v
    }

    /// Forget a session's watches (it closed, expired, or moved away).
    pub fn drop_session(&mut self, session: u64) {
        for t in [&mut self.data, &mut self.child] {
            t.retain(|_, s| {
                s.remove(&session);
                !s.is_empty()
            });
        }
    }

    /// Number of (path, session) watches held.
    pub fn len(&self) -> usize {
        self.data
            .values()
            .chain(self.child.values())
            .map(BTreeSet::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType::*;

    fn fired(session: u64, event: EventType, path: &str) -> Fired {
        Fired {
            session,
            event,
            path: path.into(),
        }
    }

    #[test]
    fn a_moved_watch_fires_for_what_changed_since_its_read() {
        use crate::znode::{Stamp, Txn};
        let mut t = Tree::default();
        let mut zxid = 0;
        let mut run = |t: &mut Tree, txn: Txn| {
            zxid += 1;
            let at = Stamp { zxid, time_ms: 0 };
            assert!(t.apply(at, &txn).0.is_ok());
        };
        let create = |path: &str| Txn::Create {
            path: path.into(),
            data: bytes::Bytes::new(),
            ephemeral: false,
            sequential: false,
            session: 0,
            acl: None,
        };
        run(&mut t, create("/a"));
        let read = t.exists("/a").unwrap().unwrap().mzxid;
        let data = |path: &str, mzxid| Rewatch::Data {
            path: path.into(),
            mzxid,
        };
        let child = |children: &[&str]| Rewatch::Child {
            path: "/a".into(),
            children: children.iter().map(|c| c.to_string()).collect(),
        };
        // Unchanged: set again, nothing fires.
        assert_eq!(data("/a", Some(read)).missed(&t), None);
        assert_eq!(data("/b", None).missed(&t), None);
        assert_eq!(child(&[]).missed(&t), None);
        run(&mut t, create("/a/k"));
        run(&mut t, create("/b"));
        let set = Txn::SetData {
            path: "/a".into(),
            data: bytes::Bytes::from_static(b"x"),
            version: None,
        };
        run(&mut t, set);
        assert_eq!(data("/a", Some(read)).missed(&t), Some(NodeDataChanged));
        assert_eq!(data("/b", None).missed(&t), Some(NodeCreated));
        assert_eq!(child(&[]).missed(&t), Some(NodeChildrenChanged));
        assert_eq!(child(&["k"]).missed(&t), None);
        assert_eq!(data("/c", Some(read)).missed(&t), Some(NodeDeleted));
        let gone = Rewatch::Child {
            path: "/c".into(),
            children: vec![],
        };
        assert_eq!(gone.missed(&t), Some(NodeDeleted));
        assert_eq!((gone.path(), gone.kind()), ("/c", WatchKind::Child));
        // ZooKeeper's form, against the client's last zxid: /a was made
        // at 1, its child at 2, its data set at 4.
        let since = |path: &str, zxid, child: bool| match child {
            false => Rewatch::DataSince {
                path: path.into(),
                zxid,
            },
            true => Rewatch::ChildSince {
                path: path.into(),
                zxid,
            },
        };
        assert_eq!(since("/a", 3, false).missed(&t), Some(NodeDataChanged));
        assert_eq!(since("/a", 4, false).missed(&t), None);
        assert_eq!(since("/a", 1, true).missed(&t), Some(NodeChildrenChanged));
        assert_eq!(since("/a", 2, true).missed(&t), None);
        assert_eq!(since("/c", 9, false).missed(&t), Some(NodeDeleted));
        assert_eq!(since("/c", 9, true).missed(&t), Some(NodeDeleted));
        assert_eq!(since("/a", 4, true).kind(), WatchKind::Child);
    }

    #[test]
    fn each_change_fires_its_watches_once() {
        let mut w = Watches::default();
        w.add(1, "/a", WatchKind::Data);
        w.add(2, "/a", WatchKind::Data);
        w.add(3, "/", WatchKind::Child);
        let ch = [
            Change::Created("/a".into()),
            Change::ChildrenChanged("/".into()),
        ];
        assert_eq!(
            w.fire(&ch),
            vec![
                fired(1, NodeCreated, "/a"),
                fired(2, NodeCreated, "/a"),
                fired(3, NodeChildrenChanged, "/")
            ]
        );
        // One-shot: the same changes again fire nothing.
        assert_eq!(w.fire(&ch), vec![]);
        assert!(w.is_empty());
    }

    #[test]
    fn data_changes_do_not_fire_child_watches() {
        let mut w = Watches::default();
        w.add(1, "/a", WatchKind::Child);
        w.add(2, "/a", WatchKind::Data);
        assert_eq!(
            w.fire(&[Change::DataChanged("/a".into())]),
            vec![fired(2, NodeDataChanged, "/a")]
        );
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn a_deletion_fires_both_kinds_once_per_session() {
        let mut w = Watches::default();
        w.add(1, "/a", WatchKind::Child);
        w.add(1, "/a", WatchKind::Data);
        w.add(2, "/a", WatchKind::Child);
        let got = w.fire(&[Change::Deleted("/a".into())]);
        assert_eq!(
            got,
            vec![fired(1, NodeDeleted, "/a"), fired(2, NodeDeleted, "/a")]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn sessions_move_and_leave() {
        let mut w = Watches::default();
        w.add(1, "/a", WatchKind::Data);
        w.add(1, "/b", WatchKind::Child);
        w.add(2, "/a", WatchKind::Data);
        assert_eq!(
            w.of_session(1),
            vec![
                ("/a".to_string(), WatchKind::Data),
                ("/b".to_string(), WatchKind::Child)
            ]
        );
        w.drop_session(1);
        assert_eq!(w.of_session(1), vec![]);
        assert_eq!(w.len(), 1);
        for e in [
            NodeCreated,
            NodeDeleted,
            NodeDataChanged,
            NodeChildrenChanged,
        ] {
            assert_eq!(EventType::parse(e.as_str()), Some(e));
        }
        assert_eq!(EventType::parse("x"), None);
    }
}
