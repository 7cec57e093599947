//! A znode operation as the log holds it (`znode_sm.rs` applies it).

use super::codec::{Reader, Writer};
use crate::types::{ClientRef, Time};
use crate::znode::op::ZnodeOp;
use crate::znode::Id;
use bytes::Bytes;

/// The log tag of a znode entry (after the KV store's 0, 1, 2).
pub const TAG: u8 = 3;

/// The connection id of a `CloseSession` the leader decided (expiry).
pub(super) const EXPIRY: u64 = u64::MAX;

/// A znode operation as logged: who asked (session = client id, the
/// connection for watches), the leader's time, and the identities of the
/// asking connection for the ACL checks.
///
/// `ids` are put there by the server the client is connected to, from
/// what it holds for that connection (`AddAuth`, a native login), never
/// from the client's request (ZooKeeper's `Request.authInfo`, which its
/// followers forward to the leader in the same way). Being in the entry,
/// every replica checks the same identities: the check is deterministic.
/// Only peers can hand the leader an entry (`client_may_send` admits no
/// Zab message from a client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZEntry {
    pub time_ms: u64,
    pub session: u64,
    pub conn: u64,
    pub op: ZnodeOp,
    pub ids: Vec<Id>,
}

impl ZEntry {
    pub fn new(op: ZnodeOp, client: &ClientRef) -> ZEntry {
        ZEntry {
            time_ms: 0,
            session: client.op.client,
            conn: client.session,
            op,
            ids: Vec::new(),
        }
    }
    /// Tag, time (fixed offset, see [`stamp`]), then the rest.
    pub fn encode(&self, w: &mut Writer) {
        w.u8(TAG);
        w.u64(self.time_ms);
        w.u64(self.session);
        w.u64(self.conn);
        let op = postcard::to_allocvec(&self.op).expect("an op always serialises");
        w.bytes(&op);
        // Last and only when there are some: an entry of a connection with
        // no identity is encoded as before ACLs.
        if !self.ids.is_empty() {
            let ids = postcard::to_allocvec(&self.ids).expect("ids always serialise");
            w.bytes(&ids);
        }
    }
    /// After the tag.
    pub fn decode(r: &mut Reader<'_>) -> Option<ZEntry> {
        let (time_ms, session, conn) = (r.u64()?, r.u64()?, r.u64()?);
        let op = postcard::from_bytes(&r.bytes()?).ok()?;
        let ids = match r.0.is_empty() {
            true => Vec::new(),
            false => postcard::from_bytes(&r.bytes()?).ok()?,
        };
        Some(ZEntry {
            time_ms,
            session,
            conn,
            op,
            ids,
        })
    }
}

/// Write the leader's clock into a znode entry's payload (`Payload`:
/// origin, rid, op length, then the op: tag at 24, time at 25..33). Other
/// payloads pass unchanged.
pub fn stamp(data: Bytes, now: Time) -> Bytes {
    if data.get(24) != Some(&TAG) || data.len() < 33 {
        return data;
    }
    let mut v = data.to_vec();
    v[25..33].copy_from_slice(&(now.as_micros() / 1000).to_le_bytes());
    Bytes::from(v)
}
