//! One key's register: `(tag, value)`, its pending pre-writes, the reads
//! parked on them and the clients waiting for a write (pc 11-16, 76-84).

use super::msg::Entry;
use crate::types::{ClientRef, NodeId, OpId, Tag};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A client waiting for a write of this key to be applied here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub client: ClientRef,
    /// The operation it waits for (`OpId::NONE`: match by `tag` only).
    pub op: OpId,
    pub tag: Tag,
    /// The server's own write, past its pre-write round: any write at or
    /// above `tag` for this key may acknowledge it (see `release_writers`).
    pub converted: bool,
}

/// The register of one key at one server.
#[derive(Clone, Debug, Default)]
pub struct Register {
    /// `[ts, id]` of the value held (pc 12).
    pub tag: Tag,
    pub value: Option<Bytes>,
    /// Who wrote the value held, to re-send it as a write (pc 88).
    pub origin: NodeId,
    pub home: NodeId,
    pub op: OpId,
    /// pending_write_set (pc 13): pre-writes seen and not yet written,
    /// kept whole so they can be re-sent when the successor crashes (pc 91).
    /// Void copies are kept too (to be re-sent) but hold no read up.
    pub pending: BTreeMap<Tag, Entry>,
    /// The highest ts this server put in a tag of this key.
    issued: u64,
    /// Parked reads, each with the pending tag it waits for (pc 80).
    reads: Vec<(ClientRef, Tag)>,
    /// Clients waiting for a write to be applied (own writes, retries).
    writers: Vec<Waiter>,
}

impl Register {
    /// The tag of a new write by `writer`: `[max(highest.ts, ts) + 1, i]`
    /// (pc 22-23), and above any ts issued here before: a void copy leaves
    /// no trace in `ts` or `pending`, and a tag must never name two writes.
    /// `None` when that ts would pass `u64::MAX` (checked, never wrapped
    /// to 0: a wrapped tag would lose to every write it must supersede).
    pub fn next_tag(&mut self, writer: u64) -> Option<Tag> {
        let highest = self.pending.keys().next_back().map_or(0, |t| t.ts);
        let floor = Tag {
            ts: highest.max(self.tag.ts).max(self.issued),
            writer: 0,
        };
        let tag = floor.next(writer)?;
        self.issued = tag.ts;
        Some(tag)
    }

    /// The highest pending tag a read must wait for, if any is newer than
    /// the value held (pc 77, 80). A pending tag at or below `tag` cannot
    /// make the value held any older (a re-sent copy, or a write that lost
    /// to a newer one), so it holds no read up.
    fn blocking(&self) -> Option<Tag> {
        self.live_pending_below(None).filter(|&h| h > self.tag)
    }

    /// The highest pending tag that may be applied (not a void copy),
    /// below `limit` if given.
    fn live_pending_below(&self, limit: Option<Tag>) -> Option<Tag> {
        let below = match limit {
            Some(l) => self.pending.range(..l),
            None => self.pending.range(..),
        };
        below.rev().find(|(_, e)| !e.void).map(|(t, _)| *t)
    }

    /// Serve a read: `Some(value)` now, or `None` when parked (pc 76-84).
    /// `wait = false` is the injected read inversion bug.
    pub fn read(&mut self, client: ClientRef, wait: bool) -> Option<Option<Bytes>> {
        match self.blocking() {
            Some(h) if wait => {
                self.reads.push((client, h));
                None
            }
            _ => Some(self.value.clone()),
        }
    }

    /// Hold `e`'s value if its tag is newer (pc 32, 42). True if applied.
    pub fn apply(&mut self, e: &Entry) -> bool {
        let newer = e.tag > self.tag;
        if newer {
            self.tag = e.tag;
            self.value = e.value.clone();
            self.origin = e.origin;
            self.home = e.home;
            self.op = e.op;
        }
        newer
    }

    /// `apply` under `InjectedBug::ApplyAnyTag`: any other tag replaces
    /// the value held, an older one too.
    pub fn apply_any(&mut self, e: &Entry) -> bool {
        if e.tag == self.tag {
            return false;
        }
        self.tag = Tag::ZERO;
        self.apply(e)
    }

    /// The value held as a write message, to re-send (pc 88).
    pub fn as_write(&self, key: &Bytes) -> Entry {
        Entry {
            key: key.clone(),
            tag: self.tag,
            value: self.value.clone(),
            origin: self.origin,
            home: self.home,
            op: self.op,
            void: false,
        }
    }

    /// A joiner's copy of a register: the value held and the pending set
    /// (no clients: they wait at the server they asked).
    pub fn from_snapshot(held: &Entry, pending: Vec<Entry>) -> Register {
        let mut r = Register::default();
        r.apply(held);
        r.pending = pending.into_iter().map(|e| (e.tag, e)).collect();
        r
    }

    /// Parked reads that may now answer, with the value to answer. A read
    /// waiting for `h` goes once a tag >= `h` is held (pc 81-82); if `h`
    /// left `pending` without being applied (a void copy), it waits for the
    /// highest pending tag below `h` instead, or goes if there is none.
    pub fn release_reads(&mut self) -> Vec<(ClientRef, Option<Bytes>)> {
        let mut done = Vec::new();
        let mut keep = Vec::new();
        for (client, mut h) in std::mem::take(&mut self.reads) {
            loop {
                if self.tag >= h {
                    done.push((client, self.value.clone()));
                    break;
                }
                if self.pending.contains_key(&h) {
                    keep.push((client, h));
                    break;
                }
                match self.live_pending_below(Some(h)) {
                    Some(lower) => h = lower,
                    None => {
                        done.push((client, self.value.clone()));
                        break;
                    }
                }
            }
        }
        self.reads = keep;
        done
    }

    pub fn wait_for_write(&mut self, w: Waiter) {
        self.writers.push(w);
    }

    /// The server's own write `tag` finished its pre-write round.
    pub fn mark_converted(&mut self, tag: Tag) {
        for w in self.writers.iter_mut().filter(|w| w.tag == tag) {
            w.converted = true;
        }
    }

    /// Clients whose write is done now that a write of operation `op` at
    /// `tag` was applied here: that write's clients (pc 49-50, or a retry
    /// of `op`), and own writes past their pre-write round at or below
    /// `tag` (their write message may have died with a crashed successor;
    /// every server has them pending or applied, so they are atomic).
    pub fn release_writers(&mut self, op: OpId, tag: Tag) -> Vec<ClientRef> {
        let (done, keep) = std::mem::take(&mut self.writers)
            .into_iter()
            .partition(|w| {
                w.tag == tag || (!op.is_none() && w.op == op) || (w.converted && w.tag <= tag)
            });
        self.writers = keep;
        done.into_iter().map(|w: Waiter| w.client).collect()
    }

    /// Retries of `op` parked by `known_op` (no tag of their own), now that
    /// `op` is applied here: done, as a retry arriving now would be.
    pub fn release_retries(&mut self, op: OpId) -> Vec<ClientRef> {
        if op.is_none() {
            return Vec::new();
        }
        let (done, keep) = std::mem::take(&mut self.writers)
            .into_iter()
            .partition(|w| w.op == op && w.tag == Tag::ZERO);
        self.writers = keep;
        done.into_iter().map(|w: Waiter| w.client).collect()
    }

    /// Forget the clients of a closed session (their replies would be dropped).
    pub fn forget_session(&mut self, session: u64) {
        self.reads.retain(|(c, _)| c.session != session);
        self.writers.retain(|w| w.client.session != session);
    }

    /// Parked reads and waiting writers, for status.
    pub fn waiting(&self) -> (usize, usize) {
        (self.reads.len(), self.writers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ring::testing::{entry, tag};

    fn client(id: u64) -> ClientRef {
        ClientRef::local(id)
    }

    #[test]
    fn a_new_tag_exceeds_both_the_value_held_and_every_pending_one() {
        // pc 22-23: [max(highest.ts, ts) + 1, i].
        let mut r = Register::default();
        assert_eq!(r.next_tag(2), Some(tag(1, 2)));
        r.apply(&entry(4, 1, "x"));
        assert_eq!(r.next_tag(2), Some(tag(5, 2)));
        r.pending.insert(tag(9, 3), entry(9, 3, "x"));
        assert_eq!(r.next_tag(2), Some(tag(10, 2)));
        r.pending.clear(); // e.g. [9, 3] and [10, 2] were void copies
        assert_eq!(r.next_tag(2), Some(tag(11, 2)), "never a tag twice");
    }

    /// Issue 31: a pending or held tag at `ts = u64::MAX` leaves no newer
    /// tag; `next_tag` says so instead of wrapping to 0, and issues nothing.
    #[test]
    fn no_tag_follows_the_last_one() {
        let mut r = Register::default();
        r.pending
            .insert(tag(u64::MAX, 3), entry(u64::MAX, 3, "forged"));
        assert_eq!(r.next_tag(2), None);
        assert_eq!(r.issued, 0, "nothing issued");
        r.pending.clear();
        r.apply(&entry(u64::MAX, 3, "x"));
        assert_eq!(r.next_tag(2), None);
    }

    #[test]
    fn a_read_answers_at_once_with_nothing_pending_newer_than_its_value() {
        // pc 77-78; a pending tag below the value held blocks nothing.
        let mut r = Register::default();
        r.apply(&entry(3, 1, "v"));
        assert_eq!(
            r.read(client(1), true),
            Some(Some(Bytes::from_static(b"v")))
        );
        assert_eq!(r.as_write(&Bytes::from_static(b"k")), entry(3, 1, "v"));
        r.pending.insert(tag(2, 2), entry(2, 2, "old"));
        assert!(r.read(client(2), true).is_some());
    }

    #[test]
    fn a_parked_read_waits_for_the_highest_pending_tag_then_answers_the_new_value() {
        // pc 80-82: a write below the awaited tag does not release it.
        let mut r = Register::default();
        r.pending.insert(tag(1, 1), entry(1, 1, "a"));
        r.pending.insert(tag(2, 2), entry(2, 2, "b"));
        assert_eq!(r.read(client(1), true), None);
        r.pending.remove(&tag(1, 1));
        r.apply(&entry(1, 1, "a"));
        assert!(r.release_reads().is_empty(), "1.1 < 2.2: still parked");
        assert_eq!(r.waiting(), (1, 0));
        r.pending.remove(&tag(2, 2));
        r.apply(&entry(2, 2, "b"));
        assert_eq!(
            r.release_reads(),
            vec![(client(1), Some(Bytes::from_static(b"b")))]
        );
        // The bug answers at once whatever is pending.
        r.pending.insert(tag(3, 1), entry(3, 1, "c"));
        assert!(r.read(client(2), false).is_some());
    }

    #[test]
    fn a_read_waiting_on_a_voided_tag_falls_back_to_the_next_pending_one() {
        let mut r = Register::default();
        r.pending.insert(tag(1, 1), entry(1, 1, "a"));
        r.pending.insert(tag(2, 2), entry(2, 2, "void"));
        assert_eq!(r.read(client(1), true), None);
        r.pending.remove(&tag(2, 2)); // voided: removed, never applied
        assert!(r.release_reads().is_empty(), "1.1 still pending");
        r.pending.remove(&tag(1, 1));
        assert_eq!(r.release_reads(), vec![(client(1), None)]);
    }

    #[test]
    fn writers_are_released_by_their_op_or_their_tag_and_sessions_forget_them() {
        let mut r = Register::default();
        let op = OpId { client: 7, seq: 1 };
        let w = |id, op, tag| Waiter {
            client: client(id),
            op,
            tag,
            converted: false,
        };
        r.wait_for_write(w(1, op, tag(5, 5)));
        r.wait_for_write(w(2, OpId::NONE, tag(2, 1)));
        assert!(r.release_writers(OpId::NONE, tag(9, 9)).is_empty());
        assert_eq!(r.release_writers(op, tag(3, 3)), vec![client(1)]);
        let gone = ClientRef {
            id: 3,
            session: 4,
            op: OpId::NONE,
        };
        r.wait_for_write(Waiter {
            client: gone,
            ..w(3, OpId::NONE, tag(2, 1))
        });
        r.forget_session(4);
        assert_eq!(r.release_writers(OpId::NONE, tag(2, 1)), vec![client(2)]);
        // A converted own write goes with any write at or above its tag.
        r.wait_for_write(w(4, OpId::NONE, tag(6, 1)));
        r.wait_for_write(w(5, OpId::NONE, tag(7, 1)));
        assert!(r.release_writers(OpId::NONE, tag(8, 2)).is_empty());
        r.mark_converted(tag(6, 1));
        assert_eq!(r.release_writers(OpId::NONE, tag(8, 2)), vec![client(4)]);
    }
}
