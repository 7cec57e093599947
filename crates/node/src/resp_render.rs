//! How store responses look to a RESP client, and the queue their rendered
//! replies go through.

use crate::resp::Reply;
use bytes::Bytes;
use quorumkv_core::znode::{Stat, ZnodeReply};
use quorumkv_core::{OpError, Response};

/// Writer side of a RESP connection: replies tagged with their sequence number.
pub type RespTx = crate::net::OutQueue<(u64, Reply)>;

/// How a RESP command's response is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespKind {
    Get,
    Set,
    Del,
    /// A `ZK.*` command: the znode answer, rendered by its kind.
    Znode,
}

/// Render a store response for a RESP client.
pub fn resp_reply(kind: RespKind, resp: Response) -> Reply {
    match (kind, resp) {
        (_, Response::Failed(e)) => Reply::Error(match e {
            OpError::Timeout { .. } => format!("TIMEOUT {e}; the operation may still take effect"),
            OpError::Unknown { .. } => format!("UNKNOWN {e}; the operation may still take effect"),
            OpError::Refused { reason } => format!("ERR {reason}"),
            OpError::NotLeader { .. } => format!("NOTLEADER {e}"),
        }),
        (RespKind::Get, Response::Value(v)) => Reply::Bulk(v),
        (RespKind::Set, _) => Reply::Simple("OK"),
        (RespKind::Del, _) => Reply::Int(1),
        (RespKind::Znode, Response::Znode(r)) => znode_reply(r),
        (RespKind::Get | RespKind::Znode, other) => Reply::Error(format!(
            "ERR internal: {other:?} is no answer to this command"
        )),
    }
}

/// A znode answer: the created path, data or children as bulk strings, a
/// version or zxid as an integer, a stat as field/value pairs, ZooKeeper's
/// errors as `-ERR` with their name.
fn znode_reply(r: ZnodeReply) -> Reply {
    let bulk = |s: String| Reply::Bulk(Some(Bytes::from(s)));
    match r {
        ZnodeReply::Created { path, .. } => bulk(path),
        ZnodeReply::Deleted => Reply::Simple("OK"),
        ZnodeReply::Set(stat) => Reply::Int(i64::from(stat.version)),
        ZnodeReply::Exists(None) => Reply::Bulk(None),
        ZnodeReply::Exists(Some(stat)) => stat_reply(&stat),
        ZnodeReply::Data { data, .. } => Reply::Bulk(Some(data)),
        ZnodeReply::Children(names) => Reply::Array(names.into_iter().map(bulk).collect()),
        ZnodeReply::Synced { zxid } => Reply::Int(zxid as i64),
        ZnodeReply::Error(e) => Reply::Error(format!("ERR {e}")),
        other => Reply::Error(format!(
            "ERR internal: {other:?} is no answer to a ZK command"
        )),
    }
}

fn stat_reply(s: &Stat) -> Reply {
    let fields: [(&str, u64); 10] = [
        ("czxid", s.czxid),
        ("mzxid", s.mzxid),
        ("pzxid", s.pzxid),
        ("ctime", s.ctime),
        ("mtime", s.mtime),
        ("version", u64::from(s.version)),
        ("cversion", u64::from(s.cversion)),
        ("ephemeralOwner", s.ephemeral_owner),
        ("dataLength", u64::from(s.data_length)),
        ("numChildren", u64::from(s.num_children)),
    ];
    let pair = |(k, v): (&str, u64)| {
        [
            Reply::Bulk(Some(Bytes::from(k.to_string()))),
            Reply::Int(v as i64),
        ]
    };
    Reply::Array(fields.into_iter().flat_map(pair).collect())
}
