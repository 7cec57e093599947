//! Zab's per-step invariants (`ProtocolDef::Invariants`), checked by the
//! simulator after every step of a server (seed 003 §2.2.1; PROTOCOLS.md §5):
//!
//! 1. **One established leader per epoch**: an epoch's leader is the one
//!    server life that won a quorum's ACKEPOCH for it (a quorum promised
//!    it, and a quorum promises one leader per epoch), so no two lives
//!    reach the broadcast phase (a quorum's ACKNEWLEADER) in one epoch.
//! 2. **Delivered prefixes agree** (primary order, lines 683-691): the
//!    entry a server delivers at index i is the one every server delivers
//!    at i (same epoch, same data).
//! 3. **A delivered entry is never truncated** (within a server's life):
//!    the log keeps every delivered index, with the epoch it had.
//!
//! 4. **An expired session owns no ephemeral** (the znode machine): every
//!    ephemeral node belongs to an open session that lists it.
//! 5. **Sequential suffixes never repeat**: a node's next sequential
//!    suffix never goes back within a server's life (a node deleted and
//!    created again, a new creation zxid, starts afresh).
//!
//! 6. **A read index is handed out only while a quorum follows its
//!    leader**: when a leader of epoch e hands out read indexes, a quorum
//!    of servers (itself included) had promised no epoch above e when
//!    the earliest of those reads arrived. Otherwise a newer leader may
//!    already have committed writes the read would miss (the PING round
//!    of `reads.rs` is what guarantees it).
//!
//! 7. and 8., membership (`reconfig_invariants.rs`): committed
//!    configurations agree, and nothing commits without a quorum of every
//!    configuration in effect at its position.
//!
//! 9. **A TTL node outlives its TTL**: a `DeleteTtl` the leader proposed
//!    (and every server delivers) is stamped at least the node's TTL
//!    after the change it names (`mzxid`, stamped `mtime`), as every
//!    server saw them. The simulator's servers share one clock, so the
//!    stamps of successive leaders compare there.
//!
//! Beside them, the read-index rule over messages (`read_rounds.rs`,
//! through `ProtocolDef::observe`): a read index is handed out only after
//! a quorum answered a PING round begun after the read arrived. It needs
//! no newer leader to exist, so it catches an unconfirmed read index
//! where invariant 6 would wait for a partition to elect one.
//!
//! Each check looks at the server that stepped only, and at what it
//! delivered since its last check: the cost per step is constant, but for
//! 4 and 5, which walk that server's znode tree (a handful of nodes).

use super::members::Members;
use super::msg::Msg;
use super::node::{Role, ZabNode};
use super::read_rounds::ReadRounds;
use super::reconfig_invariants::Membership;
use crate::protocol::contract::{Roles, Seen, StepInvariants};
use crate::types::Time;
use bytes::Bytes;
use std::collections::HashMap;

/// What one life of a server has shown so far.
#[derive(Clone, Copy, Debug, Default)]
struct Life {
    /// Its deliveries up to here were compared with the others'.
    checked: u64,
    /// The epoch of the entry at `checked` when it was delivered.
    epoch: u64,
}

/// What the run has shown so far.
#[derive(Debug, Default)]
pub struct ZabInvariants {
    /// Epoch → (server id, writer id of its life) established as leader.
    leaders: HashMap<u64, (u32, u64)>,
    /// `delivered[i - 1]`: the (epoch, data) first delivered at index i
    /// (data `None` when it arrived inside a snapshot).
    delivered: Vec<(u64, Option<Bytes>)>,
    lives: Vec<Life>,
    /// Per server life: each node's (creation zxid, next sequential
    /// suffix) when last seen, for the nodes that gave suffixes.
    seqs: Vec<HashMap<String, (u64, u64)>>,
    /// Per server: (when, epoch) each time the epoch it promised rose
    /// (started again when a new life forgot it).
    promised: Vec<Vec<(Time, u64)>>,
    /// Per server: the read batches it handed out, as last seen.
    handed: Vec<u64>,
    /// The read-index rule over messages.
    rounds: ReadRounds,
    /// (path, mzxid) → (TTL, mtime) of every TTL node seen (invariant 9).
    ttls: HashMap<(String, u64), (u64, u64)>,
    /// Invariants 7 and 8.
    membership: Membership,
    /// Per server: the configurations in effect after its last step (a
    /// quorum of any of them, or of those after the step, satisfies the
    /// read checks: a commit or proposal may change them mid-step).
    configs: Vec<Vec<Members>>,
}

impl ZabInvariants {
    fn one_leader_per_epoch(&mut self, i: usize, n: &ZabNode) -> Result<(), String> {
        let Role::Leading(l) = &n.role else {
            return Ok(());
        };
        if !l.established {
            return Ok(());
        }
        let me = (n.id, n.writer);
        match *self.leaders.entry(l.epoch).or_insert(me) {
            other if other == me => Ok(()),
            (id, writer) => Err(format!(
                "zab: one established leader per epoch: n{} (writer {:#x}) leads epoch {}, \
                 which n{id} (writer {writer:#x}) led",
                i + 1,
                n.writer,
                l.epoch
            )),
        }
    }

    fn never_truncated(&self, i: usize, n: &ZabNode, life: Life) -> Result<(), String> {
        if life.checked == 0 {
            return Ok(());
        }
        if n.applied < life.checked {
            return Err(format!(
                "zab: a delivered entry is never truncated: n{} went back from delivering {} to {}",
                i + 1,
                life.checked,
                n.applied
            ));
        }
        match n.log.epoch_at(life.checked) {
            Some(e) if e == life.epoch => Ok(()),
            now => Err(format!(
                "zab: a delivered entry is never truncated: n{} delivered index {} of epoch {}, \
                 its log now holds {now:?} there (last {})",
                i + 1,
                life.checked,
                life.epoch,
                n.log.last()
            )),
        }
    }

    /// Compare what `n` delivered since its last check with what others
    /// delivered at the same indexes.
    fn prefixes_agree(&mut self, i: usize, n: &ZabNode, life: &mut Life) -> Result<(), String> {
        let upto = n.applied.min(n.log.last());
        for idx in life.checked + 1..=upto {
            let Some(epoch) = n.log.epoch_at(idx) else {
                continue; // below the snapshot's runs: nothing to compare
            };
            let data = n.log.get(idx);
            let k = (idx - 1) as usize;
            if k == self.delivered.len() {
                self.delivered.push((epoch, data.cloned()));
            } else if let Some((e, d)) = self.delivered.get_mut(k) {
                let same_data = match (&*d, data) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if *e != epoch || !same_data {
                    return Err(format!(
                        "zab: delivered prefixes agree: n{} delivered index {idx} of epoch {epoch}, \
                         another server delivered index {idx} of epoch {e}{}",
                        i + 1,
                        if same_data { "" } else { " with other data" }
                    ));
                }
                if d.is_none() {
                    *d = data.cloned();
                }
            }
            // (k > len: a gap below a snapshot nobody delivered one by one.)
            life.checked = idx;
            life.epoch = epoch;
        }
        Ok(())
    }
}

impl ZabInvariants {
    /// Invariants 4 and 5, over the znode tree of the server that stepped.
    fn znodes(&mut self, i: usize, n: &ZabNode) -> Result<(), String> {
        let tree = &n.sm.tree;
        tree.check_ephemerals().map_err(|e| {
            format!(
                "zab znodes: an expired session owns no ephemeral: n{}: {e}",
                i + 1
            )
        })?;
        if self.seqs.len() <= i {
            self.seqs.resize_with(i + 1, HashMap::new);
        }
        for (path, st, _) in tree.ttl_nodes() {
            let ttl = st.ttl().unwrap_or(0);
            (self.ttls)
                .entry((path.to_string(), st.mzxid))
                .or_insert((ttl, st.mtime));
        }
        let seen = &mut self.seqs[i];
        for (path, czxid, next) in tree.seq_counters().filter(|c| c.2 > 0) {
            match seen.get_mut(path) {
                Some((c, before)) if *c == czxid && next < *before => {
                    return Err(format!(
                        "zab znodes: sequential suffixes never repeat: n{} set {path}'s next \
                         suffix back from {before} to {next}",
                        i + 1
                    ));
                }
                Some(seen) => *seen = (czxid, next),
                None => {
                    seen.insert(path.to_string(), (czxid, next));
                }
            }
        }
        Ok(())
    }
}

impl ZabInvariants {
    /// Invariant 9 over the entries `n` delivered after `from`: each
    /// leader's `DeleteTtl` of a TTL node seen is stamped at least its TTL
    /// after the node's last change (one not seen, created and deleted
    /// within one step of every server, is not judged).
    fn ttl_outlived(&self, i: usize, n: &ZabNode, from: u64, to: u64) -> Result<(), String> {
        use super::state_machine::{Op, Payload};
        use crate::znode::ZnodeOp;
        for idx in from + 1..=to {
            let Some(p) = n.log.get(idx).and_then(|d| Payload::from_bytes(d)) else {
                continue;
            };
            let Some(Op::Znode(e)) = Op::decode(&mut super::codec::Reader(&p.op)) else {
                continue;
            };
            let ZnodeOp::DeleteTtl { path, mzxid } = e.op else {
                continue;
            };
            let Some(&(ttl, mtime)) = self.ttls.get(&(path.clone(), mzxid)) else {
                continue;
            };
            if e.time_ms < mtime.saturating_add(ttl) {
                return Err(format!(
                    "zab znodes: a TTL node outlives its TTL: n{} delivered the deletion of \
                     {path} (TTL {ttl} ms, changed at {mtime} ms, zxid {mzxid}) stamped {} ms",
                    i + 1,
                    e.time_ms
                ));
            }
        }
        Ok(())
    }
}

impl ZabInvariants {
    /// Note the epoch server `i` promised (invariant 6).
    fn note_promise(&mut self, i: usize, n: &ZabNode, now: Time) {
        let p = &mut self.promised[i];
        let epoch = n.accepted.0;
        match p.last() {
            Some(&(_, e)) if e == epoch => {}
            Some(&(_, e)) if e > epoch => *p = vec![(now, epoch)],
            _ => p.push((now, epoch)),
        }
    }

    /// Invariant 6 for the reads `n` handed out in this step.
    fn reads_confirmed(&mut self, i: usize, n: &ZabNode) -> Result<(), String> {
        let h = n.reads.handed;
        if std::mem::replace(&mut self.handed[i], h.batches) == h.batches {
            return Ok(());
        }
        let above = |p: &Vec<(Time, u64)>| p.iter().any(|&(t, e)| t < h.arrived && e > h.epoch);
        let following = self.promised.iter().filter(|p| !above(p)).count();
        let follows = |id: u32| {
            let j = (id as usize).wrapping_sub(1);
            self.promised.get(j).is_some_and(|p| !above(p))
        };
        let before = self.configs.get(i).map_or(&[][..], |c| &c[..]);
        let now = n.configs();
        let any = (before.iter().chain(now.iter().copied())).any(|m| m.majority_in(follows));
        if any {
            return Ok(());
        }
        Err(format!(
            "zab: a read index is handed out only while a quorum follows its leader: n{} \
             (epoch {}) handed out a read that arrived at {:.3}ms, when only {following} \
             server(s) had promised no later epoch",
            i + 1,
            h.epoch,
            h.arrived.as_micros() as f64 / 1000.0
        ))
    }
}

impl ZabInvariants {
    /// `ProtocolDef::observe`: the read-index rule over messages.
    pub(super) fn observe(&mut self, n: usize, seen: Seen<'_, ZabNode, Msg>) -> Result<(), String> {
        self.rounds.observe(n, seen)
    }
}

impl ZabInvariants {
    /// Keep `n`'s configurations for the next step's read checks, here
    /// and in the message-level rule.
    fn note_configs(&mut self, i: usize, n: &ZabNode) {
        if self.configs.len() <= i {
            self.configs.resize_with(i + 1, Vec::new);
        }
        let now: Vec<Members> = n.configs().into_iter().cloned().collect();
        if self.configs[i] != now {
            self.rounds.set_configs(i, &now);
            self.configs[i] = now;
        }
    }
}

impl StepInvariants<ZabNode, ZabNode> for ZabInvariants {
    fn crashed(&mut self, i: usize) {
        self.rounds.crashed(i);
        if let Some(l) = self.lives.get_mut(i) {
            *l = Life::default();
        }
        if let Some(s) = self.seqs.get_mut(i) {
            s.clear();
        }
        if let Some(h) = self.handed.get_mut(i) {
            *h = 0; // a new life counts its reads from 0
        }
    }

    fn after_step(&mut self, roles: &Roles<'_, ZabNode, ZabNode>) -> Result<(), String> {
        let Some((i, n)) = roles.stepped_node() else {
            return Ok(());
        };
        if self.lives.len() < roles.nodes.len() {
            self.lives.resize(roles.nodes.len(), Life::default());
            self.promised.resize_with(roles.nodes.len(), Vec::new);
            self.handed.resize(roles.nodes.len(), 0);
        }
        self.note_promise(i, n, roles.now);
        self.reads_confirmed(i, n)?;
        self.note_configs(i, n);
        self.membership.check(i, n, roles.nodes)?;
        self.one_leader_per_epoch(i, n)?;
        self.znodes(i, n)?;
        let mut life = self.lives[i];
        self.never_truncated(i, n, life)?;
        let from = life.checked;
        let r = self.prefixes_agree(i, n, &mut life);
        self.lives[i] = life;
        r?;
        self.ttl_outlived(i, n, from, life.checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_harness::after_node_step as step;
    use crate::protocol::zab::node::Config;
    use crate::protocol::zab::roles::Leading;
    use crate::types::Time;

    fn server(id: u32) -> ZabNode {
        ZabNode::new(id, &[1, 2, 3], u64::from(id), Config::default())
    }

    fn lead(n: &mut ZabNode, epoch: u64) {
        n.role = Role::Leading(Leading {
            epoch,
            established: true,
            ..Leading::new(Time::ZERO)
        });
    }

    fn deliver(n: &mut ZabNode, epoch: u64, data: &'static [u8]) {
        n.log.append(epoch, Bytes::from_static(data));
        n.applied = n.log.last();
    }

    #[test]
    fn two_leaders_of_one_epoch_are_caught() {
        let (mut a, mut b) = (server(1), server(2));
        let mut inv = ZabInvariants::default();
        lead(&mut a, 3);
        assert_eq!(step(&mut inv, &[&a, &b], 0), Ok(()));
        lead(&mut b, 4);
        assert_eq!(step(&mut inv, &[&a, &b], 1), Ok(()), "another epoch");
        lead(&mut b, 3);
        let e = step(&mut inv, &[&a, &b], 1).unwrap_err();
        assert!(e.contains("one established leader per epoch"), "{e}");
    }

    #[test]
    fn diverging_deliveries_and_truncated_ones_are_caught() {
        let (mut a, mut b) = (server(1), server(2));
        let mut inv = ZabInvariants::default();
        deliver(&mut a, 1, b"x");
        deliver(&mut b, 1, b"x");
        assert_eq!(step(&mut inv, &[&a, &b], 0), Ok(()));
        assert_eq!(step(&mut inv, &[&a, &b], 1), Ok(()), "the same entry");
        deliver(&mut a, 1, b"y");
        assert_eq!(step(&mut inv, &[&a, &b], 0), Ok(()));
        deliver(&mut b, 2, b"z");
        let e = step(&mut inv, &[&a, &b], 1).unwrap_err();
        assert!(e.contains("delivered prefixes agree"), "{e}");

        let mut inv = ZabInvariants::default();
        let mut c = server(3);
        deliver(&mut c, 1, b"x");
        assert_eq!(step(&mut inv, &[&c], 0), Ok(()));
        c.log.truncate_from(1);
        let e = step(&mut inv, &[&c], 0).unwrap_err();
        assert!(e.contains("never truncated"), "{e}");
        inv.crashed(0);
        let fresh = server(3);
        assert_eq!(step(&mut inv, &[&fresh], 0), Ok(()), "a new life");
    }
}
