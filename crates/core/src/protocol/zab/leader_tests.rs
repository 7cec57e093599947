//! Leader-side tests (`leader.rs`): the choice of the new epoch, when
//! NEWLEADER goes and what it carries, abdication, the ticks (SC2, the
//! announcement to servers outside the broadcast) and the counters.

use super::msg::{Msg, Summary, SyncData, Timer};
use super::node::{Config, Role, ZabNode};
use super::roles::Leading;
use super::testing::{at, get, hear, lone, put, sent, settled, value, Cluster, Cmds};
use crate::protocol::contract::{Command, LinkEvent, Out, Protocol, Record};
use crate::types::{ClientRef, NodeId, Peer, Response, Time};
use std::time::Duration;

fn leading(n: &ZabNode) -> &Leading {
    match &n.role {
        Role::Leading(l) => l,
        r => panic!("not leading: {r:?}"),
    }
}

fn info(accepted: u64, promised: NodeId, recovering: bool) -> Msg {
    Msg::FollowerInfo {
        accepted,
        promised,
        recovering,
    }
}

fn new_epochs(cmds: &Cmds) -> Vec<(NodeId, u64)> {
    (sent(cmds).into_iter())
        .filter_map(|(n, m)| match m {
            Msg::NewEpoch { epoch } => Some((n, epoch)),
            _ => None,
        })
        .collect()
}

fn new_leaders(cmds: &Cmds) -> Vec<(NodeId, SyncData)> {
    (sent(cmds).into_iter())
        .filter_map(|(n, m)| match m {
            Msg::NewLeader { sync, .. } => Some((n, sync)),
            _ => None,
        })
        .collect()
}

fn ack_epoch(epoch: u64, cur_epoch: u64, runs: Vec<(u64, u64, u64)>, recovering: bool) -> Msg {
    Msg::AckEpoch {
        epoch,
        cur_epoch,
        summary: Summary { base: 0, runs },
        recovering,
    }
}

fn tick(c: &mut Cluster, id: NodeId) -> Cmds {
    c.exec(id, |n, now, out| n.on_timer(now, Timer::Tick, out))
}

/// Discovery: the epoch is chosen once FOLLOWERINFO came from a quorum
/// (us included; a server that lost its state does not count), above
/// every epoch any of them promised and our own. Later and repeated
/// FOLLOWERINFO get that NEWEPOCH; one that promised it to another
/// candidate, or promised a newer epoch, makes us start over.
#[test]
fn discovery_chooses_an_epoch_above_every_promise() {
    let mut n = lone(3, 5, 2, &[]);
    n.lead(&mut Out::new());
    assert!(new_epochs(&hear(&mut n, 1, info(4, 1, false))).is_empty());
    let cmds = hear(&mut n, 2, info(9, 2, true));
    assert!(
        new_epochs(&cmds).is_empty(),
        "a recovering server counts in no quorum"
    );
    let cmds = hear(&mut n, 4, info(1, 4, false));
    assert_eq!(new_epochs(&cmds), vec![(1, 10), (2, 10), (4, 10)]);
    assert_eq!(n.epochs(), (10, 2));
    assert!(matches!(cmds[0], Command::Persist(Record::Meta { .. })));
    assert_eq!(leading(&n).epoch, 10);
    assert_eq!(
        new_epochs(&hear(&mut n, 5, info(3, 5, false))),
        vec![(5, 10)]
    );
    assert_eq!(
        new_epochs(&hear(&mut n, 5, info(3, 5, false))),
        vec![(5, 10)]
    );
    assert_eq!(
        new_epochs(&hear(&mut n, 1, info(10, 3, false))),
        vec![(1, 10)]
    );
    assert_eq!(n.role(), "leader");
    hear(&mut n, 1, info(10, 5, false));
    assert_eq!(n.role(), "looking", "epoch 10 promised to n5");
    let mut n = lone(3, 3, 2, &[]);
    n.lead(&mut Out::new());
    hear(&mut n, 1, info(1, 1, false));
    hear(&mut n, 2, info(4, 2, false));
    assert_eq!(n.role(), "looking", "n2 promised epoch 4 > 3");
    // Not leading: a FOLLOWERINFO is answered with whom we follow.
    let mut c = settled();
    let cmds = at(&mut c, 2, 1, info(1, 3, false));
    assert!(matches!(&sent(&cmds)[..], [(1, Msg::Notify { .. })]));
}

/// Synchronisation: once a quorum (us included, servers that lost their
/// state not counted) acknowledged the epoch, we take it as our current
/// epoch (persisted) and send each of them NEWLEADER (what its log
/// lacks); a later ACKEPOCH gets its NEWLEADER at once.
#[test]
fn newleader_goes_once_a_quorum_acknowledged_the_epoch() {
    let mut n = lone(3, 5, 2, &[1, 2]);
    n.lead(&mut Out::new());
    for f in [1, 2, 4, 5] {
        hear(&mut n, f, info(2, f, false));
    }
    assert_eq!(leading(&n).epoch, 3);
    let cmds = hear(
        &mut n,
        1,
        ack_epoch(3, 2, vec![(1, 1, 1), (2, 2, 2)], false),
    );
    assert!(new_leaders(&cmds).is_empty());
    let cmds = hear(&mut n, 2, ack_epoch(3, 0, vec![], true));
    assert!(
        new_leaders(&cmds).is_empty(),
        "a recovering server counts in no quorum"
    );
    let cmds = hear(&mut n, 4, ack_epoch(2, 1, vec![(1, 1, 1)], false));
    assert!(new_leaders(&cmds).is_empty(), "another epoch's ACKEPOCH");
    let cmds = hear(&mut n, 4, ack_epoch(3, 1, vec![(1, 1, 1)], false));
    assert_eq!(n.epochs(), (3, 3));
    let synced = new_leaders(&cmds);
    assert_eq!(
        synced.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
        vec![1, 2, 4]
    );
    let diff = |s: &SyncData| (s.snap.is_some(), s.trunc, s.entries.len());
    assert_eq!(diff(&synced[0].1), (false, None, 0), "n1 has it all");
    assert_eq!(diff(&synced[1].1), (false, None, 2), "n2 has nothing");
    assert_eq!(diff(&synced[2].1), (false, None, 1), "n4 lacks entry 2");
    assert_eq!((n.counters.sync_diff, n.counters.sync_trunc), (3, 0));
    let cmds = hear(&mut n, 5, ack_epoch(3, 1, vec![(1, 1, 3)], false));
    let late = new_leaders(&cmds);
    assert_eq!(late.len(), 1);
    assert_eq!(diff(&late[0].1), (false, Some(2), 1), "TRUNC from 2");
    assert_eq!(n.counters.sync_trunc, 1);
    assert!(!leading(&n).established);
}

/// A candidate whose history is older than one in its ACKEPOCH quorum
/// (current epoch first, then the last zxid) gives up: the leader's
/// history must hold every committed proposal. An equal one is fine, and
/// so is an empty one from a server that lost its state.
#[test]
fn a_candidate_with_an_older_history_abdicates() {
    for (cur, runs, recovering, abdicates) in [
        (1, vec![(1, 1, 2)], false, true),
        (2, vec![], false, true),
        (1, vec![(1, 1, 1)], false, false),
        (1, vec![], false, false),
        (0, vec![(0, 1, 5)], false, false),
        (3, vec![(3, 1, 3)], true, false),
    ] {
        let mut n = lone(3, 3, 1, &[1]);
        n.lead(&mut Out::new());
        hear(&mut n, 1, info(1, 1, false));
        let cmds = hear(&mut n, 1, ack_epoch(2, cur, runs.clone(), recovering));
        let what = format!("{cur} {runs:?} {recovering}");
        if abdicates {
            assert_eq!(n.role(), "looking", "{what}");
            assert_eq!(n.counters.step_downs, 1);
        } else {
            assert_eq!(n.role(), "leader", "{what}");
            let to = if recovering { 0 } else { 1 };
            assert_eq!(new_leaders(&cmds).len(), to, "{what}");
        }
    }
}

/// Each tick an established leader pings the followers in its broadcast
/// (a new round each time) and announces itself to every other server.
#[test]
fn a_leader_pings_its_followers_and_announces_itself_to_the_others() {
    let mut c = settled();
    c.exec(3, |n, now, out| {
        n.on_link(now, LinkEvent::Down(Peer::Node(1)), out)
    });
    let round = leading(c.node(3)).ping_round;
    let cmds = tick(&mut c, 3);
    let msgs = sent(&cmds);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(matches!(&msgs[0], (1, Msg::Notify { vote: Some(v), .. }) if v.leader == 3));
    let ping = Msg::Ping {
        epoch: 1,
        round: round + 1,
        commit: 0,
        last: 0,
    };
    assert_eq!(msgs[1], (2, ping));
    let cmds = tick(&mut c, 3);
    assert!(sent(&cmds)
        .iter()
        .any(|(n, m)| *n == 2 && matches!(m, Msg::Ping { round: r, .. } if *r == round + 2)));
}

/// SC2 on the clock: a leader keeps leading while a quorum (itself
/// included) was heard from within `sync-limit`, and steps down the tick
/// after; a candidate not established within `init-limit` gives up.
#[test]
fn a_leader_steps_down_once_no_quorum_was_heard_for_sync_limit() {
    let mut c = settled();
    let cfg = Config::default();
    let heard = c.now;
    let us = Duration::from_micros(1);
    c.exec(3, |n, now, out| {
        n.on_link(now, LinkEvent::Down(Peer::Node(1)), out)
    });
    c.now = heard.saturating_add(cfg.sync_limit);
    tick(&mut c, 3);
    assert_eq!(c.node(3).leader(), Some(3), "n2 heard sync-limit ago");
    c.now = c.now.saturating_add(us);
    tick(&mut c, 3);
    assert_eq!(c.node(3).role(), "looking");
    let mut n = lone(3, 3, 0, &[]);
    n.lead(&mut Out::new());
    let at_init = Time::ZERO.saturating_add(cfg.init_limit);
    n.on_timer(at_init, Timer::Tick, &mut Out::new());
    assert_eq!(n.role(), "leader");
    n.on_timer(at_init.saturating_add(us), Timer::Tick, &mut Out::new());
    assert_eq!(n.role(), "looking");
}

/// The counters the status line and metrics show: proposals, the kind of
/// each synchronisation, read rounds.
#[test]
fn counters_count_proposals_syncs_and_read_rounds() {
    let mut c = settled();
    let l = c.node(3).counters.clone();
    assert_eq!(
        (l.led, l.sync_diff, l.sync_trunc, l.sync_snap),
        (1, 2, 0, 0)
    );
    assert_eq!(c.ask(3, put("a", "1")), Some(Response::Done));
    assert_eq!(c.ask(1, put("b", "2")), Some(Response::Done));
    assert_eq!(c.node(3).counters.proposals, 2);
    assert_eq!(c.node(3).counters.delivered, 2);
    let rounds = c.node(3).counters.read_rounds;
    assert!(c.ask(2, get("a")).is_some());
    assert_eq!(c.node(3).counters.read_rounds, rounds + 1);
}

/// n3 of 3, leading epoch 2 with n1's ACKEPOCH: NEWLEADER sent to n1, its
/// own history (one entry) being written; returns the leader and the
/// message that says that history is durable.
fn syncing_with_n1() -> (ZabNode, Msg) {
    let mut n = lone(3, 3, 1, &[1]);
    n.lead(&mut Out::new());
    hear(&mut n, 1, info(1, 1, false));
    let own = (hear(&mut n, 1, ack_epoch(2, 1, vec![], false)).into_iter())
        .find_map(|c| match c {
            Command::WhenDurable(m) => Some(m),
            _ => None,
        })
        .expect("asks when its history is durable");
    (n, own)
}

/// Established once a quorum holds the history: (N = 3) one follower's
/// ACKNEWLEADER and our own log durable, in either order, not either
/// alone. A follower synchronised later gets the commit index at once.
#[test]
fn a_leader_is_established_by_a_quorum_of_durable_histories() {
    for durable_first in [false, true] {
        let (mut n, own) = syncing_with_n1();
        let acked = Msg::AckNewLeader { epoch: 2, last: 1 };
        let (first, then) = if durable_first {
            ((3, own), (1, acked))
        } else {
            ((1, acked), (3, own))
        };
        hear(&mut n, first.0, first.1);
        assert_eq!(
            n.leader(),
            None,
            "one of two (durable first: {durable_first})"
        );
        let cmds = hear(&mut n, then.0, then.1);
        assert_eq!(n.leader(), Some(3));
        let commit = Msg::Commit { epoch: 2, index: 1 };
        assert_eq!(sent(&cmds), vec![(1, commit.clone())]);
        hear(&mut n, 2, info(1, 2, false));
        hear(&mut n, 2, ack_epoch(2, 1, vec![(1, 1, 1)], false));
        let cmds = hear(&mut n, 2, Msg::AckNewLeader { epoch: 2, last: 1 });
        assert_eq!(sent(&cmds), vec![(2, commit)]);
    }
}

/// A follower in our broadcast that announces itself again (it went back
/// to election and chose us again; its link never went down here) goes
/// through NEWEPOCH and NEWLEADER again.
#[test]
fn a_follower_that_rejoins_is_synchronised_again() {
    let mut c = settled();
    let cmds = at(&mut c, 3, 1, info(1, 3, false));
    assert_eq!(new_epochs(&cmds), vec![(1, 1)]);
    let cmds = at(&mut c, 3, 1, ack_epoch(1, 1, vec![], false));
    assert_eq!(new_leaders(&cmds).len(), 1);
}

/// A server that talks to us as to its leader but is not in our broadcast
/// (its link went down here) is told who we are; its forwarded write is
/// not proposed but answered `Dropped`, so it may send it again.
#[test]
fn a_server_outside_the_broadcast_is_told() {
    let mut c = settled();
    c.exec(3, |n, now, out| {
        n.on_link(now, LinkEvent::Down(Peer::Node(1)), out)
    });
    let pong = Msg::Pong {
        epoch: 1,
        round: 1,
        last: 0,
    };
    let cmds = at(&mut c, 3, 1, pong);
    assert!(
        matches!(&sent(&cmds)[..], [(1, Msg::Notify { .. })]),
        "{cmds:?}"
    );
    let fwd = Msg::Forward {
        epoch: 1,
        origin: 1,
        rid: 4,
        op: bytes::Bytes::new(),
    };
    let cmds = at(&mut c, 3, 1, fwd);
    assert!(matches!(
        &sent(&cmds)[..],
        [(1, Msg::Dropped { rid: 4 }), (1, Msg::Notify { .. })]
    ));
    assert_eq!(c.node(3).log().last(), 0, "not proposed");
}

/// A configuration op forwarded by a follower is not proposed: a change
/// of membership goes only through the leader's `reconfig`, which checks
/// it; a follower's clients cannot produce one.
#[test]
fn a_forwarded_configuration_op_is_not_proposed() {
    let mut c = settled();
    let last = c.node(3).log().last();
    let op = super::members::Members::new(&[1, 2]).unwrap().to_op();
    let fwd = Msg::Forward {
        epoch: 1,
        origin: 1,
        rid: 9,
        op,
    };
    let cmds = at(&mut c, 3, 1, fwd);
    assert!(sent(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(c.node(3).log().last(), last, "not proposed");
}

/// Read index at the leader: a read waits for a PING round sent after it
/// came to be answered by a quorum (one follower of two, with us); an
/// answer to an older round does not do.
#[test]
fn a_read_waits_for_a_quorum_round_sent_after_it() {
    let mut c = settled();
    assert_eq!(c.ask(3, put("k", "v")), Some(Response::Done));
    c.tick();
    c.tick();
    let client = ClientRef::local(50);
    let cmds = c.exec(3, |n, now, out| n.on_client(now, client, get("k"), out));
    let rounds: Vec<u64> = (sent(&cmds).into_iter())
        .filter_map(|(_, m)| match m {
            Msg::Ping { round, .. } => Some(round),
            _ => None,
        })
        .collect();
    let r = rounds[0];
    assert!(r > 1 && rounds == vec![r, r], "{rounds:?}");
    let pong = |round| Msg::Pong {
        epoch: 1,
        round,
        last: 1,
    };
    let replied = |cmds: &Cmds| {
        (cmds.iter()).any(|c| matches!(c, Command::ReplyNow { client: cl, .. } if *cl == client))
    };
    assert!(!replied(&at(&mut c, 3, 1, pong(r - 1))));
    let cmds = at(&mut c, 3, 1, pong(r));
    assert!(cmds.contains(&Command::ReplyNow {
        client,
        resp: value("v")
    }));
}

/// The leader of `settled()` (n3) with one write proposed and on its own
/// disk: one follower's ACK commits it. Returns the epoch.
fn one_write_logged_at_the_leader(c: &mut Cluster) -> u64 {
    let client = ClientRef::local(77);
    let cmds = c.exec(3, |n, now, out| {
        n.on_client(now, client, put("k", "v"), out)
    });
    let own = (cmds.into_iter())
        .find_map(|c| match c {
            Command::WhenDurable(m) => Some(m),
            _ => None,
        })
        .expect("asks when the proposal is durable");
    at(c, 3, 3, own);
    leading(c.node(3)).epoch
}

fn commits(cmds: &Cmds) -> usize {
    (sent(cmds).into_iter())
        .filter(|(_, m)| matches!(m, Msg::Commit { .. }))
        .count()
}

/// An ACK or a PONG counts towards a commit only from a follower of this
/// epoch: one of an older epoch (a message that outlived its leader's
/// term, seed 003 §2.3: acknowledgements are of a proposal of *this*
/// epoch) leaves the write uncommitted until the right one arrives.
#[test]
fn acks_and_pongs_of_another_epoch_commit_nothing() {
    for pong in [false, true] {
        let mut c = settled();
        let epoch = one_write_logged_at_the_leader(&mut c);
        let said = |epoch| match pong {
            false => Msg::Ack { epoch, index: 1 },
            true => Msg::Pong {
                epoch,
                round: 1,
                last: 1,
            },
        };
        let cmds = at(&mut c, 3, 1, said(epoch - 1));
        assert_eq!(commits(&cmds), 0, "old epoch (pong: {pong})");
        assert_eq!(c.node(3).commit, 0);
        let cmds = at(&mut c, 3, 1, said(epoch));
        assert_eq!(commits(&cmds), 2, "this epoch (pong: {pong})");
    }
}

/// ACKNEWLEADER of another epoch does not count towards establishing the
/// leader: the follower accepted some other history.
#[test]
fn an_acknewleader_of_another_epoch_is_ignored() {
    let (mut n, own) = syncing_with_n1();
    hear(&mut n, 3, own);
    hear(&mut n, 1, Msg::AckNewLeader { epoch: 1, last: 1 });
    assert_eq!(n.leader(), None, "an old epoch's ACKNEWLEADER");
    hear(&mut n, 1, Msg::AckNewLeader { epoch: 2, last: 1 });
    assert_eq!(n.leader(), Some(3));
}

/// A leader proposes clients' writes only once established: before, its
/// history is not yet on a quorum, and a write waits (flushed after).
#[test]
fn a_leader_proposes_nothing_before_it_is_established() {
    let (mut n, own) = syncing_with_n1();
    let mut out = Out::new();
    n.on_client(Time::ZERO, ClientRef::local(9), put("k", "v"), &mut out);
    let cmds: Cmds = out.drain().collect();
    assert!(
        !sent(&cmds)
            .iter()
            .any(|(_, m)| matches!(m, Msg::Proposal { .. })),
        "{cmds:?}"
    );
    assert_eq!(n.log().last(), 1);
    hear(&mut n, 3, own);
    let cmds = hear(&mut n, 1, Msg::AckNewLeader { epoch: 2, last: 1 });
    assert!(
        sent(&cmds)
            .iter()
            .any(|(_, m)| matches!(m, Msg::Proposal { .. })),
        "flushed once established: {cmds:?}"
    );
}

/// PONG of epoch 1 (`settled()`'s) for `round`, from a follower that logged nothing.
fn pong1(round: u64) -> Msg {
    Msg::Pong {
        epoch: 1,
        round,
        last: 0,
    }
}

fn ping_rounds(cmds: &Cmds) -> Vec<u64> {
    (sent(cmds).into_iter())
        .filter_map(|(_, m)| match m {
            Msg::Ping { round, .. } => Some(round),
            _ => None,
        })
        .collect()
}

fn replied(cmds: &Cmds, client: ClientRef) -> bool {
    (cmds.iter()).any(|c| {
        matches!(c, Command::Reply { client: cl, .. } | Command::ReplyNow { client: cl, .. } if *cl == client)
    })
}

/// A read at a leader not yet established waits (its commit index is not
/// yet a quorum's); once established, the read's quorum round goes and
/// its answer follows the round's PONG.
#[test]
fn a_read_at_a_leader_waits_until_it_is_established() {
    let (mut n, own) = syncing_with_n1();
    let client = ClientRef::local(9);
    let mut out = Out::new();
    n.on_client(Time::ZERO, client, get("k"), &mut out);
    let cmds: Cmds = out.drain().collect();
    assert!(
        ping_rounds(&cmds).is_empty() && !replied(&cmds, client),
        "{cmds:?}"
    );
    hear(&mut n, 3, own);
    let cmds = hear(&mut n, 1, Msg::AckNewLeader { epoch: 2, last: 1 });
    let rounds = ping_rounds(&cmds);
    assert_eq!(
        rounds.len(),
        1,
        "the read's round, once established: {cmds:?}"
    );
    let pong = Msg::Pong {
        epoch: 2,
        round: rounds[0],
        last: 1,
    };
    assert!(replied(&hear(&mut n, 1, pong), client));
}

/// Reads that arrive while a read round is in flight wait for the next
/// round, which goes as soon as the first is confirmed (not at the next
/// tick); each round is counted once.
#[test]
fn reads_during_a_round_take_the_next_one() {
    let mut c = settled();
    let (a, b) = (ClientRef::local(60), ClientRef::local(61));
    let before = c.node(3).counters.read_rounds;
    let cmds = c.exec(3, |n, now, out| n.on_client(now, a, get("k"), out));
    let r = ping_rounds(&cmds)[0];
    let cmds = c.exec(3, |n, now, out| n.on_client(now, b, get("k"), out));
    assert!(
        ping_rounds(&cmds).is_empty(),
        "one round in flight: {cmds:?}"
    );
    let cmds = at(&mut c, 3, 1, pong1(r));
    assert!(replied(&cmds, a) && !replied(&cmds, b), "{cmds:?}");
    assert_eq!(
        ping_rounds(&cmds),
        vec![r + 1, r + 1],
        "the next round at once"
    );
    assert!(replied(&at(&mut c, 3, 2, pong1(r + 1)), b));
    assert_eq!(c.node(3).counters.read_rounds, before + 2);
}

/// READINDEX from a follower: answered after the quorum round, in the
/// leader's epoch; one of another epoch is not served (the asker is told
/// who leads), and the reads of a follower whose link closed are
/// forgotten (a restarted server numbers its reads from 1 again).
#[test]
fn read_index_requests_are_answered_in_epoch_and_forgotten_with_their_link() {
    let index_oks = |cmds: &Cmds| -> Vec<(NodeId, u64)> {
        (sent(cmds).into_iter())
            .filter_map(|(to, m)| match m {
                Msg::ReadIndexOk { rid, epoch: 1, .. } => Some((to, rid)),
                Msg::ReadIndexOk { .. } => panic!("wrong epoch: {m:?}"),
                _ => None,
            })
            .collect()
    };
    for (epoch, link_down, answered) in [(1, false, true), (0, false, false), (1, true, false)] {
        let mut c = settled();
        let cmds = at(&mut c, 3, 1, Msg::ReadIndex { epoch, rid: 5 });
        if epoch != 1 {
            assert!(
                matches!(&sent(&cmds)[..], [(1, Msg::Notify { .. })]),
                "{cmds:?}"
            );
            continue;
        }
        let r = ping_rounds(&cmds)[0];
        if link_down {
            c.exec(3, |n, now, out| {
                n.on_link(now, LinkEvent::Down(Peer::Node(1)), out)
            });
        }
        let oks = index_oks(&at(&mut c, 3, 2, pong1(r)));
        assert_eq!(
            oks == vec![(1, 5)],
            answered,
            "{oks:?} (link down: {link_down})"
        );
        assert_eq!(oks.is_empty(), !answered);
    }
}

/// A heartbeat round sent after a read arrived confirms that read too: no
/// extra read round goes for it once the read round before is confirmed.
#[test]
fn a_heartbeat_round_after_a_read_serves_it() {
    let mut c = settled();
    let (a, b) = (ClientRef::local(62), ClientRef::local(63));
    let before = c.node(3).counters.read_rounds;
    let r = ping_rounds(&c.exec(3, |n, now, out| n.on_client(now, a, get("k"), out)))[0];
    c.exec(3, |n, now, out| n.on_client(now, b, get("k"), out));
    let beat = ping_rounds(&tick(&mut c, 3));
    assert_eq!(
        beat,
        vec![r + 1, r + 1],
        "the heartbeat round after both reads"
    );
    let cmds = at(&mut c, 3, 1, pong1(r));
    assert!(replied(&cmds, a) && !replied(&cmds, b), "{cmds:?}");
    assert!(ping_rounds(&cmds).is_empty(), "no extra round: {cmds:?}");
    assert!(replied(&at(&mut c, 3, 2, pong1(r + 1)), b));
    assert_eq!(c.node(3).counters.read_rounds, before + 1);
}

/// Issue 31: an epoch, index or round past `COUNTER_LIMIT` in any message
/// is refused before it touches anything (counted); at the limit itself it
/// is taken; and a leader whose highest accepted epoch is `u64::MAX` gives
/// its leadership up instead of wrapping to epoch 0.
#[test]
fn counters_at_the_edge_are_refused_never_wrapped() {
    use super::msg::{LogEntry, Zxid, COUNTER_LIMIT};
    use super::testing::{notify, vote};
    use super::PeerState;
    let over = COUNTER_LIMIT + 1;
    let entry = |index, epoch| LogEntry {
        index,
        epoch,
        data: bytes::Bytes::new(),
    };
    let forged = [
        Msg::NewEpoch { epoch: u64::MAX },
        notify(u64::MAX, None, PeerState::Looking, false),
        notify(1, Some(vote(2, over, (1, 1))), PeerState::Leading, false),
        info(over, 3, false),
        Msg::Proposal {
            epoch: 1,
            entry: entry(u64::MAX, 1),
        },
        Msg::NewLeader {
            epoch: 1,
            sync: SyncData {
                snap: Some((u64::MAX, bytes::Bytes::new())),
                ..SyncData::default()
            },
        },
        Msg::Ping {
            epoch: 1,
            round: over,
            commit: 0,
            last: 0,
        },
        Msg::Commit {
            epoch: 1,
            index: u64::MAX,
        },
        ack_epoch(1, 1, vec![(1, 1, u64::MAX)], false),
    ];
    let mut n = lone(3, 5, 2, &[2]);
    n.lead(&mut Out::new());
    let before = format!("{n:?}");
    for (i, m) in forged.iter().enumerate() {
        assert!(hear(&mut n, 1, m.clone()).is_empty(), "{m:?}");
        assert_eq!(n.counters.edge_values_refused, i as u64 + 1);
    }
    let after = format!("{n:?}").replace("edge_values_refused: 9", "edge_values_refused: 0");
    assert_eq!(after, before, "state unchanged");
    assert_eq!(
        n.log.last_zxid(),
        Zxid {
            epoch: 2,
            counter: 1
        }
    );

    // At the limit a value is still a value: no refusal.
    hear(&mut n, 1, info(COUNTER_LIMIT - 1, 3, false));
    assert_eq!(n.counters.edge_values_refused, 9);

    // No epoch follows u64::MAX: the prospective leader steps down.
    let mut n = lone(3, 3, 2, &[]);
    n.accepted = (u64::MAX, 3);
    n.lead(&mut Out::new());
    let cmds = hear(&mut n, 1, info(4, 3, false));
    assert!(new_epochs(&cmds).is_empty(), "no NEWEPOCH of epoch 0");
    assert_eq!(n.counters.epochs_exhausted, 1);
    assert!(!matches!(n.role, Role::Leading(_)), "gave up leading");
    assert_eq!(n.accepted.0, u64::MAX, "nothing wrapped");
}
