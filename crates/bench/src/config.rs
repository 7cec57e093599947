//! One benchmark configuration ([`BenchConfig`]) with the defaults of the main
//! job, the value types its flags parse into, and the expansion of the sweep
//! into single experiments ([`PointSpec`]).
//!
//! The defaults reproduce seed 000 §5.2 on a 2-core machine in a few minutes:
//! GET-heavy (0.9) and PUT-heavy (0.1) mixes, N = 3, 10 uniform keys, a subset
//! of its client counts, a few seconds a point instead of 2000 ops a client.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::storage::Durability;
use quorumkv_node::zk_recipes::Recipe;
use serde::Serialize;

/// A configuration that cannot run. Its `Display` is the one line the CLI prints.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("--{flag}: {msg}")]
    BadValue { flag: &'static str, msg: String },
    #[error("{0}")]
    Conflict(String),
}

fn bad(flag: &'static str, msg: impl Into<String>) -> ConfigError {
    ConfigError::BadValue {
        flag,
        msg: msg.into(),
    }
}

/// How a local cluster is secured (`--security`): each setting is a
/// cluster of its own, measured side by side in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Security {
    /// Plain TCP, no users (the replicas still prove the cluster secret
    /// to each other, as every local cluster does).
    #[default]
    Plain,
    /// TLS 1.3 on every client connection and replica link (mutual TLS
    /// between replicas), certificates made for the cluster.
    Tls,
    /// Plain TCP; the replicas get a users file and every bench client
    /// logs in (`Frame::Auth`, argon2id) on each connection.
    Auth,
    /// TLS and users together.
    TlsAuth,
}

impl Security {
    pub const ALL: [Security; 4] = [
        Security::Plain,
        Security::Tls,
        Security::Auth,
        Security::TlsAuth,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Security::Plain => "plain",
            Security::Tls => "tls",
            Security::Auth => "auth",
            Security::TlsAuth => "tls+auth",
        }
    }
    pub fn tls(self) -> bool {
        matches!(self, Security::Tls | Security::TlsAuth)
    }
    pub fn auth(self) -> bool {
        matches!(self, Security::Auth | Security::TlsAuth)
    }
}

impl fmt::Display for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Security {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "plain" | "none" | "off" => Ok(Security::Plain),
            "tls" => Ok(Security::Tls),
            "auth" => Ok(Security::Auth),
            "tls+auth" | "auth+tls" => Ok(Security::TlsAuth),
            _ => Err(format!(
                "unknown security setting '{s}' (known: plain, tls, auth, tls+auth)"
            )),
        }
    }
}

/// How operations pick their key (seed 002 §4.1 uses Zipf 1.345675).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Distribution {
    /// Every key equally likely (seed 000).
    Uniform,
    /// Key of rank i (1-based) has probability ∝ 1 / i^s.
    Zipf(f64),
    /// Every operation on one key: maximal contention.
    Hotspot,
}

/// The Zipf exponent of seed 002: 90 % of requests on 10 % of 1000 keys.
pub const SEED_002_ZIPF: f64 = 1.345675;

impl FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s.to_ascii_lowercase().as_str() {
            "uniform" => return Ok(Distribution::Uniform),
            "hotspot" => return Ok(Distribution::Hotspot),
            "zipf" => return Ok(Distribution::Zipf(SEED_002_ZIPF)),
            _ => {}
        }
        let exp = s.strip_prefix("zipf:").ok_or_else(|| {
            format!("unknown distribution '{s}' (known: uniform, zipf:S, hotspot)")
        })?;
        match exp.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(Distribution::Zipf(v)),
            _ => Err(format!(
                "bad Zipf exponent '{exp}' (want a number > 0, e.g. zipf:1.345675)"
            )),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => f.write_str("uniform"),
            Distribution::Zipf(s) => write!(f, "zipf:{s}"),
            Distribution::Hotspot => f.write_str("hotspot"),
        }
    }
}

/// What to measure. `Local` starts a cluster of our own per protocol and
/// replica count; the others are already running.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum TargetSpec {
    Local,
    /// An existing quorumkv cluster: the replicas' native ports.
    Quorumkv {
        endpoints: Vec<SocketAddr>,
    },
    /// etcd v3 members (`host:port` of their client URLs).
    Etcd {
        endpoints: Vec<String>,
    },
    /// One Redis server (or anything speaking RESP, e.g. a quorumkv RESP port).
    Redis {
        addr: String,
    },
    /// ZooKeeper servers (`host:port` of their client ports), read as asked.
    Zookeeper {
        endpoints: Vec<String>,
        read: ZkRead,
    },
}

/// How the ZooKeeper target reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ZkRead {
    /// `getData` answered by the server the session is connected to:
    /// ZooKeeper's local read, sequentially consistent, not linearizable.
    Local,
    /// `sync` then `getData` on the same session: the server first catches
    /// up with the leader. Close to linearizable (ZooKeeper's `sync` is not
    /// a quorum operation, ZOOKEEPER-1675), at the cost of a leader round trip.
    Sync,
}

impl TargetSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            TargetSpec::Local => "local",
            TargetSpec::Quorumkv { .. } => "quorumkv",
            TargetSpec::Etcd { .. } => "etcd",
            TargetSpec::Redis { .. } => "redis",
            TargetSpec::Zookeeper { .. } => "zookeeper",
        }
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSpec::Local => f.write_str("local"),
            TargetSpec::Quorumkv { endpoints } => {
                let eps: Vec<String> = endpoints.iter().map(|e| e.to_string()).collect();
                write!(f, "quorumkv://{}", eps.join(","))
            }
            TargetSpec::Etcd { endpoints } => write!(f, "etcd://{}", endpoints.join(",")),
            TargetSpec::Redis { addr } => write!(f, "redis://{addr}"),
            TargetSpec::Zookeeper { endpoints, read } => {
                let scheme = match read {
                    ZkRead::Local => "zk",
                    ZkRead::Sync => "zk+sync",
                };
                write!(f, "{scheme}://{}", endpoints.join(","))
            }
        }
    }
}

/// Parses `--target`: comma-separated targets, where a bare `host:port` after
/// a URL adds an endpoint to it. `local,etcd://h:1,h:2,redis://h:3` is three
/// targets, the second with two endpoints. `zk://` is ZooKeeper with local
/// reads, `zk+sync://` with `sync` before each read (`zookeeper://` and
/// `zookeeper+sync://` too).
pub fn parse_targets(s: &str) -> Result<Vec<TargetSpec>, String> {
    let mut out: Vec<TargetSpec> = Vec::new();
    for tok in s.split(',').map(str::trim) {
        if tok.is_empty() {
            return Err(format!("empty entry in '{s}'"));
        }
        if tok.eq_ignore_ascii_case("local") {
            out.push(TargetSpec::Local);
        } else if let Some((scheme, rest)) = tok.split_once("://") {
            let rest = rest.trim_end_matches('/');
            check_host_port(rest)?;
            out.push(match scheme.to_ascii_lowercase().as_str() {
                "quorumkv" => TargetSpec::Quorumkv { endpoints: vec![resolve(rest)?] },
                "etcd" | "http" => TargetSpec::Etcd { endpoints: vec![rest.to_string()] },
                "redis" => TargetSpec::Redis { addr: rest.to_string() },
                "zk" | "zookeeper" => TargetSpec::Zookeeper {
                    endpoints: vec![rest.to_string()],
                    read: ZkRead::Local,
                },
                "zk+sync" | "zookeeper+sync" => TargetSpec::Zookeeper {
                    endpoints: vec![rest.to_string()],
                    read: ZkRead::Sync,
                },
                other => {
                    return Err(format!(
                        "unknown target scheme '{other}://' (known: local, quorumkv://, etcd://, redis://, zk://, zk+sync://)"
                    ))
                }
            });
        } else {
            if matches!(out.last(), None | Some(TargetSpec::Local)) {
                return Err(format!(
                    "unknown target '{tok}' (want local, quorumkv://H:P,…, etcd://H:P,…, zk://H:P,… or redis://H:P)"
                ));
            }
            check_host_port(tok)?;
            match out.last_mut() {
                Some(TargetSpec::Quorumkv { endpoints }) => endpoints.push(resolve(tok)?),
                Some(TargetSpec::Etcd { endpoints })
                | Some(TargetSpec::Zookeeper { endpoints, .. }) => endpoints.push(tok.to_string()),
                Some(TargetSpec::Redis { .. }) => {
                    return Err(format!("'{tok}': a redis:// target takes one address"))
                }
                _ => {
                    return Err(format!(
                        "unknown target '{tok}' (want local, quorumkv://H:P,…, etcd://H:P,…, zk://H:P,… or redis://H:P)"
                    ))
                }
            }
        }
    }
    if out.is_empty() {
        return Err("no target given".into());
    }
    Ok(out)
}

fn check_host_port(s: &str) -> Result<(), String> {
    match s.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!("'{s}' is not host:port")),
    }
}

fn resolve(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{s}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{s}' resolves to no address"))
}

/// How long a point runs after its warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Length {
    /// Every logical client issues this many measured operations (seed 000: 2000).
    OpsPerClient(u64),
    /// Measure for this long.
    Duration(Duration),
}

/// Whether logical clients share one connection-level client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum Sharing {
    /// One client object (one connection per server) for all logical clients,
    /// as applications use etcd's and our client libraries. Requests pipeline.
    Shared,
    /// Every logical client opens its own connections (redis-benchmark style).
    PerClient,
}

impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sharing::Shared => "shared",
            Sharing::PerClient => "per-client",
        })
    }
}

/// A protocol variant of quorumkv targets, as asked with `--variant`:
/// `default`, a name the protocol offers (`quorumkv bench --help` lists
/// them), or ad-hoc options
/// `key=value+key=value`. Variants are measured side by side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Variant(pub String);

impl Variant {
    pub fn default_variant() -> Variant {
        Variant("default".into())
    }
    pub fn is_default(&self) -> bool {
        self.0 == "default"
    }
    pub fn name(&self) -> &str {
        &self.0
    }
    /// The options this variant sets on `protocol`, or `None` when the
    /// protocol does not offer it (that pair is not measured).
    pub fn options_for(&self, protocol: ProtocolKind) -> Option<Vec<(String, String)>> {
        if self.is_default() {
            return Some(Vec::new());
        }
        let info = protocol.info();
        if let Some(v) = info.variants.iter().find(|v| v.name == self.0) {
            return Some(
                (v.options.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        let pairs = (self.0.split('+'))
            .map(quorumkv_core::protocol::options::parse_pair)
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        info.check_options(&pairs).ok().map(|()| pairs)
    }
}

impl FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty variant".into());
        }
        Ok(Variant(s.to_string()))
    }
}

/// Every protocol's named variants, for `--help`.
pub fn variants_help() -> String {
    let mut s = String::from("  default            every protocol's defaults\n");
    for info in quorumkv_core::protocol::registry::infos() {
        for v in info.variants {
            s += &format!("  {:<18} {}: {}\n", v.name, info.name, v.about);
        }
    }
    s
}

/// Where a quorumkv operation's coordinator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum CoordMode {
    /// In the client library (the seeds' design).
    Direct,
    /// In a server that proxies for the client.
    Proxy,
}

/// The whole benchmark: a matrix of the list-valued fields.
#[derive(Clone, Debug, Serialize)]
pub struct BenchConfig {
    pub targets: Vec<TargetSpec>,
    /// Protocols of `local` targets (and the protocol of a `quorumkv://` one).
    pub protocols: Vec<ProtocolKind>,
    /// Protocol variants of quorumkv targets.
    pub variants: Vec<Variant>,
    /// Protocol options of every quorumkv target (`--opt key=value`),
    /// under each variant's.
    pub options: Vec<(String, String)>,
    /// Replica counts of `local` targets.
    pub replicas: Vec<usize>,
    /// Durability modes of `local` targets, side by side.
    pub durabilities: Vec<Durability>,
    /// Closed-loop logical clients, each with at most one operation outstanding.
    pub clients: Vec<usize>,
    pub get_fractions: Vec<f64>,
    pub keys: Vec<usize>,
    pub distributions: Vec<Distribution>,
    pub value_sizes: Vec<usize>,
    pub length: Length,
    /// Operations during this time before measuring are not counted.
    pub warmup: Duration,
    /// Open loop: arrivals per second (Poisson). Empty = closed loop.
    pub rates: Vec<f64>,
    /// Open loop: arrivals beyond this many outstanding operations are shed
    /// and counted as failures ("shed").
    pub max_outstanding: usize,
    pub sharing: Sharing,
    pub coord: CoordMode,
    pub op_timeout: Duration,
    /// Closed loop: think time after each operation, uniform in `lo..=hi`.
    pub think: Option<(Duration, Duration)>,
    /// Write every key once before the warm-up (seed 002 §4.1).
    pub preload: bool,
    /// Record each point's history and check it for linearizability.
    pub check: bool,
    /// Longest a single history check may take before its verdict is "unknown".
    pub check_timeout: Duration,
    pub seed: u64,
    pub out: Option<PathBuf>,
    pub progress: bool,
    /// Measure the host's disk and loopback floors before the first point
    /// and after the last (`floors`; `--no-floors` turns it off).
    pub floors: bool,
    /// The `quorumkv` executable that local clusters run.
    pub binary: Option<PathBuf>,
    pub port_base: Option<u16>,
    /// Hold each replica of a local cluster to this fraction of one core
    /// (cgroup v1); `None` = no limit.
    pub replica_cpu: Option<f64>,
    /// Security settings of local clusters, side by side (`--security`;
    /// `--tls` = `[Tls]`): each is a cluster of its own, and a protocol's
    /// clusters run one after the other.
    pub securities: Vec<Security>,
    /// Every workload is measured this many times, the deployments of a
    /// group (`--security`) taking turns each round (`--rounds`).
    pub rounds: usize,
    /// Each closed-loop client only reads or only writes (a GET fraction
    /// of them read, spread evenly over the servers they are pinned to:
    /// seed 004 §5's dedicated readers and writers) instead of drawing
    /// every operation.
    pub dedicated: bool,
    /// No `--protocol` was given for a `quorumkv://` target: ask the
    /// cluster which one it runs before the first point.
    pub protocol_from_target: bool,
    /// Round trips added inside local clusters (`--rtt-*`).
    pub rtt: Rtt,
    /// More arguments for every server of a local cluster (`--server-arg`,
    /// e.g. `--storage-engine=fjall`).
    pub server_args: Vec<String>,
    /// What the clients do: KV operations, or take a lock.
    pub workload: WorkloadKind,
    /// The lock workload's settings (`--workload lock`).
    pub lock: LockConfig,
    /// `--workload znode`.
    pub znode_ops: ZnodeOpsConfig,
}

/// Round trips a local cluster's replicas add (their `--rtt-client`,
/// `--rtt-peer`, `--rtt-jitter`; seed 001 §IV's user-to-server and
/// inter-cluster RTT). Existing targets are not touched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Rtt {
    pub client: Duration,
    pub peer: Duration,
    pub jitter: Duration,
}

impl Rtt {
    pub fn is_zero(&self) -> bool {
        self.client.is_zero() && self.peer.is_zero() && self.jitter.is_zero()
    }
    /// The server arguments that add these round trips (none for zero).
    pub fn server_args(&self) -> Vec<String> {
        [
            ("--rtt-client", self.client),
            ("--rtt-peer", self.peer),
            ("--rtt-jitter", self.jitter),
        ]
        .into_iter()
        .filter(|(_, d)| !d.is_zero())
        .map(|(flag, d)| format!("{flag}={}us", d.as_micros()))
        .collect()
    }
}

/// `--workload`: what each point's clients do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// GETs and PUTs (every seed but 001).
    #[default]
    Kv,
    /// Seed 001's lock recipes on the coordination service.
    Lock,
    /// Seed 001's basic znode operations, sync and async (Fig. 7-9).
    Znode,
}

/// The lock workload's settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockConfig {
    pub recipes: Vec<Recipe>,
    /// Mean inter-arrival of lock requests (exponential).
    pub arrival: Duration,
    /// Mean critical section (exponential).
    pub cs: Duration,
    /// Retry interval of `tas`, create interval of `async-tas`,
    /// getChildren interval of `async-queue`.
    pub poll: Duration,
    /// Session timeout of the lock clients.
    pub session_timeout: Duration,
    /// An acquisition not done after this long is a failure (its session
    /// is closed, so that its node cannot block the others).
    pub acquire_timeout: Duration,
    /// Independent locks; each arrival draws one uniformly.
    pub locks: usize,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            recipes: Recipe::ALL.to_vec(),
            arrival: Duration::from_millis(500),
            cs: Duration::from_millis(1),
            poll: Duration::from_millis(10),
            session_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(30),
            locks: 1,
        }
    }
}

/// A basic znode operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ZnodeOpKind {
    Create,
    Set,
    Get,
    Exists,
    Children,
    Delete,
}

impl ZnodeOpKind {
    pub const ALL: [ZnodeOpKind; 6] = [
        ZnodeOpKind::Create,
        ZnodeOpKind::Set,
        ZnodeOpKind::Get,
        ZnodeOpKind::Exists,
        ZnodeOpKind::Children,
        ZnodeOpKind::Delete,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ZnodeOpKind::Create => "create",
            ZnodeOpKind::Set => "set",
            ZnodeOpKind::Get => "get",
            ZnodeOpKind::Exists => "exists",
            ZnodeOpKind::Children => "children",
            ZnodeOpKind::Delete => "delete",
        }
    }
}

impl fmt::Display for ZnodeOpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ZnodeOpKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        (ZnodeOpKind::ALL.into_iter())
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown znode operation '{s}' (create, set, get, exists, children, delete)"
                )
            })
    }
}

/// `--ops`, `--count`.
#[derive(Clone, Debug, Serialize)]
pub struct ZnodeOpsConfig {
    /// Run in this order (a delete needs its create before it).
    pub ops: Vec<ZnodeOpKind>,
    /// Calls per operation and mode.
    pub count: usize,
}

impl Default for ZnodeOpsConfig {
    fn default() -> Self {
        ZnodeOpsConfig {
            ops: ZnodeOpKind::ALL.to_vec(),
            count: 1000,
        }
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            targets: vec![TargetSpec::Local],
            protocols: ProtocolKind::all(),
            replicas: vec![3],
            durabilities: vec![Durability::Fsync],
            clients: vec![1, 4, 8, 16, 32],
            get_fractions: vec![0.9, 0.1],
            keys: vec![10],
            distributions: vec![Distribution::Uniform],
            value_sizes: vec![16],
            length: Length::Duration(Duration::from_secs(3)),
            warmup: Duration::from_millis(500),
            rates: Vec::new(),
            max_outstanding: 25,
            sharing: Sharing::Shared,
            coord: CoordMode::Direct,
            variants: vec![Variant::default_variant()],
            options: Vec::new(),
            op_timeout: Duration::from_secs(2),
            think: None,
            preload: true,
            check: true,
            check_timeout: Duration::from_secs(60),
            seed: 1,
            out: Some(PathBuf::from("results")),
            progress: true,
            floors: true,
            binary: None,
            port_base: None,
            replica_cpu: None,
            securities: vec![Security::Plain],
            rounds: 1,
            dedicated: false,
            protocol_from_target: false,
            rtt: Rtt::default(),
            server_args: Vec::new(),
            workload: WorkloadKind::Kv,
            lock: LockConfig::default(),
            znode_ops: ZnodeOpsConfig::default(),
        }
    }
}

/// Where one point runs: a deployment (started once, shared by its points).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum DeploySpec {
    Local {
        protocol: ProtocolKind,
        replicas: usize,
        variant: Variant,
        durability: Durability,
        security: Security,
    },
    Quorumkv {
        protocol: ProtocolKind,
        endpoints: Vec<SocketAddr>,
        variant: Variant,
    },
    Etcd {
        endpoints: Vec<String>,
    },
    Redis {
        addr: String,
    },
    Zookeeper {
        endpoints: Vec<String>,
        read: ZkRead,
    },
}

impl DeploySpec {
    /// The protocol of a quorumkv target.
    pub fn protocol(&self) -> Option<ProtocolKind> {
        match self {
            DeploySpec::Local { protocol, .. } | DeploySpec::Quorumkv { protocol, .. } => {
                Some(*protocol)
            }
            _ => None,
        }
    }
}

fn with_variant(name: &str, v: &Variant) -> String {
    if v.is_default() {
        name.to_string()
    } else {
        format!("{name}+{}", v.name())
    }
}

impl DeploySpec {
    /// Why a history of this target may legitimately fail the
    /// linearizability check: its reads do not promise linearizability.
    pub fn weaker_reads(&self) -> Option<&'static str> {
        match self {
            DeploySpec::Zookeeper {
                read: ZkRead::Local,
                ..
            } => Some(
                "ZooKeeper's local reads are sequentially consistent, not linearizable: \
                 a stale read is allowed (zk+sync:// reads after a sync)",
            ),
            _ => None,
        }
    }

    /// The name of the line in plots and the first column of the table.
    pub fn label(&self) -> String {
        match self {
            // `fsync` is what a server runs by default: the plain name.
            // So is `plain`; other settings are a suffix (`abd/tls+auth`).
            DeploySpec::Local {
                protocol,
                variant,
                durability,
                security,
                ..
            } => {
                let name = match durability {
                    Durability::Fsync => with_variant(protocol.name(), variant),
                    d => format!("{}/{d}", with_variant(protocol.name(), variant)),
                };
                match security {
                    Security::Plain => name,
                    s => format!("{name}/{s}"),
                }
            }
            DeploySpec::Quorumkv {
                protocol, variant, ..
            } => with_variant(&format!("quorumkv:{protocol}"), variant),
            DeploySpec::Etcd { .. } => "etcd".into(),
            DeploySpec::Redis { .. } => "redis".into(),
            DeploySpec::Zookeeper { read, .. } => match read {
                ZkRead::Local => "zookeeper".into(),
                ZkRead::Sync => "zookeeper+sync".into(),
            },
        }
    }
}

/// The workload of one point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    pub clients: usize,
    pub get_fraction: f64,
    pub keys: usize,
    pub distribution: Distribution,
    pub value_size: usize,
    /// Open loop arrivals per second; `None` = closed loop.
    pub rate: Option<f64>,
}

/// One deployment and the workloads run against it, in order.
#[derive(Clone, Debug)]
pub struct Plan {
    pub deploy: DeploySpec,
    pub workloads: Vec<Workload>,
}

impl BenchConfig {
    /// Rejects values no run can use. Called before any work starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The order decides which of several problems is reported.
        self.check_lists()?;
        self.check_rounds_and_security()?;
        self.check_ranges()?;
        self.check_protocols()?;
        self.check_run()
    }

    /// No list flag is empty.
    fn check_lists(&self) -> Result<(), ConfigError> {
        let empty = [
            (self.targets.is_empty(), "target"),
            (self.protocols.is_empty(), "protocol"),
            (self.replicas.is_empty(), "replicas"),
            (self.durabilities.is_empty(), "durability"),
            (self.clients.is_empty(), "clients"),
            (self.get_fractions.is_empty(), "get-fraction"),
            (self.keys.is_empty(), "keys"),
            (self.distributions.is_empty(), "distribution"),
            (self.value_sizes.is_empty(), "value-size"),
            (self.securities.is_empty(), "security"),
        ];
        match empty.into_iter().find(|(e, _)| *e) {
            Some((_, flag)) => Err(bad(flag, "empty list")),
            None => Ok(()),
        }
    }

    /// `--rounds`, and security settings: each once, logins only for KV.
    fn check_rounds_and_security(&self) -> Result<(), ConfigError> {
        if !(1..=100).contains(&self.rounds) {
            return Err(bad(
                "rounds",
                format!("{} is out of range 1..=100", self.rounds),
            ));
        }
        if let Some(s) =
            (self.securities.iter()).find(|s| self.securities.iter().filter(|t| t == s).count() > 1)
        {
            return Err(bad("security", format!("{s} is listed twice")));
        }
        if self.workload != WorkloadKind::Kv && self.securities.iter().any(|s| s.auth()) {
            return Err(ConfigError::Conflict(
                "--security auth and tls+auth are for the kv workload (lock and znode clients do not log in)".into(),
            ));
        }
        Ok(())
    }

    /// The sizes of the workload.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        if let Some(r) = self.replicas.iter().find(|&&r| r == 0 || r > 64) {
            return Err(bad("replicas", format!("{r} is out of range 1..=64")));
        }
        if let Some(c) = self.clients.iter().find(|&&c| c == 0 || c > 100_000) {
            return Err(bad("clients", format!("{c} is out of range 1..=100000")));
        }
        if let Some(g) = self
            .get_fractions
            .iter()
            .find(|g| !(0.0..=1.0).contains(*g))
        {
            return Err(bad("get-fraction", format!("{g} is not in [0, 1]")));
        }
        if self.keys.contains(&0) {
            return Err(bad("keys", "0 keys"));
        }
        if let Some(r) = self.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(bad("rate", format!("{r} is not a positive rate")));
        }
        if self.max_outstanding == 0 {
            return Err(bad("max-outstanding", "must be at least 1"));
        }
        Ok(())
    }

    /// Variants and options some protocol of the run takes.
    fn check_protocols(&self) -> Result<(), ConfigError> {
        for v in &self.variants {
            if !self.protocols.iter().any(|&p| v.options_for(p).is_some()) {
                let names: Vec<_> = self.protocols.iter().map(|p| p.name()).collect();
                let msg = format!(
                    "'{}' is neither a variant nor valid options of {} (see --help)",
                    v.name(),
                    names.join(", ")
                );
                return Err(bad("variant", msg));
            }
        }
        for &p in &self.protocols {
            if let Err(e) = p.info().check_options(&self.options) {
                return Err(bad("opt", e));
            }
        }
        Ok(())
    }

    /// How points run, and what goes together.
    fn check_run(&self) -> Result<(), ConfigError> {
        match self.length {
            Length::OpsPerClient(0) => return Err(bad("ops-per-client", "must be at least 1")),
            Length::Duration(d) if d.is_zero() => return Err(bad("duration", "must be > 0")),
            _ => {}
        }
        if self.value_sizes.iter().any(|&v| v > 64 << 20) {
            return Err(bad("value-size", "larger than 64 MiB"));
        }
        if let Some(share) = self.replica_cpu {
            quorumkv_node::cpu_share::bandwidth(share)
                .map_err(|e| bad("replica-cpu", e.to_string()))?;
        }
        if self.dedicated && !self.rates.is_empty() {
            return Err(ConfigError::Conflict(
                "--dedicated-clients is for the closed loop, not --rate".into(),
            ));
        }
        let quorumkv_targets = self
            .targets
            .iter()
            .filter(|t| matches!(t, TargetSpec::Quorumkv { .. }));
        if quorumkv_targets.count() > 0 && self.protocols.len() != 1 && !self.protocol_from_target {
            return Err(ConfigError::Conflict(
                "a quorumkv:// target runs one protocol: give exactly one --protocol (the cluster's)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The sweep, grouped by deployment, in the order it runs.
    pub fn plans(&self) -> Vec<Plan> {
        let mut plans = Vec::new();
        for t in &self.targets {
            match t {
                TargetSpec::Local => {
                    for &protocol in &self.protocols {
                        let offered =
                            (self.variants.iter()).filter(|v| v.options_for(protocol).is_some());
                        for variant in offered {
                            for &durability in &self.durabilities {
                                for &replicas in &self.replicas {
                                    // Innermost: a protocol's security
                                    // settings run back to back.
                                    for &security in &self.securities {
                                        plans.push(DeploySpec::Local {
                                            protocol,
                                            replicas,
                                            variant: variant.clone(),
                                            durability,
                                            security,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
                TargetSpec::Quorumkv { endpoints } => {
                    let protocol = self.protocols[0];
                    let offered =
                        (self.variants.iter()).filter(|v| v.options_for(protocol).is_some());
                    for variant in offered {
                        plans.push(DeploySpec::Quorumkv {
                            protocol,
                            endpoints: endpoints.clone(),
                            variant: variant.clone(),
                        });
                    }
                }
                TargetSpec::Etcd { endpoints } => plans.push(DeploySpec::Etcd {
                    endpoints: endpoints.clone(),
                }),
                TargetSpec::Redis { addr } => plans.push(DeploySpec::Redis { addr: addr.clone() }),
                TargetSpec::Zookeeper { endpoints, read } => plans.push(DeploySpec::Zookeeper {
                    endpoints: endpoints.clone(),
                    read: *read,
                }),
            }
        }
        plans
            .into_iter()
            .map(|deploy| Plan {
                deploy,
                workloads: self.workloads(),
            })
            .collect()
    }

    /// Every workload of the matrix (the same for each deployment).
    pub fn workloads(&self) -> Vec<Workload> {
        let rates: Vec<Option<f64>> = if self.rates.is_empty() {
            vec![None]
        } else {
            self.rates.iter().map(|&r| Some(r)).collect()
        };
        // In the open loop the concurrency is --max-outstanding, not --clients.
        let clients = if self.rates.is_empty() {
            self.clients.clone()
        } else {
            vec![self.max_outstanding]
        };
        let mut out = Vec::new();
        for &keys in &self.keys {
            for &distribution in &self.distributions {
                for &value_size in &self.value_sizes {
                    for &get_fraction in &self.get_fractions {
                        for &rate in &rates {
                            for &clients in &clients {
                                out.push(Workload {
                                    clients,
                                    get_fraction,
                                    keys,
                                    distribution,
                                    value_size,
                                    rate,
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Protocols measured on quorumkv targets that cannot run as asked in
    /// `--client-mode direct` (no client-side coordinator): their clients
    /// go through a server instead (proxy mode). Empty in proxy mode.
    pub fn proxy_fallbacks(&self) -> Vec<ProtocolKind> {
        if self.coord != CoordMode::Direct {
            return Vec::new();
        }
        let mut out: Vec<ProtocolKind> = Vec::new();
        for p in self.plans() {
            let protocol = match p.deploy {
                DeploySpec::Local { protocol, .. } | DeploySpec::Quorumkv { protocol, .. } => {
                    protocol
                }
                _ => continue,
            };
            if !protocol.has_client_coordinator() && !out.contains(&protocol) {
                out.push(protocol);
            }
        }
        out
    }

    /// The line `quorumkv bench` prints for each of [`Self::proxy_fallbacks`].
    pub fn proxy_fallback_notice(protocol: ProtocolKind) -> String {
        format!(
            "quorumkv bench: {protocol} has no client-side coordinator: its clients go through a \
             server (--client-mode proxy) instead of direct"
        )
    }

    /// Number of points of the whole sweep.
    pub fn point_count(&self) -> usize {
        self.plans()
            .iter()
            .map(|p| p.workloads.len())
            .sum::<usize>()
            * self.rounds
    }
}

/// Parses a comma-separated list with `T::from_str`, naming the bad element.
pub fn parse_list<T: FromStr>(flag: &'static str, s: &str) -> Result<Vec<T>, ConfigError>
where
    T::Err: fmt::Display,
{
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad(flag, format!("empty entry in '{s}'")));
        }
        out.push(
            part.parse::<T>()
                .map_err(|e| bad(flag, format!("bad value '{part}': {e}")))?,
        );
    }
    Ok(out)
}

/// Durations are parsed as everywhere else in quorumkv (`10`, `500ms`, `1.5s`, `2m`).
pub use quorumkv_node::config::parse_duration;
