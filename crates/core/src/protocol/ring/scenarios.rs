//! Multi-server scenarios on the in-memory harness ([`super::testing::Net`]):
//! the rules of seed 004 §3 end to end, crashes included.

use super::bugs::InjectedBug;
use super::msg::Msg;
use super::node::RingConfig;
use super::testing::*;
use crate::types::{OpId, Request, Response};
use bytes::Bytes;

fn net(n: u32) -> Net {
    Net::new(n, RingConfig::default(), None)
}
fn op(client: u64, seq: u64) -> OpId {
    OpId { client, seq }
}
/// The ring messages (no credits) on the wire.
fn pending(net: &Net) -> usize {
    (net.nodes.iter())
        .filter(|(n, _)| !net.dead.contains(n))
        .map(|(_, node)| node.register(b"k").map_or(0, |r| r.pending.len()))
        .sum()
}

#[test]
fn a_write_travels_the_ring_twice_and_is_acked() {
    // §4.1: N pre-write hops, N write hops, then the ack.
    let mut net = net(3);
    let w = net.ask(1, put("v"), OpId::NONE);
    let mut hops = 0;
    while net.answer(w).is_none() {
        hops += usize::from(matches!(net.wire.front(), Some((_, _, m)) if m.entry().is_some()));
        assert!(net.step());
    }
    assert_eq!(hops, 6);
    assert_eq!(net.answer(w), Some(Response::Done));
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    for (_, t, v) in net.registers() {
        assert_eq!((t, v.as_deref()), (tag(1, 1), Some(&b"v"[..])));
    }
    assert!(net
        .nodes
        .values()
        .all(|n| n.register(b"k").unwrap().pending.is_empty()));
}

#[test]
fn a_read_is_parked_behind_a_pending_pre_write_and_released_by_its_write() {
    // pc 76-84 and Figure 2: s3 waits, s5 answers at once.
    let mut net = net(3);
    net.ask(1, put("v"), OpId::NONE);
    net.step(); // the pre-write reaches 2, which forwards it: pending there
    let parked = net.ask(2, get(), OpId::NONE);
    let free = net.ask(3, get(), OpId::NONE);
    assert_eq!(net.answer(parked), None);
    assert_eq!(net.answer(free), Some(Response::Value(None)));
    net.run_until(|n| n.node(2).register(b"k").unwrap().tag == tag(1, 1));
    assert_eq!(net.answer(parked), Some(value("v")));
    assert_eq!(net.node(2).counters.parked_reads, 1);
}

/// Read inversion (lines 197-201): the value is read at the origin once
/// it applied it, then a later read at a server still holding the
/// pre-write must not return the old value.
fn read_inversion(bug: Option<InjectedBug>) -> (Option<Response>, Option<Response>) {
    let mut net = Net::new(3, RingConfig::default(), bug);
    net.ask(1, put("v"), OpId::NONE);
    net.run_until(|n| n.node(1).register(b"k").is_some_and(|r| r.tag == tag(1, 1)));
    let first = net.ask(1, get(), OpId::NONE);
    let later = net.ask(3, get(), OpId::NONE);
    (net.answer(first), net.answer(later))
}

#[test]
fn the_pre_write_prevents_read_inversion_and_the_bug_shows_it() {
    let (first, later) = read_inversion(None);
    assert_eq!(first, Some(value("v")));
    assert_eq!(later, None, "parked until the write arrives");
    let (first, later) = read_inversion(Some(InjectedBug::ReadNoWait));
    assert_eq!(first, Some(value("v")));
    assert_eq!(
        later,
        Some(Response::Value(None)),
        "the old value after the new"
    );
}

#[test]
fn concurrent_writes_from_two_servers_end_in_the_same_order_everywhere() {
    // Both tags are [1, i]: the higher writer id wins at every server.
    let mut net = net(3);
    let a = net.ask(1, put("a"), OpId::NONE);
    let b = net.ask(2, put("b"), OpId::NONE);
    let r = net.ask(3, get(), OpId::NONE);
    net.steps(2);
    let parked = net.ask(3, get(), OpId::NONE);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(a), Some(Response::Done));
    assert_eq!(net.answer(b), Some(Response::Done));
    assert_eq!(net.answer(r), Some(Response::Value(None)));
    assert_eq!(
        net.answer(parked),
        Some(value("b")),
        "waits for the highest pending"
    );
    for (_, t, v) in net.registers() {
        assert_eq!((t, v.as_deref()), (tag(1, 2), Some(&b"b"[..])));
    }
    // A later write is tagged above both (pc 23).
    let c = net.ask(1, put("c"), OpId::NONE);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(c), Some(Response::Done));
    assert!(net.registers().iter().all(|(_, t, _)| *t == tag(2, 1)));
}

#[test]
fn a_crashed_successor_is_skipped_and_what_it_held_is_re_sent() {
    // pc 85-92: 2 dies holding 1's pre-write; 1 re-sends it to 3.
    let mut net = net(3);
    let w = net.ask(1, put("v"), OpId::NONE);
    net.step(); // 2 has it and forwarded it to 3
    net.crash(2); // ... on a wire that is lost
    assert_eq!(net.node(1).successor_id(), 3);
    assert!(net.node(1).counters.resent >= 1);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(w), Some(Response::Done));
    for (_, t, _) in net.registers() {
        assert_eq!(t, tag(1, 1));
    }
    // The ring of two keeps working.
    let w2 = net.ask(3, put("w"), OpId::NONE);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(w2), Some(Response::Done));
    assert!(net
        .registers()
        .iter()
        .all(|(_, _, v)| v.as_deref() == Some(&b"w"[..])));
}

/// 1 starts a write and crashes once its pre-write reached 2; a read at 2
/// waits on that pre-write.
fn origin_crash(bug: Option<InjectedBug>) -> (Net, crate::types::ClientRef) {
    let mut net = Net::new(3, RingConfig::default(), bug);
    net.ask(1, put("v"), OpId::NONE);
    net.step();
    let read = net.ask(2, get(), OpId::NONE);
    net.crash(1);
    (net, read)
}

#[test]
fn a_crashed_origins_writes_are_taken_over_by_its_predecessor() {
    // (a): 3 precedes 1, converts the orphan pre-write and ends its write.
    let (mut net, read) = origin_crash(None);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(read), Some(value("v")));
    assert_eq!(net.node(3).counters.taken_over, 1);
    for (_, t, _) in net.registers() {
        assert_eq!(t, tag(1, 1));
    }
    for n in [2, 3] {
        assert_eq!(net.node(n).queues.nb_msg.get(&1), None, "(b)");
    }
    let (mut net, read) = origin_crash(Some(InjectedBug::NoTakeover));
    net.settle();
    assert_eq!(net.answer(read), None, "the read stalls");
    assert_eq!(pending(&net), 2, "on an orphan pending for ever");
}

#[test]
fn the_taker_crashing_too_passes_the_takeover_on() {
    let (mut net, read) = origin_crash(None);
    net.crash(3);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(read), Some(value("v")));
    assert_eq!(net.node(2).counters.taken_over, 1);
    assert_eq!(net.node(2).successor_id(), 2, "alone");
}

#[test]
fn a_retried_write_is_applied_once() {
    // (c) The retry reaches 3 after the original's pre-write: it waits.
    let mut net = net(3);
    let x = op(77, 1);
    let first = net.ask(1, put("a"), x);
    net.steps(2);
    let retry = net.ask(3, put("a"), x);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(first), Some(Response::Done));
    assert_eq!(net.answer(retry), Some(Response::Done));
    assert_eq!(net.node(3).counters.deduplicated, 1);
    assert!(net.nodes.values().all(|n| n.own.is_empty()));
    assert!(
        net.registers().iter().all(|(_, t, _)| *t == tag(1, 1)),
        "one tag"
    );
    // A retry after completion is answered at once, with no message.
    let late = net.ask(2, put("a"), x);
    assert_eq!(net.answer(late), Some(Response::Done));
    assert!(net.wire.is_empty());
    assert_eq!(net.node(2).counters.deduplicated, 1, "counted");
}

#[test]
fn a_retry_that_overtakes_the_original_is_voided_by_the_lower_tag() {
    // The retry at 3 starts a second copy before the original reaches 3:
    // tags [1,1] and [1,3]; the higher is voided and never applied.
    let mut net = net(3);
    let x = op(77, 1);
    let first = net.ask(1, put("a"), x);
    let retry = net.ask(3, put("a"), x);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(first), Some(Response::Done));
    assert_eq!(net.answer(retry), Some(Response::Done));
    assert!(net.nodes.values().map(|n| n.counters.voided).sum::<u64>() >= 1);
    for (_, t, _) in net.registers() {
        assert_eq!(t, tag(1, 1), "[1,3] was never applied");
    }
    assert!(net
        .nodes
        .values()
        .all(|n| n.register(b"k").unwrap().pending.is_empty()));
    let later = net.ask(2, put("b"), op(78, 1));
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(later), Some(Response::Done));
    assert!(net
        .registers()
        .iter()
        .all(|(_, _, v)| v.as_deref() == Some(&b"b"[..])));
}

/// Servers 2 and 3 keep 30 writes each queued, 1 has one: how many writes
/// of the others complete before 1's does (window 1: one message in flight
/// per link, as in the seed's rounds).
fn writes_before_ones(bug: Option<InjectedBug>) -> usize {
    let cfg = RingConfig {
        window: 1,
        ..RingConfig::default()
    };
    let mut net = Net::new(3, cfg, bug);
    let mut others = Vec::new();
    for i in 0..30 {
        others.push(net.ask(2, put(&format!("b{i}")), OpId::NONE));
        others.push(net.ask(3, put(&format!("c{i}")), OpId::NONE));
    }
    net.steps(20); // the ring is busy before 1's client asks
    let mine = net.ask(1, put("a"), OpId::NONE);
    net.run_until(|n| n.answer(mine).is_some());
    others.iter().filter(|c| net.answer(**c).is_some()).count()
}

#[test]
fn nb_msg_gives_each_server_its_share_and_fifo_forwarding_starves_one() {
    let fair = writes_before_ones(None);
    let starved = writes_before_ones(Some(InjectedBug::FifoForwarding));
    assert!(fair <= 10, "nb_msg: 1's write waits for {fair} others");
    assert!(
        starved >= 50,
        "forward-first: 1's write waits for {starved} others"
    );
}

#[test]
fn credits_bound_the_messages_in_flight() {
    let cfg = RingConfig {
        window: 2,
        ..RingConfig::default()
    };
    let mut net = Net::new(2, cfg, None);
    for i in 0..5 {
        net.ask(1, put(&format!("v{i}")), OpId::NONE);
    }
    let to_2 = |n: &Net| {
        n.wire
            .iter()
            .filter(|(_, t, m)| *t == 2 && m.entry().is_some())
            .count()
    };
    assert_eq!(to_2(&net), 2, "a window of 2");
    net.step();
    assert!(matches!(net.wire.back(), Some((2, 1, Msg::PreWrite(_)))));
    net.step();
    assert!(net
        .wire
        .iter()
        .any(|(_, _, m)| matches!(m, Msg::Credit { received: 1 })));
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.replies.len(), 5);
}

/// Tags are unique per key only: a server's writes to two keys can share
/// one, and each must still complete (the sim found `own` keyed by tag).
#[test]
fn two_keys_writes_with_the_same_tag_both_complete() {
    let mut net = net(3);
    let a = net.ask(1, put("a"), OpId::NONE);
    let b = net.ask(
        1,
        Request::Put {
            key: Bytes::from("k2"),
            value: Bytes::from("b"),
        },
        OpId::NONE,
    );
    net.settle();
    assert_eq!(net.answer(a), Some(Response::Done));
    assert_eq!(net.answer(b), Some(Response::Done));
}

/// The value of [`key`] at every server in the view.
fn values(net: &Net) -> Vec<Option<Bytes>> {
    let serving = net.serving();
    (net.registers().into_iter())
        .filter(|(n, _, _)| serving.contains(n))
        .map(|(_, _, v)| v)
        .collect()
}

#[test]
fn a_restarted_server_rejoins_and_serves_reads_and_writes_again() {
    // (d): 2 crashes, misses a write, restarts empty and outside the view:
    // it refuses until 1 welcomes it back with the state, then serves.
    let mut net = net(3);
    let a = net.ask(1, put("a"), op(1, 1));
    net.settle();
    net.crash(2);
    let b = net.ask(3, put("b"), op(1, 2));
    net.settle();
    net.restart(2);
    assert!(net.node(2).is_outside());
    let early = net.ask(2, get(), OpId::NONE);
    assert!(matches!(net.answer(early), Some(Response::Failed(e)) if e.is_definite()));
    net.settle();
    assert!(!net.node(2).is_outside(), "welcomed back");
    assert_eq!(net.node(1).counters.joins_accepted, 1);
    assert_eq!(
        (net.node(1).successor_id(), net.node(2).successor_id()),
        (2, 3)
    );
    assert_eq!(
        net.node(3).counters.views_installed,
        1,
        "the ViewChange went round"
    );
    let read = net.ask(2, get(), OpId::NONE);
    assert_eq!(net.answer(read), Some(value("b")), "the write it missed");
    let c = net.ask(2, put("c"), op(1, 3));
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    for w in [a, b, c] {
        assert_eq!(net.answer(w), Some(Response::Done));
    }
    assert!(values(&net).iter().all(|v| v.as_deref() == Some(&b"c"[..])));
    // A retry of an operation applied before the join is known there.
    let retry = net.ask(2, put("b"), op(1, 2));
    assert_eq!(net.answer(retry), Some(Response::Done));
    assert!(net.wire.is_empty(), "deduplicated from the snapshot");
    // It can crash again, and come back again.
    net.crash(2);
    net.restart(2);
    net.settle();
    let read = net.ask(2, get(), OpId::NONE);
    assert_eq!(net.answer(read), Some(value("c")));
}

#[test]
fn a_write_in_flight_during_the_join_is_not_lost_and_reads_at_the_joiner_wait_for_it() {
    let mut net = net(3);
    net.crash(2);
    let x = net.ask(1, put("x"), op(1, 1)); // pre-write 1 -> 3
    net.restart(2); // Join 2 -> 1
    let y = net.ask(3, put("y"), op(2, 1)); // pre-write 3 -> 1
    net.run_until(|n| n.node(1).successor_id() == 2); // 1 takes the Join
    let at_1 = net.node(1).register(b"k").unwrap();
    assert!(
        at_1.pending.contains_key(&tag(1, 1)),
        "x left 1 before the join"
    );
    assert_eq!(net.answer(x), None);
    net.run_until(|n| !n.node(2).is_outside());
    let read = net.ask(2, get(), OpId::NONE);
    assert_eq!(
        net.answer(read),
        None,
        "x is pending at the joiner: no old value"
    );
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(x), Some(Response::Done));
    assert_eq!(net.answer(y), Some(Response::Done));
    let vals = values(&net);
    assert_eq!(vals.len(), 3);
    assert!(vals.windows(2).all(|w| w[0] == w[1]), "{vals:?}");
    assert!(matches!(net.answer(read), Some(Response::Value(Some(_)))));
}

#[test]
fn a_join_sent_to_a_server_still_outside_waits_until_that_one_is_in() {
    // 1 restarts and asks 3; 2 restarts and asks 1, which is outside: 1
    // keeps the Join and passes it on to 3, which holds 1's Join until it
    // knows 2 is joining too (`blocked`), then lets both in.
    let mut net = net(3);
    net.crash(1);
    net.restart(1);
    net.crash(2);
    net.restart(2);
    net.settle();
    assert!(net.nodes.values().all(|n| !n.is_outside()));
    let accepted: u64 = (1..=3).map(|i| net.node(i).counters.joins_accepted).sum();
    // A copy of a Join that raced its Welcome brings a second Welcome
    // (`welcome_again`), which the joiner, in by then, ignores.
    assert!((2..=3).contains(&accepted), "{accepted}");
    let succ: Vec<_> = (1..=3).map(|i| net.node(i).successor_id()).collect();
    assert_eq!(succ, vec![2, 3, 1]);
    let w = net.ask(2, put("v"), OpId::NONE);
    net.settle();
    assert_eq!(net.answer(w), Some(Response::Done));
    assert!(values(&net).iter().all(|v| v.as_deref() == Some(&b"v"[..])));
}

#[test]
fn an_old_lifes_pre_write_is_taken_over_by_its_new_life_not_taken_as_its_own() {
    // 2 starts a write and crashes with it pending at 3; it restarts and
    // is welcomed back before 1 (its old home's taker) sees the pre-write:
    // the new life ends the old life's round as a taker.
    let mut net = net(3);
    net.ask(2, put("old"), OpId::NONE);
    net.step(); // at 3, forwarded to 1
    let parked = net.ask(3, get(), OpId::NONE);
    net.crash(2); // 1 takes over what it holds; the copy to 1 may be in flight
    net.restart(2);
    net.settle();
    assert_eq!(pending(&net), 0, "nothing left pending");
    assert_eq!(net.answer(parked), Some(value("old")));
    let vals = values(&net);
    assert!(
        vals.iter().all(|v| v.as_deref() == Some(&b"old"[..])),
        "{vals:?}"
    );
}
