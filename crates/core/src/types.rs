//! Shared vocabulary of every protocol: ids, time, tags, client requests.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A replica's id inside its cluster (1-based in cluster files and the CLI).
pub type NodeId = u32;

/// Virtual or real time in microseconds since the driver started. Cores only
/// ever see time through this value; they never read a clock.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub fn from_micros(us: u64) -> Time {
        Time(us)
    }
    pub fn as_micros(self) -> u64 {
        self.0
    }
    pub fn saturating_add(self, d: std::time::Duration) -> Time {
        Time(self.0.saturating_add(d.as_micros() as u64))
    }
}

/// Where a message came from and where a reply goes. Replicas answer whoever
/// asked, which is either another replica (`Node`) or a connection the driver
/// knows about, e.g. a client library running a coordinator (`Conn`). Cores
/// never interpret a `Conn` token, they only hand it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Peer {
    Node(NodeId),
    Conn(u64),
}

/// Identifies one outstanding client request at the driver, so a core can
/// reply to it later. Opaque to the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientRef(pub u64);

/// A version of a register value: `(ts, writer)`, compared lexicographically.
/// `writer` is the id of the coordinator that wrote it, which makes tags
/// unique and totally ordered (seed 000 §2.2 "tag_lamport, tag_cid").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Tag {
    pub ts: u64,
    pub writer: u64,
}

impl Tag {
    pub const ZERO: Tag = Tag { ts: 0, writer: 0 };
    /// The tag a writer with id `writer` uses to supersede `self`.
    pub fn next(self, writer: u64) -> Tag {
        Tag {
            ts: self.ts + 1,
            writer,
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.ts, self.writer)
    }
}

/// What a client asks of the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Get { key: Bytes },
    Put { key: Bytes, value: Bytes },
    Delete { key: Bytes },
}

impl Request {
    pub fn key(&self) -> &Bytes {
        match self {
            Request::Get { key } | Request::Put { key, .. } | Request::Delete { key } => key,
        }
    }
    pub fn is_read(&self) -> bool {
        matches!(self, Request::Get { .. })
    }
}

/// What the store answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Result of a get: `None` when the key has no value.
    Value(Option<Bytes>),
    /// A put or delete took effect.
    Done,
    /// The operation failed; see [`OpError`] for whether it may still take effect.
    Failed(OpError),
}

/// Why an operation did not complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum OpError {
    /// No quorum answered in time. The operation MAY still take effect later
    /// (its outcome is unknown to the client).
    #[error("timed out waiting for a quorum ({got} of {need} replies)")]
    Timeout { got: u32, need: u32 },
    /// The request was refused before it could have any effect.
    #[error("rejected: {0}")]
    Rejected(String),
}

impl OpError {
    /// True when the operation definitely had no effect.
    pub fn is_definite(&self) -> bool {
        matches!(self, OpError::Rejected(_))
    }
}
