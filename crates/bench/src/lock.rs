//! `--workload lock`: seed 001 §IV's lock experiments. Lock requests
//! arrive open loop (exponential inter-arrival, mean `--arrival-ms`); each
//! is served by an idle session of a pool (`--max-outstanding` sessions,
//! pinned round-robin to the servers; an arrival finding none idle is
//! shed) that takes the lock with one recipe of
//! `quorumkv_node::zk_recipes`, holds it for an exponential critical
//! section (mean `--cs-ms`) and releases it.
//!
//! Measured per recipe: acquisitions per second and the acquire latency
//! (arrival to lock held: the seed's "synchronization latency" without the
//! connection set-up, sessions are opened before the run). Every hold
//! records its fencing token (the lock node's czxid) and its enter and exit
//! instants (one clock: every client is in this process). Two holds with
//! different tokens that overlap in real time are reported; tokens that do
//! not grow in the order the holds began are a violation (exit status 1).
//!
//! The workload needs a target whose protocol serves znodes; the bench
//! does not know which do (no protocol names here): it opens a session and
//! reports the server's refusal. A ZooKeeper target (`zk://…`) runs the
//! same recipes over ZooKeeper's client ([`crate::zk::ZkLockSession`]), so
//! the two services are compared on one piece of recipe code.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumkv_node::client::ClientConfig;
use quorumkv_node::tls::ClientTls;
use quorumkv_node::zk::ZkClient;
pub use quorumkv_node::zk_recipes::Recipe;
use quorumkv_node::zk_recipes::{self, LockClient};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[cfg(feature = "zookeeper")]
use crate::config::DeploySpec;
pub use crate::config::LockConfig;
use crate::config::{BenchConfig, Length};
use crate::report::write_csv_json;
use crate::sweep::{each_deployment, finish};
use crate::target::{pinned_order, Deployment};
use crate::workload::Rng;

/// One hold of the lock, instants from the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub token: u64,
    pub enter: Duration,
    pub exit: Duration,
}

/// What the fencing-token check found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exclusion {
    /// Pairs of holds with different tokens that overlap in real time.
    pub overlaps: u64,
    /// Holds whose token is not larger than the one of the hold that began
    /// before (tokens must grow with the order of acquisition).
    pub order_violations: u64,
    /// The first problem, in words.
    pub first: Option<String>,
}

impl Exclusion {
    pub fn violated(&self) -> bool {
        self.order_violations > 0
    }
}

/// Check the holds of one lock (`quorumkv_check::znode::check_lock`): in
/// the order they began, tokens grow; and no two overlap in real time.
pub fn check_exclusion(holds: &[Hold]) -> Exclusion {
    use quorumkv_check::znode::{check_lock, Holding, LockViolation};
    let micros = |d: Duration| d.as_micros() as u64;
    let holdings: Vec<Holding> = (holds.iter())
        .map(|h| Holding {
            client: 0,
            token: h.token,
            acquired: micros(h.enter),
            released: Some(micros(h.exit)),
        })
        .collect();
    let mut ex = Exclusion::default();
    for v in check_lock(&holdings, true) {
        match v {
            LockViolation::Overlap(..) => ex.overlaps += 1,
            _ => ex.order_violations += 1,
        }
        ex.first.get_or_insert_with(|| v.to_string());
    }
    ex
}

/// Acquire latency in milliseconds (nearest-rank percentiles).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockLatency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LockLatency {
    pub fn of(samples: &[Duration]) -> LockLatency {
        if samples.is_empty() {
            return LockLatency::default();
        }
        let mut v: Vec<f64> = samples.iter().map(|&d| ms(d)).collect();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        LockLatency {
            count: v.len() as u64,
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
            p50_ms: rank(0.50),
            p90_ms: rank(0.90),
            p99_ms: rank(0.99),
            max_ms: v[v.len() - 1],
        }
    }
}

/// One recipe on one deployment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockResult {
    pub target: String,
    pub replicas: usize,
    pub recipe: Recipe,
    pub rtt_client_ms: f64,
    pub rtt_peer_ms: f64,
    pub rtt_jitter_ms: f64,
    pub arrival_ms: f64,
    pub cs_ms: f64,
    pub poll_ms: f64,
    pub sessions: usize,
    /// Independent locks (`--locks`); the exclusion check is per lock.
    #[serde(default = "one")]
    pub locks: usize,
    /// Measured time (after the warm-up).
    pub seconds: f64,
    /// Acquisitions that began after the warm-up and completed.
    pub acquisitions: u64,
    pub acq_per_s: f64,
    pub latency: LockLatency,
    /// Acquisitions that failed (timeout, error) and arrivals shed (no idle
    /// session).
    pub failed: u64,
    pub shed: u64,
    /// Every hold of the run, the warm-up included, checked.
    pub holds: u64,
    pub exclusion: Exclusion,
    /// Why the point stopped early or what went wrong, if anything.
    pub note: Option<String>,
}

fn one() -> usize {
    1
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A session of the pool and its watch events.
struct Session<C: LockClient> {
    zk: C,
    events: C::Events,
}

/// What the arrivals' tasks share.
#[derive(Default)]
struct Shared {
    /// Per lock.
    holds: Vec<Vec<Hold>>,
    /// Latencies of acquisitions that arrived after the warm-up.
    latencies: Vec<Duration>,
    failed: u64,
    errors: Vec<String>,
}

/// Opens a session with our service; a refusal names why (a protocol
/// without znodes).
async fn open(
    endpoints: Vec<SocketAddr>,
    (cfg, tls): (&BenchConfig, Option<ClientTls>),
    lock: &LockConfig,
) -> Result<Session<ZkClient>, String> {
    let ccfg = ClientConfig {
        op_timeout: cfg.op_timeout,
        tls,
        ..Default::default()
    };
    let zk = ZkClient::connect(endpoints, ccfg, lock.session_timeout)
        .await
        .map_err(|e| format!("cannot open a session: {e}"))?;
    let events = zk.watches().ok_or("no watch stream")?;
    Ok(Session { zk, events })
}

/// Opens a session with ZooKeeper server `host`.
#[cfg(feature = "zookeeper")]
async fn open_zookeeper(
    host: &str,
    lock: &LockConfig,
) -> Result<Session<crate::zk::ZkLockSession>, String> {
    let zk = crate::zk::ZkLockSession::connect(host, lock.session_timeout)
        .await
        .map_err(|e| format!("cannot open a session: {e:#}"))?;
    Ok(Session { zk, events: () })
}

/// A name no earlier run on the same cluster used.
fn run_tag(cfg: &BenchConfig, point: usize) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms}-{}-{point}", cfg.seed)
}

/// Run `recipe` on `d`; `Err` when the target cannot serve locks at all.
pub async fn run_lock_point(
    cfg: &BenchConfig,
    d: &Deployment,
    point: usize,
    recipe: Recipe,
) -> Result<LockResult, String> {
    let lock = &cfg.lock;
    let label = d.spec.label();
    let n = cfg.max_outstanding;
    #[cfg(feature = "zookeeper")]
    if let DeploySpec::Zookeeper { endpoints, .. } = &d.spec {
        let setup = open_zookeeper(&endpoints[0], lock)
            .await
            .map_err(|e| format!("{label}: {e}"))?;
        let mut pool = Vec::with_capacity(n);
        for k in 0..n {
            let host = &pinned_order(endpoints, k)[0];
            pool.push(open_zookeeper(host, lock).await?);
        }
        return measure(cfg, d, point, recipe, setup, pool).await;
    }
    let endpoints = d.native_endpoints().to_vec();
    if endpoints.is_empty() {
        return Err(format!(
            "{label}: the lock workload needs a quorumkv or ZooKeeper target \
             (local, quorumkv://, zk://)"
        ));
    }
    let setup = open(endpoints.clone(), (cfg, d.client_tls()), lock)
        .await
        .map_err(|e| {
            format!("{label}: {e} (the lock workload needs a protocol that serves znodes)")
        })?;
    // The pool, pinned round-robin to the servers.
    let mut pool = Vec::with_capacity(n);
    for k in 0..n {
        pool.push(open(pinned_order(&endpoints, k), (cfg, d.client_tls()), lock).await?);
    }
    measure(cfg, d, point, recipe, setup, pool).await
}

/// The lock paths of one point, one per lock, under a directory no
/// earlier run used (`tag`); the directories are created.
async fn lock_paths<C: LockClient>(
    setup: &Session<C>,
    label: &str,
    recipe: Recipe,
    locks: usize,
    tag: &str,
) -> Result<Vec<String>, String> {
    let root = "/quorumkv-bench-locks";
    let dir = format!("{root}/{}-{tag}", recipe.name());
    let ensure = async |p: &str| {
        (setup.zk.ensure_dir(p))
            .await
            .map_err(|e| format!("{label}: cannot create {p}: {e}"))
    };
    ensure(root).await?;
    ensure(&dir).await?;
    let mut paths = Vec::with_capacity(locks);
    for k in 0..locks {
        // One lock: the seed's names; more: one directory each.
        let base = match locks {
            1 => dir.clone(),
            _ => format!("{dir}/{k}"),
        };
        if base != dir {
            ensure(&base).await?;
        }
        paths.push(match recipe.is_queue() {
            true => base,
            false => format!("{base}/tas"),
        });
    }
    Ok(paths)
}

/// How long a lock point measures.
fn measured_time(cfg: &BenchConfig) -> Duration {
    match cfg.length {
        Length::Duration(t) => t,
        // Open loop: a count per client has no meaning; as long as the
        // arrivals it takes on average.
        Length::OpsPerClient(k) => cfg.lock.arrival * k as u32,
    }
}

/// What the arrivals of one point share.
struct Point<C: LockClient> {
    recipe: Recipe,
    poll: Duration,
    acquire_timeout: Duration,
    /// One per lock.
    paths: Vec<String>,
    start: Instant,
    /// Arrivals from here on are measured.
    measured_from: Instant,
    /// The idle sessions.
    pool: Mutex<Vec<Session<C>>>,
    shared: Mutex<Shared>,
}

impl<C: LockClient> Point<C> {
    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("no poisoning")
    }

    /// One arrival on session `s`: acquire lock `which`, hold it for `cs`,
    /// release it and give the session back (or close it on a failure, so
    /// that its node, or its creates, cannot block the others).
    async fn serve(
        self: Arc<Self>,
        mut s: Session<C>,
        which: usize,
        arrived: Instant,
        cs: Duration,
    ) {
        let path = &self.paths[which];
        let got = zk_recipes::acquire(self.recipe, &s.zk, path, self.poll, &mut s.events);
        let (held, at) = match tokio::time::timeout(self.acquire_timeout, got).await {
            Ok(Ok(h)) => h,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no lock after {:?}", self.acquire_timeout),
                };
                {
                    let mut sh = self.shared();
                    sh.failed += u64::from(arrived >= self.measured_from);
                    sh.errors.push(why);
                }
                s.zk.close().await;
                return;
            }
        };
        // Tokio's timer rounds a sleep up to its next millisecond:
        // no sleep at all for a zero critical section.
        if !cs.is_zero() {
            tokio::time::sleep(cs).await;
        }
        let exit = Instant::now();
        {
            let mut sh = self.shared();
            sh.holds[which].push(Hold {
                token: held.token,
                enter: at - self.start,
                exit: exit - self.start,
            });
            if arrived >= self.measured_from {
                sh.latencies.push(at - arrived);
            }
        }
        match zk_recipes::release(&s.zk, &held).await {
            Ok(()) => self.pool.lock().expect("no poisoning").push(s),
            Err(e) => {
                self.shared().errors.push(e.to_string());
                s.zk.close().await;
            }
        }
    }

    /// Open-loop arrivals until `end`, each served by an idle session;
    /// returns how many measured arrivals found none (shed).
    async fn arrivals(self: &Arc<Self>, lock: &LockConfig, rng: &mut Rng, end: Instant) -> u64 {
        let mut next = self.start;
        let mut shed = 0u64;
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            next += Duration::from_secs_f64(rng.exp(lock.arrival.as_secs_f64()));
            if next >= end || crate::runner::interrupted() {
                break;
            }
            tokio::time::sleep_until(next).await;
            let cs = Duration::from_secs_f64(rng.exp(lock.cs.as_secs_f64()));
            let Some(s) = self.pool.lock().expect("no poisoning").pop() else {
                if next >= self.measured_from {
                    shed += 1;
                }
                continue;
            };
            // One lock draws nothing: the arrivals stay those of earlier runs.
            let which = match lock.locks {
                1 => 0,
                k => rng.below(k as u64) as usize,
            };
            tasks.spawn(self.clone().serve(s, which, next, cs));
        }
        // The acquisitions under way finish (or time out).
        while tasks.join_next().await.is_some() {}
        shed
    }
}

/// The open-loop run of one point on an opened pool of sessions.
async fn measure<C: LockClient>(
    cfg: &BenchConfig,
    d: &Deployment,
    point: usize,
    recipe: Recipe,
    setup: Session<C>,
    pool: Vec<Session<C>>,
) -> Result<LockResult, String> {
    let lock = &cfg.lock;
    let label = d.spec.label();
    let sessions = pool.len();
    let paths = lock_paths(&setup, &label, recipe, lock.locks, &run_tag(cfg, point)).await?;
    let measure = measured_time(cfg);
    let start = Instant::now();
    let p = Arc::new(Point {
        recipe,
        poll: lock.poll,
        acquire_timeout: lock.acquire_timeout,
        paths,
        start,
        measured_from: start + cfg.warmup,
        pool: Mutex::new(pool),
        shared: Mutex::new(Shared {
            holds: vec![Vec::new(); lock.locks],
            ..Shared::default()
        }),
    });
    let mut rng = Rng::derive(cfg.seed, point as u64, 0x10c);
    let shed = p.arrivals(lock, &mut rng, p.measured_from + measure).await;
    let idle: Vec<Session<C>> = std::mem::take(&mut *p.pool.lock().expect("no poisoning"));
    for s in idle {
        s.zk.close().await;
    }
    setup.zk.close().await;
    let sh = std::mem::take(&mut *p.shared());
    let seconds = measure.as_secs_f64();
    Ok(lock_result(cfg, d, recipe, seconds, sessions, shed, sh))
}

/// The result of a point from what its arrivals recorded.
fn lock_result(
    cfg: &BenchConfig,
    d: &Deployment,
    recipe: Recipe,
    seconds: f64,
    sessions: usize,
    shed: u64,
    sh: Shared,
) -> LockResult {
    let lock = &cfg.lock;
    let exclusion = (sh.holds.iter()).fold(Exclusion::default(), |mut all, h| {
        let one = check_exclusion(h);
        all.overlaps += one.overlaps;
        all.order_violations += one.order_violations;
        all.first = all.first.or(one.first);
        all
    });
    let note = sh.errors.first().map(|e| {
        format!(
            "{} acquisitions or releases failed, first: {e}",
            sh.errors.len()
        )
    });
    LockResult {
        target: d.spec.label(),
        replicas: d.replicas,
        recipe,
        rtt_client_ms: ms(cfg.rtt.client),
        rtt_peer_ms: ms(cfg.rtt.peer),
        rtt_jitter_ms: ms(cfg.rtt.jitter),
        arrival_ms: ms(lock.arrival),
        cs_ms: ms(lock.cs),
        poll_ms: ms(lock.poll),
        sessions,
        locks: lock.locks,
        seconds,
        acquisitions: sh.latencies.len() as u64,
        acq_per_s: sh.latencies.len() as f64 / seconds,
        latency: LockLatency::of(&sh.latencies),
        failed: sh.failed,
        shed,
        holds: sh.holds.iter().map(|h| h.len() as u64).sum(),
        exclusion,
        note,
    }
}

/// The lock sweep: every deployment of the matrix, every recipe on each.
/// Exit 0 = done; 1 = a token order violated, or the run ended early;
/// 2 = nothing could start (bad target, a protocol without znodes).
pub fn run(cfg: &BenchConfig, rt: &tokio::runtime::Runtime) -> std::process::ExitCode {
    let write = |dir: &std::path::Path, results: &[LockResult], incomplete: bool| match write_files(
        dir, cfg, results, incomplete,
    ) {
        Ok(()) => Ok(format!(
            "wrote lock.csv and lock.json to {}/",
            dir.display()
        )),
        Err(e) => Err(format!("cannot write results to {}: {e}", dir.display())),
    };
    let violated = |results: &[LockResult]| {
        let mut bad = false;
        for r in results {
            if r.exclusion.overlaps > 0 || r.exclusion.violated() {
                eprintln!(
                    "quorumkv bench: {} {}: {} overlapping holds, {} token order violations; first: {}",
                    r.target,
                    r.recipe,
                    r.exclusion.overlaps,
                    r.exclusion.order_violations,
                    r.exclusion.first.as_deref().unwrap_or("-")
                );
            }
            bad |= r.exclusion.violated();
        }
        bad
    };
    finish(cfg, rt.block_on(sweep(cfg)), table, write, violated)
}

/// Runs the points; `Err` = nothing could start. A point that cannot run
/// (its protocol serves no znodes) is such an error: one line.
async fn sweep(cfg: &BenchConfig) -> Result<(Vec<LockResult>, Option<String>), String> {
    let mut point = 0;
    each_deployment(
        cfg,
        async |d: &Deployment, results: &mut Vec<LockResult>| {
            for &recipe in &cfg.lock.recipes {
                eprintln!(
                    "quorumkv bench: {} N={} recipe {recipe} …",
                    d.spec.label(),
                    d.replicas
                );
                results.push(run_lock_point(cfg, d, point, recipe).await?);
                point += 1;
                if crate::runner::interrupted() {
                    break;
                }
            }
            Ok(())
        },
    )
    .await
}

const CSV_HEADER: &str = "target,replicas,recipe,rtt_client_ms,rtt_peer_ms,rtt_jitter_ms,\
arrival_ms,cs_ms,poll_ms,sessions,locks,seconds,acquisitions,acq_per_s,mean_ms,p50_ms,p90_ms,p99_ms,\
max_ms,failed,shed,holds,overlaps,order_violations,note";

/// One line per point, the columns of [`CSV_HEADER`].
pub fn to_csv(results: &[LockResult]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in results {
        let l = &r.latency;
        let note = r.note.as_deref().unwrap_or("").replace(['"', '\n'], "'");
        out += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{},\"{note}\"\n",
            r.target,
            r.replicas,
            r.recipe,
            r.rtt_client_ms,
            r.rtt_peer_ms,
            r.rtt_jitter_ms,
            r.arrival_ms,
            r.cs_ms,
            r.poll_ms,
            r.sessions,
            r.locks,
            r.seconds,
            r.acquisitions,
            r.acq_per_s,
            l.mean_ms,
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.max_ms,
            r.failed,
            r.shed,
            r.holds,
            r.exclusion.overlaps,
            r.exclusion.order_violations,
        );
    }
    out
}

/// `lock.csv` and `lock.json` in `dir`.
pub fn write_files(
    dir: &std::path::Path,
    cfg: &BenchConfig,
    results: &[LockResult],
    incomplete: bool,
) -> std::io::Result<()> {
    write_csv_json(dir, "lock", to_csv(results), cfg, results, incomplete)
}

/// The table printed at the end: one row per point.
pub fn table(results: &[LockResult]) -> String {
    let mut s = format!(
        "{:<16} {:>2} {:<11} {:>7} {:>7} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6} {:>5} {:>8}\n",
        "target",
        "N",
        "recipe",
        "rtt-c",
        "rtt-p",
        "acq",
        "acq/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "failed",
        "shed",
        "overlaps"
    );
    for r in results {
        let l = &r.latency;
        s += &format!(
            "{:<16} {:>2} {:<11} {:>7} {:>7} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6} {:>5} {:>8}\n",
            r.target,
            r.replicas,
            r.recipe.name(),
            format!("{}ms", r.rtt_client_ms),
            format!("{}ms", r.rtt_peer_ms),
            r.acquisitions,
            r.acq_per_s,
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            r.failed,
            r.shed,
            r.exclusion.overlaps,
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(token: u64, enter: u64, exit: u64) -> Hold {
        Hold {
            token,
            enter: Duration::from_millis(enter),
            exit: Duration::from_millis(exit),
        }
    }

    #[test]
    fn disjoint_holds_with_growing_tokens_pass() {
        let ex = check_exclusion(&[h(7, 20, 30), h(3, 0, 10), h(9, 30, 31)]);
        assert_eq!(ex, Exclusion::default());
        assert!(!ex.violated());
    }

    #[test]
    fn overlaps_and_token_order_are_found() {
        // 5 begins inside 3's hold (which outlasts 4's): an overlap.
        let ex = check_exclusion(&[h(3, 0, 100), h(4, 10, 20), h(5, 50, 60)]);
        assert_eq!(ex.overlaps, 2);
        assert_eq!(ex.order_violations, 0);
        assert!(ex.first.unwrap().contains("token 4"));
        // A smaller token after a larger one: the order is violated.
        let ex = check_exclusion(&[h(8, 0, 10), h(6, 20, 30)]);
        assert_eq!((ex.overlaps, ex.order_violations), (0, 1));
        assert!(ex.violated());
        // Two holds of one token (a duplicate grant) too.
        let ex = check_exclusion(&[h(8, 0, 10), h(8, 20, 30)]);
        assert_eq!(ex.order_violations, 1);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let l = LockLatency::of(&v);
        assert_eq!(
            (l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(l.count, 100);
        assert_eq!(LockLatency::of(&[]), LockLatency::default());
    }

    #[test]
    fn recipes_parse_by_name() {
        for r in Recipe::ALL {
            assert_eq!(r.name().parse::<Recipe>(), Ok(r));
        }
        assert!("mcs".parse::<Recipe>().unwrap_err().contains("async-queue"));
    }
}
