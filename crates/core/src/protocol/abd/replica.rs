//! The replica role: one `(tag, value)` per key.

use super::bugs::InjectedBug;
use super::counters::Counters;
use super::msg::{Msg, Timer};
use crate::protocol::catch_up;
use crate::protocol::contract::{Out, Record};
use crate::types::{Peer, Tag};
use bytes::Bytes;
use std::collections::HashMap;

/// One ABD replica: `(tag, value)` per key.
#[derive(Debug, Default)]
pub struct Replica {
    store: HashMap<Bytes, (Tag, Option<Bytes>)>,
    durable: bool,
    bug: Option<InjectedBug>,
    pub counters: Counters,
}

impl Replica {
    /// `durable`: emit a `Persist` before acknowledging each applied store.
    pub fn new(durable: bool) -> Self {
        Replica {
            durable,
            ..Default::default()
        }
    }
    pub fn with_bug(mut self, bug: Option<InjectedBug>) -> Self {
        self.bug = bug;
        self
    }
    pub fn durable(&self) -> bool {
        self.durable
    }
    pub fn get(&self, key: &[u8]) -> Option<&(Tag, Option<Bytes>)> {
        self.store.get(key)
    }
    pub fn len(&self) -> usize {
        self.store.len()
    }
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }
    /// Every `(key, (tag, value))` held, in no order (the invariants).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&Bytes, &(Tag, Option<Bytes>))> {
        self.store.iter()
    }

    fn on_query(&mut self, from: Peer, op: u64, key: Bytes, out: &mut Out<Msg, Timer>) {
        let (tag, value) = self.store.get(&key).cloned().unwrap_or((Tag::ZERO, None));
        out.send(from, Msg::QueryReply { op, tag, value });
    }

    fn on_store(
        &mut self,
        from: Peer,
        op: u64,
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
        out: &mut Out<Msg, Timer>,
    ) {
        let current = self.store.get(&key).map(|(t, _)| *t).unwrap_or(Tag::ZERO);
        if tag.jumps_too_far(current) {
            // Refused and left unanswered: an ack would claim the tag is
            // held here. An honest coordinator's tag is at most a quorum's
            // highest plus one, so its quorum still forms from the replicas
            // that did not miss 2^32 writes (see `MAX_TAG_JUMP`), and its
            // retransmits and op timeout bound the wait either way; a
            // forged tag is not stored, so the key stays writable.
            self.counters.tag_jumps_refused += 1;
            return;
        }
        let newer = tag > current || self.bug == Some(InjectedBug::AcceptOlderTag);
        let ack_first = self.bug == Some(InjectedBug::AckBeforePersist);
        if ack_first {
            out.send(from, Msg::StoreAck { op });
        }
        if newer {
            self.hold(key, tag, value, out);
        } else {
            self.counters.older_stores += 1;
        }
        // Acknowledge an older or equal tag without applying it: that is
        // safe because the store it carries is then ordered before the
        // write of the tag held here, which is already newer (a write with
        // an older tag is linearized before it and overwritten at once),
        // and a later query of this replica returns a tag at least as high
        // as the coordinator's, which is all a quorum of acks promises.
        // This is not "acknowledged without being applied because of an
        // overflow": a tag that could not be held is refused above.
        if !ack_first {
            out.send(from, Msg::StoreAck { op });
        }
    }

    /// Handle a message addressed to the replica role.
    pub fn handle(&mut self, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::Query { op, key, .. } => self.on_query(from, op, key, out),
            Msg::Store {
                op,
                key,
                tag,
                value,
                ..
            } => self.on_store(from, op, key, tag, value, out),
            _ => self.counters.misrouted += 1,
        }
    }

    /// Hold `value` at `tag` for `key`, persisted first when durable.
    fn hold(&mut self, key: Bytes, tag: Tag, value: Option<Bytes>, out: &mut Out<Msg, Timer>) {
        if self.durable {
            out.persist(Record::Register {
                key: key.clone(),
                tag,
                value: value.clone(),
            });
        }
        self.store.insert(key, (tag, value));
    }

    /// Take another replica's store (a membership change's state
    /// transfer): every entry newer than the one held, persisted first
    /// when durable. A tag at `ts = u64::MAX` is never taken (see
    /// `Tag::jumps_too_far`).
    pub fn merge(&mut self, entries: super::msg::Entries, out: &mut Out<Msg, Timer>) {
        for (key, tag, value) in entries {
            let current = self.store.get(&key).map(|(t, _)| *t).unwrap_or(Tag::ZERO);
            if tag <= current || tag.ts == u64::MAX {
                continue;
            }
            self.hold(key, tag, value, out);
        }
    }

    /// Everything this replica holds, for a recovering peer.
    pub fn snapshot(&self) -> Vec<(Bytes, Tag, Option<Bytes>)> {
        let mut v: Vec<_> = self
            .store
            .iter()
            .map(|(k, (t, val))| (k.clone(), *t, val.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0)); // deterministic message contents
        v
    }

    pub fn restore(&mut self, rec: Record) {
        let Record::Register { key, tag, value } = rec else {
            return;
        };
        let newer = self.store.get(&key).map(|(t, _)| tag > *t).unwrap_or(true);
        if newer {
            self.store.insert(key, (tag, value));
        } else if self.bug == Some(InjectedBug::MergeKeepsTag) {
            if let Some(held) = self.store.get_mut(&key) {
                held.1 = value;
            }
        }
    }
}

catch_up::sync_store!(Replica);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::contract::Command;
    use crate::types::Tag;

    #[test]
    fn replica_keeps_the_highest_tag_and_always_acks() {
        let mut r = Replica::new(false);
        let mut out = O::new();
        let store = |ts, v: &str| Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts, writer: 1 },
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            epoch: 0,
        };
        r.handle(Peer::Conn(1), store(2, "two"), &mut out);
        r.handle(Peer::Conn(1), store(1, "one"), &mut out);
        let s = sends(&mut out);
        assert_eq!(s.len(), 2);
        assert!(s
            .iter()
            .all(|(to, m)| *to == Peer::Conn(1) && matches!(m, Msg::StoreAck { op: 1 })));
        assert_eq!(r.get(b"k").unwrap().1.as_deref(), Some(&b"two"[..]));
        assert_eq!(r.counters.older_stores, 1);
        r.handle(Peer::Conn(1), store(2, "two"), &mut out);
        assert_eq!(r.counters.older_stores, 2, "an equal tag is not newer");
        assert_eq!((r.len(), r.is_empty()), (1, false));
        let other = Msg::Store {
            op: 2,
            key: Bytes::from_static(b"other"),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
            epoch: 0,
        };
        r.handle(Peer::Conn(1), other, &mut out);
        assert_eq!(r.len(), 2);
        assert!(Replica::new(false).is_empty());
        r.handle(Peer::Conn(1), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(r.counters.misrouted, 1);
        out.drain();
        r.handle(
            Peer::Node(2),
            Msg::Query {
                op: 5,
                key: key(),
                epoch: 0,
            },
            &mut out,
        );
        assert_eq!(
            sends(&mut out),
            vec![(Peer::Node(2), query_reply(5, 2, 1, b"two"))]
        );
    }

    /// Issue 31: one forged `Store` at `ts = u64::MAX` froze a key for
    /// good. Now it, and any jump of more than `MAX_TAG_JUMP`, is refused
    /// unanswered and leaves the replica as it was; a jump of exactly
    /// `MAX_TAG_JUMP` is still a legitimate store.
    #[test]
    fn a_forged_tag_that_jumps_too_far_is_refused_and_not_acked() {
        use crate::types::MAX_TAG_JUMP;
        let mut r = Replica::new(true);
        let mut out = O::new();
        let store = |ts, writer| Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts, writer },
            value: Some(Bytes::from_static(b"v")),
            epoch: 0,
        };
        r.handle(Peer::Conn(1), store(5, 1), &mut out);
        out.drain();
        let before = r.get(b"k").cloned();
        for forged in [store(u64::MAX, 999), store(6 + MAX_TAG_JUMP, 999)] {
            r.handle(Peer::Conn(2), forged, &mut out);
            assert!(out.is_empty(), "no ack, no persist");
            assert_eq!(r.get(b"k").cloned(), before, "state unchanged");
        }
        let fresh = Msg::Store {
            op: 1,
            key: Bytes::from_static(b"fresh"),
            tag: Tag {
                ts: MAX_TAG_JUMP + 1,
                writer: 999,
            },
            value: None,
            epoch: 0,
        };
        r.handle(Peer::Conn(2), fresh, &mut out);
        assert!(out.is_empty() && r.get(b"fresh").is_none(), "from ZERO too");
        assert_eq!(r.counters.tag_jumps_refused, 3);
        r.handle(Peer::Conn(1), store(5 + MAX_TAG_JUMP, 2), &mut out);
        assert_eq!(sends(&mut out).len(), 1, "a jump of exactly 2^32 is taken");
        assert_eq!(r.get(b"k").unwrap().0.ts, 5 + MAX_TAG_JUMP);
        assert_eq!(r.counters.tag_jumps_refused, 3);
    }

    #[test]
    fn durable_replica_persists_before_it_acks() {
        let mut r = Replica::new(true);
        let mut out = O::new();
        let msg = Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
            epoch: 0,
        };
        r.handle(Peer::Node(1), msg, &mut out);
        let cmds = out.commands();
        assert!(matches!(cmds[0], Command::Persist(_)));
        assert!(matches!(cmds[1], Command::Send { .. }));
    }
}
