//! The coordination service on Zab (seed 001 §II.C, PROTOCOLS.md §7): the
//! znode tree (`crate::znode`) as part of the replicated machine, sessions
//! and their expiry by the leader, one-shot watches.
//!
//! * **Writes and `sync` go through the log; reads take a read index.**
//!   `exists`, `getData` and `getChildren` are served like `read=index` KV
//!   reads: the leader confirms its commit index with a quorum round (no
//!   log entry, no fsync), the server the client asked answers from its
//!   tree once it applied that index, and sets the read's watch at that
//!   same point. A read also waits for the writes its connection sent
//!   before it, so a session's requests, pipelined or not, take effect in
//!   the order sent. Reads are linearizable, `sync` is linearizable
//!   (ZooKeeper's is not), and a watch misses no change after the read it
//!   came with. `sync` answers with the zxid it was delivered at.
//! * **Stamps**: the zxid is the log index (czxid, mzxid, pzxid); the
//!   time (ctime, mtime) is the leader's clock when it proposed the entry,
//!   written into the entry by `propose` ([`stamp`]), so every replica
//!   stamps the same times.
//! * **Sessions**: a session is the client's id (`OpId::client`), so it
//!   moves to another server intact. Opened and closed as transactions.
//!   Liveness is not replicated: a server notes the sessions it heard from
//!   (any request, `Ping` heartbeats); a follower reports them to its
//!   leader each tick (`Msg::Touch`); the leader expires a session silent
//!   for its timeout by proposing `CloseSession`, which deletes its
//!   ephemerals in one transaction. A new leader starts every session's
//!   clock afresh (as ZooKeeper does). A closed connection alone expires
//!   nothing: the seed's "deleted when a client disconnects" (line 52) is
//!   read as "when its session times out", as ZooKeeper does, so a client
//!   may reconnect elsewhere within its timeout and keep its ephemerals.
//!   A write of a session that is gone is refused with `SessionExpired`
//!   when the client said it works only inside its session
//!   (`znode::tree::SESSION_BOUND`): a write held up at a paused server
//!   cannot apply after its client closed the session and moved on.
//! * **Watches** are held by the server the client asked, for its
//!   connection, and fired when a transaction applies there; the event
//!   (`Command::Notify`) and every later answer to that connection are
//!   both held behind the same persists (`Out::notify`, `Out::reply`), in
//!   order: an event arrives before any later reply.

use super::codec::{Reader, Writer};
use super::state_machine::{KvStore, StateMachine};
use super::zentry::{ZEntry, EXPIRY, TAG};
use crate::protocol::contract::Out;
use crate::types::{ClientRef, Event, OpError, Request, Response, Time};
use crate::znode::op::{expired_event, MultiOp, ZnodeOp, ZnodeReply};
use crate::znode::tree::session_bound;
use crate::znode::{acl, Fired, Id, Stamp, Tree, Txn, TxnOk, WatchKind, Watches, ZkError};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// Znode reads served by a read index: `exists`, `getData`,
/// `getChildren` and `SetWatches`. The leader confirms its commit index with a quorum round
/// (no log entry, no fsync) and the server the client asked answers from
/// its tree once it applied that index, setting the watch at that point
/// (`ZabNode::serve_reads`). `sync` and `Ping` are not among them.
pub fn read_by_index(req: &Request) -> bool {
    matches!(
        req,
        Request::Znode(
            ZnodeOp::Exists { .. }
                | ZnodeOp::GetData { .. }
                | ZnodeOp::GetChildren { .. }
                | ZnodeOp::SetWatches { .. }
                | ZnodeOp::GetAcl { .. }
                | ZnodeOp::ResumeSession
                | ZnodeOp::MultiRead { .. }
                | ZnodeOp::AddWatch { .. }
                | ZnodeOp::RemoveWatches { .. }
                | ZnodeOp::GetEphemerals { .. }
        )
    )
}

/// Whether an encoded znode operation takes a read index even with
/// `read=local`: a resume, since a lagging replica must not call an open
/// session expired (final for the client).
pub fn needs_index(op: &[u8]) -> bool {
    let mut r = Reader(op);
    r.u8() == Some(TAG) && ZEntry::decode(&mut r).is_some_and(|e| e.op == ZnodeOp::ResumeSession)
}

/// Whether an encoded operation is a znode entry.
pub fn is_znode(op: &[u8]) -> bool {
    op.first() == Some(&TAG)
}

/// How a server answers a client's entry: znode answers are held like
/// events (`reply`), so that an event never arrives after a later answer;
/// KV answers go at once (`reply_now`, what is delivered is committed).
pub(super) fn answer<M: Clone, T>(out: &mut Out<M, T>, client: ClientRef, resp: Response) {
    match resp {
        Response::Znode(_) => out.reply(client, resp),
        _ => out.reply_now(client, resp),
    }
}

/// Zab's replicated machine: the KV store and the znode tree, plus what
/// this server alone holds (watches, session liveness, events to push).
#[derive(Debug, Default)]
pub struct Machine {
    pub kv: KvStore,
    pub tree: Tree,
    pub(super) watches: Watches,
    /// Events fired by the last `apply_at`, for `(connection, event)`.
    events: Vec<(u64, Event)>,
    /// Connections each session used here (for the `expired` event).
    pub(super) conns: BTreeMap<u64, BTreeSet<u64>>,
    /// Leader only: when each session was last heard of.
    pub(super) heard: BTreeMap<u64, Time>,
    /// Follower only: sessions heard since the last tick.
    pub(super) touched: BTreeSet<u64>,
    /// The identities of each client connection here (`AddAuth`, a native
    /// login), as ZooKeeper's `ServerCnxn.authInfo`: not replicated, they
    /// go into each entry the connection asks for (`ZEntry::ids`).
    idents: BTreeMap<u64, Vec<Id>>,
    /// Leader only: the empty containers seen, to delete.
    pub(super) reaper: Reaper,
    /// Injected bug `zab-znode-keep-ephemerals`: a close changes nothing.
    pub(super) keep_ephemerals: bool,
    /// Injected bug `zab-znode-orphan-ephemerals`: a close deletes none of
    /// the session's ephemerals.
    pub(super) orphan_ephemerals: bool,
    /// Injected bug `zab-znode-watch-early`: writes fire watches on arrival.
    pub(super) watch_early: bool,
}

/// The leader's look at empty containers and TTL nodes (`sessions.rs`):
/// when each container was first seen empty, when each TTL node was first
/// seen with its last change (`mzxid`), and when to look again.
#[derive(Debug, Default)]
pub(super) struct Reaper {
    pub(super) seen: BTreeMap<String, Time>,
    pub(super) next: Time,
    pub(super) ttl_seen: BTreeMap<String, (u64, Time)>,
    pub(super) ttl_next: Time,
}

// `Watches` has no `PartialEq`: two machines are equal by replicated state.
impl PartialEq for Machine {
    fn eq(&self, other: &Machine) -> bool {
        self.kv == other.kv && self.tree == other.tree
    }
}

/// A fired watch as the event pushed to its connection.
pub(super) fn fired_event(f: Fired) -> (u64, Event) {
    let event = Event {
        kind: f.event.as_str().into(),
        key: Bytes::from(f.path.into_bytes()),
        value: None,
    };
    (f.session, event)
}

/// The transaction of a container's or a TTL node's create.
fn marked_txn(op: ZnodeOp) -> Txn {
    match op {
        ZnodeOp::CreateContainer { path, data, acl } => Txn::CreateContainer { path, data, acl },
        ZnodeOp::CreateTtl {
            path,
            data,
            sequential,
            ttl_ms,
            acl,
        } => Txn::CreateTtl {
            path,
            data,
            sequential,
            ttl_ms,
            acl,
        },
        other => unreachable!("{} is not a container's or TTL node's create", other.name()),
    }
}

pub(super) fn zk(r: Result<ZnodeReply, ZkError>) -> Response {
    Response::Znode(r.unwrap_or_else(ZnodeReply::Error))
}

impl Machine {
    /// [`StateMachine::snapshot`] with `tree` for ours.
    fn snapshot_with(&self, tree: &Tree) -> Bytes {
        let mut v = self.kv.snapshot().to_vec();
        let mut w = Writer::default();
        w.bytes(&tree.snapshot());
        v.extend_from_slice(&w.finish());
        Bytes::from(v)
    }

    /// The state for `quorumkv snapshot save`: as a snapshot, without the
    /// sessions and their ephemerals ([`Tree::without_sessions`]); and how
    /// many KV keys and znodes (the root included) it holds.
    pub fn export_state(&self) -> (Bytes, u64) {
        let tree = self.tree.without_sessions();
        let entries = (self.kv.len() + tree.len()) as u64;
        (self.snapshot_with(&tree), entries)
    }

    /// Number of KV keys (the status line's `keys=`).
    pub fn len(&self) -> usize {
        self.kv.len()
    }
    pub fn is_empty(&self) -> bool {
        self.kv.is_empty() && self.tree.is_empty()
    }
    /// The events the last applies fired, in order.
    pub fn take_events(&mut self) -> Vec<(u64, Event)> {
        std::mem::take(&mut self.events)
    }
    /// Number of watches held here.
    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }
    /// A client connection closed: its watches go (the session lives on
    /// until it times out).
    pub fn drop_conn(&mut self, conn: u64) {
        self.watches.drop_session(conn);
        self.idents.remove(&conn);
        for c in self.conns.values_mut() {
            c.remove(&conn);
        }
        self.conns.retain(|_, c| !c.is_empty());
    }

    /// The identities connection `conn` has here, for its next entry.
    pub(super) fn ids_of(&self, conn: u64) -> Vec<Id> {
        self.idents.get(&conn).cloned().unwrap_or_default()
    }

    /// `AddAuth` on connection `conn`: `digest` with `user:password` adds
    /// `digest:user:base64(sha1(user:password))`; `user` (sent only by the
    /// node layer for a native login, refused from clients there) sets the
    /// connection's one `user` identity.
    pub(super) fn add_auth(
        &mut self,
        conn: u64,
        scheme: &str,
        auth: &str,
    ) -> Result<ZnodeReply, ZkError> {
        let id = match scheme {
            "digest" => Id::new("digest", &acl::digest(auth)?),
            "user" if !auth.is_empty() && !auth.contains(':') => Id::new("user", auth),
            _ => {
                let why = format!("no auth scheme {scheme:?} (digest user:password)");
                return Err(ZkError::BadArguments(why));
            }
        };
        let ids = self.idents.entry(conn).or_default();
        if scheme == "user" {
            ids.retain(|i| i.scheme != "user");
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
        Ok(ZnodeReply::AuthAdded)
    }

    /// ZooKeeper's rule for a session that is gone, for session-bound
    /// clients (`SESSION_BOUND`): a write under a session the tree does not
    /// hold open. Decided on the applied tree, so every replica answers
    /// alike.
    fn written_by_a_gone_session(&self, e: &ZEntry) -> bool {
        let opens_or_closes = matches!(e.op, ZnodeOp::OpenSession { .. } | ZnodeOp::CloseSession);
        session_bound(e.session)
            && !(e.op.is_read() || opens_or_closes)
            && !self.tree.has_session(e.session)
    }

    fn apply_znode(&mut self, index: u64, e: ZEntry, here: bool) -> Response {
        let at = Stamp {
            zxid: index,
            time_ms: e.time_ms,
        };
        let txn = match e.op {
            ZnodeOp::OpenSession { timeout_ms } => Txn::OpenSession {
                session: e.session,
                timeout_ms,
            },
            ZnodeOp::CloseSession => Txn::CloseSession { session: e.session },
            op @ (ZnodeOp::Create { .. } | ZnodeOp::CreateWithAcl { .. }) => {
                let n = op.into_create().expect("a create");
                Txn::Create {
                    path: n.path,
                    data: n.data,
                    ephemeral: n.ephemeral,
                    sequential: n.sequential,
                    session: e.session,
                    acl: n.acl,
                }
            }
            ZnodeOp::SetAcl { path, acl, version } => Txn::SetAcl { path, acl, version },
            op @ (ZnodeOp::CreateContainer { .. } | ZnodeOp::CreateTtl { .. }) => marked_txn(op),
            // The reaper's (`sessions.rs`); a client's would skip the parent's DELETE right.
            op @ (ZnodeOp::DeleteContainer { .. } | ZnodeOp::DeleteTtl { .. })
                if e.conn != EXPIRY =>
            {
                let why = format!("{} is the leader's, not a client's", op.name());
                return zk(Err(ZkError::BadArguments(why)));
            }
            ZnodeOp::DeleteContainer { path } => Txn::DeleteContainer { path },
            ZnodeOp::DeleteTtl { path, mzxid } => Txn::DeleteTtl { path, mzxid },
            ZnodeOp::GetEphemerals { prefix } => return self.ephemerals(e.session, &prefix, here),
            ZnodeOp::Delete { path, version } => Txn::Delete { path, version },
            ZnodeOp::SetData {
                path,
                data,
                version,
            } => Txn::SetData {
                path,
                data,
                version,
            },
            ZnodeOp::ResumeSession => return self.resume(index, e.session, here),
            ZnodeOp::Multi { ops } => return self.apply_multi(at, e.session, &ops, &e.ids),
            op => return self.read_znode(index, e.conn, op, &e.ids, here),
        };
        if e.session == 0 && matches!(txn, Txn::OpenSession { .. } | Txn::CloseSession { .. }) {
            let why = "a session needs a client id (OpId::client)".to_string();
            return zk(Err(ZkError::BadArguments(why)));
        }
        if self.keep_ephemerals && matches!(txn, Txn::CloseSession { .. }) {
            return zk(Ok(ZnodeReply::Closed { deleted: vec![] }));
        }
        if let (true, Txn::CloseSession { session }) = (self.orphan_ephemerals, &txn) {
            self.tree.disown_ephemerals(*session);
        }
        let set_acl = matches!(txn, Txn::SetAcl { .. });
        let (result, changes) = self.tree.apply_as(at, &txn, &e.ids);
        for f in self.watches.fire(&changes) {
            self.events.push(fired_event(f));
        }
        if let Txn::CloseSession { session } = txn {
            self.heard.remove(&session);
            for conn in self.conns.remove(&session).unwrap_or_default() {
                if e.conn == EXPIRY {
                    self.events.push((conn, expired_event(session)));
                }
            }
        }
        zk(result.map(|ok| match ok {
            TxnOk::Created { path, stat } => ZnodeReply::Created { path, stat },
            TxnOk::Deleted => ZnodeReply::Deleted,
            TxnOk::Set(stat) if set_acl => ZnodeReply::AclSet(stat),
            TxnOk::Set(stat) => ZnodeReply::Set(stat),
            TxnOk::SessionOpened => ZnodeReply::Session { session: e.session },
            TxnOk::SessionClosed { deleted } => ZnodeReply::Closed { deleted },
        }))
    }

    /// `multi`: one transaction; its watches fire once it is whole.
    fn apply_multi(&mut self, at: Stamp, session: u64, ops: &[MultiOp], ids: &[Id]) -> Response {
        let (result, changes) = self.tree.apply_multi(at, session, ops, ids);
        for f in self.watches.fire(&changes) {
            self.events.push(fired_event(f));
        }
        zk(Ok(match result {
            Ok(done) => ZnodeReply::Multi(done),
            Err((i, error)) => ZnodeReply::MultiFailed {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                error,
            },
        }))
    }

    /// A read delivered: answered (and its watch set) only where it was
    /// asked; elsewhere it changes nothing.
    /// Reads check the node's ACL against the entry's identities as
    /// ZooKeeper does: READ for getData and getChildren, READ or ADMIN for
    /// getACL, nothing for exists (nor for SetWatches, ZooKeeper's too).
    fn read_znode(
        &mut self,
        index: u64,
        conn: u64,
        op: ZnodeOp,
        ids: &[Id],
        here: bool,
    ) -> Response {
        if !here {
            return Response::Done;
        }
        if let ZnodeOp::SetWatches { watches } = op {
            // A bad path refuses the whole request: nothing is set.
            if let Some(e) =
                (watches.iter()).find_map(|w| crate::znode::path::validate(w.path()).err())
            {
                return zk(Err(e));
            }
            let mut fired = 0;
            for w in watches {
                match w.missed(&self.tree) {
                    Some(event) => {
                        let path = w.path().to_string();
                        let f = Fired {
                            session: conn,
                            event,
                            path,
                        };
                        self.events.push(fired_event(f));
                        fired += 1;
                    }
                    None => self.watches.add(conn, w.path(), w.kind()),
                }
            }
            return zk(Ok(ZnodeReply::WatchesSet { fired }));
        }
        if let ZnodeOp::MultiRead { ops } = op {
            // Each read on its own, all at this one point of the tree.
            let replies = (ops.into_iter())
                .map(|o| match o {
                    ZnodeOp::GetData { .. } | ZnodeOp::GetChildren { .. } => {
                        self.read_one(index, conn, o, ids)
                    }
                    other => Err(not_in_multi_read(&other)),
                })
                .map(|r| r.unwrap_or_else(ZnodeReply::Error))
                .collect();
            return zk(Ok(ZnodeReply::Reads(replies)));
        }
        zk(self.read_one(index, conn, op, ids))
    }

    /// One plain read (its watch set here, now).
    fn read_one(
        &mut self,
        index: u64,
        conn: u64,
        op: ZnodeOp,
        ids: &[Id],
    ) -> Result<ZnodeReply, ZkError> {
        let mut watch = |path: &str, kind, on: bool| {
            if on {
                self.watches.add(conn, path, kind);
            }
        };
        let t = &self.tree;
        match op {
            ZnodeOp::Exists { path, watch: w } => t.exists(&path).map(|stat| {
                watch(&path, WatchKind::Data, w);
                ZnodeReply::Exists(stat)
            }),
            // ZooKeeper sets no watch on a failed getData / getChildren.
            ZnodeOp::GetData { path, watch: w } => t.get_data_as(&path, ids).map(|(data, stat)| {
                watch(&path, WatchKind::Data, w);
                ZnodeReply::Data { data, stat }
            }),
            ZnodeOp::GetChildren { path, watch: w } => t.children_as(&path, ids).map(|names| {
                watch(&path, WatchKind::Child, w);
                ZnodeReply::Children(names)
            }),
            ZnodeOp::GetAcl { path } => t
                .get_acl_as(&path, ids)
                .map(|(acl, stat)| ZnodeReply::Acl { acl, stat }),
            ZnodeOp::Sync => Ok(ZnodeReply::Synced { zxid: index }),
            ZnodeOp::Ping => Ok(ZnodeReply::Pong),
            // The path is not checked, as in ZooKeeper: a watch on a path
            // no node can have never fires.
            ZnodeOp::AddWatch { path, recursive } => {
                let kind = [WatchKind::Persistent, WatchKind::Recursive][usize::from(recursive)];
                self.watches.add(conn, &path, kind);
                Ok(ZnodeReply::WatchAdded)
            }
            ZnodeOp::RemoveWatches { path, kinds, check } => {
                self.remove_watches(conn, &path, &kinds, check)
            }
            other => Err(ZkError::BadArguments(format!(
                "{} is not a read",
                other.name()
            ))),
        }
    }
}

impl Machine {
    /// `removeWatches` (or, `check`, `checkWatches`): `NoWatcher` unless
    /// connection `conn` holds a watch of one of `kinds` on `path`.
    fn remove_watches(
        &mut self,
        conn: u64,
        path: &str,
        kinds: &[WatchKind],
        check: bool,
    ) -> Result<ZnodeReply, ZkError> {
        let mut found = false;
        for &k in kinds {
            found |= match check {
                true => self.watches.has(conn, path, k),
                false => self.watches.remove(conn, path, k),
            };
        }
        match found {
            true => Ok(ZnodeReply::WatchesRemoved),
            false => Err(ZkError::NoWatcher),
        }
    }
}

/// The answer to an operation other than `getData` and `getChildren` in
/// a `multiRead`.
fn not_in_multi_read(op: &ZnodeOp) -> ZkError {
    ZkError::BadArguments(format!("{} cannot be part of a multiRead", op.name()))
}

impl Machine {
    /// `getEphemerals` served where asked (a read by index).
    fn ephemerals(&self, session: u64, prefix: &str, here: bool) -> Response {
        if !here {
            return Response::Done;
        }
        zk(Ok(ZnodeReply::Ephemerals(
            self.tree.ephemerals_of(session, prefix),
        )))
    }

    /// `whoAmI`: the identities of connection `conn` here.
    pub(super) fn who_am_i(&self, conn: u64) -> ZnodeReply {
        ZnodeReply::Identities(self.ids_of(conn))
    }

    /// `ResumeSession` served where asked, from a tree that has applied
    /// `index`: the session's timeout if it is open.
    fn resume(&self, index: u64, session: u64, here: bool) -> Response {
        if !here {
            return Response::Done;
        }
        zk(match self.tree.session_timeout(session) {
            Some(timeout_ms) => Ok(ZnodeReply::Resumed {
                zxid: index,
                timeout_ms,
            }),
            None => Err(ZkError::SessionExpired),
        })
    }

    /// A read served by index at this server, whose tree has applied
    /// `applied`: a KV read, or a znode read (its watch set here, now).
    pub fn read_at(&mut self, applied: u64, op: &[u8]) -> Response {
        let mut r = Reader(op);
        if r.u8() != Some(TAG) {
            return self.kv.read(op);
        }
        match ZEntry::decode(&mut r) {
            Some(e) if e.op == ZnodeOp::ResumeSession => self.resume(applied, e.session, true),
            Some(ZEntry {
                session,
                op: ZnodeOp::GetEphemerals { prefix },
                ..
            }) => self.ephemerals(session, &prefix, true),
            Some(e) => self.read_znode(applied, e.conn, e.op, &e.ids, true),
            None => Response::Failed(OpError::refused("undecodable znode operation")),
        }
    }
}

impl StateMachine for Machine {
    fn apply(&mut self, op: &[u8]) -> Response {
        self.kv.apply(op)
    }
    fn apply_at(&mut self, index: u64, op: &[u8], here: bool) -> Response {
        let mut r = Reader(op);
        if r.u8() == Some(TAG) {
            return match ZEntry::decode(&mut r) {
                Some(e) if self.written_by_a_gone_session(&e) => zk(Err(ZkError::SessionExpired)),
                Some(e) => self.apply_znode(index, e, here),
                None => Response::Failed(OpError::refused("undecodable znode operation")),
            };
        }
        self.kv.apply(op)
    }
    fn read(&self, op: &[u8]) -> Response {
        self.kv.read(op)
    }
    fn blind_answer(&self, op: &[u8]) -> Option<Response> {
        self.kv.blind_answer(op)
    }
    /// The KV state, then the tree (absent in a KV-only snapshot).
    fn snapshot(&self) -> Bytes {
        self.snapshot_with(&self.tree)
    }
    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let mut r = Reader(data);
        let mut kv = KvStore::default();
        kv.restore_from(&mut r)?;
        let tree = match r.0.is_empty() {
            true => Tree::default(),
            false => Tree::restore(&r.bytes().ok_or("corrupt znode snapshot")?)?,
        };
        (self.kv, self.tree) = (kv, tree);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::msg::Msg;
    use super::super::node::Config;
    use super::super::testing::Cluster;
    use super::*;
    use crate::types::{NodeId, OpId};
    use crate::znode::{MultiOk, Rewatch, Stat};

    fn client(session: u64, conn: u64) -> ClientRef {
        ClientRef {
            id: 0,
            session: conn,
            op: OpId {
                client: session,
                seq: 1,
            },
        }
    }
    fn zn(c: &mut Cluster, at: u32, who: ClientRef, op: ZnodeOp) -> ZnodeReply {
        match c.ask_as(at, who, Request::Znode(op)) {
            Some(Response::Znode(r)) => r,
            other => panic!("{other:?}"),
        }
    }
    fn create(path: &str, ephemeral: bool, sequential: bool) -> ZnodeOp {
        ZnodeOp::Create {
            path: path.into(),
            data: Bytes::from_static(b"d"),
            ephemeral,
            sequential,
        }
    }
    fn created(r: ZnodeReply) -> (String, Stat) {
        match r {
            ZnodeReply::Created { path, stat } => (path, stat),
            other => panic!("{other:?}"),
        }
    }
    fn exists(c: &mut Cluster, at: u32, path: &str) -> bool {
        let op = ZnodeOp::Exists {
            path: path.into(),
            watch: false,
        };
        match zn(c, at, client(0, 0), op) {
            ZnodeReply::Exists(s) => s.is_some(),
            other => panic!("{other:?}"),
        }
    }
    fn open(c: &mut Cluster, at: u32, who: ClientRef, timeout_ms: u64) {
        let r = zn(c, at, who, ZnodeOp::OpenSession { timeout_ms });
        assert_eq!(
            r,
            ZnodeReply::Session {
                session: who.op.client
            }
        );
    }

    #[test]
    fn sequential_names_grow_and_stats_carry_zxid_and_leader_time() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let anon = client(0, 0);
        created(zn(&mut c, 1, anon, create("/q", false, false)));
        let before_ms = c.now.as_micros() / 1000;
        let (a, sa) = created(zn(&mut c, 2, anon, create("/q/n-", false, true)));
        let (b, sb) = created(zn(&mut c, 3, anon, create("/q/n-", false, true)));
        assert_eq!(
            (a.as_str(), b.as_str()),
            ("/q/n-0000000000", "/q/n-0000000001")
        );
        assert!(sa.czxid < sb.czxid && sa.czxid == sa.mzxid);
        let after_ms = c.now.as_micros() / 1000;
        assert!(
            before_ms > 0 && (before_ms..=after_ms).contains(&sa.ctime),
            "the leader's clock, in ms, stamps the create: {} not in {before_ms}..={after_ms}",
            sa.ctime
        );
        let kids = ZnodeOp::GetChildren {
            path: "/q".into(),
            watch: false,
        };
        for id in 1..=3 {
            let r = zn(&mut c, id, anon, kids.clone());
            assert_eq!(r, ZnodeReply::Children(vec![a[3..].into(), b[3..].into()]));
        }
        // KV operations still work beside the tree.
        let put = super::super::testing::put("k", "v");
        assert_eq!(c.ask(1, put), Some(Response::Done));
        assert_eq!(
            c.ask(2, super::super::testing::get("k")),
            Some(super::super::testing::value("v"))
        );
        // A non-session ephemeral is refused.
        let r = zn(&mut c, 1, anon, create("/e", true, false));
        assert_eq!(r, ZnodeReply::Error(ZkError::SessionExpired));
    }

    #[test]
    fn a_bound_session_that_is_gone_writes_nothing() {
        use crate::znode::tree::SESSION_BOUND;
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let bound = client(1 << 63 | SESSION_BOUND | 7, 1);
        let unbound = client(1 << 63 | 8, 2);
        open(&mut c, 1, bound, 60_000);
        open(&mut c, 1, unbound, 60_000);
        created(zn(&mut c, 1, bound, create("/mine", false, false)));
        for who in [bound, unbound] {
            let r = zn(&mut c, 2, who, ZnodeOp::CloseSession);
            assert_eq!(r, ZnodeReply::Closed { deleted: vec![] });
        }
        // Late writes of the bound session, as a paused server would
        // deliver them after its client closed the session.
        let delete = ZnodeOp::Delete {
            path: "/mine".into(),
            version: None,
        };
        let set = ZnodeOp::SetData {
            path: "/mine".into(),
            data: Bytes::from_static(b"late"),
            version: None,
        };
        let multi = ZnodeOp::Multi {
            ops: vec![MultiOp::Delete {
                path: "/mine".into(),
                version: None,
            }],
        };
        let expired = ZnodeReply::Error(ZkError::SessionExpired);
        for at in 1..=3 {
            assert_eq!(zn(&mut c, at, bound, delete.clone()), expired);
            assert_eq!(zn(&mut c, at, bound, set.clone()), expired);
            assert_eq!(zn(&mut c, at, bound, multi.clone()), expired);
            let r = zn(&mut c, at, bound, create("/other", false, false));
            assert_eq!(r, expired);
        }
        assert!(exists(&mut c, 1, "/mine") && !exists(&mut c, 1, "/other"));
        // Its reads still answer.
        let read = ZnodeOp::Exists {
            path: "/mine".into(),
            watch: false,
        };
        assert!(matches!(
            zn(&mut c, 2, bound, read),
            ZnodeReply::Exists(Some(_))
        ));
        // A client without the mark writes without a session, as before.
        assert_eq!(zn(&mut c, 2, unbound, delete), ZnodeReply::Deleted);
        assert!(!exists(&mut c, 3, "/mine"));
        // A new session under the bound id writes again.
        open(&mut c, 1, bound, 60_000);
        created(zn(&mut c, 3, bound, create("/mine", false, false)));
    }

    #[test]
    fn reads_take_a_read_index_and_wait_for_their_connections_writes() {
        let (mut c, l, f) = settled(Config::default());
        let anon = client(0, 0);
        created(zn(&mut c, f, anon, create("/q", false, false)));
        // A read adds nothing to the log (no fsync): a quorum round confirms
        // the leader's commit index instead.
        let last = c.node(l).log.last();
        assert!(exists(&mut c, f, "/q"));
        assert_eq!(c.node(l).log.last(), last);
        // Pipelined at a follower: a create, then getChildren on the same
        // connection; the list holds the child (session order), though
        // the read's index round could finish before the create commits.
        let me = client(0, 9);
        let kids = ZnodeOp::GetChildren {
            path: "/q".into(),
            watch: false,
        };
        let w = c.send_as(f, me, Request::Znode(create("/q/n-", false, true)));
        let r = c.send_as(f, me, Request::Znode(kids));
        c.run();
        let order: Vec<ClientRef> = c.replies.iter().map(|(_, who, _)| *who).collect();
        assert_eq!(order, vec![w, r], "answered in the order asked");
        assert_eq!(
            c.replies[1].2,
            Response::Znode(ZnodeReply::Children(vec!["n-0000000000".into()]))
        );
    }

    /// Three servers running `cfg`, settled: the cluster, its leader and a
    /// follower.
    fn settled(cfg: Config) -> (Cluster, NodeId, NodeId) {
        let mut c = Cluster::new(3, cfg);
        let l = c.settle();
        (c, l, if l == 1 { 2 } else { 1 })
    }

    /// Set `path` to `data`, any version.
    fn set_data(path: &str, data: &'static [u8]) -> ZnodeOp {
        ZnodeOp::SetData {
            path: path.into(),
            data: Bytes::from_static(data),
            version: None,
        }
    }

    /// Three servers with `read=local`, settled, `/a` created at the
    /// leader and applied everywhere: the cluster, its leader, a follower.
    fn local_reads_with_a() -> (Cluster, NodeId, NodeId) {
        let (mut c, l, f) = settled(Config {
            read: super::super::node::ReadMode::Local,
            ..Config::default()
        });
        created(zn(&mut c, l, client(0, 0), create("/a", false, false)));
        c.tick();
        (c, l, f)
    }

    #[test]
    fn read_local_answers_znode_reads_at_the_follower_without_the_leader() {
        use crate::protocol::contract::{Command, Protocol};
        let (mut c, _, f) = local_reads_with_a();
        let op = ZnodeOp::Exists {
            path: "/a".into(),
            watch: true,
        };
        let who = client(0, 7);
        let cmds = c.exec(f, |n, now, out| {
            n.on_client(now, who, Request::Znode(op), out)
        });
        let sent = cmds
            .iter()
            .any(|c| matches!(c, Command::Send { .. } | Command::SendNow { .. }));
        assert!(!sent, "{cmds:?}");
        assert!(cmds.iter().any(|c| matches!(
            c,
            Command::Reply {
                resp: Response::Znode(ZnodeReply::Exists(Some(_))),
                ..
            }
        )));
        assert_eq!(c.node(f).machine().watch_count(), 1);
    }

    /// `read=local`, index mode's session order too: reads pipelined after
    /// a write on one connection wait for it (and see it), and each keeps
    /// its own place (answered once each, in the order asked); a znode read
    /// in index mode goes to the leader for its index, never locally.
    #[test]
    fn local_reads_wait_for_their_connections_writes() {
        use crate::protocol::contract::Protocol;
        let (mut c, _, f) = local_reads_with_a();
        let me = client(0, 9);
        let get = || {
            Request::Znode(ZnodeOp::GetData {
                path: "/a".into(),
                watch: false,
            })
        };
        let set = set_data("/a", b"new");
        let w = c.send_as(f, me, Request::Znode(set));
        let r1 = c.send_as(f, me, get());
        let r2 = c.send_as(f, me, get());
        c.run();
        let order: Vec<ClientRef> = c.replies.iter().map(|(_, who, _)| *who).collect();
        assert_eq!(
            order,
            vec![w, r1, r2],
            "answered once each, in the order asked"
        );
        for (_, _, r) in &c.replies[1..] {
            assert!(
                matches!(r, Response::Znode(ZnodeReply::Data { data, .. }) if &data[..] == b"new"),
                "{r:?}"
            );
        }
        // Index mode: the same read at a follower asks the leader.
        let (mut c, _, f) = settled(Config::default());
        let cmds = c.exec(f, |n, now, out| n.on_client(now, me, get(), out));
        assert!(
            cmds.iter().any(|c| matches!(
                c,
                crate::protocol::Command::SendNow {
                    msg: Msg::ReadIndex { .. },
                    ..
                }
            )),
            "{cmds:?}"
        );
    }

    /// A znode write waits behind its own connection's read still at the
    /// leader for its index (a read answered late must not see it), and
    /// goes once the read is answered; another connection's write does
    /// not wait for that read, and goes once.
    #[test]
    fn a_write_is_held_behind_its_connections_read_only() {
        use super::super::testing::sent;
        let (mut c, l, f) = settled(Config::default());
        created(zn(&mut c, f, client(0, 0), create("/a", false, false)));
        let (me, other) = (client(0, 9), client(0, 10));
        let ask = |c: &mut Cluster, who: ClientRef, id: u64, op: ZnodeOp| {
            let who = ClientRef { id, ..who };
            c.exec(f, |n, now, out| {
                crate::protocol::Protocol::on_client(n, now, who, Request::Znode(op), out)
            })
        };
        let forwards = |cmds: &[crate::protocol::Command<Msg, super::super::Timer>]| {
            (sent(cmds).into_iter())
                .filter(|(_, m)| matches!(m, Msg::Forward { .. }))
                .count()
        };
        let get = ZnodeOp::GetData {
            path: "/a".into(),
            watch: false,
        };
        let set = |d: &'static [u8]| ZnodeOp::SetData {
            path: "/a".into(),
            data: Bytes::from_static(d),
            version: None,
        };
        let cmds = ask(&mut c, me, 101, get);
        let (epoch, rid) = (sent(&cmds).into_iter())
            .find_map(|(_, m)| match m {
                Msg::ReadIndex { epoch, rid } => Some((epoch, rid)),
                _ => None,
            })
            .expect("the read asks the leader");
        assert_eq!(forwards(&ask(&mut c, me, 102, set(b"mine"))), 0, "held");
        assert_eq!(forwards(&ask(&mut c, other, 103, set(b"theirs"))), 1);
        let index = c.node(l).commit;
        let ok = Msg::ReadIndexOk { epoch, rid, index };
        let cmds = c.exec(f, |n, now, out| {
            crate::protocol::Protocol::on_msg(n, now, crate::types::Peer::Node(l), ok, out)
        });
        let answered = cmds.iter().any(|c| {
            matches!(c, crate::protocol::Command::Reply { client, resp: Response::Znode(ZnodeReply::Data { .. }) } if client.id == 101)
        });
        assert!(answered, "{cmds:?}");
        assert_eq!(forwards(&cmds), 1, "the held write, and only it: {cmds:?}");
    }

    /// A read that cannot be served (no leader) fails at its deadline, the
    /// op timeout, not before.
    #[test]
    fn a_read_without_a_leader_fails_at_its_deadline() {
        let (mut c, _, f) = settled(Config::default());
        for n in 1..=3 {
            if n != f {
                c.crash(n);
            }
        }
        let who = c.send(
            f,
            crate::types::Request::Get {
                key: Bytes::from_static(b"k"),
            },
        );
        let (tick, timeout) = (c.cfg.tick, c.cfg.op_timeout);
        let mut waited = std::time::Duration::ZERO;
        while c.replies.is_empty() && waited < 3 * timeout {
            c.tick();
            waited += tick;
        }
        assert!(
            waited >= timeout,
            "failed after {waited:?}, before {timeout:?}"
        );
        assert!(
            matches!(&c.replies[..], [(_, cl, Response::Failed(e))] if *cl == who && e.to_string().contains("op timeout")),
            "{:?}",
            c.replies
        );
    }

    /// The status line's `keys=` counts the KV keys; two replicas' machines
    /// are equal by their replicated state (KV and tree), whatever watches
    /// each server holds.
    #[test]
    fn machines_count_keys_and_compare_by_replicated_state() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        for k in ["k1", "k2"] {
            let put = super::super::testing::put(k, "v");
            assert_eq!(c.ask(1, put), Some(Response::Done));
        }
        created(zn(&mut c, 1, client(0, 0), create("/a", false, false)));
        let watch = ZnodeOp::Exists {
            path: "/a".into(),
            watch: true,
        };
        zn(&mut c, 1, client(0, 3), watch);
        c.tick();
        let (m1, m2) = (c.node(1).machine(), c.node(2).machine());
        assert_eq!((m1.len(), m1.watch_count(), m2.watch_count()), (2, 1, 0));
        assert!(m1 == m2, "watches are not replicated state");
        let kv_only = Machine {
            kv: m1.kv.clone(),
            ..Machine::default()
        };
        assert!(*m1 != kv_only, "the trees differ");
        let tree_only = Machine {
            tree: m1.tree.clone(),
            ..Machine::default()
        };
        assert!(Machine::default().is_empty() && !m1.is_empty() && !tree_only.is_empty());
    }

    /// A connection that closes takes its watches with it; its session's
    /// other connections at this server stay known (they get the session's
    /// `expired` event).
    #[test]
    fn a_closed_connection_drops_its_watches_not_its_sessions_other_ones() {
        use crate::protocol::contract::{LinkEvent, Protocol};
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        created(zn(&mut c, 1, client(0, 0), create("/a", false, false)));
        let exists = ZnodeOp::Exists {
            path: "/a".into(),
            watch: true,
        };
        for conn in [31, 32] {
            zn(&mut c, 1, client(7, conn), exists.clone());
        }
        assert_eq!(c.node(1).machine().watch_count(), 2);
        let down = |c: &mut Cluster, conn| {
            c.exec(1, |n, now, out| {
                n.on_link(now, LinkEvent::Down(crate::types::Peer::Conn(conn)), out)
            })
        };
        down(&mut c, 31);
        let m = c.node(1).machine();
        assert_eq!(m.watch_count(), 1);
        assert_eq!(m.conns.get(&7), Some(&BTreeSet::from([32])));
        down(&mut c, 32);
        let m = c.node(1).machine();
        assert_eq!((m.watch_count(), m.conns.get(&7)), (0, None));
    }

    #[test]
    fn a_read_then_a_write_of_one_connection_take_effect_in_order() {
        let (mut c, _, f) = settled(Config::default());
        let anon = client(0, 0);
        created(zn(&mut c, f, anon, create("/a", false, false)));
        // Pipelined at a follower: getData, then setData, one connection.
        // The read is answered first and sees the old data. (Here the
        // read's index round always ends before the write commits; the
        // write is also held until the read is answered, `behind_a_read`,
        // for the runs where the round ends later.)
        let me = client(0, 9);
        let get = ZnodeOp::GetData {
            path: "/a".into(),
            watch: true,
        };
        let set = set_data("/a", b"new");
        let r = c.send_as(f, me, Request::Znode(get));
        let w = c.send_as(f, me, Request::Znode(set));
        c.run();
        let order: Vec<ClientRef> = c.replies.iter().map(|(_, who, _)| *who).collect();
        assert_eq!(order, vec![r, w], "answered in the order asked");
        assert!(matches!(
            &c.replies[0].2,
            Response::Znode(ZnodeReply::Data { data, .. }) if &data[..] == b"d"
        ));
        // The read's watch, set before the write, fired for it.
        assert_eq!(c.events.len(), 1, "{:?}", c.events);
    }

    #[test]
    fn set_watches_fires_what_changed_and_sets_the_rest() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let anon = client(0, 0);
        for p in ["/same", "/gone"] {
            created(zn(&mut c, 1, anon, create(p, false, false)));
        }
        let read = |c: &mut Cluster, p: &str| match zn(
            c,
            1,
            anon,
            ZnodeOp::GetData {
                path: p.into(),
                watch: false,
            },
        ) {
            ZnodeReply::Data { stat, .. } => stat.mzxid,
            other => panic!("{other:?}"),
        };
        let (same, gone) = (read(&mut c, "/same"), read(&mut c, "/gone"));
        let del = ZnodeOp::Delete {
            path: "/gone".into(),
            version: None,
        };
        assert_eq!(zn(&mut c, 1, anon, del), ZnodeReply::Deleted);
        // A session arrives at server 2 with watches set at another.
        let moved = client(5, 55);
        let watches = vec![
            Rewatch::Data {
                path: "/same".into(),
                mzxid: Some(same),
            },
            Rewatch::Data {
                path: "/gone".into(),
                mzxid: Some(gone),
            },
        ];
        let mut bad = watches.clone();
        bad.push(Rewatch::Data {
            path: "no-slash".into(),
            mzxid: None,
        });
        let r = zn(&mut c, 2, moved, ZnodeOp::SetWatches { watches: bad });
        assert!(
            matches!(r, ZnodeReply::Error(ZkError::BadArguments(_))),
            "{r:?}"
        );
        assert_eq!(c.node(2).machine().watch_count(), 0, "nothing set");
        assert!(c.events.is_empty());
        let r = zn(&mut c, 2, moved, ZnodeOp::SetWatches { watches });
        assert_eq!(r, ZnodeReply::WatchesSet { fired: 1 });
        let ev: Vec<_> = c.events.drain(..).collect();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(
            (ev[0].0, ev[0].1, ev[0].2.kind.as_str()),
            (2, 55, "deleted")
        );
        assert_eq!(c.node(2).machine().watch_count(), 1);
        let set = set_data("/same", b"");
        assert!(matches!(zn(&mut c, 3, anon, set), ZnodeReply::Set(_)));
        c.tick();
        let ev: Vec<_> = c.events.drain(..).collect();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(
            (ev[0].0, ev[0].1, ev[0].2.kind.as_str()),
            (2, 55, "changed")
        );
    }

    #[test]
    fn closing_a_session_removes_its_ephemerals_everywhere() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let s = client(77, 5);
        open(&mut c, 1, s, 10_000);
        created(zn(&mut c, 1, s, create("/e", true, false)));
        assert!((1..=3).all(|id| exists(&mut c, id, "/e")));
        let r = zn(&mut c, 2, s, ZnodeOp::CloseSession);
        assert_eq!(
            r,
            ZnodeReply::Closed {
                deleted: vec!["/e".into()]
            }
        );
        assert!((1..=3).all(|id| !exists(&mut c, id, "/e")));
    }

    /// A session resumes on any server while it is open (its timeout, and
    /// a zxid no less than its last write's, even with `read=local`), and
    /// nowhere once closed; a resume opens nothing.
    #[test]
    fn a_session_resumes_anywhere_while_open_and_nowhere_after() {
        use super::super::node::ReadMode;
        for read in [ReadMode::Index, ReadMode::Log, ReadMode::Local] {
            let mut c = Cluster::new(
                3,
                Config {
                    read,
                    ..Config::default()
                },
            );
            c.settle();
            let (s, never) = (client(77, 5), client(78, 6));
            let expired = ZnodeReply::Error(ZkError::SessionExpired);
            assert_eq!(zn(&mut c, 2, never, ZnodeOp::ResumeSession), expired);
            open(&mut c, 1, s, 12_000);
            let (_, stat) = created(zn(&mut c, 1, s, create("/e", true, false)));
            for at in 1..=3 {
                match zn(
                    &mut c,
                    at,
                    client(77, 40 + at as u64),
                    ZnodeOp::ResumeSession,
                ) {
                    ZnodeReply::Resumed { zxid, timeout_ms } => {
                        assert_eq!(timeout_ms, 12_000);
                        assert!(zxid >= stat.czxid, "{read:?}: {zxid}");
                    }
                    other => panic!("{read:?} at {at}: {other:?}"),
                }
            }
            assert!(matches!(
                zn(&mut c, 2, s, ZnodeOp::CloseSession),
                ZnodeReply::Closed { .. }
            ));
            assert_eq!(zn(&mut c, 3, s, ZnodeOp::ResumeSession), expired);
            assert!((1..=3).all(|id| !c.node(id).znode_session_open(78)));
        }
    }

    #[test]
    fn a_watch_fires_once_at_the_server_that_set_it() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let (w, other) = (client(1, 11), client(2, 22));
        let op = ZnodeOp::Exists {
            path: "/w".into(),
            watch: true,
        };
        assert_eq!(zn(&mut c, 1, w, op), ZnodeReply::Exists(None));
        assert_eq!(c.node(1).machine().watch_count(), 1);
        created(zn(&mut c, 2, other, create("/w", false, false)));
        c.tick();
        let ev: Vec<_> = c.events.drain(..).collect();
        assert_eq!(ev.len(), 1, "{ev:?}");
        let (server, conn, e) = &ev[0];
        assert_eq!((*server, *conn, e.kind.as_str()), (1, 11, "created"));
        assert_eq!(&e.key[..], b"/w");
        // One-shot: a second change fires nothing.
        let set = set_data("/w", b"");
        assert!(matches!(zn(&mut c, 2, other, set), ZnodeReply::Set(_)));
        c.tick();
        assert!(c.events.is_empty());
        // A child watch set by getChildren fires on a child's creation,
        // before the creating session's own answer.
        let kids = ZnodeOp::GetChildren {
            path: "/w".into(),
            watch: true,
        };
        assert_eq!(zn(&mut c, 3, other, kids), ZnodeReply::Children(vec![]));
        created(zn(&mut c, 3, other, create("/w/c", false, false)));
        assert_eq!(c.events.len(), 1, "the event came with the reply");
        assert_eq!(c.events[0].2.kind, "children");
    }

    #[test]
    fn the_leader_expires_a_silent_session_and_its_ephemerals() {
        let (mut c, l, f) = settled(Config::default());
        // At the leader too: it hears its own clients.
        let (alive, silent, at_leader) = (client(1, 11), client(2, 22), client(3, 33));
        // Not a multiple of the tick: a silence is never exactly the timeout.
        let timeout = 205;
        open(&mut c, f, alive, timeout);
        open(&mut c, f, silent, timeout);
        open(&mut c, l, at_leader, timeout);
        created(zn(&mut c, f, alive, create("/a", true, false)));
        created(zn(&mut c, f, silent, create("/s", true, false)));
        // 400 ms: twice the timeout; `alive` heartbeats at a follower,
        // `at_leader` at the leader, `silent` not at all.
        for _ in 0..40 {
            for (at, who) in [(f, alive), (l, at_leader)] {
                let r = c.ask_as(at, who, Request::Znode(ZnodeOp::Ping));
                assert_eq!(r, Some(Response::Znode(ZnodeReply::Pong)));
            }
            c.tick();
        }
        assert!(
            c.node(l).machine().tree.has_session(3),
            "heard at the leader"
        );
        assert!(exists(&mut c, f, "/a"), "a heartbeating session lives");
        assert!(!exists(&mut c, f, "/s"), "a silent one expires");
        assert!(c.node(l).machine().tree.has_session(1));
        assert!(!c.node(l).machine().tree.has_session(2));
        let expired: Vec<_> = c.events.iter().filter(|e| e.2.kind == "expired").collect();
        assert_eq!(expired.len(), 1, "{expired:?}");
        assert_eq!((expired[0].0, expired[0].1), (f, 22));
    }

    #[test]
    fn snapshots_hold_both_machines_and_old_kv_snapshots_restore() {
        let mut m = Machine::default();
        let put = super::super::state_machine::Op::Put {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        };
        m.apply_at(1, &put.to_bytes(), true);
        let e = super::super::state_machine::Op::Znode(ZEntry::new(
            create("/x", false, false),
            &client(0, 0),
        ));
        let r = m.apply_at(2, &e.to_bytes(), true);
        assert!(matches!(r, Response::Znode(ZnodeReply::Created { .. })));
        let mut back = Machine::default();
        back.restore(&m.snapshot()).unwrap();
        assert_eq!(back, m);
        let mut kv_only = Machine::default();
        kv_only.restore(&m.kv.snapshot()).unwrap();
        assert_eq!((kv_only.kv, kv_only.tree.len()), (m.kv.clone(), 1));
        assert!(back.restore(&[1, 2]).is_err());
    }

    /// ACLs through Zab: identities belong to the connection that added
    /// them (on the server it is connected to), travel in each entry to the
    /// leader, and every replica applies the same check. A connection with
    /// the digest reads what an anonymous one (even of the same session)
    /// is refused; the refused write changes nothing anywhere.
    #[test]
    fn acl_identities_belong_to_the_connection_and_travel_with_entries() {
        use crate::znode::acl::{self, Acl, ALL, READ};
        let (mut c, l, f) = settled(Config::default());
        // Alice's connection 10 on a follower; an anonymous connection 11
        // of the same session on the leader.
        let alice = client(5, 10);
        let anon = client(5, 11);
        let add = ZnodeOp::AddAuth {
            scheme: "digest".into(),
            auth: "alice:pw".into(),
        };
        assert_eq!(zn(&mut c, f, alice, add), ZnodeReply::AuthAdded);
        let bad = ZnodeOp::AddAuth {
            scheme: "ip".into(),
            auth: "1.2.3.4".into(),
        };
        assert!(matches!(
            zn(&mut c, f, alice, bad),
            ZnodeReply::Error(ZkError::BadArguments(_))
        ));
        let id = acl::digest("alice:pw").unwrap();
        let mk = ZnodeOp::CreateWithAcl {
            path: "/secret".into(),
            data: Bytes::from_static(b"s"),
            ephemeral: false,
            sequential: false,
            acl: vec![Acl::new(ALL, "auth", ""), Acl::new(READ, "user", "bob")],
        };
        created(zn(&mut c, f, alice, mk));
        let get = ZnodeOp::GetData {
            path: "/secret".into(),
            watch: true,
        };
        for at in [f, l] {
            assert!(
                matches!(
                    zn(&mut c, at, alice, get.clone()),
                    ZnodeReply::Error(ZkError::NoAuth)
                ) == (at == l)
            );
        }
        assert_eq!(
            zn(&mut c, l, anon, get.clone()),
            ZnodeReply::Error(ZkError::NoAuth)
        );
        let set = set_data("/secret", b"forged");
        assert_eq!(zn(&mut c, l, anon, set), ZnodeReply::Error(ZkError::NoAuth));
        // Every replica holds the same, unchanged node and ACL.
        for id_ in 1..=3 {
            let t = &c.node(id_).machine().tree;
            assert_eq!(
                t.get_data_as("/secret", &[Id::new("digest", &id)])
                    .unwrap()
                    .0,
                Bytes::from_static(b"s")
            );
            let (acl, st) = t.get_acl_as("/secret", &[Id::new("digest", &id)]).unwrap();
            assert_eq!(acl[0], Acl::new(ALL, "digest", &id));
            assert_eq!((st.version, st.aversion), (0, 0));
        }
        // The node layer's login identity (scheme user) reads it too.
        let bob = client(6, 12);
        let login = ZnodeOp::AddAuth {
            scheme: "user".into(),
            auth: "bob".into(),
        };
        assert_eq!(zn(&mut c, l, bob, login), ZnodeReply::AuthAdded);
        assert!(matches!(
            zn(&mut c, l, bob, get.clone()),
            ZnodeReply::Data { .. }
        ));
        // getACL without ADMIN hides the hash; setACL needs ADMIN and
        // counts versions.
        let get_acl = ZnodeOp::GetAcl {
            path: "/secret".into(),
        };
        let ZnodeReply::Acl { acl, .. } = zn(&mut c, l, bob, get_acl.clone()) else {
            panic!()
        };
        assert_eq!(acl[0].id.id, "alice:x");
        let open = ZnodeOp::SetAcl {
            path: "/secret".into(),
            acl: acl::open_acl_unsafe(),
            version: Some(0),
        };
        assert_eq!(
            zn(&mut c, l, bob, open.clone()),
            ZnodeReply::Error(ZkError::NoAuth)
        );
        let ZnodeReply::AclSet(st) = zn(&mut c, f, alice, open.clone()) else {
            panic!()
        };
        assert_eq!(st.aversion, 1);
        assert_eq!(
            zn(&mut c, f, alice, open),
            ZnodeReply::Error(ZkError::BadVersion)
        );
        assert!(matches!(zn(&mut c, l, anon, get), ZnodeReply::Data { .. }));
        // A closed connection's identities go with it.
        assert_eq!(c.node(f).machine().ids_of(10), vec![Id::new("digest", &id)]);
        let mut m = Machine::default();
        m.add_auth(10, "digest", "alice:pw").unwrap();
        m.drop_conn(10);
        assert!(m.ids_of(10).is_empty());
    }

    /// An entry carries its connection's identities; one without any is
    /// encoded exactly as before ACLs (so old logs decode, with none).
    #[test]
    fn entries_carry_identities_and_old_entries_decode() {
        use super::super::codec::Reader;
        use super::super::state_machine::Op;
        let mut e = ZEntry::new(create("/x", false, false), &client(3, 4));
        let plain = Op::Znode(e.clone()).to_bytes();
        e.ids = vec![Id::new("user", "alice"), Id::new("digest", "a:h=")];
        let with = Op::Znode(e.clone()).to_bytes();
        assert_eq!(&with[..plain.len()], &plain[..], "ids are appended");
        assert_eq!(Op::decode(&mut Reader(&with)), Some(Op::Znode(e.clone())));
        e.ids.clear();
        assert_eq!(Op::decode(&mut Reader(&plain)), Some(Op::Znode(e)));
    }

    /// A multi through Zab: one entry, the same tree on every replica; a
    /// watch on a node it changes twice fires once, after the whole, and
    /// not at all when it fails. A multiRead answers each read on its own.
    #[test]
    fn a_multi_is_one_transaction_and_fires_its_watches_once() {
        let mut c = Cluster::new(3, Config::default());
        c.settle();
        let (w, other) = (client(1, 11), client(2, 22));
        created(zn(&mut c, 2, other, create("/m", false, false)));
        let get = |path: &str, watch| ZnodeOp::GetData {
            path: path.into(),
            watch,
        };
        assert!(matches!(
            zn(&mut c, 1, w, get("/m", true)),
            ZnodeReply::Data { .. }
        ));
        let set = |v| MultiOp::SetData {
            path: "/m".into(),
            data: Bytes::from_static(b"x"),
            version: v,
        };
        let kid = MultiOp::Create {
            path: "/m/k".into(),
            data: Bytes::new(),
            ephemeral: false,
            sequential: false,
            acl: None,
        };
        let bad = ZnodeOp::Multi {
            ops: vec![kid.clone(), set(None), set(Some(0))],
        };
        let failed = ZnodeReply::MultiFailed {
            index: 2,
            error: ZkError::BadVersion,
        };
        assert_eq!(zn(&mut c, 2, other, bad), failed);
        c.tick();
        assert!(c.events.is_empty(), "{:?}", c.events);
        assert!((1..=3).all(|id| !exists(&mut c, id, "/m/k")));
        let good = ZnodeOp::Multi {
            ops: vec![kid, set(Some(0)), set(Some(1))],
        };
        let ZnodeReply::Multi(done) = zn(&mut c, 3, other, good) else {
            panic!()
        };
        assert!(
            matches!(done[2], MultiOk::Set(st) if st.version == 2),
            "{done:?}"
        );
        c.tick();
        let ev: Vec<_> = c.events.drain(..).collect();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(
            (ev[0].0, ev[0].1, ev[0].2.kind.as_str()),
            (1, 11, "changed")
        );
        let trees: Vec<_> = (1..=3)
            .map(|id| c.node(id).machine().tree.clone())
            .collect();
        assert!(trees.iter().all(|t| *t == trees[0]));
        let reads = ZnodeOp::MultiRead {
            ops: vec![
                get("/m", false),
                ZnodeOp::GetChildren {
                    path: "/m".into(),
                    watch: false,
                },
                get("/none", false),
                ZnodeOp::Sync,
            ],
        };
        let ZnodeReply::Reads(r) = zn(&mut c, 2, w, reads) else {
            panic!()
        };
        assert!(matches!(&r[0], ZnodeReply::Data { stat, .. } if stat.version == 2));
        assert_eq!(r[1], ZnodeReply::Children(vec!["k".into()]));
        assert_eq!(r[2], ZnodeReply::Error(ZkError::NoNode));
        assert!(matches!(r[3], ZnodeReply::Error(ZkError::BadArguments(_))));
    }

    /// The leader deletes a container once it has seen it emptied (after
    /// having had a child) for `container_grace`, through the log: every
    /// replica deletes it, and a watch at a follower hears of it. A
    /// container that never had a child stays.
    #[test]
    fn the_leader_deletes_an_emptied_container_after_its_grace() {
        let grace = std::time::Duration::from_millis(50);
        let cfg = Config {
            container_grace: grace,
            ..Config::default()
        };
        let (mut c, l, f) = settled(cfg);
        let anon = client(0, 0);
        let container = |path: &str| ZnodeOp::CreateContainer {
            path: path.into(),
            data: Bytes::new(),
            acl: None,
        };
        created(zn(&mut c, f, anon, container("/c")));
        created(zn(&mut c, f, anon, container("/never")));
        created(zn(&mut c, f, anon, create("/c/k", false, false)));
        let watch = ZnodeOp::Exists {
            path: "/c".into(),
            watch: true,
        };
        assert!(matches!(
            zn(&mut c, f, client(0, 7), watch),
            ZnodeReply::Exists(Some(_))
        ));
        // Full: it stays however long.
        for _ in 0..20 {
            c.tick();
        }
        assert!(exists(&mut c, l, "/c"));
        let del = ZnodeOp::Delete {
            path: "/c/k".into(),
            version: None,
        };
        assert_eq!(zn(&mut c, f, anon, del), ZnodeReply::Deleted);
        c.tick();
        assert!(exists(&mut c, f, "/c"), "not before its grace");
        for _ in 0..12 {
            c.tick();
        }
        assert!((1..=3).all(|id| !exists(&mut c, id, "/c")));
        assert!((1..=3).all(|id| exists(&mut c, id, "/never")));
        // A client cannot ask for the reaper's deletion itself.
        created(zn(&mut c, f, anon, container("/d")));
        created(zn(&mut c, f, anon, create("/d/k", false, false)));
        let del = ZnodeOp::Delete {
            path: "/d/k".into(),
            version: None,
        };
        assert_eq!(zn(&mut c, f, anon, del), ZnodeReply::Deleted);
        let reap = ZnodeOp::DeleteContainer { path: "/d".into() };
        assert!(matches!(
            zn(&mut c, f, anon, reap),
            ZnodeReply::Error(ZkError::BadArguments(_))
        ));
        assert!(exists(&mut c, l, "/d"), "still there until its grace");
        let deleted: Vec<_> = (c.events.iter())
            .filter(|(_, _, e)| e.kind == "deleted")
            .map(|(server, conn, e)| (*server, *conn, e.key.clone()))
            .collect();
        assert_eq!(deleted, vec![(f, 7, Bytes::from_static(b"/c"))]);
    }

    /// `addWatch` at a follower: a recursive watch stays and hears of a
    /// node below; `removeWatches` takes it, and a second one (or a
    /// `checkWatches`) answers `NoWatcher`.
    #[test]
    fn add_and_remove_a_persistent_watch_at_a_follower() {
        let (mut c, _, f) = settled(Config::default());
        let (w, other) = (client(1, 11), client(2, 22));
        let add = ZnodeOp::AddWatch {
            path: "/r".into(),
            recursive: true,
        };
        assert_eq!(zn(&mut c, f, w, add), ZnodeReply::WatchAdded);
        created(zn(&mut c, 1, other, create("/r", false, false)));
        created(zn(&mut c, 2, other, create("/r/a", false, false)));
        c.tick();
        let got: Vec<_> = (c.events.drain(..))
            .map(|(server, conn, e)| (server, conn, e.kind, e.key))
            .collect();
        let ev =
            |kind: &str, path: &'static [u8]| (f, 11, kind.to_string(), Bytes::from_static(path));
        assert_eq!(got, vec![ev("created", b"/r"), ev("created", b"/r/a")]);
        let rm = |check| ZnodeOp::RemoveWatches {
            path: "/r".into(),
            kinds: vec![WatchKind::Recursive],
            check,
        };
        assert_eq!(zn(&mut c, f, w, rm(true)), ZnodeReply::WatchesRemoved);
        assert_eq!(zn(&mut c, f, w, rm(false)), ZnodeReply::WatchesRemoved);
        let none = ZnodeReply::Error(ZkError::NoWatcher);
        assert_eq!(zn(&mut c, f, w, rm(false)), none);
        assert_eq!(zn(&mut c, f, w, rm(true)), none);
        assert_eq!(c.node(f).machine().watch_count(), 0);
    }

    /// The leader deletes a TTL node through the log once it has seen it
    /// childless and unchanged for its TTL (looking every `ttl_check`):
    /// not before, not while it has a child, and a change starts its TTL
    /// again. A client cannot ask for the deletion itself.
    #[test]
    fn the_leader_deletes_an_expired_ttl_node() {
        let cfg = Config {
            ttl_check: std::time::Duration::from_millis(20),
            ..Config::default()
        };
        let (mut c, l, f) = settled(cfg);
        let anon = client(0, 0);
        let ttl = |path: &str, ttl_ms| ZnodeOp::CreateTtl {
            path: path.into(),
            data: Bytes::new(),
            sequential: false,
            ttl_ms,
            acl: None,
        };
        // 150 ms: 15 ticks.
        let (_, st) = created(zn(&mut c, f, anon, ttl("/t", 150)));
        assert_eq!(st.ttl(), Some(150));
        created(zn(&mut c, f, anon, ttl("/kept", 150)));
        created(zn(&mut c, f, anon, create("/kept/k", false, false)));
        for _ in 0..10 {
            c.tick();
        }
        assert!(exists(&mut c, f, "/t"), "not before its TTL");
        // A change starts it again.
        assert!(matches!(
            zn(&mut c, f, anon, set_data("/t", b"x")),
            ZnodeReply::Set(_)
        ));
        for _ in 0..10 {
            c.tick();
        }
        assert!(
            exists(&mut c, f, "/t"),
            "its TTL started again with the change"
        );
        for _ in 0..12 {
            c.tick();
        }
        assert!((1..=3).all(|id| !exists(&mut c, id, "/t")));
        assert!(exists(&mut c, l, "/kept"), "a child keeps it");
        let del = ZnodeOp::Delete {
            path: "/kept/k".into(),
            version: None,
        };
        assert_eq!(zn(&mut c, f, anon, del), ZnodeReply::Deleted);
        // Seen unchanged for longer than its TTL already: it goes at the
        // next look.
        for _ in 0..3 {
            c.tick();
        }
        assert!((1..=3).all(|id| !exists(&mut c, id, "/kept")));
        created(zn(&mut c, f, anon, ttl("/u", 150)));
        let mzxid = c
            .node(l)
            .machine()
            .tree
            .exists("/u")
            .unwrap()
            .unwrap()
            .mzxid;
        let reap = ZnodeOp::DeleteTtl {
            path: "/u".into(),
            mzxid,
        };
        assert!(matches!(
            zn(&mut c, f, anon, reap),
            ZnodeReply::Error(ZkError::BadArguments(_))
        ));
        assert!(exists(&mut c, l, "/u"));
    }

    /// `getEphemerals` at a follower (a read by index) lists its session's
    /// ephemerals; `whoAmI` answers the connection's identities where it
    /// is connected, logging nothing.
    #[test]
    fn get_ephemerals_and_who_am_i_at_a_follower() {
        let (mut c, l, f) = settled(Config::default());
        let me = client(4, 40);
        open(&mut c, f, me, 10_000);
        let (e, _) = created(zn(&mut c, f, me, create("/e-", true, true)));
        created(zn(&mut c, l, client(5, 50), create("/x", false, false)));
        let all = ZnodeOp::GetEphemerals {
            prefix: String::new(),
        };
        assert_eq!(
            zn(&mut c, f, me, all.clone()),
            ZnodeReply::Ephemerals(vec![e])
        );
        let none = ZnodeOp::GetEphemerals {
            prefix: "/x".into(),
        };
        assert_eq!(zn(&mut c, f, me, none), ZnodeReply::Ephemerals(vec![]));
        assert_eq!(
            zn(&mut c, l, client(5, 50), all),
            ZnodeReply::Ephemerals(vec![])
        );
        let last = c.node(l).log.last();
        assert_eq!(
            zn(&mut c, f, me, ZnodeOp::WhoAmI),
            ZnodeReply::Identities(vec![])
        );
        let add = ZnodeOp::AddAuth {
            scheme: "digest".into(),
            auth: "alice:pw".into(),
        };
        assert_eq!(zn(&mut c, f, me, add), ZnodeReply::AuthAdded);
        let id = Id::new("digest", &acl::digest("alice:pw").unwrap());
        assert_eq!(
            zn(&mut c, f, me, ZnodeOp::WhoAmI),
            ZnodeReply::Identities(vec![id])
        );
        // Another connection of the same session has none.
        assert_eq!(
            zn(&mut c, f, client(4, 41), ZnodeOp::WhoAmI),
            ZnodeReply::Identities(vec![])
        );
        assert_eq!(c.node(l).log.last(), last, "nothing logged");
    }
}
