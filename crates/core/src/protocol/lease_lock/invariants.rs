//! Lease-lock's per-step invariants (`ProtocolDef::Invariants`), checked by
//! the simulator after every step (seed 000 §4.2):
//!
//! 1. **A running lease is never taken over**: a replica's lock on a key
//!    passes from one holder to another only through a free lock (UNLOCK,
//!    the lease's end, the holder's connection lost, a restart).
//! 2. **One holder per key at a time**: of the coordinators past their
//!    lock round (reading or writing a key), at most one still holds a
//!    running lease at every replica it locked. A lease may end under its
//!    holder (it then learns so from a WRITE_DENIED): that holder no
//!    longer counts, which is why this is "per lease period" and not "per
//!    operation". Two majorities share a replica, which holds one lock, so
//!    only a smaller quorum breaks this. Per configuration epoch
//!    (`reconfig.rs`): a holder in an older epoch holds locks at replicas
//!    that are frozen or have moved on, which take no WRITE of its epoch.
//!
//! The first looks at the replica that stepped only; the second at every
//! coordinator holding locks (a handful), after every step.

use super::coordinator::{Coordinator, Phase};
use super::msg::LockId;
use super::node::LeaseNode;
use crate::protocol::contract::{Roles, StepInvariants};
use crate::types::Time;
use bytes::Bytes;
use std::collections::HashMap;

/// What the run has shown so far: per replica, each key's lock when last
/// seen.
#[derive(Debug, Default)]
pub struct LeaseInvariants {
    locks: Vec<HashMap<Bytes, (LockId, Time)>>,
}

impl LeaseInvariants {
    fn no_takeover(&mut self, i: usize, n: &LeaseNode, now: Time) -> Result<(), String> {
        if self.locks.len() <= i {
            self.locks.resize_with(i + 1, HashMap::new);
        }
        let seen = &mut self.locks[i];
        for (key, k) in n.replica.entries() {
            let before = seen.get(key).copied();
            match (before, k.lock) {
                (Some((old, end)), Some((new, _))) if old != new && now < end => {
                    return Err(format!(
                        "lease-lock: a running lease is never taken over: n{} gave key {key:?} \
                         to {new:?} while {old:?}'s lease ran ({}us left)",
                        i + 1,
                        end.0 - now.0
                    ));
                }
                (_, Some(lock)) if before != Some(lock) => {
                    seen.insert(key.clone(), lock);
                }
                (Some(_), None) => {
                    seen.remove(key);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether `lock` runs at `now` on every replica of `locked` (a bitmask of
/// node ids): a crashed replica forgot it.
fn fully_held(
    nodes: &[Option<&LeaseNode>],
    key: &[u8],
    lock: LockId,
    locked: u64,
    now: Time,
) -> bool {
    (nodes.iter().enumerate()).all(|(i, n)| {
        locked & 1 << (i + 1) == 0 || n.and_then(|n| n.replica.holder(key, now)) == Some(lock)
    })
}

/// The keys `c` reads or writes past its lock round, with their lock.
fn holding(c: &Coordinator) -> impl Iterator<Item = (&Bytes, LockId, u64)> + '_ {
    (c.pending.iter()).filter_map(move |(&round, p)| match p.phase {
        Phase::Reading { locked, .. } | Phase::Writing { locked, .. } => {
            Some((&p.key, c.lock_id(round), locked))
        }
        Phase::Locking { .. } | Phase::Backoff => None,
    })
}

fn one_holder(roles: &Roles<'_, LeaseNode, Coordinator>) -> Result<(), String> {
    let coords = (roles.nodes.iter().flatten().map(|n| &n.coord))
        .chain(roles.clients.iter().flatten().copied());
    let mut holders: Vec<(&Bytes, u64, LockId)> = Vec::new();
    for c in coords {
        for (key, lock, locked) in holding(c) {
            if !fully_held(roles.nodes, key, lock, locked, roles.now) {
                continue;
            }
            let epoch = c.epoch;
            if let Some((_, _, other)) = (holders.iter()).find(|(k, e, _)| *k == key && *e == epoch)
            {
                return Err(format!(
                    "lease-lock: one holder per key: {lock:?} and {other:?} both hold key \
                     {key:?} with running leases at every replica they locked"
                ));
            }
            holders.push((key, epoch, lock));
        }
    }
    Ok(())
}

impl StepInvariants<LeaseNode, Coordinator> for LeaseInvariants {
    fn crashed(&mut self, i: usize) {
        if let Some(l) = self.locks.get_mut(i) {
            l.clear();
        }
    }

    fn after_step(&mut self, roles: &Roles<'_, LeaseNode, Coordinator>) -> Result<(), String> {
        if let Some((i, n)) = roles.stepped_node() {
            self.no_takeover(i, n, roles.now)?;
        }
        one_holder(roles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::{Out, Stepped};
    use crate::protocol::lease_lock::{CoordinatorConfig, Msg};
    use crate::types::Peer;
    use std::time::Duration;

    fn node(id: u32) -> LeaseNode {
        LeaseNode::new(
            id,
            vec![1, 2, 3],
            Duration::from_millis(100),
            false,
            CoordinatorConfig::default(),
        )
    }

    fn lock_req(n: &mut LeaseNode, now: Time, owner: u64) {
        let msg = Msg::LockReq {
            lock: LockId { owner, round: 1 },
            key: Bytes::from_static(b"k"),
            epoch: 0,
        };
        crate::protocol::contract::Protocol::on_msg(n, now, Peer::Node(2), msg, &mut Out::new());
    }

    fn step(inv: &mut LeaseInvariants, n: &LeaseNode, now: Time) -> Result<(), String> {
        inv.after_step(&Roles {
            now,
            stepped: Stepped::Node(0),
            nodes: &[Some(n)],
            clients: &[],
        })
    }

    #[test]
    fn a_lease_taken_over_while_it_runs_is_caught_and_an_expired_one_is_not() {
        let t = |ms: u64| Time(ms * 1000);
        for (bug, caught) in [
            (None, false),
            (Some(super::super::Bug::GrantWhileHeld), true),
        ] {
            let mut n = node(1).with_bug(bug);
            let mut inv = LeaseInvariants::default();
            lock_req(&mut n, t(0), 7);
            assert_eq!(step(&mut inv, &n, t(0)), Ok(()));
            lock_req(&mut n, t(10), 8);
            assert_eq!(step(&mut inv, &n, t(10)).is_err(), caught, "{bug:?}");
        }
        // After the lease (100 ms), another holder is fine.
        let mut n = node(1);
        let mut inv = LeaseInvariants::default();
        lock_req(&mut n, t(0), 7);
        assert_eq!(step(&mut inv, &n, t(0)), Ok(()));
        lock_req(&mut n, t(150), 8);
        assert_eq!(step(&mut inv, &n, t(150)), Ok(()));
    }
}
