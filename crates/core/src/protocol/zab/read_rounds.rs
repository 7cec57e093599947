//! The read-index rule, checked from the messages (`ProtocolDef::observe`):
//! **a leader hands out a read index only after a quorum, itself
//! included, answered a PING round it began after the read arrived**
//! (ZooKeeper's sync, Raft's ReadIndex; `reads.rs`). Handing out is a
//! READINDEXOK it sends, or a client GET (`read=index`) it answers itself.
//!
//! Only what passed is used, never the leader's bookkeeping (the round a
//! read waits for is what a bug gets wrong): per server, the last PING
//! round it sent in its epoch when each read arrived, and per peer the
//! highest round of that epoch whose PONG reached it. A PONG of a later
//! round answers a PING that left after the read arrived. Wherever the
//! simulator's view is coarser (a PING held behind a sync leaves later
//! than its round began; a PONG the leader ignores), the check only gets
//! more lenient: a correct leader never fails it.

use super::members::Members;
use super::msg::Msg;
use super::node::{ReadMode, ZabNode};
use crate::protocol::contract::Seen;
use crate::quorum::majority;
use crate::types::{Peer, Request, Response};
use std::collections::HashMap;

/// A read as it arrived: the epoch it is for, the server's leadership
/// then and the last PING round it had sent in it.
#[derive(Clone, Copy, Debug)]
struct Arrived {
    epoch: u64,
    lead: u64,
    round: u64,
}

impl Arrived {
    /// The last round of `s`'s current leadership of `epoch` begun before
    /// the read arrived (0: none).
    fn after(self, s: &Server, epoch: u64) -> u64 {
        if self.epoch == epoch && s.epoch == epoch && self.lead == s.lead {
            self.round
        } else {
            0
        }
    }
}

/// What one server life was seen to do.
#[derive(Debug, Default)]
struct Server {
    /// The epoch of its last PING, and the highest round sent in it.
    epoch: u64,
    round: u64,
    /// Its leaderships so far (a new one where PING rounds start again).
    lead: u64,
    /// Per server index: the highest round of `epoch` sent to it. Rounds
    /// to one peer never go back within a leadership; across peers they
    /// may (a PING held behind a sync leaves after a later round's PINGs
    /// to others).
    sent_to: Vec<u64>,
    /// Per server index: the highest round of `epoch` whose PONG from it
    /// reached this server.
    ponged: Vec<u64>,
    /// READINDEX that reached it, not answered yet, by (asker index, rid).
    /// The first arrival of a key stays (a restarted asker numbers its
    /// reads from 1 again): the lenient choice.
    asked: HashMap<(usize, u64), Arrived>,
    /// READINDEXOK that reached it.
    oks: u64,
    /// Client GETs (`read=index`) that reached it, by request id, with
    /// `oks` then: one answered with no READINDEXOK since was served on
    /// its own read index.
    gets: HashMap<u64, (Arrived, u64)>,
}

impl Server {
    fn arrived(&self, epoch: u64) -> Arrived {
        let round = if self.epoch == epoch { self.round } else { 0 };
        Arrived {
            epoch,
            lead: self.lead,
            round,
        }
    }

    /// Servers (this one included) that answered a round of `epoch` later
    /// than the one `a` arrived after, by index.
    fn answered(&self, me: usize, epoch: u64, a: Arrived) -> Vec<usize> {
        if self.epoch != epoch {
            return vec![me];
        }
        let after = a.after(self, epoch);
        let mut v: Vec<usize> = (self.ponged.iter().enumerate())
            .filter(|&(j, &r)| j != me && r > after)
            .map(|(j, _)| j)
            .collect();
        v.push(me);
        v
    }
}

/// Whether the servers (by index) in `who` are a quorum for server `i`: a
/// majority of any configuration it had in effect (a step may commit or
/// propose one: any is the lenient choice), or of all `n` if never told.
fn quorum_in(configs: &[Vec<Members>], i: usize, n: usize, who: &[usize]) -> bool {
    let has = |id: u32| who.contains(&(id as usize).wrapping_sub(1));
    match configs.get(i).filter(|c| !c.is_empty()) {
        Some(cfgs) => cfgs.iter().any(|m| m.majority_in(has)),
        None => who.len() >= majority(n),
    }
}

/// The check's state over a run.
#[derive(Debug, Default)]
pub struct ReadRounds {
    servers: Vec<Server>,
    /// Per server index: the configurations in effect there at the start
    /// of its step (empty: never told, a majority of all `n` servers).
    configs: Vec<Vec<Members>>,
}

impl ReadRounds {
    /// Server `i` now has `cfgs` in effect (membership change).
    pub fn set_configs(&mut self, i: usize, cfgs: &[Members]) {
        if self.configs.len() <= i {
            self.configs.resize_with(i + 1, Vec::new);
        }
        self.configs[i] = cfgs.to_vec();
    }

    /// Server `i` crashed: its next life starts over.
    pub fn crashed(&mut self, i: usize) {
        if let Some(s) = self.servers.get_mut(i) {
            *s = Server::default();
        }
    }

    /// Take in what passed; `Err` when a read index was handed out early.
    pub fn observe(&mut self, n: usize, seen: Seen<'_, ZabNode, Msg>) -> Result<(), String> {
        if self.servers.len() < n {
            self.servers.resize_with(n, Server::default);
        }
        match seen {
            Seen::Sent { from, to, msg } => self.sent(n, from, to, msg),
            Seen::Delivered { to, from, msg } => {
                self.delivered(n, to, from, msg);
                Ok(())
            }
            Seen::Request {
                to,
                node,
                cref,
                req,
            } => {
                // Only a GET with `read=index` takes a read index for sure
                // (znode reads are checked at their READINDEXOK).
                if matches!(req, Request::Get { .. }) && node.cfg.read == ReadMode::Index {
                    let s = &mut self.servers[to];
                    let a = s.arrived(s.epoch);
                    s.gets.entry(cref.id).or_insert((a, s.oks));
                }
                Ok(())
            }
            Seen::Reply { from, cref, resp } => self.replied(n, from, cref.id, resp),
        }
    }

    fn delivered(&mut self, n: usize, to: usize, from: Peer, msg: &Msg) {
        let Peer::Node(id) = from else {
            return;
        };
        let Some(j) = (id as usize).checked_sub(1).filter(|&j| j < n) else {
            return;
        };
        let s = &mut self.servers[to];
        match *msg {
            Msg::Pong { epoch, round, .. } if epoch == s.epoch => {
                if s.ponged.len() < n {
                    s.ponged.resize(n, 0);
                }
                s.ponged[j] = s.ponged[j].max(round);
            }
            Msg::ReadIndex { epoch, rid } => {
                let a = s.arrived(epoch);
                s.asked.entry((j, rid)).or_insert(a);
            }
            Msg::ReadIndexOk { .. } => s.oks += 1,
            _ => {}
        }
    }

    fn sent(&mut self, n: usize, from: usize, to: Peer, msg: &Msg) -> Result<(), String> {
        let s = &mut self.servers[from];
        let peer = match to {
            Peer::Node(id) => (id as usize).checked_sub(1).filter(|&j| j < n),
            _ => None,
        };
        match *msg {
            Msg::Ping { epoch, round, .. } => {
                // A new leadership: rounds start again, and reads asked of
                // older epochs are never answered (`on_read_index`). A
                // round going back within an epoch is one too (a server
                // leading one epoch twice: a bug such as `zab-reuse-epoch`,
                // which other checks name): its reads are forgotten, and a
                // GET that arrived in another leadership counts every
                // round of this one (lenient). Reads asked of a new epoch
                // before its first PING stay (they came after round 0).
                // Going back is per peer: a PING held behind a sync may
                // leave after the next round's PINGs to the others (seed
                // 209 of `--opt broadcast=aa` at N = 5, a false alarm).
                let last = peer.and_then(|j| s.sent_to.get(j)).copied();
                let again = epoch == s.epoch && last.is_some_and(|l| round < l);
                if epoch > s.epoch || again {
                    (s.epoch, s.round) = (epoch, 0);
                    s.lead = s.lead.saturating_add(1);
                    s.ponged.iter_mut().for_each(|r| *r = 0);
                    s.sent_to.iter_mut().for_each(|r| *r = 0);
                    s.asked
                        .retain(|_, a| a.epoch > epoch || a.epoch == epoch && !again);
                }
                if epoch == s.epoch {
                    s.round = s.round.max(round);
                    if let Some(j) = peer {
                        if s.sent_to.len() < n {
                            s.sent_to.resize(n, 0);
                        }
                        s.sent_to[j] = s.sent_to[j].max(round);
                    }
                }
                Ok(())
            }
            Msg::ReadIndexOk { epoch, rid, .. } => {
                let Peer::Node(id) = to else {
                    return Ok(());
                };
                let j = (id as usize).saturating_sub(1);
                let Some(a) = s.asked.remove(&(j, rid)) else {
                    return Ok(()); // not seen asked (e.g. before a restart): lenient
                };
                let who = s.answered(from, epoch, a);
                let k = who.len();
                if quorum_in(&self.configs, from, n, &who) {
                    return Ok(());
                }
                Err(format!(
                    "zab: a read index is handed out only after a quorum answers a PING round \
                     begun after the read arrived: n{} (epoch {epoch}) answered READINDEX {rid} \
                     of n{id}, which arrived after round {} of the epoch, when {k} of {n} \
                     server(s), itself included, had answered a later round",
                    from + 1,
                    a.after(s, epoch)
                ))
            }
            _ => Ok(()),
        }
    }

    fn replied(&mut self, n: usize, from: usize, id: u64, resp: &Response) -> Result<(), String> {
        let s = &mut self.servers[from];
        let Some((a, oks)) = s.gets.remove(&id) else {
            return Ok(());
        };
        // A follower serves a GET on a READINDEXOK (checked where sent).
        if !matches!(resp, Response::Value(_)) || s.oks != oks {
            return Ok(());
        }
        let who = s.answered(from, s.epoch, a);
        let k = who.len();
        if quorum_in(&self.configs, from, n, &who) {
            return Ok(());
        }
        Err(format!(
            "zab: a read index is handed out only after a quorum answers a PING round begun \
             after the read arrived: n{} (epoch {}) answered a GET that arrived after round {} \
             of the epoch, when {k} of {n} server(s), itself included, had answered a later round",
            from + 1,
            s.epoch,
            a.after(s, s.epoch)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::zab::node::Config;
    use crate::types::{ClientRef, OpId};
    use bytes::Bytes;

    const N: usize = 3;

    fn ping(epoch: u64, round: u64) -> Msg {
        Msg::Ping {
            epoch,
            round,
            commit: 0,
            last: 0,
        }
    }

    fn pong(epoch: u64, round: u64) -> Msg {
        Msg::Pong {
            epoch,
            round,
            last: 0,
        }
    }

    fn send(c: &mut ReadRounds, from: usize, to: u32, msg: &Msg) -> Result<(), String> {
        let to = Peer::Node(to);
        c.observe(N, Seen::Sent { from, to, msg })
    }

    fn deliver(c: &mut ReadRounds, to: usize, from: u32, msg: &Msg) {
        let from = Peer::Node(from);
        let r = c.observe(N, Seen::Delivered { to, from, msg });
        assert_eq!(r, Ok(()));
    }

    /// n1 leads epoch 2 and sent round 3 before n2's READINDEX 7 arrived.
    fn asked_after_round_3() -> ReadRounds {
        let mut c = ReadRounds::default();
        assert_eq!(send(&mut c, 0, 2, &ping(2, 3)), Ok(()));
        deliver(&mut c, 0, 2, &pong(2, 3));
        deliver(&mut c, 0, 2, &Msg::ReadIndex { epoch: 2, rid: 7 });
        c
    }

    fn ok(rid: u64) -> Msg {
        Msg::ReadIndexOk {
            epoch: 2,
            rid,
            index: 5,
        }
    }

    #[test]
    fn an_answer_before_a_later_round_is_caught() {
        let mut c = asked_after_round_3();
        let e = send(&mut c, 0, 2, &ok(7)).unwrap_err();
        assert!(e.contains("READINDEX 7 of n2"), "{e}");
        assert!(e.contains("1 of 3 server(s)"), "{e}");
    }

    #[test]
    fn an_answer_after_a_quorum_answered_a_later_round_passes() {
        let mut c = asked_after_round_3();
        assert_eq!(send(&mut c, 0, 2, &ping(2, 4)), Ok(()));
        deliver(&mut c, 0, 3, &pong(2, 3));
        assert!(send(&mut c, 0, 2, &ok(7)).is_err(), "round 3 began before");
        let mut c = asked_after_round_3();
        assert_eq!(send(&mut c, 0, 2, &ping(2, 4)), Ok(()));
        deliver(&mut c, 0, 3, &pong(2, 4));
        assert_eq!(send(&mut c, 0, 2, &ok(7)), Ok(()));
        assert_eq!(send(&mut c, 0, 2, &ok(7)), Ok(()), "answered once: unknown");
    }

    #[test]
    fn pongs_of_an_older_epoch_do_not_count() {
        let mut c = ReadRounds::default();
        assert_eq!(send(&mut c, 0, 2, &ping(1, 9)), Ok(()));
        deliver(&mut c, 0, 2, &Msg::ReadIndex { epoch: 2, rid: 1 });
        deliver(&mut c, 0, 2, &pong(1, 9));
        assert_eq!(send(&mut c, 0, 2, &ping(2, 1)), Ok(()));
        let e = send(&mut c, 0, 2, &ok(1)).unwrap_err();
        assert!(e.contains("arrived after round 0 of the epoch"), "{e}");
        deliver(&mut c, 0, 2, &Msg::ReadIndex { epoch: 2, rid: 2 });
        deliver(&mut c, 0, 2, &pong(2, 1));
        assert!(send(&mut c, 0, 2, &ok(2)).is_err(), "round 1 began before");
        c.crashed(0);
        assert_eq!(
            send(&mut c, 0, 2, &ok(2)),
            Ok(()),
            "a new life asked nothing"
        );
    }

    #[test]
    fn a_second_leadership_of_one_epoch_starts_its_rounds_again() {
        let mut c = asked_after_round_3();
        assert_eq!(send(&mut c, 0, 2, &ping(2, 1)), Ok(()));
        assert_eq!(send(&mut c, 0, 2, &ok(7)), Ok(()), "asked of the last one");
        deliver(&mut c, 0, 2, &Msg::ReadIndex { epoch: 2, rid: 8 });
        deliver(&mut c, 0, 2, &pong(2, 1));
        assert!(send(&mut c, 0, 2, &ok(8)).is_err(), "round 1 began before");
        deliver(&mut c, 0, 2, &Msg::ReadIndex { epoch: 2, rid: 9 });
        assert_eq!(send(&mut c, 0, 2, &ping(2, 2)), Ok(()));
        deliver(&mut c, 0, 2, &pong(2, 2));
        assert_eq!(send(&mut c, 0, 2, &ok(9)), Ok(()));
    }

    #[test]
    fn a_ping_held_behind_a_sync_that_leaves_after_the_next_round_is_no_new_leadership() {
        // A GET waits at n1, leader of epoch 2 after round 3. Round 4 goes
        // to n2 while the round 3 PING to n3 waits behind a sync and
        // leaves after it (seed 209 of `--opt broadcast=aa` at N = 5): n2's
        // PONG of round 4 still counts, so n1 and n2 are a quorum.
        let mut c = asked_after_round_3();
        get(&mut c, 0, 1, ReadMode::Index);
        assert_eq!(send(&mut c, 0, 2, &ping(2, 4)), Ok(()));
        deliver(&mut c, 0, 2, &pong(2, 4));
        assert_eq!(send(&mut c, 0, 3, &ping(2, 3)), Ok(()));
        assert_eq!(send(&mut c, 0, 3, &ping(2, 4)), Ok(()));
        assert_eq!(value(&mut c, 0, 1), Ok(()));
        // The same round to the same peer again (a re-send) is no new
        // leadership either: n2's PONG of round 4 still counts.
        get(&mut c, 0, 2, ReadMode::Index);
        assert_eq!(send(&mut c, 0, 2, &ping(2, 5)), Ok(()));
        deliver(&mut c, 0, 2, &pong(2, 5));
        assert_eq!(send(&mut c, 0, 2, &ping(2, 5)), Ok(()));
        assert_eq!(value(&mut c, 0, 2), Ok(()));
    }

    fn get(c: &mut ReadRounds, to: usize, id: u64, read: ReadMode) {
        let node = ZabNode::new(
            1,
            &[1, 2, 3],
            1,
            Config {
                read,
                ..Config::default()
            },
        );
        let cref = ClientRef {
            id,
            session: 1,
            op: OpId { client: 1, seq: id },
        };
        let req = Request::Get {
            key: Bytes::from_static(b"k"),
        };
        let seen = Seen::Request {
            to,
            node: &node,
            cref,
            req: &req,
        };
        assert_eq!(c.observe(N, seen), Ok(()));
    }

    fn value(c: &mut ReadRounds, from: usize, id: u64) -> Result<(), String> {
        let cref = ClientRef {
            id,
            session: 1,
            op: OpId { client: 1, seq: id },
        };
        let resp = Response::Value(None);
        c.observe(
            N,
            Seen::Reply {
                from,
                cref,
                resp: &resp,
            },
        )
    }

    #[test]
    fn a_get_the_leader_serves_at_once_is_caught_unless_local() {
        let mut c = asked_after_round_3();
        get(&mut c, 0, 1, ReadMode::Index);
        let e = value(&mut c, 0, 1).unwrap_err();
        assert!(e.contains("answered a GET"), "{e}");
        get(&mut c, 0, 2, ReadMode::Local);
        assert_eq!(value(&mut c, 0, 2), Ok(()), "read=local promises no index");
        get(&mut c, 0, 3, ReadMode::Index);
        assert_eq!(send(&mut c, 0, 2, &ping(2, 4)), Ok(()));
        deliver(&mut c, 0, 3, &pong(2, 4));
        assert_eq!(value(&mut c, 0, 3), Ok(()));
    }

    #[test]
    fn a_get_a_follower_serves_on_a_read_index_ok_passes() {
        let mut c = ReadRounds::default();
        get(&mut c, 1, 1, ReadMode::Index);
        assert!(value(&mut c, 1, 1).is_err(), "no round, no READINDEXOK");
        get(&mut c, 1, 2, ReadMode::Index);
        deliver(&mut c, 1, 1, &ok(1));
        assert_eq!(value(&mut c, 1, 2), Ok(()));
    }
}
