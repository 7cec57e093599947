//! The replica role: per key a tag, a value and a lock with a lease
//! (seed 000 §2.2 `KeyState`, §4.2 the blocking server).

use super::bugs::Bug;
use super::counters::Counters;
use super::msg::{LockId, Msg, Timer};
use crate::protocol::catch_up;
use crate::protocol::contract::{Out, Record};
use crate::protocol::reconfig::{Entries, Registers};
use crate::types::{Peer, Tag, Time};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// One key's state: the register and its lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    pub tag: Tag,
    pub value: Option<Bytes>,
    /// `locked_by` and `lock_expiry`: the holder and the end of its lease.
    pub lock: Option<(LockId, Time)>,
}

impl KeyState {
    /// The holder whose lease still runs at `now`, if any.
    fn holder(&self, now: Time) -> Option<LockId> {
        self.lock.filter(|&(_, end)| now < end).map(|(id, _)| id)
    }
}

/// A lease-lock replica.
#[derive(Debug)]
pub struct Replica {
    keys: HashMap<Bytes, KeyState>,
    /// The client connection each lock held by a client-side coordinator
    /// was granted on (its latest LOCK_REQ), and the reverse index: when
    /// that connection goes down its locks go with it ([`Self::on_conn_down`]).
    via: HashMap<Bytes, u64>,
    by_conn: HashMap<u64, HashSet<Bytes>>,
    lease: Duration,
    durable: bool,
    bug: Option<Bug>,
    pub counters: Counters,
}

impl Replica {
    /// `lease`: how long a grant lasts. `durable`: persist each applied
    /// write before acknowledging it.
    pub fn new(lease: Duration, durable: bool) -> Self {
        Replica {
            keys: HashMap::new(),
            via: HashMap::new(),
            by_conn: HashMap::new(),
            lease,
            durable,
            bug: None,
            counters: Counters::default(),
        }
    }
    pub fn with_bug(mut self, bug: Option<Bug>) -> Self {
        self.bug = bug;
        self
    }
    pub fn lease(&self) -> Duration {
        self.lease
    }
    pub fn durable(&self) -> bool {
        self.durable
    }
    pub fn get(&self, key: &[u8]) -> Option<&KeyState> {
        self.keys.get(key)
    }
    /// The holder of `key`'s lock whose lease runs at `now`.
    pub fn holder(&self, key: &[u8], now: Time) -> Option<LockId> {
        self.keys.get(key).and_then(|k| k.holder(now))
    }
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Every key's state, in no order (the invariants).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&Bytes, &KeyState)> {
        self.keys.iter()
    }

    /// §4.2: drop an expired lock; grant if the key is then free (or
    /// already `lock`'s: a re-sent request, answered again without
    /// extending the lease), else deny.
    fn on_lock_req(
        &mut self,
        now: Time,
        from: Peer,
        lock: LockId,
        key: Bytes,
        out: &mut Out<Msg, Timer>,
    ) {
        let steal = self.bug == Some(Bug::GrantWhileHeld);
        let k = self.keys.entry(key.clone()).or_default();
        if k.lock.is_some() && k.holder(now).is_none() {
            k.lock = None;
            self.counters.expired_leases += 1;
        }
        let granted = k.holder(now).is_none_or(|h| h == lock || steal);
        if granted {
            if k.holder(now) != Some(lock) {
                k.lock = Some((lock, now.saturating_add(self.lease)));
            }
            self.counters.grants += 1;
            self.set_via(&key, conn_of(from));
            out.send(from, Msg::LockGranted { lock, key });
        } else {
            self.counters.denials += 1;
            out.send(from, Msg::LockDenied { lock });
        }
    }

    /// §4.2: clear the lock if `lock` holds it or its lease ran out.
    fn on_unlock(&mut self, now: Time, lock: LockId, key: &[u8]) {
        let Some(k) = self.keys.get_mut(key) else {
            self.counters.foreign_unlocks += 1;
            return;
        };
        match k.lock {
            Some((h, _)) if h == lock => k.lock = None,
            Some(_) if k.holder(now).is_none() => {
                k.lock = None;
                self.counters.expired_leases += 1;
            }
            _ => return self.counters.foreign_unlocks += 1,
        }
        self.set_via(key, None);
    }

    /// Record that `key`'s lock is now held through client connection
    /// `conn`; `None`: no lock, or one of a replica's coordinator (its
    /// locks end by UNLOCK or lease, as in the seed).
    fn set_via(&mut self, key: &[u8], conn: Option<u64>) {
        if self.via.get(key).copied() == conn {
            return;
        }
        if let Some(old) = self.via.remove(key) {
            if let Some(set) = self.by_conn.get_mut(&old) {
                set.remove(key);
                if set.is_empty() {
                    self.by_conn.remove(&old);
                }
            }
        }
        if let Some(c) = conn {
            let key = Bytes::copy_from_slice(key);
            self.by_conn.entry(c).or_default().insert(key.clone());
            self.via.insert(key, c);
        }
    }

    /// Client connection `conn` is gone (closed, or silent past its
    /// heartbeat timeout): release every lock granted on it now instead of
    /// at the end of its lease. As safe as the lease running out early
    /// (§4.2's rules still hold): a WRITE under a released lock is denied
    /// wherever it arrives, on this connection or a new one, so its holder
    /// writes nowhere it lost the lock, and the coordinator answers such a
    /// put as unknown, as at a lease expiry. A client that exits (the CLI
    /// after each command) then blocks its keys for no lease at all.
    pub fn on_conn_down(&mut self, conn: u64) {
        for key in self.by_conn.remove(&conn).unwrap_or_default() {
            self.via.remove(&key);
            if let Some(k) = self.keys.get_mut(&key) {
                if k.lock.take().is_some() {
                    self.counters.released_on_disconnect += 1;
                }
            }
        }
    }

    fn on_read(&mut self, from: Peer, lock: LockId, key: &[u8], out: &mut Out<Msg, Timer>) {
        let (tag, value) = match self.keys.get(key) {
            Some(k) => (k.tag, k.value.clone()),
            None => (Tag::ZERO, None),
        };
        out.send(from, Msg::ReadReply { lock, tag, value });
    }

    /// §4.2: only the holder, while its lease runs; the value is replaced if
    /// the tag is newer. An equal or older tag under a valid lock is a
    /// re-sent write: acknowledged, not applied (the seed's "otherwise
    /// WRITE_DENIED" is read as "not the holder or expired").
    fn on_write(&mut self, now: Time, from: Peer, w: Write, out: &mut Out<Msg, Timer>) {
        let Write {
            lock,
            key,
            tag,
            value,
        } = w;
        let holds = self.keys.get(&key).and_then(|k| k.holder(now)) == Some(lock);
        if !holds {
            self.counters.writes_denied += 1;
            out.send(from, Msg::WriteDenied { lock });
            return;
        }
        let k = self.keys.get_mut(&key).expect("a held lock has a key");
        if tag.jumps_too_far(k.tag) {
            // Even the holder may not move the key's tag more than
            // `MAX_TAG_JUMP` at once (or to `u64::MAX`): an honest writer's
            // tag is the highest of its locked quorum plus one. Denied
            // definitely, so the coordinator stops waiting for this ack.
            self.counters.tag_jumps_refused += 1;
            out.send(from, Msg::WriteDenied { lock });
            return;
        }
        if tag > k.tag {
            if self.durable {
                let (key, value) = (key.clone(), value.clone());
                out.persist(Record::Register { key, tag, value });
            }
            k.tag = tag;
            k.value = value;
        } else {
            self.counters.older_writes += 1;
        }
        out.send(from, Msg::Ack { lock });
    }

    /// Handle a message addressed to the replica role.
    pub fn handle(&mut self, now: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Timer>) {
        match msg {
            Msg::LockReq { lock, key, .. } => self.on_lock_req(now, from, lock, key, out),
            Msg::Unlock { lock, key } => self.on_unlock(now, lock, &key),
            Msg::Read { lock, key, .. } => self.on_read(from, lock, &key, out),
            Msg::Write {
                lock,
                key,
                tag,
                value,
                ..
            } => self.on_write(
                now,
                from,
                Write {
                    lock,
                    key,
                    tag,
                    value,
                },
                out,
            ),
            // Not a request (`Msg::is_request`): a reply or the recovery
            // exchange, never addressed to the replica role.
            _ => self.counters.misrouted += 1,
        }
    }

    /// Every register this replica holds, sorted by key (deterministic
    /// messages), for a recovering peer.
    pub fn snapshot(&self) -> Vec<(Bytes, Tag, Option<Bytes>)> {
        let mut v: Vec<_> = (self.keys.iter())
            .filter(|(_, k)| k.tag != Tag::ZERO)
            .map(|(key, k)| (key.clone(), k.tag, k.value.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Keep the newer of each entry and what is held (a membership
    /// change's state transfer), persisted when durable. A tag at `ts =
    /// u64::MAX` is never taken (see `Tag::jumps_too_far`).
    pub fn merge(&mut self, entries: Entries, out: &mut Out<Msg, Timer>) {
        for (key, tag, value) in entries {
            if tag.ts == u64::MAX {
                self.counters.tag_jumps_refused += 1;
                continue;
            }
            let k = self.keys.entry(key.clone()).or_default();
            if tag > k.tag {
                if self.durable {
                    let value = value.clone();
                    out.persist(Record::Register { key, tag, value });
                }
                k.tag = tag;
                k.value = value;
            }
        }
    }

    /// A new configuration is installed: every lock was granted in an older
    /// one, whose WRITEs this replica no longer takes (they are answered
    /// `Moved`), so none protects anything; released at once rather than
    /// left to block the new configuration's coordinators for a lease.
    pub fn release_all(&mut self) {
        for k in self.keys.values_mut() {
            k.lock = None;
        }
        self.via.clear();
        self.by_conn.clear();
    }

    /// A durable record read back after a restart; locks are not durable.
    pub fn restore(&mut self, rec: Record) {
        let Record::Register { key, tag, value } = rec else {
            return;
        };
        let k = self.keys.entry(key).or_default();
        if tag > k.tag {
            k.tag = tag;
            k.value = value;
        }
    }
}

/// The client connection a message came on, if it came on one.
fn conn_of(from: Peer) -> Option<u64> {
    match from {
        Peer::Conn(c) => Some(c),
        Peer::Node(_) => None,
    }
}

/// The fields of a `Msg::Write`.
struct Write {
    lock: LockId,
    key: Bytes,
    tag: Tag,
    value: Option<Bytes>,
}

catch_up::sync_store!(Replica);

impl Registers<Msg, Timer> for Replica {
    fn snapshot(&self) -> Entries {
        Replica::snapshot(self)
    }
    fn merge(&mut self, entries: Entries, out: &mut Out<Msg, Timer>) {
        Replica::merge(self, entries, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::Command;
    use crate::protocol::lease_lock::testing::*;

    const LEASE: Duration = Duration::from_millis(100);
    const A: Peer = Peer::Conn(1);
    const B: Peer = Peer::Node(2);

    fn req(r: &mut Replica, at: u64, from: Peer, l: LockId) -> Msg {
        let mut out = O::new();
        let msg = Msg::LockReq {
            lock: l,
            key: key(),
            epoch: 0,
        };
        r.handle(Time(at), from, msg, &mut out);
        let mut s = sends(&mut out);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, from, "the answer goes to the requester");
        s.pop().unwrap().1
    }
    fn write(r: &mut Replica, at: u64, l: LockId, ts: u64, v: &'static [u8]) -> Msg {
        let mut out = O::new();
        let msg = Msg::Write {
            lock: l,
            key: key(),
            tag: Tag {
                ts,
                writer: l.owner,
            },
            value: Some(Bytes::from_static(v)),
            epoch: 0,
        };
        r.handle(Time(at), A, msg, &mut out);
        sends(&mut out).pop().unwrap().1
    }
    fn unlock(r: &mut Replica, at: u64, l: LockId) {
        let mut out = O::new();
        r.handle(
            Time(at),
            A,
            Msg::Unlock {
                lock: l,
                key: key(),
            },
            &mut out,
        );
        assert!(out.is_empty(), "UNLOCK has no reply");
    }
    fn granted(l: LockId) -> Msg {
        Msg::LockGranted {
            lock: l,
            key: key(),
        }
    }

    /// §4.2: a free key is granted for one lease; while it runs every other
    /// lock is denied; once it ran out the next request takes the key.
    #[test]
    fn grants_a_free_key_denies_while_the_lease_runs_and_expires() {
        let (a, b) = (lock(1, 1), lock(2, 1));
        let mut r = Replica::new(LEASE, false);
        assert_eq!(req(&mut r, 0, A, a), granted(a));
        assert_eq!(r.holder(b"k", Time(99_999)), Some(a));
        assert_eq!(req(&mut r, 99_999, B, b), Msg::LockDenied { lock: b });
        assert_eq!(req(&mut r, 100_000, B, b), granted(b), "lease over");
        assert_eq!(r.counters.expired_leases, 1);
        assert_eq!((r.counters.grants, r.counters.denials), (2, 1));
        assert_eq!(r.get(b"k").unwrap().lock, Some((b, Time(200_000))));
    }

    /// A re-sent LOCK_REQ of the holder is granted again without
    /// extending its lease; another round of the same owner is denied.
    #[test]
    fn a_duplicate_request_is_granted_again_without_a_longer_lease() {
        let a = lock(1, 1);
        let mut r = Replica::new(LEASE, false);
        req(&mut r, 0, A, a);
        assert_eq!(req(&mut r, 50_000, A, a), granted(a));
        assert_eq!(r.get(b"k").unwrap().lock, Some((a, Time(100_000))));
        let next = lock(1, 2);
        assert_eq!(req(&mut r, 50_000, A, next), Msg::LockDenied { lock: next });
    }

    /// §4.2: UNLOCK clears the lock only for its holder (or once expired).
    #[test]
    fn only_the_holder_unlocks_a_running_lease() {
        let (a, b) = (lock(1, 1), lock(2, 1));
        let mut r = Replica::new(LEASE, false);
        unlock(&mut r, 0, a);
        assert_eq!(r.counters.foreign_unlocks, 1, "unknown key");
        req(&mut r, 0, A, a);
        unlock(&mut r, 10, b);
        unlock(&mut r, 10, lock(1, 2));
        assert_eq!(r.holder(b"k", Time(10)), Some(a));
        assert_eq!(r.counters.foreign_unlocks, 3);
        unlock(&mut r, 10, a);
        assert_eq!(r.holder(b"k", Time(10)), None);
        unlock(&mut r, 20, a);
        assert_eq!(
            r.counters.foreign_unlocks, 4,
            "a duplicate UNLOCK is harmless"
        );
        req(&mut r, 20, B, b);
        unlock(&mut r, 200_000, a);
        assert_eq!(
            r.get(b"k").unwrap().lock,
            None,
            "an expired lease is cleared by anyone"
        );
        assert_eq!(r.counters.expired_leases, 1);
    }

    /// Issue 31: a WRITE whose tag is `u64::MAX`, or more than
    /// `MAX_TAG_JUMP` ahead of the held one, is denied even to the holder,
    /// and leaves the register as it was; exactly `MAX_TAG_JUMP` is taken.
    #[test]
    fn a_write_whose_tag_jumps_too_far_is_denied_even_to_the_holder() {
        use crate::types::MAX_TAG_JUMP;
        let a = lock(1, 1);
        let mut r = Replica::new(LEASE, true);
        req(&mut r, 0, A, a);
        assert_eq!(write(&mut r, 1, a, 5, b"x"), Msg::Ack { lock: a });
        let before = r.get(b"k").cloned();
        for ts in [u64::MAX, 6 + MAX_TAG_JUMP] {
            assert_eq!(
                write(&mut r, 2, a, ts, b"forged"),
                Msg::WriteDenied { lock: a }
            );
            assert_eq!(r.get(b"k").cloned(), before, "state unchanged");
        }
        assert_eq!(r.counters.tag_jumps_refused, 2);
        assert_eq!(r.counters.writes_denied, 0, "counted apart");
        assert_eq!(
            write(&mut r, 3, a, 5 + MAX_TAG_JUMP, b"y"),
            Msg::Ack { lock: a }
        );
        assert_eq!(r.get(b"k").unwrap().tag.ts, 5 + MAX_TAG_JUMP);
    }

    /// §4.2: a WRITE is applied only for the holder while its lease runs.
    #[test]
    fn writes_need_the_lock_and_a_running_lease() {
        let (a, b) = (lock(1, 1), lock(2, 1));
        let mut r = Replica::new(LEASE, false);
        assert_eq!(
            write(&mut r, 0, a, 1, b"x"),
            Msg::WriteDenied { lock: a },
            "no lock"
        );
        req(&mut r, 0, A, a);
        assert_eq!(
            write(&mut r, 1, b, 1, b"y"),
            Msg::WriteDenied { lock: b },
            "not holder"
        );
        assert_eq!(write(&mut r, 2, a, 1, b"x"), Msg::Ack { lock: a });
        assert_eq!(r.get(b"k").unwrap().value.as_deref(), Some(&b"x"[..]));
        // A re-sent write (same tag) and an older one: acked, not applied.
        assert_eq!(write(&mut r, 3, a, 1, b"x"), Msg::Ack { lock: a });
        assert_eq!(write(&mut r, 3, a, 0, b"old"), Msg::Ack { lock: a });
        assert_eq!(r.counters.older_writes, 2);
        assert_eq!(r.get(b"k").unwrap().tag, Tag { ts: 1, writer: 1 });
        assert_eq!(
            write(&mut r, 100_000, a, 2, b"late"),
            Msg::WriteDenied { lock: a }
        );
        assert_eq!(r.get(b"k").unwrap().value.as_deref(), Some(&b"x"[..]));
        assert_eq!(r.counters.writes_denied, 3);
    }

    /// §4.2: reads are answered whoever holds the lock.
    #[test]
    fn reads_are_answered_regardless_of_the_lock() {
        let (a, b) = (lock(1, 1), lock(2, 1));
        let mut r = Replica::new(LEASE, false);
        let read = |r: &mut Replica| {
            let mut out = O::new();
            r.handle(
                T0,
                B,
                Msg::Read {
                    lock: b,
                    key: key(),
                    epoch: 0,
                },
                &mut out,
            );
            let s = sends(&mut out);
            assert!(matches!(&s[..], [(to, _)] if *to == B), "{s:?}");
            s[0].1.clone()
        };
        let none = Msg::ReadReply {
            lock: b,
            tag: Tag::ZERO,
            value: None,
        };
        assert_eq!(read(&mut r), none);
        req(&mut r, 0, A, a);
        write(&mut r, 0, a, 3, b"v");
        let reply = Msg::ReadReply {
            lock: b,
            tag: Tag { ts: 3, writer: 1 },
            value: Some(Bytes::from_static(b"v")),
        };
        assert_eq!(read(&mut r), reply, "while another holds the lock");
        let mut out = O::new();
        r.handle(T0, B, Msg::Ack { lock: b }, &mut out);
        assert_eq!(r.counters.misrouted, 1);
        assert!(out.is_empty());
    }

    /// A client connection that goes down takes the locks granted on it
    /// with it, at once: the key is free for the next client, and a WRITE
    /// under the released lock is denied. A replica coordinator's lock
    /// (granted on a node link) and another connection's are kept.
    #[test]
    fn a_closed_client_connection_releases_its_locks_only() {
        let (a, b, c) = (lock(1, 1), lock(2, 1), lock(3, 1));
        let mut r = Replica::new(LEASE, false);
        assert_eq!(req(&mut r, 0, A, a), granted(a));
        r.on_conn_down(7);
        assert_eq!(r.holder(b"k", Time(1)), Some(a), "another connection's");
        r.on_conn_down(1);
        assert_eq!(r.holder(b"k", Time(1)), None);
        assert_eq!(r.counters.released_on_disconnect, 1);
        assert_eq!(write(&mut r, 2, a, 1, b"x"), Msg::WriteDenied { lock: a });
        assert_eq!(req(&mut r, 3, B, b), granted(b), "free at once");
        r.on_conn_down(1);
        assert_eq!(r.holder(b"k", Time(4)), Some(b), "a node's lock stays");
        unlock(&mut r, 5, b);
        // A lock released by UNLOCK leaves nothing for the connection's Down.
        let d = Peer::Conn(9);
        assert_eq!(req(&mut r, 6, d, c), granted(c));
        unlock(&mut r, 7, c);
        assert_eq!(req(&mut r, 8, A, a), granted(a));
        r.on_conn_down(9);
        assert_eq!(r.holder(b"k", Time(9)), Some(a));
        assert_eq!(r.counters.released_on_disconnect, 1);
        assert!(r.via.len() == 1 && r.by_conn.len() == 1, "{r:?}");
    }

    /// A holder that reconnects and re-sends its LOCK_REQ on the new
    /// connection keeps its lock when the old connection's Down arrives
    /// late; the new connection's Down releases it.
    #[test]
    fn a_lock_re_requested_on_a_new_connection_moves_to_it() {
        let a = lock(1, 1);
        let mut r = Replica::new(LEASE, false);
        req(&mut r, 0, A, a);
        assert_eq!(req(&mut r, 10, Peer::Conn(2), a), granted(a));
        r.on_conn_down(1);
        assert_eq!(r.holder(b"k", Time(11)), Some(a));
        r.on_conn_down(2);
        assert_eq!(r.holder(b"k", Time(11)), None);
        assert!(r.via.is_empty() && r.by_conn.is_empty());
    }

    #[test]
    fn a_durable_replica_persists_before_it_acks_and_restores() {
        let a = lock(1, 1);
        let mut r = Replica::new(LEASE, true);
        req(&mut r, 0, A, a);
        let mut out = O::new();
        let tag = Tag { ts: 1, writer: 1 };
        let msg = Msg::Write {
            lock: a,
            key: key(),
            tag,
            value: None,
            epoch: 0,
        };
        r.handle(T0, A, msg, &mut out);
        let cmds = out.commands();
        assert!(matches!(cmds[0], Command::Persist(_)));
        assert!(matches!(cmds[1], Command::Send { .. }));
        let Command::Persist(rec) = cmds[0].clone() else {
            unreachable!()
        };
        let mut fresh = Replica::new(LEASE, true);
        fresh.restore(rec);
        assert_eq!(fresh.get(b"k").unwrap().tag, tag);
        assert_eq!(fresh.get(b"k").unwrap().lock, None, "locks are not durable");
        assert_eq!((fresh.len(), fresh.is_empty()), (1, false));
    }
}
