//! `quorumkv cluster`: a local cluster in the foreground.

use clap::Args as ClapArgs;
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::process::ExitCode;

/// Start a local cluster of replicas as child processes (Ctrl-C stops it)
///
/// Every replica is a child process on 127.0.0.1. Prints the endpoints,
/// then a line starting with `ready` once every replica answers. Ctrl-C or
/// SIGTERM stops them all: each drains first (answers what it was asked;
/// up to 12 s), a second Ctrl-C kills them at once. Replicas also exit by
/// themselves if this process dies.
///
/// Replica i listens on native port P+i and RESP port P+100+i (P = --port-base),
/// and with --protocol zab on ZooKeeper client port P+200+i;
/// with --metrics, Prometheus metrics and probes on port P+300+i.
/// The client commands find a cluster on the default ports by themselves;
/// for another --port-base, run the `export QUORUMKV_ENDPOINTS=...` line it
/// prints, or give them `--cluster` with the cluster file it prints.
///
/// Replica logs go to this process's stderr, each line starting with
/// `replica N`; $QUORUMKV_LOG filters them (e.g. QUORUMKV_LOG=debug).
///
/// With --tls, a CA, every replica's certificate and a client certificate
/// are made in the cluster's directory (`quorumkv cert`), the replicas run
/// TLS 1.3 on their native and RESP ports and between each other (mutual
/// TLS), and the lines printed say how clients connect (the client commands
/// with --cluster FILE, redis-cli --tls --cacert).
///
/// With --users FILE (written by `quorumkv user add`), every replica serves
/// those users: clients must log in (`--user NAME` on the client commands,
/// the password from --password-file, $QUORUMKV_PASSWORD or a prompt;
/// redis-cli --user NAME --pass PASSWORD). SIGHUP to a replica reloads it.
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment, after_help = super::protocols_help())]
pub struct Args {
    #[command(flatten)]
    shape: Shape,
    /// Replica i gets native port P+i and RESP port P+100+i.
    #[arg(long, default_value_t = 7000, value_name = "P")]
    port_base: u16,
    /// Every replica's durability: memory (nothing on disk), buffered or fsync.
    #[arg(long, value_enum, default_value_t = Durability::Memory, value_name = "MODE")]
    durability: Durability,
    /// Keep replica N's data in DIR/replica-N (kept after the cluster stops;
    /// default: a temporary directory removed when it stops).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// TLS everywhere, with certificates made for this cluster.
    #[arg(long)]
    tls: bool,
    /// With --tls: every client must present a certificate signed by the
    /// cluster's CA (the client commands use the one made for them).
    #[arg(long, requires = "tls")]
    client_cert_auth: bool,
    /// A users file (`quorumkv user add NAME -f FILE`) every replica
    /// serves: clients must log in with one of its users.
    #[arg(long, value_name = "FILE")]
    users: Option<std::path::PathBuf>,
    /// Every replica serves Prometheus metrics and the /healthz and /readyz
    /// probes on port P+300+i; a Prometheus scrape configuration for them is
    /// written beside the cluster file (prometheus.yml).
    #[arg(long)]
    metrics: bool,
}

/// What a local cluster runs; shared by `cluster` and `chaos`.
#[derive(ClapArgs, Debug, Clone)]
pub struct Shape {
    /// Replication protocol.
    #[arg(long, short = 'p', default_value_t = ProtocolKind::default_protocol())]
    pub protocol: ProtocolKind,
    /// A protocol option, written to the cluster file's `[options]` (repeat;
    /// the options of each protocol are listed below).
    #[arg(long = "opt", value_name = "KEY=VALUE", value_parser = quorumkv_core::protocol::options::parse_pair)]
    pub opt: Vec<(String, String)>,
    /// Number of replicas.
    #[arg(long, short = 'n', default_value_t = 3)]
    pub replicas: usize,
    /// Extra argument passed to every `quorumkv server` (repeat), e.g. --server-arg=--op-timeout=1s
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Added round trip between clients and every replica (each server's
    /// `--rtt-client`: its replies leave this much later).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = quorumkv_node::config::parse_duration)]
    pub rtt_client: std::time::Duration,
    /// Added round trip between replicas (each server's `--rtt-peer`: half
    /// of it at each end of a replica link).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = quorumkv_node::config::parse_duration)]
    pub rtt_peer: std::time::Duration,
    /// Uniform jitter on top of the added round trips, per frame (each
    /// server's `--rtt-jitter`).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = quorumkv_node::config::parse_duration)]
    pub rtt_jitter: std::time::Duration,
}

impl Shape {
    /// `--server-arg`s, then the added round trips that are not zero.
    fn server_args(&self) -> Vec<String> {
        let mut args = self.server_arg.clone();
        for (flag, d) in [
            ("--rtt-client", self.rtt_client),
            ("--rtt-peer", self.rtt_peer),
            ("--rtt-jitter", self.rtt_jitter),
        ] {
            if !d.is_zero() {
                args.push(format!("{flag}={}us", d.as_micros()));
            }
        }
        args
    }
    /// A local cluster of this shape, every other setting at its default.
    pub fn config(&self, binary: std::path::PathBuf) -> LocalClusterConfig {
        LocalClusterConfig {
            protocol: self.protocol,
            options: self.opt.clone(),
            replicas: self.replicas,
            binary,
            server_args: self.server_args(),
            ..Default::default()
        }
    }
}

pub fn run(a: Args) -> ExitCode {
    super::init_logging("warn", Some("cluster".into()));
    let binary = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => return super::fail(format!("cannot find my own executable: {e}")),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A bad users file is said here, once, rather than by every replica.
    let users = match &a.users {
        Some(path) => match quorumkv_node::auth::Users::load(path) {
            Ok(u) => Some(u),
            Err(e) => return super::fail(format!("{e:#}")),
        },
        None => None,
    };
    rt.block_on(async move {
        let cfg = LocalClusterConfig {
            users: a.users.clone(),
            port_base: Some(a.port_base),
            inherit_logs: true,
            durability: a.durability,
            data_root: a.data_dir.clone(),
            tls: a.tls,
            client_cert_auth: a.client_cert_auth,
            metrics: a.metrics,
            ..a.shape.config(binary)
        };
        let mut cluster = match LocalCluster::start(cfg).await {
            Ok(c) => c,
            Err(e) => return super::fail(format!("{e:#}")),
        };
        let eps = print_banner(&a, &cluster, users.as_ref());
        println!("ready {}", eps.join(","));
        let stop = super::server::shutdown_signal(false);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                (id, status) = cluster.wait_any_exit() => {
                    let how = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    eprintln!("quorumkv cluster: replica {id} exited ({how}); the others keep running");
                }
            }
        }
        // stdout may be gone by now (a closed pipe): never panic on it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "stopping {} replicas: each drains (up to {}s); Ctrl-C again kills them now",
            a.shape.replicas,
            STOP_WITHIN.as_secs()
        );
        tokio::select! {
            killed = cluster.shutdown(STOP_WITHIN) => {
                if !killed.is_empty() {
                    eprintln!("quorumkv cluster: killed replicas {killed:?}: they did not drain in time");
                }
            }
            // Dropping the cluster kills every replica.
            _ = tokio::signal::ctrl_c() => eprintln!("quorumkv cluster: killed every replica"),
        }
        ExitCode::SUCCESS
    })
}

/// How long replicas get to drain when the cluster stops: a replica's
/// default `--drain-timeout` (10 s) and a margin.
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(12);

/// What the cluster is and how clients reach it; the native endpoints.
fn print_banner(
    a: &Args,
    cluster: &LocalCluster,
    users: Option<&quorumkv_node::auth::Users>,
) -> Vec<String> {
    let security = if a.client_cert_auth {
        ", TLS with client certificates"
    } else if a.tls {
        ", TLS"
    } else {
        ""
    };
    let login = match users {
        Some(u) => format!(", {} users (clients log in)", u.len()),
        None => String::new(),
    };
    println!(
        "quorumkv cluster: protocol {}, {} replicas, durability {}{security}{login}",
        a.shape.protocol, a.shape.replicas, a.durability
    );
    for e in cluster.endpoints() {
        let zk = e.zk.map(|z| format!("  zk {z}")).unwrap_or_default();
        let zk = zk
            + &e.metrics
                .map(|m| format!("  metrics {m}"))
                .unwrap_or_default();
        println!(
            "  replica {}  native {}  resp {}{zk}  pid {}",
            e.id,
            e.native,
            e.resp,
            cluster.pid(e.id).unwrap_or(0)
        );
    }
    let eps: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| e.native.to_string())
        .collect();
    let first = cluster.endpoints()[0];
    println!(
        "cluster file: {} (removed when the cluster stops)",
        cluster.dir().join("cluster.toml").display()
    );
    let file = cluster.dir().join("cluster.toml");
    match cluster.cluster_file().tls.as_ref() {
        None => {
            println!("export QUORUMKV_ENDPOINTS={}", eps.join(","));
            println!("try:  quorumkv put hello world   |   quorumkv endpoints status   |   redis-cli -p {} GET hello", first.resp.port());
            println!(
                "      (with the endpoints above: export them, or --endpoints, or --cluster FILE)"
            );
        }
        Some(tls) => print_tls_hints(a, tls, &file, &eps, first.resp.port()),
    }
    if let (Some(u), Some(path)) = (users, &a.users) {
        print_login(a, u, path, first.resp.port());
    }
    let zk: Vec<String> = (cluster.endpoints().iter())
        .filter_map(|e| e.zk.map(|z| z.to_string()))
        .collect();
    if !zk.is_empty() {
        println!("zookeeper:  zkCli.sh -server {}", zk.join(","));
        if users.is_some() {
            println!("            then: addauth digest NAME:PASSWORD (a user of the users file)");
        }
    }
    if a.metrics {
        print_prometheus(cluster);
    }
    eps
}

/// Writes a Prometheus scrape configuration for the replicas' metrics
/// ports into the cluster's directory, and says how to use it.
fn print_prometheus(cluster: &LocalCluster) {
    let targets: Vec<String> = (cluster.endpoints().iter())
        .filter_map(|e| e.metrics.map(|m| format!("\"{m}\"")))
        .collect();
    let text = format!(
        "# Written by `quorumkv cluster --metrics`.\nglobal:\n  scrape_interval: 5s\nscrape_configs:\n  - job_name: quorumkv\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    let path = cluster.dir().join("prometheus.yml");
    match std::fs::write(&path, text) {
        Ok(()) => println!(
            "metrics:  curl http://{}/metrics   |   prometheus --config.file={}",
            targets.first().map_or("", |t| t.trim_matches('"')),
            path.display()
        ),
        Err(e) => eprintln!("quorumkv cluster: cannot write {}: {e}", path.display()),
    }
}

/// How clients reach a TLS cluster.
fn print_tls_hints(
    a: &Args,
    tls: &quorumkv_node::config::TlsFile,
    file: &std::path::Path,
    eps: &[String],
    resp_port: u16,
) {
    let dir = tls.dir.clone().unwrap_or_default();
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("client-quorumkv.pem"),
        dir.join("client-quorumkv.key"),
    );
    println!(
        "TLS certificates: {} (CA ca.pem; replica-N.pem/.key; client-quorumkv.pem/.key)",
        dir.display()
    );
    println!("export QUORUMKV_CLUSTER={}", file.display());
    println!("try:  quorumkv put hello world   |   quorumkv endpoints status   (the cluster file's [tls] says how)");
    let client_cert = match a.client_cert_auth {
        true => format!(" --cert {} --key {}", cert.display(), key.display()),
        false => String::new(),
    };
    println!(
        "      or: quorumkv get hello --endpoints {} --tls-ca {}{client_cert}",
        eps.join(","),
        ca.display(),
    );
    println!(
        "      redis-cli --tls --cacert {}{client_cert} -p {resp_port} GET hello",
        ca.display(),
    );
}

/// How clients log in, as a user of the users file at `path`.
fn print_login(a: &Args, u: &quorumkv_node::auth::Users, path: &std::path::Path, resp_port: u16) {
    let name = u
        .list()
        .find(|(_, r)| r.may_write())
        .or_else(|| u.list().next())
        .map(|(n, _)| n.to_string())
        .unwrap_or_else(|| "NAME".into());
    println!(
        "users: {} (quorumkv user add|passwd|list -f FILE; SIGHUP to a replica reloads it)",
        path.display()
    );
    println!("login: quorumkv put hello world --user {name}   (password: --password-file FILE, $QUORUMKV_PASSWORD or a prompt; or export QUORUMKV_USER={name})");
    println!(
        "       redis-cli{} -p {resp_port} --user {name} --pass PASSWORD GET hello",
        if a.tls { " --tls --cacert ..." } else { "" },
    );
}
