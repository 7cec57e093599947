//! Reads. `read=index` (default): the leader notes its commit index, then
//! confirms it still leads with a quorum round (a PING round whose PONGs
//! come from a quorum of followers still in its epoch); the read is served
//! once the serving server applied that index. A follower asks the leader
//! for the index (READINDEX) and serves the read itself. `read=log`
//! broadcasts reads like writes (`node.rs`). `read=local` answers from the
//! server's state at once: ZooKeeper's sequentially consistent reads
//! (seed 003 line 535), not linearizable; znode reads then still wait for
//! their connection's earlier writes (ZooKeeper's FIFO client order).

use super::msg::Msg;
use super::node::{ReadMode, Role, ZabNode, O};
use super::roles::{Asker, FStage, Pending, Read};
use super::state_machine::StateMachine;
use crate::types::{ClientRef, NodeId, OpError, Peer, Response, Time};
use bytes::Bytes;

impl ZabNode {
    fn serving(&self) -> bool {
        self.leader().is_some()
    }

    pub(super) fn client_read(
        &mut self,
        client: ClientRef,
        op: Bytes,
        deadline: Time,
        out: &mut O,
    ) {
        let local = self.cfg.read == ReadMode::Local && !super::znode_sm::needs_index(&op);
        if local && super::znode_sm::is_znode(&op) && self.serving() {
            // ZooKeeper's local read: this server's tree now, once the
            // connection's earlier writes are answered (`serve_reads`).
            let (rid, index) = (self.next_rid, Some(self.applied));
            self.next_rid += 1;
            let r = Read {
                client,
                op,
                deadline,
                sent: true,
                index,
            };
            self.reads.mine.insert(rid, r);
            return self.serve_reads(out);
        }
        if local {
            let resp = if self.serving() {
                self.sm.read(&op)
            } else {
                Response::Failed(OpError::NotLeader { hint: None })
            };
            // Our state is what was committed: on a quorum's disks.
            return out.reply_now(client, resp);
        }
        let rid = self.next_rid;
        self.next_rid += 1;
        let r = Read {
            client,
            op,
            deadline,
            sent: false,
            index: None,
        };
        self.reads.mine.insert(rid, r);
        self.send_read(rid, out);
    }

    fn send_read(&mut self, rid: u64, out: &mut O) {
        match &self.role {
            Role::Leading(l) if l.established => {
                self.read_at_leader(Asker::Me(rid), out);
            }
            Role::Following(f) if f.stage == FStage::Serving => {
                let msg = Msg::ReadIndex {
                    epoch: f.epoch,
                    rid,
                };
                out.send_now(Peer::Node(f.leader), msg);
            }
            _ => return,
        }
        if let Some(r) = self.reads.mine.get_mut(&rid) {
            r.sent = true;
        }
    }

    pub(super) fn flush_reads(&mut self, out: &mut O) {
        let waiting: Vec<u64> = (self.reads.mine.iter())
            .filter(|(_, r)| !r.sent)
            .map(|(&k, _)| k)
            .collect();
        for rid in waiting {
            self.send_read(rid, out);
        }
    }

    /// At the leader: note the commit index and the round that must
    /// confirm it (one sent after the read arrived: now, or after the
    /// round in flight).
    fn read_at_leader(&mut self, asker: Asker, out: &mut O) {
        let index = self.read_point();
        let l = self.leading().expect("leading");
        let round = match l.read_round {
            Some(_) => l.ping_round + 1,
            None => {
                let r = self.ping(out);
                self.counters.read_rounds += 1;
                self.leading().expect("leading").read_round = Some(r);
                r
            }
        };
        // The bug: the index is taken as confirmed by the rounds before.
        let round = match self.has_bug(super::bugs::InjectedBug::ReadIndexUnconfirmed) {
            true => 0,
            false => round,
        };
        let p = Pending {
            asker,
            index,
            round,
            arrived: self.now,
        };
        self.reads.at_leader.push(p);
        self.check_read_rounds(out);
    }

    /// The link to `n` closed: forget its reads waiting here. A restarted
    /// server numbers its reads from 1 again, and an answer meant for its
    /// previous life would serve a new read at an old index (a stale read:
    /// sim seed 4756 with `broadcast=ct`).
    pub(super) fn forget_reads_of(&mut self, n: NodeId) {
        (self.reads.at_leader).retain(|p| !matches!(p.asker, Asker::Follower(f, _) if f == n));
    }

    pub(super) fn on_read_index(&mut self, from: NodeId, epoch: u64, rid: u64, out: &mut O) {
        match self.leading() {
            Some(l) if l.established && l.epoch == epoch => {}
            Some(_) => return self.not_in_broadcast(from, out),
            None => return,
        }
        self.read_at_leader(Asker::Follower(from, rid), out);
    }

    /// Reads whose round a quorum confirmed get their index; a round
    /// wanted by reads that came during the last one goes out.
    pub(super) fn check_read_rounds(&mut self, out: &mut O) {
        let Some(below) = self.confirmed_below() else {
            return;
        };
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        let epoch = l.epoch;
        if l.read_round.is_some_and(|r| r < below) {
            l.read_round = None;
        }
        let (done, wait): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.reads.at_leader)
            .into_iter()
            .partition(|p| p.round < below);
        let again = l.read_round.is_none() && wait.iter().any(|p| p.round > l.ping_round);
        self.reads.at_leader = wait;
        if let Some(arrived) = done.iter().map(|p| p.arrived).min() {
            let h = &mut self.reads.handed;
            (h.batches, h.arrived, h.epoch) = (h.batches + 1, arrived, epoch);
        }
        if again {
            let r = self.ping(out);
            self.counters.read_rounds += 1;
            self.leading().expect("leading").read_round = Some(r);
            for p in &mut self.reads.at_leader {
                p.round = p.round.min(r);
            }
        }
        for p in done {
            match p.asker {
                Asker::Me(rid) => {
                    if let Some(r) = self.reads.mine.get_mut(&rid) {
                        r.index = Some(p.index);
                    }
                }
                Asker::Follower(n, rid) => {
                    let msg = Msg::ReadIndexOk {
                        epoch,
                        rid,
                        index: p.index,
                    };
                    // A commit index: on a quorum's disks.
                    out.send_now(Peer::Node(n), msg);
                }
            }
        }
        self.serve_reads(out);
    }

    pub(super) fn on_read_index_ok(
        &mut self,
        from: NodeId,
        epoch: u64,
        rid: u64,
        index: u64,
        out: &mut O,
    ) {
        match &self.role {
            Role::Following(f) if f.leader == from && f.epoch == epoch => {}
            _ => return,
        }
        if let Some(r) = self.reads.mine.get_mut(&rid) {
            r.index = Some(index);
        }
        self.serve_reads(out);
    }

    /// Answer the reads whose index this server applied. A znode read also
    /// waits for the writes its connection sent before it (a session's
    /// requests take effect in order, as in ZooKeeper): requests of one
    /// server are numbered by one counter, so "before" is a smaller rid.
    pub(super) fn serve_reads(&mut self, out: &mut O) {
        let applied = self.applied;
        let writes = &self.writes;
        let ready: Vec<u64> = (self.reads.mine.iter())
            .filter(|(_, r)| r.index.is_some_and(|i| i <= applied))
            .filter(|&(&rid, r)| {
                !super::znode_sm::is_znode(&r.op)
                    || !(writes.iter())
                        .take_while(|(&w, _)| w < rid)
                        .any(|(_, w)| w.client.session == r.client.session)
            })
            .map(|(&k, _)| k)
            .collect();
        let znode_answered =
            (ready.iter()).any(|k| super::znode_sm::is_znode(&self.reads.mine[k].op));
        for rid in ready {
            let r = self.reads.mine.remove(&rid).expect("listed");
            let resp = self.sm.read_at(applied, &r.op);
            // Watches a `SetWatches` fired at once, before its answer.
            for (conn, event) in self.sm.take_events() {
                out.notify(conn, event);
            }
            super::znode_sm::answer(out, r.client, resp);
        }
        // Only a znode read answered can release a held write: no scan of
        // the writes on the KV path.
        if znode_answered {
            self.send_held_writes(out);
        }
    }

    /// Whether znode write `rid` must wait: its connection sent a znode
    /// read before it that is not answered yet (a session's requests take
    /// effect in order; a read served late must not see a later write).
    pub(super) fn behind_a_read(&self, rid: u64, client: &ClientRef, op: &[u8]) -> bool {
        use super::znode_sm::is_znode;
        is_znode(op)
            && (self.reads.mine.range(..rid))
                .any(|(_, r)| r.client.session == client.session && is_znode(&r.op))
    }

    /// Writes held behind their connection's reads go once those are
    /// answered (`send_write` checks again).
    pub(super) fn send_held_writes(&mut self, out: &mut O) {
        let held: Vec<u64> = (self.writes.iter())
            .filter(|(_, w)| w.sent.is_none() && super::znode_sm::is_znode(&w.op))
            .map(|(&k, _)| k)
            .collect();
        for rid in held {
            self.send_write(rid, out);
        }
    }

    /// Leaving a role: reads asked of the leader fail (a read has no
    /// effect, so the failure is definite), as `NotLeader` with no hint, as
    /// when no leader serves: client libraries retry those on another
    /// replica (a leader that drains away must not fail its followers'
    /// clients).
    pub(super) fn fail_sent_reads(&mut self, out: &mut O) {
        self.reads.at_leader.clear();
        let sent: Vec<u64> = (self.reads.mine.iter())
            .filter(|(_, r)| r.sent)
            .map(|(&k, _)| k)
            .collect();
        for rid in sent {
            let r = self.reads.mine.remove(&rid).expect("listed");
            out.reply(
                r.client,
                Response::Failed(OpError::NotLeader { hint: None }),
            );
        }
    }

    pub(super) fn expire_reads(&mut self, out: &mut O) {
        let now = self.now;
        let late: Vec<u64> = (self.reads.mine.iter())
            .filter(|(_, r)| r.deadline <= now)
            .map(|(&k, _)| k)
            .collect();
        for rid in late {
            let r = self.reads.mine.remove(&rid).expect("listed");
            let err = OpError::refused("read not served within the op timeout");
            out.reply(r.client, Response::Failed(err));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::node::{Config, ReadMode};
    use super::super::testing::Cluster;
    use crate::types::{ClientRef, OpId, Request, Response};
    use crate::znode::{ZnodeOp, ZnodeReply};

    /// Session `session` asking on connection `conn`.
    fn client(session: u64, conn: u64) -> ClientRef {
        ClientRef {
            id: 0,
            session: conn,
            op: OpId {
                client: session,
                seq: 1,
            },
        }
    }

    /// `read=local` still takes a read index for a resume: a follower
    /// whose tree has not applied the session's open yet answers once it
    /// has (the session is open), never from its lagging tree, where the
    /// session does not exist (an expiry is final for the client). Plain
    /// znode reads stay local there (`znode_sm.rs`, `read_local_*`).
    #[test]
    fn a_resume_at_a_lagging_follower_waits_for_the_index_with_read_local() {
        let mut c = Cluster::new(
            3,
            Config {
                read: ReadMode::Local,
                ..Config::default()
            },
        );
        let l = c.settle();
        let f = if l == 1 { 2 } else { 1 };
        c.pause(f);
        let open = ZnodeOp::OpenSession { timeout_ms: 9_000 };
        let opened = c.ask_as(l, client(88, 3), Request::Znode(open));
        assert_eq!(
            opened,
            Some(Response::Znode(ZnodeReply::Session { session: 88 }))
        );
        let resume = Request::Znode(ZnodeOp::ResumeSession);
        let who = c.send_as(f, client(88, 4), resume);
        c.run();
        let answered = |c: &Cluster| c.replies.iter().position(|r| r.1 == who);
        assert_eq!(answered(&c), None, "{:?}", c.replies);
        c.resume(f);
        let i = answered(&c).expect("answered once the follower applied the open");
        let Response::Znode(ZnodeReply::Resumed { timeout_ms, .. }) = c.replies.remove(i).2 else {
            panic!("{:?}", c.replies)
        };
        assert_eq!(timeout_ms, 9_000);
    }
}
