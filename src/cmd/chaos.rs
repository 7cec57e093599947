//! `quorumkv chaos`: the real-process counterpart of `quorumkv sim`. A local
//! cluster of child processes, clients recording a history through the
//! client library, a seeded schedule of SIGKILL / SIGSTOP faults on the
//! replicas, then a final read of every key and the linearizability check.
//! With `--hosts netns` every replica runs on a host of its own (a network
//! namespace) and the network between them fails too (`netns`).

mod lock;
mod nemesis;
mod netns;
mod ports;
mod readback;
mod schedule;
mod timeline;
mod workload;
mod znode;

use super::cluster::Shape;
use clap::Args as ClapArgs;
use nemesis::{FaultCounts, Liveness, Nemesis};
use netns::Hosts;
use quorumkv_check::recorder::Recorder;
use quorumkv_check::{report, History, Model, Report, Verdict};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::config::parse_duration;
use quorumkv_node::local::{LocalCluster, LocalClusterConfig, PortTaken};
use quorumkv_node::storage::Durability;
use schedule::{FaultSet, Schedule};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use timeline::Timeline;
use workload::OpCounts;

const AFTER_HELP: &str = "\
Faults (--faults, a comma list, or none):
  kill      SIGKILL one replica or a minority (at most what the protocol tolerates),
            then restart them: with --durability memory they come back empty and
            recover from their peers (server --recover); otherwise they reload
            their data directory.
  pause     SIGSTOP one replica or a minority, then SIGCONT them (a long GC
            pause, a stalled VM): they keep their state and sockets.
  kill-all  SIGKILL every replica at once, then restart them all.
  partition (--hosts netns) cut the network, then heal it: a split (one
            replica or a minority cut off), the leader isolated (the replica
            whose status says it leads), a bridge replica that sees both
            sides of a cut, or a one-way cut. The client host stands on
            either side or reaches all. Packets are dropped with iptables in
            the replicas' namespaces, from outside.
  netem     (--hosts netns) slow, lossy links out of a minority (tc netem
            delay and loss; loss only, by iptables, where the kernel has no
            netem).
  move      a machine lost and replaced, any protocol: SIGKILL a replica (each
            in turn), move its id to its other port (`quorumkv member update`:
            P+64+i, and back to P+i the next time), then start it there with
            an empty data directory and --recover; it catches up from its
            peers. With N replicas, N moves have replaced every one, 2N twice.
  replace   (--opt spares=K) replace the voter that has voted longest by
            the learner that has waited longest, online (`quorumkv member
            replace`, waited for until committed), SIGKILL the replaced
            server, then restart it: it is back as a learner. With N voters,
            N replaces have replaced every voter of the start, 2N twice.
After each fault is healed, every replica must serve again (not recovering,
reaching a quorum), and one more client must read every key, before the next
one: the time from the heal until every key was read is printed for each heal
and its worst case at the end (liveness measured). At the end every key is
read once more.

--hosts netns (root, `ip`, `iptables`, `tc`): each replica in a network
namespace of its own (10.77.0.N, ports 7001/7101), joined by veth pairs to a
bridge in another; this process moves into one more (10.77.0.100) to run the
clients. Hosts share one kernel clock: clock skew cannot be injected (pauses
stand in for it). The namespaces are removed at the end and on Ctrl-C.

Ports (--hosts loopback): replica i listens on P+i (clients and its
peers) and P+100+i (RESP), as `quorumkv cluster --port-base P` lays them
out. Without --port-base, P is drawn from 10000-19999 (below the OS's
ephemeral range, so no outgoing connection takes a killed replica's port
before its restart) among bases whose ports are all free. Either way every
port is reserved (a lock file in the temporary directory) for the run, so
two chaos runs never share one; a port taken by anything else is named,
at the start or at the restart that cannot have it.

Exit status: 0 when the history is linearizable, 1 when it is not, 2 on a
setup error (the cluster did not start, a replica did not come back) or when
the checker ran out of time (--check-timeout).

With --durability memory, kill-all loses every acknowledged write (nothing
survives on any replica): the checker then reports the history not
linearizable and chaos exits 1. That is expected, and shows what the durable
modes are for. What `buffered` loses (written, not synced) cannot show here:
kill -9 keeps the operating system's page cache, so nothing short of a power
cut loses it; the simulator (`quorumkv sim --durability`) shows it instead.";

/// Kill and pause the replicas of a local cluster while clients run, then
/// check the recorded history for linearizability
///
/// Starts a local cluster of child processes (as `quorumkv cluster`), runs
/// --clients clients through the client library for --duration, each doing
/// gets and puts of unique values on --keys keys, and injects the faults of
/// a schedule drawn from --seed on the replica processes. Prints the fault
/// timeline beside the checker's verdict; --history writes what the clients
/// saw, for `quorumkv check`.
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment, after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    shape: Shape,
    /// Concurrent clients (each one operation at a time).
    #[arg(long, default_value_t = 8)]
    clients: u64,
    /// Number of keys the clients share.
    #[arg(long, default_value_t = 8)]
    keys: u64,
    /// What the clients do: kv (gets and puts of unique values on --keys
    /// keys); znode (seed 001's coordination service, on a protocol that
    /// serves znodes: sessions, ephemeral and sequential creates,
    /// conditional sets and deletes, reads with watches; checked with the
    /// znode model); lock (seed 001's lock recipes: --clients clients per
    /// recipe of --recipe take its lock in turn; every hold's fencing token
    /// and real-time interval checked).
    #[arg(long, value_enum, default_value_t = ChaosWorkload::Kv)]
    workload: ChaosWorkload,
    /// With --workload lock: the recipes, each on a lock of its own (tas,
    /// tas-watch, async-tas, queue, async-queue).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tas,tas-watch,async-tas,queue,async-queue"
    )]
    recipe: Vec<quorumkv_node::zk_recipes::Recipe>,
    /// How long the clients run and faults are injected, e.g. 20s, 5m.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Faults to inject: a comma list of kill, pause, kill-all, partition,
    /// netem; or none.
    #[arg(long, default_value = "kill,pause")]
    faults: FaultSet,
    /// Where the replicas run: loopback (child processes on 127.0.0.1) or
    /// netns (each on a host of its own: a network namespace; root).
    #[arg(long, value_enum, default_value_t = HostsMode::Loopback)]
    hosts: HostsMode,
    /// What each replica's acknowledgement promises (server --durability).
    #[arg(long, value_enum, default_value_t = Durability::Fsync)]
    durability: Durability,
    /// Replica i on port P+i (clients and peers) and RESP port P+100+i
    /// (default: a free base drawn below the ephemeral range, printed).
    #[arg(long, value_name = "P")]
    port_base: Option<u16>,
    /// Seed of the fault schedule and the clients' choices (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the recorded history here (JSONL, as `quorumkv check` reads it).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// direct: each client coordinates the quorum itself; proxy: a server does.
    #[arg(long, default_value = "direct")]
    client_mode: ClientMode,
    /// A client's operation without a quorum fails (outcome unknown) after this long.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    op_timeout: Duration,
    /// Give the checker this long; undecided is exit 2.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    check_timeout: Duration,
    /// How long a restarted or resumed replica may take to serve again.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    serve_timeout: Duration,
    /// No progress bar (there is none when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChaosWorkload {
    Kv,
    Znode,
    Lock,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HostsMode {
    Loopback,
    Netns,
}

/// `--workload znode`'s history, and how many final reads were answered.
type ZnodeResult = (
    Vec<quorumkv_check::SpecOp<quorumkv_check::znode::ZnodeOp>>,
    u64,
);

/// What the run produced, for the report.
struct Run {
    timeline: Timeline,
    history: History,
    counts: Arc<OpCounts>,
    faults: Arc<FaultCounts>,
    keys_read: u64,
    /// `--workload znode`: the znode history, and how many final reads
    /// were answered.
    znode: Option<ZnodeResult>,
    /// `--workload lock`: each lock's verdict.
    locks: Vec<lock::LockVerdict>,
    /// The worst heal-to-serve times.
    liveness: String,
    /// Why the run stopped early, if it did.
    error: Option<String>,
}

pub fn run(a: Args) -> ExitCode {
    super::init_logging("warn", Some("chaos".into()));
    let binary = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => return setup_error(format!("cannot find my own executable: {e}")),
    };
    if let Err(e) = check_args(&a) {
        return setup_error(e);
    }
    let seed = a.seed.unwrap_or_else(rand_seed);
    println!(
        "quorumkv chaos: protocol {}, {} replicas, durability {}, faults {}, {} clients ({}), {} keys, {:?}, seed {seed}",
        a.shape.protocol, a.shape.replicas, a.durability, a.faults, a.clients,
        mode_name(a.client_mode), a.keys, a.duration
    );
    // Before any thread starts: this process moves into the client host.
    let hosts = match a.hosts {
        HostsMode::Loopback => None,
        HostsMode::Netns => {
            match Hosts::create(a.shape.replicas).and_then(|h| {
                h.enter_client()?;
                Ok(h)
            }) {
                Ok(h) => {
                    println!(
                    "hosts: netns, replica N on 10.77.0.N:7001 (namespace {}), clients on 10.77.0.100{}",
                    h.replica_ns(1).replace("r1", "rN"),
                    if h.netem { "" } else { "; no netem in this kernel (netem injects loss only)" }
                );
                    Some(h)
                }
                Err(e) => return setup_error(format!("{e:#}")),
            }
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let interrupted = super::server::shutdown_signal(false);
    let outcome = rt.block_on(async {
        tokio::select! {
            r = drive(&a, binary, seed, hosts.as_ref()) => Some(r),
            () = interrupted => None,
        }
    });
    // The cluster is gone (its children killed) before the hosts are.
    drop(rt);
    let run = match outcome {
        Some(Ok(r)) => r,
        Some(Err(e)) => return setup_error(format!("{e:#}")),
        None => {
            drop(hosts);
            eprintln!("quorumkv chaos: interrupted; replicas stopped, hosts removed");
            return ExitCode::from(130);
        }
    };
    drop(hosts);
    finish(&a, seed, run)
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
}

fn mode_name(m: ClientMode) -> &'static str {
    match m {
        ClientMode::Direct => "direct",
        ClientMode::Proxy => "proxy",
    }
}

/// The flags that cannot go together, said before anything starts.
fn check_args(a: &Args) -> Result<(), String> {
    if a.clients == 0 || a.keys == 0 {
        return Err("--clients and --keys must be at least 1".into());
    }
    let all_recipes = a.recipe == quorumkv_node::zk_recipes::Recipe::ALL;
    if a.workload != ChaosWorkload::Lock && !all_recipes {
        return Err("--recipe applies to --workload lock only".into());
    }
    if a.recipe.is_empty() {
        return Err("--recipe needs at least one recipe".into());
    }
    if a.hosts == HostsMode::Netns && a.port_base.is_some() {
        return Err(
            "--port-base applies to --hosts loopback (each netns host uses ports 7001 and 7101)"
                .into(),
        );
    }
    if a.hosts == HostsMode::Loopback {
        if let Some(k) = a.faults.0.iter().find(|k| k.needs_hosts()) {
            return Err(format!(
                "--faults {k:?} needs --hosts netns (on one loopback no partition can happen)"
            ));
        }
    }
    replace_rotation(a)?;
    if a.faults.0.contains(&schedule::FaultKind::Move) {
        if a.hosts != HostsMode::Loopback {
            return Err(
                "--faults move runs on --hosts loopback (it moves a replica to another port)"
                    .into(),
            );
        }
        if a.workload != ChaosWorkload::Kv {
            return Err("--faults move runs with --workload kv".into());
        }
        if a.shape.replicas > ports::MOST_MOVED {
            return Err(format!(
                "--faults move takes at most {} replicas",
                ports::MOST_MOVED
            ));
        }
    }
    Ok(())
}

/// The voter rotation of `--faults replace`, `None` without it; an error
/// where it cannot run: only Zab changes its voters, only servers that keep
/// their log remember a change, and a replacement needs a spare.
fn replace_rotation(a: &Args) -> Result<Option<nemesis::Rotation>, String> {
    if !a.faults.0.contains(&schedule::FaultKind::Replace) {
        return Ok(None);
    }
    let info = a.shape.protocol.info();
    if !info.options.iter().any(|o| o.name == "spares") {
        return Err(format!(
            "--faults replace needs a protocol that changes its voters online; {} has fixed \
             servers (`quorumkv member`)",
            a.shape.protocol
        ));
    }
    if !a.durability.keeps_data() {
        return Err("--faults replace needs --durability fsync or buffered".into());
    }
    let spares = (a.shape.opt.iter().rev())
        .find(|(k, _)| k == "spares")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    nemesis::Rotation::new(a.shape.replicas, spares)
        .map(Some)
        .ok_or_else(|| {
            format!(
                "--faults replace needs spares to swap in: e.g. --replicas {} --opt spares=3 \
             (the last 3 start as learners)",
                a.shape.replicas + 3
            )
        })
}

fn setup_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("quorumkv chaos: {msg}");
    ExitCode::from(2)
}

fn progress_bar(a: &Args) -> Option<indicatif::ProgressBar> {
    if a.no_progress || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(a.duration.as_millis() as u64);
    let style = indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {msg}")
        .expect("valid template")
        .progress_chars("=> ");
    pb.set_style(style);
    Some(pb)
}

/// Start the cluster, run clients and faults, read every key, stop.
async fn drive(a: &Args, binary: PathBuf, seed: u64, hosts: Option<&Hosts>) -> anyhow::Result<Run> {
    let cfg = quorumkv_node::local::LocalClusterConfig {
        durability: a.durability,
        ready_timeout: Duration::from_secs(20),
        hosts: hosts.map(Hosts::replica_hosts).unwrap_or_default(),
        ..a.shape.config(binary)
    };
    let (mut cluster, ports) = start_cluster(a, cfg).await?;
    let (mut clients, mut liveness) = Clients::connect(a, &cluster.native_addrs(), seed).await?;
    let pb = progress_bar(a);
    let mut timeline = echoing_timeline(&pb);
    let faults = Arc::new(FaultCounts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = clients.spawn(a, seed, &stop);
    let ticker = pb.clone().map(|pb| ticker(pb, &clients.counts, &faults));
    timeline.note(match &clients.lock {
        Some(run) => format!(
            "start: {} clients on each of {} locks",
            a.clients,
            run.recipes.len()
        ),
        None => format!("start: {} clients", a.clients),
    });
    let info = a.shape.protocol.info();
    let schedule = Schedule::new(
        seed,
        &a.faults,
        a.shape.replicas,
        info.max_crashed(a.shape.replicas),
    );
    let until = tokio::time::Instant::now() + a.duration;
    let mut nemesis = Nemesis {
        cluster: &mut cluster,
        durability: a.durability,
        persists: info.persists_state,
        timeline: &mut timeline,
        counts: &faults,
        serve_timeout: a.serve_timeout,
        hosts,
        liveness: &mut liveness,
        rotation: replace_rotation(a).map_err(anyhow::Error::msg)?,
        port_base: ports.as_ref().map(|p| p.base),
    };
    let error = nemesis
        .run(schedule, until)
        .await
        .err()
        .map(|e| format!("{e:#}"));
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    finish_progress(ticker, pb.as_ref());
    if faults.moves.load(Ordering::Relaxed) > 0 {
        clients.renew_last(a, cluster.native_addrs()).await;
    }
    let (keys_read, znode) = clients.final_reads(a, &mut timeline).await;
    drop(clients.last);
    // Its log goes into the history when it is dropped.
    let liveness_text = liveness.summary();
    drop(liveness);
    cluster.stop().await;
    Ok(Run {
        timeline,
        history: clients.rec.history(),
        counts: clients.counts,
        faults,
        keys_read,
        znode,
        locks: clients
            .lock
            .as_deref()
            .map(lock::verdicts)
            .unwrap_or_default(),
        liveness: liveness_text,
        error,
    })
}

/// Stop the progress bar's ticker and clear the bar.
fn finish_progress(
    ticker: Option<tokio::task::JoinHandle<()>>,
    pb: Option<&indicatif::ProgressBar>,
) {
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
}

/// A timeline that also prints its lines above the progress bar.
fn echoing_timeline(pb: &Option<indicatif::ProgressBar>) -> Timeline {
    let echo = pb
        .clone()
        .map(|pb| -> timeline::Echo { Box::new(move |l: &str| pb.println(l)) });
    Timeline::new(Instant::now(), echo)
}

/// The progress bar's ticker: elapsed time, operations and faults.
fn ticker(
    pb: indicatif::ProgressBar,
    counts: &Arc<OpCounts>,
    faults: &Arc<FaultCounts>,
) -> tokio::task::JoinHandle<()> {
    let (counts, faults, start) = (counts.clone(), faults.clone(), tokio::time::Instant::now());
    tokio::spawn(async move {
        loop {
            pb.set_position(start.elapsed().as_millis() as u64);
            pb.set_message(format!("{} ops, {} faults", counts.total(), faults.total()));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The clients of one run, of whichever workload.
struct Clients {
    counts: Arc<OpCounts>,
    rec: Recorder,
    /// `--workload znode`.
    znode: Option<Arc<znode::ZnodeRun>>,
    /// `--workload lock`.
    lock: Option<Arc<lock::LockRun>>,
    /// `--workload kv`: one per --clients (until spawned).
    kv: Vec<Client>,
    /// Reads every key at the end.
    last: Client,
}

/// How every client of the run connects.
fn client_cfg(a: &Args) -> ClientConfig {
    ClientConfig {
        mode: a.client_mode,
        op_timeout: a.op_timeout,
        options: a.shape.opt.clone(),
        ..Default::default()
    }
}

impl Clients {
    /// Connect the workload's clients, and the liveness checker's.
    async fn connect(
        a: &Args,
        addrs: &[std::net::SocketAddr],
        seed: u64,
    ) -> anyhow::Result<(Clients, Liveness)> {
        let counts = Arc::new(OpCounts::default());
        let client_cfg = client_cfg(a);
        let znode = match a.workload == ChaosWorkload::Znode {
            true => Some(znode_run(a, addrs, &client_cfg, seed, &counts).await?),
            false => None,
        };
        let lock = match a.workload {
            ChaosWorkload::Lock => {
                let run = Arc::new(lock::LockRun {
                    endpoints: addrs.to_vec(),
                    cfg: client_cfg.clone(),
                    seed,
                    recipes: a.recipe.clone(),
                    start: tokio::time::Instant::now(),
                    counts: counts.clone(),
                    logs: a.recipe.iter().map(|_| Default::default()).collect(),
                });
                lock::prepare(&run).await?;
                Some(run)
            }
            _ => None,
        };
        let mut kv = Vec::new();
        let kv_clients = match a.workload {
            ChaosWorkload::Kv => a.clients,
            _ => 0,
        };
        for _ in 0..kv_clients + 2 {
            kv.push(Client::connect(addrs.to_vec(), client_cfg.clone()).await?);
        }
        let last = kv.pop().expect("two more than --clients");
        let rec = Recorder::new();
        let liveness = Liveness {
            client: kv.pop().expect("two more than --clients"),
            log: rec.client(a.clients + 1),
            keys: a.keys,
            counts: counts.clone(),
            worst: Default::default(),
        };
        let clients = Clients {
            counts,
            rec,
            znode,
            lock,
            kv,
            last,
        };
        Ok((clients, liveness))
    }

    /// Start every client's loop; they end once `stop` is set.
    fn spawn(
        &mut self,
        a: &Args,
        seed: u64,
        stop: &Arc<AtomicBool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        match (&self.znode, &self.lock) {
            (Some(run), _) => (0..a.clients)
                .map(|id| tokio::spawn(znode::client_loop(run.clone(), id, stop.clone())))
                .collect(),
            (_, Some(run)) => (0..run.recipes.len())
                .flat_map(|r| (0..a.clients).map(move |c| (r, c)))
                .map(|(r, c)| {
                    let id = r as u64 * a.clients + c;
                    tokio::spawn(lock::client_loop(run.clone(), r, id, stop.clone()))
                })
                .collect(),
            _ => (std::mem::take(&mut self.kv).into_iter().enumerate())
                .map(|(i, c)| {
                    let id = i as u64;
                    let log = self.rec.client(id);
                    let (stop, counts) = (stop.clone(), self.counts.clone());
                    let job = workload::client_loop(c, log, id, a.keys, seed, stop, counts);
                    tokio::spawn(job)
                })
                .collect(),
        }
    }

    /// The final reader has been idle since the start, and every replica
    /// it knew may have moved (`move` faults): it starts again from where
    /// they are now, as a client whose endpoints were updated would.
    async fn renew_last(&mut self, a: &Args, addrs: Vec<std::net::SocketAddr>) {
        if let Ok(c) = Client::connect(addrs, client_cfg(a)).await {
            self.last = c;
        }
    }

    /// The final read after the clients stopped: the keys read, and
    /// `--workload znode`'s history and reads answered.
    async fn final_reads(&self, a: &Args, timeline: &mut Timeline) -> (u64, Option<ZnodeResult>) {
        let (keys_read, znode, last_error) = match &self.znode {
            Some(run) => {
                timeline.note("clients stopped; final read of the znode paths".to_string());
                let (read, e) = znode::final_reads(run).await;
                timeline.note(format!(
                    "final read done ({read} of 5 znode reads answered)"
                ));
                (0, Some((run.history.take(), read)), e)
            }
            None if self.lock.is_some() => {
                timeline.note("clients stopped".to_string());
                (0, None, None)
            }
            None => {
                timeline.note(format!("clients stopped; final read of {} keys", a.keys));
                let (read, e) =
                    workload::final_reads(&self.last, &self.rec, a.clients, a.keys, &self.counts)
                        .await;
                timeline.note(format!("final read done ({read} of {} keys read)", a.keys));
                (read, None, e)
            }
        };
        if let Some(e) = last_error {
            timeline.note(format!("a final read failed: {e}"));
        }
        (keys_read, znode)
    }
}

/// Start the cluster on `--port-base`, or on a drawn base (another one
/// if something took a port between the check and the replica's bind).
/// The reservation must outlive the cluster.
async fn start_cluster(
    a: &Args,
    cfg: LocalClusterConfig,
) -> anyhow::Result<(LocalCluster, Option<ports::Ports>)> {
    if !cfg.hosts.is_empty() {
        return Ok((LocalCluster::start(cfg).await?, None));
    }
    let n = a.shape.replicas;
    let moves = a.faults.0.contains(&schedule::FaultKind::Move);
    let mut tried = Vec::new();
    loop {
        let p = match a.port_base {
            Some(base) => ports::given(base, n, moves),
            None => ports::drawn(n, moves, rand_seed(), &tried),
        }
        .map_err(anyhow::Error::msg)?;
        let cfg = LocalClusterConfig {
            port_base: Some(p.base),
            ..cfg.clone()
        };
        match LocalCluster::start(cfg).await {
            Ok(c) => {
                println!("{}", ports::describe(&p, n));
                return Ok((c, Some(p)));
            }
            Err(e) if e.is::<PortTaken>() && p.drawn && tried.len() < 2 => tried.push(p.base),
            Err(e) if e.is::<PortTaken>() => {
                return Err(e.context(format!(
                    "a port of base {} was taken as the replicas started; pick another --port-base",
                    p.base
                )))
            }
            Err(e) => return Err(e),
        }
    }
}

/// The znode clients' shared settings; a session opened (and closed) first
/// says whether the protocol serves znodes at all.
async fn znode_run(
    a: &Args,
    addrs: &[std::net::SocketAddr],
    cfg: &ClientConfig,
    seed: u64,
    counts: &Arc<OpCounts>,
) -> anyhow::Result<Arc<znode::ZnodeRun>> {
    let session_timeout = (a.duration * 3).max(Duration::from_secs(60));
    let probe = quorumkv_node::zk::ZkClient::connect(addrs.to_vec(), cfg.clone(), session_timeout)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "--workload znode: cannot open a session ({e}); it needs a protocol that serves znodes"
            )
        })?;
    let _ = probe.close().await;
    Ok(Arc::new(znode::ZnodeRun {
        endpoints: addrs.to_vec(),
        cfg: cfg.clone(),
        session_timeout,
        seed,
        history: znode::ZnodeHistory::new(),
        counts: counts.clone(),
    }))
}

/// Write the history, check it, print the timeline beside the verdict.
fn finish(a: &Args, seed: u64, run: Run) -> ExitCode {
    let mut history_note = String::new();
    if let Some(path) = &a.history {
        let written = std::fs::File::create(path)
            .map(std::io::BufWriter::new)
            .and_then(|mut w| {
                run.history.write_jsonl(&mut w)?;
                std::io::Write::flush(&mut w)
            });
        history_note = match written {
            Ok(()) => format!(
                "history: {} operations written to {}\n",
                run.history.ops.len(),
                path.display()
            ),
            Err(e) => return setup_error(format!("cannot write {}: {e}", path.display())),
        };
    }
    let opts = quorumkv_check::Options {
        timeout: Some(a.check_timeout),
        ..Default::default()
    };
    let report = quorumkv_check::check_with(&run.history, Model::Kv, opts);
    // The znode history (`--workload znode`), beside the key-value reads
    // of the liveness probe.
    let znode = (run.znode.as_ref()).map(|(ops, _)| {
        let t = Instant::now();
        let (v, why) = quorumkv_check::znode::check_history(ops.clone(), a.check_timeout);
        (v, format!("{why} ({:.1?})", t.elapsed()))
    });
    let znode_line = znode.as_ref().map(|(_, why)| why.as_str());
    let readback =
        (a.workload == ChaosWorkload::Kv).then(|| readback::count(&run.history, a.clients));
    print!(
        "{}",
        render(a, seed, &run, &report, znode_line, readback.as_ref())
    );
    let znode = znode.map(|(v, _)| v);
    print!("{history_note}");
    let verdict = match (report.verdict, znode) {
        (Verdict::Linearizable, Some(z)) => z,
        (v, _) => v,
    };
    // A lock's promise broken, or an acknowledged write lost (the checker
    // says so too), fails the run like a non-linearizable history.
    let lost = readback.is_some_and(|r| r.lost > 0);
    let verdict = match lost || run.locks.iter().any(lock::LockVerdict::broken) {
        true => Verdict::NotLinearizable,
        false => verdict,
    };
    match (verdict, &run.error) {
        (Verdict::NotLinearizable | Verdict::Skipped, _) => ExitCode::from(1),
        (_, Some(e)) => setup_error(format!("the run stopped early: {e}")),
        (Verdict::Linearizable, None) => ExitCode::SUCCESS,
        (Verdict::Unknown, None) => ExitCode::from(2),
    }
}

fn render(
    a: &Args,
    seed: u64,
    run: &Run,
    report: &Report,
    znode: Option<&str>,
    readback: Option<&readback::ReadBack>,
) -> String {
    let mut s = String::from("fault timeline (seconds since the start):\n");
    let failing = report.violation.as_ref().map(|v| {
        let op = &v.ops[v.failing_op];
        let at = Duration::from_nanos(op.ret.unwrap_or(op.call));
        (
            at,
            format!(
                "<- VIOLATION on key {:?}: {} returned here",
                v.key,
                report::op_text(op)
            ),
        )
    });
    s += &run
        .timeline
        .render(failing.as_ref().map(|(at, t)| (*at, t.as_str())));
    let (c, f) = (&run.counts, &run.faults);
    let load = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    s += &format!(
        "faults: {} kill/restart cycles, {} pauses, {} kill-all, {} partitions, {} degraded links, \
         {} voters replaced, {} machines replaced (move)\n",
        load(&f.kills),
        load(&f.pauses),
        load(&f.kill_alls),
        load(&f.partitions),
        load(&f.degrades),
        load(&f.replaces),
        load(&f.moves)
    );
    s += &format!("liveness: {}\n", run.liveness);
    let final_read = match &run.znode {
        Some((ops, read)) => format!(
            "{} znode operations recorded; final read: {read} of 5 znode reads answered",
            ops.len()
        ),
        None if a.workload == ChaosWorkload::Lock => {
            "holds and failed acquisitions (the liveness probe's reads too)".into()
        }
        None => format!("final read of {} of {} keys", run.keys_read, a.keys),
    };
    s += &format!(
        "operations: {} ({} ok, {} failed, {} unknown outcome); {final_read}\n",
        c.total(),
        load(&c.ok),
        load(&c.failed),
        load(&c.unknown),
    );
    if let Some(r) = readback {
        s += &format!("{}\n", r.line(a.keys));
    }
    if let Some(e) = &run.error {
        s += &format!("stopped early: {e}\n");
    }
    s += &format!("verdict: {}", report::verdict_line(report));
    if let Some(v) = &report.violation {
        s += &report::violation_text(v);
        if a.durability == Durability::Memory && load(&f.kill_alls) > 0 {
            s += "(expected: with --durability memory, kill-all loses every acknowledged write)\n";
        }
    }
    if report.verdict == Verdict::Unknown {
        s += &report::keys_text(report, false);
    }
    if let Some(z) = znode {
        s += &format!("znode verdict: {z}\n");
    }
    for l in &run.locks {
        s += &format!("{}\n", l.line());
    }
    s += &replay_line(a, seed);
    s
}

/// How to run the same schedule again.
fn replay_line(a: &Args, seed: u64) -> String {
    let hosts = match a.hosts {
        HostsMode::Netns => " --hosts netns",
        HostsMode::Loopback => "",
    };
    let mut shape = String::new();
    match a.workload {
        ChaosWorkload::Kv => {}
        ChaosWorkload::Znode => shape += " --workload znode",
        ChaosWorkload::Lock => {
            shape += " --workload lock";
            if a.recipe != quorumkv_node::zk_recipes::Recipe::ALL {
                let names: Vec<_> = a.recipe.iter().map(|r| r.name()).collect();
                shape += &format!(" --recipe {}", names.join(","));
            }
        }
    }
    if a.shape.replicas != 3 {
        shape += &format!(" --replicas {}", a.shape.replicas);
    }
    for (k, v) in &a.shape.opt {
        shape += &format!(" --opt {k}={v}");
    }
    format!(
        "replay: quorumkv chaos{hosts} --protocol {}{shape} --faults {} --seed {seed} (timings vary between runs)\n",
        a.shape.protocol, a.faults
    )
}
