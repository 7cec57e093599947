//! ABD's use of membership change (`protocol::reconfig` has the
//! protocol, shared with lease-lock): its store, its injected bugs and
//! where it persists, and the tests of the change's three phases on ABD.

use super::bugs::InjectedBug;
use super::msg::{Entries, Msg, Timer};
use super::replica::Replica;
use crate::protocol::contract::Out;
use crate::protocol::reconfig::{ChangeBug, Registers};

/// Where ABD persists its configuration and its Paxos state.
pub const KEYS: [&str; 2] = ["abd.config", "abd.paxos"];

impl Registers<Msg, Timer> for Replica {
    fn snapshot(&self) -> Entries {
        Replica::snapshot(self)
    }
    fn merge(&mut self, entries: Entries, out: &mut Out<Msg, Timer>) {
        Replica::merge(self, entries, out)
    }
}

/// The membership-change bug an ABD injected bug is, if any.
pub fn change_bug(bug: Option<InjectedBug>) -> Option<ChangeBug> {
    match bug? {
        InjectedBug::NoFreeze => Some(ChangeBug::NoFreeze),
        InjectedBug::TransferFromOne => Some(ChangeBug::TransferFromOne),
        InjectedBug::InstallOnAccept => Some(ChangeBug::InstallOnAccept),
        InjectedBug::IgnoreAccepted => Some(ChangeBug::IgnoreAccepted),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::contract::Command;
    use crate::protocol::contract::Record;
    use crate::protocol::reconfig::{Admit, Ballot, Config, Epochs, Outcome, Proposer};
    use crate::types::{NodeId, Peer, Tag, Time};
    use bytes::Bytes;
    use std::time::Duration;

    fn cfg(epoch: u64, m: &[NodeId]) -> Config {
        Config::new(epoch, m.to_vec())
    }
    const TIMES: (Time, Duration, Duration) = (
        Time::ZERO,
        Duration::from_millis(10),
        Duration::from_secs(1),
    );
    fn ballot(round: u64, node: NodeId) -> Ballot {
        Ballot { round, node }
    }

    #[test]
    fn ballots_and_epochs_never_wrap() {
        let last = ballot(u64::MAX, 1);
        assert_eq!(last.above(2), None);
        assert_eq!(ballot(4, 1).above(2), Some(ballot(5, 2)));
        let mut out = O::new();
        let old = cfg(u64::MAX, &[1, 2, 3]);
        assert!(
            Proposer::start(1, (old, vec![1, 2]), Ballot::ZERO, TIMES, None, &mut out).is_none()
        );
        let old = cfg(3, &[1, 2, 3]);
        assert!(Proposer::start(1, (old, vec![1, 2]), last, TIMES, None, &mut out).is_none());
        assert!(out.is_empty());
        // An acceptor at the last epoch decides no next one.
        let mut e = Epochs::new(1, vec![1, 2], cfg(u64::MAX, &[1, 2]), false, KEYS);
        let r = Replica::new(false);
        e.on_prepare(Time::ZERO, 2, (u64::MAX, ballot(1, 2)), &r, &mut out);
        assert!(!e.frozen());
    }

    /// The three phases against acceptors 2 and 3 of {1,2,3}: a promise
    /// freezes its replica, the promise quorum's stores are merged by
    /// highest tag, and the decided configuration goes to the old and new
    /// members and the proposer; it is done on a quorum of the new.
    #[test]
    fn a_change_prepares_accepts_and_installs() {
        let old = cfg(0, &[1, 2, 3]);
        let mut acc: Vec<(Epochs, Replica)> = (1..=3)
            .map(|i| {
                (
                    Epochs::new(i, vec![1, 2, 3, 4, 5], old.clone(), true, KEYS),
                    Replica::new(true),
                )
            })
            .collect();
        let mut out = O::new();
        let tag = |ts| Tag { ts, writer: 1 };
        let v = |s: &'static str| Some(Bytes::from_static(s.as_bytes()));
        acc[1].1.merge(vec![(key(), tag(2), v("new"))], &mut out);
        acc[2].1.merge(vec![(key(), tag(1), v("old"))], &mut out);
        out.drain();
        let mut p = Proposer::start(
            5,
            (old.clone(), vec![2, 3, 4]),
            Ballot::ZERO,
            TIMES,
            None,
            &mut out,
        )
        .unwrap();
        assert_eq!(p.epoch(), 1);
        let sent = sends(&mut out);
        let b = ballot(1, 5);
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|(_, m)| *m
            == Msg::Prepare {
                epoch: 1,
                ballot: b
            }));
        for i in [1usize, 2] {
            let (e, r) = &mut acc[i];
            assert!(e.admit(Time::ZERO, 0, &mut out) == Admit::Serve, "serving");
            e.on_prepare(Time::ZERO, 5, (1, b), r, &mut out);
            assert!(e.frozen(), "a promise freezes");
            assert!(e.admit(Time::ZERO, 0, &mut out) == Admit::Hold);
            assert_eq!(e.held_back, 1);
            let cmds = out.commands();
            assert!(
                matches!(cmds[0], Command::Persist(Record::Meta { .. })),
                "{cmds:?}"
            );
            let Some((
                _,
                Msg::Promise {
                    accepted, entries, ..
                },
            )) = sends(&mut out).pop()
            else {
                panic!("no promise")
            };
            assert_eq!(accepted, None);
            let from = i as NodeId + 1;
            p.on_promise(
                Time::ZERO,
                from,
                (1, b),
                accepted,
                entries.clone(),
                &mut out,
            );
            // A duplicate or a stranger's promise counts once / not at all.
            p.on_promise(Time::ZERO, from, (1, b), None, entries.clone(), &mut out);
            p.on_promise(Time::ZERO, 4, (1, b), None, entries, &mut out);
        }
        let accepts = sends(&mut out);
        assert_eq!(accepts.len(), 3, "{accepts:?}");
        let m = vec![2, 3, 4];
        assert!(accepts.iter().all(|(_, x)| *x
            == Msg::Accept {
                epoch: 1,
                ballot: b,
                members: m.clone()
            }));
        for (i, e) in [(0usize, 1), (1, 2)] {
            let (acceptor, r) = &mut acc[i];
            assert_eq!(
                acceptor.on_accept(Time::ZERO, 5, (1, b), m.clone(), r, &mut out),
                None
            );
            assert_eq!(acceptor.accepted(), Some(&m[..]));
            assert_eq!(
                sends(&mut out),
                vec![(
                    Peer::Node(5),
                    Msg::Accepted {
                        epoch: 1,
                        ballot: b
                    }
                )]
            );
            p.on_accepted(Time::ZERO, e, (1, b), &mut out);
        }
        assert_eq!(p.installing(), Some(1));
        let installs = sends(&mut out);
        let to: Vec<Peer> = installs.iter().map(|(t, _)| *t).collect();
        let want: Vec<Peer> = [1, 2, 3, 4, 5].into_iter().map(Peer::Node).collect();
        assert_eq!(to, want, "old and new members and the proposer");
        let Msg::Install { config, entries } = &installs[0].1 else {
            panic!()
        };
        assert_eq!(config, &cfg(1, &[2, 3, 4]));
        assert_eq!(
            entries,
            &vec![(key(), tag(2), v("new"))],
            "the quorum's highest"
        );
        assert_eq!(p.on_installed(2, 1), Outcome::Going);
        assert_eq!(p.on_installed(1, 1), Outcome::Going, "not a new member");
        assert_eq!(p.on_installed(2, 1), Outcome::Going, "a duplicate");
        assert_eq!(p.on_installed(3, 0), Outcome::Going, "another epoch");
        assert_eq!(p.on_installed(3, 1), Outcome::Done(cfg(1, &[2, 3, 4])));
        // Replica 1 installs it, persists it, and serves nothing any more:
        // an old epoch's query is told where the cluster went.
        let (e, r) = &mut acc[0];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert!(
            !e.install(config.clone(), entries.clone(), r, &mut out),
            "once"
        );
        assert!(!e.frozen());
        assert!(
            e.admit(Time::ZERO, 1, &mut out) == Admit::Hold,
            "not a member"
        );
        assert_eq!(
            e.admit(Time::ZERO, 0, &mut out),
            Admit::Moved(cfg(1, &[2, 3, 4]))
        );
        assert_eq!(e.moved, 1);
        // Replica 2 serves epoch 1 with the merged state.
        let (e, r) = &mut acc[1];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert!(e.admit(Time::ZERO, 1, &mut out) == Admit::Serve);
        assert_eq!(r.get(b"k").unwrap().0, tag(2));
        let (e, r) = &mut acc[2];
        assert!(e.install(config.clone(), entries.clone(), r, &mut out));
        assert_eq!(r.get(b"k").unwrap().1, v("new"), "older value replaced");
    }

    /// Paxos: a lower or equal ballot is refused; a later proposer with
    /// another target decides the value accepted earlier, not its own; a
    /// refused proposer backs off, then prepares above the promise; it
    /// gives up at its deadline.
    #[test]
    fn an_accepted_value_wins_over_a_later_proposal() {
        let old = cfg(0, &[1, 2, 3]);
        let mut e = Epochs::new(1, vec![1, 2, 3, 4], old.clone(), false, KEYS);
        let r = Replica::new(false);
        let mut out = O::new();
        let b1 = ballot(1, 2);
        e.on_prepare(Time::ZERO, 2, (1, b1), &r, &mut out);
        e.on_accept(Time::ZERO, 2, (1, b1), vec![1, 2], &r, &mut out);
        out.drain();
        // The same prepare again (its promise lost): promised again, with
        // the value accepted since (seed 73 of a client-mode sweep stalled
        // when a retransmitted prepare was refused).
        e.on_prepare(Time::ZERO, 2, (1, b1), &r, &mut out);
        let again = sends(&mut out);
        assert!(
            matches!(&again[0].1, Msg::Promise { accepted: Some((b, _)), .. } if *b == b1),
            "{again:?}"
        );
        e.on_prepare(Time::ZERO, 3, (1, ballot(1, 1)), &r, &mut out);
        e.on_accept(Time::ZERO, 3, (1, ballot(0, 9)), vec![3], &r, &mut out);
        let refusals = sends(&mut out);
        assert_eq!(refusals.len(), 2);
        for (to, m) in refusals {
            assert_eq!(to, Peer::Node(3));
            assert!(
                matches!(m, Msg::Refuse { promised, .. } if promised == b1),
                "{m:?}"
            );
        }
        assert_eq!(e.accepted(), Some(&[1, 2][..]), "unchanged");
        let mut p = Proposer::start(3, (old, vec![3, 4]), b1, TIMES, None, &mut out).unwrap();
        out.drain();
        let b2 = ballot(2, 3);
        e.on_prepare(Time::ZERO, 3, (1, b2), &r, &mut out);
        let Msg::Promise {
            accepted, entries, ..
        } = sends(&mut out).remove(0).1
        else {
            panic!()
        };
        assert_eq!(accepted, Some((b1, vec![1, 2])));
        p.on_promise(
            Time::ZERO,
            2,
            (1, b2),
            Some((ballot(0, 7), vec![4])),
            vec![],
            &mut out,
        );
        p.on_promise(Time::ZERO, 1, (1, b2), accepted, entries, &mut out);
        let Msg::Accept { members, .. } = &sends(&mut out)[0].1 else {
            panic!()
        };
        assert_eq!(members, &vec![1, 2], "the highest ballot's value");
        // A stale refusal (not ours, or not higher) changes nothing.
        assert_eq!(
            p.on_refuse(Time::ZERO, (1, b1), ballot(9, 1)),
            Outcome::Going
        );
        assert_eq!(p.on_refuse(Time::ZERO, (1, b2), b1), Outcome::Going);
        assert_eq!(p.installing(), None);
        let b9 = ballot(9, 1);
        assert_eq!(p.on_refuse(Time::ZERO, (1, b2), b9), Outcome::Going);
        assert_eq!(p.tick(Time::from_micros(1), &mut out), Outcome::Going);
        assert!(out.is_empty(), "backing off");
        p.tick(Time::from_micros(100_000), &mut out);
        let again = sends(&mut out);
        assert_eq!(again.len(), 3);
        assert_eq!(
            again[0].1,
            Msg::Prepare {
                epoch: 1,
                ballot: ballot(10, 3)
            }
        );
        // Retransmitted to the silent ones after a retry interval.
        p.tick(Time::from_micros(100_001), &mut out);
        assert!(out.is_empty(), "not before the retry interval");
        p.tick(Time::from_micros(200_000), &mut out);
        assert_eq!(sends(&mut out).len(), 3);
        let gave = p.tick(Time::from_micros(2_000_000), &mut out);
        assert!(matches!(gave, Outcome::GaveUp(_)), "{gave:?}");
        let last = ballot(u64::MAX, 1);
        let gave = p.on_refuse(Time::ZERO, (1, ballot(10, 3)), last);
        assert!(matches!(gave, Outcome::GaveUp(_)), "{gave:?}");
    }

    /// A replica behind asks every other server (once per retry); one
    /// that installed that epoch or a later one answers with its state;
    /// the configuration and the promise survive a restart.
    #[test]
    fn a_replica_behind_catches_up_and_records_survive_a_restart() {
        let mut e = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), false, KEYS);
        let mut out = O::new();
        assert!(e.admit(Time::ZERO, 3, &mut out) == Admit::Hold);
        let asked = sends(&mut out);
        let to: Vec<Peer> = asked.iter().map(|(t, _)| *t).collect();
        assert_eq!(to, vec![Peer::Node(2), Peer::Node(3)]);
        assert!(matches!(asked[0].1, Msg::InstallRequest { epoch: 3 }));
        e.admit(Time::ZERO, 3, &mut out);
        assert!(out.is_empty(), "once per retry");
        e.ask(Time::from_micros(100_000), 3, &mut out);
        assert_eq!(sends(&mut out).len(), 2, "again after a retry interval");
        let ahead = Epochs::new(2, vec![1, 2, 3], cfg(3, &[1, 2]), false, KEYS);
        let r = Replica::new(false);
        ahead.on_install_request(1, 3, &r, &mut out);
        assert!(matches!(
            sends(&mut out)[0],
            (Peer::Node(1), Msg::Install { .. })
        ));
        ahead.on_install_request(1, 4, &r, &mut out);
        assert!(out.is_empty(), "not that far");
        // A Paxos message of an epoch installed already: told with Install.
        let mut ahead = ahead;
        ahead.on_prepare(Time::ZERO, 1, (2, ballot(1, 1)), &r, &mut out);
        assert!(matches!(
            sends(&mut out)[0],
            (Peer::Node(1), Msg::Install { .. })
        ));

        // A configuration naming a server the cluster does not have (or
        // none) is neither accepted nor installed.
        let mut e = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), false, KEYS);
        let mut r0 = Replica::new(false);
        assert_eq!(
            e.on_accept(Time::ZERO, 2, (1, ballot(1, 2)), vec![1, 70], &r0, &mut out),
            None
        );
        assert!(out.is_empty() && e.accepted().is_none());
        assert!(!e.install(cfg(1, &[2, 99]), vec![], &mut r0, &mut out));
        assert!(!e.install(cfg(1, &[]), vec![], &mut r0, &mut out));
        assert_eq!(e.installed, cfg(0, &[1, 2, 3]));

        let mut d = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), true, KEYS);
        let mut rr = Replica::new(true);
        assert!(d.install(cfg(2, &[1, 3]), vec![], &mut rr, &mut out));
        d.on_prepare(Time::ZERO, 3, (3, ballot(4, 3)), &rr, &mut out);
        let mut back = Epochs::new(1, vec![1, 2, 3], cfg(0, &[1, 2, 3]), true, KEYS);
        for c in out.commands() {
            if let Command::Persist(Record::Meta { key, value }) = c {
                back.restore(key, value);
            }
        }
        assert_eq!(back.installed, cfg(2, &[1, 3]));
        assert!(back.frozen() && back.frozen_since().is_none());
        assert_eq!(back.promised(), ballot(4, 3));
        back.on_start(Time::from_micros(5));
        assert_eq!(back.frozen_since(), Some(Time::from_micros(5)));
        back.touch(Time::from_micros(9));
        assert_eq!(back.frozen_since(), Some(Time::from_micros(9)));
    }
}
