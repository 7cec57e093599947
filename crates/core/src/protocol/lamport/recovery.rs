//! Links that come back, servers that lost their state (seed 002 §2,
//! recovery mode `r`) and peers evicted by the lock timeout (§4.4.1).

use super::bugs::InjectedBug;
use super::msg::{Body, Entry, Msg, ReqId, Scope, Staged, Timer};
use super::node::{LamportNode, Phase};
use super::recovering::Recovery;
use crate::protocol::contract::Out;
use crate::types::{NodeId, OpError, Response, Time};
use std::collections::BTreeSet;
use std::time::Duration;

type O = Out<Msg, Timer>;

/// How long every peer must have said it lost its state too before a lost
/// server gives up (a multiple of the op timeout; see `check_total_loss`).
const TOTAL_LOSS_GRACE: u32 = 2;

impl LamportNode {
    /// Copy state from every peer before serving: SyncRequest to all. A
    /// peer answering drops whatever it still queues of ours (a previous
    /// life's requests) and re-sends its own requests first.
    pub(super) fn start_recovery(&mut self, out: &mut O) {
        let lost = self.recovery.as_ref().is_some_and(|r| r.lost);
        let mut rec = Recovery {
            lost,
            ..Recovery::default()
        };
        // Our own staged writes read back from disk: ruled on at the end.
        for s in std::mem::take(&mut self.durable.own) {
            rec.orphans.insert(s.req, (s, BTreeSet::new()));
        }
        // Writes we were committing (we were evicted meanwhile): ruled on
        // again when this recovery ends, like those read back from disk.
        // Their slots stay queued here until then; a peer that superseded
        // the write no longer stages it, so waiting for a peer to name it
        // left the slot at the head of its queue for ever (sim seed 1998,
        // N = 3, fsync, `lock-timeout=300ms`: every later write of the key
        // timed out).
        for (req, (s, _)) in std::mem::take(&mut self.committing) {
            rec.orphans.entry(req).or_insert((s, BTreeSet::new()));
        }
        self.recovery = Some(rec);
        self.evicted.clear();
        self.broadcast(Body::SyncRequest, out);
        self.end_recovery_if_done(out);
    }

    /// `from` restarted (or rejoins): drop its previous life's requests,
    /// but keep its staged writes (`read-wait`) until its new life rules
    /// on them; re-send it our writes it acknowledged in that life; send
    /// our store and every staged write.
    pub(super) fn on_sync_request(&mut self, from: NodeId, out: &mut O) {
        self.evicted.remove(&from);
        let keep = self.keeps_orphans();
        let unwritten = (self.queues.of_node(from).into_iter())
            .filter(|(scope, req)| {
                (self.queues.get_mut(scope, *req)).is_some_and(|s| s.write.is_none())
            })
            .map(|(_, req)| req)
            .collect();
        self.drop_entries_of(from, keep, out);
        for op in self.ops.values_mut() {
            if let Phase::Writing { unacked, .. } = &mut op.phase {
                unacked.insert(from);
            }
        }
        for (_, unacked) in self.committing.values_mut() {
            unacked.insert(from);
        }
        self.resync(from, out);
        let body = Body::SyncReply {
            entries: self.store.snapshot(),
            staged: if keep {
                self.staged_writes()
            } else {
                Vec::new()
            },
            unwritten,
            recovering: self.recovery.is_some(),
            lost: self.recovery.as_ref().is_some_and(|r| r.lost),
        };
        self.send(from, body, out);
    }

    /// Every staged write, with those a recovering server will stage when
    /// its recovery ends (a `Commit` may have reached it only).
    fn staged_writes(&self) -> Vec<Staged> {
        let mut v = self.queues.staged_writes();
        if let Some(rec) = &self.recovery {
            v.extend(rec.others.values().cloned());
        }
        v
    }

    /// Whether a restarted holder's staged writes wait for its verdict
    /// (else they apply when it syncs: the former rule, now a bug).
    fn keeps_orphans(&self) -> bool {
        self.cfg.read_wait && self.bug != Some(InjectedBug::ApplyOrphans)
    }

    pub(super) fn on_sync_reply(
        &mut self,
        from: NodeId,
        entries: Vec<Entry>,
        staged: Vec<Staged>,
        unwritten: Vec<ReqId>,
        (recovering, lost): (bool, bool),
        out: &mut O,
    ) {
        let me = self.id;
        let Some(rec) = self.recovery.as_mut() else {
            self.counters.stale += 1;
            return;
        };
        if !rec.answered.insert(from) {
            self.counters.stale += 1;
            return;
        }
        if lost {
            rec.lost_peers.insert(from);
        } else {
            rec.lost_peers.remove(&from);
        }
        // A peer recovering too lost its state: it has nothing to give.
        if recovering {
            rec.empty.insert(from);
            if !lost {
                rec.disk_bases.insert(from, entries);
            }
        } else {
            rec.lost = false;
            self.store.merge(entries);
        }
        rec.unwritten.extend(unwritten);
        for s in staged {
            if s.req.node == me {
                let e = rec
                    .orphans
                    .entry(s.req)
                    .or_insert_with(|| (s, BTreeSet::new()));
                e.1.insert(from);
            } else {
                // Orphan if any peer knows its holder restarted.
                let orphan = s.orphan;
                (rec.others.entry(s.req).or_insert(s)).orphan |= orphan;
            }
        }
        self.end_recovery_if_done(out);
    }

    /// Every peer answered: rule on our previous lives' staged writes,
    /// stage the others' that are still pending, serve again, and push
    /// the merged store to the peers (a holder that died mid-broadcast
    /// left its write on some only).
    ///
    /// A staged write commits iff some peer applied it (its holder then
    /// had every ack), or no peer queued its request without the write
    /// and every peer that kept its state staged it: a holder answers
    /// Done only after every ack, so one peer without it proves it never
    /// did, and nobody applied it.
    fn end_recovery_if_done(&mut self, out: &mut O) {
        let Some(rec) = &self.recovery else {
            return;
        };
        if !self.peers.iter().all(|p| rec.answered.contains(p)) {
            return;
        }
        // Only a peer that holds the state can give it. Every answer from
        // a recovering peer: ask them again (each tick) until one of them
        // has recovered from a peer that held it. Ending here let a server
        // serve, and count as holding the state, with nothing (sim seed
        // 566: the last two holders of a completed delete then crashed).
        let sourceless = self.peers.iter().all(|p| rec.empty.contains(p));
        if !self.peers.is_empty() && sourceless && !self.every_peer_has_its_disk() {
            let rec = self.recovery.as_mut().expect("checked");
            rec.answered.clear();
            rec.empty.clear();
            rec.disk_bases.clear();
            self.counters.sourceless_rounds += 1;
            return;
        }
        let mut rec = self.recovery.take().expect("checked");
        // Every replica restarted from its own disk at once (`lock-timeout`
        // makes each resync): what was acknowledged is in the union of
        // their disks, and each holds the staged writes it persisted, so
        // every peer is a witness. Waiting for a peer that is not
        // recovering would wait for ever.
        if sourceless {
            for entries in std::mem::take(&mut rec.disk_bases).into_values() {
                self.store.merge(entries);
            }
            rec.empty.clear();
        }
        let witnesses: Vec<NodeId> = (self.peers.iter().copied())
            .filter(|p| !rec.empty.contains(p))
            .collect();
        for (req, (s, at)) in rec.orphans {
            let applied = self.store.tag(&s.key) >= req.tag();
            let commit = applied
                || (!rec.unwritten.contains(&req) && witnesses.iter().all(|p| at.contains(p)));
            if commit {
                self.commit_orphan(s, out);
                continue;
            }
            // Staged here by an earlier commit attempt (we were evicted).
            if self.queues.remove(&s.scope, req).is_some() {
                self.drain(&s.scope, out);
            }
            self.counters.orphans_resolved += 1;
            let scope = s.scope;
            self.verdicts.insert(req, (scope.clone(), false));
            self.broadcast(Body::Resolve { req, scope, commit }, out);
        }
        for (req, s) in rec.others {
            if rec.released.contains(&req) || self.store.tag(&s.key) >= req.tag() {
                continue;
            }
            self.queues.insert(&s.scope, req);
            let slot = self.queues.get_mut(&s.scope, req).expect("inserted");
            if slot.write.is_none() {
                slot.write = Some((s.key, s.value));
                slot.orphan = s.orphan;
            }
        }
        let entries = self.store.snapshot();
        self.broadcast(Body::Repair { entries }, out);
    }

    /// Whether we and every peer are recovering from our own disks (none
    /// lost its state): each answered with the store it read back.
    fn every_peer_has_its_disk(&self) -> bool {
        self.recovery.as_ref().is_some_and(|rec| {
            !rec.lost && (self.peers.iter()).all(|p| rec.disk_bases.contains_key(p))
        })
    }

    /// Commit a previous life's staged write as a live holder finishes
    /// one: stage it here (reads of its key wait, our later requests queue
    /// behind it), send it to every peer (`Commit`), and only once every
    /// peer acknowledged apply it and `Resolve`. A peer that was recovering
    /// (no witness) may have lived through the write without ever getting
    /// it and then finish its recovery from stores taken before it: it
    /// must hold the write before anyone serves it (sim seed 91).
    pub(super) fn commit_orphan(&mut self, s: Staged, out: &mut O) {
        let req = s.req;
        self.queues.insert(&s.scope, req);
        let slot = self.queues.get_mut(&s.scope, req).expect("inserted");
        if slot.write.is_none() {
            slot.write = Some((s.key.clone(), s.value.clone()));
        }
        slot.orphan = true;
        let unacked: BTreeSet<NodeId> = self.active().into_iter().collect();
        for &p in &unacked {
            self.send(p, commit_body(&s), out);
        }
        self.committing.insert(req, (s, unacked));
        self.finish_commit_if_acked(req, out);
    }

    /// A peer still stages writes of our previous lives: commit those we
    /// have not ruled on (our recovery heard of them from nobody). Safe
    /// whatever an earlier life did: a write it left unanswered may take
    /// effect late, and `Commit` skips where a newer version is applied.
    pub(super) fn on_orphans(&mut self, staged: Vec<Staged>, out: &mut O) {
        if self.recovery.is_some() {
            return; // our recovery hears of them
        }
        for s in staged {
            if s.req.node != self.id {
                self.counters.misrouted += 1;
            } else if !self.committing.contains_key(&s.req) && !self.verdicts.contains_key(&s.req) {
                self.commit_orphan(s, out);
            }
        }
    }

    /// A peer staged (or had applied) our previous life's write.
    pub(super) fn on_commit_ack(&mut self, from: NodeId, req: ReqId, out: &mut O) {
        let Some((_, unacked)) = self.committing.get_mut(&req) else {
            return;
        };
        if !unacked.remove(&from) {
            self.counters.stale += 1;
            return;
        }
        self.finish_commit_if_acked(req, out);
    }

    /// Every peer holds the write: apply it in queue order (unless a
    /// version as new is here already) and tell everyone (`Resolve`).
    fn finish_commit_if_acked(&mut self, req: ReqId, out: &mut O) {
        if !self.committing.get(&req).is_some_and(|(_, u)| u.is_empty()) {
            return;
        }
        let (s, _) = self.committing.remove(&req).expect("checked");
        let superseded = self.store.tag(&s.key) >= req.tag();
        if let Some(slot) = self.queues.get_mut(&s.scope, req) {
            if superseded {
                slot.write = None;
            }
            slot.orphan = false;
        }
        self.release_slot(&s.scope, req, out);
        self.counters.orphans_resolved += 1;
        let scope = s.scope;
        self.verdicts.insert(req, (scope.clone(), true));
        self.broadcast(
            Body::Resolve {
                req,
                scope,
                commit: true,
            },
            out,
        );
    }

    /// A restarted holder commits its previous life's write: stage it
    /// unless it is staged or applied here already, or superseded, then
    /// acknowledge. A recovering server stages it when its recovery ends.
    pub(super) fn on_commit(
        &mut self,
        from: NodeId,
        req: ReqId,
        scope: Scope,
        key: bytes::Bytes,
        value: Option<bytes::Bytes>,
        out: &mut O,
    ) {
        if req.node != from {
            self.counters.misrouted += 1;
            return;
        }
        if let Some(rec) = &mut self.recovery {
            let s = Staged {
                req,
                scope,
                key,
                value,
                orphan: true,
            };
            rec.others.entry(req).or_insert(s);
        } else if self.store.tag(&key) < req.tag() {
            self.queues.insert(&scope, req);
            let slot = self.queues.get_mut(&scope, req).expect("inserted");
            if slot.write.is_none() {
                slot.write = Some((key, value));
                slot.orphan = true;
            }
        }
        self.send_ack(from, req, true, out);
    }

    /// A restarted holder's verdict on its previous life's staged write.
    pub(super) fn on_resolve(
        &mut self,
        from: NodeId,
        req: ReqId,
        scope: Scope,
        commit: bool,
        out: &mut O,
    ) {
        if req.node != from {
            self.counters.misrouted += 1;
            return;
        }
        if let Some(rec) = &mut self.recovery {
            // Recovering too: not staged here yet.
            if let Some(s) = rec.others.remove(&req) {
                if commit && self.store.tag(&s.key) < req.tag() {
                    self.apply(req, s.key, s.value);
                }
                return;
            }
        }
        let newer = (slot_key(self, &scope, req)).is_some_and(|k| self.store.tag(&k) >= req.tag());
        let Some(slot) = self.queues.get_mut(&scope, req) else {
            self.counters.stale += 1;
            return;
        };
        if !commit || (newer && !slot.applied) {
            slot.write = None;
        }
        slot.orphan = false;
        self.release_slot(&scope, req, out);
    }

    /// A link came back; messages sent meanwhile may be lost: tell the
    /// peer which requests of ours are still queued and resend the writes
    /// it has not acknowledged (§3.2.1 item 3). FIFO puts them after
    /// anything that did arrive.
    pub(super) fn on_up(&mut self, p: NodeId, out: &mut O) {
        if self.bug == Some(InjectedBug::NoResyncOnUp) {
            return;
        }
        if self.evicted.contains(&p) {
            self.send(p, Body::Evicted, out);
            return;
        }
        if self
            .recovery
            .as_ref()
            .is_some_and(|r| !r.answered.contains(&p))
        {
            self.send(p, Body::SyncRequest, out);
        }
        // An ack that came over the connection that went down does not
        // show that `p` still holds the write: `p` may have restarted, its
        // new life's SyncRequest still on its way. Ask it again (the write
        // goes again below; a peer that holds it acks again). Else a Done
        // write may be missing at a restarted peer that queued its request
        // anew, whose `unwritten` then made the holder's next life abort
        // it (sim seed 786, N = 5).
        if self.bug != Some(InjectedBug::AckAcrossResets) {
            for op in self.ops.values_mut() {
                if let Phase::Writing { unacked, .. } = &mut op.phase {
                    unacked.insert(p);
                }
            }
            for (_, unacked) in self.committing.values_mut() {
                unacked.insert(p);
            }
        }
        self.resync(p, out);
        self.unsync(p, out);
    }

    /// Our queued requests, then our unacknowledged writes, to `p`.
    pub(super) fn resync(&self, p: NodeId, out: &mut O) {
        let reqs = (self.ops.iter())
            .map(|(&r, op)| (r, op.scope.clone()))
            .collect();
        let life = self.life;
        self.send(p, Body::Outstanding { life, reqs }, out);
        for (&req, (scope, commit)) in &self.verdicts {
            let (scope, commit) = (scope.clone(), *commit);
            self.send(p, Body::Resolve { req, scope, commit }, out);
        }
        for (s, unacked) in self.committing.values() {
            if unacked.contains(&p) {
                self.send(p, commit_body(s), out);
            }
        }
        for (&req, op) in &self.ops {
            if let Phase::Writing { unacked, .. } = &op.phase {
                if unacked.contains(&p) {
                    let body = Body::ServerWrite {
                        req,
                        scope: op.scope.clone(),
                        key: op.key.clone(),
                        value: op.value.clone(),
                    };
                    self.send(p, body, out);
                }
            }
        }
    }

    /// `from`'s complete list of queued requests: drop the others of its
    /// (their RELEASE_LOCK was lost), queue and answer these.
    /// A previous life's staged writes are not its to drop (`Resolve`).
    ///
    /// A request of another life of `from` is one it restarted since (a
    /// SyncRequest of the new life may have come before we queued it: we
    /// learnt of its staged write from a peer, recovering, sim seed 291):
    /// as on `SyncRequest`, its staged write becomes an orphan, which only
    /// the verdict takes out, the rest goes. Releasing it as a lost
    /// RELEASE_LOCK applied a write its holder never finished.
    pub(super) fn on_outstanding(
        &mut self,
        from: NodeId,
        life: u64,
        reqs: Vec<(ReqId, Scope)>,
        out: &mut O,
    ) {
        let keep = self.keeps_orphans();
        for (scope, req) in self.queues.of_node(from) {
            let listed = reqs.iter().any(|(r, s)| *r == req && *s == scope);
            // An earlier release in this loop may have drained it already.
            let Some(slot) = self.queues.get_mut(&scope, req) else {
                continue;
            };
            if req.life != life && keep && slot.staged().is_some() {
                slot.orphan = true;
            } else if !listed && !slot.orphan {
                self.release_slot(&scope, req, out);
            }
        }
        for (req, scope) in reqs {
            self.on_request(from, req, scope, out);
        }
    }

    /// Release every request of `p` queued here; their writes, if any,
    /// still apply in queue order, except staged ones when `keep_staged`:
    /// those become orphans, left for `p`'s verdict.
    fn drop_entries_of(&mut self, p: NodeId, keep_staged: bool, out: &mut O) {
        for (scope, req) in self.queues.of_node(p) {
            let Some(slot) = self.queues.get_mut(&scope, req) else {
                continue; // drained by an earlier release in this loop
            };
            if keep_staged && slot.staged().is_some() {
                slot.orphan = true;
                continue;
            }
            self.release_slot(&scope, req, out);
        }
        self.deferred.retain(|&(n, _)| n != p);
    }

    /// Every tick: while recovering, ask again the peers that have not
    /// answered (a SyncRequest can vanish in a link reset reported to the
    /// other side only, or while it was paused); else poll every peer we
    /// have awaited since the last tick: resync to it and ask it for its
    /// resync (its `Up` may have gone unseen here, its RELEASE_LOCK lost).
    pub(super) fn poll_stalled(&mut self, out: &mut O) {
        if let Some(rec) = &self.recovery {
            for p in self
                .active()
                .into_iter()
                .filter(|p| !rec.answered.contains(p))
            {
                self.send(p, Body::SyncRequest, out);
            }
            return;
        }
        // A write of `p` staged here waits for its release too (one read
        // back from disk may have lost it in our crash; `p`'s `Up` may
        // have reached one side only).
        let awaited: BTreeSet<NodeId> = (self.active().into_iter())
            .filter(|&p| self.awaits(p) || self.queues.has_staged_of(p))
            .collect();
        for &p in awaited.intersection(&self.stalled) {
            if self.bug != Some(InjectedBug::NoResyncOnUp) {
                self.counters.polls += 1;
                self.resync(p, out);
                self.send(p, Body::Poll, out);
                let staged = self.queues.orphans_of(p);
                if !staged.is_empty() {
                    self.send(p, Body::Orphans { staged }, out);
                }
            }
        }
        self.stalled = awaited;
    }

    /// A lost server (memory mode, `--recover`) whose every peer has said,
    /// for [`TOTAL_LOSS_GRACE`] op timeouts, that it lost its state too:
    /// every replica lost it at once, there is nothing to recover from,
    /// and waiting would answer "recovering" for ever. Say so (`fatal`):
    /// the node runtime logs it and exits. Not at the first such round: a
    /// peer that copied a store just before its source was lost finishes
    /// its recovery within a round, and then answers with the data.
    pub(super) fn check_total_loss(&mut self, now: Time) {
        let grace = (self.cfg.op_timeout.checked_mul(TOTAL_LOSS_GRACE)).unwrap_or(Duration::MAX);
        let Some(rec) = self.recovery.as_mut().filter(|r| r.lost) else {
            return;
        };
        let since = *rec.lost_since.get_or_insert(now);
        let all_lost = self.peers.iter().all(|p| rec.lost_peers.contains(p));
        if self.peers.is_empty() || !all_lost || self.fatal.is_some() {
            return;
        }
        if now >= since.saturating_add(grace) {
            let n = self.peers.len() + 1;
            self.fatal = Some(format!(
                "every replica lost its state (all {n} answer that they are recovering too): \
                 nothing to recover from; acknowledged writes are lost. Start the cluster \
                 afresh (without --recover), or keep data on disk (--durability fsync)"
            ));
        }
    }

    /// With a lock timeout: evict every active peer we have been waiting
    /// for, silent, that long. A recovering server evicts nobody: it needs
    /// every peer's state.
    pub(super) fn check_lock_timeouts(&mut self, now: Time, out: &mut O) {
        let Some(limit) = self.cfg.lock_timeout else {
            return;
        };
        if self.recovery.is_some() {
            return;
        }
        for p in self.active() {
            if !self.awaits(p) {
                self.awaited_since.remove(&p);
                continue;
            }
            let since = *self.awaited_since.entry(p).or_insert(now);
            let heard = self.last_heard.get(&p).copied().unwrap_or(Time::ZERO);
            if now >= since.max(heard).saturating_add(limit) {
                self.evict(p, out);
            }
        }
    }

    /// Whether progress here waits for `p`: one of our writes waits for
    /// its reply or its ack, or its request heads a queue with requests
    /// behind it (it holds the lock or is next, and others wait). Nobody
    /// waiting, nothing to evict: an idle holder stays.
    fn awaits(&self, p: NodeId) -> bool {
        let own = self.ops.iter().any(|(&req, op)| match &op.phase {
            Phase::Waiting { replies } => !self.peer_clear(p, req, replies),
            Phase::Writing { unacked, .. } => unacked.contains(&p),
        });
        let committing = self.committing.values().any(|(_, u)| u.contains(&p));
        own || committing
            || self.queues.blocking_heads().any(|n| n == p)
            || self.queues.has_orphan_of(p)
    }

    /// Drop `p` from the lock and the write set until it syncs again:
    /// its requests leave our queues, we stop waiting for its replies and
    /// acks, and tell it so (it then rejoins: `on_evicted`).
    fn evict(&mut self, p: NodeId, out: &mut O) {
        self.counters.evictions += 1;
        self.evicted.insert(p);
        self.awaited_since.remove(&p);
        self.drop_entries_of(p, false, out);
        self.send(p, Body::Evicted, out);
        let acked: Vec<ReqId> = (self.ops.iter_mut())
            .filter_map(|(&req, op)| match &mut op.phase {
                Phase::Writing { unacked, .. } => {
                    unacked.remove(&p);
                    unacked.is_empty().then_some(req)
                }
                Phase::Waiting { .. } => None,
            })
            .collect();
        for req in acked {
            self.finish(req, out);
        }
        let reqs: Vec<ReqId> = self.committing.keys().copied().collect();
        for req in reqs {
            self.on_commit_ack(p, req, out);
        }
    }

    /// A peer evicted us: our requests are void there. Give them up (a
    /// write not entered is refused; one inside its critical section has
    /// an unknown outcome), then rejoin by syncing from every peer.
    pub(super) fn on_evicted(&mut self, from: NodeId, out: &mut O) {
        if self.recovery.is_some() {
            return; // already rejoining
        }
        let reqs: Vec<ReqId> = self.ops.keys().copied().collect();
        for req in reqs {
            let op = &self.ops[&req];
            let resp = match op.phase {
                Phase::Waiting { .. } => OpError::refused(format!("evicted by server {from}")),
                Phase::Writing { .. } => OpError::unknown(format!("evicted by server {from}")),
            };
            if let Some(client) = op.client {
                out.reply(client, Response::Failed(resp));
            }
            self.withdraw(req, out);
        }
        self.start_recovery(out);
    }
}

fn commit_body(s: &Staged) -> Body {
    Body::Commit {
        req: s.req,
        scope: s.scope.clone(),
        key: s.key.clone(),
        value: s.value.clone(),
    }
}

/// The key of the write staged under `req`, if any.
fn slot_key(n: &mut LamportNode, scope: &Scope, req: ReqId) -> Option<bytes::Bytes> {
    (n.queues.get_mut(scope, req)).and_then(|s| s.write.as_ref().map(|(k, _)| k.clone()))
}

#[cfg(test)]
mod tests {
    use super::super::msg::{Body, ReqId, Scope, Staged, Timer};
    use super::super::node::{Config, LamportNode};
    use super::super::testing::*;
    use crate::protocol::contract::{LinkEvent, Protocol};
    use crate::types::{ClientRef, Peer, Response, Tag};

    fn tag(ts: u64, node: u64) -> Tag {
        Tag { ts, writer: node }
    }

    /// Recovery mode (§2 `r`): ask every peer, serve nobody until all
    /// answered, keep the newest version of each key, repair the peers.
    #[test]
    fn a_recovering_server_merges_every_peers_store_then_repairs_them() {
        let mut n = LamportNode::new(1, &[1, 2, 3], Config::default()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        assert_eq!(
            sent(&mut out),
            vec![(2, Body::SyncRequest), (3, Body::SyncRequest)]
        );
        n.on_client(T0, ClientRef::local(1), get("k"), &mut out);
        assert!(matches!(&answers(&mut out)[..], [Response::Failed(e)] if e.is_definite()));
        let old = vec![(b("k"), tag(2, 2), Some(b("old")))];
        let new = vec![(b("k"), tag(5, 3), Some(b("new")))];
        deliver(
            &mut n,
            3,
            9,
            Body::SyncReply {
                staged: vec![],
                unwritten: vec![],
                entries: new.clone(),
                recovering: false,
                lost: false,
            },
            &mut out,
        );
        deliver(
            &mut n,
            3,
            9,
            Body::SyncReply {
                staged: vec![],
                unwritten: vec![],
                entries: vec![],
                recovering: false,
                lost: false,
            },
            &mut out,
        );
        assert!(n.is_recovering(), "a duplicate answer is not 2's");
        deliver(
            &mut n,
            2,
            9,
            Body::SyncReply {
                staged: vec![],
                unwritten: vec![],
                entries: old,
                recovering: false,
                lost: false,
            },
            &mut out,
        );
        assert!(!n.is_recovering());
        let repair = Body::Repair { entries: new };
        assert_eq!(sent(&mut out), vec![(2, repair.clone()), (3, repair)]);
        assert!(
            n.clock > 9,
            "past every peer's clock: its requests come after"
        );
        n.on_client(T0, ClientRef::local(2), get("k"), &mut out);
        assert_eq!(answers(&mut out), vec![Response::Value(Some(b("new")))]);
    }

    /// Sim seed 91: peer 1 is recovering (no witness) and never got the
    /// write; committing at once let 2 and 3 serve it while 1 served the
    /// old value. The commit now waits for every peer's ack to `Commit`.
    #[test]
    fn a_restarted_holder_commits_its_orphan_once_every_peer_holds_it() {
        let mut n = LamportNode::new(3, &[1, 2, 3], cfg_rw()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let w = Staged {
            req: r(11, 3),
            scope: Scope::Global,
            key: b("k"),
            value: Some(b("new")),
            orphan: true,
        };
        let reply = |staged: Vec<Staged>, recovering| Body::SyncReply {
            entries: vec![],
            staged,
            unwritten: vec![],
            recovering,
            lost: recovering,
        };
        deliver(&mut n, 1, 5, reply(vec![], true), &mut out);
        deliver(&mut n, 2, 5, reply(vec![w.clone()], false), &mut out);
        assert!(!n.is_recovering());
        let commit = Body::Commit {
            req: w.req,
            scope: Scope::Global,
            key: b("k"),
            value: Some(b("new")),
        };
        let s = sent(&mut out);
        assert!(
            s.contains(&(1, commit.clone())) && s.contains(&(2, commit)),
            "{s:?}"
        );
        assert!(!s.iter().any(|(_, m)| matches!(m, Body::Resolve { .. })));
        n.on_client(T0, ClientRef::local(1), get("k"), &mut out);
        assert!(answers(&mut out).is_empty(), "the key's reads wait");
        let ack = Body::WriteAck {
            req: w.req,
            applied: true,
        };
        deliver(&mut n, 2, 6, ack.clone(), &mut out);
        assert!(sent(&mut out).is_empty() && n.value(b"k").is_none());
        deliver(&mut n, 1, 6, ack, &mut out);
        let (s, a) = split(&mut out);
        let resolve = Body::Resolve {
            req: w.req,
            scope: Scope::Global,
            commit: true,
        };
        assert!(s.contains(&(1, resolve.clone())) && s.contains(&(2, resolve)));
        assert_eq!(a, vec![Response::Value(Some(b("new")))]);
        // A peer that never had the write stages it: its reads wait too.
        let mut p = LamportNode::new(1, &[1, 2, 3], cfg_rw());
        let c = Body::Commit {
            req: w.req,
            scope: Scope::Global,
            key: b("k"),
            value: Some(b("new")),
        };
        deliver(&mut p, 3, 20, c, &mut out);
        assert!(p.queues.is_staged(b"k"));
        let resolve = Body::Resolve {
            req: w.req,
            scope: Scope::Global,
            commit: true,
        };
        deliver(&mut p, 3, 21, resolve, &mut out);
        assert_eq!(p.value(b"k"), Some(b("new")));
        assert!(p.queues.is_empty());
    }

    /// Sim seed 291: a peer learnt of a holder's staged write (here: its
    /// SERVER_WRITE) after the holder's new life synced with it, so it
    /// never marked it orphan; the new life's `Outstanding`, which cannot
    /// list it, released it as if its RELEASE_LOCK were lost and the
    /// write, never finished, was applied. Another life's request is now
    /// an orphan, left for the verdict; the same life's is released.
    #[test]
    fn another_lifes_outstanding_leaves_a_staged_write_to_its_verdict() {
        let mut n = LamportNode::new(2, &[1, 2, 3], cfg_rw());
        let mut out = O::new();
        let old = r(3, 1);
        let scope = Scope::Global;
        let lock = Body::RequestLock {
            req: old,
            scope: scope.clone(),
        };
        deliver(&mut n, 1, 3, lock, &mut out);
        deliver(&mut n, 1, 4, write(old, "v"), &mut out);
        let new_life = outstanding(1);
        deliver(&mut n, 1, 1, new_life, &mut out);
        assert!(n.queues.is_staged(b"k"), "kept for the verdict");
        assert_eq!(n.queues.orphans_of(1).len(), 1);
        assert_eq!(n.value(b"k"), None);
        let resolve = Body::Resolve {
            req: old,
            scope: Scope::Global,
            commit: false,
        };
        deliver(&mut n, 1, 2, resolve, &mut out);
        assert!(n.queues.is_empty() && n.value(b"k").is_none(), "aborted");
        // The same life's Outstanding not listing it: its release was lost.
        let lock = Body::RequestLock { req: old, scope };
        deliver(&mut n, 1, 3, lock, &mut out);
        deliver(&mut n, 1, 4, write(old, "v"), &mut out);
        let same = outstanding(0);
        deliver(&mut n, 1, 5, same, &mut out);
        assert!(n.queues.is_empty());
        assert_eq!(n.value(b"k"), Some(b("v")));
    }

    /// A request of another life is another request, though its clock
    /// and node are the same (a restarted server's clock starts at 0).
    #[test]
    fn requests_of_two_lives_differ_and_so_do_their_versions() {
        let (a, b) = (r(3, 1), ReqId { life: 1, ..r(3, 1) });
        assert!(a != b && a < b);
        assert!(a.tag() < b.tag() && r(3, 1).tag() < r(3, 2).tag());
        assert!(
            ReqId { life: 9, ..r(3, 1) }.tag() < r(3, 2).tag(),
            "node first"
        );
    }

    fn cfg_rw() -> Config {
        Config {
            read_wait: true,
            ..Config::default()
        }
    }

    /// A peer recovering at the same time lost its state too: its answer
    /// counts but gives nothing. With every peer recovering nobody could
    /// give the state: ask again (each tick) until one holds it (sim seed
    /// 566: ending there served, and counted as a holder, with nothing).
    #[test]
    fn a_recovering_peer_answers_with_nothing() {
        let mut n = LamportNode::new(1, &[1, 2], Config::default()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        deliver(&mut n, 2, 1, Body::SyncRequest, &mut out);
        let s = sent(&mut out);
        let reply = Body::SyncReply {
            staged: vec![],
            unwritten: vec![],
            entries: vec![],
            recovering: true,
            lost: true,
        };
        assert_eq!(s.last(), Some(&(2, reply)));
        let junk = vec![(b("k"), tag(1, 2), Some(b("junk")))];
        deliver(
            &mut n,
            2,
            2,
            Body::SyncReply {
                staged: vec![],
                unwritten: vec![],
                entries: junk,
                recovering: true,
                lost: false,
            },
            &mut out,
        );
        assert!(n.is_recovering(), "nobody with the state answered");
        assert!(n.value(b"k").is_none(), "a recovering peer's store is junk");
        assert_eq!(n.counters.sourceless_rounds, 1);
        out.drain();
        n.on_timer(T0, Timer::Tick, &mut out);
        assert!(
            sent(&mut out).contains(&(2, Body::SyncRequest)),
            "asked again"
        );
        let good = vec![(b("k"), tag(3, 2), Some(b("good")))];
        let reply = Body::SyncReply {
            staged: vec![],
            unwritten: vec![],
            entries: good,
            recovering: false,
            lost: false,
        };
        deliver(&mut n, 2, 5, reply, &mut out);
        assert!(!n.is_recovering());
        assert_eq!(n.value(b"k"), Some(b("good")));
        // A lone server has nobody to ask.
        let mut solo = LamportNode::new(1, &[1], Config::default()).recovering();
        solo.on_start(T0, &mut out);
        assert!(!solo.is_recovering());
    }

    /// A peer answering a SyncRequest first drops what it still queues of
    /// the sender's previous life, lists its own requests, then its store.
    #[test]
    fn a_sync_request_drops_the_senders_old_requests_and_resyncs_first() {
        let mut n = LamportNode::new(2, &[1, 2], Config::default());
        let mut out = O::new();
        deliver(
            &mut n,
            1,
            1,
            Body::RequestLock {
                req: r(1, 1),
                scope: Scope::Global,
            },
            &mut out,
        );
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        assert!(!n.holds_lock(), "behind the dead server's request");
        out.drain();
        deliver(&mut n, 1, 1, Body::SyncRequest, &mut out);
        assert_eq!(
            n.queues.head(&Scope::Global),
            Some(r(3, 2)),
            "old request gone"
        );
        let s = sent(&mut out);
        let mine = Body::Outstanding {
            life: 0,
            reqs: vec![(r(3, 2), Scope::Global)],
        };
        assert_eq!(s[0], (1, mine));
        assert!(matches!(
            s.last(),
            Some((
                1,
                Body::SyncReply {
                    recovering: false,
                    lost: false,
                    ..
                }
            ))
        ));
        // The new life's clock restarted: its reply to our listed request
        // is the later message we still need.
        assert!(!n.holds_lock());
        deliver(&mut n, 1, 4, Body::ReplyLock { req: r(3, 2) }, &mut out);
        assert!(n.holds_lock());
    }

    /// Evicted: a write still waiting is refused (never entered), one in
    /// its critical section has an unknown outcome; both are withdrawn and
    /// the server rejoins by syncing with everyone.
    #[test]
    fn an_evicted_server_gives_up_its_writes_and_rejoins() {
        let mut n = LamportNode::new(1, &[1, 2, 3], Config::default());
        let mut out = O::new();
        n.on_client(T0, ClientRef::local(1), put("k", "a"), &mut out);
        deliver(&mut n, 2, 5, Body::ReplyLock { req: r(1, 1) }, &mut out);
        deliver(&mut n, 3, 5, Body::ReplyLock { req: r(1, 1) }, &mut out);
        assert!(n.holds_lock());
        n.on_client(T0, ClientRef::local(2), put("k", "b"), &mut out);
        out.drain();
        deliver(&mut n, 2, 6, Body::Evicted, &mut out);
        let (s, a) = split(&mut out);
        assert!(
            matches!(&a[..], [Response::Failed(x), Response::Failed(y)]
            if !x.is_definite() && y.is_definite()),
            "{a:?}"
        );
        assert!(s.contains(&(
            3,
            Body::ReleaseLock {
                req: r(1, 1),
                scope: Scope::Global
            }
        )));
        assert!(s.contains(&(2, Body::SyncRequest)) && s.contains(&(3, Body::SyncRequest)));
        assert!(n.is_recovering() && n.queues.is_empty());
        assert_eq!(n.value(b"k"), Some(b("a")), "applied before the eviction");
    }

    /// A server that evicted a peer answers it with `Evicted` again when
    /// its link comes back, and ignores everything else until it syncs.
    #[test]
    fn an_evicted_peer_is_ignored_until_it_syncs() {
        let mut n = LamportNode::new(1, &[1, 2], Config::default());
        n.evicted.insert(2);
        let mut out = O::new();
        n.on_link(T0, LinkEvent::Up(Peer::Node(2)), &mut out);
        assert_eq!(sent(&mut out), vec![(2, Body::Evicted)]);
        deliver(
            &mut n,
            2,
            3,
            Body::RequestLock {
                req: r(3, 2),
                scope: Scope::Global,
            },
            &mut out,
        );
        assert!(out.is_empty() && n.queues.is_empty());
        assert_eq!(n.counters.from_evicted, 1);
        deliver(&mut n, 2, 4, Body::SyncRequest, &mut out);
        assert!(n.evicted.is_empty());
        assert_eq!(sent(&mut out).len(), 2, "Outstanding, SyncReply");
    }
}

#[cfg(test)]
mod poll_tests {
    use super::super::msg::{Body, ReqId, Scope, Timer};
    use super::super::node::{Config, LamportNode};
    use super::super::testing::*;
    use crate::protocol::contract::Protocol;
    use crate::types::ClientRef;

    /// Sim seed 0 (crash,pause, read-wait): a restarted server's
    /// SyncRequest vanished in a link reset only its peer saw; it stayed
    /// recovering forever. Now every tick asks again whoever has not
    /// answered.
    #[test]
    fn a_recovering_server_asks_again_until_every_peer_answered() {
        let mut n = LamportNode::new(1, &[1, 2, 3], Config::default()).recovering();
        let mut out = O::new();
        n.on_start(T0, &mut out);
        out.drain();
        let reply = Body::SyncReply {
            staged: vec![],
            unwritten: vec![],
            entries: vec![],
            recovering: false,
            lost: false,
        };
        deliver(&mut n, 2, 3, reply.clone(), &mut out);
        out.drain();
        n.on_timer(T0, Timer::Tick, &mut out);
        assert_eq!(sent(&mut out), vec![(3, Body::SyncRequest)]);
        deliver(&mut n, 3, 3, reply, &mut out);
        assert!(!n.is_recovering());
        out.drain();
        n.on_timer(T0, Timer::Tick, &mut out);
        assert!(sent(&mut out).is_empty(), "recovered: nobody to ask");
    }

    /// A peer's request heads our queue and its RELEASE_LOCK was lost in
    /// a reset we never saw (no `Up` here): after a whole tick awaited the
    /// peer is polled; its `Outstanding` drops the stale request.
    #[test]
    fn a_peer_awaited_for_a_whole_tick_is_polled_and_its_stale_request_goes() {
        let mut n = LamportNode::new(2, &[1, 2], Config::default());
        let mut out = O::new();
        let stale = ReqId {
            ts: 1,
            node: 1,
            life: 0,
        };
        let scope = Scope::Global;
        let lock = Body::RequestLock { req: stale, scope };
        deliver(&mut n, 1, 1, lock, &mut out);
        n.on_client(T0, ClientRef::local(1), put("k", "v"), &mut out);
        out.drain();
        n.on_timer(T0, Timer::Tick, &mut out);
        assert!(sent(&mut out).is_empty(), "awaited for less than a tick");
        n.on_timer(T0, Timer::Tick, &mut out);
        let s = sent(&mut out);
        assert!(s.contains(&(1, Body::Poll)), "{s:?}");
        assert!(matches!(s[0], (1, Body::Outstanding { .. })), "{s:?}");
        assert!(!n.holds_lock());
        deliver(&mut n, 1, 9, outstanding(0), &mut out);
        assert!(n.holds_lock(), "the stale request left the head");
        // And a polled server answers with its own resync.
        out.drain();
        deliver(&mut n, 1, 10, Body::Poll, &mut out);
        assert!(matches!(
            &sent(&mut out)[..],
            [(1, Body::Outstanding { .. }), ..]
        ));
    }
}
