//! Election-level tests (`election.rs`): who leads and in how many ticks,
//! how a looking server weighs notifications, and how servers that follow
//! or lead answer them. The simulator's sweeps see only whether operations
//! stay linearizable and finish; these see a slower or churnier election.

use super::bugs::InjectedBug;
use super::msg::{Msg, PeerState, Timer};
use super::node::{Config, Role};
use super::testing::{at, get, hear, lone, notify, put, sent, settled, value, vote, Cluster, Cmds};
use crate::protocol::contract::{Command, LinkEvent, Out, Protocol};
use crate::types::{NodeId, Peer, Response, Time};

fn follower_info_to(cmds: &Cmds) -> Vec<NodeId> {
    (sent(cmds).into_iter())
        .filter(|(_, m)| matches!(m, Msg::FollowerInfo { .. }))
        .map(|(n, _)| n)
        .collect()
}

fn arms_finalize(cmds: &Cmds) -> bool {
    (cmds.iter()).any(|c| {
        matches!(
            c,
            Command::SetTimer {
                timer: Timer::Finalize,
                ..
            }
        )
    })
}

/// No faults, empty logs: one round, decided at the second tick (the first
/// carries the votes, the second fires the finalize wait), the highest id
/// leading; everyone counted one election and only the leader led.
#[test]
fn a_fault_free_election_takes_one_round_and_two_ticks() {
    for n in [3, 5, 7] {
        let mut c = Cluster::new(n, Config::default());
        let (l, ticks) = c.settle_ticks();
        assert_eq!((l, ticks), (n, 2), "N={n}");
        for id in 1..=n {
            let node = c.node(id);
            assert_eq!(node.election.round, 1, "N={n} n{id}");
            assert_eq!(node.counters.elections, 1, "N={n} n{id}");
            assert_eq!(node.counters.led, u64::from(id == l), "N={n} n{id}");
            assert_eq!(node.counters.step_downs, 0, "N={n} n{id}");
            assert_eq!(node.epochs(), (1, 1), "N={n} n{id}");
        }
    }
}

/// After the leader crashed, the server with the newest history leads
/// though its id is lower, two ticks after the other one returned. With
/// `zab-stale-log-leader` (votes by id alone) the higher id leads with its
/// stale log and the committed write is gone.
#[test]
fn the_newest_history_leads_not_the_highest_id() {
    for bug in [None, Some(InjectedBug::StaleLogLeader)] {
        let mut c = Cluster::new(3, Config::default());
        c.bug = bug;
        for id in 1..=3 {
            c.crash(id);
            c.restart(id);
        }
        assert_eq!(c.settle(), 3);
        c.crash(2);
        assert_eq!(c.ask(3, put("k", "v")), Some(Response::Done));
        c.crash(3);
        c.restart(2);
        let (l, ticks) = c.settle_ticks();
        if bug.is_none() {
            assert_eq!((l, ticks), (1, 2));
            assert_eq!(c.node(2).counters.led, 0);
            assert_eq!(c.ask(2, get("k")), Some(value("v")));
        } else {
            assert_eq!(l, 2, "the bug elects the stale log");
            assert_eq!(c.ask(2, get("k")), Some(Response::Value(None)));
        }
    }
}

/// A looking server joins an announced leader only if that leader's
/// history (current epoch first, then last zxid) is at least its own; a
/// server that lost its state has no history to weigh and joins any.
#[test]
fn a_looking_server_joins_only_a_leader_not_behind_it() {
    // n1: current epoch 2, entries of epochs 1, 2, 2: last zxid (2, 3).
    let older = [vote(2, 1, (1, 9)), vote(2, 2, (2, 2)), vote(2, 1, (2, 3))];
    for v in older {
        let mut n = lone(1, 3, 2, &[1, 2, 2]);
        let cmds = hear(&mut n, 2, notify(1, Some(v), PeerState::Leading, false));
        assert_eq!(n.role(), "looking", "{v:?}");
        assert!(follower_info_to(&cmds).is_empty(), "{v:?}");
    }
    let not_older = [vote(2, 2, (2, 3)), vote(2, 2, (2, 4)), vote(2, 3, (1, 1))];
    for v in not_older {
        let mut n = lone(1, 3, 2, &[1, 2, 2]);
        let cmds = hear(&mut n, 2, notify(1, Some(v), PeerState::Leading, false));
        assert_eq!(n.role(), "follower", "{v:?}");
        assert_eq!(follower_info_to(&cmds), vec![2], "{v:?}");
    }
    let mut n = lone(1, 3, 2, &[1, 2, 2]);
    hear(&mut n, 2, notify(1, None, PeerState::Leading, false));
    assert_eq!(n.role(), "looking", "a leader without a vote");
    let mut n = lone(1, 3, 0, &[]).recovering();
    n.recovery = None; // its floor learned
    let cmds = hear(
        &mut n,
        2,
        notify(1, Some(vote(2, 0, (0, 0))), PeerState::Leading, false),
    );
    assert_eq!(follower_info_to(&cmds), vec![2]);
}

/// Servers that decided first follow us while we still look: with a
/// quorum of them (us included) we lead. A follower whose history is newer
/// than ours, or one that lost its state, does not count; a follower of
/// another server makes us ask that server.
#[test]
fn a_looking_server_leads_once_a_quorum_follows_it() {
    let mut n = lone(3, 5, 1, &[1]);
    let me = vote(3, 1, (1, 1));
    hear(
        &mut n,
        1,
        notify(1, Some(vote(3, 1, (1, 2))), PeerState::Following, false),
    );
    hear(&mut n, 2, notify(1, Some(me), PeerState::Following, true));
    hear(&mut n, 4, notify(1, Some(me), PeerState::Following, false));
    assert_eq!(n.role(), "looking", "one follower of four counts");
    let cmds = hear(
        &mut n,
        1,
        notify(1, Some(vote(5, 1, (1, 1))), PeerState::Following, false),
    );
    assert_eq!(n.role(), "looking");
    assert!(matches!(
        &sent(&cmds)[..],
        [(5, Msg::Notify { state: PeerState::Looking, vote: Some(v), .. })] if *v == me
    ));
    hear(&mut n, 5, notify(1, Some(me), PeerState::Following, false));
    assert_eq!(n.role(), "leader");
    assert_eq!(n.counters.led, 1);
    // A recovering server never leads that way.
    let mut r = lone(3, 3, 0, &[]).recovering();
    r.recovery = None;
    let v = vote(3, 0, (0, 0));
    hear(&mut r, 1, notify(1, Some(v), PeerState::Following, false));
    hear(&mut r, 2, notify(1, Some(v), PeerState::Following, false));
    assert_eq!(r.role(), "recovering");
    assert!(matches!(r.role, super::node::Role::Looking));
}

/// Rounds: a newer round is joined (its received votes start afresh, the
/// vote is the better of ours and the sender's, everyone is told); an
/// older one is answered to its sender only. In the same round a better
/// vote is adopted and told; a quorum for our vote arms the finalize wait
/// once; on it we follow the winner. A recovering voter counts in no
/// quorum.
#[test]
fn rounds_votes_and_the_finalize_wait() {
    let mut n = lone(1, 3, 1, &[1]);
    let me = vote(1, 1, (1, 1));
    assert_eq!((n.election.round, n.election.vote), (1, Some(me)));
    let worse = vote(2, 1, (1, 0));
    let cmds = hear(&mut n, 2, notify(3, Some(worse), PeerState::Looking, false));
    assert_eq!((n.election.round, n.election.vote), (3, Some(me)));
    let told: Vec<NodeId> = sent(&cmds).iter().map(|(p, _)| *p).collect();
    assert_eq!(told, vec![2, 3]);
    assert!(sent(&cmds)
        .iter()
        .all(|(_, m)| *m == notify(3, Some(me), PeerState::Looking, false)));
    assert_eq!(n.election.received.len(), 2, "ours and n2's");
    assert!(!arms_finalize(&cmds), "n2 votes for itself");
    // An older round: answered, not counted.
    let better = vote(3, 1, (1, 1));
    let cmds = hear(
        &mut n,
        3,
        notify(2, Some(better), PeerState::Looking, false),
    );
    assert_eq!(
        sent(&cmds),
        vec![(3, notify(3, Some(me), PeerState::Looking, false))]
    );
    assert_eq!(n.election.vote, Some(me));
    assert!(!n.election.received.contains_key(&3));
    // This round, a better vote from a recovering server: adopted and
    // told, but its vote does not count towards a quorum.
    let cmds = hear(&mut n, 3, notify(3, Some(better), PeerState::Looking, true));
    assert_eq!(n.election.vote, Some(better));
    assert_eq!(sent(&cmds).len(), 2);
    assert!(!arms_finalize(&cmds));
    // From it again, recovered: a quorum (n1, n3) for n3.
    let cmds = hear(
        &mut n,
        3,
        notify(3, Some(better), PeerState::Looking, false),
    );
    assert!(sent(&cmds).is_empty(), "nothing new to tell");
    assert!(arms_finalize(&cmds));
    let cmds = hear(
        &mut n,
        2,
        notify(3, Some(better), PeerState::Looking, false),
    );
    assert!(!arms_finalize(&cmds), "armed once");
    let mut out = Out::new();
    n.on_timer(Time::ZERO, Timer::Finalize, &mut out);
    let cmds: Cmds = out.drain().collect();
    assert_eq!(n.role(), "follower");
    assert_eq!(follower_info_to(&cmds), vec![3]);
    // The finalize wait fires again after we left LOOKING: nothing.
    let mut out = Out::new();
    n.on_timer(Time::ZERO, Timer::Finalize, &mut out);
    assert!(out.is_empty() && n.role() == "follower");
    // Our own vote wins: we lead.
    let mut n = lone(3, 3, 1, &[1]);
    let cmds = hear(
        &mut n,
        1,
        notify(1, Some(vote(3, 1, (1, 1))), PeerState::Looking, false),
    );
    assert!(arms_finalize(&cmds));
    n.on_timer(Time::ZERO, Timer::Finalize, &mut Out::new());
    assert_eq!(n.role(), "leader");
    // A stray finalize without a quorum for our vote decides nothing.
    let mut n = lone(1, 3, 1, &[1]);
    n.on_timer(Time::ZERO, Timer::Finalize, &mut Out::new());
    assert_eq!(n.role(), "looking");
}

/// Established servers tell a looking one who leads, and a stale leader
/// (older epoch) who leads now; a notification from a newer epoch ends a
/// leadership (or a follower's) at once, not after `sync-limit`.
#[test]
fn servers_in_the_broadcast_answer_notifications() {
    let looking = notify(9, Some(vote(1, 0, (0, 0))), PeerState::Looking, false);
    let stale = notify(9, Some(vote(1, 0, (0, 0))), PeerState::Leading, false);
    let same = notify(9, Some(vote(1, 1, (0, 0))), PeerState::Following, false);
    for (id, state) in [(2, PeerState::Following), (3, PeerState::Leading)] {
        for msg in [looking.clone(), stale.clone()] {
            let mut c = settled();
            let cmds = at(&mut c, id, 1, msg);
            assert!(
                matches!(
                    &sent(&cmds)[..],
                    [(1, Msg::Notify { state: s, vote: Some(v), .. })] if *s == state && v.leader == 3 && v.cur_epoch == 1
                ),
                "n{id}: {cmds:?}"
            );
            assert_eq!(c.node(id).leader(), Some(3));
        }
        let mut c = settled();
        assert!(sent(&at(&mut c, id, 1, same.clone())).is_empty());
        assert_eq!(c.node(id).leader(), Some(3));
        let newer = notify(1, Some(vote(1, 2, (0, 0))), PeerState::Following, false);
        at(&mut c, id, 1, newer);
        assert_eq!(c.node(id).role(), "looking", "n{id}");
        assert_eq!(c.node(id).counters.step_downs, u64::from(id == 3));
    }
    // A follower whose leader looks, or leads another epoch, looks too.
    for msg in [
        notify(1, Some(vote(3, 1, (0, 0))), PeerState::Looking, false),
        notify(1, Some(vote(3, 2, (0, 0))), PeerState::Leading, false),
        notify(1, None, PeerState::Leading, false),
    ] {
        let mut c = settled();
        at(&mut c, 2, 3, msg.clone());
        assert_eq!(c.node(2).role(), "looking", "{msg:?}");
    }
    // Its own leader's announcement, or a follower of an older epoch:
    // nothing to do, nothing to answer.
    let mut c = settled();
    let own = notify(1, Some(vote(3, 1, (0, 0))), PeerState::Leading, false);
    assert!(sent(&at(&mut c, 2, 3, own)).is_empty());
    assert_eq!(c.node(2).leader(), Some(3), "its own leader's announcement");
    for id in [2, 3] {
        let old = notify(1, Some(vote(1, 0, (0, 0))), PeerState::Following, false);
        assert!(sent(&at(&mut c, id, 1, old)).is_empty(), "n{id}");
    }
}

/// A link going down: a follower whose leader it was looks again, one
/// that lost another link keeps following; the leader drops that follower
/// from its broadcast (it re-synchronises when it comes back).
#[test]
fn a_broken_link_ends_only_what_went_over_it() {
    let mut c = settled();
    let down = |n: NodeId| LinkEvent::Down(Peer::Node(n));
    c.exec(1, |n, now, out| n.on_link(now, down(2), out));
    assert_eq!(c.node(1).leader(), Some(3));
    c.exec(3, |n, now, out| n.on_link(now, down(1), out));
    assert_eq!(c.node(3).leader(), Some(3));
    let Role::Leading(l) = &c.node(3).role else {
        panic!("leads")
    };
    assert_eq!(l.fols.keys().copied().collect::<Vec<_>>(), vec![2]);
    c.exec(1, |n, now, out| n.on_link(now, down(3), out));
    assert_eq!(c.node(1).role(), "looking");
}

/// A candidate (leading, not established) gives up for a newer epoch; a
/// follower still joining one leader moves to an established newer one
/// whose history is not behind its own, and to nothing else.
#[test]
fn candidates_and_joining_followers_move_to_a_newer_epoch() {
    let newer = notify(1, Some(vote(2, 2, (1, 1))), PeerState::Following, false);
    let mut n = lone(3, 3, 1, &[1]);
    n.lead(&mut Out::new());
    hear(
        &mut n,
        2,
        notify(1, Some(vote(2, 1, (1, 1))), PeerState::Following, false),
    );
    assert_eq!(n.role(), "leader", "same epoch");
    hear(&mut n, 2, newer.clone());
    assert_eq!((n.role(), n.counters.step_downs), ("looking", 1));
    // Following n2, not yet synchronised (FOLLOWERINFO sent).
    let joining = || {
        let mut n = lone(1, 3, 1, &[1]);
        n.follow(2, &mut Out::new());
        n
    };
    let mut n = joining();
    hear(&mut n, 3, newer);
    assert_eq!(
        n.role(),
        "follower",
        "not in a broadcast: n3's epoch is no news"
    );
    for (v, moves) in [
        (vote(3, 2, (1, 1)), true),
        (vote(3, 2, (0, 0)), true),
        (vote(3, 1, (1, 1)), false),
        (vote(3, 0, (1, 5)), false),
    ] {
        let mut n = joining();
        let cmds = hear(&mut n, 3, notify(1, Some(v), PeerState::Leading, false));
        let to = if moves { vec![3] } else { vec![] };
        assert_eq!(follower_info_to(&cmds), to, "{v:?}");
    }
}

/// A looking server repeats its notification to every peer each tick (a
/// first one may have died with a connection).
#[test]
fn a_looking_server_repeats_its_vote_each_tick() {
    let mut n = lone(2, 3, 1, &[1]);
    let mut out = Out::new();
    let later = Time::ZERO.saturating_add(Config::default().tick);
    n.on_timer(later, Timer::Tick, &mut out);
    let cmds: Cmds = out.drain().collect();
    let mine = notify(1, Some(vote(2, 1, (1, 1))), PeerState::Looking, false);
    assert_eq!(sent(&cmds), vec![(1, mine.clone()), (3, mine)]);
}
