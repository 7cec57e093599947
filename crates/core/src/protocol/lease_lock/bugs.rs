//! Deliberate bugs, a testing aid for the simulator and the checker.

use crate::protocol::contract::InjectedBugs;

/// Deliberate bugs for the simulator's self-test (`quorumkv sim
/// --inject-bug`), each a plausible mistake. Never enabled otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// A replica grants a LOCK_REQ over another holder's running lease (it
    /// checks that a lease runs, not whose it is).
    GrantWhileHeld,
    /// Quorums of ⌊N/2⌋ instead of ⌊N/2⌋+1: two lock quorums may not meet.
    MinorityQuorum,
    /// A failed lock round keeps the grants it got (no UNLOCK): they block
    /// every other coordinator until their leases run out.
    NoUnlockAfterFailure,
    /// A put with a WRITE_DENIED is answered as a definite failure, though
    /// the replicas that acknowledged hold the value.
    DeniedWriteIsFailure,
    /// A coordinator ignores a replica going down: an operation holding its
    /// lock waits for its reply until the op timeout (the former rule; a
    /// stall of one op timeout after a replica is killed, not a safety bug).
    WaitForDownReplica,
    /// Membership change: a replica that promised the next epoch still
    /// serves its own (the old configuration's quorum forgotten too early).
    ReconfigNoFreeze,
    /// Membership change: the state transfer takes one old member's store,
    /// not a quorum's.
    ReconfigTransferFromOne,
    /// Membership change: a new member serves as soon as it accepts,
    /// before the state transfer.
    ReconfigServeBeforeTransfer,
    /// Membership change: a proposer decides its own members even when a
    /// promise reports members accepted earlier.
    ReconfigIgnoreAccepted,
}

impl Bug {
    pub const ALL: &'static [Bug] = &[
        Bug::GrantWhileHeld,
        Bug::MinorityQuorum,
        Bug::NoUnlockAfterFailure,
        Bug::DeniedWriteIsFailure,
        Bug::WaitForDownReplica,
        Bug::ReconfigNoFreeze,
        Bug::ReconfigTransferFromOne,
        Bug::ReconfigServeBeforeTransfer,
        Bug::ReconfigIgnoreAccepted,
    ];
}

impl InjectedBugs for Bug {
    fn all() -> &'static [Self] {
        Bug::ALL
    }
    fn name(self) -> &'static str {
        match self {
            Bug::GrantWhileHeld => "lease-lock-grant-while-held",
            Bug::MinorityQuorum => "lease-lock-minority-quorum",
            Bug::NoUnlockAfterFailure => "lease-lock-no-unlock-after-failure",
            Bug::DeniedWriteIsFailure => "lease-lock-denied-write-is-failure",
            Bug::WaitForDownReplica => "lease-lock-wait-for-down-replica",
            Bug::ReconfigNoFreeze => "lease-lock-reconfig-no-freeze",
            Bug::ReconfigTransferFromOne => "lease-lock-reconfig-transfer-from-one",
            Bug::ReconfigServeBeforeTransfer => "lease-lock-reconfig-serve-before-transfer",
            Bug::ReconfigIgnoreAccepted => "lease-lock-reconfig-ignore-accepted",
        }
    }
    fn about(self) -> &'static str {
        match self {
            Bug::GrantWhileHeld => "a replica grants a lock while another holder's lease runs",
            Bug::MinorityQuorum => "lock quorums of floor(N/2) instead of floor(N/2)+1",
            Bug::NoUnlockAfterFailure => {
                "a failed lock round keeps its grants until they expire (a stall, not a safety bug)"
            }
            Bug::DeniedWriteIsFailure => {
                "a put with a WRITE_DENIED reports a definite failure (shows with a short lease)"
            }
            Bug::WaitForDownReplica => {
                "ignore a replica going down: ops holding its lock wait for the op timeout (a stall)"
            }
            Bug::ReconfigNoFreeze => {
                "reconfig: a replica that promised the next epoch still serves its own (--faults all,reconfig)"
            }
            Bug::ReconfigTransferFromOne => {
                "reconfig: the state transfer takes one old member's store, not a quorum's (--faults all,reconfig)"
            }
            Bug::ReconfigServeBeforeTransfer => {
                "reconfig: a new member serves as soon as it accepts, before the state transfer (--faults all,reconfig)"
            }
            Bug::ReconfigIgnoreAccepted => {
                "reconfig: a proposer ignores members accepted earlier: two configurations for one epoch (--faults all,reconfig)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lease_lock::testing::*;
    use crate::protocol::lease_lock::{LeaseOptions, LockRetry, Msg, Replica};
    use crate::protocol::test_harness::check_injected_bugs;
    use crate::types::{OpError, Peer, Response, Tag, Time};
    use std::time::Duration;

    fn with(bug: Bug, n: u32) -> crate::protocol::lease_lock::Coordinator {
        coord(n).with_bug(Some(bug))
    }

    #[test]
    fn grant_while_held_hands_a_running_lease_to_another() {
        for (bug, second) in [(None, false), (Some(Bug::GrantWhileHeld), true)] {
            let mut r = Replica::new(Duration::from_secs(1), false).with_bug(bug);
            let mut out = O::new();
            r.handle(
                T0,
                Peer::Node(1),
                Msg::LockReq {
                    lock: lock(1, 1),
                    key: key(),
                    epoch: 0,
                },
                &mut out,
            );
            r.handle(
                T0,
                Peer::Node(2),
                Msg::LockReq {
                    lock: lock(2, 1),
                    key: key(),
                    epoch: 0,
                },
                &mut out,
            );
            let s = sends(&mut out);
            assert!(matches!(s[0].1, Msg::LockGranted { .. }));
            assert_eq!(matches!(s[1].1, Msg::LockGranted { .. }), second, "{bug:?}");
            let holder = r.holder(b"k", T0).unwrap();
            assert_eq!(holder, if second { lock(2, 1) } else { lock(1, 1) });
        }
    }

    #[test]
    fn minority_quorum_shrinks_every_quorum() {
        for (n, q, bad) in [(1, 1, 1), (3, 2, 1), (4, 3, 2), (5, 3, 2)] {
            assert_eq!(coord(n).quorum(), q);
            assert_eq!(with(Bug::MinorityQuorum, n).quorum(), bad, "N={n}");
        }
        // One grant of three is enough to read: quorums need not meet.
        let mut c = with(Bug::MinorityQuorum, 3);
        let mut out = O::new();
        let l = locked(&mut c, get(), &[3], &mut out);
        let s = sends(&mut out);
        assert!(matches!(&s[..], [(Peer::Node(3), Msg::Read { lock, .. })] if *lock == l));
    }

    #[test]
    fn no_unlock_after_failure_keeps_the_grants_of_a_failed_round() {
        for (bug, unlocks) in [(None, 1), (Some(Bug::NoUnlockAfterFailure), 0)] {
            let mut c = coord(3).with_bug(bug);
            let mut out = O::new();
            let l = locked(&mut c, put(b"v"), &[1], &mut out);
            for n in [2, 3] {
                c.handle(T0, Peer::Node(n), Msg::LockDenied { lock: l }, &mut out);
            }
            let s = sends(&mut out);
            assert_eq!(
                s.iter()
                    .filter(|(_, m)| matches!(m, Msg::Unlock { .. }))
                    .count(),
                unlocks
            );
            assert_eq!(c.refused, 1);
        }
    }

    #[test]
    fn denied_write_is_failure_reports_a_definite_failure() {
        for (bug, definite) in [(None, false), (Some(Bug::DeniedWriteIsFailure), true)] {
            let mut c = coord(1).with_bug(bug);
            let mut out = O::new();
            let l = locked(&mut c, put(b"v"), &[1], &mut out);
            let reply = Msg::ReadReply {
                lock: l,
                tag: Tag::ZERO,
                value: None,
            };
            c.handle(T0, Peer::Node(1), reply, &mut out);
            c.handle(T0, Peer::Node(1), Msg::WriteDenied { lock: l }, &mut out);
            let r = replies(&mut out);
            let [Response::Failed(e)] = &r[..] else {
                panic!("{r:?}")
            };
            assert_eq!(e.is_definite(), definite, "{bug:?}: {e}");
        }
    }

    /// In a network: without UNLOCK a failed round's grant stays on its
    /// replica, blocking every other coordinator there, until the lease ends.
    #[test]
    fn no_unlock_after_failure_leaves_a_lock_for_a_lease() {
        for (bug, left) in [(None, vec![]), (Some(Bug::NoUnlockAfterFailure), vec![3])] {
            let no_retry = LeaseOptions {
                lock_retry: LockRetry::None,
                ..LeaseOptions::default()
            };
            let mut net = Net::new(3, no_retry);
            let node = net.nodes.remove(&3).unwrap().with_bug(bug);
            net.nodes.insert(3, node);
            net.add_client(9);
            // Client 9 locks replicas 1 and 2 first; server 3's own put
            // gets only replica 3's grant and fails.
            net.request(Peer::Conn(9), 1, get());
            net.deliver_first(|e| e.to == Peer::Node(1));
            net.deliver_first(|e| e.to == Peer::Node(2));
            net.request(Peer::Node(3), 2, put(b"x"));
            net.deliver_first(|e| e.from == Peer::Node(3) && e.to == Peer::Node(3));
            net.run();
            assert_eq!(net.answer(1), Some(&Response::Value(None)));
            assert!(matches!(
                net.answer(2),
                Some(Response::Failed(OpError::Refused { .. }))
            ));
            assert_eq!(net.locked_at(), left, "{bug:?}");
            net.advance_to(Time(2_000_000));
            assert!(net.locked_at().is_empty());
        }
    }

    #[test]
    fn bugs_have_distinct_prefixed_names_and_descriptions() {
        check_injected_bugs::<Bug>("lease-lock-");
        assert_eq!(
            Bug::find("lease-lock-minority-quorum"),
            Some(Bug::MinorityQuorum)
        );
    }
}
