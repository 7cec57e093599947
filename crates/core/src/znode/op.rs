//! The znode service's client operations and answers as they cross the
//! wire (`Request::Znode`, `Response::Znode`), and the events it pushes
//! (`Command::Notify` with an [`Event`] whose `kind` is one of
//! [`EVENT_KINDS`]).
//!
//! A session is the client's id (`OpId::client`): random per client
//! process and the same on every server, so a session outlives its
//! connection and moves to another server intact. Watches belong to the
//! connection they were set on (ZooKeeper's rule: they are not replicated).

use super::{Acl, Rewatch, Stat, WatchKind, ZkError};
use crate::types::Event;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What a client asks of the znode service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZnodeOp {
    /// Open this client's session (or change its timeout); idempotent.
    OpenSession {
        timeout_ms: u64,
    },
    /// Close this client's session: its ephemerals go in one transaction.
    CloseSession,
    /// Heartbeat: the session is alive. Answered by the serving server at
    /// once, reported to the leader within a tick.
    Ping,
    Create {
        path: String,
        data: Bytes,
        ephemeral: bool,
        sequential: bool,
    },
    /// Delete if the version matches (`None`: any).
    Delete {
        path: String,
        version: Option<u32>,
    },
    SetData {
        path: String,
        data: Bytes,
        version: Option<u32>,
    },
    /// `watch`: one data watch, fired by the node's creation, deletion or
    /// data change.
    Exists {
        path: String,
        watch: bool,
    },
    GetData {
        path: String,
        watch: bool,
    },
    /// `watch`: one child watch, fired by a child created or deleted.
    GetChildren {
        path: String,
        watch: bool,
    },
    /// Answered once everything committed before it is applied at the
    /// serving server (linearizable: it goes through the log).
    Sync,
    /// A session moved to this server: set its watches again here (each
    /// fires at once if the node changed since the read that set it).
    /// Served as a read.
    SetWatches {
        watches: Vec<Rewatch>,
    },
    /// ZooKeeper's `addAuth`: add an identity to this *connection* (as
    /// ZooKeeper's `ServerCnxn.authInfo`; not to the session, whose id is
    /// no secret). `digest` with `user:password` adds `digest:user:hash`;
    /// answered by the server the client is connected to, nothing logged
    /// (the password goes no further). Scheme `user` is reserved to the
    /// server (a native login), refused from a client.
    AddAuth {
        scheme: String,
        auth: String,
    },
    /// `getACL`: the node's ACL and stat. Needs READ or ADMIN (ZooKeeper
    /// 3.7+); without ADMIN digest hashes read `x`.
    GetAcl {
        path: String,
    },
    /// `setACL` if the ACL version (`Stat::aversion`) matches (`None`:
    /// any). Needs ADMIN.
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: Option<u32>,
    },
    /// `Create` with an ACL (`Create` itself gives `world:anyone:cdrwa`).
    /// Kept apart so that `Create`'s encoding (in logs) is unchanged.
    CreateWithAcl {
        path: String,
        data: Bytes,
        ephemeral: bool,
        sequential: bool,
        acl: Vec<Acl>,
    },
    /// Take up this client's session on a new connection (a ZooKeeper
    /// client reconnecting with its session id): answered `Resumed` if the
    /// session is open, `SessionExpired` otherwise; it opens nothing
    /// (unlike `OpenSession`). Served as a read, so the answer's zxid is
    /// at least every zxid committed before it was asked.
    ResumeSession,
    /// ZooKeeper's `multi`: the operations applied in order as one
    /// transaction (one log entry, one zxid), each seeing the effects of
    /// those before it; all of them or none. Answered `Multi` or
    /// `MultiFailed`. Watches fire once the whole transaction applied.
    Multi {
        ops: Vec<MultiOp>,
    },
    /// ZooKeeper 3.6's `multiRead`: `GetData` and `GetChildren` reads
    /// served together at one point of the serving server's tree (by one
    /// read index), each answered on its own (`Reads`): a failed one does
    /// not fail the others.
    MultiRead {
        ops: Vec<ZnodeOp>,
    },
    /// ZooKeeper 3.6's `addWatch`: a persistent watch on `path` (or,
    /// `recursive`, on it and every node below it) that stays until
    /// removed or the connection goes. The node need not exist. Served as
    /// a read, so it misses no change after it.
    AddWatch {
        path: String,
        recursive: bool,
    },
    /// ZooKeeper's `removeWatches` (`check`: `checkWatches`, nothing
    /// removed): this connection's watches of `kinds` on `path`; answered
    /// `NoWatcher` when it holds none of them. Served as a read.
    RemoveWatches {
        path: String,
        kinds: Vec<WatchKind>,
        check: bool,
    },
    /// ZooKeeper's `CreateMode.CONTAINER`: a node the leader deletes once
    /// it has had children and has none left. `acl` as in [`NewNode`].
    CreateContainer {
        path: String,
        data: Bytes,
        acl: Option<Vec<Acl>>,
    },
    /// ZooKeeper's `deleteContainer`, proposed by the leader (the
    /// ZooKeeper port does not take it from clients): deletes `path` if it
    /// is still a container that has had children and has none.
    DeleteContainer {
        path: String,
    },
    /// ZooKeeper's `createTTL` (`CreateMode.PERSISTENT_WITH_TTL` and
    /// `PERSISTENT_SEQUENTIAL_WITH_TTL`): a persistent node the leader
    /// deletes once it has no children and was not changed for `ttl_ms`
    /// (1 ..= [`MAX_TTL_MS`](super::tree::MAX_TTL_MS)). `acl` as in
    /// [`NewNode`].
    CreateTtl {
        path: String,
        data: Bytes,
        sequential: bool,
        ttl_ms: u64,
        acl: Option<Vec<Acl>>,
    },
    /// The leader's deletion of an expired TTL node (the ZooKeeper port
    /// does not take it from clients): deletes `path` if it is still a
    /// TTL node without children whose last change is `mzxid`.
    DeleteTtl {
        path: String,
        mzxid: u64,
    },
    /// ZooKeeper's `getEphemerals`: the paths of this session's
    /// ephemerals that start with `prefix` (a plain string prefix, as in
    /// ZooKeeper; `/` or empty: all). Served as a read.
    GetEphemerals {
        prefix: String,
    },
    /// ZooKeeper's `whoAmI`: the identities of this connection, answered
    /// by the server the client is connected to (nothing logged).
    WhoAmI,
}

/// One operation of a [`ZnodeOp::Multi`] (ZooKeeper's `Op`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MultiOp {
    /// ZooKeeper's `check`: fails the transaction unless the node exists
    /// (`NoNode`), the request may READ it (`NoAuth`) and its data version
    /// is `version` (`BadVersion`; `None`: any). Changes nothing.
    Check {
        path: String,
        version: Option<u32>,
    },
    /// A create; `acl` as in [`NewNode`].
    Create {
        path: String,
        data: Bytes,
        ephemeral: bool,
        sequential: bool,
        acl: Option<Vec<Acl>>,
    },
    Delete {
        path: String,
        version: Option<u32>,
    },
    SetData {
        path: String,
        data: Bytes,
        version: Option<u32>,
    },
    /// A container's create (as [`ZnodeOp::CreateContainer`]).
    CreateContainer {
        path: String,
        data: Bytes,
        acl: Option<Vec<Acl>>,
    },
    /// A TTL node's create (as [`ZnodeOp::CreateTtl`]).
    CreateTtl {
        path: String,
        data: Bytes,
        sequential: bool,
        ttl_ms: u64,
        acl: Option<Vec<Acl>>,
    },
}

impl MultiOp {
    /// The path the operation names.
    pub fn path(&self) -> &str {
        match self {
            MultiOp::Check { path, .. }
            | MultiOp::Create { path, .. }
            | MultiOp::Delete { path, .. }
            | MultiOp::SetData { path, .. }
            | MultiOp::CreateContainer { path, .. }
            | MultiOp::CreateTtl { path, .. } => path,
        }
    }
}

/// What one operation of a successful [`ZnodeOp::Multi`] answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MultiOk {
    Checked,
    /// The node's actual path (with its sequence suffix) and stat.
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    /// The node's stat after the set.
    Set(Stat),
}

/// What a multi did to the tree: every operation's answer, or the index
/// of the one that failed (from 0) and its error, nothing changed.
pub type MultiOutcome = Result<Vec<MultiOk>, (usize, ZkError)>;

/// A create in either of its forms, [`ZnodeOp::Create`] (no ACL: the
/// open one) or [`ZnodeOp::CreateWithAcl`]: the one place that picks a
/// form, and the one that reads both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNode {
    pub path: String,
    pub data: Bytes,
    pub ephemeral: bool,
    pub sequential: bool,
    /// `None`: `world:anyone:cdrwa`.
    pub acl: Option<Vec<Acl>>,
}

impl NewNode {
    /// `Create` without an ACL (its encoding in logs unchanged), else
    /// `CreateWithAcl`.
    pub fn into_op(self) -> ZnodeOp {
        let NewNode {
            path,
            data,
            ephemeral,
            sequential,
            acl,
        } = self;
        match acl {
            None => ZnodeOp::Create {
                path,
                data,
                ephemeral,
                sequential,
            },
            Some(acl) => ZnodeOp::CreateWithAcl {
                path,
                data,
                ephemeral,
                sequential,
                acl,
            },
        }
    }
}

impl ZnodeOp {
    /// The create this operation is, in either form; any other
    /// operation back as it was.
    pub fn into_create(self) -> Result<NewNode, ZnodeOp> {
        let (path, data, ephemeral, sequential, acl) = match self {
            ZnodeOp::Create {
                path,
                data,
                ephemeral,
                sequential,
            } => (path, data, ephemeral, sequential, None),
            ZnodeOp::CreateWithAcl {
                path,
                data,
                ephemeral,
                sequential,
                acl,
            } => (path, data, ephemeral, sequential, Some(acl)),
            op => return Err(op),
        };
        Ok(NewNode {
            path,
            data,
            ephemeral,
            sequential,
            acl,
        })
    }
    /// The path the operation is about (`""` for session operations).
    pub fn path(&self) -> &str {
        match self {
            ZnodeOp::Create { path, .. }
            | ZnodeOp::Delete { path, .. }
            | ZnodeOp::SetData { path, .. }
            | ZnodeOp::Exists { path, .. }
            | ZnodeOp::GetData { path, .. }
            | ZnodeOp::GetChildren { path, .. }
            | ZnodeOp::GetAcl { path }
            | ZnodeOp::SetAcl { path, .. }
            | ZnodeOp::CreateWithAcl { path, .. }
            | ZnodeOp::AddWatch { path, .. }
            | ZnodeOp::RemoveWatches { path, .. }
            | ZnodeOp::CreateContainer { path, .. }
            | ZnodeOp::DeleteContainer { path }
            | ZnodeOp::CreateTtl { path, .. }
            | ZnodeOp::DeleteTtl { path, .. } => path,
            ZnodeOp::AddAuth { .. }
            | ZnodeOp::GetEphemerals { .. }
            | ZnodeOp::WhoAmI
            | ZnodeOp::Multi { .. }
            | ZnodeOp::MultiRead { .. }
            | ZnodeOp::OpenSession { .. }
            | ZnodeOp::CloseSession
            | ZnodeOp::ResumeSession
            | ZnodeOp::Ping
            | ZnodeOp::Sync
            | ZnodeOp::SetWatches { .. } => "",
        }
    }
    /// Lower-case name (`create`, `get_data`, …) for histories and errors.
    pub fn name(&self) -> &'static str {
        match self {
            ZnodeOp::OpenSession { .. } => "open_session",
            ZnodeOp::CloseSession => "close_session",
            ZnodeOp::Ping => "ping",
            ZnodeOp::Create { .. } => "create",
            ZnodeOp::Delete { .. } => "delete",
            ZnodeOp::SetData { .. } => "set_data",
            ZnodeOp::Exists { .. } => "exists",
            ZnodeOp::GetData { .. } => "get_data",
            ZnodeOp::GetChildren { .. } => "get_children",
            ZnodeOp::Sync => "sync",
            ZnodeOp::SetWatches { .. } => "set_watches",
            ZnodeOp::AddAuth { .. } => "add_auth",
            ZnodeOp::GetAcl { .. } => "get_acl",
            ZnodeOp::SetAcl { .. } => "set_acl",
            ZnodeOp::CreateWithAcl { .. } => "create",
            ZnodeOp::ResumeSession => "resume_session",
            ZnodeOp::Multi { .. } => "multi",
            ZnodeOp::MultiRead { .. } => "multi_read",
            ZnodeOp::AddWatch { .. } => "add_watch",
            ZnodeOp::RemoveWatches { check: false, .. } => "remove_watches",
            ZnodeOp::RemoveWatches { check: true, .. } => "check_watches",
            ZnodeOp::CreateContainer { .. } => "create_container",
            ZnodeOp::DeleteContainer { .. } => "delete_container",
            ZnodeOp::CreateTtl { .. } => "create_ttl",
            ZnodeOp::DeleteTtl { .. } => "delete_ttl",
            ZnodeOp::GetEphemerals { .. } => "get_ephemerals",
            ZnodeOp::WhoAmI => "who_am_i",
        }
    }
    /// True for operations that change nothing.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            ZnodeOp::Ping
                | ZnodeOp::Exists { .. }
                | ZnodeOp::GetData { .. }
                | ZnodeOp::GetChildren { .. }
                | ZnodeOp::Sync
                | ZnodeOp::SetWatches { .. }
                | ZnodeOp::AddAuth { .. }
                | ZnodeOp::GetAcl { .. }
                | ZnodeOp::ResumeSession
                | ZnodeOp::MultiRead { .. }
                | ZnodeOp::AddWatch { .. }
                | ZnodeOp::RemoveWatches { .. }
                | ZnodeOp::GetEphemerals { .. }
                | ZnodeOp::WhoAmI
        )
    }
}

/// What the znode service answers. ZooKeeper's errors are definite
/// (`Error`); a lost or timed-out request is `Response::Failed` as for
/// every protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZnodeReply {
    /// The session is open; its id.
    Session {
        session: u64,
    },
    /// The session is closed; the ephemerals that went with it.
    Closed {
        deleted: Vec<String>,
    },
    Pong,
    /// The node's actual path (with its sequence suffix) and stat.
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    /// The new stat after a set.
    Set(Stat),
    /// `exists`: the stat, `None` when there is no such node.
    Exists(Option<Stat>),
    Data {
        data: Bytes,
        stat: Stat,
    },
    /// The children's names, sorted.
    Children(Vec<String>),
    /// `sync`: the zxid applied here when it was answered.
    Synced {
        zxid: u64,
    },
    Error(ZkError),
    /// `SetWatches`: how many of the watches fired at once (the rest are
    /// set).
    WatchesSet {
        fired: u32,
    },
    /// `getACL`: the ACL (digest hashes as `x` without ADMIN) and stat.
    Acl {
        acl: Vec<Acl>,
        stat: Stat,
    },
    /// `setACL`: the new stat (`aversion` grown by one).
    AclSet(Stat),
    /// `addAuth`: the connection has the identity now.
    AuthAdded,
    /// `ResumeSession`: the session is open, with this timeout, at this
    /// server whose tree has applied `zxid`.
    Resumed {
        zxid: u64,
        timeout_ms: u64,
    },
    /// `multi` applied: one answer per operation, in order.
    Multi(Vec<MultiOk>),
    /// `multi` refused as a whole: operation `index` (from 0) failed with
    /// `error`; nothing changed. The operations before it would have
    /// succeeded; those after it were not tried.
    MultiFailed {
        index: u32,
        error: ZkError,
    },
    /// `multiRead`: one answer per read, in order (`Data`, `Children` or
    /// `Error`).
    Reads(Vec<ZnodeReply>),
    /// `addWatch`: the watch is set.
    WatchAdded,
    /// `removeWatches`: removed; `checkWatches`: there is one.
    WatchesRemoved,
    /// `getEphemerals`: the session's ephemerals under the prefix, in
    /// path order.
    Ephemerals(Vec<String>),
    /// `whoAmI`: the connection's identities (scheme, id), in the order
    /// they were added.
    Identities(Vec<super::Id>),
}

/// `Event::kind` of a fired watch (the four of `watch::EventType`) and of
/// a session the leader expired (`expired`, `key` empty).
pub const EVENT_KINDS: [&str; 5] = ["created", "deleted", "changed", "children", "expired"];

/// The event telling a connection its session expired.
pub fn expired_event(session: u64) -> Event {
    Event {
        kind: "expired".into(),
        key: Bytes::from(session.to_string()),
        value: None,
    }
}

/// The error a protocol other than Zab answers to every znode operation.
pub const NEEDS_ZAB: &str = "znode operations need --protocol zab";

/// The name of the protocol that serves znode operations (so that callers
/// outside the core can check a cluster file without naming it).
pub const SERVED_BY: &str = "zab";

#[cfg(test)]
mod tests {
    use super::*;

    /// A create without an ACL is `Create`, with one `CreateWithAcl`, and
    /// both read back whole; other operations come back unchanged.
    #[test]
    fn a_new_node_takes_the_form_its_acl_asks_for_and_reads_back() {
        let open = NewNode {
            path: "/a".into(),
            data: Bytes::from_static(b"x"),
            ephemeral: true,
            sequential: false,
            acl: None,
        };
        let closed = NewNode {
            sequential: true,
            acl: Some(crate::znode::acl::open_acl_unsafe()),
            ..open.clone()
        };
        let op = open.clone().into_op();
        assert!(
            matches!(
                op,
                ZnodeOp::Create {
                    ephemeral: true,
                    ..
                }
            ),
            "{op:?}"
        );
        assert_eq!(op.into_create(), Ok(open));
        let op = closed.clone().into_op();
        assert!(
            matches!(
                op,
                ZnodeOp::CreateWithAcl {
                    sequential: true,
                    ..
                }
            ),
            "{op:?}"
        );
        assert_eq!(op.into_create(), Ok(closed));
        let sync = ZnodeOp::Sync;
        assert_eq!(sync.clone().into_create(), Err(sync));
    }
}
