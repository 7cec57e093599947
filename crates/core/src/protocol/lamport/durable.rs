//! What a durable server keeps on disk, and how it resumes from it (see
//! the module doc, **Durability**).
//!
//! Every handler call of a durable server runs through [`LamportNode::durably`]:
//! the call's commands are collected, then the records of what changed (the
//! registers applied, the staged writes of each scope, the clock's mark)
//! are persisted *in front of* them. So nothing the call sends or answers
//! leaves before its state is durable (the driver's rule 2), whatever the
//! handler's own order.

use super::bugs::InjectedBug;
use super::disk::{meta, staged_key, word, Kept, CLOCK_BLOCK, META_CLOCK, META_LIFE, META_STAGED};
use super::msg::{Body, Msg, ReqId, Timer};
use super::node::LamportNode;
use super::recovering::Recovery;
use crate::protocol::contract::{Out, Record};
use crate::types::NodeId;
use std::collections::{BTreeMap, BTreeSet};

type O = Out<Msg, Timer>;

impl LamportNode {
    /// Keep state on disk (`NodeSpec::durable`).
    pub fn durable(mut self, on: bool) -> Self {
        self.durable.on = on;
        self
    }

    /// Run one handler call; with durability, persist what it changed in
    /// front of everything it sends or answers.
    pub(super) fn durably(&mut self, out: &mut O, f: impl FnOnce(&mut Self, &mut O)) {
        if !self.durable.on {
            return f(self, out);
        }
        let mut inner = O::new();
        f(self, &mut inner);
        self.persist_changes(out);
        for c in inner.drain() {
            out.push(c);
        }
    }

    /// The records of what changed since the last call: applied registers,
    /// then the staged writes of the scopes that changed (a crash between
    /// the two leaves a write both applied and staged, which `resume`
    /// drops: the other order could lose it), then the clock's mark.
    fn persist_changes(&mut self, out: &mut O) {
        let regs: Vec<Record> = (self.store.take_dirty().into_iter())
            .map(|(key, tag, value)| Record::Register { key, tag, value })
            .collect();
        let now: BTreeMap<String, Vec<Kept>> = (self.queues.kept().into_iter())
            .map(|(scope, v)| (staged_key(&scope), v))
            .collect();
        let keys: BTreeSet<&String> = now.keys().chain(self.durable.kept.keys()).collect();
        let mut metas = Vec::new();
        for k in keys {
            let (new, old) = (now.get(k), self.durable.kept.get(k));
            if new != old {
                let list = new.cloned().unwrap_or_default();
                let value = postcard::to_allocvec(&list).expect("staged writes encode");
                metas.push(meta(k, value));
            }
        }
        self.durable.kept = now;
        if self.clock > self.durable.clock_mark {
            self.durable.clock_mark = self.clock.saturating_add(CLOCK_BLOCK);
            let mark = self.durable.clock_mark.to_le_bytes().to_vec();
            metas.push(meta(META_CLOCK, mark));
        }
        // The bug persists a call's values only with the next call: the
        // staged write's end is durable (and its acks leave) before them.
        let (first, then) = match self.bug {
            Some(InjectedBug::ReleasePersistedBeforeWrite) => {
                (metas, std::mem::replace(&mut self.durable.late, regs))
            }
            _ => (regs, metas),
        };
        for rec in first.into_iter().chain(then) {
            out.persist(rec);
        }
    }

    /// One record read back after a restart (before `on_start`).
    pub(super) fn restore_record(&mut self, rec: Record) {
        self.durable.restored = true;
        match rec {
            Record::Register { key, tag, value } => {
                self.clock = self.clock.max(tag.ts);
                self.store.restore(key, tag, value);
            }
            Record::Meta { key, value } => self.restore_meta(key, &value),
            Record::Entry { .. } | Record::TruncateFrom { .. } | Record::Snapshot { .. } => {}
        }
    }

    fn restore_meta(&mut self, key: String, value: &[u8]) {
        match key.as_str() {
            META_CLOCK => {
                let mark = word(value).unwrap_or(0);
                self.durable.clock_mark = self.durable.clock_mark.max(mark);
                self.clock = self.clock.max(mark);
            }
            META_LIFE => self.durable.life = self.durable.life.max(word(value)),
            k if k.starts_with(META_STAGED) => {
                let list: Vec<Kept> = postcard::from_bytes(value).unwrap_or_default();
                let top = list.iter().map(|k| k.staged.req.ts).max().unwrap_or(0);
                self.clock = self.clock.max(top);
                if list.is_empty() {
                    self.durable.kept.remove(&key);
                } else {
                    self.durable.kept.insert(key, list);
                }
            }
            _ => {}
        }
    }

    /// `on_start` of a durable server: take a life none before used
    /// (persisted first), then put back the staged writes read from disk.
    /// A write whose version the store holds already is done here. Our own
    /// previous lives' writes are committed as a restarted holder commits
    /// them (`Commit`, `Resolve`); the others' wait in their queues for
    /// their holders, as before the crash.
    ///
    /// With `lock-timeout`, peers may have evicted us while we were down
    /// and completed writes without us: a restarted server then resyncs
    /// from every peer with its own store as the base (a recovery that
    /// gives it no `lost` mark), and rules on its own writes there.
    pub(super) fn resume(&mut self, out: &mut O) {
        if let Some(prev) = self.durable.life {
            self.life = self.life.max(prev.saturating_add(1));
        }
        out.persist(meta(META_LIFE, self.life.to_le_bytes().to_vec()));
        if !self.durable.restored {
            return;
        }
        if self.cfg.lock_timeout.is_some() && self.recovery.is_none() {
            self.recovery = Some(Recovery::default());
        }
        if let Some(rec) = &mut self.recovery {
            rec.lost = false; // the store read back is a base to merge into
        }
        let kept: Vec<Kept> = self.durable.kept.values().flatten().cloned().collect();
        let mut scopes = BTreeSet::new();
        for Kept {
            staged: s,
            released,
        } in kept
        {
            if self.store.tag(&s.key) >= s.req.tag() {
                continue;
            }
            if s.req.node == self.id {
                if self.recovery.is_some() {
                    self.durable.own.push(s);
                } else {
                    self.commit_orphan(s, out);
                }
                continue;
            }
            self.queues.insert(&s.scope, s.req);
            let slot = self.queues.get_mut(&s.scope, s.req).expect("inserted");
            slot.write = Some((s.key, s.value));
            slot.orphan = s.orphan;
            slot.released = released;
            scopes.insert(s.scope);
        }
        for scope in scopes {
            self.drain(&scope, out);
        }
    }

    /// A write acknowledgement: held until the write is durable here, as
    /// every `Send` (the bug lets it leave at once).
    pub(super) fn send_ack(&self, to: NodeId, req: ReqId, applied: bool, out: &mut O) {
        let body = Body::WriteAck { req, applied };
        if self.bug == Some(InjectedBug::AckBeforeSync) {
            let clock = self.clock;
            out.send_now(crate::types::Peer::Node(to), Msg { clock, body });
        } else {
            self.send(to, body, out);
        }
    }
}

/// Append one collected command to `out`, unchanged.
#[cfg(test)]
mod tests {
    use super::super::bugs::InjectedBug;
    use super::super::msg::{Body, Scope};
    use super::super::msg::{Msg, Timer};
    use super::super::node::{Config, LamportNode};
    use super::super::testing::{b, deliver, get, put, r, write, Cluster, O, T0};
    use super::{word, CLOCK_BLOCK, META_CLOCK};
    use crate::protocol::contract::{Command, Protocol, Record};
    use crate::types::{ClientRef, Response};
    use std::time::Duration;

    fn rw() -> Config {
        Config {
            read_wait: true,
            ..Config::default()
        }
    }
    /// Server 2 of two, durable, with 1's request queued.
    fn peer(bug: Option<InjectedBug>) -> (LamportNode, O) {
        let mut n = LamportNode::new(2, &[1, 2], rw())
            .with_bug(bug)
            .durable(true);
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let scope = Scope::Global;
        deliver(
            &mut n,
            1,
            1,
            Body::RequestLock {
                req: r(1, 1),
                scope,
            },
            &mut out,
        );
        out.drain();
        (n, out)
    }
    fn is_staged_meta(c: &Command<Msg, Timer>) -> bool {
        matches!(c, Command::Persist(Record::Meta { key, .. }) if key == "lamport/staged/global")
    }

    /// A WriteAck is a promise: the staged write's record comes first, and
    /// the ack waits for it (`Send`); the bug lets it leave at once.
    #[test]
    fn a_staged_write_is_persisted_before_its_ack() {
        for bug in [None, Some(InjectedBug::AckBeforeSync)] {
            let (mut n, mut out) = peer(bug);
            deliver(&mut n, 1, 3, write(r(1, 1), "v"), &mut out);
            let cmds: Vec<_> = out.drain().collect();
            let staged = cmds.iter().position(is_staged_meta).expect("persisted");
            let ack = (cmds.iter())
                .position(|c| match c {
                    Command::Send { msg, .. } | Command::SendNow { msg, .. } => {
                        matches!(msg.body, Body::WriteAck { .. })
                    }
                    _ => false,
                })
                .expect("acked");
            assert!(staged < ack, "{cmds:?}");
            let at_once = matches!(cmds[ack], Command::SendNow { .. });
            assert_eq!(at_once, bug.is_some(), "{bug:?}");
        }
        let mut memory = LamportNode::new(2, &[1, 2], rw());
        let mut out = O::new();
        memory.on_start(T0, &mut out);
        deliver(&mut memory, 1, 1, write(r(1, 1), "v"), &mut out);
        assert!(!out
            .commands()
            .iter()
            .any(|c| matches!(c, Command::Persist(_))));
    }

    /// At the release the value is persisted before the staged write's
    /// end; the bug persists the end first.
    #[test]
    fn an_applied_write_is_persisted_before_its_staged_record_goes() {
        for bug in [None, Some(InjectedBug::ReleasePersistedBeforeWrite)] {
            let (mut n, mut out) = peer(bug);
            deliver(&mut n, 1, 3, write(r(1, 1), "v"), &mut out);
            out.drain();
            let scope = Scope::Global;
            deliver(
                &mut n,
                1,
                4,
                Body::ReleaseLock {
                    req: r(1, 1),
                    scope,
                },
                &mut out,
            );
            let cmds: Vec<_> = out.drain().collect();
            // The bug holds the value back to the next call.
            let reg =
                (cmds.iter()).position(|c| matches!(c, Command::Persist(Record::Register { .. })));
            let end = cmds.iter().position(is_staged_meta).expect("the end");
            assert!(
                reg.is_some_and(|r| r < end) == bug.is_none(),
                "{bug:?}: {cmds:?}"
            );
            assert_eq!(n.value(b"k"), Some(b("v")));
        }
    }

    /// The clock's mark goes to disk in blocks, before the message that
    /// passes it; a restart starts at the mark, in a life above the last.
    #[test]
    fn the_clock_mark_and_the_life_survive_a_restart() {
        let mut n = LamportNode::new(1, &[1, 2], rw())
            .with_life(4)
            .durable(true);
        let mut out = O::new();
        n.on_start(T0, &mut out);
        n.on_client(T0, ClientRef::local(1), put("k", "a"), &mut out);
        n.on_client(T0, ClientRef::local(2), put("k", "b"), &mut out);
        let recs: Vec<Record> = (out.drain())
            .filter_map(|c| match c {
                Command::Persist(rec) => Some(rec),
                _ => None,
            })
            .collect();
        let marks: Vec<u64> = (recs.iter())
            .filter_map(|r| match r {
                Record::Meta { key, value } if key == META_CLOCK => word(value),
                _ => None,
            })
            .collect();
        assert_eq!(marks, vec![1 + CLOCK_BLOCK], "one mark for both requests");
        let mut back = LamportNode::new(1, &[1, 2], rw())
            .with_life(0)
            .durable(true);
        for rec in recs {
            back.restore(rec);
        }
        back.on_start(T0, &mut out);
        assert_eq!((back.clock, back.life), (1 + CLOCK_BLOCK, 5));
        out.drain();
        back.on_client(T0, ClientRef::local(3), put("k", "c"), &mut out);
        assert!(back
            .ops
            .keys()
            .all(|req| req.ts == 2 + CLOCK_BLOCK && req.life == 5));
    }

    /// A peer restarted from its disk between its ack and the holder's
    /// release (lost with the connection) keeps the write staged, its
    /// key's reads wait, and the holder's `Outstanding` releases it.
    #[test]
    fn a_staged_write_read_back_waits_for_its_holders_release() {
        let mut c = Cluster::durable(3, rw(), None, 1);
        let w = c.client(1, put("k", "v"));
        for (from, to) in [
            (1, 2),
            (1, 3),
            (2, 1),
            (3, 1),
            (1, 2),
            (1, 3),
            (2, 1),
            (3, 1),
        ] {
            assert!(c.deliver_from(from, to), "{from} → {to}");
        }
        assert_eq!(c.answers[&w], Response::Done);
        c.restart(2); // its RELEASE_LOCK is lost
        assert!(c.node(2).queues.is_staged(b"k"), "{}", c.node(2).status());
        c.settle();
        let read = c.client(2, get("k"));
        c.settle();
        assert_eq!(c.answers[&read], Response::Value(Some(b("v"))));
        c.assert_converged();
    }

    /// Every server crashes at once, at any point of a run of writes:
    /// from their disks they all serve again, agree, and keep every write
    /// answered Done (the last one of a key, since they run in order).
    /// With a lock timeout each resyncs from the others' disks first.
    #[test]
    fn durable_servers_survive_a_crash_of_every_server() {
        let t = Some(Duration::from_millis(300));
        for seed in 0..40 {
            for (read_wait, lock_timeout) in [(true, None), (false, None), (true, t), (false, t)] {
                let cfg = Config {
                    read_wait,
                    lock_timeout,
                    ..Config::default()
                };
                let mut c = Cluster::durable(3, cfg, None, seed);
                let first = c.client(1, put("k", "first"));
                c.settle();
                let second = c.client(1 + (seed % 3) as u32, put("k", "second"));
                for _ in 0..seed % 13 {
                    c.step();
                }
                let done = c.answers.get(&second) == Some(&Response::Done);
                c.crash_all();
                c.run_for(Duration::from_secs(5));
                assert_eq!(c.answers[&first], Response::Done);
                let v = c.node(1).value(b"k");
                assert!(v == Some(b("second")) || !done, "seed {seed}: {v:?}");
                assert!(c.nodes.iter().all(|n| !n.is_recovering()));
                let third = c.client(2, put("k", "third"));
                c.settle();
                assert_eq!(c.answers[&third], Response::Done, "seed {seed}");
                c.assert_converged();
            }
        }
    }

    /// In memory mode a crash of every server leaves nothing to recover
    /// from: after two op timeouts of every peer saying so, each server
    /// gives up (`fatal`). One server lost alone recovers and never does.
    #[test]
    fn a_total_loss_in_memory_mode_is_fatal_not_recovering_for_ever() {
        let mut c = Cluster::new(3, rw(), None, 2);
        c.client(1, put("k", "v"));
        c.settle();
        c.restart(2);
        c.run_for(Duration::from_secs(6));
        assert!(c
            .nodes
            .iter()
            .all(|n| n.fatal().is_none() && !n.is_recovering()));
        c.crash_all();
        c.run_for(Duration::from_secs(3));
        assert!(c.nodes.iter().all(|n| n.fatal().is_none()), "not yet");
        c.run_for(Duration::from_secs(3));
        for n in &c.nodes {
            let why = n.fatal().expect("gave up");
            assert!(why.contains("every replica lost its state"), "{why}");
        }
    }
}
