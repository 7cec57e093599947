//! ABD's registration: how drivers build it, its options and its assumptions.

use super::bugs::InjectedBug;
use super::coordinator::{Coordinator, CoordinatorConfig};
use super::msg::{Msg, Timer};
use super::node::AbdNode;
use crate::protocol::contract::{
    ClientSpec, InjectedBugs, LinkModel, NamedVariant, NodeSpec, ProtocolDef,
};
use crate::protocol::contract::{Out, Timing};
use crate::protocol::options::{format_duration, parse_bool, parse_duration};
use crate::protocol::options::{OptSpec, ProtocolOptions};
use crate::types::{NodeId, Time};
use std::time::Duration;

/// ABD as the registry knows it: server = replica + proxy coordinator;
/// clients may run a bare coordinator (the seeds' design).
#[derive(Debug)]
pub struct Abd;

/// ABD's options (`--opt fast-read=false`, `[options]` in a cluster file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbdOptions {
    /// Skip the write-back when the query quorum agrees on one tag.
    pub fast_read: bool,
    /// Send each phase to Q replicas first instead of all N.
    pub thrifty: bool,
    /// How long a thrifty phase waits before asking the other replicas too.
    pub thrifty_fallback: Duration,
    /// The last `spares` servers of the cluster start outside the first
    /// configuration, for `quorumkv member add` (`reconfig.rs`).
    pub spares: usize,
}

impl Default for AbdOptions {
    fn default() -> Self {
        let c = CoordinatorConfig::default();
        AbdOptions {
            fast_read: c.fast_read,
            thrifty: c.thrifty,
            thrifty_fallback: c.thrifty_fallback,
            spares: 0,
        }
    }
}

impl ProtocolOptions for AbdOptions {
    fn specs() -> &'static [OptSpec] {
        &[
            OptSpec {
                name: "fast-read",
                default: "true",
                help: "skip a get's write-back when the query quorum agrees on one tag",
            },
            OptSpec {
                name: "thrifty",
                default: "false",
                help: "send each phase to a quorum of replicas first instead of all N",
            },
            OptSpec {
                name: "thrifty-fallback",
                default: "5ms",
                help: "how long a thrifty phase waits before asking every replica",
            },
            OptSpec {
                name: "spares",
                default: "0",
                help: "the last K servers start outside the configuration (quorumkv member add)",
            },
        ]
    }
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "fast-read" => self.fast_read = parse_bool(value)?,
            "thrifty" => self.thrifty = parse_bool(value)?,
            "thrifty-fallback" => self.thrifty_fallback = parse_duration(value)?,
            "spares" => {
                self.spares = value
                    .parse()
                    .map_err(|_| format!("spares: '{value}' is not a count of servers"))?
            }
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    }
    fn check_size(&self, n: usize) -> Result<(), String> {
        if self.spares >= n {
            return Err(format!(
                "spares={} leaves no server in the configuration of {n}",
                self.spares
            ));
        }
        Ok(())
    }
    fn get(&self, key: &str) -> String {
        match key {
            "fast-read" => self.fast_read.to_string(),
            "thrifty" => self.thrifty.to_string(),
            "thrifty-fallback" => format_duration(self.thrifty_fallback),
            "spares" => self.spares.to_string(),
            _ => String::new(),
        }
    }
}

impl AbdOptions {
    fn coordinator(&self, t: &Timing) -> CoordinatorConfig {
        CoordinatorConfig {
            op_timeout: t.op_timeout,
            retry_interval: t.retry_interval,
            fast_read: self.fast_read,
            thrifty: self.thrifty,
            thrifty_fallback: self.thrifty_fallback,
        }
    }
}

impl InjectedBugs for InjectedBug {
    fn all() -> &'static [Self] {
        InjectedBug::ALL
    }
    fn name(self) -> &'static str {
        InjectedBug::name(self)
    }
    fn about(self) -> &'static str {
        self.describe()
    }
}

impl ProtocolDef for Abd {
    const NAME: &'static str = "abd";
    const ABOUT: &'static str =
        "Attiya-Bar-Noy-Dolev multi-writer atomic register: two quorum phases per operation";
    // Idempotent handlers and retransmission: loss, duplication and
    // reordering are all tolerated (seed 002 §3.1 assumes no more).
    const LINK_MODEL: LinkModel = LinkModel::Unreliable;
    const HAS_CLIENT_COORDINATOR: bool = true;
    const PROMISES_LIVENESS: bool = true;
    // No request ids: a duplicated put may apply again after the client
    // moved on, which the simulator shows when asked to duplicate requests.
    const DEDUPLICATES_REQUESTS: bool = false;
    const VARIANTS: &'static [NamedVariant] = &[
        NamedVariant {
            name: "thrifty",
            about: "each phase to a quorum first, falling back to all",
            options: &[("thrifty", "true")],
        },
        NamedVariant {
            name: "no-fast-read",
            about: "every get writes back (the seeds' ABD)",
            options: &[("fast-read", "false")],
        },
    ];
    type Msg = Msg;
    type Node = AbdNode;
    type Client = Coordinator;
    type Options = AbdOptions;
    type Bug = InjectedBug;
    type Invariants = super::invariants::AbdInvariants;

    // `max_crashed`: the default, a majority must stay up (f = N − Q).

    fn node(spec: &NodeSpec<'_>, opts: &AbdOptions, bug: Option<InjectedBug>) -> AbdNode {
        let cfg = opts.coordinator(&spec.timing);
        let node = AbdNode::new(spec.id, spec.members.to_vec(), spec.durable, cfg)
            .with_spares(opts.spares)
            .with_bug(bug)
            .with_writer(spec.writer_id());
        // A replica that lost its data catches up from its peers first.
        if spec.lost_state {
            node.recovering()
        } else {
            node
        }
    }
    fn client(spec: &ClientSpec<'_>, opts: &AbdOptions, bug: Option<InjectedBug>) -> Coordinator {
        let cfg = opts.coordinator(&spec.timing);
        // Epoch 0's members; a replica's `Moved` teaches it later ones.
        let keep = spec.members.len().saturating_sub(opts.spares).max(1);
        Coordinator::new(spec.writer_id, spec.members[..keep].to_vec(), cfg).with_bug(bug)
    }
    fn available(node: &AbdNode) -> bool {
        !node.is_recovering()
    }
    /// What a client-side [`Coordinator`] sends: the two phases' requests.
    /// Never `SyncRequest` (it would hand the whole store to anyone), nor
    /// a reply (`QueryReply`, `StoreAck`, `SyncReply`), which only a
    /// replica sends.
    fn client_may_send(msg: &Msg) -> bool {
        match msg {
            Msg::Query { .. } | Msg::Store { .. } => true,
            // Replies, recovery and membership change: servers only.
            _ => false,
        }
    }
    /// Membership change (`reconfig.rs`): the server offered the draw
    /// runs it, unless a change is in flight where it can see.
    fn reconfigure(
        node: &mut AbdNode,
        now: Time,
        all: &[NodeId],
        draw: u64,
        out: &mut Out<Msg, Timer>,
    ) -> Option<String> {
        let new = node.draw_config(all, draw)?;
        let epoch = node.propose(now, &new, out).ok()?;
        Some(format!("reconfig to {new:?} as epoch {epoch}"))
    }
    /// Knob bit 0: thrifty coordinators, half the seeds.
    fn vary(opts: &mut AbdOptions, knobs: u64) {
        opts.thrifty = knobs & 1 == 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_render_and_reach_the_coordinator() {
        let pairs = [
            ("thrifty".to_string(), "on".to_string()),
            ("fast-read".to_string(), "false".to_string()),
        ];
        let o = AbdOptions::from_pairs(&pairs).unwrap();
        assert!(o.thrifty && !o.fast_read);
        assert_eq!(AbdOptions::from_pairs(&o.pairs()).unwrap(), o);
        let c = o.coordinator(&Timing::default());
        assert!(c.thrifty && !c.fast_read);
        let bad = [("thrifty".to_string(), "maybe".to_string())];
        assert!(AbdOptions::from_pairs(&bad)
            .unwrap_err()
            .contains("thrifty"));
    }

    /// Every message a client-side coordinator sends through a few
    /// operations (puts, gets with and without write-back, a delete) passes
    /// `client_may_send`; every reply and peer-only message is refused.
    #[test]
    fn a_client_may_send_exactly_what_its_coordinator_sends() {
        use crate::protocol::abd::testing::{key, put, Net};
        use crate::types::{Request, Tag};
        use bytes::Bytes;
        let spec = ClientSpec {
            writer_id: crate::protocol::registry::client_writer_id(1),
            members: &[1, 2, 3],
            timing: Timing::default(),
            seed: 1,
        };
        let mut net = Net::new(3);
        for fast_read in [true, false] {
            let opts = AbdOptions {
                fast_read,
                ..Default::default()
            };
            let mut c = Abd::client(&spec, &opts, None);
            net.run(&mut c, put(b"a"));
            net.run(&mut c, Request::Get { key: key() });
            net.run(&mut c, Request::Delete { key: key() });
            net.run(&mut c, Request::Get { key: key() });
        }
        assert!(net.sent.iter().any(|m| matches!(m, Msg::Query { .. })));
        assert!(net.sent.iter().any(|m| matches!(m, Msg::Store { .. })));
        for m in &net.sent {
            assert!(Abd::client_may_send(m), "{m:?}");
        }
        let peer_only = [
            Msg::QueryReply {
                op: 1,
                tag: Tag::ZERO,
                value: None,
            },
            Msg::StoreAck { op: 1 },
            Msg::SyncRequest,
            Msg::SyncReply {
                entries: vec![(Bytes::from_static(b"k"), Tag::ZERO, None)],
            },
        ];
        for m in &peer_only {
            assert!(!Abd::client_may_send(m), "{m:?}");
        }
        let check = crate::protocol::client_may_send_fn::<Abd>();
        assert!(check(&net.sent[0]) && !check(&Msg::SyncRequest));
    }

    #[test]
    fn a_node_that_lost_its_state_recovers_first() {
        let members = [1, 2, 3];
        let mut spec = NodeSpec {
            seed: 1,
            ..crate::protocol::test_harness::node_spec(2, &members)
        };
        assert!(!Abd::node(&spec, &AbdOptions::default(), None).is_recovering());
        spec.lost_state = true;
        assert!(Abd::node(&spec, &AbdOptions::default(), None).is_recovering());
        assert_eq!(Abd::max_crashed(3), 1);
        assert_eq!(Abd::max_crashed(5), 2);
    }
}
