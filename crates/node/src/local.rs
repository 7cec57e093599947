//! Local clusters: replicas as child processes of this one on 127.0.0.1,
//! used by `quorumkv cluster`, `quorumkv bench` and the integration tests.
//!
//! Children never outlive us: each is started with `--exit-on-stdin-eof` and
//! a pipe as stdin, so when this process dies — even by SIGKILL — the pipe
//! closes and they exit; `kill_on_drop` covers the orderly paths.

use crate::client::probe_with;
use crate::config::{ClusterFile, TlsFile};
use crate::cpu_share::{CpuShares, CGROUP_V1_CPU};
use crate::storage::Durability;
use crate::tls::ClientTls;
use anyhow::{bail, Context};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::NodeId;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

#[derive(Clone, Debug)]
pub struct LocalClusterConfig {
    pub protocol: ProtocolKind,
    /// The protocol's options, written to the cluster file's `[options]`.
    pub options: Vec<(String, String)>,
    pub replicas: usize,
    /// Replica i on native port base+i and RESP port base+100+i; `None`
    /// picks free ports.
    pub port_base: Option<u16>,
    /// The `quorumkv` executable (usually `std::env::current_exe()`).
    pub binary: PathBuf,
    /// Extra arguments for every `quorumkv server` (e.g. `--op-timeout 1s`).
    pub server_args: Vec<String>,
    /// Children's stderr: inherited (true) or written to `replica-N.log` in
    /// the cluster's directory (false).
    pub inherit_logs: bool,
    pub ready_timeout: Duration,
    /// Hold each replica to this fraction of one core (cgroup v1,
    /// [`crate::cpu_share`]); `None` = no limit.
    pub replica_cpu: Option<f64>,
    /// Each replica's durability; data lives in `<cluster dir>/replica-N/`.
    /// With `Memory` a restarted replica recovers from its peers
    /// (`--recover`); otherwise it reloads its directory.
    pub durability: Durability,
    /// Keep replica N's data in `data_root/replica-N` instead of the
    /// cluster's temporary directory (which is removed when it stops).
    pub data_root: Option<PathBuf>,
    /// Each replica on a host of its own (`quorumkv chaos --hosts netns`):
    /// replica i runs in network namespace `hosts[i-1].netns` (through
    /// `ip netns exec`, which execs: the child's pid is the replica's) and
    /// listens on `hosts[i-1].ip`, ports [`HOST_NATIVE_PORT`] and
    /// [`HOST_RESP_PORT`]. Empty: every replica on 127.0.0.1.
    pub hosts: Vec<ReplicaHost>,
    /// TLS everywhere: a CA and every replica's certificate are made in
    /// `<cluster dir>/tls` (by `quorumkv cert`), with a client certificate
    /// `client-quorumkv.pem` that [`LocalCluster::client_tls`] presents.
    pub tls: bool,
    /// With `tls`: every client must present a certificate.
    pub client_cert_auth: bool,
    /// A users file every replica serves (the cluster file's `users`):
    /// clients must log in. Relative paths are taken from the current
    /// directory.
    pub users: Option<PathBuf>,
    /// Every replica serves `/metrics`, `/healthz` and `/readyz` on port
    /// P+300+i with `port_base` P, else on a free port.
    pub metrics: bool,
}

/// Where a replica of a multi-host local cluster runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaHost {
    pub netns: String,
    pub ip: std::net::IpAddr,
}

/// A replica's native port on a host of its own.
pub const HOST_NATIVE_PORT: u16 = 7001;
/// A replica's RESP port on a host of its own.
pub const HOST_RESP_PORT: u16 = 7101;
/// A replica's metrics port on a host of its own.
pub const HOST_METRICS_PORT: u16 = 7301;

impl Default for LocalClusterConfig {
    fn default() -> Self {
        LocalClusterConfig {
            protocol: ProtocolKind::default_protocol(),
            options: Vec::new(),
            replicas: 3,
            port_base: None,
            binary: PathBuf::from("quorumkv"),
            server_args: Vec::new(),
            inherit_logs: false,
            ready_timeout: Duration::from_secs(10),
            replica_cpu: None,
            durability: Durability::Memory,
            data_root: None,
            hosts: Vec::new(),
            tls: false,
            client_cert_auth: false,
            users: None,
            metrics: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub id: NodeId,
    pub native: SocketAddr,
    pub resp: SocketAddr,
    /// The ZooKeeper client port (clusters of the znode protocol without
    /// users).
    pub zk: Option<SocketAddr>,
    /// The metrics and probes port (with `LocalClusterConfig::metrics`).
    pub metrics: Option<SocketAddr>,
}

pub struct LocalCluster {
    cfg: LocalClusterConfig,
    file: ClusterFile,
    dir: PathBuf,
    endpoints: Vec<Endpoint>,
    children: Vec<Option<Child>>,
    /// Replicas stopped with SIGSTOP ([`LocalCluster::pause`]), by index.
    paused: Vec<bool>,
    /// How clients reach a TLS cluster (`None`: plain TCP).
    client_tls: Option<ClientTls>,
    /// Last field: its groups are removed after the children are killed.
    cpu: Option<CpuShares>,
}

/// A replica could not have the port it was given (another process holds
/// it): the cluster may start again on other ports.
#[derive(Debug)]
pub struct PortTaken(String);

impl std::fmt::Display for PortTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PortTaken {}

/// The secret file of a local cluster, in its directory.
const LOCAL_SECRET: &str = "cluster.secret";

/// `n` free loopback ports, taken outside the kernel's ephemeral range.
///
/// A port the OS hands out for `:0` lies in that range, and so do the source
/// ports of every outgoing connection on the host: while a replica is down
/// for a restart, any connection (of another test, another cluster) may take
/// its port, and the restart fails with "address in use". Ports outside the
/// range are only ever taken by an explicit bind. Above it first (Linux's
/// default leaves 61000-64999, and the `--port-base` ranges people and our
/// tests pick lie below it), else below it.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let (lo, hi) = ephemeral_range();
    let (from, to) = if hi < 64_000 {
        (hi + 1, 65_000)
    } else {
        (10_000, lo.max(10_000))
    };
    let span = to.saturating_sub(from);
    let mut listeners = Vec::with_capacity(n);
    if usize::from(span) >= 4 * n {
        let (from, span) = (u32::from(from), u32::from(span));
        let start = rand::random::<u32>() % span;
        for k in 0..span {
            let port = u16::try_from(from + (start + k) % span)?;
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                listeners.push(l);
                if listeners.len() == n {
                    break;
                }
            }
        }
    }
    // No room outside the range (an unusual host): let the OS pick.
    while listeners.len() < n {
        listeners.push(std::net::TcpListener::bind("127.0.0.1:0")?);
    }
    Ok(listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?)
}

/// The kernel's ephemeral port range, where the OS draws outgoing
/// connections' source ports (Linux's default where unreadable).
pub fn ephemeral_range() -> (u16, u16) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range");
    let parsed = text.ok().and_then(|t| {
        let mut it = t.split_whitespace().map(|w| w.parse::<u16>().ok());
        Some((it.next()??, it.next()??))
    });
    parsed.unwrap_or((32_768, 60_999))
}

impl LocalCluster {
    /// Start every replica and return once each answers a hello.
    ///
    /// Ports picked by the OS are free when picked, not when a replica binds
    /// them: a process starting its own cluster at the same moment may be
    /// handed the same ones. The replica that loses the bind exits, and the
    /// winner (somebody else's replica) would answer our hello. So each hello
    /// must name our replica and our cluster's addresses, and a cluster that
    /// lost a port starts again on fresh ones (three attempts).
    pub async fn start(cfg: LocalClusterConfig) -> anyhow::Result<LocalCluster> {
        let picked_ports = cfg.port_base.is_none() && cfg.hosts.is_empty();
        let mut attempt = 1;
        loop {
            match Self::start_once(cfg.clone()).await {
                Err(e) if picked_ports && attempt < 3 && e.is::<PortTaken>() => {
                    tracing::warn!("local cluster: {e}; starting again on other ports");
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    async fn start_once(cfg: LocalClusterConfig) -> anyhow::Result<LocalCluster> {
        if cfg.replicas == 0 || cfg.replicas > 63 {
            bail!("--replicas must be between 1 and 63 (got {})", cfg.replicas);
        }
        if !cfg.hosts.is_empty() && cfg.hosts.len() != cfg.replicas {
            bail!("{} hosts for {} replicas", cfg.hosts.len(), cfg.replicas);
        }
        // Said once here rather than by every replica as it exits.
        let info = cfg.protocol.info();
        crate::options::check_durability(info.name, info.persists_state, cfg.durability)?;
        let mut file = cluster_file(&cfg)?;
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("quorumkv-{}-{unique}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let client_tls = secure(&cfg, &mut file, &dir).await?;
        std::fs::write(dir.join("cluster.toml"), file.to_toml())?;
        let endpoints = file
            .replicas
            .iter()
            .map(|r| Endpoint {
                id: r.id,
                native: r.addr,
                resp: r.resp.expect("local clusters have RESP"),
                zk: r.zk,
                metrics: r.metrics,
            })
            .collect();
        let cpu = (cfg.replica_cpu)
            .map(|share| CpuShares::create(Path::new(CGROUP_V1_CPU), share))
            .transpose()?;
        let mut cluster = LocalCluster {
            cfg,
            file,
            dir,
            endpoints,
            children: Vec::new(),
            paused: Vec::new(),
            client_tls,
            cpu,
        };
        for id in cluster.file.members() {
            let child = cluster.spawn(id, false)?;
            cluster.children.push(Some(child));
            cluster.paused.push(false);
        }
        for id in cluster.file.members() {
            cluster.wait_ready(id, false).await?;
        }
        Ok(cluster)
    }

    fn spawn(&self, id: NodeId, recover: bool) -> anyhow::Result<Child> {
        let mut cmd = match self.cfg.hosts.get((id - 1) as usize) {
            Some(host) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &host.netns]).arg(&self.cfg.binary);
                c
            }
            None => Command::new(&self.cfg.binary),
        };
        cmd.arg("server")
            .arg("--config")
            .arg(self.dir.join("cluster.toml"))
            .arg("--id")
            .arg(id.to_string())
            .arg("--exit-on-stdin-eof")
            .args(recover.then_some("--recover"))
            .args(self.durability_args(id))
            .args(&self.cfg.server_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        for var in crate::config::SERVER_ENV {
            cmd.env_remove(var);
        }
        if self.cfg.inherit_logs {
            cmd.stderr(Stdio::inherit());
        } else {
            let log = std::fs::File::create(self.log_path(id))?;
            cmd.stderr(Stdio::from(log));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", self.cfg.binary.display()))?;
        if let (Some(cpu), Some(pid)) = (&self.cpu, child.id()) {
            cpu.attach(id, pid)?;
        }
        Ok(child)
    }

    /// `--durability` and `--data-dir` for replica `id`.
    fn durability_args(&self, id: NodeId) -> Vec<String> {
        match self.cfg.durability {
            Durability::Memory => vec!["--durability".into(), "memory".into()],
            d => vec![
                "--durability".into(),
                d.to_string(),
                "--data-dir".into(),
                self.data_dir(id).display().to_string(),
            ],
        }
    }

    /// Where replica `id` keeps its data (durable modes).
    pub fn data_dir(&self, id: NodeId) -> PathBuf {
        (self.cfg.data_root.as_deref())
            .unwrap_or(&self.dir)
            .join(format!("replica-{id}"))
    }

    /// Where replica `id` writes its log (its stderr), from its latest start.
    pub fn log_path(&self, id: NodeId) -> PathBuf {
        self.dir.join(format!("replica-{id}.log"))
    }

    /// Wait until replica `id` answers as ours. A `restarted` one may have
    /// been started from an older cluster file, or have learnt a move from
    /// its peers since (`address_book`): its own address and the set of
    /// replicas must match, the others' addresses need not.
    async fn wait_ready(&mut self, id: NodeId, restarted: bool) -> anyhow::Result<()> {
        let ep = self.endpoint(id).context("unknown replica")?;
        let deadline = tokio::time::Instant::now() + self.cfg.ready_timeout;
        let ours: Vec<(NodeId, String)> = (self.file.replicas.iter())
            .map(|r| (r.id, r.dial()))
            .collect();
        let same = |theirs: &[(NodeId, String)]| {
            let ids = |v: &[(NodeId, String)]| v.iter().map(|(n, _)| *n).collect::<Vec<_>>();
            let own = |v: &[(NodeId, String)]| v.iter().find(|(n, _)| *n == id).cloned();
            theirs == ours || (restarted && ids(theirs) == ids(&ours) && own(theirs) == own(&ours))
        };
        loop {
            let tls = self.client_tls.as_ref();
            let wait = Duration::from_millis(500);
            match probe_with(ep.native, wait, tls).await {
                Ok(hello) if hello.node == id && same(&hello.addrs) => return Ok(()),
                Ok(hello) => {
                    return Err(PortTaken(format!(
                        "{} answers as replica {} of another cluster",
                        ep.native, hello.node
                    ))
                    .into())
                }
                // Replicas with users (`--server-arg=--users=FILE`) answer a
                // hello only after a login; their status needs none.
                Err(crate::client::ClientError::Refused(why)) if why.contains("NOAUTH") => {
                    let host = ep.native.ip().to_string();
                    let status = crate::status::fetch_with(ep.native, &host, wait, tls).await;
                    let members = self.file.members();
                    match status {
                        Ok(s) if s.id == id && s.members == members => return Ok(()),
                        Ok(s) => {
                            let why = format!(
                                "{} answers as replica {} of another cluster",
                                ep.native, s.id
                            );
                            return Err(PortTaken(why).into());
                        }
                        Err(_) => {}
                    }
                }
                Err(_) => {}
            }
            let child = self.children[(id - 1) as usize]
                .as_mut()
                .context("replica not running")?;
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
                let last = log.lines().last().unwrap_or("(no output)");
                let why = format!("replica {id} exited with {status} before it was ready: {last}");
                if last.contains("cannot listen on") {
                    return Err(PortTaken(why).into());
                }
                bail!(why);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "replica {id} did not answer on {} within {:?}",
                    ep.native,
                    self.cfg.ready_timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }
    pub fn endpoint(&self, id: NodeId) -> Option<Endpoint> {
        self.endpoints.iter().copied().find(|e| e.id == id)
    }
    pub fn native_addrs(&self) -> Vec<SocketAddr> {
        self.endpoints.iter().map(|e| e.native).collect()
    }
    /// How clients reach this cluster: `Some` when it runs TLS (trusting
    /// its CA, presenting its client certificate).
    pub fn client_tls(&self) -> Option<ClientTls> {
        self.client_tls.clone()
    }
    pub fn cluster_file(&self) -> &ClusterFile {
        &self.file
    }
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
    /// Process ids of the running replicas.
    pub fn pids(&self) -> Vec<u32> {
        self.children
            .iter()
            .flatten()
            .filter_map(|c| c.id())
            .collect()
    }
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.children.get((id - 1) as usize)?.as_ref()?.id()
    }

    /// SIGKILL one replica (a crash: nothing is flushed, nothing said).
    pub async fn kill(&mut self, id: NodeId) -> anyhow::Result<()> {
        let slot = self
            .children
            .get_mut((id - 1) as usize)
            .context("unknown replica")?;
        if let Some(mut c) = slot.take() {
            c.kill().await?;
        }
        // SIGKILL ends a stopped process too.
        self.paused[(id - 1) as usize] = false;
        Ok(())
    }

    /// SIGTERM one replica (a graceful drain) and wait up to `within` for
    /// it to exit: its exit status and how long it took. Afterwards it is
    /// stopped, as after [`Self::kill`] (restart it the same way); if it
    /// did not exit in time it is killed and that is an error.
    pub async fn terminate(
        &mut self,
        id: NodeId,
        within: Duration,
    ) -> anyhow::Result<(std::process::ExitStatus, Duration)> {
        self.sigterm(id)?;
        let started = std::time::Instant::now();
        match self.wait_exit(id, within).await? {
            Some(status) => Ok((status, started.elapsed())),
            None => {
                self.kill(id).await?;
                bail!("replica {id} did not exit within {within:?} of SIGTERM")
            }
        }
    }

    /// Send replica `id` SIGTERM (it starts draining; a second one cuts
    /// the drain short).
    pub fn sigterm(&self, id: NodeId) -> anyhow::Result<()> {
        self.signal(id, libc::SIGTERM)
    }

    /// Wait up to `within` for replica `id` to exit: its status (it is then
    /// stopped, as after [`Self::kill`]), or `None` if it still runs. Its
    /// stdin stays open meanwhile (closing it would tell the replica its
    /// parent is gone).
    pub async fn wait_exit(
        &mut self,
        id: NodeId,
        within: Duration,
    ) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let i = (id - 1) as usize;
        let deadline = std::time::Instant::now() + within;
        loop {
            let child = (self.children.get_mut(i).and_then(Option::as_mut))
                .with_context(|| format!("replica {id} is not running"))?;
            if let Some(status) = child.try_wait()? {
                self.children[i] = None;
                self.paused[i] = false;
                return Ok(Some(status));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Start a killed replica again. With memory durability it lost its
    /// state, so it recovers from its peers before answering queries
    /// (`quorumkv server --recover`); otherwise it reloads its directory.
    pub async fn restart(&mut self, id: NodeId) -> anyhow::Result<()> {
        let kept = self.cfg.durability.keeps_data() && self.cfg.protocol.info().persists_state;
        self.respawn(id, !kept).await
    }

    /// Start a killed replica again without `--recover`, whatever the
    /// durability: what a memory replica does when every peer lost its
    /// state too (no one is left to recover from; its data is gone).
    pub async fn restart_without_recovery(&mut self, id: NodeId) -> anyhow::Result<()> {
        self.respawn(id, false).await
    }

    /// Read the cluster file again: the replicas rewrite it when an admin
    /// moves one of them (`quorumkv member update`), and clients and later
    /// starts then use the addresses it names.
    pub fn reload_file(&mut self) -> anyhow::Result<()> {
        let file = ClusterFile::load(&self.dir.join("cluster.toml"))?;
        for e in &mut self.endpoints {
            if let Some(r) = file.replica(e.id) {
                e.native = r.addr;
            }
        }
        self.file = file;
        Ok(())
    }

    /// Start killed replica `id` as a new machine would: its data
    /// directory emptied, recovering from its peers (`--recover`).
    pub async fn restart_wiped(&mut self, id: NodeId) -> anyhow::Result<()> {
        let dir = self.data_dir(id);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot empty {}", dir.display()))?;
        }
        self.respawn(id, true).await
    }

    /// The one way a killed replica comes back.
    async fn respawn(&mut self, id: NodeId, recover: bool) -> anyhow::Result<()> {
        if self
            .children
            .get((id - 1) as usize)
            .context("unknown replica")?
            .is_some()
        {
            bail!("replica {id} is running");
        }
        let child = self.spawn(id, recover)?;
        self.children[(id - 1) as usize] = Some(child);
        self.paused[(id - 1) as usize] = false;
        self.wait_ready(id, true).await
    }

    /// SIGSTOP one replica: it keeps its sockets and state but answers
    /// nothing (a long GC pause, a stalled VM) until [`Self::resume`].
    pub fn pause(&mut self, id: NodeId) -> anyhow::Result<()> {
        self.signal(id, libc::SIGSTOP)?;
        self.paused[(id - 1) as usize] = true;
        Ok(())
    }

    /// SIGCONT a paused replica.
    pub fn resume(&mut self, id: NodeId) -> anyhow::Result<()> {
        self.signal(id, libc::SIGCONT)?;
        self.paused[(id - 1) as usize] = false;
        Ok(())
    }

    pub fn is_paused(&self, id: NodeId) -> bool {
        self.paused.get((id - 1) as usize).copied().unwrap_or(false)
    }

    fn signal(&self, id: NodeId, sig: libc::c_int) -> anyhow::Result<()> {
        let pid = self
            .pid(id)
            .with_context(|| format!("replica {id} is not running"))?;
        let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
        // SAFETY: kill(2) on our own child's pid; no memory is shared.
        if unsafe { libc::kill(pid, sig) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot signal replica {id}"));
        }
        Ok(())
    }

    /// Wait until any replica exits; returns its id and exit status.
    pub async fn wait_any_exit(&mut self) -> (NodeId, std::io::Result<std::process::ExitStatus>) {
        loop {
            for (i, c) in self.children.iter_mut().enumerate() {
                if let Some(child) = c {
                    if let Ok(Some(status)) = child.try_wait() {
                        *c = None;
                        return (i as NodeId + 1, Ok(status));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stop every replica as an operator would: SIGTERM to all at once
    /// (each drains: answers what it was asked, then exits), wait up to
    /// `within` for them, then kill what is left (and a paused one at
    /// once: it cannot drain). Returns the replicas that had to be killed.
    pub async fn shutdown(mut self, within: Duration) -> Vec<NodeId> {
        let ids: Vec<NodeId> = (1..=self.children.len() as NodeId)
            .filter(|&id| self.children[(id - 1) as usize].is_some())
            .collect();
        let mut killed = Vec::new();
        for &id in &ids {
            if self.is_paused(id) || self.sigterm(id).is_err() {
                killed.push(id);
            }
        }
        let deadline = std::time::Instant::now() + within;
        let signalled: Vec<NodeId> = ids.into_iter().filter(|id| !killed.contains(id)).collect();
        for id in signalled {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !matches!(self.wait_exit(id, left).await, Ok(Some(_))) {
                killed.push(id);
            }
        }
        self.stop().await;
        killed
    }

    /// Kill every replica and remove the cluster's directory.
    pub async fn stop(mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill().await;
        }
        self.children.clear();
    }
}

/// A CA, every replica's certificate and a client's, made in `dir` by
/// `quorumkv cert`; the `[tls]` table naming them.
async fn make_certs(cfg: &LocalClusterConfig, dir: &Path) -> anyhow::Result<TlsFile> {
    let dir_arg = dir.display().to_string();
    let mut runs: Vec<Vec<String>> = vec![vec!["ca".into()]];
    for id in 1..=cfg.replicas {
        let mut args = vec!["replica".into(), "--id".into(), id.to_string()];
        if let Some(h) = cfg.hosts.get(id - 1) {
            args.extend(["--host".into(), h.ip.to_string()]);
        }
        runs.push(args);
    }
    runs.push(vec!["client".into(), "--name".into(), "quorumkv".into()]);
    for args in runs {
        let out = Command::new(&cfg.binary)
            .arg("cert")
            .args(&args)
            .args(["--dir", &dir_arg])
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("cannot start {}", cfg.binary.display()))?;
        if !out.status.success() {
            bail!(
                "quorumkv cert {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(TlsFile {
        dir: Some(dir.to_path_buf()),
        client_cert: Some(dir.join("client-quorumkv.pem")),
        client_key: Some(dir.join("client-quorumkv.key")),
        client_cert_auth: cfg.client_cert_auth,
        ..TlsFile::default()
    })
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The cluster file of a local cluster: its replicas' addresses (on
/// `--port-base`, on free ports, or on the hosts' fixed ports) and options.
fn cluster_file(cfg: &LocalClusterConfig) -> anyhow::Result<ClusterFile> {
    let mut file = match cfg.port_base {
        _ if !cfg.hosts.is_empty() => {
            let mut f = ClusterFile::local(cfg.protocol, cfg.replicas, 0);
            for (r, h) in f.replicas.iter_mut().zip(&cfg.hosts) {
                r.addr = SocketAddr::new(h.ip, HOST_NATIVE_PORT);
                r.resp = Some(SocketAddr::new(h.ip, HOST_RESP_PORT));
            }
            f
        }
        Some(base) => {
            if base as usize + 100 + cfg.replicas > u16::MAX as usize {
                bail!(
                    "--port-base {base} leaves no room for {} replicas",
                    cfg.replicas
                );
            }
            ClusterFile::local(cfg.protocol, cfg.replicas, base)
        }
        None => {
            let ports = free_ports(cfg.replicas * 2)?;
            let mut f = ClusterFile::local(cfg.protocol, cfg.replicas, 0);
            for (i, r) in f.replicas.iter_mut().enumerate() {
                r.addr.set_port(ports[2 * i]);
                r.resp
                    .as_mut()
                    .expect("local clusters have RESP")
                    .set_port(ports[2 * i + 1]);
            }
            f
        }
    };
    add_zk_ports(cfg, &mut file)?;
    add_metrics_ports(cfg, &mut file)?;
    for (k, v) in &cfg.options {
        file.options
            .insert(k.clone(), toml::Value::String(v.clone()));
    }
    file.validate()?;
    Ok(file)
}

/// A ZooKeeper client port for every replica of a local cluster of the
/// protocol that serves znodes: port P+200+i with `--port-base` P, else a
/// free one. Not on other hosts.
fn add_zk_ports(cfg: &LocalClusterConfig, file: &mut ClusterFile) -> anyhow::Result<()> {
    let serves = cfg.protocol.name() == quorumkv_core::znode::op::SERVED_BY;
    if !serves || !cfg.hosts.is_empty() {
        return Ok(());
    }
    let ports = extra_ports(cfg, file, 200, "ZooKeeper")?;
    for (r, port) in file.replicas.iter_mut().zip(ports) {
        r.zk = Some(SocketAddr::new(r.addr.ip(), port));
    }
    Ok(())
}

/// A metrics port for every replica where asked for: P+300+i with
/// `--port-base` P, else a free one (on its host's address).
fn add_metrics_ports(cfg: &LocalClusterConfig, file: &mut ClusterFile) -> anyhow::Result<()> {
    if !cfg.metrics {
        return Ok(());
    }
    let ports = match cfg.hosts.is_empty() {
        true => extra_ports(cfg, file, 300, "metrics")?,
        false => vec![HOST_METRICS_PORT; cfg.replicas],
    };
    for (r, port) in file.replicas.iter_mut().zip(ports) {
        r.metrics = Some(SocketAddr::new(r.addr.ip(), port));
    }
    Ok(())
}

/// One more port per replica: P+offset+i with `--port-base` P, else free
/// ports the cluster file does not use yet.
fn extra_ports(
    cfg: &LocalClusterConfig,
    file: &ClusterFile,
    offset: usize,
    what: &str,
) -> anyhow::Result<Vec<u16>> {
    match cfg.port_base {
        Some(base) => (1..=cfg.replicas)
            .map(|i| u16::try_from(base as usize + offset + i))
            .collect::<Result<Vec<u16>, _>>()
            .map_err(|_| anyhow::anyhow!("--port-base {base} leaves no room for {what} ports")),
        None => free_ports_besides(file, cfg.replicas),
    }
}

/// `n` free ports that the cluster file does not use already (its ports
/// were free, and are released, when they were picked).
fn free_ports_besides(file: &ClusterFile, n: usize) -> anyhow::Result<Vec<u16>> {
    let taken: Vec<u16> = (file.replicas.iter())
        .flat_map(|r| {
            [Some(r.addr), r.resp, r.zk, r.metrics]
                .into_iter()
                .flatten()
        })
        .map(|a| a.port())
        .collect();
    for _ in 0..20 {
        let ports = free_ports(n)?;
        if ports.iter().all(|p| !taken.contains(p)) {
            return Ok(ports);
        }
    }
    bail!("no {n} free ports apart from the cluster's others")
}

/// TLS certificates (where asked for), a fresh cluster secret and the users
/// file, written to `dir` and named in `file`; the clients' TLS settings.
async fn secure(
    cfg: &LocalClusterConfig,
    file: &mut ClusterFile,
    dir: &Path,
) -> anyhow::Result<Option<ClientTls>> {
    let client_tls = match cfg.tls {
        true => {
            let tls = make_certs(cfg, &dir.join("tls")).await?;
            let client_cert = tls.client_cert_key();
            let cert_key = client_cert
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            let client = ClientTls::from_files(&tls.ca_path()?, cert_key)?;
            file.tls = Some(tls);
            Some(client)
        }
        false => None,
    };
    // Every local cluster's replicas prove a fresh secret to each other:
    // other users of this machine can reach loopback ports too.
    let secret = crate::peer_auth::ClusterSecret::generate();
    crate::peer_auth::write_secret(&dir.join(LOCAL_SECRET), &secret, false)
        .with_context(|| format!("cannot write {}", dir.join(LOCAL_SECRET).display()))?;
    file.secret_file = Some(PathBuf::from(LOCAL_SECRET));
    if let Some(users) = &cfg.users {
        // The cluster file lives elsewhere: name the file absolutely.
        let abs = std::path::absolute(users)
            .with_context(|| format!("users file {}", users.display()))?;
        file.users = Some(abs);
    }
    Ok(client_tls)
}
