//! What the bench talks to. A [`Deployment`] is a running system (a local
//! cluster we started, or an existing quorumkv, etcd or Redis); a [`Conn`] is
//! one connection-level client to it, which logical clients share or own.
//!
//! Adding a system (e.g. ZooKeeper) = one [`DeploySpec`] variant, one [`Conn`]
//! variant and its three arms below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use quorumkv_node::auth::Credentials;
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use quorumkv_node::tls::ClientTls;

use crate::config::{CoordMode, DeploySpec, Security, Variant};
use crate::durability::{self, SyncCounters};
use crate::etcd::{self, EtcdClient};
pub use crate::failure::OpFailure;
#[cfg(feature = "zookeeper")]
use crate::zk::{self, ZkClient};
use quorumkv_core::protocol::ProtocolKind;

/// A short failure reason from an error's message: the text before the first
/// ':' or '(' so that addresses and counts do not split the buckets.
fn reason_of(msg: &str) -> String {
    let end = msg.find([':', '(']).unwrap_or(msg.len());
    let r = msg[..end].trim();
    let r: String = r.chars().take(48).collect();
    if r.is_empty() {
        "error".into()
    } else {
        r
    }
}

/// A users file with one readwrite user, [`BENCH_USER`], and a random
/// password, in a fresh directory (mode 0700): the directory, the file and
/// the login.
fn write_users_file() -> anyhow::Result<(PathBuf, PathBuf, Credentials)> {
    use quorumkv_node::auth::{hash_password, Role, Users};
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "quorumkv-bench-users-{}-{unique}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    }
    let password: String = (rand::random::<[u8; 16]>().iter())
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut users = Users::default();
    users.set(BENCH_USER, Role::ReadWrite, hash_password(&password)?)?;
    let file = dir.join("users.toml");
    std::fs::write(&file, users.to_toml())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", file.display()))?;
    let credentials = Credentials {
        user: BENCH_USER.into(),
        password,
    };
    Ok((dir, file, credentials))
}

/// One connection-level client. Cloning shares the connections.
#[derive(Clone)]
pub enum Conn {
    Quorumkv(Client),
    Etcd(EtcdClient),
    Redis(redis::aio::MultiplexedConnection),
    /// One ZooKeeper session (built with the `zookeeper` feature).
    #[cfg(feature = "zookeeper")]
    Zk(ZkClient),
}

impl Conn {
    pub async fn get(&mut self, key: Bytes, timeout: Duration) -> Result<Option<Bytes>, OpFailure> {
        match self {
            Conn::Quorumkv(c) => c.get(key).await.map_err(quorumkv_failure),
            Conn::Etcd(c) => tokio::time::timeout(timeout, c.get(key))
                .await
                .map_err(|_| OpFailure::unknown("timeout"))?
                .map_err(|s| etcd::failure(&s)),
            Conn::Redis(c) => {
                let mut cmd = redis::cmd("GET");
                cmd.arg(&key[..]);
                let r: Option<Vec<u8>> = tokio::time::timeout(timeout, cmd.query_async(c))
                    .await
                    .map_err(|_| OpFailure::unknown("timeout"))?
                    .map_err(redis_failure)?;
                Ok(r.map(Bytes::from))
            }
            #[cfg(feature = "zookeeper")]
            Conn::Zk(c) => tokio::time::timeout(timeout, c.get(&key))
                .await
                .map_err(|_| OpFailure::unknown("timeout"))?
                .map_err(|e| zk::failure(&e)),
        }
    }

    pub async fn put(
        &mut self,
        key: Bytes,
        value: Bytes,
        timeout: Duration,
    ) -> Result<(), OpFailure> {
        match self {
            Conn::Quorumkv(c) => c.put(key, value).await.map_err(quorumkv_failure),
            Conn::Etcd(c) => tokio::time::timeout(timeout, c.put(key, value))
                .await
                .map_err(|_| OpFailure::unknown("timeout"))?
                .map_err(|s| etcd::failure(&s)),
            Conn::Redis(c) => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&key[..]).arg(&value[..]);
                let _: () = tokio::time::timeout(timeout, cmd.query_async(c))
                    .await
                    .map_err(|_| OpFailure::unknown("timeout"))?
                    .map_err(redis_failure)?;
                Ok(())
            }
            #[cfg(feature = "zookeeper")]
            Conn::Zk(c) => tokio::time::timeout(timeout, c.put(&key, &value))
                .await
                .map_err(|_| OpFailure::unknown("timeout"))?
                .map_err(|e| zk::failure(&e)),
        }
    }
}

fn quorumkv_failure(e: quorumkv_node::client::ClientError) -> OpFailure {
    OpFailure {
        reason: reason_of(&e.to_string()),
        definite: e.is_definite(),
    }
}

fn redis_failure(e: redis::RedisError) -> OpFailure {
    if e.is_timeout() {
        OpFailure::unknown("timeout")
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        OpFailure::unknown("disconnected")
    } else {
        OpFailure::definite(reason_of(&e.to_string()))
    }
}

/// Settings a deployment needs from the configuration.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    pub binary: PathBuf,
    pub port_base: Option<u16>,
    pub coord: CoordMode,
    pub op_timeout: Duration,
    /// `--opt key=value` protocol options.
    pub options: Vec<(String, String)>,
    /// Fraction of one core each local replica may use (`--replica-cpu`).
    pub replica_cpu: Option<f64>,
    /// Extra arguments of every local replica (`--rtt-client` …).
    pub server_args: Vec<String>,
}

/// The members of the etcd cluster at `endpoints`; an error if it does
/// not answer.
async fn etcd_members(endpoints: &[String], op_timeout: Duration) -> anyhow::Result<usize> {
    let c = EtcdClient::new(endpoints, op_timeout)?;
    let members = tokio::time::timeout(Duration::from_secs(5), c.member_count())
        .await
        .map_err(|_| anyhow::anyhow!("etcd at {} does not answer", endpoints.join(",")))?
        .map_err(|e| {
            anyhow::anyhow!(
                "etcd at {} is unreachable: {}",
                endpoints.join(","),
                e.message()
            )
        })?;
    Ok(members.max(1))
}

/// The user every bench client logs in as on a local cluster with users
/// (`--security auth`, `tls+auth`).
pub const BENCH_USER: &str = "bench";

/// A system under test, started or found.
pub struct Deployment {
    pub spec: DeploySpec,
    /// Replicas / members / servers behind the target.
    pub replicas: usize,
    cluster: Option<LocalCluster>,
    /// Processes of a peer on this host (found by its listening ports), so
    /// its CPU time can be reported like our servers'.
    peer_pids: Vec<u32>,
    native: Vec<SocketAddr>,
    /// How quorumkv clients reach a TLS deployment (`None`: plain TCP).
    client_tls: Option<ClientTls>,
    /// The login of every quorumkv client (a local cluster with users).
    credentials: Option<Credentials>,
    /// Where a local cluster's users file was written (removed at stop).
    users_dir: Option<PathBuf>,
    opts: DeployOptions,
    /// What an acknowledged write survives: `fsync`, `buffered`, `memory`
    /// (quorumkv), `fsync` (etcd), `aof-always`, `none`, … (Redis).
    pub durability: Option<String>,
}

impl Deployment {
    /// Starts a local cluster, or checks that an existing target answers.
    /// Errors are one line, for the CLI.
    pub async fn start(spec: DeploySpec, opts: DeployOptions) -> anyhow::Result<Deployment> {
        let mut d = Deployment {
            spec: spec.clone(),
            replicas: 1,
            cluster: None,
            peer_pids: Vec::new(),
            native: Vec::new(),
            client_tls: None,
            credentials: None,
            users_dir: None,
            opts,
            durability: None,
        };
        match &spec {
            DeploySpec::Local {
                protocol,
                replicas,
                variant,
                durability,
                security,
            } => (d.start_local(*protocol, *replicas, variant, *durability, *security)).await?,
            DeploySpec::Quorumkv { endpoints, .. } => {
                d.native = endpoints.clone();
                d.replicas = endpoints.len();
            }
            DeploySpec::Etcd { endpoints } => {
                d.replicas = etcd_members(endpoints, d.opts.op_timeout).await?;
            }
            DeploySpec::Redis { .. } => {}
            DeploySpec::Zookeeper { endpoints, .. } => {
                d.replicas = zookeeper_ensemble(endpoints, d.opts.op_timeout).await?;
            }
        }
        d.peer_pids = match &spec {
            DeploySpec::Etcd { endpoints } | DeploySpec::Zookeeper { endpoints, .. } => {
                local_listener_pids(endpoints)
            }
            DeploySpec::Redis { addr } => local_listener_pids(std::slice::from_ref(addr)),
            _ => Vec::new(),
        };
        // Proves the target answers before any point is measured.
        let mut probe = d.connect().await?;
        d.durability = d.durability_mode(&mut probe).await;
        drop(probe);
        Ok(d)
    }

    /// Starts a local cluster (with a users file for `--security auth`).
    async fn start_local(
        &mut self,
        protocol: ProtocolKind,
        replicas: usize,
        variant: &Variant,
        durability: Durability,
        security: Security,
    ) -> anyhow::Result<()> {
        let mut server_args = self.opts.server_args.clone();
        if security.auth() {
            let (dir, users, credentials) = write_users_file()?;
            server_args.extend(["--users".into(), users.display().to_string()]);
            self.users_dir = Some(dir);
            self.credentials = Some(credentials);
        }
        let cfg = LocalClusterConfig {
            protocol,
            replicas,
            durability,
            options: self.protocol_options(protocol, variant),
            port_base: self.opts.port_base,
            binary: self.opts.binary.clone(),
            replica_cpu: self.opts.replica_cpu,
            server_args,
            tls: security.tls(),
            ..Default::default()
        };
        let cluster = LocalCluster::start(cfg).await.map_err(|e| {
            anyhow::anyhow!("cannot start a local {protocol} cluster of {replicas}: {e:#}")
        })?;
        self.native = cluster.endpoints().iter().map(|e| e.native).collect();
        self.client_tls = cluster.client_tls();
        self.replicas = replicas;
        self.cluster = Some(cluster);
        Ok(())
    }

    /// What an acknowledged write survives on this target, asked of it
    /// through `probe`.
    async fn durability_mode(&self, probe: &mut Conn) -> Option<String> {
        match (&self.spec, probe) {
            // What the replicas say they run: a protocol that persists
            // nothing runs `memory` whatever was asked.
            (DeploySpec::Local { .. } | DeploySpec::Quorumkv { .. }, _) => {
                durability::quorumkv_mode(&self.native, self.client_tls.as_ref()).await
            }
            // etcd fsyncs its WAL before acknowledging; it has no other mode.
            (DeploySpec::Etcd { .. }, _) => Some("fsync".into()),
            (DeploySpec::Redis { .. }, Conn::Redis(c)) => durability::redis_mode(c).await,
            (DeploySpec::Redis { .. }, _) => None,
            (DeploySpec::Zookeeper { endpoints, .. }, _) => {
                zookeeper_mode(endpoints, self.opts.op_timeout).await
            }
        }
    }

    /// The protocol options of this deployment: `--opt`'s, then the variant's.
    fn protocol_options(&self, protocol: ProtocolKind, variant: &Variant) -> Vec<(String, String)> {
        let mut pairs = self.opts.options.clone();
        pairs.extend(variant.options_for(protocol).unwrap_or_default());
        pairs
    }

    /// How quorumkv clients connect to this deployment: `Some` over TLS.
    pub fn client_tls(&self) -> Option<ClientTls> {
        self.client_tls.clone()
    }

    /// The native endpoints of a quorumkv deployment (empty for others).
    pub fn native_endpoints(&self) -> &[SocketAddr] {
        &self.native
    }

    /// A new connection-level client.
    pub async fn connect(&self) -> anyhow::Result<Conn> {
        self.connect_pinned(0).await
    }

    /// Whether logical clients are pinned evenly to servers (client i to
    /// server i mod N, seed 004 §5): quorumkv operations coordinated by a
    /// server, with more than one server to spread them over.
    /// ZooKeeper sessions are spread the same way: a session talks to one
    /// server, which answers its reads.
    pub fn pins_clients(&self) -> bool {
        match &self.spec {
            DeploySpec::Local { .. } | DeploySpec::Quorumkv { .. } => {
                self.coord() == CoordMode::Proxy && self.native.len() > 1
            }
            DeploySpec::Zookeeper { endpoints, .. } => endpoints.len() > 1,
            _ => false,
        }
    }

    /// A new connection-level client whose proxy is server `k mod N`
    /// first (the others only on failover). Direct-mode clients talk to
    /// every server anyway; a ZooKeeper session is with server `k mod N`
    /// only (no failover: the bench measures a healthy ensemble); other
    /// targets ignore `k`.
    pub async fn connect_pinned(&self, k: usize) -> anyhow::Result<Conn> {
        let t = self.opts.op_timeout;
        match &self.spec {
            DeploySpec::Local { .. } | DeploySpec::Quorumkv { .. } => {
                let options = match &self.spec {
                    DeploySpec::Local {
                        protocol, variant, ..
                    }
                    | DeploySpec::Quorumkv {
                        protocol, variant, ..
                    } => self.protocol_options(*protocol, variant),
                    _ => Vec::new(),
                };
                let cfg = ClientConfig {
                    mode: match self.coord() {
                        CoordMode::Direct => ClientMode::Direct,
                        CoordMode::Proxy => ClientMode::Proxy,
                    },
                    op_timeout: t,
                    options,
                    tls: self.client_tls.clone(),
                    credentials: self.credentials.clone(),
                    ..Default::default()
                };
                let c = Client::connect(pinned_order(&self.native, k), cfg)
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot connect to quorumkv at {}: {e}",
                            addrs(&self.native)
                        )
                    })?;
                Ok(Conn::Quorumkv(c))
            }
            DeploySpec::Etcd { endpoints } => Ok(Conn::Etcd(EtcdClient::new(
                endpoints,
                self.opts.op_timeout,
            )?)),
            DeploySpec::Redis { addr } => {
                let client = redis::Client::open(format!("redis://{addr}/"))
                    .map_err(|e| anyhow::anyhow!("bad redis address {addr}: {e}"))?;
                let cfg = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(3)))
                    .set_response_timeout(Some(t));
                let c = client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map_err(|e| anyhow::anyhow!("redis at {addr} is unreachable: {e}"))?;
                Ok(Conn::Redis(c))
            }
            #[cfg(feature = "zookeeper")]
            DeploySpec::Zookeeper { endpoints, read } => {
                let one = pinned_order(endpoints, k);
                Ok(Conn::Zk(ZkClient::connect(&one[..1], *read, t).await?))
            }
            #[cfg(not(feature = "zookeeper"))]
            DeploySpec::Zookeeper { .. } => Err(no_zookeeper()),
        }
    }

    /// What one connection-level client is, for the output ("1 client, 3 TCP").
    /// Where quorumkv operations are coordinated: as asked, except that a
    /// protocol without a client-side coordinator always goes through a server.
    fn coord(&self) -> CoordMode {
        let protocol = match &self.spec {
            DeploySpec::Local { protocol, .. } | DeploySpec::Quorumkv { protocol, .. } => *protocol,
            _ => return self.opts.coord,
        };
        if protocol.has_client_coordinator() {
            self.opts.coord
        } else {
            CoordMode::Proxy
        }
    }

    pub fn conn_description(&self) -> String {
        let mut d = self.transport_description();
        if self.client_tls.is_some() {
            d += "; TLS 1.3 on every connection and replica link";
        }
        if self.credentials.is_some() {
            d += "; every connection logs in (users file, argon2id)";
        }
        d
    }

    /// How a local cluster is secured (`None` for other targets).
    pub fn security(&self) -> Option<Security> {
        match &self.spec {
            DeploySpec::Local { security, .. } => Some(*security),
            _ => None,
        }
    }

    fn transport_description(&self) -> String {
        match &self.spec {
            DeploySpec::Local { .. } | DeploySpec::Quorumkv { .. } => match self.coord() {
                CoordMode::Direct => format!(
                    "{} TCP (one per replica), pipelined, coordinator in the client",
                    self.native.len()
                ),
                CoordMode::Proxy if self.pins_clients() => "1 TCP to one replica, pipelined, \
                    coordinator in that server; logical client i on replica i mod N"
                    .into(),
                CoordMode::Proxy => {
                    "1 TCP to one replica, pipelined, coordinator in that server".into()
                }
            },
            DeploySpec::Etcd { .. } => "1 gRPC/HTTP2 channel, multiplexed".into(),
            DeploySpec::Redis { .. } => "1 TCP, multiplexed".into(),
            DeploySpec::Zookeeper { .. } if self.pins_clients() => "1 ZooKeeper session (1 TCP) \
                per server, pipelined; logical client i on server i mod N"
                .into(),
            DeploySpec::Zookeeper { .. } => "1 ZooKeeper session (1 TCP), pipelined".into(),
        }
    }

    /// Server processes whose CPU time we can read: our children, or a
    /// peer's processes when it runs on this host.
    pub fn pids(&self) -> Vec<u32> {
        match &self.cluster {
            Some(c) => c.pids(),
            None => self.peer_pids.clone(),
        }
    }

    /// Is the target still there? Local: every child alive (by /proc);
    /// remote: a TCP connect to a majority of endpoints (quorumkv) or any (others).
    pub async fn alive(&self) -> bool {
        if self.cluster.is_some() {
            return self
                .pids()
                .iter()
                .all(|p| std::path::Path::new(&format!("/proc/{p}/stat")).exists())
                && self.tcp_reachable(self.native.len() / 2 + 1).await;
        }
        match &self.spec {
            DeploySpec::Quorumkv { .. } => self.tcp_reachable(self.native.len() / 2 + 1).await,
            DeploySpec::Etcd { endpoints } => {
                reachable(endpoints.iter().map(String::as_str), 1).await
            }
            DeploySpec::Redis { addr } => reachable([addr.as_str()], 1).await,
            DeploySpec::Zookeeper { endpoints, .. } => {
                reachable(
                    endpoints.iter().map(String::as_str),
                    endpoints.len() / 2 + 1,
                )
                .await
            }
            DeploySpec::Local { .. } => false,
        }
    }

    /// Sync counters summed over the replicas, where the target exposes them.
    pub async fn sync_counters(&self) -> Option<SyncCounters> {
        match &self.spec {
            DeploySpec::Local { .. } | DeploySpec::Quorumkv { .. } => {
                durability::quorumkv_counters(&self.native, self.client_tls.as_ref()).await
            }
            DeploySpec::Etcd { endpoints } => durability::etcd_counters(endpoints).await,
            DeploySpec::Redis { .. } => None,
            DeploySpec::Zookeeper { endpoints, .. } => {
                durability::zookeeper_counters(endpoints).await
            }
        }
    }

    async fn tcp_reachable(&self, need: usize) -> bool {
        let eps: Vec<String> = self.native.iter().map(|a| a.to_string()).collect();
        reachable(eps.iter().map(String::as_str), need).await
    }

    pub async fn stop(self) {
        if let Some(c) = self.cluster {
            c.stop().await;
        }
        if let Some(dir) = &self.users_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(not(feature = "zookeeper"))]
fn no_zookeeper() -> anyhow::Error {
    anyhow::anyhow!(
        "this quorumkv was built without the ZooKeeper target (cargo feature `zookeeper`)"
    )
}

/// How many servers a ZooKeeper ensemble has (its configuration, else the
/// endpoints given); creates the keys' parent znode on the way.
#[cfg(feature = "zookeeper")]
async fn zookeeper_ensemble(endpoints: &[String], t: Duration) -> anyhow::Result<usize> {
    let c = ZkClient::connect(endpoints, crate::config::ZkRead::Local, t).await?;
    Ok(c.ensemble_size().await.unwrap_or(endpoints.len()))
}

#[cfg(not(feature = "zookeeper"))]
async fn zookeeper_ensemble(_: &[String], _: Duration) -> anyhow::Result<usize> {
    Err(no_zookeeper())
}

/// What a ZooKeeper write survives: one write, and whether the servers'
/// fsync counters moved (`forceSync`), with where their data is.
#[cfg(feature = "zookeeper")]
async fn zookeeper_mode(endpoints: &[String], t: Duration) -> Option<String> {
    let c = ZkClient::connect(endpoints, crate::config::ZkRead::Local, t)
        .await
        .ok()?;
    let before = durability::zookeeper_counters(endpoints).await?;
    c.put(b"~", b"durability probe").await.ok()?;
    c.delete(b"~").await.ok()?;
    let after = durability::zookeeper_counters(endpoints).await?;
    let tmpfs = durability::zookeeper_on_tmpfs(endpoints).await;
    Some(durability::zookeeper_mode_name(
        after.syncs > before.syncs,
        tmpfs,
    ))
}

#[cfg(not(feature = "zookeeper"))]
async fn zookeeper_mode(_: &[String], _: Duration) -> Option<String> {
    None
}

/// `endpoints` rotated so that entry `k mod len` comes first.
pub fn pinned_order<T: Clone>(endpoints: &[T], k: usize) -> Vec<T> {
    let mut v = endpoints.to_vec();
    if !v.is_empty() {
        let n = v.len();
        v.rotate_left(k % n);
    }
    v
}

fn addrs(a: &[SocketAddr]) -> String {
    a.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

async fn reachable<'a>(eps: impl IntoIterator<Item = &'a str>, need: usize) -> bool {
    let mut ok = 0;
    for ep in eps {
        let c =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(ep)).await;
        if matches!(c, Ok(Ok(_))) {
            ok += 1;
        }
    }
    ok >= need
}

/// The processes listening on the ports of `endpoints` that are on this host
/// (Linux: /proc/net/tcp{,6} for the socket inodes, /proc/PID/fd for owners).
/// Empty when anything is unreadable or an endpoint is remote.
pub fn local_listener_pids(endpoints: &[String]) -> Vec<u32> {
    let mut ports = Vec::new();
    for ep in endpoints {
        let Some((host, port)) = ep.rsplit_once(':') else {
            return Vec::new();
        };
        if !matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "0.0.0.0") {
            return Vec::new();
        }
        let Ok(port) = port.parse::<u16>() else {
            return Vec::new();
        };
        ports.push(port);
    }
    let mut inodes = std::collections::BTreeSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        inodes.extend(listening_inodes(&text, &ports));
    }
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut pids = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let owns = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| {
                    let l = l.to_string_lossy().into_owned();
                    l.strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .parse::<u64>()
                        .ok()
                })
                .is_some_and(|ino| inodes.contains(&ino))
        });
        if owns && pid != std::process::id() {
            pids.push(pid);
        }
    }
    pids
}

/// Inodes of LISTEN sockets on `ports` in a /proc/net/tcp table.
pub fn listening_inodes(table: &str, ports: &[u16]) -> Vec<u64> {
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
            continue;
        };
        let Some(port) = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        if *state == "0A" && ports.contains(&port) {
            if let Ok(i) = inode.parse() {
                out.push(i);
            }
        }
    }
    out
}
