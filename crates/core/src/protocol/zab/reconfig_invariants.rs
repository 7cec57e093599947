//! The membership invariants (`invariants.rs` numbers them 7 and 8),
//! checked after every step of a server from the servers' states, never
//! from the leader's bookkeeping (which an injected bug fakes):
//!
//! 7. **Committed configurations agree**: the configuration a server has
//!    in effect at its applied index, set by the entry at log position p,
//!    is the one every server has from p on.
//! 8. **Nothing commits without a quorum of every configuration in
//!    effect at its position**: when a leader's commit index moves from
//!    `prev` to `c`, the servers whose log holds entry `c` (same epoch,
//!    hence the same prefix by log matching) hold a majority of the
//!    configuration committed at `prev` and of every configuration entry
//!    in `prev + 1 ..= c` (old and new while a reconfiguration is pending;
//!    ZooKeeper 3.5's rule). A server that is down, or recovering after
//!    losing its state, counts as holding it (its ACK may predate the
//!    crash): the check is lenient where the simulator cannot see.

use super::members::Members;
use super::node::{Role, ZabNode};
use crate::types::NodeId;
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct Membership {
    /// Log position of a configuration entry → the configuration it set,
    /// as first seen committed.
    at: HashMap<u64, Members>,
    /// Per server: (writer id of the life, commit index) after its last step.
    commits: Vec<(u64, u64)>,
}

impl Membership {
    pub fn check(
        &mut self,
        i: usize,
        n: &ZabNode,
        nodes: &[Option<&ZabNode>],
    ) -> Result<(), String> {
        if self.commits.len() < nodes.len() {
            self.commits.resize(nodes.len(), (0, 0));
        }
        self.committed_agree(i, n)?;
        let (writer, prev) = std::mem::replace(&mut self.commits[i], (n.writer, n.commit));
        let leading = matches!(&n.role, Role::Leading(l) if l.established);
        if leading && writer == n.writer && n.commit > prev {
            return quorum_holds(i, n, prev, nodes);
        }
        Ok(())
    }

    /// Invariant 7.
    fn committed_agree(&mut self, i: usize, n: &ZabNode) -> Result<(), String> {
        let at = n.applied.max(n.log.base());
        let Some((p, m)) = n.log.members_entry_at(at) else {
            return Ok(());
        };
        match self.at.get(&p) {
            Some(seen) if seen != m => Err(format!(
                "zab: committed configurations agree: n{} has {:?} in effect from position {p}, \
                 another server had {:?} from there",
                i + 1,
                m.ids(),
                seen.ids()
            )),
            Some(_) => Ok(()),
            None => {
                self.at.insert(p, m.clone());
                Ok(())
            }
        }
    }
}

/// Invariant 8 for leader `n`, whose commit index moved from `prev`.
fn quorum_holds(
    i: usize,
    n: &ZabNode,
    prev: u64,
    nodes: &[Option<&ZabNode>],
) -> Result<(), String> {
    let c = n.commit.min(n.log.last());
    let Some(epoch) = n.log.epoch_at(c) else {
        return Ok(()); // below what its log knows (a SNAP): nothing to compare
    };
    let from = prev.max(n.log.base());
    let mut cfgs: Vec<&Members> = vec![n.log.members_at(from).unwrap_or(&n.initial)];
    cfgs.extend(
        (n.log.members_above(from))
            .filter(|&(k, _)| k <= c)
            .map(|(_, m)| m),
    );
    let holds = |id: NodeId| {
        let j = (id as usize).wrapping_sub(1);
        match nodes.get(j) {
            Some(Some(m)) => m.is_recovering() || m.log.epoch_at(c) == Some(epoch),
            // Down (or a server the simulator does not run): lenient.
            _ => true,
        }
    };
    for m in cfgs {
        if !m.majority_in(holds) {
            let have: Vec<NodeId> = m.ids().iter().copied().filter(|&x| holds(x)).collect();
            return Err(format!(
                "zab: an entry commits only with a quorum of every configuration in effect: \
                 n{} committed index {c} (epoch {epoch}), held by {have:?} of configuration {:?}",
                i + 1,
                m.ids()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::invariants::ZabInvariants;
    use super::super::node::Config;
    use super::super::roles::Leading;
    use super::super::state_machine::Payload;
    use super::*;
    use crate::protocol::test_harness::after_node_step as step;
    use crate::types::Time;
    use bytes::Bytes;

    fn server(id: u32) -> ZabNode {
        ZabNode::new(id, &[1, 2, 3], u64::from(id), Config::default()).with_spares(&[4, 5])
    }

    fn config_entry(ids: &[NodeId]) -> Bytes {
        let op = Members::new(ids).expect("a configuration").to_op();
        (Payload {
            origin: 1,
            rid: 0,
            op,
        })
        .to_bytes()
    }

    /// `n` holds entry 1 (a write) and 2 (the configuration {1..5}).
    fn holds(n: &mut ZabNode) {
        n.log.append(1, Bytes::from_static(b"w"));
        n.log.append(1, config_entry(&[1, 2, 3, 4, 5]));
    }

    fn leader() -> ZabNode {
        let mut n = server(1);
        n.role = Role::Leading(Leading {
            epoch: 1,
            established: true,
            ..Leading::new(Time::ZERO)
        });
        holds(&mut n);
        n
    }

    /// Invariant 8: the entry that adds two servers commits only once a
    /// majority of the new five holds it, not with the old three's.
    #[test]
    fn a_commit_without_the_new_configurations_quorum_is_caught() {
        let mut l = leader();
        let mut s: Vec<ZabNode> = (2..=5).map(server).collect();
        holds(&mut s[0]); // n2
        let mut inv = ZabInvariants::default();
        assert_eq!(step(&mut inv, &[&l, &s[0], &s[1], &s[2], &s[3]], 0), Ok(()));
        l.commit = 2;
        let e = step(&mut inv, &[&l, &s[0], &s[1], &s[2], &s[3]], 0).unwrap_err();
        assert!(e.contains("quorum of every configuration"), "{e}");
        assert!(e.contains("[1, 2, 3, 4, 5]"), "{e}");
        // With n4 holding it too, three of five do: fine.
        let mut inv = ZabInvariants::default();
        l.commit = 0;
        holds(&mut s[2]); // n4
        assert_eq!(step(&mut inv, &[&l, &s[0], &s[1], &s[2], &s[3]], 0), Ok(()));
        l.commit = 2;
        assert_eq!(step(&mut inv, &[&l, &s[0], &s[1], &s[2], &s[3]], 0), Ok(()));
    }

    /// Invariant 7: two servers with different configurations committed
    /// at one position.
    #[test]
    fn two_configurations_committed_at_one_position_are_caught() {
        let (mut a, mut b) = (server(1), server(2));
        a.log.append(1, config_entry(&[1, 2]));
        b.log.append(1, config_entry(&[1, 3]));
        (a.commit, a.applied, b.commit, b.applied) = (1, 1, 1, 1);
        let mut inv = Membership::default();
        assert_eq!(inv.check(0, &a, &[Some(&a), Some(&b)]), Ok(()));
        let e = inv.check(1, &b, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(e.contains("committed configurations agree"), "{e}");
    }
}
