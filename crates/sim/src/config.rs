//! What a simulation run is asked to do ([`SimConfig`]) and what one seed
//! drew from it ([`SeedParams`]). Every parameter of a seed comes from the
//! seed (TigerBeetle's VOPR rule), so the replay command needs nothing but
//! the CLI flags and the seed.

use crate::rng::{Rng, Stream};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One kind of injected fault (`--faults` takes a list of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// Long-tailed message delays and one slow node (10× latency).
    Delay,
    /// Messages lost.
    Loss,
    /// Messages delivered twice.
    Dup,
    /// Links stop being FIFO.
    Reorder,
    /// Partitions form and heal: splits, isolated nodes, one-way cuts.
    Partition,
    /// Nodes crash and restart; durable records survive per the durability mode.
    Crash,
    /// Nodes freeze for a while (GC pause, slow disk), and timers fire late.
    Pause,
    /// More than f nodes down at once for a while (no quorum reachable):
    /// crashed in durable seeds, frozen otherwise.
    Outage,
    /// Membership changes during the faults (`ProtocolDef::reconfigure`:
    /// add, remove, replace servers), in seeds whose nodes keep their
    /// records. Not in `all`: named only (`--faults all,reconfig`).
    Reconfig,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::Delay,
        Fault::Loss,
        Fault::Dup,
        Fault::Reorder,
        Fault::Partition,
        Fault::Crash,
        Fault::Pause,
        Fault::Outage,
    ];
    /// The faults `all` leaves out, asked for by name only.
    pub const EXTRA: [Fault; 1] = [Fault::Reconfig];
    /// Every fault, `ALL` then `EXTRA`.
    pub fn every() -> impl Iterator<Item = Fault> {
        Fault::ALL.into_iter().chain(Fault::EXTRA)
    }
    pub fn name(self) -> &'static str {
        match self {
            Fault::Delay => "delay",
            Fault::Loss => "loss",
            Fault::Dup => "dup",
            Fault::Reorder => "reorder",
            Fault::Partition => "partition",
            Fault::Crash => "crash",
            Fault::Pause => "pause",
            Fault::Outage => "outage",
            Fault::Reconfig => "reconfig",
        }
    }
}

/// The set of enabled faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultSet(u16);

impl FaultSet {
    pub const NONE: FaultSet = FaultSet(0);
    pub fn all() -> FaultSet {
        Fault::ALL.iter().fold(FaultSet::NONE, |s, &f| s.with(f))
    }
    pub fn with(self, f: Fault) -> FaultSet {
        FaultSet(self.0 | 1 << f as u8)
    }
    pub fn without(self, f: Fault) -> FaultSet {
        FaultSet(self.0 & !(1 << f as u8))
    }
    pub fn has(self, f: Fault) -> bool {
        self.0 & (1 << f as u8) != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl FromStr for FaultSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" | "" => return Ok(FaultSet::NONE),
            "all" => return Ok(FaultSet::all()),
            _ => {}
        }
        let mut set = FaultSet::NONE;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                set = Fault::ALL.iter().fold(set, |s, &f| s.with(f));
                continue;
            }
            let f = Fault::every().find(|f| f.name() == part).ok_or_else(|| {
                let names: Vec<_> = Fault::every().map(|f| f.name()).collect();
                format!(
                    "unknown fault '{part}' (known: none, all, {})",
                    names.join(", ")
                )
            })?;
            set = set.with(f);
        }
        Ok(set)
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let classic = Fault::ALL.iter().all(|&x| self.has(x));
        let names = Fault::every()
            .filter(|&x| self.has(x) && !(classic && Fault::ALL.contains(&x)))
            .map(|x| x.name());
        let names: Vec<_> = classic.then_some("all").into_iter().chain(names).collect();
        f.write_str(&names.join(","))
    }
}

/// How sim clients reach the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ClientMode {
    /// Each client sends its request to a random server node, whose
    /// coordinator runs the operation (thin clients: RESP, CLI).
    Proxy,
    /// Each client runs its own coordinator (a client library) and talks to
    /// the replicas with protocol messages. Falls back to proxy for
    /// protocols without a client-side coordinator.
    Client,
    /// Drawn per seed (half and half).
    Mixed,
}

impl fmt::Display for ClientMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientMode::Proxy => "proxy",
            ClientMode::Client => "client",
            ClientMode::Mixed => "mixed",
        })
    }
}

/// What a crashed node keeps, and when a node's messages may leave.
///
/// A crash in the simulator is a *power cut* of that node: the process dies
/// and whatever its disk had not made stable is gone, page cache included.
/// (A real `kill -9` keeps the page cache, so `buffered` loses nothing to
/// it; only the simulator can show what a power cut takes.) The node
/// crate's `Durability` (`node/src/storage.rs`) has the same three modes;
/// the simulator keeps its own type so that it does not depend on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Durability {
    /// Every `Persist` is synced to disk, in group commits: a sync takes
    /// 100–500 µs of virtual time and covers every record written before it
    /// started (records written meanwhile join the next one). A node's
    /// sends, replies and notifications wait until every record it
    /// persisted before them is synced (the node runtime's contract);
    /// timers and sends to itself do not wait. A crash loses only records
    /// whose sync had not completed, which nothing acknowledged.
    #[value(alias = "durable")]
    Fsync,
    /// Records are written at once (page cache) and become durable at the
    /// next flush, every 5 ms of virtual time; nothing waits for them, so a
    /// node acknowledges what it has only written. A crash (power cut)
    /// drops what followed the last flush: acknowledged writes can be lost
    /// when enough nodes crash together. Never drawn: only by the flag.
    Buffered,
    /// Nothing survives a crash (the thesis' "Net-Only" setting): a
    /// restarted node has forgotten everything, so protocols must recover
    /// from their peers (ABD: `AbdNode::recovering`).
    Memory,
}

impl Durability {
    pub const ALL: [Durability; 3] = [Durability::Fsync, Durability::Buffered, Durability::Memory];
    /// What a seed draws from when `--durability` is not given (half and
    /// half; in this order, so that each seed draws what it drew when these
    /// were the only two modes).
    pub const DRAWN: [Durability; 2] = [Durability::Fsync, Durability::Memory];

    /// Whether a restarted node finds its persisted records (some of them,
    /// in `buffered`).
    pub fn keeps_data(self) -> bool {
        self != Durability::Memory
    }

    pub fn name(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Buffered => "buffered",
            Durability::Memory => "memory",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Timing of coordinators and clients in virtual time. Short, because
/// virtual time is free but events are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Coordinator retransmit interval.
    pub retry_interval: Duration,
    /// Coordinator operation timeout (→ `OpError::Timeout` → unknown outcome).
    pub op_timeout: Duration,
    /// A sim client gives up on a request after this long (→ unknown).
    pub client_timeout: Duration,
    /// After the faults heal, an operation must complete within this long.
    pub liveness_bound: Duration,
    /// The failure detector's heartbeat period: a node that hears nothing
    /// from a peer for `heartbeat_misses` periods reports it down.
    pub heartbeat: Duration,
    pub heartbeat_misses: u32,
    /// Every link's base one-way latency range in µs, instead of the
    /// per-seed draw (20 µs to 1.2 ms): `--link-delay`. Set it with
    /// [`Timing::with_link_delay`], which stretches the timeouts to match.
    pub link_us: Option<(u64, u64)>,
    /// The one-way latency range in µs of the links between clients and
    /// nodes, when it differs from the nodes' (`--client-link-delay`, seed
    /// 001's client RTT beside its server RTT). Set it with
    /// [`Timing::with_client_link_delay`].
    pub client_link_us: Option<(u64, u64)>,
}

impl Timing {
    /// What the protocol cores are told (`NodeSpec`/`ClientSpec::timing`).
    pub fn core(&self) -> quorumkv_core::protocol::Timing {
        quorumkv_core::protocol::Timing {
            op_timeout: self.op_timeout,
            retry_interval: self.retry_interval,
        }
    }
    /// Silence after which the failure detector reports a peer down.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.heartbeat * self.heartbeat_misses
    }

    /// 1, or how much `--link-delay` stretched the timeouts.
    pub fn link_scale(&self) -> u64 {
        self.link_us.map_or(1, |(_, hi)| Self::scale_of(hi))
    }

    /// Client links of `lo..=hi` one-way latency. A client's request and
    /// its answer cross one each way: the simulator's client-side bounds
    /// (the client's patience, the liveness bound) grow by three such round
    /// trips; the nodes' timers, which no client link delays, stay.
    pub fn with_client_link_delay(self, lo: Duration, hi: Duration) -> Timing {
        let hi = hi.max(lo);
        let extra = hi * 6;
        Timing {
            client_timeout: self.client_timeout + extra,
            liveness_bound: self.liveness_bound + extra,
            client_link_us: Some((lo.as_micros() as u64, hi.as_micros() as u64)),
            ..self
        }
    }

    fn scale_of(hi_us: u64) -> u64 {
        hi_us.div_ceil(DRAWN_LATENCY_MAX_US).max(1)
    }

    /// Links of `lo..=hi` one-way latency (a WAN, or a protocol whose rules
    /// depend on the delay, such as the adaptive coin's d). The defaults
    /// are sized for the drawn latencies (at most ~1.2 ms one way); with
    /// slower links every timeout grows by the same factor, so that a
    /// round trip stays as small a part of each as it is by default.
    pub fn with_link_delay(self, lo: Duration, hi: Duration) -> Timing {
        let (lo, hi) = (
            lo.as_micros() as u64,
            hi.as_micros().max(lo.as_micros()) as u64,
        );
        let k = Self::scale_of(hi) as u32;
        Timing {
            retry_interval: self.retry_interval * k,
            op_timeout: self.op_timeout * k,
            client_timeout: self.client_timeout * k,
            liveness_bound: self.liveness_bound * k,
            heartbeat: self.heartbeat * k,
            link_us: Some((lo, hi)),
            ..self
        }
    }
}

/// The largest base latency a seed draws (`SeedParams::draw`), µs.
const DRAWN_LATENCY_MAX_US: u64 = 1_250;

impl Default for Timing {
    fn default() -> Self {
        Timing {
            retry_interval: Duration::from_millis(10),
            op_timeout: Duration::from_millis(100),
            client_timeout: Duration::from_millis(150),
            liveness_bound: Duration::from_millis(150),
            heartbeat: Duration::from_millis(20),
            heartbeat_misses: 5,
            link_us: None,
            client_link_us: None,
        }
    }
}

/// A simulation run: the same for every seed.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub protocol: String,
    /// Replicas (N); `None` = drawn per seed from {3, 5}.
    pub replicas: Option<u32>,
    pub clients: u32,
    /// Operations per seed, over all clients.
    pub ops: u32,
    /// Number of keys; `None` = drawn per seed (1..=3, so operations collide).
    pub keys: Option<u32>,
    pub faults: FaultSet,
    pub mode: ClientMode,
    /// `None` = drawn per seed (half fsync, half memory; buffered only when asked).
    pub durability: Option<Durability>,
    /// Name of an injected bug (testing aid).
    pub bug: Option<String>,
    /// The protocol's options (`--opt key=value`), applied after the
    /// seed's own variation ([`quorumkv_core::protocol::ProtocolDef::vary`]).
    pub options: Vec<(String, String)>,
    /// Apply faults the protocol's link model rules out (silent loss,
    /// duplication and reordering on FIFO-reliable links).
    pub break_assumptions: bool,
    pub timing: Timing,
    /// Budget of the linearizability checker per seed.
    pub check_timeout: Duration,
    /// Record the message trace.
    pub trace: bool,
    /// A key with a write in flight through a server when that server
    /// crashes is only read from then on (`--read-after-crash`).
    pub read_after_crash: bool,
    /// The clients use the znode service (`world/znode.rs`) instead of the
    /// KV store; their history is checked against the znode model too.
    pub znode: bool,
    /// Skip the protocol's per-step invariants (`--no-invariants`): the
    /// history alone then judges the run.
    pub no_invariants: bool,
    /// One pause in six is long (`--long-pauses`): past every failure
    /// detector's timeout (`world/nemesis.rs`).
    pub long_pauses: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            protocol: quorumkv_core::protocol::ProtocolKind::default_protocol()
                .name()
                .into(),
            replicas: None,
            clients: 5,
            ops: 200,
            keys: None,
            faults: FaultSet::all(),
            mode: ClientMode::Mixed,
            durability: None,
            bug: None,
            options: Vec::new(),
            break_assumptions: false,
            timing: Timing::default(),
            check_timeout: Duration::from_secs(10),
            trace: false,
            read_after_crash: false,
            znode: false,
            no_invariants: false,
            long_pauses: false,
        }
    }
}

/// Everything one seed drew from its [`SimConfig`].
#[derive(Clone, Debug, PartialEq)]
pub struct SeedParams {
    pub seed: u64,
    /// Replicas (N): `--replicas`, or drawn from {3, 5} (at N = 3, Q − 1 =
    /// f = 1 hides many off-by-one quorum bugs).
    pub replicas: u32,
    /// What a crashed node keeps: `--durability`, or drawn (half fsync, half
    /// memory), so that recovery code runs in the default sweep.
    pub durability: Durability,
    /// Divergence bias: one key, many writers, partitions preferred, every
    /// client reads right after a partition heals.
    pub diverge: bool,
    /// Probability that a nemesis crash falls *inside* a handler call, between
    /// two of its commands (crash fault), instead of between events.
    pub crash_inside_p: f64,
    /// Random bits a protocol may use to pick its optional behaviours per
    /// seed, so every variant gets simulated (ABD: bit 0 = thrifty).
    pub knobs: u64,
    /// The faults active in this seed: swarm testing keeps each fault of
    /// `--faults` with probability 0.7 (a list of one is kept as is), since
    /// fewer simultaneous faults often expose more (e.g. fewer crashes mean
    /// fewer unknown outcomes to hide a stale read behind).
    pub faults: FaultSet,
    /// Client-driven (own coordinator) rather than proxy.
    pub client_driven: bool,
    pub keys: u32,
    /// Base one-way latency range in µs.
    pub latency_us: (u64, u64),
    /// Links between clients and nodes (`None`: as `latency_us`).
    pub client_latency_us: Option<(u64, u64)>,
    /// How much longer than by default every fault lasts and every gap
    /// between faults is: 1, or with `--link-delay` the factor its timeouts
    /// grew by ([`Timing::with_link_delay`]), so that a crash or a pause is
    /// as long, counted in round trips, as with the drawn latencies.
    pub time_scale: u64,
    /// Probability of a long delay and its maximum in µs (delay fault).
    pub tail_p: f64,
    pub tail_max_us: u64,
    /// The slow node (index) whose outgoing messages take 10× longer (delay fault).
    pub slow_node: Option<usize>,
    /// Fraction of directed links that are persistently slow, and their
    /// maximum latency multiplier (delay fault). Slow links make a store
    /// reach some replicas long before others, which is what read
    /// inversions need.
    pub slow_link_p: f64,
    pub slow_link_max: u64,
    pub loss_p: f64,
    pub dup_p: f64,
    pub reorder: bool,
    /// Mean gap between nemesis actions in µs (partition, crash, pause).
    pub nemesis_gap_us: u64,
    /// Probability that a timer fires late, and by up to how much (pause fault).
    pub late_timer_p: f64,
    pub late_timer_max_us: u64,
    /// Client think time between operations, max µs.
    pub think_max_us: u64,
    /// Percentage of gets among operations (the rest: 85 % puts, 15 %
    /// deletes). Read-heavy seeds expose stale reads that many concurrent
    /// writes would explain away.
    pub read_pct: u64,
    /// Faults heal once this many operations have been issued.
    pub heal_after_ops: u32,
    /// Whether the run ends with the load phase (protocols that promise
    /// fairness only): a quarter of the seeds, since it costs more than
    /// the rest of a seed.
    pub load: bool,
}

/// The share of seeds that end with the load phase.
const LOAD_P: f64 = 0.25;

impl SeedParams {
    pub fn draw(cfg: &SimConfig, seed: u64, has_client_coordinator: bool) -> SeedParams {
        let mut r = Rng::stream(seed, Stream::Params);
        // The cluster's shape comes from its own stream: fixing N or the
        // durability with a flag leaves every other draw of the seed alone.
        let mut shape = Rng::stream(seed, Stream::Shape);
        let replicas = shape.pick(&[3, 5]);
        let durability = shape.pick(&Durability::DRAWN);
        let diverge = shape.chance(0.25);
        let crash_inside_p = shape.uniform(0.2, 0.8);
        let diverge_read_pct = shape.range(20, 50);
        let load = shape.chance(LOAD_P);
        let replicas = cfg.replicas.unwrap_or(replicas);
        let mut f = swarm(cfg.faults, seed);
        if diverge && cfg.faults.has(Fault::Partition) {
            f = f.with(Fault::Partition);
        }
        let coin = r.chance(0.5);
        let client_driven = has_client_coordinator
            && match cfg.mode {
                ClientMode::Proxy => false,
                ClientMode::Client => true,
                ClientMode::Mixed => coin,
            };
        let keys = r.range(1, 3) as u32;
        let lo = r.range(20, 200);
        let hi = lo + r.range(50, 1_000);
        let delay = f.has(Fault::Delay);
        let tail_p = r.uniform(0.01, 0.2);
        let scale = cfg.timing.link_scale();
        let tail_max_us = r.range(1_000, 20_000) * scale;
        let slow = r.below(replicas.max(1) as u64 + 1) as usize; // == replicas: none
        let slow_link_p = r.uniform(0.1, 0.6);
        let slow_link_max = r.range(5, 50);
        let loss_p = r.uniform(0.005, 0.1);
        let dup_p = r.uniform(0.005, 0.1);
        let nemesis_gap_us = r.range(5_000, 40_000) * scale;
        let late_timer_p = r.uniform(0.05, 0.5);
        let late_timer_max_us = r.range(1_000, 20_000) * scale;
        let think_max_us = r.range(0, 2_000) * scale;
        let read_pct = r.range(30, 95);
        let heal_pct = r.range(60, 85) as u32;
        let knobs = r.next_u64();
        SeedParams {
            seed,
            replicas,
            durability: cfg.durability.unwrap_or(durability),
            diverge,
            crash_inside_p: if f.has(Fault::Crash) {
                crash_inside_p
            } else {
                0.0
            },
            faults: f,
            client_driven,
            keys: cfg.keys.unwrap_or(if diverge { 1 } else { keys }).max(1),
            latency_us: cfg.timing.link_us.unwrap_or((lo, hi)),
            client_latency_us: cfg.timing.client_link_us,
            time_scale: scale,
            tail_p: if delay { tail_p } else { 0.0 },
            tail_max_us,
            slow_node: (delay && slow < replicas as usize).then_some(slow),
            slow_link_p: if delay { slow_link_p } else { 0.0 },
            slow_link_max,
            loss_p: if f.has(Fault::Loss) { loss_p } else { 0.0 },
            dup_p: if f.has(Fault::Dup) { dup_p } else { 0.0 },
            reorder: f.has(Fault::Reorder),
            nemesis_gap_us,
            late_timer_p: if f.has(Fault::Pause) {
                late_timer_p
            } else {
                0.0
            },
            late_timer_max_us,
            think_max_us,
            read_pct: if diverge { diverge_read_pct } else { read_pct },
            heal_after_ops: cfg.ops * heal_pct / 100,
            knobs,
            load,
        }
    }
}

impl SeedParams {
    /// Keep to FIFO-reliable links: no duplication, no reordering (the
    /// world turns loss into connection resets).
    pub fn keep_fifo(&mut self) {
        self.dup_p = 0.0;
        self.reorder = false;
        self.faults = self.faults.without(Fault::Dup).without(Fault::Reorder);
    }
}

/// Swarm testing: with more than one fault enabled, each seed keeps each
/// fault with probability 0.7 (a list of one is kept as is).
fn swarm(faults: FaultSet, seed: u64) -> FaultSet {
    let many = Fault::every().filter(|&x| faults.has(x)).count() > 1;
    if !many {
        return faults;
    }
    let mut r = Rng::stream(seed, Stream::Swarm);
    Fault::every()
        .filter(|&x| faults.has(x) && r.chance(0.7))
        .fold(FaultSet::NONE, |s, x| s.with(x))
}

impl fmt::Display for SeedParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "N={} durability={} diverge={} crash_inside_p={:.2} faults={} mode={} keys={} reads={}% latency={}..{}us tail_p={:.3} tail_max={}us slow_node={} slow_links={:.2}x{} loss={:.3} dup={:.3} reorder={} \
             nemesis_gap={}us late_timer_p={:.2} heal_after_ops={} load={} knobs={:#x}",
            self.replicas,
            self.durability,
            self.diverge,
            self.crash_inside_p,
            self.faults,
            if self.client_driven { "client" } else { "proxy" },
            self.keys,
            self.read_pct,
            self.latency_us.0,
            self.latency_us.1,
            self.tail_p,
            self.tail_max_us,
            self.slow_node.map(|n| format!("n{}", n + 1)).unwrap_or_else(|| "-".into()),
            self.slow_link_p,
            self.slow_link_max,
            self.loss_p,
            self.dup_p,
            self.reorder,
            self.nemesis_gap_us,
            self.late_timer_p,
            self.heal_after_ops,
            self.load,
            self.knobs,
        )
    }
}

/// A seed range: `7`, `0..1000` or `0..=999`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedRange {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
}

impl SeedRange {
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> std::ops::Range<u64> {
        self.start..self.end
    }
}

impl FromStr for SeedRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|e| format!("bad seed '{x}': {e}"))
        };
        let r = if let Some((a, b)) = s.split_once("..=") {
            SeedRange {
                start: num(a)?,
                end: num(b)?.checked_add(1).ok_or("seed range overflows")?,
            }
        } else if let Some((a, b)) = s.split_once("..") {
            SeedRange {
                start: num(a)?,
                end: num(b)?,
            }
        } else {
            let x = num(s)?;
            SeedRange {
                start: x,
                end: x.checked_add(1).ok_or("seed overflows")?,
            }
        };
        if r.is_empty() {
            return Err(format!("empty seed range '{s}'"));
        }
        Ok(r)
    }
}

impl fmt::Display for SeedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_sets_parse_and_print() {
        assert_eq!("none".parse::<FaultSet>().unwrap(), FaultSet::NONE);
        assert_eq!("all".parse::<FaultSet>().unwrap(), FaultSet::all());
        let s: FaultSet = "loss, partition".parse().unwrap();
        assert!(s.has(Fault::Loss) && s.has(Fault::Partition) && !s.has(Fault::Crash));
        assert_eq!(s.to_string(), "loss,partition");
        assert!("loss,bogus".parse::<FaultSet>().is_err());
        let every = Fault::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(every.parse::<FaultSet>().unwrap().to_string(), "all");
        // `reconfig` is named only, and prints beside `all`.
        assert!(!FaultSet::all().has(Fault::Reconfig));
        let r: FaultSet = "all,reconfig".parse().unwrap();
        assert!(r.has(Fault::Reconfig) && r.has(Fault::Crash));
        assert_eq!(r.to_string(), "all,reconfig");
        assert_eq!(r.to_string().parse::<FaultSet>().unwrap(), r);
        let c: FaultSet = "crash,reconfig".parse().unwrap();
        assert_eq!(c.to_string(), "crash,reconfig");
    }

    #[test]
    fn seed_ranges_parse() {
        assert_eq!(
            "0..10".parse::<SeedRange>().unwrap(),
            SeedRange { start: 0, end: 10 }
        );
        assert_eq!(
            "3..=4".parse::<SeedRange>().unwrap(),
            SeedRange { start: 3, end: 5 }
        );
        assert_eq!(
            "42".parse::<SeedRange>().unwrap(),
            SeedRange { start: 42, end: 43 }
        );
        assert!("5..5".parse::<SeedRange>().is_err());
        assert!("x..3".parse::<SeedRange>().is_err());
    }

    #[test]
    fn params_depend_only_on_seed() {
        let cfg = SimConfig::default();
        assert_eq!(
            SeedParams::draw(&cfg, 9, true),
            SeedParams::draw(&cfg, 9, true)
        );
        let none = SimConfig {
            faults: FaultSet::NONE,
            ..SimConfig::default()
        };
        let p = SeedParams::draw(&none, 9, true);
        assert_eq!(
            (p.loss_p, p.dup_p, p.tail_p, p.reorder, p.slow_node),
            (0.0, 0.0, 0.0, false, None)
        );
        // The workload-relevant draws do not move when faults change.
        let q = SeedParams::draw(&cfg, 9, true);
        assert_eq!(
            (p.keys, p.client_driven, p.latency_us),
            (q.keys, q.client_driven, q.latency_us)
        );
    }

    /// Unless fixed by a flag, N, the durability and the divergence bias
    /// vary across seeds, and fixing one leaves the seed's other draws alone.
    #[test]
    fn the_shape_of_a_cluster_is_drawn_per_seed_unless_fixed() {
        let cfg = SimConfig::default();
        let drawn: Vec<_> = (0..200).map(|s| SeedParams::draw(&cfg, s, true)).collect();
        let count = |f: &dyn Fn(&SeedParams) -> bool| drawn.iter().filter(|p| f(p)).count();
        assert!(count(&|p| p.replicas == 3) > 60 && count(&|p| p.replicas == 5) > 60);
        assert!(count(&|p| p.durability == Durability::Memory) > 60);
        assert!(count(&|p| p.durability == Durability::Fsync) > 60);
        assert_eq!(count(&|p| p.durability == Durability::Buffered), 0);
        let diverging = count(&|p| p.diverge);
        assert!((20..100).contains(&diverging), "{diverging}");
        assert!(drawn.iter().filter(|p| p.diverge).all(|p| p.keys == 1));
        let fixed = SimConfig {
            replicas: Some(5),
            durability: Some(Durability::Memory),
            ..SimConfig::default()
        };
        for (s, p) in drawn.iter().enumerate() {
            let q = SeedParams::draw(&fixed, s as u64, true);
            assert_eq!((q.replicas, q.durability), (5, Durability::Memory));
            assert_eq!(
                (q.faults, q.read_pct, q.knobs),
                (p.faults, p.read_pct, p.knobs)
            );
        }
    }

    /// `--link-delay`: every seed's links take the given latency, and the
    /// simulator's timeouts stretch with it; the other draws do not move.
    #[test]
    fn a_fixed_link_delay_replaces_the_draw_and_stretches_the_timeouts() {
        let ms = Duration::from_millis;
        let t = Timing::default().with_link_delay(ms(20), ms(25));
        assert_eq!(t.link_us, Some((20_000, 25_000)));
        assert_eq!(t.op_timeout, Timing::default().op_timeout * 20);
        assert_eq!(
            t.heartbeat_timeout(),
            Timing::default().heartbeat_timeout() * 20
        );
        let fast = Timing::default().with_link_delay(ms(0), ms(1));
        assert_eq!(
            (fast.op_timeout, fast.link_us),
            (Timing::default().op_timeout, Some((0, 1_000)))
        );
        let cfg = SimConfig {
            timing: t,
            ..SimConfig::default()
        };
        for seed in 0..50 {
            let (p, q) = (
                SeedParams::draw(&cfg, seed, true),
                SeedParams::draw(&SimConfig::default(), seed, true),
            );
            assert_eq!(p.latency_us, (20_000, 25_000));
            assert_eq!(
                (p.replicas, p.faults, p.knobs),
                (q.replicas, q.faults, q.knobs)
            );
        }
    }
}
