//! ZooKeeper 3.5–3.8's client records (`zookeeper.jute`), op codes
//! (`ZooDefs.OpCode`) and error codes (`KeeperException.Code`), decoded
//! from and encoded to jute (`super::jute`).

use super::jute::{JuteError, Reader, Writer};
use bytes::Bytes;
use quorumkv_core::znode::{Acl, Id, Stat};

/// `ZooDefs.OpCode`.
pub mod op {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CHECK_WATCHES: i32 = 17;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
    pub const SET_WATCHES: i32 = 101;
    pub const SASL: i32 = 102;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const WHO_AM_I: i32 = 107;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;

    /// Op codes ZooKeeper 3.8 knows (`Request.isValid`): others are
    /// answered `Unimplemented` and the connection closed, as it does.
    pub fn is_known(code: i32) -> bool {
        matches!(code, 1..=9 | 11..=22 | 100..=107 | -11 | -10)
    }
}

/// `KeeperException.Code`.
pub mod err {
    pub const OK: i32 = 0;
    pub const SYSTEM_ERROR: i32 = -1;
    pub const CONNECTION_LOSS: i32 = -4;
    pub const MARSHALLING_ERROR: i32 = -5;
    pub const UNIMPLEMENTED: i32 = -6;
    pub const BAD_ARGUMENTS: i32 = -8;
    pub const NO_NODE: i32 = -101;
    pub const NO_AUTH: i32 = -102;
    pub const BAD_VERSION: i32 = -103;
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub const NODE_EXISTS: i32 = -110;
    pub const NOT_EMPTY: i32 = -111;
    pub const SESSION_EXPIRED: i32 = -112;
    pub const INVALID_ACL: i32 = -114;
    pub const AUTH_FAILED: i32 = -115;
    pub const NO_WATCHER: i32 = -121;
}

/// The xids of the packets that are not numbered requests.
pub mod xid {
    /// A watch event the server pushes.
    pub const NOTIFICATION: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

/// `Watcher.Event.EventType` and `KeeperState`.
pub mod event {
    pub const NONE: i32 = -1;
    pub const NODE_CREATED: i32 = 1;
    pub const NODE_DELETED: i32 = 2;
    pub const NODE_DATA_CHANGED: i32 = 3;
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
    pub const STATE_SYNC_CONNECTED: i32 = 3;
    pub const STATE_EXPIRED: i32 = -112;
}

/// `AddWatchMode`.
pub mod add_watch_mode {
    pub const PERSISTENT: i32 = 0;
    pub const PERSISTENT_RECURSIVE: i32 = 1;
}

/// `Watcher.WatcherType` of `removeWatches` and `checkWatches` (3.9 added
/// the last two).
pub mod watcher_type {
    pub const CHILDREN: i32 = 1;
    pub const DATA: i32 = 2;
    pub const ANY: i32 = 3;
    pub const PERSISTENT: i32 = 4;
    pub const PERSISTENT_RECURSIVE: i32 = 5;
}

/// `CreateMode` flags.
pub mod flags {
    pub const EPHEMERAL: i32 = 1;
    pub const SEQUENTIAL: i32 = 2;
    pub const CONTAINER: i32 = 4;
    pub const PERSISTENT_WITH_TTL: i32 = 5;
    pub const PERSISTENT_SEQUENTIAL_WITH_TTL: i32 = 6;
}

/// `ConnectRequest`; `read_only` is absent from clients before 3.4.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Bytes,
    pub read_only: bool,
}

impl ConnectRequest {
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(ConnectRequest {
            protocol_version: r.int()?,
            last_zxid_seen: r.long()?,
            timeout_ms: r.int()?,
            session_id: r.long()?,
            passwd: r.buffer()?,
            read_only: r.remaining() > 0 && r.bool()?,
        })
    }
}

/// `ConnectResponse` (with `readOnly`, which every 3.5+ server sends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectResponse {
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: [u8; 16],
}

impl ConnectResponse {
    pub fn encode(&self, w: &mut Writer) {
        w.int(0).int(self.timeout_ms).long(self.session_id);
        w.buffer(&self.passwd).bool(false);
    }
}

/// `ReplyHeader`.
pub fn reply_header(w: &mut Writer, xid: i32, zxid: i64, err: i32) {
    w.int(xid).long(zxid).int(err);
}

/// `Stat`, field by field in jute's order. quorumkv's counters are
/// unsigned; they are sent as ZooKeeper's signed fields (same bits). The
/// owner mark of a container or a TTL node is sent as 0, as ZooKeeper
/// sends it (`DataNode.getClientEphemeralOwner`): only an ephemeral's
/// owner shows.
pub fn write_stat(w: &mut Writer, s: &Stat) {
    let owner = if s.is_ephemeral() {
        s.ephemeral_owner
    } else {
        0
    };
    w.long(s.czxid as i64).long(s.mzxid as i64);
    w.long(s.ctime as i64).long(s.mtime as i64);
    w.int(s.version as i32)
        .int(s.cversion as i32)
        .int(s.aversion as i32);
    w.long(owner as i64);
    w.int(s.data_length as i32).int(s.num_children as i32);
    w.long(s.pzxid as i64);
}

/// A vector of `ACL`s: perms, then the `Id` (scheme, id).
pub fn write_acls(w: &mut Writer, acls: &[Acl]) {
    w.int(i32::try_from(acls.len()).unwrap_or(i32::MAX));
    for a in acls {
        w.int(a.perms as i32).string(&a.id.scheme).string(&a.id.id);
    }
}

pub fn read_acls(r: &mut Reader<'_>) -> Result<Vec<Acl>, JuteError> {
    // perms + two string lengths at least.
    let n = r.count(12)?;
    (0..n)
        .map(|_| {
            let perms = r.int()? as u32;
            let (scheme, id) = (r.string()?, r.string()?);
            Ok(Acl {
                perms,
                id: Id { scheme, id },
            })
        })
        .collect()
}

/// A `WatcherEvent` notification packet's record (header included).
pub fn watcher_event(w: &mut Writer, kind: i32, state: i32, path: &str) {
    reply_header(w, xid::NOTIFICATION, -1, err::OK);
    w.int(kind).int(state).string(path);
}

/// A client request after its `RequestHeader`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZkRequest {
    Ping,
    CloseSession,
    Create {
        path: String,
        data: Bytes,
        acl: Vec<Acl>,
        flags: i32,
        /// `create2` and the TTL/container forms answer the stat too.
        with_stat: bool,
        /// `createTTL`'s TTL (ms); −1 for the other creates, as ZooKeeper
        /// reads them.
        ttl: i64,
    },
    Delete {
        path: String,
        version: i32,
    },
    Exists {
        path: String,
        watch: bool,
    },
    GetData {
        path: String,
        watch: bool,
    },
    SetData {
        path: String,
        data: Bytes,
        version: i32,
    },
    GetChildren {
        path: String,
        watch: bool,
        /// `getChildren2`: with the parent's stat.
        with_stat: bool,
    },
    Sync {
        path: String,
    },
    GetAcl {
        path: String,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    Auth {
        scheme: String,
        auth: Bytes,
    },
    /// `getAllChildrenNumber`: how many nodes are below `path`.
    AllChildrenNumber {
        path: String,
    },
    /// `setWatches` after a reconnect: the watches the client holds, and
    /// the last zxid it has seen.
    /// `setWatches2` (3.6) adds the persistent and persistent recursive
    /// watches (empty for `setWatches`).
    SetWatches {
        relative_zxid: i64,
        data: Vec<String>,
        exist: Vec<String>,
        child: Vec<String>,
        persistent: Vec<String>,
        recursive: Vec<String>,
    },
    /// `addWatch` with its `AddWatchMode`.
    AddWatch {
        path: String,
        mode: i32,
    },
    /// `removeWatches` (`check`: `checkWatches`) with its `WatcherType`.
    RemoveWatches {
        path: String,
        kind: i32,
        check: bool,
    },
    /// `check`, found only inside a `multi`.
    Check {
        path: String,
        version: i32,
    },
    /// `multi` (`read`: `multiRead`): its operations in order
    /// (`super::multi`).
    Multi {
        ops: Vec<ZkRequest>,
        read: bool,
    },
    /// `getEphemerals` with its prefix.
    GetEphemerals {
        prefix: String,
    },
    /// `whoAmI` (no body).
    WhoAmI,
    /// A known op code quorumkv does not serve yet.
    Unsupported(i32),
    /// An op code ZooKeeper does not know either.
    Unknown(i32),
}

/// A request packet: its xid, op code and the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub xid: i32,
    pub op: i32,
    pub req: ZkRequest,
}

impl Packet {
    /// Decode one whole request packet (without its length prefix).
    pub fn decode(buf: &[u8]) -> Result<Packet, JuteError> {
        let mut r = Reader::new(buf);
        let (xid, code) = (r.int()?, r.int()?);
        let req = decode_body(code, &mut r)?;
        Ok(Packet { xid, op: code, req })
    }
}

fn path_watch(r: &mut Reader<'_>) -> Result<(String, bool), JuteError> {
    Ok((r.string()?, r.bool()?))
}

pub(super) fn decode_body(code: i32, r: &mut Reader<'_>) -> Result<ZkRequest, JuteError> {
    Ok(match code {
        op::PING => ZkRequest::Ping,
        op::CLOSE_SESSION => ZkRequest::CloseSession,
        op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
            let (path, data, acl, flags) = (r.string()?, r.buffer()?, read_acls(r)?, r.int()?);
            let ttl = match code {
                op::CREATE_TTL => r.long()?,
                _ => -1,
            };
            ZkRequest::Create {
                path,
                data,
                acl,
                flags,
                with_stat: code != op::CREATE,
                ttl,
            }
        }
        op::DELETE => ZkRequest::Delete {
            path: r.string()?,
            version: r.int()?,
        },
        op::EXISTS => {
            let (path, watch) = path_watch(r)?;
            ZkRequest::Exists { path, watch }
        }
        op::GET_DATA => {
            let (path, watch) = path_watch(r)?;
            ZkRequest::GetData { path, watch }
        }
        op::SET_DATA => ZkRequest::SetData {
            path: r.string()?,
            data: r.buffer()?,
            version: r.int()?,
        },
        op::GET_CHILDREN | op::GET_CHILDREN2 => {
            let (path, watch) = path_watch(r)?;
            let with_stat = code == op::GET_CHILDREN2;
            ZkRequest::GetChildren {
                path,
                watch,
                with_stat,
            }
        }
        _ => decode_rest(code, r)?,
    })
}

fn decode_rest(code: i32, r: &mut Reader<'_>) -> Result<ZkRequest, JuteError> {
    Ok(match code {
        op::SYNC => ZkRequest::Sync { path: r.string()? },
        op::GET_ACL => ZkRequest::GetAcl { path: r.string()? },
        op::SET_ACL => ZkRequest::SetAcl {
            path: r.string()?,
            acl: read_acls(r)?,
            version: r.int()?,
        },
        op::AUTH => {
            r.int()?; // `type`, always 0
            ZkRequest::Auth {
                scheme: r.string()?,
                auth: r.buffer()?,
            }
        }
        op::GET_ALL_CHILDREN_NUMBER => ZkRequest::AllChildrenNumber { path: r.string()? },
        op::SET_WATCHES | op::SET_WATCHES2 => {
            let relative_zxid = r.long()?;
            let (data, exist, child) = (r.strings()?, r.strings()?, r.strings()?);
            let two = code == op::SET_WATCHES2;
            let mut more = || if two { r.strings() } else { Ok(Vec::new()) };
            let (persistent, recursive) = (more()?, more()?);
            ZkRequest::SetWatches {
                relative_zxid,
                data,
                exist,
                child,
                persistent,
                recursive,
            }
        }
        op::ADD_WATCH => ZkRequest::AddWatch {
            path: r.string()?,
            mode: r.int()?,
        },
        op::CHECK_WATCHES | op::REMOVE_WATCHES => ZkRequest::RemoveWatches {
            path: r.string()?,
            kind: r.int()?,
            check: code == op::CHECK_WATCHES,
        },
        op::MULTI | op::MULTI_READ => ZkRequest::Multi {
            ops: super::multi::decode(r)?,
            read: code == op::MULTI_READ,
        },
        op::GET_EPHEMERALS => ZkRequest::GetEphemerals {
            prefix: r.string()?,
        },
        op::WHO_AM_I => ZkRequest::WhoAmI,
        c if op::is_known(c) => ZkRequest::Unsupported(c),
        c => ZkRequest::Unknown(c),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(xid: i32, code: i32, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        w.int(xid).int(code);
        body(&mut w);
        w.buf.to_vec()
    }

    #[test]
    fn requests_decode() {
        let p = packet(5, op::CREATE2, |w| {
            w.string("/a").buffer(b"v");
            write_acls(w, &[Acl::new(31, "world", "anyone")]);
            w.int(3);
        });
        let want = ZkRequest::Create {
            path: "/a".into(),
            data: Bytes::from_static(b"v"),
            acl: vec![Acl::new(31, "world", "anyone")],
            flags: 3,
            with_stat: true,
            ttl: -1,
        };
        assert_eq!(Packet::decode(&p).unwrap().req, want);
        let p = packet(5, op::CREATE_TTL, |w| {
            w.string("/t").buffer(b"");
            write_acls(w, &[Acl::new(31, "world", "anyone")]);
            w.int(5).long(60_000);
        });
        assert!(matches!(
            Packet::decode(&p).unwrap().req,
            ZkRequest::Create {
                flags: 5,
                ttl: 60_000,
                with_stat: true,
                ..
            }
        ));
        let p = packet(8, op::GET_EPHEMERALS, |w| {
            w.string("/e");
        });
        let want = ZkRequest::GetEphemerals {
            prefix: "/e".into(),
        };
        assert_eq!(Packet::decode(&p).unwrap().req, want);
        let p = packet(9, op::WHO_AM_I, |_| {});
        assert_eq!(Packet::decode(&p).unwrap().req, ZkRequest::WhoAmI);
        let p = packet(6, op::SET_DATA, |w| {
            w.string("/a").buffer(b"x").int(-1);
        });
        let got = Packet::decode(&p).unwrap();
        assert_eq!((got.xid, got.op), (6, op::SET_DATA));
        assert!(matches!(got.req, ZkRequest::SetData { version: -1, .. }));
        let p = packet(7, op::GET_CHILDREN2, |w| {
            w.string("/").bool(true);
        });
        assert!(matches!(
            Packet::decode(&p).unwrap().req,
            ZkRequest::GetChildren {
                watch: true,
                with_stat: true,
                ..
            }
        ));
        let p = packet(-4, op::AUTH, |w| {
            w.int(0).string("digest").buffer(b"u:p");
        });
        assert!(matches!(
            Packet::decode(&p).unwrap().req,
            ZkRequest::Auth { .. }
        ));
        let p = packet(-8, op::SET_WATCHES, |w| {
            w.long(9).strings(&["/d".into()]).int(-1);
            w.strings(&["/c1".into(), "/c2".into()]);
        });
        let want = ZkRequest::SetWatches {
            relative_zxid: 9,
            data: vec!["/d".into()],
            exist: vec![],
            child: vec!["/c1".into(), "/c2".into()],
            persistent: vec![],
            recursive: vec![],
        };
        assert_eq!(Packet::decode(&p).unwrap().req, want);
        let p = packet(-8, op::SET_WATCHES2, |w| {
            w.long(9).strings(&["/d".into()]).int(-1);
            w.strings(&["/c1".into(), "/c2".into()]);
            w.strings(&["/p".into()]).strings(&["/r".into()]);
        });
        let want = ZkRequest::SetWatches {
            relative_zxid: 9,
            data: vec!["/d".into()],
            exist: vec![],
            child: vec!["/c1".into(), "/c2".into()],
            persistent: vec!["/p".into()],
            recursive: vec!["/r".into()],
        };
        assert_eq!(Packet::decode(&p).unwrap().req, want);
        // setWatches2 without its last list is short.
        let p = packet(-8, op::SET_WATCHES2, |w| {
            w.long(9).int(0).int(0).int(0).int(0);
        });
        assert_eq!(Packet::decode(&p), Err(JuteError::Short));
        let p = packet(3, op::ADD_WATCH, |w| {
            w.string("/a").int(1);
        });
        let want = ZkRequest::AddWatch {
            path: "/a".into(),
            mode: 1,
        };
        assert_eq!(Packet::decode(&p).unwrap().req, want);
        for (code, check) in [(op::CHECK_WATCHES, true), (op::REMOVE_WATCHES, false)] {
            let p = packet(4, code, |w| {
                w.string("/a").int(3);
            });
            let want = ZkRequest::RemoveWatches {
                path: "/a".into(),
                kind: 3,
                check,
            };
            assert_eq!(Packet::decode(&p).unwrap().req, want);
        }
        // A count the packet cannot hold is refused before any allocation.
        let p = packet(-8, op::SET_WATCHES, |w| {
            w.long(9).int(i32::MAX);
        });
        assert!(Packet::decode(&p).is_err());
        let p = packet(-8, op::SET_WATCHES2, |w| {
            w.long(9).int(0).int(0).int(0).int(0).int(1 << 20);
        });
        assert_eq!(Packet::decode(&p), Err(JuteError::BadLength(1 << 20)));
    }

    #[test]
    fn unknown_and_unsupported_op_codes() {
        let p = packet(1, 999, |_| {});
        assert_eq!(Packet::decode(&p).unwrap().req, ZkRequest::Unknown(999));
        let p = packet(1, op::RECONFIG, |_| {});
        assert_eq!(
            Packet::decode(&p).unwrap().req,
            ZkRequest::Unsupported(op::RECONFIG)
        );
        // A truncated body is an error, not a panic.
        let p = packet(1, op::DELETE, |w| {
            w.string("/a");
        });
        assert_eq!(Packet::decode(&p), Err(JuteError::Short));
    }

    #[test]
    fn connect_with_and_without_read_only() {
        let mut w = Writer::default();
        w.int(0).long(9).int(30_000).long(0).buffer(&[0; 16]);
        let old = w.buf.clone();
        let c = ConnectRequest::decode(&mut Reader::new(&old)).unwrap();
        assert_eq!((c.timeout_ms, c.read_only), (30_000, false));
        w.bool(true);
        let c = ConnectRequest::decode(&mut Reader::new(&w.buf)).unwrap();
        assert!(c.read_only);
        assert_eq!(c.last_zxid_seen, 9);
    }

    #[test]
    fn stat_is_68_bytes_in_jute_order() {
        let s = Stat {
            czxid: 1,
            mzxid: 2,
            pzxid: 11,
            ctime: 3,
            mtime: 4,
            version: 5,
            cversion: 6,
            aversion: 7,
            ephemeral_owner: 8,
            data_length: 9,
            num_children: 10,
        };
        let mut w = Writer::default();
        write_stat(&mut w, &s);
        assert_eq!(w.buf.len(), 68);
        let mut r = Reader::new(&w.buf);
        let longs_then = [r.long(), r.long(), r.long(), r.long()];
        assert_eq!(longs_then, [Ok(1), Ok(2), Ok(3), Ok(4)]);
        assert_eq!([r.int(), r.int(), r.int()], [Ok(5), Ok(6), Ok(7)]);
        assert_eq!(r.long(), Ok(8));
        assert_eq!([r.int(), r.int()], [Ok(9), Ok(10)]);
        assert_eq!(r.long(), Ok(11));
        // A container's and a TTL node's marks show as 0.
        for mark in [
            quorumkv_core::znode::tree::CONTAINER_OWNER,
            0xff00_0000_0000_01f4,
        ] {
            let mut w = Writer::default();
            write_stat(
                &mut w,
                &Stat {
                    ephemeral_owner: mark,
                    ..s
                },
            );
            let mut r = Reader::new(&w.buf[44..52]);
            assert_eq!(r.long(), Ok(0), "{mark:#x}");
        }
    }
}
