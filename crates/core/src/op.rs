//! History-level operations and outcomes: what a client asked and what it
//! was told, as the linearizability checker sees them.
//!
//! One vocabulary for the client, the history recorder, the simulator, the
//! bench and the checker. Keys and values are text here (the checker compares
//! and prints them); [`text`] is the one conversion from the wire's bytes,
//! used by [`Op::from`]`(&Request)` and [`Outcome::from_response`].
use std::fmt;

use crate::types::{Request, Response};

/// One operation on a register or a key-value map.
///
/// Register operations carry a key too: `""` for a single register. Every
/// model checks each key on its own (P-compositionality).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// KV read; the result is in [`Outcome::Ok`] (`None` = key absent).
    Get { key: String },
    /// KV overwrite.
    Put { key: String, value: String },
    /// KV append: the new value is the old one (or `""` if absent) followed by `value`.
    Append { key: String, value: String },
    /// KV delete: later gets return `None`.
    Delete { key: String },
    /// Register read; the result is in [`Outcome::Ok`] (`None` = never written).
    Read { key: String },
    /// Register write.
    Write { key: String, value: String },
    /// Compare-and-set: if the register holds `from`, it now holds `to`.
    Cas {
        key: String,
        from: String,
        to: String,
    },
}

impl Op {
    /// The key this operation touches (the partition it is checked in).
    pub fn key(&self) -> &str {
        match self {
            Op::Get { key }
            | Op::Put { key, .. }
            | Op::Append { key, .. }
            | Op::Delete { key }
            | Op::Read { key }
            | Op::Write { key, .. }
            | Op::Cas { key, .. } => key,
        }
    }

    /// Lower-case name as used in JSONL (`get`, `put`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Get { .. } => "get",
            Op::Put { .. } => "put",
            Op::Append { .. } => "append",
            Op::Delete { .. } => "delete",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Cas { .. } => "cas",
        }
    }

    /// True for operations that only observe (`get`, `read`).
    pub fn is_read(&self) -> bool {
        matches!(self, Op::Get { .. } | Op::Read { .. })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = |key: &str| {
            if key.is_empty() {
                String::new()
            } else {
                format!("({key:?})")
            }
        };
        match self {
            Op::Get { key } | Op::Read { key } | Op::Delete { key } => {
                write!(f, "{}{}", self.name(), k(key))
            }
            Op::Put { key, value } | Op::Append { key, value } | Op::Write { key, value } => {
                write!(f, "{}{} {value:?}", self.name(), k(key))
            }
            Op::Cas { key, from, to } => write!(f, "cas{} {from:?}->{to:?}", k(key)),
        }
    }
}

/// The history's text of a wire key or value: UTF-8, with invalid sequences
/// replaced by U+FFFD (keys and values our clients write are UTF-8).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl From<&Request> for Op {
    fn from(req: &Request) -> Op {
        match req {
            Request::Get { key } => Op::Get { key: text(key) },
            Request::Put { key, value } => Op::Put {
                key: text(key),
                value: text(value),
            },
            Request::Delete { key } => Op::Delete { key: text(key) },
            // Znode operations are checked by `quorumkv_check::znode`, not
            // by the KV models: in a KV history they are reads of a key no
            // KV operation touches, answered `None` (`Outcome::from_response`).
            Request::Znode(z) => Op::Get {
                key: format!("znode:{} {}", z.name(), z.path()),
            },
        }
    }
}

/// What the client was told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Completed. For reads the value read (`None` = absent / nil); `None`
    /// for writes; for `Cas`, `Ok(None)` means the swap happened.
    Ok(Option<String>),
    /// Definitely had no effect (a failed cas, a rejected request). Dropped
    /// before checking.
    Fail,
    /// Timed out or crashed: may take effect at any moment after the
    /// invocation, or never. Unknown reads constrain nothing and are dropped.
    Unknown,
}

impl Outcome {
    /// A failed operation: `Fail` when it `definite`ly had no effect, else
    /// `Unknown` (it may still take effect).
    pub fn failure(definite: bool) -> Outcome {
        if definite {
            Outcome::Fail
        } else {
            Outcome::Unknown
        }
    }

    /// The outcome of the store's answer. A failure's class comes from
    /// `OpError::is_definite` alone.
    pub fn from_response(resp: &Response) -> Outcome {
        match resp {
            Response::Value(v) => Outcome::Ok(v.as_deref().map(text)),
            Response::Done => Outcome::Ok(None),
            Response::Failed(e) => Outcome::failure(e.is_definite()),
            // An answer (a ZooKeeper error included); its content is
            // checked by the znode model, not here.
            Response::Znode(_) => Outcome::Ok(None),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(Some(v)) => write!(f, "ok {v}"),
            Outcome::Ok(None) => write!(f, "ok"),
            Outcome::Fail => write!(f, "fail"),
            Outcome::Unknown => write!(f, "unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::OpError;
    use bytes::Bytes;

    /// Every kind of error: two definite, two unknown.
    fn errors() -> [OpError; 4] {
        [
            OpError::refused("no"),
            OpError::NotLeader { hint: Some(1) },
            OpError::Timeout { got: 1, need: 2 },
            OpError::unknown("link lost"),
        ]
    }

    #[test]
    fn definite_failures_are_fail_and_the_rest_unknown() {
        let [refused, not_leader, timeout, lost] = errors();
        for e in [refused, not_leader] {
            let o = Outcome::from_response(&Response::Failed(e.clone()));
            assert_eq!(o, Outcome::Fail, "{e}");
        }
        for e in [timeout, lost] {
            let o = Outcome::from_response(&Response::Failed(e.clone()));
            assert_eq!(o, Outcome::Unknown, "{e}");
        }
    }

    #[test]
    fn values_and_acks_are_ok() {
        let v = Response::Value(Some(Bytes::from_static(b"x")));
        assert_eq!(Outcome::from_response(&v), Outcome::Ok(Some("x".into())));
        assert_eq!(
            Outcome::from_response(&Response::Value(None)),
            Outcome::Ok(None)
        );
        assert_eq!(Outcome::from_response(&Response::Done), Outcome::Ok(None));
    }

    #[test]
    fn requests_become_ops_with_lossy_text() {
        let b = Bytes::from_static;
        let put = Request::Put {
            key: b(b"k1"),
            value: b(b"c0.1"),
        };
        assert_eq!(
            Op::from(&put),
            Op::Put {
                key: "k1".into(),
                value: "c0.1".into()
            }
        );
        let get = Request::Get { key: b(b"k\xff") };
        assert_eq!(
            Op::from(&get),
            Op::Get {
                key: "k\u{fffd}".into()
            }
        );
        let del = Request::Delete { key: b(b"") };
        assert_eq!(Op::from(&del), Op::Delete { key: "".into() });
    }

    #[test]
    fn display_is_compact() {
        let op = Op::Cas {
            key: "".into(),
            from: "1".into(),
            to: "2".into(),
        };
        assert_eq!(op.to_string(), "cas \"1\"->\"2\"");
        assert_eq!(Op::Get { key: "x".into() }.to_string(), "get(\"x\")");
        assert_eq!(Outcome::Ok(Some("v".into())).to_string(), "ok v");
        assert_eq!(Outcome::Unknown.to_string(), "unknown");
    }
}
