//! A Zab server's znode sessions (`znode_sm.rs`, **Sessions**): requests
//! answered without the log, the sessions heard of, and their expiry by
//! the leader; and the leader's deletion of empty containers.
//!
//! Containers are reaped as sessions are expired: the leader, on its tick,
//! proposes a `DeleteContainer` as a normal log entry for each container
//! of its tree that has had children and has none left (ZooKeeper's
//! `ContainerManager`), once it has seen it so for `container_grace`
//! (`Config`); the entry is checked again when applied, so a child created
//! in between keeps the container. What the leader saw is not replicated:
//! a new leader starts every container's grace afresh.
//!
//! TTL nodes the same way (ZooKeeper's `ContainerManager` again): every
//! `ttl_check` the leader notes each TTL node's last change (`mzxid`)
//! with its own clock when it first sees it, and proposes a `DeleteTtl`
//! naming that `mzxid` for a childless one seen unchanged for its TTL.
//! Applied, it deletes only a TTL node still childless and unchanged. Its
//! own clock, not the node's `mtime`: stamps come from the clocks of the
//! leaders that proposed them, which need not agree, so a new leader
//! starts every TTL afresh (a node may outlive its TTL then, never the
//! other way round); a server that stops leading forgets what it saw.

use super::msg::Msg;
use super::node::{Role, ZabNode, O};
use super::zentry::{ZEntry, EXPIRY};
use super::znode_sm::{fired_event, zk};
use crate::types::{ClientRef, OpError, Peer, Request, Response};
use crate::znode::op::{ZnodeOp, ZnodeReply};
use crate::znode::Change;

impl ZabNode {
    /// Znode requests served without the log: `Ping` (the session is
    /// alive) is answered here at once. Every znode request counts as a
    /// sign of life of its session. True when answered.
    pub(super) fn znode_local(&mut self, client: ClientRef, req: &Request, out: &mut O) -> bool {
        let Request::Znode(op) = req else {
            return false;
        };
        let session = client.op.client;
        if session != 0 {
            self.sm
                .conns
                .entry(session)
                .or_default()
                .insert(client.session);
            self.touch(session);
        }
        if self.sm.watch_early {
            let change = match op {
                ZnodeOp::SetData { path, .. } => Some(Change::DataChanged(path.clone())),
                ZnodeOp::Delete { path, .. } => Some(Change::Deleted(path.clone())),
                _ => None,
            };
            for f in self
                .sm
                .watches
                .fire(&change.into_iter().collect::<Vec<_>>())
            {
                let (conn, event) = fired_event(f);
                out.notify(conn, event);
            }
        }
        if *op == ZnodeOp::WhoAmI {
            out.reply(client, Response::Znode(self.sm.who_am_i(client.session)));
            return true;
        }
        if let ZnodeOp::AddAuth { scheme, auth } = op {
            let r = self.sm.add_auth(client.session, scheme, auth);
            out.reply(client, zk(r));
            return true;
        }
        if *op != ZnodeOp::Ping {
            return false;
        }
        let resp = match self.leader() {
            Some(_) => Response::Znode(ZnodeReply::Pong),
            None => Response::Failed(OpError::NotLeader { hint: None }),
        };
        out.reply(client, resp);
        true
    }

    /// Whether our znode tree (what we applied) holds `session` open.
    pub fn znode_session_open(&self, session: u64) -> bool {
        self.sm.tree.has_session(session)
    }

    /// The timeout of `session` in our znode tree, if it is open there.
    pub fn znode_session_timeout_ms(&self, session: u64) -> Option<u64> {
        self.sm.tree.session_timeout(session)
    }

    fn touch(&mut self, session: u64) {
        match &self.role {
            Role::Leading(_) => {
                self.sm.heard.insert(session, self.now);
            }
            _ => {
                self.sm.touched.insert(session);
            }
        }
    }

    /// F → L: these sessions were heard of at the follower.
    pub(super) fn on_touch(&mut self, sessions: Vec<u64>) {
        if matches!(self.role, Role::Leading(_)) {
            for s in sessions {
                self.sm.heard.insert(s, self.now);
            }
        }
    }

    /// Each tick: a follower reports the sessions it heard of; a leader
    /// expires the silent ones.
    pub(super) fn znode_tick(&mut self, out: &mut O) {
        match &self.role {
            Role::Following(f) => {
                let (leader, sessions) = (f.leader, std::mem::take(&mut self.sm.touched));
                self.sm.heard.clear();
                // What it saw as a leader is forgotten: zxids are log
                // indexes, which a truncation may give to other changes.
                self.sm.reaper.ttl_seen.clear();
                if !sessions.is_empty() {
                    let msg = Msg::Touch {
                        sessions: sessions.into_iter().collect(),
                    };
                    out.send_now(Peer::Node(leader), msg);
                }
            }
            Role::Leading(l) if l.established => {
                self.expire_sessions(out);
                self.reap_containers(out);
                self.reap_ttl_nodes(out);
            }
            _ => {
                self.sm.heard.clear();
                self.sm.touched.clear();
                self.sm.reaper.ttl_seen.clear();
            }
        }
    }

    fn expire_sessions(&mut self, out: &mut O) {
        if self.has_bug(super::bugs::InjectedBug::ZnodeSessionNeverExpires) {
            return;
        }
        let now = self.now;
        // Only open sessions are remembered: a resume of a closed one, or
        // a client's made-up id, leaves nothing behind.
        let sm = &mut self.sm;
        sm.heard.retain(|s, _| sm.tree.has_session(*s));
        let mut expired = Vec::new();
        for (session, timeout_ms) in self.sm.tree.sessions() {
            let heard = *self.sm.heard.entry(session).or_insert(now);
            // Saturating: `timeout_ms` is the client's (issue 31).
            let timeout_us = timeout_ms.saturating_mul(1000);
            if now.as_micros().saturating_sub(heard.as_micros()) > timeout_us {
                expired.push(session);
            }
        }
        for session in expired {
            // Proposed again only if still open one timeout later.
            self.sm.heard.insert(session, now);
            self.propose_own(session, ZnodeOp::CloseSession, out);
        }
    }

    /// Propose an entry the leader decided (no client waits for it).
    fn propose_own(&mut self, session: u64, op: ZnodeOp, out: &mut O) {
        let e = ZEntry {
            time_ms: self.now.as_micros() / 1000,
            session,
            conn: EXPIRY,
            op,
            ids: Vec::new(),
        };
        let p = super::state_machine::Payload {
            origin: self.writer,
            rid: 0,
            op: super::state_machine::Op::Znode(e).to_bytes(),
        };
        self.propose(p.to_bytes(), out);
    }

    /// Every `ttl_check`: propose the deletion of each childless TTL node
    /// seen unchanged for its TTL (proposed again one check later if it
    /// is still there).
    fn reap_ttl_nodes(&mut self, out: &mut O) {
        let now = self.now;
        if now < self.sm.reaper.ttl_next {
            return;
        }
        self.sm.reaper.ttl_next = now.saturating_add(self.cfg.ttl_check);
        let early = self.has_bug(super::bugs::InjectedBug::ZnodeTtlEarly);
        let nodes: Vec<(String, u64, u64, bool)> = (self.sm.tree.ttl_nodes())
            .map(|(p, st, childless)| (p.to_string(), st.mzxid, st.ttl().unwrap_or(0), childless))
            .collect();
        let seen = std::mem::take(&mut self.sm.reaper.ttl_seen);
        for (path, mzxid, ttl_ms, childless) in nodes {
            let since = match seen.get(&path) {
                Some(&(m, t)) if m == mzxid => t,
                _ => now,
            };
            let waited = now.as_micros().saturating_sub(since.as_micros());
            if childless && (early || waited >= ttl_ms.saturating_mul(1000)) {
                let op = ZnodeOp::DeleteTtl {
                    path: path.clone(),
                    mzxid,
                };
                self.propose_own(0, op, out);
            }
            self.sm.reaper.ttl_seen.insert(path, (mzxid, since));
        }
    }

    /// Every `container_grace`: propose the deletion of each container
    /// seen empty (after having had children) at the last look too.
    fn reap_containers(&mut self, out: &mut O) {
        let (now, grace) = (self.now, self.cfg.container_grace);
        if now < self.sm.reaper.next {
            return;
        }
        self.sm.reaper.next = now.saturating_add(grace);
        let empty: Vec<String> = self.sm.tree.empty_containers().map(String::from).collect();
        let seen = std::mem::take(&mut self.sm.reaper.seen);
        for path in empty {
            let since = seen.get(&path).copied().unwrap_or(now);
            if u128::from(now.as_micros().saturating_sub(since.as_micros())) >= grace.as_micros() {
                // Proposed again one grace later if still there.
                self.propose_own(0, ZnodeOp::DeleteContainer { path: path.clone() }, out);
                self.sm.reaper.seen.insert(path, now);
            } else {
                self.sm.reaper.seen.insert(path, since);
            }
        }
    }
}
