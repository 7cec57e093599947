//! What a protocol tells the drivers about itself: its [`ProtocolDef`]
//! (name, link model, how to build its node and client-side coordinator,
//! options, injected bugs, crash bound), the specs a driver builds roles
//! from, and the [`ProtocolInfo`] the CLI shows. Nothing here knows which
//! protocols exist: that list is `registry.rs`.

use super::invariants::{Seen, StepInvariants};
use super::role::Protocol;
use crate::protocol::options::{OptSpec, ProtocolOptions};
use crate::quorum::minority;
use crate::types::NodeId;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::{self, Debug};
use std::time::Duration;

/// What a protocol assumes of the links between its roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkModel {
    /// TCP-like: per pair of endpoints, messages arrive in order, at most
    /// once, and nothing is lost silently — a loss is a connection reset,
    /// reported as `LinkEvent::Down` then `Up`, after which messages sent
    /// meanwhile may be missing (a gap). Zab, Lamport's mutex and the ring
    /// rely on it. The simulator then models loss as a reset, and neither
    /// duplicates nor reorders unless asked to.
    FifoReliable,
    /// FIFO-reliable links between live nodes that never break, and a
    /// perfect failure detector: `LinkEvent::Down(Peer::Node(j))` means `j`
    /// crashed (a synchronous system: a slow or paused node is never
    /// suspected). The ring relies on it. The simulator then never resets a
    /// connection between live nodes (loss is retransmitted, only late) and
    /// suspects only crashed nodes, and partitioned ones: a partition is a
    /// false suspicion, outside this model.
    Reliable,
    /// Datagrams: messages may be lost, duplicated and reordered, with no
    /// notice. ABD tolerates it (idempotent handlers, retransmission).
    Unreliable,
}

impl LinkModel {
    /// Whether messages between two endpoints arrive in order, at most once.
    pub fn is_fifo(self) -> bool {
        matches!(self, LinkModel::FifoReliable | LinkModel::Reliable)
    }
}

impl fmt::Display for LinkModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkModel::FifoReliable => "fifo-reliable",
            LinkModel::Reliable => "reliable",
            LinkModel::Unreliable => "unreliable",
        })
    }
}

/// The timing every protocol's coordinator needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// An operation not done by then fails with an unknown outcome.
    pub op_timeout: Duration,
    /// Retransmit interval for protocols that retransmit.
    pub retry_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            op_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_millis(200),
        }
    }
}

/// What a driver tells a protocol when it builds a server node.
#[derive(Clone, Debug)]
pub struct NodeSpec<'a> {
    pub id: NodeId,
    /// All replica ids of the cluster (1..=N), including `id`.
    pub members: &'a [NodeId],
    /// Which life of this node this is: the simulator counts restarts (0 at
    /// first boot); the node runtime draws a random boot id until durable
    /// storage keeps a boot counter. See [`NodeSpec::writer_id`].
    pub incarnation: u64,
    /// `Persist` records survive a crash (the durability mode is durable).
    pub durable: bool,
    /// This node ran before and lost its state (memory mode restart, or
    /// `server --recover`): it must catch up from its peers before serving.
    pub lost_state: bool,
    pub timing: Timing,
    /// Seed of the core's random source (backoff jitter, election timeouts,
    /// coin tosses): from the seed and node id in the simulator, from the
    /// OS in the node runtime. Cores never draw randomness elsewhere.
    pub seed: u64,
}

impl NodeSpec<'_> {
    /// The incarnation / writer-id rule, written once: a restarted node has
    /// forgotten which identifiers (ABD tags, Zab epochs' proposals, lock
    /// tokens) it issued before, so each life writes under its own id:
    /// node id in the low 32 bits, incarnation above it, bit 63 clear.
    /// Client ids ([`client_writer_id`]) have bit 63 set, so they never meet.
    pub fn writer_id(&self) -> u64 {
        u64::from(self.id) | (self.incarnation & 0x7FFF_FFFF) << 32
    }
}

/// A client-side coordinator's writer id from any number unique among the
/// cluster's clients (a random draw, or the simulator's client index).
pub fn client_writer_id(n: u64) -> u64 {
    n | 1 << 63
}

/// What a driver tells a protocol when it builds a client-side coordinator.
#[derive(Clone, Debug)]
pub struct ClientSpec<'a> {
    /// Unique among all writers of the cluster, never a node's writer id.
    pub writer_id: u64,
    pub members: &'a [NodeId],
    pub timing: Timing,
    /// Seed of the coordinator's random source.
    pub seed: u64,
}

/// A protocol's deliberate bugs, for the simulator's self-test
/// (`quorumkv sim --inject-bug`) and mutation-style checks.
pub trait InjectedBugs: Copy + Debug + PartialEq + Send + Sync + 'static {
    fn all() -> &'static [Self];
    fn name(self) -> &'static str;
    fn about(self) -> &'static str;
    fn find(name: &str) -> Option<Self> {
        Self::all().iter().copied().find(|b| b.name() == name)
    }
}

/// The bugs of a protocol that has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoBugs {}

impl InjectedBugs for NoBugs {
    fn all() -> &'static [Self] {
        &[]
    }
    fn name(self) -> &'static str {
        match self {}
    }
    fn about(self) -> &'static str {
        match self {}
    }
}

/// A named set of options worth comparing in `quorumkv bench --variant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedVariant {
    pub name: &'static str,
    pub about: &'static str,
    /// `(option, value)` pairs applied over the defaults.
    pub options: &'static [(&'static str, &'static str)],
}

/// Which replicas a [`PointRatio`] counter is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// The replica whose denominator counter grew most over the point
    /// (the leader, for a leader's counter).
    Busiest,
    /// Summed over every replica.
    All,
}

/// A ratio of two of the protocol's counters (`Protocol::metrics`) over a
/// bench point, shown beside its throughput: e.g. Zab's ACKs received per
/// commit at the leader. The bench reads every replica's counters before
/// and after the point and divides the differences.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PointRatio {
    /// Column name in the bench's table and files.
    pub label: &'static str,
    pub help: &'static str,
    pub num: (&'static str, Over),
    pub den: (&'static str, Over),
    /// Multiplies the ratio (units: 0.001 turns µs into ms).
    pub scale: f64,
}

impl PointRatio {
    pub const fn new(
        label: &'static str,
        help: &'static str,
        num: (&'static str, Over),
        den: (&'static str, Over),
    ) -> PointRatio {
        PointRatio {
            label,
            help,
            num,
            den,
            scale: 1.0,
        }
    }
    pub const fn scaled(self, scale: f64) -> PointRatio {
        PointRatio { scale, ..self }
    }
}

/// Everything drivers need to know about one protocol.
pub trait ProtocolDef: 'static {
    /// The name `--protocol` and cluster files use (kebab-case).
    const NAME: &'static str;
    /// One line for `--help` and `quorumkv protocols`.
    const ABOUT: &'static str;
    const LINK_MODEL: LinkModel;
    /// Whether clients may run the coordinator themselves; if not, the
    /// client library and the simulator go through a server (proxy).
    const HAS_CLIENT_COORDINATOR: bool;
    /// Whether, once faults heal, every operation completes (the
    /// simulator's liveness phase checks it).
    const PROMISES_LIVENESS: bool;
    /// Whether a server applies a request at most once even when it
    /// arrives twice with the same [`crate::OpId`] (a client's retry).
    /// If so, the simulator's `dup` fault duplicates client requests too.
    const DEDUPLICATES_REQUESTS: bool = false;
    /// Whether the node keeps state on disk (`Command::Persist`). If not,
    /// every restart loses the node's state, durable mode or not, and
    /// drivers report it as `NodeSpec::lost_state`.
    const PERSISTS_STATE: bool = true;
    /// Option sets the bench offers by name (`--variant NAME`), besides
    /// `default`; each must be valid options of the protocol.
    const VARIANTS: &'static [NamedVariant] = &[];
    /// Ratios of counters the bench reports per point (`quorumkv bench`).
    const POINT_RATIOS: &'static [PointRatio] = &[];
    /// Whether, under a saturating write load from clients spread evenly
    /// over the servers, each server's clients complete a fair share of
    /// the writes (the ring's nb_msg rule). The simulator's load phase
    /// checks it.
    const PROMISES_FAIRNESS: bool = false;

    /// Compared only by tests and the decoder checks (`PartialEq`).
    type Msg: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + 'static;
    /// A server node (replica, plus a proxy coordinator if clients may ask it).
    type Node: Protocol<Msg = Self::Msg> + Debug + Send + 'static;
    /// The client-side coordinator; protocols without one set `Self::Node`.
    type Client: Protocol<Msg = Self::Msg> + Debug + Send + 'static;
    type Options: ProtocolOptions;
    type Bug: InjectedBugs;
    /// What the simulator checks of the roles' states after every step
    /// ([`super::NoInvariants`] for none).
    type Invariants: StepInvariants<Self::Node, Self::Client>;

    /// The most nodes of `n` that may be down at once, having lost their
    /// state, with the protocol still safe and, once they return, live: ABD
    /// ⌊(N−1)/2⌋, the ring N−1. The simulator's nemesis keeps to it where
    /// nodes forget (memory durability, or `PERSISTS_STATE == false`) unless
    /// a fault outside the assumptions is asked for; where they keep their
    /// records (fsync, buffered) it may crash every node at once.
    /// Default: a majority must stay up, f = N − Q = ⌊(N−1)/2⌋ (ABD,
    /// lease-lock and Zab, every majority-quorum protocol).
    fn max_crashed(n: usize) -> usize {
        minority(n)
    }
    /// Whether the `max_crashed` bound holds where nodes keep their records
    /// too (an assumption such as seed 003's A1.2: never fewer than a
    /// quorum up), so the nemesis keeps to it in every durability mode
    /// (outages still break it on request).
    fn bounds_durable_crashes(_opts: &Self::Options) -> bool {
        false
    }

    fn node(spec: &NodeSpec<'_>, opts: &Self::Options, bug: Option<Self::Bug>) -> Self::Node;
    /// Called only when `HAS_CLIENT_COORDINATOR`.
    fn client(spec: &ClientSpec<'_>, opts: &Self::Options, bug: Option<Self::Bug>) -> Self::Client;
    /// Whether a live node takes part in quorums (an ABD replica still
    /// recovering does not; the nemesis counts it as down).
    fn available(_node: &Self::Node) -> bool {
        true
    }
    /// Let the simulator vary optional behaviours per seed from random
    /// `knobs`, so every variant gets simulated; `--opt` overrides after.
    fn vary(_opts: &mut Self::Options, _knobs: u64) {}
    /// How long, with no faults, a finished operation may still refuse
    /// later ones on its key: state it leaves to expire rather than
    /// release (lease-lock's surplus grants in the seed's mode: a lease).
    /// The simulator's stall probe waits this long before each of its
    /// lone operations, which must then succeed.
    fn linger(_opts: &Self::Options, _timing: &Timing) -> Duration {
        Duration::ZERO
    }
    /// Whether `msg` may come from a connection that is not a replica: a
    /// client running the client-side coordinator ([`Self::Client`]). The
    /// node layer refuses every other message on a client connection, so a
    /// client cannot pose as a peer (issue 31). Default: none may; a
    /// protocol with a client coordinator lists exactly the requests that
    /// coordinator sends, never a reply or a peer-only message.
    fn client_may_send(_msg: &Self::Msg) -> bool {
        false
    }
    /// The log index up to which `msg`, sent by a server, says that
    /// server's log is on its disk (an ACK of log entries, whose quorum
    /// counts it as durable), or `None`. The simulator checks the claim
    /// against the records it knows are synced (`fsync` mode): the
    /// invariant "no ACK for an entry not on disk". Default: no message
    /// claims anything.
    fn log_durable_claim(_msg: &Self::Msg) -> Option<u64> {
        None
    }
    /// Message-level checks over a cluster of `n` servers: called with
    /// what the driver saw pass (unless `--no-invariants`), keeping their
    /// state in the run's `inv`, which is told of crashes as for
    /// `after_step`. `Err` names the rule broken, like `after_step`; the
    /// driver adds where. Keep it cheap: it sees every message. Default:
    /// no check.
    fn observe(
        _inv: &mut Self::Invariants,
        _n: usize,
        _seen: Seen<'_, Self::Node, Self::Msg>,
    ) -> Result<(), String> {
        Ok(())
    }
    /// Whether `node`'s state holds znode session `session` open (`None`:
    /// the protocol serves no znodes). The simulator's sessions promise
    /// reads it: a session whose client fell silent must be gone from a
    /// quorum of the available servers within its timeout plus a bound.
    fn znode_session_open(_node: &Self::Node, _session: u64) -> Option<bool> {
        None
    }
    /// The timeout (ms) of znode session `session` in `node`'s state, if
    /// it holds the session open (`None` also where the protocol serves no
    /// znodes). The sessions promise counts from the timeout the session
    /// was opened with; a server holding another was renewed since.
    fn znode_session_timeout_ms(_node: &Self::Node, _session: u64) -> Option<u64> {
        None
    }
    /// The znode operations `msg` carries as log entries, each with the
    /// session that asked (`None`: the protocol does not say). The
    /// simulator leaves out of the znode history a request whose answer
    /// was lost and which no delivered message ever carried, so a
    /// protocol that says must name every message that hands an entry to
    /// another server, and must commit nothing one server alone holds.
    fn znode_entries(_msg: &Self::Msg) -> Option<Vec<(u64, crate::znode::op::ZnodeOp)>> {
        None
    }
    /// The simulator's `reconfig` fault: ask server `node` to change the
    /// cluster's membership to a configuration drawn from `draw` (random
    /// bits) over the servers `all`. A server that cannot take it (not the
    /// leader, a change in flight) does nothing and returns `None`;
    /// otherwise what it proposed, for the trace. Default: the protocol
    /// has no membership change.
    fn reconfigure(
        _node: &mut Self::Node,
        _now: crate::types::Time,
        _all: &[NodeId],
        _draw: u64,
        _out: &mut super::role::Out<Self::Msg, <Self::Node as Protocol>::Timer>,
    ) -> Option<String> {
        None
    }
}

/// [`ProtocolDef::client_may_send`] as a plain function pointer, for a
/// driver that keeps the check beside a `P: Protocol` it is generic over.
pub type ClientMaySend<M> = fn(&M) -> bool;

/// `D`'s [`ProtocolDef::client_may_send`] as a [`ClientMaySend`].
pub fn client_may_send_fn<D: ProtocolDef>() -> ClientMaySend<D::Msg> {
    D::client_may_send
}

/// Something to do with a protocol's types, chosen by name at run time.
pub trait Visitor {
    type Output;
    fn visit<D: ProtocolDef>(self) -> Self::Output;
}

/// A bug of some protocol, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BugInfo {
    pub name: &'static str,
    pub about: &'static str,
}

/// What the CLI shows of a protocol, without its types.
#[derive(Clone, Debug)]
pub struct ProtocolInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub link_model: LinkModel,
    pub has_client_coordinator: bool,
    pub promises_liveness: bool,
    pub deduplicates_requests: bool,
    /// `ProtocolDef::PERSISTS_STATE`: whether `--durability` can keep
    /// anything of this protocol's state across a restart.
    pub persists_state: bool,
    pub options: &'static [OptSpec],
    pub variants: &'static [NamedVariant],
    pub point_ratios: &'static [PointRatio],
    pub bugs: Vec<BugInfo>,
    max_crashed: fn(usize) -> usize,
    check_options: CheckOptions,
}

/// Whether `key = value` pairs are valid options of one protocol.
type CheckOptions = fn(&[(String, String)]) -> Result<(), String>;

impl ProtocolInfo {
    pub fn max_crashed(&self, n: usize) -> usize {
        (self.max_crashed)(n)
    }
    /// Whether `pairs` are valid options of this protocol.
    pub fn check_options(&self, pairs: &[(String, String)]) -> Result<(), String> {
        (self.check_options)(pairs).map_err(|e| format!("protocol {}: {e}", self.name))
    }
    /// `--help` text: one line per option.
    pub fn options_help(&self) -> String {
        if self.options.is_empty() {
            return format!("  {}: no options\n", self.name);
        }
        let mut s = format!("  {}:\n", self.name);
        for o in self.options {
            s += &format!("    {:<18} {} (default {})\n", o.name, o.help, o.default);
        }
        s
    }
    /// What the CLI shows of `D`.
    pub fn of<D: ProtocolDef>() -> ProtocolInfo {
        ProtocolInfo {
            name: D::NAME,
            about: D::ABOUT,
            link_model: D::LINK_MODEL,
            has_client_coordinator: D::HAS_CLIENT_COORDINATOR,
            promises_liveness: D::PROMISES_LIVENESS,
            deduplicates_requests: D::DEDUPLICATES_REQUESTS,
            persists_state: D::PERSISTS_STATE,
            options: D::Options::specs(),
            variants: D::VARIANTS,
            point_ratios: D::POINT_RATIOS,
            bugs: (D::Bug::all().iter())
                .map(|&b| BugInfo {
                    name: b.name(),
                    about: b.about(),
                })
                .collect(),
            max_crashed: D::max_crashed,
            check_options: |p| D::Options::from_pairs(p).map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_ids_of_nodes_and_clients_never_meet() {
        let members = [1, 2, 3];
        let spec = |id, incarnation| NodeSpec {
            incarnation,
            ..crate::protocol::test_harness::node_spec(id, &members)
        };
        assert_ne!(spec(1, 0).writer_id(), spec(1, 1).writer_id());
        assert_ne!(spec(1, 0).writer_id(), spec(2, 0).writer_id());
        let max_node = spec(u32::MAX, u64::MAX).writer_id();
        assert!(max_node < client_writer_id(0));
    }
}
