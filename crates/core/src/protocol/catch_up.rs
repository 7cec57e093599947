//! What register replicas that restart without their state share (ABD,
//! lease-lock): asking the peers not yet heard from for their stores, and
//! how a recovering replica reports itself.

use crate::protocol::contract::{Export, Out, Record};
use crate::quorum::QuorumTracker;
use crate::types::{NodeId, Peer, Tag};
use bytes::Bytes;
use std::time::Duration;

/// How often a recovering replica asks the peers that did not answer yet.
pub const SYNC_RETRY: Duration = Duration::from_millis(200);

/// Send `request` to every member but `me` not yet counted in `votes`, and
/// arm `timer` to ask again after [`SYNC_RETRY`].
pub fn ask_missing<M: Clone, T>(
    me: NodeId,
    members: &[NodeId],
    votes: &QuorumTracker,
    request: M,
    timer: T,
    out: &mut Out<M, T>,
) {
    for &n in members.iter().filter(|&&n| n != me && !votes.has(n)) {
        out.send(Peer::Node(n), request.clone());
    }
    out.set_timer(SYNC_RETRY, timer);
}

/// A register replica's state for a snapshot: its registers (key, tag,
/// value), to be merged with a majority's by highest tag. Refused while
/// it catches up: it may miss writes it had acknowledged before it lost
/// its state, so it would not count in the majority that holds them.
pub fn export(
    recovering: bool,
    registers: Vec<(Bytes, Tag, Option<Bytes>)>,
) -> Result<Export, String> {
    if recovering {
        return Err("this replica is catching up after losing its state; ask the others".into());
    }
    let entries = registers.len() as u64;
    let records = (registers.into_iter())
        .map(|(key, tag, value)| Record::Register { key, tag, value })
        .collect();
    Ok(Export {
        records,
        cut: 0,
        entries,
        merge_majority: true,
    })
}

/// A register replica's store, as catch-up fills it.
pub trait SyncStore {
    /// Take a peer's register (the `Protocol::restore` rule).
    fn take(&mut self, rec: Record);
    /// Count a peer's register refused: no write could supersede its tag.
    fn refuse(&mut self);
}

/// `impl SyncStore` for a register replica: `restore(Record)` takes a
/// register, `counters.tag_jumps_refused` counts the refused ones.
#[cfg(any(feature = "abd", feature = "lease-lock"))]
macro_rules! sync_store {
    ($replica:ty) => {
        impl $crate::protocol::catch_up::SyncStore for $replica {
            fn take(&mut self, rec: $crate::protocol::contract::Record) {
                self.restore(rec);
            }
            fn refuse(&mut self) {
                self.counters.tag_jumps_refused += 1;
            }
        }
    };
}
#[cfg(any(feature = "abd", feature = "lease-lock"))]
pub(crate) use sync_store;

/// A register replica's peers, and while it catches up after losing its
/// state, which of them it has merged the stores of.
#[derive(Debug)]
pub struct CatchUp {
    me: NodeId,
    /// All replica ids of the cluster, including `me`.
    members: Vec<NodeId>,
    /// Set while catching up: the peers heard from, until `need` of them.
    votes: Option<QuorumTracker>,
}

impl CatchUp {
    /// Not catching up; `members` are all replica ids (including `me`).
    pub fn new(me: NodeId, members: Vec<NodeId>) -> Self {
        CatchUp {
            me,
            members,
            votes: None,
        }
    }
    /// How many replicas the cluster has (N).
    pub fn replicas(&self) -> usize {
        self.members.len()
    }
    /// Catch up until the stores of `need` replicas are merged.
    pub fn start(&mut self, need: usize) {
        self.votes = Some(QuorumTracker::new(self.members.len(), need));
    }
    pub fn active(&self) -> bool {
        self.votes.is_some()
    }
    /// While catching up, [`ask_missing`]; else nothing.
    pub fn ask<M: Clone, T>(&self, request: M, timer: T, out: &mut Out<M, T>) {
        if let Some(votes) = &self.votes {
            ask_missing(self.me, &self.members, votes, request, timer, out);
        }
    }
    /// A peer's store (`SyncReply`). Ignored when not catching up (a late
    /// reply), when `from` is no replica of the cluster or was heard
    /// already, and when `stale` (the caller's rule). Otherwise every
    /// register goes into `store` and `from` counts; with `need` of them
    /// the catching up ends.
    pub fn on_reply(
        &mut self,
        from: Peer,
        stale: bool,
        entries: Vec<(Bytes, Tag, Option<Bytes>)>,
        store: &mut impl SyncStore,
    ) {
        let (Peer::Node(n), Some(votes)) = (from, self.votes.as_mut()) else {
            return; // not recovering (a late reply), or not from a replica
        };
        if !self.members.contains(&n) {
            return; // not a replica of this cluster
        }
        if votes.has(n) || stale {
            return;
        }
        for (key, tag, value) in entries {
            // A peer's tag is not bounded by a jump (this store is empty),
            // but one no write could supersede is never taken.
            if tag.ts == u64::MAX {
                store.refuse();
                continue;
            }
            store.take(Record::Register { key, tag, value });
        }
        votes.record(n);
        if votes.won() {
            self.votes = None;
        }
    }
}

/// `recovering` or `replica`: the role of an equal replica.
pub fn role(recovering: bool) -> &'static str {
    if recovering {
        "recovering"
    } else {
        "replica"
    }
}

/// The status line of a replica holding `keys` registers, with its
/// coordinator's status after the bar.
pub fn status(keys: usize, recovering: bool, coordinator: &str) -> String {
    let rec = if recovering { " RECOVERING" } else { "" };
    format!("replica keys={keys}{rec} | {coordinator}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Command;

    #[test]
    fn asks_only_peers_not_heard_from_and_rearms() {
        let mut votes = QuorumTracker::new(4, 2);
        votes.record(3);
        let mut out: Out<u8, &str> = Out::new();
        ask_missing(1, &[1, 2, 3, 4], &votes, 7, "sync", &mut out);
        let to: Vec<_> = (out.commands().iter())
            .filter_map(|c| match c {
                Command::Send { to, msg: 7 } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, [Peer::Node(2), Peer::Node(4)]);
        assert!(out.commands().contains(&Command::SetTimer {
            after: SYNC_RETRY,
            timer: "sync"
        }));
    }

    #[derive(Default)]
    struct Store {
        taken: Vec<Record>,
        refused: u32,
    }
    impl SyncStore for Store {
        fn take(&mut self, rec: Record) {
            self.taken.push(rec);
        }
        fn refuse(&mut self) {
            self.refused += 1;
        }
    }

    #[test]
    fn catching_up_ends_with_the_stores_of_need_peers() {
        let mut c = CatchUp::new(1, vec![1, 2, 3]);
        let mut store = Store::default();
        let entry = |ts| (Bytes::from_static(b"k"), Tag { ts, writer: 2 }, None);
        let mut out: Out<u8, &str> = Out::new();
        c.ask(7, "sync", &mut out);
        assert!(!c.active() && out.is_empty(), "not catching up: silent");
        c.on_reply(Peer::Node(2), false, vec![entry(1)], &mut store);
        assert!(store.taken.is_empty(), "a late reply is ignored");
        c.start(2);
        c.ask(7, "sync", &mut out);
        assert_eq!(out.len(), 3, "both peers asked, the timer armed");
        c.on_reply(Peer::Node(9), false, vec![entry(1)], &mut store);
        c.on_reply(Peer::Conn(2), false, vec![entry(1)], &mut store);
        c.on_reply(Peer::Node(2), true, vec![entry(1)], &mut store);
        assert!(store.taken.is_empty() && c.active(), "strangers, stale");
        c.on_reply(
            Peer::Node(2),
            false,
            vec![entry(1), entry(u64::MAX)],
            &mut store,
        );
        c.on_reply(Peer::Node(2), false, vec![entry(2)], &mut store);
        assert_eq!((store.taken.len(), store.refused), (1, 1));
        assert!(c.active(), "one peer twice is one");
        c.on_reply(Peer::Node(3), false, vec![], &mut store);
        assert!(!c.active());
        assert_eq!(c.replicas(), 3);
    }

    #[test]
    fn role_and_status_say_recovering() {
        assert_eq!((role(true), role(false)), ("recovering", "replica"));
        assert_eq!(status(3, true, "c"), "replica keys=3 RECOVERING | c");
        assert_eq!(status(0, false, "c"), "replica keys=0 | c");
    }
}
