//! Deliberate bugs, a testing aid for the simulator and the checker.

/// Deliberate bugs for the simulator's self-test (`quorumkv sim
/// --inject-bug`). They exist so that tests can prove the simulator and the
/// checker catch a broken protocol. Never enabled otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedBug {
    /// get returns after the query phase, without write-back (allows read inversion).
    NoWriteBack,
    /// quorums of ⌊N/2⌋ instead of ⌊N/2⌋+1 (two quorums may not intersect).
    MinorityQuorum,
    /// replicas overwrite their value even with an older tag.
    AcceptOlderTag,
    /// a replica restarted without its data answers queries at once.
    NoRecovery,
    /// a replica acknowledges a store before it persists it (a crash in
    /// between loses an acknowledged write).
    AckBeforePersist,
    /// a recovering replica merges the stores of N−Q peers, one fewer than
    /// it needs, before answering.
    RecoveryOnePeerShort,
    /// the fast read takes the quorum's tags as equal when only their
    /// timestamps match (two writers can use one ts for different values).
    FastReadTsOnly,
    /// A coordinator's put takes its ts from the query quorum alone,
    /// forgetting the ts it issued last: two writes through one server (or
    /// a write after one that timed out with its store in flight) can get
    /// one tag for two values. Caught by the per-step invariant "a tag
    /// names one value" (`invariants.rs`).
    ReuseTs,
    /// A replica merging a peer's older register (recovery's `SyncReply`)
    /// keeps its own, newer tag but takes the older value: the tag then
    /// names two values, which a read sees only if its quorum mixes them.
    MergeKeepsTag,
    /// Membership change: a replica that promised the next epoch keeps
    /// serving its own, so a write can complete after the state transfer
    /// read its store (the old configuration forgotten too early).
    NoFreeze,
    /// Membership change: a proposer transfers the store of one old member
    /// instead of a quorum's (the old configuration's quorum forgotten).
    TransferFromOne,
    /// Membership change: a member of the next configuration serves it as
    /// soon as it accepts it, before the state transfer reached it.
    InstallOnAccept,
    /// Membership change: a proposer decides its own members even when a
    /// promise reports members accepted under an earlier ballot (Paxos'
    /// rule broken: two configurations for one epoch).
    IgnoreAccepted,
}

impl InjectedBug {
    pub const ALL: &'static [InjectedBug] = &[
        InjectedBug::NoWriteBack,
        InjectedBug::MinorityQuorum,
        InjectedBug::AcceptOlderTag,
        InjectedBug::NoRecovery,
        InjectedBug::AckBeforePersist,
        InjectedBug::RecoveryOnePeerShort,
        InjectedBug::FastReadTsOnly,
        InjectedBug::ReuseTs,
        InjectedBug::MergeKeepsTag,
        InjectedBug::NoFreeze,
        InjectedBug::TransferFromOne,
        InjectedBug::InstallOnAccept,
        InjectedBug::IgnoreAccepted,
    ];
    pub fn name(self) -> &'static str {
        match self {
            InjectedBug::NoWriteBack => "abd-no-write-back",
            InjectedBug::MinorityQuorum => "abd-minority-quorum",
            InjectedBug::AcceptOlderTag => "abd-accept-older-tag",
            InjectedBug::NoRecovery => "abd-no-recovery",
            InjectedBug::AckBeforePersist => "abd-ack-before-persist",
            InjectedBug::RecoveryOnePeerShort => "abd-recovery-one-peer-short",
            InjectedBug::FastReadTsOnly => "abd-fast-read-ts-only",
            InjectedBug::ReuseTs => "abd-reuse-ts",
            InjectedBug::MergeKeepsTag => "abd-merge-keeps-tag",
            InjectedBug::NoFreeze => "abd-reconfig-no-freeze",
            InjectedBug::TransferFromOne => "abd-reconfig-transfer-from-one",
            InjectedBug::InstallOnAccept => "abd-reconfig-serve-before-transfer",
            InjectedBug::IgnoreAccepted => "abd-reconfig-ignore-accepted",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            InjectedBug::NoWriteBack => "get skips the write-back phase",
            InjectedBug::MinorityQuorum => "quorum of floor(N/2) instead of floor(N/2)+1",
            InjectedBug::AcceptOlderTag => "a replica overwrites its value with an older tag",
            InjectedBug::NoRecovery => {
                "a replica restarted without its data answers at once (shows with --durability memory)"
            }
            InjectedBug::AckBeforePersist => {
                "a replica acks a store before persisting it (shows with crashes inside handlers, durable)"
            }
            InjectedBug::RecoveryOnePeerShort => {
                "a recovering replica syncs from one peer fewer than it needs (shows with --durability memory)"
            }
            InjectedBug::FastReadTsOnly => {
                "the fast read compares only the timestamps of the quorum's tags, not the writers"
            }
            InjectedBug::ReuseTs => {
                "a put's ts ignores the last one its coordinator issued: one tag, two values"
            }
            InjectedBug::MergeKeepsTag => {
                "a recovering replica merging an older register keeps its tag, takes the value (--durability memory)"
            }
            InjectedBug::NoFreeze => {
                "reconfig: a replica that promised the next epoch still serves its own (--faults all,reconfig)"
            }
            InjectedBug::TransferFromOne => {
                "reconfig: the state transfer takes one old member's store, not a quorum's (--faults all,reconfig)"
            }
            InjectedBug::InstallOnAccept => {
                "reconfig: a new member serves as soon as it accepts, before the state transfer (--faults all,reconfig)"
            }
            InjectedBug::IgnoreAccepted => {
                "reconfig: a proposer ignores members accepted earlier: two configurations for one epoch (--faults all,reconfig)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::abd::{AbdNode, CoordinatorConfig, Msg, Replica};
    use crate::protocol::contract::{Command, Protocol};
    use crate::types::{Peer, Tag};

    #[test]
    fn quorums_are_majorities_and_the_minority_bug_shrinks_them() {
        for (n, q, bad) in [(1, 1, 1), (3, 2, 1), (4, 3, 2), (5, 3, 2)] {
            assert_eq!(coord(n).quorum(), q);
            let c = coord(n).with_bug(Some(InjectedBug::MinorityQuorum));
            assert_eq!(c.quorum(), bad, "N={n}");
        }
    }

    #[test]
    fn injected_bugs_have_distinct_names_and_descriptions() {
        crate::protocol::test_harness::check_injected_bugs::<InjectedBug>("abd-");
    }

    #[test]
    fn bug_ack_before_persist_acks_first() {
        let store = Msg::Store {
            op: 1,
            key: key(),
            tag: Tag { ts: 1, writer: 1 },
            value: None,
            epoch: 0,
        };
        let mut r = Replica::new(true).with_bug(Some(InjectedBug::AckBeforePersist));
        let mut out = O::new();
        r.handle(Peer::Node(1), store, &mut out);
        let cmds = out.commands();
        assert!(matches!(cmds[0], Command::Send { .. }));
        assert!(matches!(cmds[1], Command::Persist(_)));
        assert_eq!(cmds.len(), 2);
    }

    #[test]
    fn bug_recovery_one_peer_short_stops_a_peer_early() {
        // N = 5 needs 3 peers (see the test above); the bug takes 2.
        let mut n = AbdNode::new(1, vec![1, 2, 3, 4, 5], false, CoordinatorConfig::default())
            .with_bug(Some(InjectedBug::RecoveryOnePeerShort))
            .recovering();
        let mut out = O::new();
        for peer in [2, 3] {
            assert!(n.is_recovering());
            let reply = Msg::SyncReply { entries: vec![] };
            n.on_msg(T0, Peer::Node(peer), reply, &mut out);
        }
        assert!(!n.is_recovering());
    }

    /// Two writers can issue one ts for two values; only the full tags agree.
    #[test]
    fn fast_read_needs_equal_tags_not_just_equal_timestamps() {
        for (bug, writes_back) in [(None, true), (Some(InjectedBug::FastReadTsOnly), false)] {
            let mut c = coord(3).with_bug(bug);
            let mut out = started_get(&mut c, 1);
            qreply(&mut c, 1, 4, 1, Some("a"), &mut out);
            qreply(&mut c, 2, 4, 2, Some("b"), &mut out);
            let cmds = out.drain().collect::<Vec<_>>();
            let stored = cmds.iter().any(|c| matches!(c, Command::Send { .. }));
            let replied = cmds.iter().any(|c| matches!(c, Command::Reply { .. }));
            assert_eq!((stored, replied), (writes_back, !writes_back), "{bug:?}");
        }
    }
}
