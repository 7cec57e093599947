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
/// reply to it later; `id` is opaque to the core and only handed back.
///
/// `session` is the client connection the request came on: the same value
/// for every request of that connection, and `LinkEvent::Down(Peer::Conn(session))`
/// reaches the core when it goes away (lock-based protocols release locks,
/// Zab expires ephemeral nodes). [`ClientRef::LOCAL`] (0) is a driver's own
/// in-process clients (the client library's coordinator). `op` names the
/// client's operation across retries, so a core may deduplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientRef {
    pub id: u64,
    pub session: u64,
    pub op: OpId,
}

impl ClientRef {
    /// The session of a driver's in-process clients.
    pub const LOCAL: u64 = 0;
    /// A request of an in-process client with no operation id (tests, the
    /// client library before it names its operations).
    pub fn local(id: u64) -> ClientRef {
        ClientRef {
            id,
            session: ClientRef::LOCAL,
            op: OpId::NONE,
        }
    }
    /// The link on which this request's session is reported up and down.
    pub fn session_peer(&self) -> Peer {
        Peer::Conn(self.session)
    }
}

/// A client operation's identity, the same on every attempt: a client
/// retrying at another server (after `NotLeader`, a lost connection or a
/// timeout) sends the same `OpId`, so a protocol that keeps a table of
/// answered operations can apply each at most once. `client` is random per
/// client process (bit 63 set, never a node's writer id); `seq` counts from 1.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct OpId {
    pub client: u64,
    pub seq: u64,
}

impl OpId {
    /// No identity: the request cannot be deduplicated.
    pub const NONE: OpId = OpId { client: 0, seq: 0 };
    pub fn is_none(&self) -> bool {
        *self == OpId::NONE
    }
}

/// Something a core tells a client unprompted (`Command::Notify`): a watch
/// fired, a lock was granted, a session expired. `kind` is the protocol's
/// own word for it (documented in its module); `key` and `value` what it
/// is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: String,
    pub key: Bytes,
    pub value: Option<Bytes>,
}

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

/// How far a replica lets a tag's `ts` jump ahead of the tag it holds for
/// that key: 2^32. A legitimate writer's tag is at most the highest `ts` a
/// quorum holds plus one, so a replica that missed fewer than 2^32 writes
/// to a key never sees a larger jump; a forger, on the other hand, moves a
/// replica's `ts` by at most 2^32 per accepted message, so it needs at
/// least 2^32 requests to exhaust a key's 2^64 tag space (one forged
/// `ts = u64::MAX` froze a key for good before: issue 31).
pub const MAX_TAG_JUMP: u64 = 1 << 32;

/// Why a write is refused when its key's tag space is used up.
pub const TAG_SPACE_EXHAUSTED: &str = "tag space of key exhausted";

impl Tag {
    pub const ZERO: Tag = Tag { ts: 0, writer: 0 };
    /// The tag a writer with id `writer` uses to supersede `self`, or `None`
    /// when the key's tag space is used up: never wrap to 0, which would
    /// make every later write older than the one it must supersede. A `ts`
    /// of `u64::MAX` is never issued either: no tag could follow it, and
    /// replicas refuse it (`jumps_too_far`), so the last usable is
    /// `u64::MAX - 1`.
    pub fn next(self, writer: u64) -> Option<Tag> {
        let ts = self.ts.checked_add(1).filter(|&ts| ts < u64::MAX)?;
        Some(Tag { ts, writer })
    }
    /// Whether a replica holding `held` must refuse `self`: its `ts` is more
    /// than [`MAX_TAG_JUMP`] ahead (see there), or it is `u64::MAX`, from
    /// which no write could ever supersede it.
    pub fn jumps_too_far(self, held: Tag) -> bool {
        self.ts == u64::MAX || self.ts.saturating_sub(held.ts) > MAX_TAG_JUMP
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.ts, self.writer)
    }
}

/// What a client asks of the store: the shared KV operations every
/// protocol serves. A protocol with an API of its own (the znode service's
/// create / children / versions) adds its operations here, at the end (the
/// wire encoding numbers variants), and answers `OpError::Refused` for ones
/// it does not serve. Other crates see it `non_exhaustive`: the drivers
/// pass any request through and render any response generically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Request {
    Get {
        key: Bytes,
    },
    Put {
        key: Bytes,
        value: Bytes,
    },
    Delete {
        key: Bytes,
    },
    /// An operation of the coordination service (`crate::znode`); only
    /// Zab serves them, every other protocol refuses them.
    Znode(crate::znode::ZnodeOp),
}

/// The key of requests that have none (znode operations name paths).
static NO_KEY: Bytes = Bytes::from_static(b"");

impl Request {
    /// The KV key; empty for a znode operation (its path is not a key).
    pub fn key(&self) -> &Bytes {
        match self {
            Request::Get { key } | Request::Put { key, .. } | Request::Delete { key } => key,
            Request::Znode(_) => &NO_KEY,
        }
    }
    /// The refusal a protocol that does not serve `self` answers, or `None`
    /// when it is a KV operation every protocol serves.
    pub fn refusal(&self) -> Option<Response> {
        match self {
            Request::Znode(_) => Some(Response::Failed(OpError::refused(
                crate::znode::op::NEEDS_ZAB,
            ))),
            _ => None,
        }
    }
    pub fn is_read(&self) -> bool {
        matches!(self, Request::Get { .. })
    }
}

/// What the store answers (extended like [`Request`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Response {
    /// Result of a get: `None` when the key has no value.
    Value(Option<Bytes>),
    /// A put or delete took effect.
    Done,
    /// The operation failed; see [`OpError`] for whether it may still take effect.
    Failed(OpError),
    /// The answer to a `Request::Znode`.
    Znode(crate::znode::ZnodeReply),
}

/// Why an operation did not complete. Two kinds matter to a client and to
/// a history: *definite* failures ([`OpError::Refused`], [`OpError::NotLeader`])
/// had no effect; *unknown* outcomes ([`OpError::Timeout`], [`OpError::Unknown`])
/// may take effect at any time, or never.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum OpError {
    /// A coordinator waited for a quorum in vain. The operation MAY still
    /// take effect later (its outcome is unknown to the client).
    #[error("timed out waiting for a quorum ({got} of {need} replies)")]
    Timeout { got: u32, need: u32 },
    /// The request was refused before it could have any effect (bad
    /// request, lock not granted, server shutting down, …).
    #[error("refused: {reason}")]
    Refused { reason: String },
    /// This server is not the leader and did nothing; `hint` is the leader
    /// it believes in, if any. The client library retries there.
    #[error("not the leader{}", hint.map(|h| format!(" (try replica {h})")).unwrap_or_default())]
    NotLeader { hint: Option<NodeId> },
    /// The outcome is unknown for another reason than a quorum timeout: the
    /// connection broke after the request left, a persist failed, the client
    /// gave up waiting.
    #[error("outcome unknown: {reason}")]
    Unknown { reason: String },
}

impl OpError {
    /// True when the operation definitely had no effect.
    pub fn is_definite(&self) -> bool {
        matches!(self, OpError::Refused { .. } | OpError::NotLeader { .. })
    }
    pub fn refused(reason: impl Into<String>) -> OpError {
        OpError::Refused {
            reason: reason.into(),
        }
    }
    pub fn unknown(reason: impl Into<String>) -> OpError {
        OpError::Unknown {
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_tag_is_checked_never_wrapped() {
        let t = Tag { ts: 7, writer: 3 };
        assert_eq!(t.next(9), Some(Tag { ts: 8, writer: 9 }));
        let last = Tag {
            ts: u64::MAX,
            writer: 999,
        };
        assert_eq!(last.next(1), None, "ts + 1 would wrap to 0");
        let before_last = Tag {
            ts: u64::MAX - 1,
            ..last
        };
        assert_eq!(before_last.next(1), None, "u64::MAX is never issued");
        let ts = u64::MAX - 2;
        assert_eq!(
            Tag { ts, writer: 1 }.next(2),
            Some(Tag {
                ts: ts + 1,
                writer: 2
            })
        );
    }

    #[test]
    fn a_tag_may_jump_at_most_max_tag_jump_ahead() {
        let held = Tag { ts: 10, writer: 1 };
        let at = |ts| Tag { ts, writer: 2 };
        assert!(!at(11).jumps_too_far(held));
        assert!(!at(10 + MAX_TAG_JUMP).jumps_too_far(held));
        assert!(at(11 + MAX_TAG_JUMP).jumps_too_far(held));
        assert!(at(u64::MAX).jumps_too_far(held));
        assert!(
            at(u64::MAX).jumps_too_far(at(u64::MAX - 1)),
            "no tag after it"
        );
        assert!(!at(3).jumps_too_far(held), "older tags are no jump");
    }
}
