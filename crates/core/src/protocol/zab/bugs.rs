//! Deliberate bugs, a testing aid for the simulator and the checker.

use crate::protocol::contract::InjectedBugs;

/// Deliberate bugs for the simulator's self-test (`quorumkv sim --bug`).
/// Never enabled otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedBug {
    /// The leader commits (and delivers) a proposal as soon as it logged it
    /// itself, without a quorum's ACKs: the crash-tolerance invariant
    /// (seed 003 lines 683-691) broken.
    DeliverBeforeQuorum,
    /// The new epoch is the highest promised one, not one above it, and a
    /// follower accepts a NEWEPOCH equal to the epoch it promised another
    /// leader: one epoch, two leaders, two different proposals with the
    /// same zxid (which log matching then takes for the same).
    ReuseEpoch,
    /// Votes compare server ids only, and the new leader does not check
    /// that its history is the newest of its quorum: a leader with a stale
    /// log, whose synchronisation erases committed proposals.
    StaleLogLeader,
    /// A follower ignores TRUNC: a divergent suffix from an old epoch
    /// stays in its log after synchronisation, and it takes the new
    /// leader's proposals at those indexes for ones it holds (ACKs them,
    /// keeps its own): it delivers the old suffix.
    SkipTrunc,
    /// A server that lost its state (memory mode) joins the first leader
    /// that calls, without learning the epoch its peers promised: it can
    /// promise (and ACKNEWLEADER) an epoch below the one its previous life
    /// promised, completing a stale candidate's quorum whose history lacks
    /// proposals the previous life ACKed (the code before `recovery.rs`).
    RecoverWithoutEpoch,
    /// Closing a session (by its client or by expiry) deletes none of its
    /// ephemerals and leaves it open (`znode_sm.rs`): seen only by the
    /// znode workload (`quorumkv sim --znode`).
    ZnodeKeepEphemerals,
    /// Each parent's sequential counter is treated as a leader's soft
    /// state: every server starts it again at the parent's number of
    /// children when a new leadership begins (`znode::Tree::
    /// restart_seq_counters`), so a name a since-deleted child held is
    /// handed out again (or one still held is refused): seen only by the
    /// znode workload.
    ZnodeSeqReuse,
    /// A znode write fires the watches on its path at the server it
    /// arrives at, as it arrives, instead of when the transaction applies
    /// there: the event can reach a client before the change is committed,
    /// and a read after the event still sees the old node (seed 001 §II.C:
    /// an event announces a change that happened). Seen only by the znode
    /// workload.
    ZnodeWatchEarly,
    /// A follower ACKs a proposal as it logs it, before the driver reports
    /// the record durable (`Msg::Logged`): a crash then loses an entry the
    /// leader counted in a commit quorum.
    AckBeforePersist,
    /// The leader never expires a silent znode session (`sessions.rs`):
    /// a vanished client's session and its ephemerals stay for ever.
    /// Seen only by the znode workload.
    ZnodeSessionNeverExpires,
    /// The leader hands out a read index at once, without the PING round
    /// that confirms a quorum still follows it (`reads.rs`): a leader
    /// already replaced serves reads that miss the new leader's writes.
    ReadIndexUnconfirmed,
    /// Closing a session (by its client or by expiry) closes it but deletes
    /// none of its ephemerals: they stay, owned by a session that no longer
    /// exists (`znode_sm.rs`). Seen only by the znode workload.
    ZnodeOrphanEphemerals,
    /// The leader deletes a childless TTL node as soon as it looks
    /// (`sessions.rs`), without waiting for its TTL. Seen only by the
    /// znode workload (invariant 9, `invariants.rs`).
    ZnodeTtlEarly,
    /// The leader commits with a quorum of the committed configuration
    /// alone while a reconfiguration is pending (`reconfig.rs`): the
    /// reconfiguration, and what follows it, commit without the new
    /// configuration's quorum holding them, and the new configuration can
    /// then elect a leader lacking committed entries, or none at all.
    /// Needs the simulator's `reconfig` fault.
    ZabReconfigOldQuorumOnly,
    /// A joining server (outside the committed configuration) counts in
    /// the leader's commit quorums as holding its whole log as soon as it
    /// is in the leader's follower table, before its ACKNEWLEADER said
    /// it holds the history (`reconfig.rs`). Needs the `reconfig` fault.
    ZabLearnerVotesBeforeSync,
    /// The leader synchronises a follower whose last index lies within its
    /// own log with a DIFF from that index, comparing indexes and not
    /// zxids (`leader.rs`, `sync_for`): a follower holding a divergent
    /// suffix of an older epoch keeps it, no TRUNC, and delivers it when
    /// the leader commits those indexes (invariant 2, `invariants.rs`).
    DiffFromFollowerLast,
    /// Asked for a reconfiguration while one is pending, the leader drops
    /// the pending configuration entry (and what followed it) from its
    /// own log and proposes the new one in its place, instead of refusing
    /// it (`reconfig.rs`, `try_reconfig`): two configurations with one
    /// zxid, which log matching takes for the same entry, so servers that
    /// logged the first keep it and commit it (invariant 7,
    /// `reconfig_invariants.rs`). Needs the `reconfig` fault.
    ZabReconfigReplacesPending,
}

impl InjectedBug {
    pub const ALL: &'static [InjectedBug] = &[
        InjectedBug::DeliverBeforeQuorum,
        InjectedBug::ReuseEpoch,
        InjectedBug::StaleLogLeader,
        InjectedBug::SkipTrunc,
        InjectedBug::RecoverWithoutEpoch,
        InjectedBug::ZnodeKeepEphemerals,
        InjectedBug::ZnodeSeqReuse,
        InjectedBug::ZnodeWatchEarly,
        InjectedBug::AckBeforePersist,
        InjectedBug::ZnodeSessionNeverExpires,
        InjectedBug::ReadIndexUnconfirmed,
        InjectedBug::ZnodeOrphanEphemerals,
        InjectedBug::ZnodeTtlEarly,
        InjectedBug::ZabReconfigOldQuorumOnly,
        InjectedBug::ZabLearnerVotesBeforeSync,
        InjectedBug::DiffFromFollowerLast,
        InjectedBug::ZabReconfigReplacesPending,
    ];
}

impl InjectedBugs for InjectedBug {
    fn all() -> &'static [Self] {
        InjectedBug::ALL
    }
    fn name(self) -> &'static str {
        match self {
            InjectedBug::DeliverBeforeQuorum => "zab-deliver-before-quorum",
            InjectedBug::ReuseEpoch => "zab-reuse-epoch",
            InjectedBug::StaleLogLeader => "zab-stale-log-leader",
            InjectedBug::SkipTrunc => "zab-skip-trunc",
            InjectedBug::RecoverWithoutEpoch => "zab-recover-without-epoch",
            InjectedBug::ZnodeKeepEphemerals => "zab-znode-keep-ephemerals",
            InjectedBug::ZnodeSeqReuse => "zab-znode-seq-reuse",
            InjectedBug::ZnodeWatchEarly => "zab-znode-watch-early",
            InjectedBug::AckBeforePersist => "zab-ack-before-persist",
            InjectedBug::ZnodeSessionNeverExpires => "zab-session-never-expires",
            InjectedBug::ReadIndexUnconfirmed => "zab-read-index-unconfirmed",
            InjectedBug::ZnodeOrphanEphemerals => "zab-znode-orphan-ephemerals",
            InjectedBug::ZnodeTtlEarly => "zab-znode-ttl-early",
            InjectedBug::ZabReconfigOldQuorumOnly => "zab-reconfig-old-quorum-only",
            InjectedBug::ZabLearnerVotesBeforeSync => "zab-learner-votes-before-sync",
            InjectedBug::DiffFromFollowerLast => "zab-diff-from-follower-last",
            InjectedBug::ZabReconfigReplacesPending => "zab-reconfig-replaces-pending",
        }
    }
    fn about(self) -> &'static str {
        match self {
            InjectedBug::DeliverBeforeQuorum => {
                "commit a proposal once the leader logged it, before a quorum did"
            }
            InjectedBug::ReuseEpoch => {
                "new epoch = highest promised, promised twice: two leaders share an epoch"
            }
            InjectedBug::StaleLogLeader => {
                "elect by server id alone, no history check: a leader with a stale log"
            }
            InjectedBug::SkipTrunc => {
                "a follower ignores TRUNC, keeps a divergent suffix and delivers it"
            }
            InjectedBug::RecoverWithoutEpoch => {
                "a server that lost its state joins any leader, below the epoch it promised"
            }
            InjectedBug::ZnodeKeepEphemerals => {
                "closing a znode session keeps its ephemerals (use with --znode)"
            }
            InjectedBug::ZnodeSeqReuse => {
                "a new leadership restarts sequential counters at the child count (use with --znode)"
            }
            InjectedBug::ZnodeWatchEarly => {
                "a znode write fires watches where it arrives, before it commits (use with --znode)"
            }
            InjectedBug::AckBeforePersist => {
                "a follower ACKs a proposal before its log record is durable"
            }
            InjectedBug::ZnodeSessionNeverExpires => {
                "the leader never expires a silent znode session (use with --znode)"
            }
            InjectedBug::ReadIndexUnconfirmed => {
                "the leader hands out a read index without its quorum PING round"
            }
            InjectedBug::ZnodeOrphanEphemerals => {
                "closing a znode session leaves its ephemerals, owned by no session (use with --znode)"
            }
            InjectedBug::ZnodeTtlEarly => {
                "the leader deletes a TTL node before its TTL passed (use with --znode)"
            }
            InjectedBug::ZabReconfigOldQuorumOnly => {
                "commit a pending reconfiguration with the old configuration's quorum alone (use with --faults ...,reconfig)"
            }
            InjectedBug::ZabLearnerVotesBeforeSync => {
                "a joining server counts in commit quorums before it synced (use with --faults ...,reconfig)"
            }
            InjectedBug::DiffFromFollowerLast => {
                "sync a follower with a DIFF from its last index, no TRUNC of a divergent suffix"
            }
            InjectedBug::ZabReconfigReplacesPending => {
                "a new reconfiguration replaces the pending one at its index (use with --faults ...,reconfig)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_harness::check_injected_bugs;

    #[test]
    fn injected_bugs_have_distinct_prefixed_names_and_descriptions() {
        check_injected_bugs::<InjectedBug>("zab-");
        assert_eq!(
            InjectedBug::find("zab-skip-trunc"),
            Some(InjectedBug::SkipTrunc)
        );
    }
}
