//! ABD's per-step invariants (`ProtocolDef::Invariants`), checked by the
//! simulator after every step.
//!
//! **A tag names one value**, everywhere and forever: every writer issues
//! each ts once under its own writer id (a coordinator never reuses a ts,
//! a restarted node writes under a new id), and write-backs copy a
//! `(tag, value)` pair whole. So no two replicas, nor one replica at two
//! times, hold different values under one `(key, tag)`. A read exposes a
//! break only if its quorum happens to mix the two values; this sees it at
//! the step a replica stores the second one.
//!
//! **One configuration per epoch** (`reconfig.rs`): Paxos decides each
//! epoch's members once, so no two replicas, nor one at two times, install
//! different members under one epoch.

use super::coordinator::Coordinator;
use super::node::AbdNode;
use crate::protocol::contract::{Roles, StepInvariants};
use crate::types::Tag;
use bytes::Bytes;
use std::collections::HashMap;

/// The value each `(key, tag)` named when first seen at a replica.
#[derive(Debug, Default)]
pub struct AbdInvariants {
    named: HashMap<(Bytes, Tag), Option<Bytes>>,
    configs: HashMap<u64, Vec<crate::types::NodeId>>,
}

impl StepInvariants<AbdNode, Coordinator> for AbdInvariants {
    fn after_step(&mut self, roles: &Roles<'_, AbdNode, Coordinator>) -> Result<(), String> {
        // Only the replica that stepped can hold anything new.
        let Some((i, node)) = roles.stepped_node() else {
            return Ok(());
        };
        let c = &node.changes.epochs.installed;
        let first = self
            .configs
            .entry(c.epoch)
            .or_insert_with(|| c.members.clone());
        if *first != c.members {
            return Err(format!(
                "abd: one configuration per epoch: n{} installed members {:?} as epoch {}, \
                 which had members {:?}",
                i + 1,
                c.members,
                c.epoch,
                first
            ));
        }
        for (key, (tag, value)) in node.replica.entries() {
            if *tag == Tag::ZERO {
                continue;
            }
            match self.named.get(&(key.clone(), *tag)) {
                Some(first) if first != value => {
                    return Err(format!(
                        "abd: a tag names one value: n{} holds {:?} under tag {tag:?} of key {:?}, \
                         which named {:?} before",
                        i + 1,
                        value,
                        key,
                        first
                    ))
                }
                Some(_) => {}
                None => {
                    self.named.insert((key.clone(), *tag), value.clone());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::{CoordinatorConfig, Msg};
    use crate::protocol::contract::{Out, Protocol};
    use crate::protocol::test_harness::after_node_step as check;
    use crate::types::{Peer, Time};

    fn store(n: &mut AbdNode, ts: u64, value: &'static str) {
        let msg = Msg::Store {
            op: 1,
            key: Bytes::from_static(b"k"),
            tag: Tag { ts, writer: 9 },
            value: Some(Bytes::from_static(value.as_bytes())),
            epoch: 0,
        };
        n.on_msg(Time::ZERO, Peer::Node(3), msg, &mut Out::new());
    }

    #[test]
    fn one_tag_two_values_on_two_replicas_is_caught() {
        let node = || AbdNode::new(1, vec![1, 2], false, CoordinatorConfig::default());
        let (mut a, mut b) = (node(), node());
        let mut inv = AbdInvariants::default();
        store(&mut a, 1, "x");
        assert_eq!(check(&mut inv, &[&a, &b], 0), Ok(()));
        store(&mut b, 1, "x");
        assert_eq!(check(&mut inv, &[&a, &b], 1), Ok(()), "the same pair");
        store(&mut b, 2, "y");
        assert_eq!(check(&mut inv, &[&a, &b], 1), Ok(()), "a newer tag");
        let mut c = node();
        store(&mut c, 2, "z");
        let e = check(&mut inv, &[&a, &b, &c], 2).unwrap_err();
        assert!(
            e.contains("a tag names one value") && e.contains("n3"),
            "{e}"
        );
    }
}
