//! What a replica is started with: [`ServerOptions`] and the defaults of
//! its client connection limits. Shared by every port's server.

use crate::budget::Budget;
use crate::codec::DEFAULT_MAX_FRAME;
use crate::config::{ClusterFile, Limits};
use crate::heartbeat::HeartbeatConfig;
use crate::net::{ConnLimits, LinkDelay, ReadTimeouts, DEFAULT_MAX_QUEUED_BYTES};
use crate::storage::{DataDir, Durability, StorageEngine};
use quorumkv_core::NodeId;
use std::path::PathBuf;
use std::time::Duration;

/// Everything a replica needs to start.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub id: NodeId,
    pub cluster: ClusterFile,
    /// How long the server's own (proxy) coordinator waits for a quorum.
    pub op_timeout: Duration,
    /// The protocol's options from `--opt key=value`, applied over the
    /// cluster file's `[options]`.
    pub protocol_options: Vec<(String, String)>,
    pub max_frame: usize,
    /// Most client connections served at once per port.
    pub max_connections: usize,
    /// This replica restarted without its state: catch up from peers
    /// before answering queries (seed 002's recovery mode `r`).
    pub recover: bool,
    /// Bytes all client connections of one port may hold together in read
    /// buffers and queued replies (each port has its own).
    pub buffer_budget: usize,
    /// Most bytes of replies queued for one client connection.
    pub max_queued_bytes: usize,
    /// Client connections: a request must arrive whole within this long.
    pub read_timeout: Option<Duration>,
    /// Client connections: closed after this long without a request.
    pub idle_timeout: Option<Duration>,
    /// Links to replicas and client-side coordinators: heartbeat interval
    /// and the silence after which a link is declared down.
    pub heartbeat: HeartbeatConfig,
    /// What an acknowledgement promises (`memory` keeps nothing on disk).
    pub durability: Durability,
    /// Where this replica's data lives (durable modes).
    pub data_dir: Option<PathBuf>,
    /// Which engine keeps it (durable modes); `None`: the one the data
    /// directory holds, else the default.
    pub storage_engine: Option<StorageEngine>,
    /// Round trip added to client connections: this server delays every
    /// frame it sends to a client by it (seed 001's client RTT).
    pub rtt_client: Duration,
    /// Round trip added between replicas: each end delays what it sends by
    /// half of it (seed 001's server RTT).
    pub rtt_peer: Duration,
    /// Uniform jitter added on top of each of the two, per frame (halved on
    /// replica links, like the RTT).
    pub rtt_jitter: Duration,
    /// TLS on the native and RESP ports and on links to peers (`None`:
    /// plain TCP).
    pub tls: Option<crate::tls::TlsSettings>,
    /// The secret replicas prove to each other on every link (`peer_auth`);
    /// `None`: links are not authenticated (loopback clusters, `--insecure`).
    pub secret: Option<crate::peer_auth::ClusterSecret>,
    /// Start even when a port listens beyond loopback with neither TLS nor
    /// a cluster secret (Redis' protected mode, turned off).
    pub insecure: bool,
    /// Users from the users file: with them, clients must authenticate
    /// (RESP `AUTH`); without, every client may do everything.
    pub users: Option<crate::auth::UsersHandle>,
    /// The ZooKeeper port's `jute.maxbuffer`: a longer packet closes the
    /// connection.
    pub zk_max_buffer: usize,
    /// A graceful shutdown's bound: client connections get three quarters
    /// of it to finish what they sent, the links and storage the rest.
    pub drain_timeout: Duration,
    /// Where each replica is dialled, as the cluster file said at start and
    /// `quorumkv member update` changed since ([`Self::with_cluster_file`]
    /// makes the updates rewrite that file).
    pub book: std::sync::Arc<crate::address_book::AddressBook>,
}

/// [`ServerOptions::drain_timeout`] unless set (`quorumkv server --drain-timeout`).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Defaults of the client connection limits (`quorumkv server --help`).
pub const DEFAULT_BUFFER_BUDGET: usize = 256 * 1024 * 1024;
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl ServerOptions {
    /// Defaults, then the cluster file's `[limits]` (if valid).
    pub fn new(id: NodeId, cluster: ClusterFile) -> Self {
        let limits = cluster.limits.as_ref().and_then(|l| l.parse().ok());
        let mut opts = ServerOptions {
            id,
            op_timeout: Duration::from_secs(2),
            protocol_options: Vec::new(),
            max_frame: DEFAULT_MAX_FRAME,
            max_connections: 4096,
            recover: false,
            buffer_budget: DEFAULT_BUFFER_BUDGET,
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
            read_timeout: Some(DEFAULT_READ_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            heartbeat: HeartbeatConfig::for_links(cluster.protocol.info().link_model),
            durability: cluster.durability.unwrap_or_default(),
            data_dir: (cluster.data_dir.as_ref()).map(|d| d.join(format!("replica-{id}"))),
            storage_engine: cluster.storage_engine,
            rtt_client: Duration::ZERO,
            rtt_peer: Duration::ZERO,
            rtt_jitter: Duration::ZERO,
            tls: None,
            secret: None,
            insecure: false,
            book: std::sync::Arc::new(crate::address_book::AddressBook::new(&cluster, None)),
            cluster,
            users: None,
            zk_max_buffer: crate::zkwire::DEFAULT_MAX_BUFFER,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        };
        if let Some(l) = limits {
            opts.apply_limits(&l);
        }
        opts
    }

    /// Record address updates in `path`, the cluster file this replica
    /// was started from (the book is built afresh from `self.cluster`).
    pub fn with_cluster_file(mut self, path: PathBuf) -> Self {
        let book = crate::address_book::AddressBook::new(&self.cluster, Some(path));
        self.book = std::sync::Arc::new(book);
        self
    }

    /// This replica's data directory and whose data it holds (durable
    /// modes with a directory; `None` otherwise).
    pub fn data(&self) -> Option<DataDir> {
        let path = self
            .data_dir
            .clone()
            .filter(|_| self.durability.keeps_data())?;
        let engine = (self.storage_engine)
            .or_else(|| crate::storage::dir::engine_in(&path))
            .unwrap_or_default();
        Some(DataDir {
            path,
            identity: crate::storage::dir::Identity {
                cluster_id: self.cluster.id(),
                replica: self.id,
                protocol: self.cluster.protocol.to_string(),
            },
            engine,
        })
    }

    /// Refuse to serve beyond loopback unprotected: with any port on a
    /// non-loopback address, a cluster secret or TLS (whose certificates
    /// bind replica ids) is required unless `insecure` (as Redis' protected
    /// mode).
    pub fn check_exposure(&self) -> anyhow::Result<()> {
        let Some(me) = self.cluster.replica(self.id) else {
            return Ok(());
        };
        let exposed = std::iter::once(me.addr)
            .chain(me.resp)
            .chain(me.zk)
            .chain(me.metrics)
            .find(|a| !a.ip().is_loopback());
        match exposed {
            Some(addr) if self.secret.is_none() && self.tls.is_none() && !self.insecure => {
                anyhow::bail!(
                    "refusing to listen on {addr} (beyond loopback) with no cluster secret: any \
                 process that reaches it could pose as a replica. Give the cluster a secret \
                 (`quorumkv secret --out FILE`, then `secret_file = \"FILE\"` in the cluster \
                 file or --cluster-secret-file FILE on every replica), or TLS (`quorumkv \
                 cert`, then [tls] in the cluster file or --tls-ca/--tls-cert/--tls-key), or \
                 start with --insecure on a network you trust"
                )
            }
            _ => Ok(()),
        }
    }

    /// Refuse a setting this replica's protocol would not honour, naming
    /// what it supports (no option is silently ignored): checked before
    /// anything starts.
    pub fn check_supported(&self) -> anyhow::Result<()> {
        let info = self.cluster.protocol.info();
        check_durability(info.name, info.persists_state, self.durability)?;
        info.check_options(&self.option_pairs())
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The protocol's options in force: the cluster file's, then `--opt`'s.
    pub fn option_pairs(&self) -> Vec<(String, String)> {
        let mut pairs = self.cluster.option_pairs();
        pairs.extend(self.protocol_options.iter().cloned());
        pairs
    }

    /// The delay of the client connection `conn` (its jitter seeded by
    /// this replica and the connection, so runs repeat).
    pub fn client_delay(&self, conn: u64) -> LinkDelay {
        LinkDelay {
            delay: self.rtt_client,
            jitter: self.rtt_jitter,
            seed: (u64::from(self.id) << 48) ^ conn,
        }
    }

    /// The delay of this replica's side of its link to `peer`.
    pub fn peer_delay(&self, peer: NodeId) -> LinkDelay {
        LinkDelay {
            delay: self.rtt_peer / 2,
            jitter: self.rtt_jitter / 2,
            seed: (u64::from(self.id) << 32) ^ u64::from(peer) ^ (1 << 63),
        }
    }

    /// Take the limits that `l` sets; keep the others.
    pub fn apply_limits(&mut self, l: &Limits) {
        self.buffer_budget = l.max_buffer_bytes.unwrap_or(self.buffer_budget);
        self.max_queued_bytes = l.max_queued_bytes.unwrap_or(self.max_queued_bytes);
        self.read_timeout = l.read_timeout.unwrap_or(self.read_timeout);
        self.idle_timeout = l.idle_timeout.unwrap_or(self.idle_timeout);
    }

    /// Limits of one port's client connections; `max_request` is the
    /// largest request its protocol accepts.
    pub fn conn_limits(&self, max_request: usize) -> ConnLimits {
        ConnLimits {
            budget: Budget::new(self.buffer_budget),
            max_input: max_request,
            max_queued: self.max_queued_bytes,
            timeouts: ReadTimeouts {
                read: self.read_timeout,
                idle: self.idle_timeout,
            },
        }
    }
}

/// Durable modes need a protocol that keeps its state on disk.
pub(crate) fn check_durability(
    protocol: &str,
    persists_state: bool,
    durability: Durability,
) -> anyhow::Result<()> {
    if !persists_state && durability.keeps_data() {
        // Nothing of its state would be on disk: running as `fsync` would
        // promise what a restart cannot keep.
        anyhow::bail!(
            "protocol {protocol} keeps no state on disk (its seed has none): durability \
             {durability} is not supported; it runs with durability memory only \
             (--durability memory, and --recover on every restart)"
        );
    }
    Ok(())
}
