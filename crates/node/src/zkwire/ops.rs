//! From ZooKeeper's requests to the coordination service's operations
//! (`ZnodeOp`), and from its answers back to ZooKeeper's replies.

use super::jute::{frame, Writer};
use super::proto::{
    add_watch_mode, err, event, flags, op, reply_header, watcher_event, watcher_type, write_acls,
    write_stat, ZkRequest,
};
use bytes::Bytes;
use quorumkv_core::znode::tree::ttl_owner;
use quorumkv_core::znode::{
    acl, Acl, Id, MultiOp, NewNode, Rewatch, Stat, WatchKind, ZkError, ZnodeOp, ZnodeReply,
};
use quorumkv_core::{Event, Response};

/// How the answers to a request's operations become its reply body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Header only (delete, closeSession, addAuth, setWatches,
    /// removeWatches, checkWatches).
    Empty,
    /// `addWatch`: ZooKeeper answers an `ErrorResponse` record (its code,
    /// 0).
    WatchAdded,
    Ping,
    /// The created path, with the stat for `create2`.
    Created {
        with_stat: bool,
    },
    /// A stat (exists, setData, setACL).
    Stat,
    Data,
    /// Children, with the stat (`getChildren2`, a second operation's).
    Children {
        with_stat: bool,
    },
    Sync {
        path: String,
    },
    Acl,
    /// A `multi`'s results, under each operation's type.
    Multi {
        kinds: Vec<i32>,
    },
    MultiRead,
    /// `getEphemerals`: the paths.
    Ephemerals,
    /// `whoAmI`: each identity as a `ClientInfo`.
    WhoAmI,
}

/// What to do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Answer at once with this error code.
    Error(i32),
    /// Send these operations in order; shape their answers.
    Ops(Vec<ZnodeOp>, Shape),
    /// Count the nodes below this path (`getAllChildrenNumber`).
    CountBelow(String),
}

/// ZooKeeper's version argument: −1 is any; other negatives match no node.
pub(super) fn version(v: i32) -> Result<Option<u32>, i32> {
    match v {
        -1 => Ok(None),
        v if v < 0 => Err(err::BAD_VERSION),
        v => Ok(Some(v as u32)),
    }
}

fn ops(ops: Vec<ZnodeOp>, shape: Shape) -> Plan {
    Plan::Ops(ops, shape)
}

/// The plan for `req` (other than connect, handled before any request).
pub fn plan(req: ZkRequest) -> Plan {
    match req {
        ZkRequest::Ping => ops(vec![ZnodeOp::Ping], Shape::Ping),
        ZkRequest::CloseSession => ops(vec![ZnodeOp::CloseSession], Shape::Empty),
        ZkRequest::Create {
            path,
            data,
            acl,
            flags,
            with_stat,
            ttl,
        } => match creation(path, data, acl, flags, ttl) {
            Ok(c) => ops(vec![c.into_op()], Shape::Created { with_stat }),
            Err(code) => Plan::Error(code),
        },
        ZkRequest::Delete { path, version: v } => match version(v) {
            Ok(version) => ops(vec![ZnodeOp::Delete { path, version }], Shape::Empty),
            Err(e) => Plan::Error(e),
        },
        ZkRequest::Exists { path, watch } => {
            ops(vec![ZnodeOp::Exists { path, watch }], Shape::Stat)
        }
        ZkRequest::GetData { path, watch } => {
            ops(vec![ZnodeOp::GetData { path, watch }], Shape::Data)
        }
        ZkRequest::SetData {
            path,
            data,
            version: v,
        } => match version(v) {
            Ok(version) => ops(
                vec![ZnodeOp::SetData {
                    path,
                    data,
                    version,
                }],
                Shape::Stat,
            ),
            Err(e) => Plan::Error(e),
        },
        ZkRequest::GetChildren {
            path,
            watch,
            with_stat,
        } => children(path, watch, with_stat),
        ZkRequest::Sync { path } => ops(vec![ZnodeOp::Sync], Shape::Sync { path }),
        ZkRequest::GetAcl { path } => ops(vec![ZnodeOp::GetAcl { path }], Shape::Acl),
        ZkRequest::SetAcl {
            path,
            acl,
            version: v,
        } => match version(v) {
            Ok(version) => ops(vec![ZnodeOp::SetAcl { path, acl, version }], Shape::Stat),
            Err(e) => Plan::Error(e),
        },
        ZkRequest::Auth { scheme, auth } => match String::from_utf8(auth.to_vec()) {
            Ok(auth) => ops(vec![ZnodeOp::AddAuth { scheme, auth }], Shape::Empty),
            Err(_) => Plan::Error(err::AUTH_FAILED),
        },
        ZkRequest::AllChildrenNumber { path } => Plan::CountBelow(path),
        ZkRequest::SetWatches {
            relative_zxid,
            data,
            exist,
            child,
            persistent,
            recursive,
        } => set_watches(relative_zxid, [data, exist, child, persistent, recursive]),
        ZkRequest::AddWatch { path, mode } => add_watch(path, mode),
        ZkRequest::RemoveWatches { path, kind, check } => remove_watches(path, kind, check),
        ZkRequest::Multi { ops, read: false } => super::multi::plan_multi(ops),
        ZkRequest::Multi { ops, read: true } => super::multi::plan_multi_read(ops),
        ZkRequest::GetEphemerals { prefix } => get_ephemerals(prefix),
        ZkRequest::WhoAmI => ops(vec![ZnodeOp::WhoAmI], Shape::WhoAmI),
        // Only inside a multi: alone, as ZooKeeper answers it.
        ZkRequest::Check { .. } => Plan::Error(err::UNIMPLEMENTED),
        ZkRequest::Unsupported(_) | ZkRequest::Unknown(_) => Plan::Error(err::UNIMPLEMENTED),
    }
}

/// ZooKeeper's `getEphemerals`: an empty or `/` prefix (spaces around it
/// ignored) is every ephemeral; another one is matched as a string.
fn get_ephemerals(prefix: String) -> Plan {
    let prefix = match prefix.trim() {
        "" | "/" => String::new(),
        _ => prefix,
    };
    ops(vec![ZnodeOp::GetEphemerals { prefix }], Shape::Ephemerals)
}

/// `getChildren2`'s stat is read by a second operation right after the
/// children (the core answers a child list without the parent's stat):
/// a change in between can show in one and not the other.
fn children(path: String, watch: bool, with_stat: bool) -> Plan {
    let mut v = vec![ZnodeOp::GetChildren {
        path: path.clone(),
        watch,
    }];
    if with_stat {
        v.push(ZnodeOp::Exists { path, watch: false });
    }
    ops(v, Shape::Children { with_stat })
}

/// `setWatches` and `setWatches2` (data, exist, child, persistent and
/// persistent recursive paths) as ZooKeeper judges them against the
/// client's last zxid: a data watch fires at once if its node is gone or
/// changed since, an exist watch if its node now exists, a child watch if
/// its node is gone or its children changed since; the others, and every
/// persistent one, are set here.
fn set_watches(zxid: i64, [data, exist, child, persistent, recursive]: [Vec<String>; 5]) -> Plan {
    let zxid = u64::try_from(zxid).unwrap_or(0);
    let data = (data.into_iter()).map(|path| Rewatch::DataSince { path, zxid });
    let exist = (exist.into_iter()).map(|path| Rewatch::Data { path, mzxid: None });
    let child = (child.into_iter()).map(|path| Rewatch::ChildSince { path, zxid });
    let stays = |recursive| move |path| Rewatch::Stays { path, recursive };
    let persistent = persistent.into_iter().map(stays(false));
    let recursive = recursive.into_iter().map(stays(true));
    let watches = (data.chain(exist).chain(child))
        .chain(persistent.chain(recursive))
        .collect();
    ops(vec![ZnodeOp::SetWatches { watches }], Shape::Empty)
}

/// `addWatch`; a mode ZooKeeper does not know fails its decoding there
/// (`MarshallingError`).
fn add_watch(path: String, mode: i32) -> Plan {
    let recursive = match mode {
        add_watch_mode::PERSISTENT => false,
        add_watch_mode::PERSISTENT_RECURSIVE => true,
        _ => return Plan::Error(err::MARSHALLING_ERROR),
    };
    ops(
        vec![ZnodeOp::AddWatch { path, recursive }],
        Shape::WatchAdded,
    )
}

/// `removeWatches` / `checkWatches` of a `WatcherType`, as ZooKeeper 3.8
/// matches them: `Data` a one-shot data watch, `Children` a one-shot child
/// watch, and both a persistent or recursive one (ZooKeeper holds these
/// as a data and a child half), `Any` every kind; `Persistent` and
/// `PersistentRecursive` (3.9's) one kind each. Removed, a persistent
/// watch goes whole (ZooKeeper 3.8 keeps its other half).
fn remove_watches(path: String, kind: i32, check: bool) -> Plan {
    use WatchKind::*;
    let kinds = match kind {
        watcher_type::CHILDREN => vec![Child, Persistent, Recursive],
        watcher_type::DATA => vec![Data, Persistent, Recursive],
        watcher_type::ANY => vec![Data, Child, Persistent, Recursive],
        watcher_type::PERSISTENT => vec![Persistent],
        watcher_type::PERSISTENT_RECURSIVE => vec![Recursive],
        _ => return Plan::Error(err::MARSHALLING_ERROR),
    };
    let op = ZnodeOp::RemoveWatches { path, kinds, check };
    ops(vec![op], Shape::Empty)
}

/// What a create asks for: a persistent or ephemeral node (sequential or
/// not), a container, or a TTL node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Creation {
    Node(NewNode),
    Container {
        path: String,
        data: Bytes,
        acl: Option<Vec<Acl>>,
    },
    Ttl {
        path: String,
        data: Bytes,
        sequential: bool,
        ttl_ms: u64,
        acl: Option<Vec<Acl>>,
    },
}

impl Creation {
    /// As one request.
    pub(super) fn into_op(self) -> ZnodeOp {
        match self {
            Creation::Node(n) => n.into_op(),
            Creation::Container { path, data, acl } => ZnodeOp::CreateContainer { path, data, acl },
            Creation::Ttl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            } => ZnodeOp::CreateTtl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            },
        }
    }
    /// As an operation of a multi.
    pub(super) fn into_multi_op(self) -> MultiOp {
        match self {
            Creation::Node(n) => MultiOp::Create {
                path: n.path,
                data: n.data,
                ephemeral: n.ephemeral,
                sequential: n.sequential,
                acl: n.acl,
            },
            Creation::Container { path, data, acl } => MultiOp::CreateContainer { path, data, acl },
            Creation::Ttl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            } => MultiOp::CreateTtl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            },
        }
    }
}

/// The node a create with flags `f` and TTL `ttl` (−1 but for
/// `createTTL`) asks for, an open ACL as none; or the code that refuses
/// it. As ZooKeeper 3.8 with `zookeeper.extendedTypesEnabled=true` reads
/// them (`CreateMode.fromFlag`, `EphemeralType.validateTTL`): a flag
/// outside 0..=6 is `BadArguments`; a TTL mode (5, 6) needs a TTL in
/// 1..=`MAX_TTL_MS`, and any other mode no TTL (a negative one is none),
/// else `BadArguments`.
pub(super) fn creation(
    path: String,
    data: Bytes,
    acl: Vec<Acl>,
    f: i32,
    ttl: i64,
) -> Result<Creation, i32> {
    if !(0..=flags::PERSISTENT_SEQUENTIAL_WITH_TTL).contains(&f) {
        return Err(err::BAD_ARGUMENTS);
    }
    let ttl_mode = f >= flags::PERSISTENT_WITH_TTL;
    let ttl_ms = match (ttl_mode, u64::try_from(ttl)) {
        (true, Ok(t)) if ttl_owner(t).is_some() => Some(t),
        (true, _) | (false, Ok(_)) => return Err(err::BAD_ARGUMENTS),
        (false, Err(_)) => None,
    };
    let open = acl.len() == 1 && acl[0].perms == acl::ALL && acl[0].id == Id::anyone();
    let acl = (!open).then_some(acl);
    Ok(match ttl_ms {
        Some(ttl_ms) => Creation::Ttl {
            path,
            data,
            sequential: f == flags::PERSISTENT_SEQUENTIAL_WITH_TTL,
            ttl_ms,
            acl,
        },
        None if f == flags::CONTAINER => Creation::Container { path, data, acl },
        None => Creation::Node(NewNode {
            path,
            data,
            ephemeral: f & flags::EPHEMERAL != 0,
            sequential: f & flags::SEQUENTIAL != 0,
            acl,
        }),
    })
}

/// `whoAmI`'s `ClientInfo` of an identity: its scheme and user, as
/// ZooKeeper's providers name it (`getUserName`: a digest id's user is
/// the part before its hash).
fn client_info(id: &Id) -> (&str, &str) {
    let user = match id.scheme.as_str() {
        "digest" => id.id.split(':').next().unwrap_or(""),
        _ => id.id.as_str(),
    };
    (&id.scheme, user)
}

/// ZooKeeper's code for one of the core's definite errors.
pub fn error_code(e: &ZkError) -> i32 {
    match e {
        ZkError::NoNode => err::NO_NODE,
        ZkError::NodeExists => err::NODE_EXISTS,
        ZkError::BadVersion => err::BAD_VERSION,
        ZkError::NotEmpty => err::NOT_EMPTY,
        ZkError::NoChildrenForEphemerals => err::NO_CHILDREN_FOR_EPHEMERALS,
        ZkError::SessionExpired => err::SESSION_EXPIRED,
        ZkError::BadArguments(_) => err::BAD_ARGUMENTS,
        ZkError::NoAuth => err::NO_AUTH,
        ZkError::InvalidAcl => err::INVALID_ACL,
        ZkError::NoWatcher => err::NO_WATCHER,
    }
}

/// The error code of an answer that is not a success: a definite znode
/// error keeps its code; a failure whose outcome is unknown (no leader,
/// timed out) is `ConnectionLoss`, the code ZooKeeper clients treat as
/// "may or may not have happened".
fn failure(r: &Response) -> i32 {
    match r {
        Response::Znode(ZnodeReply::Error(e)) => error_code(e),
        Response::Failed(_) => err::CONNECTION_LOSS,
        _ => err::SYSTEM_ERROR,
    }
}

/// The largest zxid an answer shows (for the reply header).
pub fn zxid_of(r: &Response) -> u64 {
    let stat_zxid = |s: &Stat| s.mzxid.max(s.pzxid).max(s.czxid);
    match r {
        Response::Znode(ZnodeReply::Created { stat, .. })
        | Response::Znode(ZnodeReply::Set(stat))
        | Response::Znode(ZnodeReply::Data { stat, .. })
        | Response::Znode(ZnodeReply::Acl { stat, .. })
        | Response::Znode(ZnodeReply::AclSet(stat))
        | Response::Znode(ZnodeReply::Exists(Some(stat))) => stat_zxid(stat),
        Response::Znode(ZnodeReply::Synced { zxid }) => *zxid,
        Response::Znode(r @ (ZnodeReply::Multi(_) | ZnodeReply::Reads(_))) => {
            super::multi::max_zxid(r)
        }
        _ => 0,
    }
}

/// The body of a successful reply, or the error code to answer instead.
fn body(shape: &Shape, answers: &[Response], w: &mut Writer) -> Result<(), i32> {
    let first = answers.first().ok_or(err::SYSTEM_ERROR)?;
    let Response::Znode(reply) = first else {
        return Err(failure(first));
    };
    match (shape, reply) {
        (
            Shape::Empty,
            ZnodeReply::Deleted
            | ZnodeReply::Closed { .. }
            | ZnodeReply::AuthAdded
            | ZnodeReply::WatchesSet { .. }
            | ZnodeReply::WatchesRemoved,
        ) => {}
        (Shape::WatchAdded, ZnodeReply::WatchAdded) => drop(w.int(err::OK)),
        (Shape::Ping, _) => {}
        (Shape::Created { with_stat }, ZnodeReply::Created { path, stat }) => {
            w.string(path);
            if *with_stat {
                write_stat(w, stat);
            }
        }
        (Shape::Stat, ZnodeReply::Exists(None)) => return Err(err::NO_NODE),
        (
            Shape::Stat,
            ZnodeReply::Exists(Some(stat)) | ZnodeReply::Set(stat) | ZnodeReply::AclSet(stat),
        ) => write_stat(w, stat),
        (Shape::Data, ZnodeReply::Data { data, stat }) => {
            w.buffer(data);
            write_stat(w, stat);
        }
        (Shape::Children { with_stat }, ZnodeReply::Children(names)) => {
            w.strings(names);
            if *with_stat {
                match answers.get(1) {
                    Some(Response::Znode(ZnodeReply::Exists(Some(stat)))) => write_stat(w, stat),
                    Some(Response::Znode(ZnodeReply::Exists(None))) => return Err(err::NO_NODE),
                    Some(other) => return Err(failure(other)),
                    None => return Err(err::SYSTEM_ERROR),
                }
            }
        }
        (Shape::Sync { path }, ZnodeReply::Synced { .. }) => drop(w.string(path)),
        (Shape::Acl, ZnodeReply::Acl { acl, stat }) => {
            write_acls(w, acl);
            write_stat(w, stat);
        }
        (Shape::Multi { kinds }, ZnodeReply::Multi(_) | ZnodeReply::MultiFailed { .. }) => {
            super::multi::write_multi(kinds, reply, w)?
        }
        (Shape::MultiRead, ZnodeReply::Reads(_)) => super::multi::write_reads(reply, w)?,
        (Shape::Ephemerals, ZnodeReply::Ephemerals(paths)) => drop(w.strings(paths)),
        (Shape::WhoAmI, ZnodeReply::Identities(ids)) => {
            w.int(i32::try_from(ids.len()).unwrap_or(i32::MAX));
            for id in ids {
                let (scheme, user) = client_info(id);
                w.string(scheme).string(user);
            }
        }
        _ => return Err(failure(first)),
    }
    Ok(())
}

/// The reply packet to request `xid`, from its operations' answers;
/// `zxid` is the largest this connection has seen (raised here). A ping
/// is answered even when the core could not confirm it (no leader): the
/// session's expiry, not a ping, tells the client it is gone.
pub fn reply(xid: i32, shape: &Shape, answers: &[Response], zxid: &mut u64) -> Bytes {
    for a in answers {
        *zxid = (*zxid).max(zxid_of(a));
    }
    let mut b = Writer::default();
    let code = match body(shape, answers, &mut b) {
        Ok(()) => err::OK,
        Err(_) if *shape == Shape::Ping => err::OK,
        Err(code) => code,
    };
    let mut w = Writer::default();
    reply_header(&mut w, xid, *zxid as i64, code);
    if code == err::OK {
        w.buf.extend_from_slice(&b.buf);
    }
    frame(w)
}

/// The reply to `getAllChildrenNumber`: the count, or an error code.
pub fn count_reply(xid: i32, zxid: u64, count: Result<i32, i32>) -> Bytes {
    let mut w = Writer::default();
    match count {
        Ok(n) => {
            reply_header(&mut w, xid, zxid as i64, err::OK);
            w.int(n);
        }
        Err(code) => reply_header(&mut w, xid, zxid as i64, code),
    }
    frame(w)
}

/// A reply with an error code and no body.
pub fn error_reply(xid: i32, zxid: u64, code: i32) -> Bytes {
    let mut w = Writer::default();
    reply_header(&mut w, xid, zxid as i64, code);
    frame(w)
}

/// The notification packet for an event the core pushed to this
/// connection, and whether the session is gone (`expired`: the client is
/// told, then the connection closes).
pub fn notification(e: &Event) -> Option<(Bytes, bool)> {
    let path = String::from_utf8_lossy(&e.key);
    let (kind, state, path) = match e.kind.as_str() {
        "created" => (event::NODE_CREATED, event::STATE_SYNC_CONNECTED, &*path),
        "deleted" => (event::NODE_DELETED, event::STATE_SYNC_CONNECTED, &*path),
        "changed" => (
            event::NODE_DATA_CHANGED,
            event::STATE_SYNC_CONNECTED,
            &*path,
        ),
        "children" => (
            event::NODE_CHILDREN_CHANGED,
            event::STATE_SYNC_CONNECTED,
            &*path,
        ),
        "expired" => (event::NONE, event::STATE_EXPIRED, ""),
        _ => return None,
    };
    let mut w = Writer::default();
    watcher_event(&mut w, kind, state, path);
    Some((frame(w), state == event::STATE_EXPIRED))
}

/// True for `closeSession`: the connection closes after its reply.
pub fn is_close(op_code: i32) -> bool {
    op_code == op::CLOSE_SESSION
}

#[cfg(test)]
mod tests {
    use super::super::jute::Reader;
    use super::*;

    fn stat(v: u32) -> Stat {
        Stat {
            czxid: 4,
            mzxid: 9,
            version: v,
            ..Stat::default()
        }
    }

    #[test]
    fn create_modes() {
        let open = vec![Acl::new(acl::ALL, "world", "anyone")];
        let p = plan(ZkRequest::Create {
            path: "/a".into(),
            data: Bytes::new(),
            acl: open.clone(),
            flags: 3,
            with_stat: false,
            ttl: -1,
        });
        let Plan::Ops(v, _) = p else { panic!() };
        assert!(matches!(
            &v[0],
            ZnodeOp::Create {
                ephemeral: true,
                sequential: true,
                ..
            }
        ));
        let mk_ttl = |flags, acl: Vec<Acl>, ttl| {
            plan(ZkRequest::Create {
                path: "/a".into(),
                data: Bytes::new(),
                acl,
                flags,
                with_stat: true,
                ttl,
            })
        };
        let mk = |flags, acl| mk_ttl(flags, acl, -1);
        let Plan::Ops(v, _) = mk(4, open.clone()) else {
            panic!()
        };
        assert!(matches!(&v[0], ZnodeOp::CreateContainer { acl: None, .. }));
        // A TTL mode without a TTL (create2), a mode ZooKeeper does not
        // know: BadArguments.
        assert_eq!(mk(6, open.clone()), Plan::Error(err::BAD_ARGUMENTS));
        assert_eq!(mk(7, open.clone()), Plan::Error(err::BAD_ARGUMENTS));
        assert_eq!(mk(-3, open.clone()), Plan::Error(err::BAD_ARGUMENTS));
        let Plan::Ops(v, _) = mk(0, vec![Acl::new(acl::READ, "world", "anyone")]) else {
            panic!()
        };
        assert!(matches!(&v[0], ZnodeOp::CreateWithAcl { .. }));
        // createTTL: a TTL in 1..=max for modes 5 and 6, none for others.
        let Plan::Ops(v, _) = mk_ttl(6, open.clone(), 1000) else {
            panic!()
        };
        let want = ZnodeOp::CreateTtl {
            path: "/a".into(),
            data: Bytes::new(),
            sequential: true,
            ttl_ms: 1000,
            acl: None,
        };
        assert_eq!(v, vec![want]);
        let max = quorumkv_core::znode::tree::MAX_TTL_MS as i64;
        assert!(matches!(mk_ttl(5, open.clone(), max), Plan::Ops(..)));
        for (flags, ttl) in [(5, 0), (5, -1), (5, max + 1), (6, i64::MIN), (0, 0), (1, 5)] {
            let p = mk_ttl(flags, open.clone(), ttl);
            assert_eq!(p, Plan::Error(err::BAD_ARGUMENTS), "{flags} {ttl}");
        }
        // createTTL of another mode with a negative TTL is that mode.
        let Plan::Ops(v, _) = mk_ttl(1, open, -1) else {
            panic!()
        };
        assert!(matches!(
            &v[0],
            ZnodeOp::Create {
                ephemeral: true,
                ..
            }
        ));
    }

    /// `getEphemerals` with `/`, an empty or a blank prefix asks for all;
    /// `whoAmI` answers each identity as a `ClientInfo` (a digest id's
    /// user without its hash).
    #[test]
    fn get_ephemerals_and_who_am_i() {
        for (given, asked) in [("/", ""), (" ", ""), ("", ""), ("/a", "/a"), ("/a/", "/a/")] {
            let p = plan(ZkRequest::GetEphemerals {
                prefix: given.into(),
            });
            let op = ZnodeOp::GetEphemerals {
                prefix: asked.into(),
            };
            assert_eq!(p, Plan::Ops(vec![op], Shape::Ephemerals));
        }
        let got = Response::Znode(ZnodeReply::Ephemerals(vec!["/a".into(), "/b/c".into()]));
        let r = reply(5, &Shape::Ephemerals, &[got], &mut 0);
        let mut rd = Reader::new(&r[20..]);
        assert_eq!(rd.strings().unwrap(), vec!["/a".to_string(), "/b/c".into()]);
        assert_eq!(rd.remaining(), 0);
        let ids = vec![Id::new("digest", "alice:aGFzaA=="), Id::new("user", "bob")];
        let got = Response::Znode(ZnodeReply::Identities(ids));
        let r = reply(6, &Shape::WhoAmI, &[got], &mut 0);
        let mut rd = Reader::new(&r[20..]);
        assert_eq!(rd.int(), Ok(2));
        let pairs = [rd.string(), rd.string(), rd.string(), rd.string()];
        assert_eq!(
            pairs.map(Result::unwrap),
            ["digest", "alice", "user", "bob"]
        );
        let none = Response::Znode(ZnodeReply::Identities(vec![]));
        let r = reply(7, &Shape::WhoAmI, &[none], &mut 0);
        assert_eq!(&r[20..], &[0, 0, 0, 0]);
    }

    #[test]
    fn versions_and_unknown_ops() {
        let p = plan(ZkRequest::Delete {
            path: "/a".into(),
            version: -1,
        });
        assert!(
            matches!(p, Plan::Ops(v, _) if v[0] == ZnodeOp::Delete { path: "/a".into(), version: None })
        );
        let p = plan(ZkRequest::Delete {
            path: "/a".into(),
            version: -5,
        });
        assert_eq!(p, Plan::Error(err::BAD_VERSION));
        assert_eq!(
            plan(ZkRequest::Unknown(77)),
            Plan::Error(err::UNIMPLEMENTED)
        );
    }

    fn header(b: &Bytes) -> (i32, i64, i32, usize) {
        let mut r = Reader::new(&b[4..]);
        let h = (r.int().unwrap(), r.long().unwrap(), r.int().unwrap());
        (h.0, h.1, h.2, r.remaining())
    }

    /// `setWatches` becomes one `SetWatches` of ZooKeeper's forms, judged
    /// against the client's last zxid (a negative one as 0); answered
    /// with a bare header.
    #[test]
    fn set_watches_takes_zookeepers_forms() {
        let p = plan(ZkRequest::SetWatches {
            relative_zxid: 12,
            data: vec!["/d".into()],
            exist: vec!["/e".into()],
            child: vec!["/c".into()],
            persistent: vec!["/p".into()],
            recursive: vec!["/r".into()],
        });
        let watches = vec![
            Rewatch::DataSince {
                path: "/d".into(),
                zxid: 12,
            },
            Rewatch::Data {
                path: "/e".into(),
                mzxid: None,
            },
            Rewatch::ChildSince {
                path: "/c".into(),
                zxid: 12,
            },
            Rewatch::Stays {
                path: "/p".into(),
                recursive: false,
            },
            Rewatch::Stays {
                path: "/r".into(),
                recursive: true,
            },
        ];
        let want = Plan::Ops(vec![ZnodeOp::SetWatches { watches }], Shape::Empty);
        assert_eq!(p, want);
        let p = plan(ZkRequest::SetWatches {
            relative_zxid: -5,
            data: vec!["/d".into()],
            exist: vec![],
            child: vec![],
            persistent: vec![],
            recursive: vec![],
        });
        let Plan::Ops(ops, _) = p else {
            panic!("{p:?}")
        };
        let want = vec![Rewatch::DataSince {
            path: "/d".into(),
            zxid: 0,
        }];
        assert_eq!(ops, vec![ZnodeOp::SetWatches { watches: want }]);
        let set = Response::Znode(ZnodeReply::WatchesSet { fired: 1 });
        let r = reply(-8, &Shape::Empty, &[set], &mut 7);
        assert_eq!(
            &r[4..],
            &[0xff, 0xff, 0xff, 0xf8, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0]
        );
    }

    /// `addWatch` answers an `ErrorResponse` (0) after the header;
    /// `removeWatches` and `checkWatches` a bare header, or `NoWatcher`.
    /// Modes and types ZooKeeper cannot decode are `MarshallingError`.
    #[test]
    fn add_remove_and_check_watches() {
        let p = plan(ZkRequest::AddWatch {
            path: "/a".into(),
            mode: 1,
        });
        let add = ZnodeOp::AddWatch {
            path: "/a".into(),
            recursive: true,
        };
        assert_eq!(p, Plan::Ops(vec![add], Shape::WatchAdded));
        let bad = ZkRequest::AddWatch {
            path: "/a".into(),
            mode: 2,
        };
        assert_eq!(plan(bad), Plan::Error(err::MARSHALLING_ERROR));
        let added = Response::Znode(ZnodeReply::WatchAdded);
        let r = reply(3, &Shape::WatchAdded, &[added], &mut 7);
        assert_eq!(
            &r[4..],
            &[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let rm = |kind, check| {
            plan(ZkRequest::RemoveWatches {
                path: "/a".into(),
                kind,
                check,
            })
        };
        let kinds = |p: Plan| match p {
            Plan::Ops(v, Shape::Empty) => match &v[..] {
                [ZnodeOp::RemoveWatches { kinds, check, .. }] => (kinds.clone(), *check),
                _ => panic!("{v:?}"),
            },
            p => panic!("{p:?}"),
        };
        use WatchKind::*;
        assert_eq!(
            kinds(rm(1, true)),
            (vec![Child, Persistent, Recursive], true)
        );
        assert_eq!(
            kinds(rm(2, false)),
            (vec![Data, Persistent, Recursive], false)
        );
        assert_eq!(kinds(rm(3, false)).0.len(), 4);
        assert_eq!(kinds(rm(5, false)).0, vec![Recursive]);
        assert_eq!(rm(0, false), Plan::Error(err::MARSHALLING_ERROR));
        let none = Response::Znode(ZnodeReply::Error(ZkError::NoWatcher));
        let r = reply(4, &Shape::Empty, &[none], &mut 7);
        assert_eq!(&r[16..], &err::NO_WATCHER.to_be_bytes());
        let done = Response::Znode(ZnodeReply::WatchesRemoved);
        let r = reply(4, &Shape::Empty, &[done], &mut 7);
        assert_eq!((r.len(), &r[16..]), (20, &[0u8; 4][..]));
    }

    #[test]
    fn replies_carry_codes_stats_and_zxids() {
        let mut zxid = 0;
        let ok = Response::Znode(ZnodeReply::Data {
            data: Bytes::from_static(b"hi"),
            stat: stat(2),
        });
        let r = reply(3, &Shape::Data, &[ok], &mut zxid);
        assert_eq!(header(&r), (3, 9, 0, 4 + 2 + 68));
        let no = Response::Znode(ZnodeReply::Error(ZkError::NoNode));
        assert_eq!(
            header(&reply(4, &Shape::Data, &[no], &mut zxid)),
            (4, 9, -101, 0)
        );
        let none = Response::Znode(ZnodeReply::Exists(None));
        assert_eq!(header(&reply(5, &Shape::Stat, &[none], &mut zxid)).2, -101);
        let lost = Response::Failed(quorumkv_core::OpError::NotLeader { hint: None });
        assert_eq!(
            header(&reply(
                6,
                &Shape::Stat,
                std::slice::from_ref(&lost),
                &mut zxid
            ))
            .2,
            -4
        );
        // A ping is answered even when the core could not confirm it.
        assert_eq!(header(&reply(-2, &Shape::Ping, &[lost], &mut zxid)).2, 0);
        let kids = [
            Response::Znode(ZnodeReply::Children(vec!["x".into()])),
            Response::Znode(ZnodeReply::Exists(Some(stat(0)))),
        ];
        let r = reply(7, &Shape::Children { with_stat: true }, &kids, &mut zxid);
        assert_eq!(header(&r), (7, 9, 0, 4 + 4 + 1 + 68));
    }

    #[test]
    fn events_become_notifications() {
        let e = Event {
            kind: "children".into(),
            key: Bytes::from_static(b"/p"),
            value: None,
        };
        let (b, gone) = notification(&e).unwrap();
        assert!(!gone);
        let mut r = Reader::new(&b[4..]);
        assert_eq!((r.int(), r.long(), r.int()), (Ok(-1), Ok(-1), Ok(0)));
        assert_eq!((r.int(), r.int()), (Ok(4), Ok(3)));
        assert_eq!(r.string().as_deref(), Ok("/p"));
        let x = quorumkv_core::znode::op::expired_event(5);
        assert!(notification(&x).unwrap().1);
    }
}
