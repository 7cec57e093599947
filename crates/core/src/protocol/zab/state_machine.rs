//! The replicated state machine, apart from the broadcast: a small trait
//! (apply, read, snapshot, restore) and the KV store behind it. Zab only
//! orders opaque operations; delivery hands them to the machine in order.
//! Also the byte codec of log entries and snapshots (`Record::Entry` and
//! `Record::Snapshot` hold bytes).

use super::codec::{Reader, Writer};
use super::members::Members;
use super::zentry::{ZEntry, TAG};
use crate::types::{ClientRef, OpError, Request, Response};
use bytes::Bytes;
use std::collections::BTreeMap;

/// An operation of the KV machine, as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
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
    /// A znode operation with its session, connection and leader time
    /// (`znode_sm.rs`).
    Znode(ZEntry),
}

impl Op {
    /// The operation a client request asks for (None: not a KV request).
    pub fn from_request(req: &Request) -> Option<Op> {
        Some(match req {
            Request::Znode(_) => return None,
            Request::Get { key } => Op::Get { key: key.clone() },
            Request::Put { key, value } => Op::Put {
                key: key.clone(),
                value: value.clone(),
            },
            Request::Delete { key } => Op::Delete { key: key.clone() },
        })
    }
    /// The operation `client` asks for, znode operations included (their
    /// session is the client's id, their watches its connection's).
    pub fn from_client(req: &Request, client: &ClientRef) -> Option<Op> {
        match req {
            Request::Znode(op) => Some(Op::Znode(ZEntry::new(op.clone(), client))),
            _ => Op::from_request(req),
        }
    }
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Op::Get { key } => {
                w.u8(0);
                w.bytes(key);
            }
            Op::Put { key, value } => {
                w.u8(1);
                w.bytes(key);
                w.bytes(value);
            }
            Op::Delete { key } => {
                w.u8(2);
                w.bytes(key);
            }
            Op::Znode(e) => e.encode(w),
        }
    }
    pub fn decode(r: &mut Reader<'_>) -> Option<Op> {
        Some(match r.u8()? {
            0 => Op::Get { key: r.bytes()? },
            1 => Op::Put {
                key: r.bytes()?,
                value: r.bytes()?,
            },
            2 => Op::Delete { key: r.bytes()? },
            TAG => Op::Znode(ZEntry::decode(r)?),
            _ => return None,
        })
    }
    pub fn to_bytes(&self) -> Bytes {
        let mut w = Writer::default();
        self.encode(&mut w);
        w.finish()
    }
}

/// A log entry's payload: who asked (the origin server's writer id and its
/// request number, so that only that server answers) and the operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub origin: u64,
    pub rid: u64,
    pub op: Bytes,
}

impl Payload {
    pub fn to_bytes(&self) -> Bytes {
        let mut w = Writer::default();
        w.u64(self.origin);
        w.u64(self.rid);
        w.bytes(&self.op);
        w.finish()
    }
    pub fn from_bytes(b: &[u8]) -> Option<Payload> {
        let mut r = Reader(b);
        Some(Payload {
            origin: r.u64()?,
            rid: r.u64()?,
            op: r.bytes()?,
        })
    }
}

/// What Zab delivers to: apply ordered operations, answer local reads,
/// and save and restore the whole state (snapshots, SNAP).
pub trait StateMachine {
    /// Apply one delivered operation; the answer goes to its client.
    fn apply(&mut self, op: &[u8]) -> Response;
    /// Apply the operation at log `index`; `here`: this server's client
    /// asked (and gets the answer). Machines that stamp their state with
    /// the index (the znode tree's zxids) or answer reads in log order
    /// override it.
    fn apply_at(&mut self, _index: u64, op: &[u8], _here: bool) -> Response {
        self.apply(op)
    }
    /// Answer a read from the current state (reads outside the log).
    fn read(&self, op: &[u8]) -> Response;
    /// The answer `apply` gives `op` whatever the state, if there is one
    /// (a blind write): a write that arrived inside a SNAP is answered so.
    fn blind_answer(&self, _op: &[u8]) -> Option<Response> {
        None
    }
    fn snapshot(&self) -> Bytes;
    fn restore(&mut self, data: &[u8]) -> Result<(), String>;
}

/// The KV store: GET, PUT, DELETE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStore {
    map: BTreeMap<Bytes, Bytes>,
}

impl KvStore {
    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        self.map.get(key)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

fn bad_op() -> Response {
    Response::Failed(OpError::refused("undecodable operation"))
}

impl StateMachine for KvStore {
    fn apply(&mut self, op: &[u8]) -> Response {
        match Op::decode(&mut Reader(op)) {
            Some(Op::Get { key }) => Response::Value(self.map.get(&key).cloned()),
            Some(Op::Put { key, value }) => {
                self.map.insert(key, value);
                Response::Done
            }
            Some(Op::Delete { key }) => {
                self.map.remove(&key);
                Response::Done
            }
            Some(Op::Znode(_)) | None => bad_op(),
        }
    }
    fn read(&self, op: &[u8]) -> Response {
        match Op::decode(&mut Reader(op)) {
            Some(Op::Get { key }) => Response::Value(self.map.get(&key).cloned()),
            Some(_) => Response::Failed(OpError::refused("not a read")),
            None => bad_op(),
        }
    }
    fn blind_answer(&self, op: &[u8]) -> Option<Response> {
        match Op::decode(&mut Reader(op)) {
            Some(Op::Put { .. } | Op::Delete { .. }) => Some(Response::Done),
            _ => None,
        }
    }
    fn snapshot(&self) -> Bytes {
        let mut w = Writer::default();
        w.u64(self.map.len() as u64);
        for (k, v) in &self.map {
            w.bytes(k);
            w.bytes(v);
        }
        w.finish()
    }
    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        self.restore_from(&mut Reader(data))
    }
}

impl KvStore {
    /// Restore from the front of `r`, leaving what follows the KV state.
    pub(super) fn restore_from(&mut self, r: &mut Reader<'_>) -> Result<(), String> {
        let bad = || "corrupt KV snapshot".to_string();
        let n = r.u64().ok_or_else(bad)?;
        let mut map = BTreeMap::new();
        for _ in 0..n {
            let k = r.bytes().ok_or_else(bad)?;
            let v = r.bytes().ok_or_else(bad)?;
            map.insert(k, v);
        }
        self.map = map;
        Ok(())
    }
}

/// A snapshot as persisted and sent: the epochs of the entries it covers
/// (runs `(epoch, first index)`, for exact matching), then the machine's
/// state, then, if a configuration entry was ever logged at or below it,
/// that configuration (`members.rs`; absent in snapshots from before
/// membership change, which decode as before).
pub fn encode_snapshot(runs: &[(u64, u64)], state: &[u8], members: Option<&Members>) -> Bytes {
    let mut w = Writer::default();
    w.u64(runs.len() as u64);
    for &(e, f) in runs {
        w.u64(e);
        w.u64(f);
    }
    w.bytes(state);
    if let Some(m) = members {
        m.encode(&mut w);
    }
    w.finish()
}

pub type Runs = Vec<(u64, u64)>;

/// A decoded snapshot: runs, state, configuration (if it carries one).
pub type Snap = (Runs, Bytes, Option<Members>);

pub fn decode_snapshot(data: &[u8]) -> Option<Snap> {
    let mut r = Reader(data);
    let n = r.u64()?;
    let mut runs = Vec::new();
    for _ in 0..n {
        runs.push((r.u64()?, r.u64()?));
    }
    let state = r.bytes()?;
    if r.0.is_empty() {
        return Some((runs, state, None));
    }
    let m = Members::from_op(r.0)?;
    Some((runs, state, Some(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn ops_apply_and_snapshots_round_trip() {
        let mut kv = KvStore::default();
        let put = Op::Put {
            key: b("k"),
            value: b("v"),
        };
        assert_eq!(kv.apply(&put.to_bytes()), Response::Done);
        let get = Op::Get { key: b("k") }.to_bytes();
        assert_eq!(kv.read(&get), Response::Value(Some(b("v"))));
        assert_eq!(kv.apply(&get), Response::Value(Some(b("v"))));
        assert!(matches!(kv.read(&put.to_bytes()), Response::Failed(_)));
        let snap = kv.snapshot();
        let mut other = KvStore::default();
        other.restore(&snap).unwrap();
        assert_eq!(other, kv);
        assert!(other.restore(&snap[..snap.len() - 1]).is_err());
        kv.apply(&Op::Delete { key: b("k") }.to_bytes());
        assert_eq!(kv.read(&get), Response::Value(None));
        assert!(matches!(kv.apply(&[9]), Response::Failed(_)));
        let p = Payload {
            origin: 7,
            rid: 3,
            op: get.clone(),
        };
        assert_eq!(Payload::from_bytes(&p.to_bytes()), Some(p));
        let runs = vec![(1, 1), (4, 9)];
        assert_eq!(
            decode_snapshot(&encode_snapshot(&runs, &snap, None)),
            Some((runs.clone(), snap.clone(), None))
        );
        // With a configuration; a snapshot with trailing junk is refused.
        let m = Members::new(&[1, 3, 4]).unwrap();
        let with = encode_snapshot(&runs, &snap, Some(&m));
        assert_eq!(
            decode_snapshot(&with),
            Some((runs.clone(), snap.clone(), Some(m)))
        );
        let mut junk = encode_snapshot(&runs, &snap, None).to_vec();
        junk.push(1);
        assert_eq!(decode_snapshot(&junk), None);
    }
}
