//! Follower-side tests (`follower.rs`): the promise of a new epoch,
//! NEWLEADER (TRUNC, DIFF, the current epoch), the broadcast stream
//! (gaps send the follower back), serving, and the ticks.

use super::msg::{LogEntry, Msg, Summary, SyncData, Timer};
use super::node::{Config, Waiter, ZabNode};
use super::state_machine::{encode_snapshot, KvStore, Op, Payload, StateMachine};
use super::testing::{at, get, hear, lone, put, sent, settled, Cluster, Cmds};
use crate::protocol::contract::{Command, Out, Protocol, Record};
use crate::types::{ClientRef, Time};
use bytes::Bytes;
use std::time::Duration;

/// A follower of n3 (of 1..=3) with current epoch 1 and `log` entries
/// of epoch 1, that accepted NEWEPOCH(2) from it.
fn joined(log: usize) -> ZabNode {
    let mut n = lone(1, 3, 1, &vec![1; log]);
    n.follow(3, &mut Out::new());
    hear(&mut n, 3, Msg::NewEpoch { epoch: 2 });
    n
}

/// `joined(0)`, synchronised by NEWLEADER(2) with an empty history.
fn synced() -> ZabNode {
    let mut n = joined(0);
    let sync = SyncData::default();
    hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
    n
}

fn entry(index: u64, epoch: u64) -> LogEntry {
    LogEntry {
        index,
        epoch,
        data: Bytes::new(),
    }
}

fn write(rid: u64, k: &str, v: &str) -> Bytes {
    let op = Op::from_request(&put(k, v)).expect("a put").to_bytes();
    Payload {
        origin: 99,
        rid,
        op,
    }
    .to_bytes()
}

/// NEWEPOCH from our leader: promised (persisted, to that leader) and
/// answered with ACKEPOCH (our current epoch and log); the same NEWEPOCH
/// again is answered again; another epoch after that, or NEWEPOCH from a
/// server we do not follow, is ignored; an epoch we may not accept sends
/// us back to election.
#[test]
fn a_follower_promises_a_new_epoch_once_and_answers_repeats() {
    let mut n = lone(1, 3, 1, &[1, 1]);
    n.follow(3, &mut Out::new());
    assert!(hear(&mut n, 2, Msg::NewEpoch { epoch: 5 }).is_empty());
    let ack = Msg::AckEpoch {
        epoch: 5,
        cur_epoch: 1,
        summary: Summary {
            base: 0,
            runs: vec![(1, 1, 2)],
        },
        recovering: false,
    };
    let cmds = hear(&mut n, 3, Msg::NewEpoch { epoch: 5 });
    assert!(matches!(cmds[0], Command::Persist(Record::Meta { .. })));
    assert_eq!(sent(&cmds), vec![(3, ack.clone())]);
    assert_eq!((n.epochs(), n.accepted.1), ((5, 1), 3));
    let cmds = hear(&mut n, 3, Msg::NewEpoch { epoch: 5 });
    assert_eq!(
        cmds,
        vec![Command::Send {
            to: crate::types::Peer::Node(3),
            msg: ack
        }]
    );
    assert!(hear(&mut n, 3, Msg::NewEpoch { epoch: 6 }).is_empty());
    assert_eq!(n.epochs(), (5, 1));
    for (promise, epoch) in [((4, 2), 3), ((4, 2), 4)] {
        let mut n = lone(1, 3, 1, &[1]);
        n.accepted = promise;
        n.follow(3, &mut Out::new());
        hear(&mut n, 3, Msg::NewEpoch { epoch });
        assert_eq!(n.role(), "looking", "{promise:?} {epoch}");
        assert_eq!(n.accepted, promise);
    }
}

/// NEWLEADER: the log becomes the leader's history (the divergent suffix
/// truncated, then the entries that follow on from the log appended), the
/// current epoch is the new one (persisted), ACKNEWLEADER names our last
/// index, and a durability report from before it is void. NEWLEADER of
/// another epoch, or a second one, is ignored.
#[test]
fn newleader_makes_the_log_the_leaders_history() {
    let mut n = joined(3);
    let mut out = Out::new();
    n.when_logged(&mut out);
    let old = (out.drain())
        .find_map(|c| match c {
            Command::WhenDurable(m) => Some(m),
            _ => None,
        })
        .expect("asked");
    let sync = SyncData {
        snap: None,
        trunc: Some(3),
        entries: vec![entry(3, 2), entry(4, 2), entry(6, 2)],
    };
    assert!(hear(
        &mut n,
        3,
        Msg::NewLeader {
            epoch: 3,
            sync: sync.clone()
        }
    )
    .is_empty());
    let cmds = hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
    assert!(cmds.contains(&Command::Persist(Record::TruncateFrom { index: 3 })));
    assert_eq!(n.log().summary().runs, vec![(1, 1, 2), (2, 3, 4)]);
    assert_eq!(n.epochs(), (2, 2));
    let ack = Msg::AckNewLeader { epoch: 2, last: 4 };
    assert_eq!(sent(&cmds), vec![(3, ack)]);
    assert!(
        hear(&mut n, 1, old).is_empty(),
        "a report from before the sync"
    );
    let again = SyncData {
        trunc: Some(1),
        ..SyncData::default()
    };
    assert!(hear(
        &mut n,
        3,
        Msg::NewLeader {
            epoch: 2,
            sync: again
        }
    )
    .is_empty());
    assert_eq!(n.log().last(), 4);
    // TRUNC of the last entry alone.
    let mut n = joined(3);
    let sync = SyncData {
        snap: None,
        trunc: Some(3),
        entries: vec![],
    };
    hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
    assert_eq!(n.log().last(), 2);
}

/// The broadcast stream: a PROPOSAL right after the log is logged and
/// ACKed once durable; one beyond it, or a COMMIT or PING beyond the log,
/// means a message went missing: back to election. The first COMMIT makes
/// the follower serve (a write waiting for a leader is forwarded); a
/// PING's commit index is delivered only once serving, and its PONG
/// reports what is durable.
#[test]
fn the_broadcast_stream_at_a_follower() {
    let mut n = synced();
    let client = ClientRef::local(7);
    let mut out = Out::new();
    n.on_client(Time::ZERO, client, put("w", "1"), &mut out);
    assert!(
        sent(&out.drain().collect::<Vec<_>>()).is_empty(),
        "not serving yet"
    );
    let p = LogEntry {
        index: 1,
        epoch: 2,
        data: write(1, "k", "v"),
    };
    let cmds = hear(&mut n, 3, Msg::Proposal { epoch: 2, entry: p });
    assert!(matches!(
        cmds[0],
        Command::Persist(Record::Entry { index: 1, .. })
    ));
    assert!(sent(&cmds).is_empty(), "ACK once durable");
    let ping = |commit, last| Msg::Ping {
        epoch: 2,
        round: 4,
        commit,
        last,
    };
    let cmds = hear(&mut n, 3, ping(1, 1));
    let pong = Msg::Pong {
        epoch: 2,
        round: 4,
        last: 0,
    };
    assert_eq!(sent(&cmds), vec![(3, pong)]);
    assert_eq!(
        n.applied(),
        0,
        "a PING commits nothing before the first COMMIT"
    );
    let gen = n.log_gen;
    let cmds = hear(&mut n, 1, Msg::Logged { index: 1, gen });
    assert_eq!(sent(&cmds), vec![(3, Msg::Ack { epoch: 2, index: 1 })]);
    let cmds = hear(&mut n, 3, Msg::Commit { epoch: 2, index: 0 });
    assert_eq!(n.leader(), Some(3));
    assert!(
        matches!(&sent(&cmds)[..], [(3, Msg::Forward { .. })]),
        "{cmds:?}"
    );
    let cmds = hear(&mut n, 3, ping(1, 1));
    assert_eq!(n.applied(), 1);
    assert_eq!(n.store().get(b"k").map(|v| &v[..]), Some(&b"v"[..]));
    assert!(matches!(&sent(&cmds)[..], [(3, Msg::Pong { last: 1, .. })]));
    // A gap, or a repeat (FIFO links never repeat: the stream is broken;
    // acknowledging the repeat would ACK what may not be durable).
    for gap in [
        Msg::Proposal {
            epoch: 2,
            entry: entry(3, 2),
        },
        Msg::Proposal {
            epoch: 2,
            entry: entry(1, 2),
        },
        Msg::Commit { epoch: 2, index: 2 },
        ping(1, 2),
    ] {
        let mut m = synced();
        hear(
            &mut m,
            3,
            Msg::Proposal {
                epoch: 2,
                entry: entry(1, 2),
            },
        );
        let cmds = hear(&mut m, 3, gap.clone());
        assert_eq!(m.role(), "looking", "{gap:?}");
        assert!(
            !sent(&cmds)
                .iter()
                .any(|(_, m)| matches!(m, Msg::Ack { .. })),
            "{cmds:?}"
        );
    }
    // The stream of another epoch is not ours.
    let mut m = synced();
    for other in [
        Msg::Proposal {
            epoch: 3,
            entry: entry(1, 3),
        },
        Msg::Commit { epoch: 3, index: 0 },
        Msg::Ping {
            epoch: 3,
            round: 1,
            commit: 0,
            last: 0,
        },
    ] {
        assert!(hear(&mut m, 3, other).is_empty());
    }
    assert_eq!(
        (m.role(), m.log().last(), m.leader()),
        ("follower", 0, None)
    );
}

/// The follower's clock: FOLLOWERINFO goes again each tick until NEWEPOCH;
/// not serving within `init-limit` of joining, or (once synchronised)
/// nothing from the leader for `sync-limit`: back to election, the tick
/// after the limit.
#[test]
fn a_follower_gives_up_on_a_slow_or_silent_leader() {
    let cfg = Config::default();
    let us = Duration::from_micros(1);
    let tick = |n: &mut ZabNode, at: Time| {
        let mut out = Out::new();
        n.on_timer(at, Timer::Tick, &mut out);
        out.drain().collect::<Vec<_>>()
    };
    let mut n = lone(1, 3, 1, &[]);
    n.follow(3, &mut Out::new());
    let init = Time::ZERO.saturating_add(cfg.init_limit);
    let cmds = tick(&mut n, init);
    assert!(matches!(&sent(&cmds)[..], [(3, Msg::FollowerInfo { .. })]));
    tick(&mut n, init.saturating_add(us));
    assert_eq!(n.role(), "looking");
    let mut n = joined(0);
    let cmds = tick(&mut n, init);
    assert!(
        sent(&cmds).is_empty(),
        "NEWEPOCH came: no more FOLLOWERINFO"
    );
    tick(&mut n, init.saturating_add(us));
    assert_eq!(n.role(), "looking", "not synchronised in time");
    // Serving: silence counts, from the last message of the leader.
    let mut c = settled();
    let heard = c.now;
    c.now = heard.saturating_add(cfg.sync_limit);
    c.exec(1, |n, now, out| n.on_timer(now, Timer::Tick, out));
    assert_eq!(c.node(1).leader(), Some(3));
    c.now = c.now.saturating_add(us);
    let ping = Msg::Ping {
        epoch: 1,
        round: 99,
        commit: 0,
        last: 0,
    };
    at(&mut c, 1, 3, ping);
    c.now = c.now.saturating_add(cfg.sync_limit);
    c.exec(1, |n, now, out| n.on_timer(now, Timer::Tick, out));
    assert_eq!(c.node(1).leader(), Some(3), "heard sync-limit ago");
    c.now = c.now.saturating_add(us);
    c.exec(1, |n, now, out| n.on_timer(now, Timer::Tick, out));
    assert_eq!(c.node(1).role(), "looking");
}

fn waiting(n: &mut ZabNode, rid: u64, sent_to: u32) {
    let w = Waiter {
        client: ClientRef::local(rid),
        deadline: Time::ZERO.saturating_add(Duration::from_secs(9)),
        op: Op::from_request(&put("k", "v")).expect("a put").to_bytes(),
        sent: Some(sent_to),
    };
    n.writes.insert(rid, w);
}

/// Our own writes in a suffix that a TRUNC removes are dead (a quorum
/// promised the new epoch): they go again, to the new leader once it
/// serves. Another server's entry that carries one of our request ids
/// does not release ours.
#[test]
fn our_writes_in_a_truncated_suffix_go_again() {
    let mut n = joined(1);
    let ours = Payload {
        origin: n.writer,
        rid: 5,
        op: Bytes::new(),
    };
    let theirs = Payload {
        origin: 99,
        rid: 6,
        op: Bytes::new(),
    };
    n.log.append(1, ours.to_bytes());
    n.log.append(1, theirs.to_bytes());
    waiting(&mut n, 5, 2);
    waiting(&mut n, 6, 2);
    let sync = SyncData {
        snap: None,
        trunc: Some(2),
        entries: vec![],
    };
    hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
    assert_eq!((n.writes[&5].sent, n.writes[&6].sent), (None, Some(2)));
    let cmds = hear(&mut n, 3, Msg::Commit { epoch: 2, index: 1 });
    assert!(
        matches!(&sent(&cmds)[..], [(3, Msg::Forward { rid: 5, .. })]),
        "{cmds:?}"
    );
}

/// A SNAP answers only our own writes it covers: another server's entry
/// that carries one of our request ids does not answer ours.
#[test]
fn a_snap_answers_only_our_own_writes() {
    let mut n = joined(0);
    let theirs = Payload {
        origin: 99,
        rid: 7,
        op: Op::from_request(&put("k", "v")).expect("a put").to_bytes(),
    };
    n.log.append(4, theirs.to_bytes());
    waiting(&mut n, 7, 3);
    let state = KvStore::default().snapshot();
    let sync = SyncData {
        snap: Some((1, encode_snapshot(&[(4, 1)], &state, None))),
        trunc: None,
        entries: vec![],
    };
    let cmds = hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
    assert!(!cmds.iter().any(|c| matches!(c, Command::Reply { .. })));
    assert!(n.writes.contains_key(&7) && n.applied() == 1);
}

/// A PROPOSAL is logged and acknowledged only once synchronised, and only
/// of the epoch we synchronised in: before NEWLEADER the log may still
/// hold a divergent suffix, and a proposal of another epoch is from a
/// history we did not accept (seed 003 §2.3, a follower accepts proposals
/// of its current epoch only).
#[test]
fn a_proposal_before_synchronisation_or_of_another_epoch_is_ignored() {
    let proposal = |epoch| Msg::Proposal {
        epoch,
        entry: entry(1, epoch),
    };
    for (mut n, epoch) in [(joined(0), 2), (synced(), 1), (synced(), 3)] {
        let cmds = hear(&mut n, 3, proposal(epoch));
        assert!(sent(&cmds).is_empty(), "{cmds:?}");
        assert_eq!(n.log().last(), 0, "epoch {epoch}");
    }
    let mut n = synced();
    hear(&mut n, 3, proposal(2));
    assert_eq!(n.log().last(), 1, "the right epoch, synchronised");
}

/// TRUNC never reaches what we delivered: a leader asking it breaks the
/// protocol (its history must contain every committed entry), and the
/// follower's invariant says so rather than undo a delivered write (a
/// debug assertion: not compiled into release builds).
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "TRUNC below what we delivered")]
fn a_trunc_of_a_delivered_entry_breaks_the_invariant() {
    let mut n = joined(2);
    n.applied = 2;
    let sync = SyncData {
        snap: None,
        trunc: Some(2),
        entries: vec![entry(2, 2)],
    };
    hear(&mut n, 3, Msg::NewLeader { epoch: 2, sync });
}

/// Before NEWLEADER a durability report ACKs nothing: the log may still
/// hold a suffix the new leader's history drops (F2 applies to proposals
/// of the epoch we synchronised in).
#[test]
fn a_follower_acks_nothing_before_newleader() {
    let mut n = joined(1);
    let gen = n.log_gen;
    let cmds = hear(&mut n, 1, Msg::Logged { index: 1, gen });
    assert!(sent(&cmds).is_empty(), "{cmds:?}");
}

/// Requests at a follower of the settled cluster (n3 leads), by hand.
fn client_at_n1(c: &mut Cluster, id: u64, req: crate::types::Request) -> Cmds {
    let client = ClientRef::local(id);
    c.exec(1, |n, now, out| n.on_client(now, client, req, out))
}

/// Two writes in flight at one follower are two requests: each has its
/// own id, each is forwarded and each client gets its answer.
#[test]
fn writes_in_flight_at_one_server_are_told_apart() {
    let mut c = settled();
    let a = c.send(1, put("a", "1"));
    let b = c.send(1, put("b", "2"));
    c.run();
    c.tick();
    for client in [a, b] {
        assert!(
            c.replies.iter().any(|(_, cl, _)| *cl == client),
            "{client:?} unanswered: {:?}",
            c.replies
        );
    }
}

/// DROPPED from the leader we forwarded a write to: the write goes again
/// (it was never proposed). From another server, or for another write,
/// it changes nothing.
#[test]
fn a_dropped_write_is_forwarded_again() {
    let mut c = settled();
    let fwd = |cmds: &Cmds| {
        (sent(cmds).into_iter())
            .filter_map(|(to, m)| match m {
                Msg::Forward { rid, .. } => Some((to, rid)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let first = fwd(&client_at_n1(&mut c, 500, put("a", "1")));
    let [(3, rid)] = first[..] else {
        panic!("forwarded to n3: {first:?}");
    };
    assert!(fwd(&at(&mut c, 1, 2, Msg::Dropped { rid })).is_empty());
    assert!(fwd(&at(&mut c, 1, 3, Msg::Dropped { rid: rid + 1 })).is_empty());
    assert_eq!(fwd(&at(&mut c, 1, 3, Msg::Dropped { rid })), vec![(3, rid)]);
}

/// A read sent to the leader for its read index is refused at once when
/// the follower loses that leader: the answer could come from a deposed
/// leader's index.
#[test]
fn reads_sent_to_a_lost_leader_are_refused_at_once() {
    let mut c = settled();
    let cmds = client_at_n1(&mut c, 600, get("a"));
    assert!(
        matches!(&sent(&cmds)[..], [(3, Msg::ReadIndex { .. })]),
        "{cmds:?}"
    );
    let down = crate::protocol::LinkEvent::Down(crate::types::Peer::Node(3));
    let cmds = c.exec(1, |n, now, out| n.on_link(now, down, out));
    let refused = cmds.iter().any(|cmd| {
        matches!(cmd, Command::Reply { client, resp: crate::types::Response::Failed(_) } if client.id == 600)
    });
    assert!(refused, "{cmds:?}");
}

/// Restart: records replay in the order written, so entries above a
/// snapshot may come before it. A snapshot of our own history keeps them
/// (only what it covers is compacted); a snapshot of another history
/// (SNAP from a leader) replaces the log.
#[test]
fn a_restart_keeps_the_entries_above_its_snapshot() {
    let snap = |runs: Vec<(u64, u64)>| Record::Snapshot {
        index: 2,
        data: encode_snapshot(&runs, &KvStore::default().snapshot(), None),
    };
    let entry = |index, epoch| Record::Entry {
        index,
        epoch,
        data: Bytes::new(),
    };
    let mut n = ZabNode::new(1, &[1, 2, 3], 1, Config::default());
    for r in [entry(1, 1), entry(2, 1), entry(3, 1), snap(vec![(1, 1)])] {
        n.restore(r);
    }
    assert_eq!((n.log().base(), n.log().last(), n.applied()), (2, 3, 2));
    let mut n = ZabNode::new(1, &[1, 2, 3], 1, Config::default());
    for r in [entry(1, 1), entry(2, 1), entry(3, 1), snap(vec![(2, 1)])] {
        n.restore(r);
    }
    assert_eq!((n.log().base(), n.log().last()), (2, 2), "another history");
}

/// Reads at a follower: none goes to the leader before the follower
/// serves; then each goes with a read id of its own (two in flight are
/// two), and is answered only by a READINDEXOK from its leader in its
/// epoch.
#[test]
fn reads_at_a_follower_go_once_it_serves_and_are_answered_by_its_leader() {
    let mut n = synced();
    let (a, b) = (ClientRef::local(70), ClientRef::local(71));
    let mut out = Out::new();
    n.on_client(Time::ZERO, a, get("k"), &mut out);
    n.on_client(Time::ZERO, b, get("k"), &mut out);
    assert!(
        sent(&out.drain().collect::<Vec<_>>()).is_empty(),
        "not serving yet"
    );
    let cmds = hear(&mut n, 3, Msg::Commit { epoch: 2, index: 0 });
    let rids: Vec<u64> = (sent(&cmds).into_iter())
        .filter_map(|(to, m)| match m {
            Msg::ReadIndex { epoch: 2, rid } if to == 3 => Some(rid),
            _ => None,
        })
        .collect();
    assert_eq!(rids.len(), 2, "{cmds:?}");
    assert_ne!(rids[0], rids[1]);
    let replies = |cmds: &Cmds| -> Vec<u64> {
        (cmds.iter())
            .filter_map(|c| match c {
                Command::Reply { client, .. } | Command::ReplyNow { client, .. } => Some(client.id),
                _ => None,
            })
            .collect()
    };
    let ok = |epoch, rid| Msg::ReadIndexOk {
        epoch,
        rid,
        index: 0,
    };
    assert!(
        replies(&hear(&mut n, 2, ok(2, rids[0]))).is_empty(),
        "not our leader"
    );
    assert!(
        replies(&hear(&mut n, 3, ok(1, rids[0]))).is_empty(),
        "another epoch"
    );
    assert_eq!(replies(&hear(&mut n, 3, ok(2, rids[0]))), vec![70]);
    assert_eq!(replies(&hear(&mut n, 3, ok(2, rids[1]))), vec![71]);
}

/// `read=local` answers from the server's state, but only while it serves:
/// a server in election knows of no committed state to answer from.
#[test]
fn a_local_read_is_refused_while_the_server_does_not_serve() {
    use super::node::ReadMode;
    let cfg = Config {
        read: ReadMode::Local,
        ..Config::default()
    };
    let mut n = ZabNode::new(1, &[1, 2, 3], 1, cfg);
    n.on_start(Time::ZERO, &mut Out::new());
    let mut out = Out::new();
    n.on_client(Time::ZERO, ClientRef::local(5), get("k"), &mut out);
    let cmds: Vec<_> = out.drain().collect();
    assert!(
        matches!(
            &cmds[..],
            [Command::ReplyNow {
                resp: crate::types::Response::Failed(crate::types::OpError::NotLeader { .. }),
                ..
            }]
        ),
        "{cmds:?}"
    );
}
