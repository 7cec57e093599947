//! Membership change (`reconfig.rs`, `members.rs`): joins, removals, the
//! leader's hand-off, a reconfiguration racing a leader crash, refusals
//! and what survives a restart.

use super::members::Members;
use super::node::{Config, ZabNode};
use super::testing::{put, Cluster};
use crate::protocol::contract::Protocol;
use crate::types::{NodeId, Response};

fn cfg(ids: &[NodeId]) -> Members {
    Members::new(ids).expect("a configuration")
}

/// Ask the leader for `new`; returns the entry's index.
fn reconfig(c: &mut Cluster, leader: NodeId, new: &[NodeId]) -> Result<u64, String> {
    let res = c.act(leader, |n, now, out| n.reconfig(now, new, out));
    c.run();
    res.expect("up")
}

fn committed_everywhere(c: &Cluster, want: &Members) {
    for n in c.nodes.iter().flatten() {
        assert_eq!(n.committed_config(), want, "n{}", n.id);
        assert_eq!(n.configs().len(), 1, "n{}: nothing pending", n.id);
    }
}

fn write_ok(c: &mut Cluster, at: NodeId, k: &str) -> bool {
    c.ask(at, put(k, "v")) == Some(Response::Done)
}

fn node(c: &Cluster, id: NodeId) -> &ZabNode {
    c.node(id)
}

#[test]
fn a_spare_joins_as_a_learner_then_votes_once_the_entry_commits() {
    let mut c = Cluster::with_spares(3, 1, Config::default());
    let l = c.settle();
    assert!(l <= 3, "a spare never leads");
    assert!(!node(&c, 4).voter());
    assert_eq!(node(&c, 4).leader(), Some(l), "it follows as a learner");
    assert!(write_ok(&mut c, 4, "before"), "a learner forwards writes");
    let at = reconfig(&mut c, l, &[1, 2, 3, 4]).expect("taken");
    assert!(at > 0);
    c.tick();
    committed_everywhere(&c, &cfg(&[1, 2, 3, 4]));
    assert!(node(&c, 4).voter());
    assert_eq!(
        node(&c, 4).store().get(b"before").map(|v| &v[..]),
        Some(&b"v"[..])
    );
    // Three of four must now hold a write: with two down, none commits.
    let others: Vec<NodeId> = (1..=4).filter(|&n| n != l).collect();
    c.crash(others[0]);
    assert!(write_ok(&mut c, l, "three of four"));
    c.crash(others[1]);
    assert!(!write_ok(&mut c, l, "two of four"), "a majority of 4 is 3");
}

#[test]
fn a_removed_follower_counts_in_no_quorum() {
    let mut c = Cluster::new(3, Config::default());
    let l = c.settle();
    let f: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
    reconfig(&mut c, l, &[l, f[1]]).expect("taken");
    c.tick();
    committed_everywhere(&c, &cfg(&[l, f[1]]));
    assert!(!node(&c, f[0]).voter());
    assert!(write_ok(&mut c, l, "a"));
    // The removed server is up and following, the remaining one down:
    // no quorum of {l, f1}, whatever f0 ACKs.
    c.crash(f[1]);
    assert!(
        !write_ok(&mut c, l, "b"),
        "committed with a removed server's ACK"
    );
}

#[test]
fn a_removed_leader_hands_off_after_the_commit() {
    let mut c = Cluster::new(3, Config::default());
    let l = c.settle();
    let rest: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
    assert!(write_ok(&mut c, l, "a"));
    reconfig(&mut c, l, &rest).expect("taken");
    assert!(!node(&c, l).voter());
    assert_ne!(
        node(&c, l).role(),
        "leader",
        "it stepped down on the commit"
    );
    let l2 = c.settle();
    assert!(rest.contains(&l2), "the new leader is a member");
    committed_everywhere(&c, &cfg(&rest));
    assert!(
        write_ok(&mut c, l, "b"),
        "the old leader now forwards as a learner"
    );
    assert_eq!(
        node(&c, l2).store().get(b"a").map(|v| &v[..]),
        Some(&b"v"[..])
    );
    // It never runs again: alone with it, the members cannot be outvoted.
    c.crash(rest[0]);
    for _ in 0..40 {
        c.tick();
    }
    assert_ne!(node(&c, l).role(), "leader");
}

/// A reconfiguration pending when its leader crashes: a new leader whose
/// history holds the entry finishes it (with a quorum of old and new),
/// one whose history lacks it drops it, and every server agrees.
#[test]
fn a_reconfiguration_racing_a_leader_crash_is_finished_by_the_next_leader() {
    let mut c = Cluster::with_spares(3, 1, Config::default());
    let l = c.settle();
    let f: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
    // Only f0 gets the entry: a quorum of the old three, not of the new four.
    c.pause(4);
    c.pause(f[1]);
    reconfig(&mut c, l, &[1, 2, 3, 4]).expect("taken");
    assert_eq!(node(&c, l).configs().len(), 2, "pending: old and new");
    assert_eq!(node(&c, f[0]).configs().len(), 2, "logged by f0");
    c.crash(l);
    c.resume(f[1]);
    // f0 and f1 are a quorum of the old configuration, not of the new one
    // f0's log carries (and f0 has the newest history): no leader.
    for _ in 0..30 {
        c.tick();
    }
    for &n in &f {
        assert_eq!(node(&c, n).leader(), None, "n{n} follows or leads");
        assert_eq!(node(&c, n).committed_config(), &cfg(&[1, 2, 3]), "n{n}");
    }
    assert_eq!(node(&c, f[0]).configs().len(), 2, "still pending at f0");
    c.resume(4);
    let l2 = c.settle();
    assert!(f.contains(&l2));
    committed_everywhere(&c, &cfg(&[1, 2, 3, 4]));
    c.restart(l);
    c.settle();
    committed_everywhere(&c, &cfg(&[1, 2, 3, 4]));
}

#[test]
fn a_reconfiguration_no_follower_logged_is_dropped_everywhere() {
    let mut c = Cluster::new(3, Config::default());
    let l = c.settle();
    let f: Vec<NodeId> = (1..=3).filter(|&n| n != l).collect();
    c.pause(f[0]);
    c.pause(f[1]);
    reconfig(&mut c, l, &[l]).expect("taken");
    c.crash(l);
    c.resume(f[0]);
    c.resume(f[1]);
    let l2 = c.settle();
    assert_ne!(l2, l);
    assert!(write_ok(&mut c, l2, "after"));
    c.restart(l);
    c.settle();
    committed_everywhere(&c, &cfg(&[1, 2, 3]));
    assert!(write_ok(&mut c, l, "again"));
}

#[test]
fn reconfigurations_are_refused_where_they_must_be() {
    let mut c = Cluster::with_spares(3, 1, Config::default());
    let l = c.settle();
    let f = (1..=3).find(|&n| n != l).expect("a follower");
    assert!(
        reconfig(&mut c, f, &[1, 2, 3, 4]).is_err(),
        "not the leader"
    );
    assert!(reconfig(&mut c, l, &[1, 2, 3]).is_err(), "no change");
    assert!(
        reconfig(&mut c, l, &[1, 2, 9]).is_err(),
        "an unknown server"
    );
    assert!(reconfig(&mut c, l, &[]).is_err(), "empty");
    c.pause(4);
    c.pause(f);
    reconfig(&mut c, l, &[1, 2, 3, 4]).expect("taken");
    let e = reconfig(&mut c, l, &[1, 2]).expect_err("one at a time");
    assert!(e.contains("in flight"), "{e}");
    assert_eq!(node(&c, l).counters.reconfigs_refused, 4);
    assert_eq!(node(&c, f).counters.reconfigs_refused, 1);
    c.resume(4);
    c.resume(f);
    c.tick();
    committed_everywhere(&c, &cfg(&[1, 2, 3, 4]));
    reconfig(&mut c, l, &[1, 2, 3]).expect("the next one, once committed");
}

/// The configuration is in the log and in snapshots: a restarted server
/// has it in effect before any leader speaks to it.
#[test]
fn the_configuration_survives_a_restart_in_the_log_and_in_snapshots() {
    for every in [1000, 2] {
        let cfg4 = Config {
            snapshot_every: every,
            ..Config::default()
        };
        let mut c = Cluster::with_spares(3, 1, cfg4);
        let l = c.settle();
        reconfig(&mut c, l, &[1, 2, 3, 4]).expect("taken");
        for k in ["a", "b", "c"] {
            assert!(write_ok(&mut c, l, k));
        }
        let f = (1..=4).find(|&n| n != l).expect("a follower");
        c.crash(f);
        c.restart(f);
        let n = node(&c, f);
        // Entries above the snapshot are not known committed after a
        // restart: the configuration is pending there, in effect in the
        // snapshot.
        assert_eq!(
            n.configs().last(),
            Some(&&cfg(&[1, 2, 3, 4])),
            "every {every}"
        );
        assert!(n.voter());
        if every == 2 {
            assert!(n.log().base() > 0, "restored from a snapshot");
            assert_eq!(n.committed_config(), &cfg(&[1, 2, 3, 4]));
        } else {
            assert_eq!(n.committed_config(), &cfg(&[1, 2, 3]));
        }
    }
}

/// What `quorumkv member list` shows: the committed voters, the change
/// in flight with its index until it commits, every server known, the
/// leader; a learner's role says it does not vote.
#[test]
fn the_membership_view_shows_the_change_in_flight_then_the_new_voters() {
    let mut c = Cluster::with_spares(3, 1, Config::default());
    let l = c.settle();
    let v = node(&c, l).membership().expect("zab has a membership");
    assert_eq!(
        (v.node, v.voters.clone(), v.pending.clone()),
        (l, vec![1, 2, 3], None)
    );
    assert_eq!((v.servers.clone(), v.leader), (vec![1, 2, 3, 4], Some(l)));
    assert_eq!(node(&c, 4).role(), "learner");
    assert_eq!(node(&c, 4).membership().unwrap().leader, Some(l));
    // Proposed, not yet delivered anywhere: pending at the leader.
    let at = c.act(l, |n, now, out| {
        n.change_membership(now, &[1, 2, 3, 4], out)
    });
    let at = at.expect("up").expect("taken");
    let v = node(&c, l).membership().unwrap();
    assert_eq!(v.pending, Some((at, vec![1, 2, 3, 4])));
    assert_eq!(v.voters, vec![1, 2, 3]);
    c.run();
    c.tick();
    let v = node(&c, l).membership().unwrap();
    assert_eq!(
        (v.voters.clone(), v.pending.clone()),
        (vec![1, 2, 3, 4], None)
    );
    assert!(v.commit >= at);
    assert_eq!(node(&c, 4).role(), "follower");
    // A follower refuses: only the leader proposes.
    let f = (1..=4).find(|&n| n != l).unwrap();
    let r = c.act(f, |n, now, out| n.change_membership(now, &[1, 2, 3], out));
    assert!(r
        .expect("up")
        .unwrap_err()
        .contains("only the established leader"));
}
