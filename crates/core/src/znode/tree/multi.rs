//! ZooKeeper's `multi` on the tree: the operations applied in order, each
//! seeing the effects of those before it, all or none. Each operation is
//! applied with the tree's own create, delete and setData (so their
//! checks and their ACL checks are the same); a failed one changed
//! nothing, and the ones before it are undone from an undo log that holds
//! only what they changed (never a copy of the tree, nor of a parent's
//! children).

use super::{create_probe, path, Change, Id, Kind, Stamp, Stat, Tree, TxnOk, ZkError, Znode};
use crate::znode::acl;
use crate::znode::op::{MultiOk, MultiOp, MultiOutcome};
use bytes::Bytes;

/// What one applied operation changed, to put back.
enum Undo {
    /// A parent's stat and sequential counter before a child came or went.
    Parent {
        path: String,
        stat: Stat,
        next_seq: u64,
    },
    /// A node the transaction created (childless: a later operation of
    /// the transaction that gave it children is undone first).
    Created(String),
    /// A node the transaction deleted, as it was.
    Deleted(String, Znode),
    /// A node's data and stat before a set.
    Data {
        path: String,
        data: Bytes,
        stat: Stat,
    },
}

impl Tree {
    /// Apply ZooKeeper's `multi` asked by `session` with identities `ids`
    /// as one transaction at `at`: every operation in order, or none.
    /// `Err((i, e))`: operation `i` failed with `e` and the tree is as it
    /// was (but for `last_zxid`, as for any failed transaction); no
    /// change is reported then. On success the changes of all of them,
    /// in order, for the watches to fire once the whole is applied.
    pub fn apply_multi(
        &mut self,
        at: Stamp,
        session: u64,
        ops: &[MultiOp],
        ids: &[Id],
    ) -> (MultiOutcome, Vec<Change>) {
        debug_assert!(
            at.zxid > self.last_zxid,
            "transactions applied out of order"
        );
        self.last_zxid = at.zxid;
        let (mut undo, mut changes) = (Vec::new(), Vec::new());
        let mut done = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            match self.multi_step(at, session, op, ids, &mut undo, &mut changes) {
                Ok(ok) => done.push(ok),
                Err(e) => {
                    while let Some(u) = undo.pop() {
                        self.undo(u);
                    }
                    return (Err((i, e)), Vec::new());
                }
            }
        }
        (Ok(done), changes)
    }

    /// One operation of a multi; what it changed goes on `undo`.
    fn multi_step(
        &mut self,
        at: Stamp,
        session: u64,
        op: &MultiOp,
        ids: &[Id],
        undo: &mut Vec<Undo>,
        changes: &mut Vec<Change>,
    ) -> Result<MultiOk, ZkError> {
        match op {
            MultiOp::Check { path, version } => {
                path::validate(path)?;
                let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
                acl::check(&n.acl, acl::READ, ids)?;
                match version.is_some_and(|v| v != n.stat.version) {
                    true => Err(ZkError::BadVersion),
                    false => Ok(MultiOk::Checked),
                }
            }
            MultiOp::Create {
                path,
                data,
                ephemeral,
                sequential,
                acl,
            } => {
                let how = (Kind::new(*ephemeral, session), *sequential);
                self.multi_create(at, (path, data), how, (acl.as_deref(), ids), undo, changes)
            }
            MultiOp::CreateContainer { path, data, acl } => {
                let how = (Kind::Container, false);
                self.multi_create(at, (path, data), how, (acl.as_deref(), ids), undo, changes)
            }
            MultiOp::CreateTtl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            } => {
                let how = (Kind::Ttl(*ttl_ms), *sequential);
                self.multi_create(at, (path, data), how, (acl.as_deref(), ids), undo, changes)
            }
            MultiOp::Delete { path, version } => {
                let parent = self.parent_undo(path::parent(path));
                let node = (self.nodes.get(path))
                    .filter(|n| n.children.is_empty())
                    .cloned();
                self.delete(at, path, *version, ids, changes)?;
                undo.extend(parent);
                undo.extend(node.map(|n| Undo::Deleted(path.clone(), n)));
                Ok(MultiOk::Deleted)
            }
            MultiOp::SetData {
                path,
                data,
                version,
            } => {
                let before = (self.nodes.get(path)).map(|n| Undo::Data {
                    path: path.clone(),
                    data: n.data.clone(),
                    stat: n.stat,
                });
                let r = self.set_data(at, path, data, *version, ids, changes)?;
                let TxnOk::Set(stat) = r else {
                    unreachable!("a set answers Set")
                };
                undo.extend(before);
                Ok(MultiOk::Set(stat))
            }
        }
    }

    /// A create of any kind in a multi; what it changed goes on `undo`.
    fn multi_create(
        &mut self,
        at: Stamp,
        (path, data): (&str, &Bytes),
        (kind, sequential): (Kind, bool),
        (acl, ids): (Option<&[crate::znode::Acl]>, &[Id]),
        undo: &mut Vec<Undo>,
        changes: &mut Vec<Change>,
    ) -> Result<MultiOk, ZkError> {
        let parent =
            create_probe(path, data, sequential).map(|p| self.parent_undo(path::parent(&p)));
        let r = self.create(at, path, data, (kind, sequential), (acl, ids), changes)?;
        let TxnOk::Created { path, stat } = r else {
            unreachable!("a create answers Created")
        };
        undo.extend(parent.ok().flatten());
        undo.push(Undo::Created(path.clone()));
        Ok(MultiOk::Created { path, stat })
    }

    /// What a child's creation or deletion changes in `parent`.
    fn parent_undo(&self, parent: &str) -> Option<Undo> {
        self.nodes.get(parent).map(|p| Undo::Parent {
            path: parent.to_string(),
            stat: p.stat,
            next_seq: p.next_seq,
        })
    }

    fn undo(&mut self, u: Undo) {
        match u {
            Undo::Parent {
                path,
                stat,
                next_seq,
            } => {
                if let Some(p) = self.nodes.get_mut(&path) {
                    (p.stat, p.next_seq) = (stat, next_seq);
                }
            }
            Undo::Created(path) => {
                let Some(n) = self.nodes.remove(&path) else {
                    return;
                };
                self.link(&path, n.stat.ephemeral_owner, false);
            }
            Undo::Deleted(path, n) => {
                self.link(&path, n.stat.ephemeral_owner, true);
                self.nodes.insert(path, n);
            }
            Undo::Data { path, data, stat } => {
                if let Some(n) = self.nodes.get_mut(&path) {
                    (n.data, n.stat) = (data, stat);
                }
            }
        }
    }

    /// Add `path` to (or take it from) its parent's children and its
    /// owner's ephemerals; the parent's stat is put back by its own undo.
    fn link(&mut self, path: &str, owner: u64, add: bool) {
        let name = path::name(path).to_string();
        if let Some(p) = self.nodes.get_mut(path::parent(path)) {
            match add {
                true => p.children.insert(name),
                false => p.children.remove(&name),
            };
        }
        if let Some(s) = self.sessions.get_mut(&owner) {
            match add {
                true => s.ephemerals.insert(path.to_string()),
                false => s.ephemerals.remove(path),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::znode::Acl;
    use crate::znode::Txn;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn create(path: &str, ephemeral: bool, sequential: bool) -> MultiOp {
        MultiOp::Create {
            path: path.into(),
            data: b(path),
            ephemeral,
            sequential,
            acl: None,
        }
    }

    fn check(path: &str, version: Option<u32>) -> MultiOp {
        MultiOp::Check {
            path: path.into(),
            version,
        }
    }

    fn set(path: &str, version: Option<u32>) -> MultiOp {
        MultiOp::SetData {
            path: path.into(),
            data: b("new"),
            version,
        }
    }

    fn delete(path: &str) -> MultiOp {
        MultiOp::Delete {
            path: path.into(),
            version: None,
        }
    }

    /// A tree and the zxid of its last transaction.
    struct T(Tree, u64);

    impl T {
        fn at(&mut self) -> Stamp {
            self.1 += 1;
            Stamp {
                zxid: self.1,
                time_ms: 100 * self.1,
            }
        }
        fn multi(&mut self, ops: &[MultiOp]) -> MultiOutcome {
            self.multi_as(ops, &[]).0
        }
        fn multi_as(&mut self, ops: &[MultiOp], ids: &[Id]) -> (MultiOutcome, Vec<Change>) {
            let at = self.at();
            self.0.apply_multi(at, 7, ops, ids)
        }
        fn txn(&mut self, txn: Txn) {
            let at = self.at();
            self.0.apply(at, &txn).0.unwrap();
        }
        /// Everything but `last_zxid`.
        fn state(&self) -> (BTreeMap<String, Znode>, BTreeMap<u64, Session>) {
            (self.0.nodes.clone(), self.0.sessions.clone())
        }
    }

    use super::super::Session;
    use std::collections::BTreeMap;

    /// A tree with session 7 open, `/p` persistent, `/p/e` its ephemeral
    /// and `/q` for sequential children.
    fn tree() -> T {
        let mut t = T(Tree::default(), 0);
        t.txn(Txn::OpenSession {
            session: 7,
            timeout_ms: 1000,
        });
        assert!(t
            .multi(&[create("/p", false, false), create("/q", false, false)])
            .is_ok());
        assert!(t.multi(&[create("/p/e", true, false)]).is_ok());
        t
    }

    /// Later operations see the earlier ones' effects; every answer is
    /// the one the operation alone would give at that point; all share
    /// one zxid; sequential creates take consecutive numbers.
    #[test]
    fn operations_apply_in_order_and_see_each_other() {
        let mut t = tree();
        let ops = [
            create("/x", false, false),
            create("/x/y", false, false),
            set("/x", Some(0)),
            check("/x", Some(1)),
            delete("/x/y"),
            create("/q/n-", false, true),
            create("/q/n-", true, true),
            set("/x", Some(1)),
        ];
        let (r, changes) = t.multi_as(&ops, &[]);
        let done = r.unwrap();
        let zxid = t.1;
        let MultiOk::Created { path, stat } = &done[0] else {
            panic!("{done:?}")
        };
        assert_eq!((path.as_str(), stat.czxid), ("/x", zxid));
        assert_eq!(done[3], MultiOk::Checked);
        assert_eq!(done[4], MultiOk::Deleted);
        let seq: Vec<&str> = (done[5..7].iter())
            .map(|d| match d {
                MultiOk::Created { path, .. } => path.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seq, ["/q/n-0000000000", "/q/n-0000000001"]);
        let MultiOk::Set(st) = done[7] else { panic!() };
        assert_eq!((st.version, st.mzxid, st.czxid), (2, zxid, zxid));
        let (_, x) = t.0.get_data("/x").unwrap();
        assert_eq!((x.cversion, x.num_children, x.pzxid), (2, 0, zxid));
        assert!(t.0.sessions[&7].ephemerals.contains("/q/n-0000000001"));
        assert_eq!(t.0.last_zxid(), zxid);
        // The changes of every operation, in order, for the watches.
        assert_eq!(changes[0], Change::Created("/x".into()));
        assert!(changes.contains(&Change::Deleted("/x/y".into())));
        assert_eq!(changes.last(), Some(&Change::DataChanged("/x".into())));
    }

    /// A failing operation anywhere leaves the tree as it was: creates,
    /// deletes (an ephemeral's owner too), sets, parents' counters and
    /// the sequential counter all put back; no change reported; the
    /// index and error of the first failure answered.
    #[test]
    fn a_failing_operation_leaves_nothing() {
        let mut t = tree();
        let before = t.state();
        let ops = [
            create("/q/n-", true, true),
            create("/p/c", false, false),
            set("/p", None),
            delete("/p/e"),
            delete("/p/c"),
            create("/p/c", false, false),
            create("/p/c/d", false, false),
            check("/p", Some(0)),
            create("/never", false, false),
        ];
        let (r, changes) = t.multi_as(&ops, &[]);
        assert_eq!(r, Err((7, ZkError::BadVersion)));
        assert!(changes.is_empty());
        assert_eq!(t.state(), before);
        assert_eq!(t.0.last_zxid(), t.1, "delivered: last_zxid moves");
        assert_eq!(t.0.check_ephemerals(), Ok(()));
        // Each kind of failure, at its index.
        let cases: [(Vec<MultiOp>, (usize, ZkError)); 5] = [
            (vec![check("/none", None)], (0, ZkError::NoNode)),
            (
                vec![create("/p/z", false, false), create("/p/z", false, false)],
                (1, ZkError::NodeExists),
            ),
            (
                vec![create("/q/z", false, false), delete("/q")],
                (1, ZkError::NotEmpty),
            ),
            (
                vec![delete("/p/e"), create("/p/e/x", false, false)],
                (1, ZkError::NoNode),
            ),
            (
                vec![set("/p", None), set("/p", Some(0))],
                (1, ZkError::BadVersion),
            ),
        ];
        for (ops, want) in cases {
            assert_eq!(t.multi(&ops), Err(want), "{ops:?}");
            assert_eq!(t.state(), before, "{ops:?}");
        }
        // The sequential counter was put back: the next suffix is 0.
        let done = t.multi(&[create("/q/n-", false, true)]).unwrap();
        assert!(matches!(&done[0], MultiOk::Created { path, .. } if path == "/q/n-0000000000"));
        // An empty multi changes nothing and succeeds.
        assert_eq!(t.multi(&[]), Ok(vec![]));
    }

    /// Each operation checks its own ACL: `check` needs READ, the others
    /// what they need alone; a refused one rolls back those before it.
    #[test]
    fn each_operation_checks_its_acl() {
        let mut t = tree();
        let alice = Id::new("user", "alice");
        let only_alice = vec![Acl::new(acl::ALL, "user", "alice")];
        let secret = MultiOp::Create {
            path: "/s".into(),
            data: b(""),
            ephemeral: false,
            sequential: false,
            acl: Some(only_alice),
        };
        assert!(t.multi(&[secret]).is_ok());
        let before = t.state();
        let alice_ids = std::slice::from_ref(&alice);
        for ops in [
            vec![check("/s", None)],
            vec![create("/p/a", false, false), set("/s", None)],
            vec![create("/s/kid", false, false)],
        ] {
            assert_eq!(t.multi(&ops).unwrap_err().1, ZkError::NoAuth, "{ops:?}");
            assert_eq!(t.state(), before);
        }
        let ops = [check("/s", Some(0)), create("/s/kid", false, false)];
        assert!(t.multi_as(&ops, alice_ids).0.is_ok());
    }

    /// A container's and a TTL node's creates in a multi make what their
    /// single requests make; undone with the rest when a later one fails.
    #[test]
    fn containers_and_ttl_nodes_in_a_multi() {
        let mut t = tree();
        let container = MultiOp::CreateContainer {
            path: "/mc".into(),
            data: b("c"),
            acl: None,
        };
        let ttl = MultiOp::CreateTtl {
            path: "/mt-".into(),
            data: b("t"),
            sequential: true,
            ttl_ms: 100,
            acl: None,
        };
        let bad_ttl = MultiOp::CreateTtl {
            path: "/bad".into(),
            data: b("t"),
            sequential: false,
            ttl_ms: 0,
            acl: None,
        };
        let before = t.state();
        let r = t.multi(&[container.clone(), ttl.clone(), bad_ttl]);
        assert!(matches!(r, Err((2, ZkError::BadArguments(_)))), "{r:?}");
        assert!(t.state() == before, "nothing of a failed multi stays");
        let Ok(done) = t.multi(&[container, ttl, create("/mc/k", false, false)]) else {
            panic!("the multi applies")
        };
        let stats: Vec<Stat> = (done.iter())
            .map(|d| match d {
                MultiOk::Created { stat, .. } => *stat,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(stats[0].is_container());
        assert_eq!(stats[1].ttl(), Some(100));
        assert!(matches!(&done[1], MultiOk::Created { path, .. } if path.starts_with("/mt-")));
    }
}
