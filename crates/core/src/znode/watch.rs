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
//!
//! ZooKeeper 3.6's `addWatch` sets watches that stay (they are never
//! removed by firing): a *persistent* one on P fires for everything a data
//! and a child watch on P would (P created, deleted, its data changed, a
//! child created or deleted); a *persistent recursive* one fires for P and
//! every node below it created, deleted or whose data changed, never for
//! `NodeChildrenChanged` (ZooKeeper's rule: the child's own creation or
//! deletion already tells it). An event names the node that changed.

use super::tree::{Change, Tree};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a watch was set by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WatchKind {
    /// `exists` or `getData`.
    Data,
    /// `getChildren`.
    Child,
    /// `addWatch` mode `PERSISTENT`: a data and a child watch that stay.
    Persistent,
    /// `addWatch` mode `PERSISTENT_RECURSIVE`: P and every node below it,
    /// no child events; stays.
    Recursive,
}

impl WatchKind {
    /// A watch that stays once fired.
    pub fn stays(self) -> bool {
        matches!(self, WatchKind::Persistent | WatchKind::Recursive)
    }
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
    /// A persistent (or, `recursive`, persistent recursive) watch: set
    /// again as it was, nothing fires for what changed meanwhile
    /// (ZooKeeper's `setWatches2` does the same).
    Stays { path: String, recursive: bool },
}

impl Rewatch {
    pub fn path(&self) -> &str {
        match self {
            Rewatch::Data { path, .. }
            | Rewatch::Child { path, .. }
            | Rewatch::DataSince { path, .. }
            | Rewatch::ChildSince { path, .. }
            | Rewatch::Stays { path, .. } => path,
        }
    }
    pub fn kind(&self) -> WatchKind {
        match self {
            Rewatch::Data { .. } | Rewatch::DataSince { .. } => WatchKind::Data,
            Rewatch::Child { .. } | Rewatch::ChildSince { .. } => WatchKind::Child,
            Rewatch::Stays {
                recursive: false, ..
            } => WatchKind::Persistent,
            Rewatch::Stays {
                recursive: true, ..
            } => WatchKind::Recursive,
        }
    }
    /// The event this watch would have fired had it stayed, judged from
    /// `tree` now; `None`: the node is as the read saw it (register the
    /// watch). A child list changed and changed back is not seen.
    pub fn missed(&self, tree: &Tree) -> Option<EventType> {
        if let Rewatch::Stays { .. } = self {
            return None;
        }
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
            (Rewatch::Stays { .. }, _) => None,
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

/// Sessions watching each path, for one kind of watch.
type Table = BTreeMap<String, BTreeSet<u64>>;

/// The watches one server holds.
#[derive(Clone, Debug, Default)]
pub struct Watches {
    data: Table,
    child: Table,
    persistent: Table,
    recursive: Table,
}

/// The events of one transaction; each change fires (session, event,
/// path) once, from `from` on.
#[derive(Default)]
struct Fire(Vec<Fired>, usize);

impl Fire {
    fn push<'a>(
        &mut self,
        sessions: impl IntoIterator<Item = &'a u64>,
        event: EventType,
        path: &str,
    ) {
        for &session in sessions {
            let f = Fired {
                session,
                event,
                path: path.to_string(),
            };
            if !self.0[self.1..].contains(&f) {
                self.0.push(f);
            }
        }
    }
}

/// `path` and every node above it, the root last.
fn and_above(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let p = next?;
        next = (p != "/").then(|| super::path::parent(p));
        Some(p)
    })
}

impl Watches {
    pub fn add(&mut self, session: u64, path: &str, kind: WatchKind) {
        self.table(kind)
            .entry(path.to_string())
            .or_default()
            .insert(session);
    }

    fn table(&mut self, kind: WatchKind) -> &mut Table {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::Recursive => &mut self.recursive,
        }
    }

    fn get(&self, kind: WatchKind) -> &Table {
        match kind {
            WatchKind::Data => &self.data,
            WatchKind::Child => &self.child,
            WatchKind::Persistent => &self.persistent,
            WatchKind::Recursive => &self.recursive,
        }
    }

    fn tables(&self) -> [(&Table, WatchKind); 4] {
        use WatchKind::*;
        [Data, Child, Persistent, Recursive].map(|k| (self.get(k), k))
    }

    /// Whether `session` holds a watch of `kind` on `path`.
    pub fn has(&self, session: u64, path: &str, kind: WatchKind) -> bool {
        (self.get(kind).get(path)).is_some_and(|s| s.contains(&session))
    }

    /// Remove `session`'s watch of `kind` on `path`; whether it had one.
    pub fn remove(&mut self, session: u64, path: &str, kind: WatchKind) -> bool {
        let t = self.table(kind);
        let Some(s) = t.get_mut(path) else {
            return false;
        };
        let had = s.remove(&session);
        if s.is_empty() {
            t.remove(path);
        }
        had
    }

    /// Fire every watch `changes` trigger, in change order: the one-shot
    /// ones are forgotten, the persistent ones stay. A session hears of
    /// each change once, whatever watches it holds for it (a persistent
    /// watch hears of two children created by one `multi` twice, as in
    /// ZooKeeper).
    pub fn fire(&mut self, changes: &[Change]) -> Vec<Fired> {
        let mut out = Fire::default();
        for c in changes {
            out.1 = out.0.len();
            let (event, path) = match c {
                Change::Created(p) => (EventType::NodeCreated, p),
                Change::DataChanged(p) => (EventType::NodeDataChanged, p),
                Change::Deleted(p) => (EventType::NodeDeleted, p),
                Change::ChildrenChanged(p) => (EventType::NodeChildrenChanged, p),
            };
            let (data, child) = match event {
                EventType::NodeChildrenChanged => (false, true),
                EventType::NodeDeleted => (true, true),
                _ => (true, false),
            };
            if data {
                out.push(self.data.remove(path).iter().flatten(), event, path);
            }
            if child {
                out.push(self.child.remove(path).iter().flatten(), event, path);
            }
            out.push(self.persistent.get(path).into_iter().flatten(), event, path);
            if event != EventType::NodeChildrenChanged {
                for p in and_above(path) {
                    out.push(self.recursive.get(p).into_iter().flatten(), event, path);
                }
            }
        }
        out.0
    }

    /// The watches `session` holds here, to register again elsewhere.
    pub fn of_session(&self, session: u64) -> Vec<(String, WatchKind)> {
        let pick = |(t, kind): (&Table, WatchKind)| {
            t.iter()
                .filter(|(_, s)| s.contains(&session))
                .map(|(p, _)| (p.clone(), kind))
                .collect::<Vec<_>>()
        };
        self.tables().into_iter().flat_map(pick).collect()
    }

    /// Forget a session's watches (it closed, expired, or moved away).
    pub fn drop_session(&mut self, session: u64) {
        let all = [
            &mut self.data,
            &mut self.child,
            &mut self.persistent,
            &mut self.recursive,
        ];
        for t in all {
            t.retain(|_, s| {
                s.remove(&session);
                !s.is_empty()
            });
        }
    }

    /// Number of (path, session, kind) watches held.
    pub fn len(&self) -> usize {
        let count = |(t, _): (&Table, WatchKind)| t.values().map(BTreeSet::len).sum::<usize>();
        self.tables().into_iter().map(count).sum()
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

    /// ZooKeeper 3.6's persistent watch: every event a data and a child
    /// watch would fire, and it stays.
    #[test]
    fn a_persistent_watch_fires_for_its_node_and_stays() {
        let mut w = Watches::default();
        w.add(1, "/p", WatchKind::Persistent);
        w.add(2, "/p", WatchKind::Data);
        let round = [
            Change::Created("/p".into()),
            Change::ChildrenChanged("/".into()),
            Change::DataChanged("/p".into()),
            Change::Created("/p/a".into()),
            Change::ChildrenChanged("/p".into()),
            Change::Deleted("/p/a".into()),
            Change::ChildrenChanged("/p".into()),
            Change::Deleted("/p".into()),
        ];
        let got = w.fire(&round);
        assert_eq!(
            got,
            vec![
                fired(2, NodeCreated, "/p"),
                fired(1, NodeCreated, "/p"),
                fired(1, NodeDataChanged, "/p"),
                fired(1, NodeChildrenChanged, "/p"),
                fired(1, NodeChildrenChanged, "/p"),
                fired(1, NodeDeleted, "/p"),
            ]
        );
        // It stays; the one-shot data watch is gone.
        assert_eq!(w.len(), 1);
        assert_eq!(w.fire(&round).len(), 5);
        assert_eq!(w.of_session(1), vec![("/p".into(), WatchKind::Persistent)]);
    }

    /// A recursive watch hears of its node and every node below it, never
    /// of children changes; one event per (event, path) per session.
    #[test]
    fn a_recursive_watch_fires_below_without_child_events() {
        let mut w = Watches::default();
        w.add(1, "/r", WatchKind::Recursive);
        w.add(1, "/", WatchKind::Recursive);
        w.add(2, "/r/a", WatchKind::Recursive);
        w.add(3, "/r", WatchKind::Persistent);
        let got = w.fire(&[
            Change::Created("/r/a/b".into()),
            Change::ChildrenChanged("/r/a".into()),
            Change::DataChanged("/r".into()),
            Change::DataChanged("/rx".into()),
            Change::Deleted("/r/a".into()),
            Change::ChildrenChanged("/r".into()),
        ]);
        assert_eq!(
            got,
            vec![
                fired(2, NodeCreated, "/r/a/b"),
                fired(1, NodeCreated, "/r/a/b"),
                fired(3, NodeDataChanged, "/r"),
                fired(1, NodeDataChanged, "/r"),
                fired(1, NodeDataChanged, "/rx"),
                fired(2, NodeDeleted, "/r/a"),
                fired(1, NodeDeleted, "/r/a"),
                fired(3, NodeChildrenChanged, "/r"),
            ]
        );
        assert_eq!(w.len(), 4);
        assert!(w.has(1, "/r", WatchKind::Recursive));
        assert!(!w.has(1, "/r", WatchKind::Persistent));
        assert!(w.remove(1, "/r", WatchKind::Recursive));
        assert!(!w.remove(1, "/r", WatchKind::Recursive));
        w.drop_session(1);
        assert_eq!((w.len(), w.of_session(1)), (2, vec![]));
        assert!(WatchKind::Recursive.stays() && !WatchKind::Data.stays());
    }

    /// A moved persistent watch is set again as it was: nothing fires.
    #[test]
    fn a_moved_persistent_watch_fires_nothing() {
        let t = Tree::default();
        for recursive in [false, true] {
            let w = Rewatch::Stays {
                path: "/gone".into(),
                recursive,
            };
            assert_eq!(w.missed(&t), None);
            let kind = [WatchKind::Persistent, WatchKind::Recursive][usize::from(recursive)];
            assert_eq!((w.path(), w.kind()), ("/gone", kind));
        }
    }
}
