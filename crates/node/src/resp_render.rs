//! How store responses look to a RESP client, and the queue their rendered
//! replies go through.

use crate::resp::Reply;
use quorumkv_core::{OpError, Response};

/// Writer side of a RESP connection: replies tagged with their sequence number.
pub type RespTx = crate::net::OutQueue<(u64, Reply)>;

/// How a RESP command's response is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespKind {
    Get,
    Set,
    Del,
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
        (RespKind::Get, other) => {
            Reply::Error(format!("ERR internal: {other:?} is no answer to a read"))
        }
    }
}
