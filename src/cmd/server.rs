//! `quorumkv server`: one replica in the foreground.

use clap::Args as ClapArgs;
use quorumkv_core::protocol::options::parse_pair;
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::auth::UsersHandle;
use quorumkv_node::config::{parse_bytes, parse_duration, ClusterFile, Limits, ReplicaAddr};
use quorumkv_node::heartbeat::HeartbeatConfig;
use quorumkv_node::server::{self, Listeners, ServerOptions};
use quorumkv_node::storage::{Durability, StorageEngine};
use quorumkv_node::tls::TlsSettings;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Run one replica (from a cluster file or flags)
///
/// Give the whole cluster either as a TOML cluster file (`--config`) or with
/// flags (`--listen`, `--resp`, one `--peer` per other replica).
///
/// Cluster file:
///   protocol = "abd"
///   [[replica]]
///   id = 1
///   addr = "127.0.0.1:7001"    # native port (peers and quorumkv clients)
///   resp = "127.0.0.1:7101"    # RESP port for redis-cli (optional)
///   zk = "127.0.0.1:7201"      # ZooKeeper client port (optional; zab only)
///   [options]                  # the protocol's options (optional; --opt overrides)
///   fast-read = true
///   [limits]                   # client connections (optional; flags override)
///   max_buffer_bytes = "256MiB"
///   max_queued_bytes = "64MiB"
///   read_timeout = "10s"
///   idle_timeout = "60s"         # "0" = never
///   [tls]                      # TLS 1.3 on the native and RESP ports and peer links (optional)
///   dir = "tls"                # ca.pem, replica-N.pem, replica-N.key (`quorumkv cert`),
///                              # relative to the cluster file
///   client_cert_auth = false   # true: every client must present a certificate
///
/// TLS: peers verify each other's certificates (mutual TLS): replica N's
/// must name `replica-N.quorumkv`. `kill -HUP` re-reads the files (new
/// connections use them). The metrics port stays plain HTTP.
///
/// On its own host (a container): listen on every interface and advertise
/// the name peers reach it at, in the cluster file (`addr = "0.0.0.0:7001"`,
/// `advertise = "qkv1:7001"`) or with --listen 0.0.0.0:7001 --advertise
/// qkv1:7001 --peer 2=qkv2:7001 ... Peers resolve names again at every redial.
/// Every flag below can also come from the environment variable it names
/// (the container image is configured so).
///
/// Stops gracefully on SIGTERM or Ctrl-C (a drain): stops accepting client
/// connections, /readyz answers 503 `draining`, the operations in flight
/// are answered, then the links to other replicas close and storage is
/// flushed; exit 0. Within --drain-timeout; a second signal cuts it short.
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment, after_help = super::protocols_help())]
pub struct Args {
    /// This replica's id (1-63), as listed in the cluster.
    #[arg(long, env = "QUORUMKV_ID", required_unless_present = "pod_index")]
    id: Option<u32>,
    /// A Kubernetes StatefulSet pod's index (0, 1, ...): the replica id is
    /// one more (instead of --id).
    #[arg(long, env = "QUORUMKV_POD_INDEX", conflicts_with = "id")]
    pod_index: Option<u32>,
    /// Cluster file (TOML). Without it, use --listen/--resp/--peer.
    #[arg(long, short = 'c', env = "QUORUMKV_CONFIG", value_name = "FILE", conflicts_with_all = ["listen", "peer", "advertise", "cluster_id"])]
    config: Option<PathBuf>,
    /// The cluster's name, stored in the data directory (without --config;
    /// a cluster file's `cluster_id`). Derived from the replicas' ids and
    /// addresses when absent, so give it before a replica moves (`quorumkv
    /// member update` names the id in use).
    #[arg(long, env = "QUORUMKV_CLUSTER_ID", value_name = "NAME")]
    cluster_id: Option<String>,
    /// Replication protocol (without --config).
    #[arg(long, env = "QUORUMKV_PROTOCOL", default_value_t = ProtocolKind::default_protocol())]
    protocol: ProtocolKind,
    /// A protocol option, over the cluster file's `[options]` (repeat; the
    /// options of each protocol are listed below).
    #[arg(long = "opt", value_name = "KEY=VALUE", value_parser = parse_pair)]
    opt: Vec<(String, String)>,
    /// Native address of this replica (without --config).
    #[arg(
        long,
        env = "QUORUMKV_LISTEN",
        value_name = "ADDR",
        required_unless_present = "config"
    )]
    listen: Option<SocketAddr>,
    /// Where peers and clients reach this replica, HOST:PORT (a name or an
    /// address), when not --listen (without --config).
    #[arg(long, env = "QUORUMKV_ADVERTISE", value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// RESP address of this replica (optional).
    #[arg(long, env = "QUORUMKV_RESP", value_name = "ADDR")]
    resp: Option<SocketAddr>,
    /// Serve ZooKeeper's client protocol (zkCli.sh, kazoo) on this port
    /// (PORT on the --listen host, or HOST:PORT); --protocol zab only. In a
    /// cluster file: `zk = "ADDR"` in the replica's entry (the flag
    /// overrides it)
    #[arg(long, env = "QUORUMKV_ZK_PORT", value_name = "[HOST:]PORT")]
    zk_port: Option<String>,
    /// Packets on the ZooKeeper port longer than this close the connection
    /// (ZooKeeper's jute.maxbuffer) [default: 1048575]
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    zk_max_buffer: Option<usize>,
    /// Serve Prometheus metrics at http://ADDR/metrics (without --config; in a
    /// cluster file use `metrics = "ADDR"` in the replica's entry).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Another replica, as ID=HOST:PORT (repeat for each, or a comma list;
    /// without --config). The host may be a name.
    #[arg(long, env = "QUORUMKV_PEERS", value_name = "ID=HOST:PORT", value_delimiter = ',', value_parser = parse_peer)]
    peer: Vec<(u32, String)>,
    /// How long this server's coordinator waits for a quorum before failing an operation.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    op_timeout: Duration,
    /// This replica restarted and lost its state (memory durability): it
    /// catches up from its peers before it serves (e.g. answers no query
    /// until it has merged the data of f+1 live peers), so that no
    /// acknowledged write can be missing. Use it for every restart of a
    /// replica that was part of a running cluster.
    #[arg(long)]
    recover: bool,
    /// Bytes all client connections of one port may hold together in read
    /// buffers and queued replies; a connection that would exceed it gets
    /// an error and is closed [default: 256MiB, per port]
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    max_buffer_bytes: Option<usize>,
    /// Bytes of replies queued for one client connection that is not
    /// reading them before it is closed [default: 64MiB]
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    max_queued_bytes: Option<usize>,
    /// A client's request (and a new connection's first one) must arrive
    /// whole within this long; 0 = no limit [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    read_timeout: Option<Duration>,
    /// Close client connections idle this long; 0 = never. Never applies
    /// to links between replicas [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Links to other replicas and to client-side coordinators: send a
    /// heartbeat after this long without other traffic
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    /// Declare such a link down (and close it) when nothing arrived on it
    /// for this long (noticed within one to two of it); at least twice the
    /// interval. A closed connection (a killed replica) is noticed at once
    /// whatever this is [default: 1s; 10s for the ring, whose model takes a
    /// suspected replica for a crashed one: a pause shorter than this is
    /// slowness, not a crash]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    heartbeat_timeout: Option<Duration>,
    /// Add this round trip to every client connection (replies and pushed
    /// events leave this much later), to reproduce a distant client on one
    /// machine (seed 001's client RTT). Heartbeat timeouts are not adjusted:
    /// keep them well above the RTTs you add
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    rtt_client: Duration,
    /// Add this round trip between replicas: this replica delays what it
    /// sends to a peer by half of it (give every replica the same value)
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    rtt_peer: Duration,
    /// Uniform random jitter on top of the added round trips, per frame,
    /// order kept (seeded by replica and connection, so runs repeat)
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    rtt_jitter: Duration,
    /// Exit when standard input, a pipe from the parent, closes (`quorumkv
    /// cluster` uses it so that replicas never outlive it, even after a
    /// SIGKILL). Says so on stderr when it exits; ignored, with a warning,
    /// when standard input is not a pipe.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// What an acknowledgement promises: `fsync` (synced to disk, group
    /// commit), `buffered` (written to the OS: survives kill -9, not a power
    /// cut) or `memory` (nothing on disk; restart with --recover). A
    /// protocol that keeps nothing on disk refuses buffered and fsync
    /// [default: the cluster file's `durability`, else fsync, or memory
    /// for such a protocol]
    #[arg(long, env = "QUORUMKV_DURABILITY", value_enum, value_name = "MODE")]
    durability: Option<Durability>,
    /// Which engine keeps the records in durable modes: `log` (an append
    /// log in zero-filled segments, the state in memory, checkpointed) or
    /// `fjall` (an LSM tree). A data directory written by one is refused by
    /// the other [default: the cluster file's `storage_engine`, else the
    /// engine the data directory holds, else log]
    #[arg(
        long,
        env = "QUORUMKV_STORAGE_ENGINE",
        value_enum,
        value_name = "ENGINE"
    )]
    storage_engine: Option<StorageEngine>,
    /// This replica's data directory (locked while the server runs)
    /// [default: the cluster file's `data_dir`/replica-ID, else
    /// ./quorumkv-data/replica-ID]
    #[arg(long, env = "QUORUMKV_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// TLS: the cluster CA certificate (PEM) that peers' and clients'
    /// certificates must chain to. With --tls-cert and --tls-key, turns TLS
    /// on (over the cluster file's [tls])
    #[arg(long, env = "QUORUMKV_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// TLS: this replica's certificate chain (PEM; `quorumkv cert replica`
    /// makes one naming replica-ID.quorumkv)
    #[arg(long, env = "QUORUMKV_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// TLS: this replica's private key (PEM)
    #[arg(long, env = "QUORUMKV_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// TLS: every client must present a certificate signed by the CA (as
    /// etcd's --client-cert-auth); without it client certificates are optional
    #[arg(long, env = "QUORUMKV_CLIENT_CERT_AUTH")]
    client_cert_auth: bool,
    /// Bound of the graceful shutdown on SIGTERM or Ctrl-C: the client
    /// connections get three quarters of it to have their operations in
    /// flight answered, closing the links and flushing storage the rest
    /// (a second signal cuts it short). Keep Kubernetes'
    /// terminationGracePeriodSeconds above it plus the preStop pause
    #[arg(long, env = "QUORUMKV_DRAIN_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Worker threads (1 = a single-threaded runtime, best when replicas share a small machine).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// How log lines are written: `text`, or `json` (one object per line:
    /// ts, level, who, target, message and the event's fields). What is
    /// logged is chosen by `$QUORUMKV_LOG` (e.g. `debug`, `info,quorumkv_node=debug`)
    #[arg(long, env = "QUORUMKV_LOG_FORMAT", value_enum, default_value_t)]
    log_format: super::json_log::LogFormat,
    /// A file with the cluster secret (at least 16 bytes; `quorumkv secret`
    /// writes one). Replicas prove it to each other on every link, so no
    /// stray connection can pose as a replica. Every replica needs the same
    /// [default: the cluster file's `secret_file`]
    #[arg(long, env = "QUORUMKV_CLUSTER_SECRET_FILE", value_name = "FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// Start even when a port listens beyond loopback without a cluster
    /// secret (or TLS). Without it such a replica refuses to start: anyone
    /// who reaches the port could pose as a replica (as Redis' protected mode)
    #[arg(long, env = "QUORUMKV_INSECURE")]
    insecure: bool,
    /// Users file (TOML, made with `quorumkv user add`): RESP clients must
    /// then authenticate (AUTH user password) and may run only what their
    /// role (read, readwrite, admin) allows. Read again on SIGHUP (an
    /// invalid file is logged and the users before kept)
    /// [default: the cluster file's `users`, relative to it]
    #[arg(long, env = "QUORUMKV_USERS", value_name = "FILE")]
    users: Option<PathBuf>,
}

fn never_if_zero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

fn parse_peer(s: &str) -> Result<(u32, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("expected ID=HOST:PORT, got '{s}'"))?;
    let id = id
        .parse()
        .map_err(|_| format!("invalid replica id '{id}'"))?;
    quorumkv_node::config::check_host_port(addr)
        .map_err(|e| format!("invalid address '{addr}': {e}"))?;
    Ok((id, addr.to_string()))
}

/// A peer known only by where it is dialled: its listen address is its own
/// business (the port is kept, the host unknown).
fn peer_entry(id: u32, dial: &str) -> ReplicaAddr {
    match dial.parse::<SocketAddr>() {
        Ok(addr) => ReplicaAddr::at(id, addr),
        Err(_) => {
            let port = dial
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(0);
            ReplicaAddr {
                advertise: Some(dial.to_string()),
                ..ReplicaAddr::at(id, SocketAddr::from(([0, 0, 0, 0], port)))
            }
        }
    }
}

/// The replica id: --id, or --pod-index + 1.
fn replica_id(a: &Args) -> u32 {
    a.id.or(a.pod_index.map(|i| i + 1)).unwrap_or(0)
}

fn cluster_from_args(a: &Args) -> anyhow::Result<ClusterFile> {
    let mut file = cluster_without_zk_flag(a)?;
    if let Some(zk) = &a.zk_port {
        let id = replica_id(a);
        let me = (file.replicas.iter_mut().find(|r| r.id == id))
            .ok_or_else(|| anyhow::anyhow!("replica id {id} is not in the cluster"))?;
        me.zk = Some(zk_addr(zk, me.addr.ip())?);
        file.validate()?;
    }
    Ok(file)
}

/// `--zk-port`: a port on the host the replica listens on, or an address.
fn zk_addr(s: &str, host: std::net::IpAddr) -> anyhow::Result<SocketAddr> {
    match s.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::new(host, port)),
        Err(_) => s
            .parse()
            .map_err(|_| anyhow::anyhow!("--zk-port: expected PORT or HOST:PORT, got '{s}'")),
    }
}

fn cluster_without_zk_flag(a: &Args) -> anyhow::Result<ClusterFile> {
    if let Some(path) = &a.config {
        return ClusterFile::load(path);
    }
    let listen = a
        .listen
        .ok_or_else(|| anyhow::anyhow!("--listen is required without --config"))?;
    let mut replicas = vec![ReplicaAddr {
        advertise: a.advertise.clone(),
        resp: a.resp,
        metrics: a.metrics,
        ..ReplicaAddr::at(replica_id(a), listen)
    }];
    replicas.extend(a.peer.iter().map(|(id, addr)| peer_entry(*id, addr)));
    let mut file = ClusterFile::new(a.protocol, replicas);
    file.cluster_id = a.cluster_id.clone();
    file.validate()?;
    Ok(file)
}

/// This replica's TLS files: the cluster file's [tls], each overridden by
/// its flag; `None` when neither turns TLS on.
fn tls_settings(a: &Args, cluster: &ClusterFile, id: u32) -> anyhow::Result<Option<TlsSettings>> {
    let from_file = cluster.tls.as_ref().map(|t| t.replica(id)).transpose()?;
    let flags = [&a.tls_ca, &a.tls_cert, &a.tls_key];
    if from_file.is_none() && flags.iter().all(|f| f.is_none()) {
        if a.client_cert_auth {
            anyhow::bail!("--client-cert-auth needs TLS: give --tls-ca, --tls-cert and --tls-key (or [tls] in the cluster file)");
        }
        return Ok(None);
    }
    let pick = |flag: &Option<PathBuf>, file: Option<&PathBuf>, name: &str| {
        flag.clone().or(file.cloned()).ok_or_else(|| {
            anyhow::anyhow!("TLS needs --tls-ca, --tls-cert and --tls-key (or [tls] in the cluster file): {name} is missing")
        })
    };
    let f = from_file.as_ref();
    Ok(Some(TlsSettings {
        ca: pick(&a.tls_ca, f.map(|s| &s.ca), "--tls-ca")?,
        cert: pick(&a.tls_cert, f.map(|s| &s.cert), "--tls-cert")?,
        key: pick(&a.tls_key, f.map(|s| &s.key), "--tls-key")?,
        client_cert_auth: a.client_cert_auth || f.is_some_and(|s| s.client_cert_auth),
    }))
}

pub fn run(a: Args) -> ExitCode {
    let id = replica_id(&a);
    super::init_logging_as(a.log_format, "info", Some(format!("replica {id}")));
    let opts = match server_options(&a, id) {
        Ok(opts) => opts,
        Err(e) => return super::fail(e),
    };
    let rt = if a.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(a.threads)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => return super::fail(format!("cannot start the runtime: {e}")),
    };
    let watch_stdin = a.exit_on_stdin_eof;
    let code = rt.block_on(async move {
        if let Some(users) = &opts.users {
            if let Err(e) = users.reload_on_sighup() {
                return super::fail(format!("cannot handle SIGHUP: {e}"));
            }
        }
        let listeners = match Listeners::bind(&opts).await {
            Ok(l) => l,
            Err(e) => return super::fail(format!("{e:#}")),
        };
        let (first, second) = stop_signals(watch_stdin);
        match server::run_draining(opts, listeners, first, second).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => super::fail(format!("{e:#}")),
        }
    });
    // The stdin watch blocks a thread in read(2): dropping the runtime would
    // wait on it for ever, so a replica that stopped on an error (or a
    // signal) would never exit while its parent keeps the pipe open. Nothing
    // else is left to wait for: the drain has flushed storage (its own
    // thread) or given up on it within --drain-timeout.
    rt.shutdown_background();
    code
}

/// Replica `id`'s options from its flags and the cluster file; `Err` is
/// the message to exit with.
fn server_options(a: &Args, id: u32) -> Result<ServerOptions, String> {
    let cluster = cluster_from_args(a).map_err(|e| format!("{e:#}"))?;
    if cluster.replica(id).is_none() {
        return Err(format!(
            "replica id {id} is not in the cluster (ids: {:?})",
            cluster.members()
        ));
    }
    let tls = tls_settings(a, &cluster, id).map_err(|e| format!("{e:#}"))?;
    let mut opts = ServerOptions::new(id, cluster);
    if let Some(path) = &a.config {
        opts = opts.with_cluster_file(path.clone());
    }
    opts.tls = tls;
    opts.op_timeout = a.op_timeout;
    opts.protocol_options = a.opt.clone();
    opts.recover = a.recover;
    if opts.cluster.durability.is_none() {
        // Unless asked otherwise, as durable as the protocol can be.
        opts.durability = match opts.cluster.protocol.info().persists_state {
            true => Durability::Fsync,
            false => Durability::Memory,
        };
    }
    opts.durability = a.durability.unwrap_or(opts.durability);
    opts.storage_engine = a.storage_engine.or(opts.storage_engine);
    opts.check_supported().map_err(|e| format!("{e:#}"))?;
    opts.data_dir = a
        .data_dir
        .clone()
        .or(opts.data_dir.take())
        .or_else(|| Some(PathBuf::from("quorumkv-data").join(format!("replica-{id}"))));
    opts.apply_limits(&Limits {
        max_buffer_bytes: a.max_buffer_bytes,
        max_queued_bytes: a.max_queued_bytes,
        read_timeout: a.read_timeout.map(never_if_zero),
        idle_timeout: a.idle_timeout.map(never_if_zero),
    });
    opts.heartbeat = HeartbeatConfig {
        interval: a.heartbeat_interval,
        timeout: a.heartbeat_timeout.unwrap_or(opts.heartbeat.timeout),
    };
    opts.heartbeat.validate()?;
    set_rtt(a, &mut opts)?;
    let secret_file = a
        .cluster_secret_file
        .clone()
        .or(opts.cluster.secret_file.clone());
    if let Some(path) = secret_file {
        let secret = quorumkv_node::peer_auth::ClusterSecret::load(&path);
        opts.secret = Some(secret.map_err(|e| format!("{e:#}"))?);
    }
    opts.insecure = a.insecure;
    opts.check_exposure().map_err(|e| format!("{e:#}"))?;
    opts.users = load_users(a, &opts.cluster).map_err(|e| format!("{e:#}"))?;
    opts.zk_max_buffer = a.zk_max_buffer.unwrap_or(opts.zk_max_buffer);
    if a.drain_timeout > Duration::from_secs(3600) {
        return Err(format!(
            "--drain-timeout {:?} is more than the hour allowed",
            a.drain_timeout
        ));
    }
    opts.drain_timeout = a.drain_timeout;
    Ok(opts)
}

/// The simulated round trips (`--rtt-*`), each at most a minute.
fn set_rtt(a: &Args, opts: &mut ServerOptions) -> Result<(), String> {
    // Seed 001's grid ends at 250 ms; a minute is far past any WAN, and
    // keeps `now + delay` far from overflowing.
    const MAX_RTT: Duration = Duration::from_secs(60);
    for (flag, d) in [
        ("--rtt-client", a.rtt_client),
        ("--rtt-peer", a.rtt_peer),
        ("--rtt-jitter", a.rtt_jitter),
    ] {
        if d > MAX_RTT {
            return Err(format!("{flag} {d:?} is more than the 60s allowed"));
        }
    }
    opts.rtt_client = a.rtt_client;
    opts.rtt_peer = a.rtt_peer;
    opts.rtt_jitter = a.rtt_jitter;
    Ok(())
}

/// The users file: --users, else the cluster file's `users` (relative to
/// the cluster file); `None` when neither is given.
fn load_users(a: &Args, cluster: &ClusterFile) -> anyhow::Result<Option<UsersHandle>> {
    let from_cluster = || {
        let dir = (a.config.as_deref())
            .and_then(std::path::Path::parent)
            .unwrap_or(std::path::Path::new(""));
        cluster.users.as_ref().map(|u| dir.join(u))
    };
    let Some(path) = a.users.clone().or_else(from_cluster) else {
        return Ok(None);
    };
    let users = UsersHandle::load(&path)?;
    match users.current().len() {
        0 => tracing::warn!(
            "users file {} lists no users: no client can authenticate",
            path.display()
        ),
        n => tracing::info!(
            "users file {}: {n} users; clients must authenticate",
            path.display()
        ),
    }
    Ok(Some(users))
}

/// Resolves on Ctrl-C, SIGTERM, or (when asked) EOF on stdin.
pub async fn shutdown_signal(watch_stdin: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = stdin_closed(watch_stdin) => {}
    }
}

/// Two futures: the first resolves on the first Ctrl-C, SIGTERM or (when
/// asked) EOF on stdin, the second on the next one (a second signal cuts
/// a drain short).
fn stop_signals(
    watch_stdin: bool,
) -> (
    impl std::future::Future<Output = ()> + Send,
    impl std::future::Future<Output = ()> + Send,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (count, seen) = tokio::sync::watch::channel(0u32);
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::spawn(async move {
        let mut stdin = std::pin::pin!(stdin_closed(watch_stdin));
        let mut stdin_open = true;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = &mut stdin, if stdin_open => stdin_open = false,
            }
            count.send_modify(|n| *n += 1);
        }
    });
    let reached = |n: u32| {
        let mut seen = seen.clone();
        async move {
            let _ = seen.wait_for(|c| *c >= n).await;
        }
    };
    (reached(1), reached(2))
}

/// Resolves when standard input, a pipe from the parent, closes (with
/// `watch_stdin`); never otherwise.
async fn stdin_closed(watch_stdin: bool) {
    if watch_stdin && stdin_is_pipe() {
        let why = wait_stdin_closed().await;
        eprintln!(
            "quorumkv: {why}: exiting because of --exit-on-stdin-eof (`quorumkv cluster` starts \
             replicas with it so that they never outlive it; start a replica without it to keep it running)"
        );
    } else {
        if watch_stdin {
            eprintln!(
                "quorumkv: ignoring --exit-on-stdin-eof: standard input is not a pipe (the flag is \
                 for replicas that `quorumkv cluster` starts); stop this replica with Ctrl-C or SIGTERM"
            );
        }
        std::future::pending::<()>().await;
    }
}

/// Only a pipe from a parent process says anything when it closes; a
/// terminal, /dev/null (`nohup`, `&` in scripts) or a file would make a
/// replica started by hand, e.g. a command line copied from `ps`, exit at once.
fn stdin_is_pipe() -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata("/dev/stdin").is_ok_and(|m| m.file_type().is_fifo())
}

/// Read standard input until it closes; returns why it ended.
async fn wait_stdin_closed() -> String {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) => return "standard input closed (the parent process is gone)".into(),
            Ok(_) => {}
            Err(e) => return format!("standard input failed: {e}"),
        }
    }
}

#[cfg(test)]
mod env_tests {
    use super::*;
    use clap::Command;

    /// Local clusters clear exactly the variables these flags read, but
    /// the log format, which their replicas share with the cluster's own
    /// lines (as `QUORUMKV_LOG`).
    #[test]
    fn every_flag_read_from_the_environment_is_in_server_env() {
        let cmd = Args::augment_args(Command::new("server"));
        let mut read: Vec<String> = (cmd.get_arguments())
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .filter(|e| e != "QUORUMKV_LOG_FORMAT")
            .collect();
        read.sort();
        let mut listed: Vec<String> = (quorumkv_node::config::SERVER_ENV.iter())
            .map(|s| s.to_string())
            .collect();
        listed.sort();
        assert_eq!(read, listed);
    }

    fn args(line: &[&str]) -> Args {
        use clap::FromArgMatches;
        let cmd = Args::augment_args(Command::new("server"));
        let m = cmd.try_get_matches_from(line).unwrap();
        Args::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn a_given_cluster_id_survives_a_peer_moving() {
        let base = ["server", "--id", "1", "--listen", "127.0.0.1:7001"];
        let with = |peer: &str, id: Option<&str>| {
            let mut line = base.to_vec();
            line.extend(["--peer", peer]);
            line.extend(id.map(|i| ["--cluster-id", i]).into_iter().flatten());
            cluster_from_args(&args(&line)).unwrap().id()
        };
        let derived = with("2=127.0.0.1:7002", None);
        assert_ne!(with("2=127.0.0.1:7302", None), derived);
        let given = with("2=127.0.0.1:7302", Some(&derived));
        assert_eq!(given, derived);
    }

    #[test]
    fn a_peer_known_by_name_is_dialled_by_name() {
        let p = peer_entry(2, "qkv2:7001");
        assert_eq!(p.dial(), "qkv2:7001");
        assert_eq!(p.addr.port(), 7001);
        assert_eq!(peer_entry(3, "10.0.0.3:7001").dial(), "10.0.0.3:7001");
        assert!(parse_peer("2=qkv2").is_err());
        assert_eq!(parse_peer("2=qkv2:7001").unwrap(), (2, "qkv2:7001".into()));
    }
}
