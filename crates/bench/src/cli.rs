//! `quorumkv bench`: flags, their translation into a [`BenchConfig`], and the
//! run with a table at the end.
//!
//! List-valued flags are taken as text and parsed here, so a bad element is
//! reported as one line naming the flag and the element.

use std::path::PathBuf;
use std::process::ExitCode;

use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::storage::Durability;
use quorumkv_node::zk_recipes::Recipe;

use crate::config::{
    parse_duration, parse_list, parse_targets, BenchConfig, ConfigError, CoordMode, Distribution,
    Length, Rtt, Security, Sharing, TargetSpec, Variant, WorkloadKind, ZnodeOpKind,
};
use crate::report;
use crate::sweep;

/// The end of `quorumkv bench --help`: defaults, then every protocol's
/// variants and options (from the registry).
fn after_help() -> String {
    let mut s = String::from(
        "With no flags: seed 000's GET-heavy (0.9) and PUT-heavy (0.1) mixes, N = 3, \
10 keys, clients 1,4,8,16,32, 3 s a point, every protocol, on local clusters the bench starts itself. \
Peers: scripts/peers.sh start etcd|redis|zookeeper prints the --target to use.\n\nVariants (--variant):\n",
    );
    s += &crate::config::variants_help();
    s += "\nProtocol options (--opt, or KEY=VALUE+KEY=VALUE as a variant):\n";
    for info in quorumkv_core::protocol::registry::infos() {
        s += &info.options_help();
    }
    s
}

/// Arguments of `quorumkv bench`. Every list flag takes comma-separated
/// values and the bench runs the whole matrix.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(after_help = after_help())]
pub struct Args {
    /// Protocols of local clusters (default: all implemented).
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub protocol: Option<String>,
    /// Protocol variants of quorumkv targets, measured side by side: default,
    /// a protocol's named variant (listed below), or options KEY=VALUE+KEY=VALUE
    /// [default: default].
    #[arg(long, value_name = "LIST")]
    pub variant: Option<String>,
    /// A protocol option for every quorumkv target (repeatable; listed below).
    #[arg(long = "opt", value_name = "KEY=VALUE", value_parser = quorumkv_core::protocol::options::parse_pair)]
    pub opt: Vec<(String, String)>,
    /// Targets: local, quorumkv://H:P,H:P…, etcd://H:P,H:P…, redis://H:P,
    /// zk://H:P,H:P… (ZooKeeper, local reads), zk+sync://H:P,H:P… (sync before
    /// each read) (comma-separated; default local).
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub target: Option<String>,
    /// Replica counts of local clusters [default: 3].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub replicas: Option<String>,
    /// Durability of local clusters' replicas, side by side: memory,
    /// buffered, fsync [default: fsync, what `quorumkv server` runs].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub durability: Option<String>,
    /// Closed-loop logical clients [default: 1,4,8,16,32].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub clients: Option<String>,
    /// Fractions of GETs (the rest are PUTs) [default: 0.9,0.1].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub get_fraction: Option<String>,
    /// Number of distinct keys [default: 10].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub keys: Option<String>,
    /// Key distribution: uniform, zipf:S (zipf = zipf:1.345675), hotspot [default: uniform].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub distribution: Option<String>,
    /// Value size in bytes [default: 16].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub value_size: Option<String>,
    /// Measured operations per logical client (instead of --duration).
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub ops_per_client: Option<u64>,
    /// Measured time per point, e.g. 3s, 500ms [default: 3s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// Warm-up per point whose samples are discarded [default: 500ms].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub warmup: Option<String>,
    /// Closed loop: each client waits a think time drawn uniformly from
    /// LO..HI (or exactly D) after each operation, e.g. 25ms..75ms (seed 003
    /// §5.2's U(25, 75) ms) [default: none].
    #[arg(long, value_name = "D|LO..HI", allow_hyphen_values = true)]
    pub think: Option<String>,
    /// Open loop: Poisson arrivals per second (list); replaces --clients.
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub rate: Option<String>,
    /// Open loop: arrivals beyond this many in flight are shed [default: 25].
    #[arg(long, value_name = "N")]
    pub max_outstanding: Option<usize>,
    /// Whether logical clients share one connection-level client [default: shared].
    #[arg(long, value_enum, value_name = "MODE")]
    pub connections: Option<Sharing>,
    /// quorumkv only: coordinator in the client library or in a server [default: direct].
    #[arg(long, value_enum, value_name = "MODE")]
    pub client_mode: Option<CoordMode>,
    /// Per-operation timeout [default: 2s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub op_timeout: Option<String>,
    /// Do not write every key before the warm-up.
    #[arg(long)]
    pub no_preload: bool,
    /// Record each point's history and check linearizability (a table
    /// column). On by default; this flag is kept for scripts.
    #[arg(long, conflicts_with = "no_check")]
    pub check: bool,
    /// Do not record histories nor check them (saves memory on long runs).
    #[arg(long)]
    pub no_check: bool,
    /// Longest one history check may take [default: 60s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub check_timeout: Option<String>,
    /// Seed of every random choice [default: 1].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Directory for results.csv, results.json and PNG plots [default: results].
    #[arg(long, value_name = "DIR", conflicts_with = "no_out")]
    pub out: Option<PathBuf>,
    /// Write no files; print the table only.
    #[arg(long)]
    pub no_out: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Do not measure the host's floors. By default the bench measures,
    /// before the first point and again after the last (about 2 s each at
    /// most), 2 KB O_DSYNC appends to a fresh file in the temp dir (where
    /// local clusters keep their data) and TCP round trips over 127.0.0.1,
    /// prints them under the table, and adds sync/disk (the replicas' mean
    /// sync time over the disk's) and GET/rtt (GET p50 over the round
    /// trip's) columns.
    #[arg(long)]
    pub no_floors: bool,
    /// The quorumkv executable local clusters run [default: this one].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// First port of local clusters [default: any free].
    #[arg(long, value_name = "PORT")]
    pub port_base: Option<u16>,
    /// Hold each replica of a local cluster to this fraction of one core
    /// (cgroup v1 CPU quota; needs root), e.g. 0.1 so that 8 replicas and
    /// the bench fit 2 cores [default: no limit].
    #[arg(long, value_name = "CORES")]
    pub replica_cpu: Option<f64>,
    /// Local clusters run TLS 1.3 everywhere (a CA and certificates are
    /// made for them, as `quorumkv cluster --tls` does) and the bench's
    /// quorumkv clients connect with TLS. Same as `--security tls`.
    #[arg(long, conflicts_with = "security")]
    pub tls: bool,
    /// Security of local clusters, measured side by side in one run:
    /// plain, tls (TLS 1.3 on every connection and replica link), auth
    /// (a users file on every replica, every client logs in), tls+auth.
    /// Each setting is a cluster of its own; a protocol's clusters are all
    /// started, and every workload is measured on each in turn, so the
    /// table compares them under the same conditions (`vs plain` column:
    /// throughput over the plain cluster's) [default: plain].
    /// E.g. --security plain,tls,tls+auth.
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub security: Option<String>,
    /// Measure every workload N times; with --security the clusters take
    /// turns each round (one row per round, `round` column) [default: 1].
    #[arg(long, value_name = "N")]
    pub rounds: Option<usize>,
    /// Closed loop: each client only reads or only writes; --get-fraction
    /// is the share of readers, spread evenly over the servers.
    #[arg(long)]
    pub dedicated_clients: bool,
    /// Run nothing: print the table of DIR/results.json and redraw its plots.
    #[arg(long, value_name = "DIR")]
    pub replot: Option<PathBuf>,
    /// What the clients do: kv (GETs and PUTs), lock (seed 001's lock
    /// recipes) or znode (each znode operation's sync and async latency,
    /// seed 001 Fig. 7-9); lock and znode need a protocol that serves
    /// znodes (zab) or a zk:// target [default: kv].
    #[arg(long, value_enum, value_name = "KIND")]
    pub workload: Option<WorkloadKind>,
    /// Lock recipes, one point each: tas, tas-watch, async-tas, queue,
    /// async-queue [default: all].
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub recipe: Option<String>,
    /// Lock workload: mean inter-arrival of lock requests in ms, exponential
    /// (open loop; --max-outstanding sessions serve them) [default: 500].
    #[arg(long, value_name = "MS")]
    pub arrival_ms: Option<f64>,
    /// Lock workload: mean critical section in ms, exponential; 0 releases
    /// as soon as the lock is held (the handoff alone) [default: 1].
    #[arg(long, value_name = "MS")]
    pub cs_ms: Option<f64>,
    /// Lock workload: interval of tas's retries, async-tas's creates and
    /// async-queue's getChildren polls, in ms [default: 10].
    #[arg(long, value_name = "MS")]
    pub poll_ms: Option<f64>,
    /// Lock workload: independent locks, each arrival takes one drawn
    /// uniformly (seed 001 has one; more measure the service's capacity)
    /// [default: 1].
    #[arg(long, value_name = "K")]
    pub locks: Option<usize>,
    /// Znode workload: the operations, in this order, each called --count
    /// times synchronously and then asynchronously: create, set, get,
    /// exists, children, delete [default: all].
    #[arg(long, value_name = "LIST")]
    pub znode_ops: Option<String>,
    /// Znode workload: calls per operation and mode [default: 1000].
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Local clusters: round trip added between clients and replicas
    /// (every replica's --rtt-client) [default: 0s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub rtt_client: Option<String>,
    /// Local clusters: an argument for every `quorumkv server` (repeatable),
    /// e.g. --server-arg=--storage-engine=fjall.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Local clusters: round trip added between replicas (--rtt-peer) [default: 0s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub rtt_peer: Option<String>,
    /// Local clusters: uniform jitter on the added round trips (--rtt-jitter) [default: 0s].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub rtt_jitter: Option<String>,
}

/// A positive number of milliseconds as a duration.
fn millis(flag: &'static str, v: Option<f64>) -> Result<Option<std::time::Duration>, ConfigError> {
    millis_or_zero(flag, v, false)
}

/// [`millis`]; `zero_ok`: 0 is allowed too.
fn millis_or_zero(
    flag: &'static str,
    v: Option<f64>,
    zero_ok: bool,
) -> Result<Option<std::time::Duration>, ConfigError> {
    v.map(|ms| {
        std::time::Duration::try_from_secs_f64(ms / 1000.0)
            .ok()
            .filter(|d| zero_ok || !d.is_zero())
            .ok_or_else(|| ConfigError::BadValue {
                flag,
                msg: match zero_ok {
                    true => format!("{ms} is not a number of milliseconds (0 or more)"),
                    false => format!("{ms} is not a positive number of milliseconds"),
                },
            })
    })
    .transpose()
}

fn dur(flag: &'static str, s: &Option<String>) -> Result<Option<std::time::Duration>, ConfigError> {
    s.as_deref()
        .map(|s| parse_duration(s).map_err(|msg| ConfigError::BadValue { flag, msg }))
        .transpose()
}

impl Args {
    /// The configuration these flags describe, validated.
    pub fn to_config(&self) -> Result<BenchConfig, ConfigError> {
        let mut c = BenchConfig::default();
        // The order decides which of several bad flags is reported.
        self.matrix(&mut c)?;
        self.timing(&mut c)?;
        self.run_options(&mut c)?;
        self.workload_options(&mut c)?;
        c.protocol_from_target = self.protocol.is_none()
            && (c.targets.iter()).any(|t| matches!(t, TargetSpec::Quorumkv { .. }));
        c.validate()?;
        Ok(c)
    }

    /// The list flags: what is measured, side by side.
    fn matrix(&self, c: &mut BenchConfig) -> Result<(), ConfigError> {
        if let Some(s) = &self.protocol {
            c.protocols = parse_list::<ProtocolKind>("protocol", s)?;
        }
        if let Some(s) = &self.variant {
            c.variants = parse_list::<Variant>("variant", s)?;
        }
        c.options = self.opt.clone();
        if let Some(s) = &self.target {
            c.targets = parse_targets(s).map_err(|msg| ConfigError::BadValue {
                flag: "target",
                msg,
            })?;
        }
        if let Some(s) = &self.replicas {
            c.replicas = parse_list("replicas", s)?;
        }
        if let Some(s) = &self.durability {
            c.durabilities = parse_list::<Durability>("durability", s)?;
        }
        if let Some(s) = &self.clients {
            c.clients = parse_list("clients", s)?;
        }
        if let Some(s) = &self.get_fraction {
            c.get_fractions = parse_list("get-fraction", s)?;
        }
        if let Some(s) = &self.keys {
            c.keys = parse_list("keys", s)?;
        }
        if let Some(s) = &self.distribution {
            c.distributions = parse_list::<Distribution>("distribution", s)?;
        }
        if let Some(s) = &self.value_size {
            c.value_sizes = parse_list("value-size", s)?;
        }
        Ok(())
    }

    /// How long points run and operations wait, and the loop (closed or `--rate`).
    fn timing(&self, c: &mut BenchConfig) -> Result<(), ConfigError> {
        if let Some(n) = self.ops_per_client {
            c.length = Length::OpsPerClient(n);
        }
        if let Some(d) = dur("duration", &self.duration)? {
            c.length = Length::Duration(d);
        }
        if let Some(d) = dur("warmup", &self.warmup)? {
            c.warmup = d;
        }
        if let Some(s) = &self.think {
            let range = quorumkv_core::protocol::options::parse_duration_range(s);
            c.think = Some(range.map_err(|msg| ConfigError::BadValue { flag: "think", msg })?);
        }
        if let Some(s) = &self.rate {
            if self.clients.is_some() {
                return Err(ConfigError::Conflict(
                    "--clients is for the closed loop; with --rate use --max-outstanding".into(),
                ));
            }
            c.rates = parse_list("rate", s)?;
        }
        if let Some(n) = self.max_outstanding {
            c.max_outstanding = n;
        }
        if let Some(s) = self.connections {
            c.sharing = s;
        }
        if let Some(m) = self.client_mode {
            c.coord = m;
        }
        if let Some(d) = dur("op-timeout", &self.op_timeout)? {
            c.op_timeout = d;
        }
        if let Some(d) = dur("check-timeout", &self.check_timeout)? {
            c.check_timeout = d;
        }
        Ok(())
    }

    /// Checks, output, local clusters' settings and the workload kind.
    fn run_options(&self, c: &mut BenchConfig) -> Result<(), ConfigError> {
        c.preload = !self.no_preload;
        c.check = self.check || !self.no_check;
        if let Some(s) = self.seed {
            c.seed = s;
        }
        if self.no_out {
            c.out = None;
        } else if let Some(o) = &self.out {
            c.out = Some(o.clone());
        }
        c.progress = !self.no_progress;
        c.floors = !self.no_floors;
        c.binary = self.binary.clone();
        c.port_base = self.port_base;
        c.replica_cpu = self.replica_cpu;
        if self.tls {
            c.securities = vec![Security::Tls];
        }
        if let Some(s) = &self.security {
            c.securities = parse_list::<Security>("security", s)?;
        }
        if let Some(n) = self.rounds {
            c.rounds = n;
        }
        c.dedicated = self.dedicated_clients;
        c.server_args = self.server_arg.clone();
        c.rtt = Rtt {
            client: dur("rtt-client", &self.rtt_client)?.unwrap_or_default(),
            peer: dur("rtt-peer", &self.rtt_peer)?.unwrap_or_default(),
            jitter: dur("rtt-jitter", &self.rtt_jitter)?.unwrap_or_default(),
        };
        if let Some(w) = self.workload {
            c.workload = w;
        }
        Ok(())
    }

    /// The lock and znode workloads' flags (each only with its workload).
    fn workload_options(&self, c: &mut BenchConfig) -> Result<(), ConfigError> {
        let lock_flags = self.recipe.is_some()
            || self.arrival_ms.is_some()
            || self.cs_ms.is_some()
            || self.poll_ms.is_some()
            || self.locks.is_some();
        if lock_flags && c.workload != WorkloadKind::Lock {
            return Err(ConfigError::Conflict(
                "--recipe, --arrival-ms, --cs-ms, --poll-ms and --locks need --workload lock"
                    .into(),
            ));
        }
        let znode_flags = self.znode_ops.is_some() || self.count.is_some();
        if znode_flags && c.workload != WorkloadKind::Znode {
            return Err(ConfigError::Conflict(
                "--znode-ops and --count need --workload znode".into(),
            ));
        }
        if let Some(s) = &self.znode_ops {
            c.znode_ops.ops = parse_list::<ZnodeOpKind>("znode-ops", s)?;
        }
        if let Some(n) = self.count {
            if n == 0 {
                return Err(ConfigError::BadValue {
                    flag: "count",
                    msg: "0 calls: give 1 or more".into(),
                });
            }
            c.znode_ops.count = n;
        }
        if let Some(s) = &self.recipe {
            c.lock.recipes = parse_list::<Recipe>("recipe", s)?;
        }
        if let Some(d) = millis("arrival-ms", self.arrival_ms)? {
            c.lock.arrival = d;
        }
        if let Some(d) = millis_or_zero("cs-ms", self.cs_ms, true)? {
            c.lock.cs = d;
        }
        if let Some(d) = millis("poll-ms", self.poll_ms)? {
            c.lock.poll = d;
        }
        if let Some(k) = self.locks {
            if k == 0 {
                return Err(ConfigError::BadValue {
                    flag: "locks",
                    msg: "0 locks: give 1 or more".into(),
                });
            }
            c.lock.locks = k;
        }
        Ok(())
    }
}

/// Entry point of `quorumkv bench` (synchronous; owns its tokio runtime).
/// Exit 0 = every point ran; 1 = the sweep ended early (a target died);
/// 2 = bad input or nothing could start.
pub fn run(args: Args) -> ExitCode {
    if let Some(dir) = &args.replot {
        return match replot(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("quorumkv bench: {e}");
                ExitCode::from(2)
            }
        };
    }
    let cfg = match args.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quorumkv bench: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quorumkv bench: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C once: finish with what was measured (table and files); twice: quit.
    rt.spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            crate::runner::INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
            eprintln!(
                "\nquorumkv bench: stopping after this point's measurements (Ctrl-C again quits)"
            );
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    match cfg.workload {
        WorkloadKind::Lock => return crate::lock::run(&cfg, &rt),
        WorkloadKind::Znode => return crate::znode_ops::run(&cfg, &rt),
        WorkloadKind::Kv => {}
    }
    let outcome = match rt.block_on(sweep::execute(&cfg)) {
        Ok(o) => o,
        Err(line) => {
            eprintln!("quorumkv bench: {line}");
            return ExitCode::from(2);
        }
    };
    say(&report::table(&outcome.results));
    say(&report::footnotes(&outcome.results));
    if !outcome.files.is_empty() {
        let dir = cfg
            .out
            .as_deref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        say(&format!("wrote {} files to {dir}/\n", outcome.files.len()));
    }
    match outcome.incomplete {
        Some(why) => {
            eprintln!("quorumkv bench: run ended early, results cover what was measured: {why}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}

/// `--replot DIR`: the table and plots of an earlier run, from its JSON.
fn replot(dir: &std::path::Path) -> Result<(), String> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let results = report::read_results(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    say(&report::table(&results));
    say(&report::footnotes(&results));
    let files =
        crate::plot::write_plots(dir, &results).map_err(|e| format!("plots not written: {e:#}"))?;
    say(&format!(
        "redrew {} plots in {}/\n",
        files.len(),
        dir.display()
    ));
    Ok(())
}

/// Prints to stdout, ignoring a closed pipe (`quorumkv bench | head`).
fn say(s: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}
