//! How a protocol plugs into the simulator: [`SimProtocol`] says how to build
//! a server node and (if the protocol has one) a client-side coordinator,
//! which injected bugs exist and whether the protocol promises progress.
//! [`crate::registry`] lists the protocols `quorumkv sim --protocol` knows;
//! adding one is an `impl SimProtocol` here plus one line there.

use crate::config::Timing;
use quorumkv_core::protocol::abd::{self, AbdNode, Coordinator, CoordinatorConfig, InjectedBug};
use quorumkv_core::protocol::Protocol;
use quorumkv_core::NodeId;
use std::fmt::Debug;

/// What the simulator tells a protocol when it builds a server node.
#[derive(Clone, Debug)]
pub struct NodeSpec<'a, B> {
    pub id: NodeId,
    /// How many times this node has restarted (0 at first boot). Cores that
    /// must not reuse identifiers across a crash (ABD's writer id) mix it in.
    pub incarnation: u64,
    /// All replica ids of the cluster (1..=N), including `id`.
    pub members: &'a [NodeId],
    /// Emit `Persist` before acknowledging (durability mode `durable`).
    pub durable: bool,
    pub bug: Option<B>,
    pub timing: Timing,
    /// The seed's random bits for optional behaviours (`SeedParams::knobs`).
    pub knobs: u64,
}

/// What the simulator tells a protocol when it builds a client-side coordinator.
#[derive(Clone, Debug)]
pub struct ClientSpec<'a, B> {
    /// Unique among all writers of the cluster: `1_000_000 + client index`,
    /// never equal to a node's (`id | incarnation << 32`).
    pub writer_id: u64,
    pub members: &'a [NodeId],
    pub bug: Option<B>,
    pub timing: Timing,
    /// The seed's random bits for optional behaviours (`SeedParams::knobs`).
    pub knobs: u64,
}

/// A protocol the simulator can drive.
pub trait SimProtocol: 'static {
    /// The name `--protocol` takes.
    const NAME: &'static str;
    /// Whether the protocol promises that, once faults heal, every operation
    /// completes (the liveness phase checks it).
    const PROMISES_LIVENESS: bool;
    /// Whether a server applies a client request at most once even when it
    /// arrives twice (a client's retry after the first attempt got through).
    /// If so, the `dup` fault also duplicates proxy-mode client requests, to
    /// exercise the dedup path. ABD has none (no request ids): a duplicated
    /// put can apply again after the client moved on, which the checker
    /// catches (see the test `a_protocol_that_claims_dedup_without_it_is_caught`).
    const DEDUPLICATES_REQUESTS: bool = false;
    /// The messages nodes and client coordinators exchange.
    type Msg: Clone + Debug;
    /// A server node (replica, plus proxy coordinator if the protocol has one).
    type Node: Protocol<Msg = Self::Msg>;
    /// The client-side coordinator. Protocols without one set this to
    /// `Self::Node` and return `None` from [`SimProtocol::client`].
    type Client: Protocol<Msg = Self::Msg>;
    /// The protocol's deliberate bugs (testing aid of `--inject-bug`).
    type Bug: Copy + Debug + PartialEq + Send + Sync + 'static;

    fn bugs() -> &'static [Self::Bug];
    fn bug_name(bug: Self::Bug) -> &'static str;
    fn bug_about(bug: Self::Bug) -> &'static str;

    fn node(spec: &NodeSpec<'_, Self::Bug>) -> Self::Node;
    /// A client-side coordinator, or `None` when clients must go through a
    /// server (then every seed runs in proxy mode).
    fn client(spec: &ClientSpec<'_, Self::Bug>) -> Option<Self::Client>;
    /// Whether a live node takes part in quorums. A node that is up but
    /// not available (an ABD replica still recovering after a restart)
    /// counts as down for the nemesis, which never takes more than f nodes
    /// out at once.
    fn available(_node: &Self::Node) -> bool {
        true
    }

    fn has_client_coordinator() -> bool {
        let members = [1];
        let spec = ClientSpec {
            writer_id: 1,
            members: &members,
            bug: None,
            timing: Timing::default(),
            knobs: 0,
        };
        Self::client(&spec).is_some()
    }
    fn find_bug(name: &str) -> Option<Self::Bug> {
        Self::bugs()
            .iter()
            .copied()
            .find(|&b| Self::bug_name(b) == name)
    }
}

// -------------------------------------------------------------------- ABD

/// ABD (crates/core/src/protocol/abd/): server = replica + proxy
/// coordinator; clients may run a bare coordinator.
pub struct Abd;

/// Knob bit 0: thrifty coordinators (Q replicas first), half the seeds.
fn abd_config(t: &Timing, knobs: u64) -> CoordinatorConfig {
    CoordinatorConfig {
        op_timeout: t.op_timeout,
        retry_interval: t.retry_interval,
        fast_read: true,
        thrifty: knobs & 1 == 1,
        thrifty_fallback: t.retry_interval / 4,
    }
}

impl SimProtocol for Abd {
    const NAME: &'static str = "abd";
    const PROMISES_LIVENESS: bool = true;
    type Msg = abd::Msg;
    type Node = AbdNode;
    type Client = Coordinator;
    type Bug = InjectedBug;

    fn bugs() -> &'static [InjectedBug] {
        InjectedBug::ALL
    }
    fn bug_name(bug: InjectedBug) -> &'static str {
        bug.name()
    }
    fn bug_about(bug: InjectedBug) -> &'static str {
        bug.describe()
    }
    fn node(s: &NodeSpec<'_, InjectedBug>) -> AbdNode {
        // A fresh writer id per boot: a restarted node has forgotten its tags.
        let writer = s.id as u64 | s.incarnation << 32;
        let node = AbdNode::new(
            s.id,
            s.members.to_vec(),
            s.durable,
            abd_config(&s.timing, s.knobs),
        )
        .with_bug(s.bug)
        .with_writer(writer);
        // Memory durability: a restarted replica lost its data and must
        // catch up from its peers before it answers queries.
        if !s.durable && s.incarnation > 0 {
            node.recovering()
        } else {
            node
        }
    }
    fn available(node: &AbdNode) -> bool {
        !node.is_recovering()
    }
    fn client(s: &ClientSpec<'_, InjectedBug>) -> Option<Coordinator> {
        Some(
            Coordinator::new(
                s.writer_id,
                s.members.to_vec(),
                abd_config(&s.timing, s.knobs),
            )
            .with_bug(s.bug),
        )
    }
}
