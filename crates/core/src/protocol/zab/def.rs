//! The registration: how drivers build a server, its options, its
//! assumptions. (Registered by one line in `registry!`.)

use super::bugs::InjectedBug;
use super::coin::Choice;
use super::measure::AdaptConfig;
use super::msg::{Msg, Timer};
use super::node::{Config, ReadMode, ZabNode};
use super::variant::Variant;
use crate::protocol::contract::{
    ClientSpec, LinkModel, NamedVariant, NodeSpec, Over, PointRatio, ProtocolDef, Seen,
};
use crate::protocol::contract::{Out, Timing};
use crate::protocol::options::{format_duration, parse_duration};
use crate::protocol::options::{OptSpec, ProtocolOptions};
use crate::types::{NodeId, Time};
use crate::znode::op::ZnodeOp;
use std::time::Duration;

/// Zab as the registry knows it: servers only (clients go through one).
#[derive(Debug)]
pub struct Zab;

/// Zab's options (`--opt read=local`, `[options]` in a cluster file).
#[derive(Clone, Debug, PartialEq)]
pub struct ZabOptions {
    /// The broadcast phase: Zab's or one of seed 003's variants.
    pub broadcast: Variant,
    /// The coin (ct, ct-q): a fixed probability of Head in (0, 1]
    /// (`p=0.5`, `p=fixed:0.5`), or for ct-q the adaptive coin of chapter 4
    /// (`p=upper|mid|low|p-star`, `adaptive` = `upper`).
    pub p: Choice,
    /// The adaptive coin's measurement window (λ, d), timer D, timer C_m.
    pub lambda_window: Duration,
    pub timer_d: Duration,
    pub timer_cm: Duration,
    /// A1.1 for ac, aa, ct: a restarted old leader stays out until a newer
    /// epoch synchronised it. `false` breaks the assumption (Fig. 3.1).
    pub stay_out: bool,
    pub read: ReadMode,
    pub tick: Duration,
    pub sync_limit: Duration,
    pub init_limit: Duration,
    pub snapshot_every: u64,
    /// See `Config::container_grace`.
    pub container_grace: Duration,
    /// See `Config::ttl_check`.
    pub ttl_check: Duration,
    /// The last this many servers of the cluster start outside the
    /// configuration, as learners (membership change, `reconfig.rs`).
    pub spares: usize,
}

/// `sync-limit` of real servers. A process on a loaded machine can go
/// unscheduled for tens of milliseconds, and the 80 ms of the core's
/// tests (and the simulator, whose partitions last 5-60 ms) then changed
/// leaders on a healthy cluster (refused reads, unknown writes: up to 5
/// leader changes in a 10 s bench run with two busy cores). A crashed
/// leader is still noticed at once (its connections close); this bounds
/// only how long a paused or cut-off leader goes unnoticed (etcd's election
/// timeout is 1 s, ZooKeeper's syncLimit × tickTime 10 s by default).
pub const SERVER_SYNC_LIMIT: Duration = Duration::from_secs(1);

/// The simulator's `sync-limit` unless one is asked for: its time scale
/// (heartbeat timeout 100 ms, partitions 5-60 ms) is compressed.
const SIM_SYNC_LIMIT: Duration = Duration::from_millis(80);

/// `lambda-window` of real servers: the thesis measures λ each second.
pub const SERVER_LAMBDA_WINDOW: Duration = Duration::from_secs(1);
/// The simulator's window unless one is asked for (its runs last a few
/// seconds of virtual time: 1 s would close a handful of windows).
const SIM_LAMBDA_WINDOW: Duration = Duration::from_millis(100);
/// `ttl-check` in the simulator: a run lasts a few hundred virtual ms, so
/// the workload's TTL nodes (`quorumkv_check::znode::TTL_PATH_PREFIX`) go
/// within one.
const SIM_TTL_CHECK: Duration = Duration::from_millis(20);

fn choice_name(c: Choice) -> String {
    match c {
        Choice::Upper => "upper".into(),
        Choice::Mid => "mid".into(),
        Choice::Low => "low".into(),
        Choice::PStar => "p-star".into(),
        Choice::Fixed(p) => p.to_string(),
    }
}

fn parse_choice(value: &str) -> Result<Choice, String> {
    let c = match value.parse::<f64>() {
        Ok(p) => Choice::parse(&format!("fixed:{p}")),
        Err(_) if value == "adaptive" => Some(Choice::Upper),
        Err(_) => Choice::parse(value),
    };
    c.ok_or_else(|| {
        format!("'{value}' is not a probability in (0, 1], fixed:P, upper, mid, low, p-star or adaptive")
    })
}

impl Default for ZabOptions {
    fn default() -> Self {
        let c = Config::default();
        ZabOptions {
            broadcast: Variant::Zab,
            p: Choice::Fixed(0.5),
            lambda_window: SERVER_LAMBDA_WINDOW,
            timer_d: AdaptConfig::default().timer_d,
            timer_cm: AdaptConfig::default().timer_cm,
            stay_out: true,
            read: c.read,
            tick: c.tick,
            sync_limit: SERVER_SYNC_LIMIT,
            init_limit: c.init_limit,
            snapshot_every: c.snapshot_every,
            container_grace: c.container_grace,
            ttl_check: c.ttl_check,
            spares: 0,
        }
    }
}

fn read_name(r: ReadMode) -> &'static str {
    match r {
        ReadMode::Index => "index",
        ReadMode::Log => "log",
        ReadMode::Local => "local",
    }
}

impl ProtocolOptions for ZabOptions {
    fn specs() -> &'static [OptSpec] {
        &[
            OptSpec {
                name: "broadcast",
                default: "zab",
                help: "broadcast phase (seed 003 ch. 3): zab, ac (ZabAc, N=3), aa (ZabAa), ct (ZabCt), ct-q (ZabCT), aa-q (ZabAA)",
            },
            OptSpec {
                name: "p",
                default: "0.5",
                help: "coin of broadcast=ct and ct-q: a probability of Head in (0, 1] (or fixed:P); for ct-q the adaptive coin of seed 003 ch. 4: upper (P2, ZabCT_u; alias adaptive), mid, low, p-star",
            },
            OptSpec {
                name: "lambda-window",
                default: "1s",
                help: "adaptive ct-q: window over which followers measure lambda and d and recompute p (simulator: 100ms unless asked)",
            },
            OptSpec {
                name: "timer-d",
                default: "20ms",
                help: "adaptive ct-q: timer D, enforced coin tossing after this long without a proposal (seed 003 4.2.3)",
            },
            OptSpec {
                name: "timer-cm",
                default: "100ms",
                help: "adaptive ct-q: timer C_m, a proposal not delivered within it is a vote for Zab (seed 003 4.3.3)",
            },
            OptSpec {
                name: "stay-out",
                default: "true",
                help: "A1.1 for ac, aa, ct: a restarted old leader stays out until a newer epoch is established (false: Fig. 3.1's loss)",
            },
            OptSpec {
                name: "read",
                default: "index",
                help: "GET: index (leader confirms with a quorum), log (broadcast), local (ZooKeeper's, not linearizable)",
            },
            OptSpec {
                name: "tick",
                default: "10ms",
                help: "period of election notifications, pings and timeout checks",
            },
            OptSpec {
                name: "sync-limit",
                default: "1s",
                help: "silence after which a leader without a quorum steps down / a follower looks",
            },
            OptSpec {
                name: "init-limit",
                default: "150ms",
                help: "time for discovery and synchronisation before going back to election",
            },
            OptSpec {
                name: "container-grace",
                default: "1s",
                help: "how long the leader sees a used container empty before deleting it",
            },
            OptSpec {
                name: "ttl-check",
                default: "1s",
                help: "how often the leader looks for TTL nodes to delete",
            },
            OptSpec {
                name: "snapshot-every",
                default: "100000",
                help: "snapshot the state and compact the log every this many deliveries",
            },
            OptSpec {
                name: "spares",
                default: "0",
                help: "the last this many servers start outside the configuration, as learners that a reconfiguration may add",
            },
        ]
    }
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "broadcast" => {
                self.broadcast = Variant::parse(value)
                    .ok_or_else(|| format!("'{value}' is not zab, ac, aa, ct, ct-q or aa-q"))?
            }
            "p" => self.p = parse_choice(value)?,
            "lambda-window" | "timer-d" | "timer-cm" => {
                let d = parse_duration(value)?;
                if d.is_zero() {
                    return Err(format!("'{value}' must be positive"));
                }
                match key {
                    "lambda-window" => self.lambda_window = d,
                    "timer-d" => self.timer_d = d,
                    _ => self.timer_cm = d,
                }
            }
            "stay-out" => {
                self.stay_out = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("'{value}' is not true or false")),
                }
            }
            "read" => {
                self.read = match value {
                    "index" => ReadMode::Index,
                    "log" => ReadMode::Log,
                    "local" => ReadMode::Local,
                    _ => return Err(format!("'{value}' is not index, log or local")),
                }
            }
            "tick" => self.tick = parse_duration(value)?,
            "sync-limit" => self.sync_limit = parse_duration(value)?,
            "init-limit" => self.init_limit = parse_duration(value)?,
            "container-grace" => self.container_grace = parse_duration(value)?,
            "ttl-check" => {
                self.ttl_check = parse_duration(value)?;
                if self.ttl_check.is_zero() {
                    return Err(format!("'{value}' must be positive"));
                }
            }
            "snapshot-every" => {
                self.snapshot_every = match value.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("'{value}' is not a positive count")),
                }
            }
            "spares" => {
                self.spares = value
                    .parse::<usize>()
                    .map_err(|_| format!("'{value}' is not a count"))?
            }
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    }
    fn check_size(&self, n: usize) -> Result<(), String> {
        if self.adaptive() && self.broadcast != Variant::CtQ {
            return Err(format!(
                "p={} is the adaptive coin of broadcast=ct-q (ZabCT, seed 003 ch. 4), not of broadcast={}; give ct a probability",
                choice_name(self.p),
                self.broadcast.name()
            ));
        }
        if self.spares >= n {
            return Err(format!(
                "spares={} leaves no server in the configuration of {n}",
                self.spares
            ));
        }
        if self.spares > 0 && self.broadcast != Variant::Zab {
            return Err(
                "spares need broadcast=zab (the variants run a fixed configuration)".into(),
            );
        }
        self.broadcast.check_size(n - self.spares)
    }
    fn get(&self, key: &str) -> String {
        match key {
            "broadcast" => self.broadcast.name().into(),
            "p" => choice_name(self.p),
            "lambda-window" => format_duration(self.lambda_window),
            "timer-d" => format_duration(self.timer_d),
            "timer-cm" => format_duration(self.timer_cm),
            "stay-out" => self.stay_out.to_string(),
            "read" => read_name(self.read).into(),
            "tick" => format_duration(self.tick),
            "sync-limit" => format_duration(self.sync_limit),
            "init-limit" => format_duration(self.init_limit),
            "container-grace" => format_duration(self.container_grace),
            "ttl-check" => format_duration(self.ttl_check),
            "snapshot-every" => self.snapshot_every.to_string(),
            "spares" => self.spares.to_string(),
            _ => String::new(),
        }
    }
}

impl ZabOptions {
    /// The adaptive coin is asked for (`p` not a fixed probability).
    pub fn adaptive(&self) -> bool {
        !matches!(self.p, Choice::Fixed(_))
    }
    /// The coin's starting probability: the fixed one, else 0.5 until the
    /// first window (the adaptive coin starts by voting for Zab anyway).
    pub fn fixed_p(&self) -> f64 {
        match self.p {
            Choice::Fixed(p) => p,
            _ => 0.5,
        }
    }
    pub fn adapt_config(&self) -> AdaptConfig {
        AdaptConfig {
            choice: self.p,
            window: self.lambda_window,
            timer_d: self.timer_d,
            timer_cm: self.timer_cm,
        }
    }
    pub fn config(&self, t: &Timing) -> Config {
        Config {
            tick: self.tick,
            sync_limit: self.sync_limit,
            init_limit: self.init_limit,
            snapshot_every: self.snapshot_every,
            read: self.read,
            op_timeout: t.op_timeout,
            container_grace: self.container_grace,
            ttl_check: self.ttl_check,
        }
    }
}

impl ProtocolDef for Zab {
    const NAME: &'static str = "zab";
    const ABOUT: &'static str =
        "ZooKeeper atomic broadcast: elected leader, durable log, linearizable reads by read index";
    // A2 (seed 003 lines 576-582): FIFO reliable channels; a reset shows
    // as Down, after which a follower re-synchronises.
    const LINK_MODEL: LinkModel = LinkModel::FifoReliable;
    // Clients talk to any server, which forwards writes (Fig. 2.1).
    const HAS_CLIENT_COORDINATOR: bool = false;
    const PROMISES_LIVENESS: bool = true;
    // No table of answered OpIds: a retried write could apply twice.
    const DEDUPLICATES_REQUESTS: bool = false;
    const PERSISTS_STATE: bool = true;
    const VARIANTS: &'static [NamedVariant] = &[
        NamedVariant {
            name: "read-log",
            about: "reads broadcast through the log like writes",
            options: &[("read", "log")],
        },
        NamedVariant {
            name: "read-local",
            about: "ZooKeeper's local reads (sequentially consistent, not linearizable)",
            options: &[("read", "local")],
        },
    ];
    /// Seed 003 §5.1.1's metrics: ACKs received per commit at the leader
    /// (Tables 5.2-5.3: N − 1 for Zab, about 1 for adaptive ct-q),
    /// broadcast messages per commit (Zab 3(N−1), ac 4, aa N(N−1), ct
    /// (N−1) + p(N−1)²), and the delivery latency measured at the server.
    const POINT_RATIOS: &'static [PointRatio] = &[
        PointRatio::new(
            "acks/commit",
            "follower ACKs received per commit at the leader",
            ("zab_acks_received", Over::Busiest),
            ("zab_leader_commits", Over::Busiest),
        ),
        PointRatio::new(
            "msgs/commit",
            "broadcast messages (PROPOSAL, ACK, COMMIT) sent by all servers per commit",
            ("zab_bcast_msgs", Over::All),
            ("zab_leader_commits", Over::Busiest),
        ),
        PointRatio::new(
            "deliver ms",
            "mean time from a write's receipt to its delivery at the server that received it",
            ("zab_delivery_us_sum", Over::All),
            ("zab_deliveries_timed", Over::All),
        )
        .scaled(0.001),
        // The coin's p as played (ct, ct-q, aa-q): Head tosses over all
        // tosses, over every follower. Seed 003 Appendix F tabulates p.
        PointRatio::new(
            "heads/toss",
            "coin tosses that came up Head over all tosses (the p played; ct, ct-q)",
            ("zab_coin_heads", Over::All),
            ("zab_coin_tosses", Over::All),
        ),
    ];
    type Msg = Msg;
    type Node = ZabNode;
    type Client = ZabNode;
    type Options = ZabOptions;
    type Bug = InjectedBug;
    type Invariants = super::invariants::ZabInvariants;

    // `max_crashed`: the default, f = ⌊(N−1)/2⌋: a quorum must be up (A1,
    // seed 003 line 571). With durable logs every server may crash at once
    // and recover.

    fn node(spec: &NodeSpec<'_>, opts: &ZabOptions, bug: Option<InjectedBug>) -> ZabNode {
        let cfg = opts.config(&spec.timing);
        let voters = spec.members.len().saturating_sub(opts.spares).max(1);
        let (initial, spares) = spec.members.split_at(voters.min(spec.members.len()));
        let node = ZabNode::new(spec.id, initial, spec.writer_id(), cfg)
            .with_spares(spares)
            .with_bug(bug)
            .with_broadcast(opts.broadcast, opts.fixed_p(), spec.seed)
            .with_adaptive(opts.adapt_config())
            .with_stay_out(opts.stay_out);
        if spec.lost_state {
            node.recovering()
        } else {
            node
        }
    }
    /// Never called: `HAS_CLIENT_COORDINATOR` is false.
    fn client(_: &ClientSpec<'_>, _: &ZabOptions, _: Option<InjectedBug>) -> ZabNode {
        unreachable!("zab has no client-side coordinator (HAS_CLIENT_COORDINATOR = false)")
    }
    /// A1.2 (seed 003 line 1010): ac, aa and ct need a quorum up at all
    /// times, disks or not: with A1.1 an old leader stays out after a
    /// restart, and two of three out stall the cluster (Fig. 3.1).
    fn bounds_durable_crashes(opts: &ZabOptions) -> bool {
        opts.broadcast.restricted()
    }
    fn available(node: &ZabNode) -> bool {
        !node.is_recovering()
    }
    fn znode_session_open(node: &ZabNode, session: u64) -> Option<bool> {
        Some(node.znode_session_open(session))
    }
    fn znode_session_timeout_ms(node: &ZabNode, session: u64) -> Option<u64> {
        node.znode_session_timeout_ms(session)
    }
    /// PROPOSAL and NEWLEADER's DIFF are the only messages that hand an
    /// entry to another server (a SNAP holds only applied, so committed,
    /// entries), and every configuration has at least two members
    /// (`draw_config`), so a commit needs one of them delivered.
    fn znode_entries(msg: &Msg) -> Option<Vec<(u64, ZnodeOp)>> {
        Some(msg.znode_entries())
    }
    /// Membership change (`reconfig.rs`): the established leader proposes
    /// a configuration drawn over every server of the run.
    fn reconfigure(
        node: &mut ZabNode,
        now: Time,
        all: &[NodeId],
        draw: u64,
        out: &mut Out<Msg, Timer>,
    ) -> Option<String> {
        let new = node.draw_config(all, draw)?;
        let at = node.reconfig(now, &new, out).ok()?;
        Some(format!("reconfig to {new:?} proposed at index {at}"))
    }
    /// F2 of broadcast: a follower ACKs (and reports in PONG and
    /// ACKNEWLEADER) only what it logged durably: the leader counts it in
    /// the quorum that commits.
    fn log_durable_claim(msg: &Msg) -> Option<u64> {
        match msg {
            Msg::Ack { index, .. } | Msg::AckAt { index, .. } => Some(*index),
            Msg::Pong { last, .. } | Msg::AckNewLeader { last, .. } => Some(*last),
            _ => None,
        }
    }
    /// The read-index rule over messages (`read_rounds.rs`).
    fn observe(
        inv: &mut Self::Invariants,
        n: usize,
        seen: Seen<'_, ZabNode, Msg>,
    ) -> Result<(), String> {
        inv.observe(n, seen)
    }
    /// The leader looks for expired TTL nodes every [`SIM_TTL_CHECK`] (a
    /// run lasts a few hundred virtual ms) unless an option asked.
    ///
    /// Knob bit 0: snapshots every 4 deliveries (SNAP and compaction get
    /// exercised); bit 1: `sync-limit` 30 ms, under the simulator's
    /// partitions (5-60 ms) and heartbeat timeout (100 ms), so partitions
    /// change leaders and leave divergent suffixes (TRUNC); otherwise the
    /// simulator's 80 ms unless an option asked for another. Half the seeds
    /// each. The read mode changes what is promised, so it is never drawn.
    fn vary(opts: &mut ZabOptions, knobs: u64) {
        if knobs & 1 == 1 {
            opts.snapshot_every = 4;
        }
        if knobs & 2 == 2 {
            opts.sync_limit = Duration::from_millis(30);
        } else if opts.sync_limit == SERVER_SYNC_LIMIT {
            opts.sync_limit = SIM_SYNC_LIMIT;
        }
        if opts.lambda_window == SERVER_LAMBDA_WINDOW {
            opts.lambda_window = SIM_LAMBDA_WINDOW;
        }
        if opts.ttl_check == Config::default().ttl_check {
            opts.ttl_check = SIM_TTL_CHECK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::InjectedBugs;
    use crate::protocol::contract::Protocol;

    fn spec(members: &[u32], lost_state: bool) -> NodeSpec<'_> {
        NodeSpec {
            id: 2,
            members,
            incarnation: 1,
            durable: true,
            lost_state,
            timing: Timing::default(),
            seed: 7,
        }
    }

    #[test]
    fn options_round_trip_and_reach_the_node() {
        let pairs: Vec<(String, String)> = [
            ("read", "local"),
            ("tick", "5ms"),
            ("sync-limit", "40ms"),
            ("init-limit", "90ms"),
            ("snapshot-every", "7"),
            ("broadcast", "ct-q"),
            ("p", "0.25"),
            ("stay-out", "false"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let o = ZabOptions::from_pairs(&pairs).unwrap();
        assert_eq!(ZabOptions::from_pairs(&o.pairs()).unwrap(), o);
        let members = [1, 2, 3];
        let n = Zab::node(&spec(&members, false), &o, None);
        let c = n.config();
        assert_eq!(c.read, ReadMode::Local);
        assert_eq!(c.tick, Duration::from_millis(5));
        assert_eq!(c.sync_limit, Duration::from_millis(40));
        assert_eq!(c.init_limit, Duration::from_millis(90));
        assert_eq!(c.snapshot_every, 7);
        assert_eq!(n.variant(), Variant::CtQ);
        assert_eq!(n.bcast.p, 0.25);
        assert!(!n.bcast.stay_out);
        assert!(!Zab::bounds_durable_crashes(&o));
        let ac = [("broadcast".to_string(), "ac".to_string())];
        let ac = ZabOptions::from_pairs(&ac).unwrap();
        assert!(Zab::bounds_durable_crashes(&ac) && ac.check_size(3).is_ok());
        assert!(ac.check_size(5).unwrap_err().contains("N = 3"));
        for s in ZabOptions::specs() {
            assert_eq!(ZabOptions::default().get(s.name), s.default, "{}", s.name);
        }
        for (k, v) in [
            ("read", "fast"),
            ("tick", "soon"),
            ("snapshot-every", "0"),
            ("broadcast", "CT"),
            ("p", "0"),
            ("stay-out", "yes"),
        ] {
            let bad = [(k.to_string(), v.to_string())];
            assert!(ZabOptions::from_pairs(&bad).unwrap_err().contains(k));
        }
        let mut varied = ZabOptions::default();
        Zab::vary(&mut varied, 3);
        assert_eq!(varied.snapshot_every, 4);
        assert_eq!(varied.sync_limit, Duration::from_millis(30));
        // Servers default to 1 s; the simulator keeps 80 ms unless asked.
        assert_eq!(ZabOptions::default().sync_limit, SERVER_SYNC_LIMIT);
        let mut sim = ZabOptions::default();
        Zab::vary(&mut sim, 0);
        assert_eq!(sim.sync_limit, SIM_SYNC_LIMIT);
        let mut asked = o.clone();
        Zab::vary(&mut asked, 0);
        assert_eq!(asked.sync_limit, Duration::from_millis(40));
    }

    #[test]
    fn a_server_that_lost_its_state_recovers_first() {
        let members = [1, 2, 3];
        let o = ZabOptions::default();
        let fresh = Zab::node(&spec(&members, false), &o, None);
        assert!(Zab::available(&fresh) && fresh.role() == "looking");
        let lost = Zab::node(&spec(&members, true), &o, Some(InjectedBug::SkipTrunc));
        assert!(!Zab::available(&lost) && lost.role() == "recovering");
        assert_eq!((Zab::max_crashed(3), Zab::max_crashed(5)), (1, 2));
        assert!(InjectedBug::all()
            .iter()
            .all(|b| b.name().starts_with("zab-")));
    }
}
