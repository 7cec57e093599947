//! Runs one point: preload, warm-up, measurement (closed or open loop),
//! CPU accounting, history check. A watchdog ends the point early when the
//! target stops answering and is found dead.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quorumkv_check::recorder::Recorder;

use crate::config::{BenchConfig, Length, Sharing, Workload};
use crate::durability::SyncCounters;
use crate::report::PointResult;
use crate::stats::{throughput, LatencySummary, OpKind, Stats};
use crate::target::{Conn, Deployment};
use crate::verify::{check_history, Log};
use crate::workload::{dedicated_reader, make_value, next_op, GenOp, KeyChooser, KeySpace, Rng};

/// Set by Ctrl-C (see `cli::run`): the current point stops at once and the
/// sweep ends with what was measured.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// True once the user asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// Shared state of one point's clients.
struct Shared {
    phase: AtomicU8,
    /// Set when the target was found dead: clients stop at once.
    abort: AtomicBool,
    /// Successful operations so far (watchdog and progress).
    ok: AtomicU64,
    failed: AtomicU64,
    /// Closed-loop clients that have finished (ops mode ends when all have).
    finished: AtomicU64,
    /// Measured operations the point will issue in ops mode, for progress.
    planned: Option<u64>,
    keys: KeySpace,
    chooser: KeyChooser,
    /// The workload's GET fraction (open loop; closed-loop clients have their own).
    get_fraction: f64,
    value_size: usize,
    op_timeout: Duration,
    think: Option<(Duration, Duration)>,
}

impl Shared {
    fn new(cfg: &BenchConfig, index: usize, w: &Workload) -> Shared {
        Shared {
            phase: AtomicU8::new(WARMUP),
            abort: AtomicBool::new(false),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            planned: match cfg.length {
                Length::OpsPerClient(n) => Some(
                    n * if w.rate.is_some() {
                        cfg.max_outstanding
                    } else {
                        w.clients
                    } as u64,
                ),
                Length::Duration(_) => None,
            },
            keys: KeySpace::new(index, w.keys),
            chooser: KeyChooser::new(w.distribution, w.keys),
            get_fraction: w.get_fraction,
            value_size: w.value_size,
            op_timeout: cfg.op_timeout,
            think: cfg.think,
        }
    }

    fn phase(&self) -> u8 {
        if self.abort.load(Ordering::Relaxed) || interrupted() {
            STOP
        } else {
            self.phase.load(Ordering::Acquire)
        }
    }
}

/// Reports a point's progress in [0, 1].
pub type Progress<'a> = &'a (dyn Fn(f64) + Sync);

/// What running a point produced.
pub struct PointRun {
    pub result: PointResult,
    /// The target died during the point; the sweep must end.
    pub target_died: bool,
}

/// What a point's measurement needs, whichever loop runs it.
struct PointCtx<'a> {
    cfg: &'a BenchConfig,
    d: &'a Deployment,
    sh: &'a Arc<Shared>,
    rec: Option<&'a Recorder>,
    /// The point's number in the sweep.
    index: usize,
    /// The servers' processes, for their CPU time.
    pids: &'a [u32],
    started: Instant,
    progress: Progress<'a>,
}

/// What a measurement produced.
struct Measured {
    stats: Stats,
    /// CPU seconds (servers, this bench process) spent while measuring.
    cpu: (Option<f64>, Option<f64>),
    elapsed: Duration,
    died: bool,
    /// The target's sync counters when measuring began.
    syncs_before: Option<SyncCounters>,
}

/// Runs workload `w` (point number `index` of the sweep) against `d`.
pub async fn run_point(
    cfg: &BenchConfig,
    d: &Deployment,
    index: usize,
    w: &Workload,
    progress: Progress<'_>,
) -> PointRun {
    let shared = Arc::new(Shared::new(cfg, index, w));
    let recorder = cfg.check.then(Recorder::new);
    let mut result = PointResult::new(d, w, cfg);

    // Pinned: client c's proxy is server c mod N (`connections`).
    let servers = d.pins_clients().then_some(d.replicas);
    let conns = match connections(d, cfg.sharing, w.clients, servers).await {
        Ok(c) => c,
        Err(e) => return died(result, format!("cannot connect: {e:#}")),
    };
    if cfg.preload {
        if let Err(e) = preload(&shared, &conns, recorder.as_ref(), w.value_size).await {
            let alive = d.alive().await;
            result.note = Some(format!("preload failed: {e}"));
            return PointRun {
                result,
                target_died: !alive,
            };
        }
    }

    let pids = d.pids();
    let ctx = PointCtx {
        cfg,
        d,
        sh: &shared,
        rec: recorder.as_ref(),
        index,
        pids: &pids,
        started: Instant::now(),
        progress,
    };
    let m = match w.rate {
        None => closed_loop(&ctx, &conns, w, servers, &mut result).await,
        Some(rate) => open_loop(&ctx, conns, rate).await,
    };

    result.fill(&m.stats, m.elapsed, m.cpu);
    if !m.died {
        sync_rates(&mut result, d, m.syncs_before, m.elapsed).await;
    }
    if let Some(rec) = recorder {
        check(&mut result, cfg, d, index, rec).await;
    }
    if m.died {
        result.note = Some("target died during this point; measured until then".into());
    } else if interrupted() {
        result.note = Some("interrupted during this point; measured until then".into());
    }
    PointRun {
        result,
        target_died: m.died,
    }
}

/// The closed loop: `w.clients` logical clients, each with at most one
/// operation outstanding. Sets each server's PUTs in `result` when clients
/// are pinned to `servers` servers.
async fn closed_loop(
    ctx: &PointCtx<'_>,
    conns: &[Conn],
    w: &Workload,
    servers: Option<usize>,
    result: &mut PointResult,
) -> Measured {
    let cfg = ctx.cfg;
    let ops_per_client = match cfg.length {
        Length::OpsPerClient(n) => Some(n),
        Length::Duration(_) => None,
    };
    let mut handles = Vec::with_capacity(w.clients);
    for c in 0..w.clients {
        let sh = ctx.sh.clone();
        let conn = conns[c % conns.len()].clone();
        let log = Log::new(ctx.rec, c as u64);
        let rng = Rng::derive(cfg.seed, ctx.index as u64, c as u64);
        let me = ClientSpec {
            id: c as u64,
            get_fraction: client_get_fraction(cfg, w, c),
            ops: ops_per_client,
        };
        handles.push(tokio::spawn(closed_client(sh, conn, log, rng, me)));
    }
    let all = async {
        let mut outs = Vec::new();
        for h in handles {
            outs.push(h.await.expect("client task panicked"));
        }
        outs
    };
    let (drv, outs) = tokio::join!(drive(ctx, w.clients as u64), all);
    let mut stats = Stats::new();
    let mut last = drv.measure_start;
    let mut per_server = vec![0; servers.unwrap_or(0)];
    for (c, (s, l)) in outs.iter().enumerate() {
        stats.merge(s);
        last = last.max(*l);
        if let Some(n) = servers {
            per_server[c % n] += s.ok_put;
        }
    }
    result.server_puts = per_server;
    let elapsed = last.duration_since(drv.measure_start);
    drv.measured(ctx.pids, stats, elapsed)
}

/// Sync and record rates of the measured time. Writes stop with the
/// measurement, so the counters' difference over it is the rate (the
/// readings bracket it closely).
async fn sync_rates(
    result: &mut PointResult,
    d: &Deployment,
    before: Option<SyncCounters>,
    elapsed: Duration,
) {
    let Some(before) = before else { return };
    if let Some(after) = d.sync_counters().await {
        let (syncs, records) = after.rates_since(&before, elapsed.as_secs_f64());
        result.syncs_per_s = Some(syncs);
        result.records_per_s = records;
        result.sync_us_avg = after.mean_sync_us_since(&before);
        if let Some(p) = d.spec.protocol() {
            result.ratios = crate::durability::point_ratios(p.info().point_ratios, &before, &after);
        }
    }
}

/// Checks the point's history for linearizability; a failing history is
/// written next to the results, for `quorumkv check` and its picture.
async fn check(
    result: &mut PointResult,
    cfg: &BenchConfig,
    d: &Deployment,
    index: usize,
    rec: Recorder,
) {
    let history = rec.history();
    let verdict = check_history(history.clone(), cfg.check_timeout).await;
    if verdict != "ok" {
        if let Some(dir) = &cfg.out {
            let path = dir.join(format!("history_{index}.jsonl"));
            match std::fs::write(&path, history.to_jsonl()) {
                Ok(()) => result.note = Some(format!("history in {}", path.display())),
                Err(e) => result.note = Some(format!("cannot write {}: {e}", path.display())),
            }
        }
    }
    if verdict.starts_with("VIOLATION") {
        if let Some(why) = d.spec.weaker_reads() {
            result.note = Some(match result.note.take() {
                Some(n) => format!("{why}; {n}"),
                None => why.to_string(),
            });
        }
    }
    result.check = Some(verdict);
}

fn died(mut result: PointResult, why: String) -> PointRun {
    result.note = Some(why);
    PointRun {
        result,
        target_died: true,
    }
}

/// One shared connection-level client, or one per logical client; pinned
/// to `servers` servers, connection j's proxy is server j mod N.
async fn connections(
    d: &Deployment,
    sharing: Sharing,
    slots: usize,
    servers: Option<usize>,
) -> anyhow::Result<Vec<Conn>> {
    let n = conn_count(sharing, slots, servers);
    let mut v = Vec::with_capacity(n);
    for j in 0..n {
        v.push(d.connect_pinned(j).await?);
    }
    Ok(v)
}

/// How many connection-level clients a point opens. Logical client c uses
/// connection c mod count, so with `servers` = N its server is c mod N
/// either way: shared, one per server; per-client, one each.
pub fn conn_count(sharing: Sharing, slots: usize, servers: Option<usize>) -> usize {
    match sharing {
        Sharing::Shared => servers.unwrap_or(1),
        Sharing::PerClient => slots,
    }
}

/// The GET fraction of closed-loop client `c`: the workload's, or with
/// `--dedicated-clients` 1 (a reader) or 0 (a writer).
fn client_get_fraction(cfg: &BenchConfig, w: &Workload, c: usize) -> f64 {
    if !cfg.dedicated {
        return w.get_fraction;
    }
    match dedicated_reader(c, w.clients, w.get_fraction) {
        true => 1.0,
        false => 0.0,
    }
}

/// Who a closed-loop client is.
struct ClientSpec {
    id: u64,
    get_fraction: f64,
    /// Measured operations to issue (ops mode), or until stopped.
    ops: Option<u64>,
}

/// Writes every key once, 32 at a time, as extra logical clients.
async fn preload(
    sh: &Arc<Shared>,
    conns: &[Conn],
    rec: Option<&Recorder>,
    size: usize,
) -> Result<(), String> {
    let workers = 32.min(sh.keys.len());
    let mut handles = Vec::new();
    for wkr in 0..workers {
        let sh = sh.clone();
        let mut conn = conns[wkr % conns.len()].clone();
        let client = 1_000_000 + wkr as u64;
        let mut log = Log::new(rec, client);
        handles.push(tokio::spawn(async move {
            let mut i = wkr;
            while i < sh.keys.len() {
                let key = sh.keys.name(i).clone();
                let value = make_value(client, i as u64, size);
                let h = log.invoke_put(&key, &value);
                let r = conn.put(key, value, sh.op_timeout).await;
                log.complete_put(h, &r);
                r.map_err(|f| f.reason)?;
                i += workers;
            }
            Ok::<(), String>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One closed-loop logical client: at most one operation outstanding.
/// Returns its stats and the time its last measured operation completed.
async fn closed_client(
    sh: Arc<Shared>,
    mut conn: Conn,
    mut log: Log,
    mut rng: Rng,
    me: ClientSpec,
) -> (Stats, Instant) {
    let (id, ops) = (me.id, me.ops);
    let mut stats = Stats::new();
    let mut last = Instant::now();
    let mut measured = 0u64;
    let mut seq = 0u64;
    loop {
        let phase = sh.phase();
        if phase == STOP || (phase == MEASURE && ops.is_some_and(|n| measured >= n)) {
            break;
        }
        let op = next_op(&mut rng, &sh.chooser, me.get_fraction);
        seq += 1;
        let t0 = Instant::now();
        let r = issue(&sh, &mut conn, &mut log, op, id, seq).await;
        let now = Instant::now();
        if phase == MEASURE {
            measured += 1;
            last = now;
        }
        let failed = r.is_err();
        count(&sh, &mut stats, r, now - t0, phase == MEASURE);
        if let Some((lo, hi)) = sh.think {
            let t = lo + (hi - lo).mul_f64(rng.next_f64());
            tokio::time::sleep(t).await;
        } else if failed {
            // A dead target fails operations without ever blocking; yield so
            // the driver, its timers and the watchdog keep running.
            tokio::task::yield_now().await;
        }
    }
    sh.finished.fetch_add(1, Ordering::Release);
    (stats, last)
}

/// Issues one operation and records it in the history.
async fn issue(
    sh: &Shared,
    conn: &mut Conn,
    log: &mut Log,
    op: GenOp,
    id: u64,
    seq: u64,
) -> Result<OpKind, String> {
    match op {
        GenOp::Get { key } => {
            let key = sh.keys.name(key).clone();
            let h = log.invoke_get(&key);
            let r = conn.get(key, sh.op_timeout).await;
            log.complete_get(h, &r);
            r.map(|_| OpKind::Get).map_err(|f| f.reason)
        }
        GenOp::Put { key } => {
            let key = sh.keys.name(key).clone();
            let value: Bytes = make_value(id, seq, sh.value_size);
            let h = log.invoke_put(&key, &value);
            let r = conn.put(key, value, sh.op_timeout).await;
            log.complete_put(h, &r);
            r.map(|()| OpKind::Put).map_err(|f| f.reason)
        }
    }
}

/// Counts an operation for the watchdog, and in `stats` when it is measured.
fn count(
    sh: &Shared,
    stats: &mut Stats,
    r: Result<OpKind, String>,
    latency: Duration,
    measured: bool,
) {
    match r {
        Ok(kind) => {
            sh.ok.fetch_add(1, Ordering::Relaxed);
            if measured {
                stats.record_ok(kind, latency);
            }
        }
        Err(reason) => {
            sh.failed.fetch_add(1, Ordering::Relaxed);
            if measured {
                stats.record_fail(&reason);
            }
        }
    }
}

/// What the driver saw: when measuring began, CPU at that time, death.
struct Drive {
    measure_start: Instant,
    /// CPU seconds of the servers and of this process when measuring began.
    cpu_before: (Option<f64>, Option<f64>),
    /// The target's sync counters when measuring began.
    syncs_before: Option<SyncCounters>,
    died: bool,
}

impl Drive {
    /// The measurement's outcome: `stats` over `elapsed`.
    fn measured(self, pids: &[u32], stats: Stats, elapsed: Duration) -> Measured {
        Measured {
            stats,
            cpu: self.cpu_after(pids),
            elapsed,
            died: self.died,
            syncs_before: self.syncs_before,
        }
    }

    /// CPU seconds (servers, this bench process) spent while measuring.
    fn cpu_after(&self, pids: &[u32]) -> (Option<f64>, Option<f64>) {
        let (servers, me) = cpu_now(pids);
        (
            servers.zip(self.cpu_before.0).map(|(a, b)| a - b),
            me.zip(self.cpu_before.1).map(|(a, b)| a - b),
        )
    }
}

/// Runs the phases of a point: warm-up, measurement, stop; reports progress
/// and watches the target.
async fn drive(ctx: &PointCtx<'_>, clients: u64) -> Drive {
    let (cfg, d, sh, pids) = (ctx.cfg, ctx.d, &**ctx.sh, ctx.pids);
    let (started, progress) = (ctx.started, ctx.progress);
    let tick = Duration::from_millis(100);
    let mut dog = Watchdog::new(cfg.op_timeout);
    while started.elapsed() < cfg.warmup && !interrupted() {
        tokio::time::sleep(tick).await;
        if dog.dead(d, sh).await {
            sh.abort.store(true, Ordering::Relaxed);
            return Drive {
                measure_start: Instant::now(),
                cpu_before: (None, None),
                syncs_before: None,
                died: true,
            };
        }
    }
    let syncs_before = d.sync_counters().await;
    let cpu_before = cpu_now(pids);
    let measure_start = Instant::now();
    let done_before = sh.ok.load(Ordering::Relaxed) + sh.failed.load(Ordering::Relaxed);
    sh.phase.store(MEASURE, Ordering::Release);
    let mut died = false;
    loop {
        tokio::time::sleep(tick).await;
        let frac = match (cfg.length, sh.planned) {
            (Length::Duration(dur), _) => measure_start.elapsed().as_secs_f64() / dur.as_secs_f64(),
            (_, Some(n)) => {
                let done =
                    sh.ok.load(Ordering::Relaxed) + sh.failed.load(Ordering::Relaxed) - done_before;
                done as f64 / n.max(1) as f64
            }
            _ => 0.0,
        };
        progress(frac.min(1.0));
        match cfg.length {
            Length::Duration(dur) if measure_start.elapsed() >= dur => break,
            Length::OpsPerClient(_)
                if sh.phase() == STOP || sh.finished.load(Ordering::Acquire) >= clients =>
            {
                break
            }
            _ => {}
        }
        if interrupted() {
            break;
        }
        if dog.dead(d, sh).await {
            sh.abort.store(true, Ordering::Relaxed);
            died = true;
            break;
        }
    }
    sh.phase.store(STOP, Ordering::Release);
    Drive {
        measure_start,
        cpu_before,
        syncs_before,
        died,
    }
}

/// Declares the target dead when nothing succeeded for a while, something
/// failed, and a liveness probe fails.
struct Watchdog {
    last_ok: u64,
    last_progress: Instant,
    patience: Duration,
}

impl Watchdog {
    fn new(op_timeout: Duration) -> Watchdog {
        Watchdog {
            last_ok: 0,
            last_progress: Instant::now(),
            patience: op_timeout.max(Duration::from_secs(1)),
        }
    }

    async fn dead(&mut self, d: &Deployment, sh: &Shared) -> bool {
        let ok = sh.ok.load(Ordering::Relaxed);
        if ok != self.last_ok || sh.failed.load(Ordering::Relaxed) == 0 {
            self.last_ok = ok;
            self.last_progress = Instant::now();
            return false;
        }
        if self.last_progress.elapsed() < self.patience {
            return false;
        }
        self.last_progress = Instant::now();
        !d.alive().await
    }
}

/// A logical client slot of the open loop.
struct Slot {
    id: u64,
    conn: Conn,
    log: Log,
    seq: u64,
}

/// What the open loop's dispatcher and its operations share.
struct OpenLoop {
    sh: Arc<Shared>,
    /// The free slots.
    pool: Mutex<Vec<Slot>>,
    stats: Mutex<Stats>,
    /// When the last measured operation completed.
    last: Mutex<Instant>,
}

/// A lock whose holder panicked still holds usable counts.
fn unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OpenLoop {
    /// Poisson arrivals at `rate`/s until the point stops (or `limit`
    /// measured arrivals), each on a free slot; arrivals finding none are
    /// shed.
    async fn dispatch(self: Arc<Self>, mut rng: Rng, rate: f64, limit: Option<u64>) {
        let sh = &self.sh;
        let mut tasks = tokio::task::JoinSet::new();
        let mut next = tokio::time::Instant::now();
        let mut issued = 0u64;
        loop {
            next += Duration::from_secs_f64(rng.exp(1.0 / rate));
            tokio::time::sleep_until(next).await;
            let phase = sh.phase();
            if phase == STOP || (phase == MEASURE && limit.is_some_and(|l| issued >= l)) {
                break;
            }
            let op = next_op(&mut rng, &sh.chooser, sh.get_fraction);
            let measured = phase == MEASURE;
            issued += measured as u64;
            let slot = unpoisoned(&self.pool).pop();
            let Some(slot) = slot else {
                if measured {
                    unpoisoned(&self.stats).record_fail("shed");
                    sh.failed.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            };
            tasks.spawn(self.clone().serve(slot, op, next.into_std(), measured));
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        sh.phase.store(STOP, Ordering::Release);
    }

    /// One arrival's operation, its latency counted from `scheduled`.
    async fn serve(self: Arc<Self>, mut slot: Slot, op: GenOp, scheduled: Instant, measured: bool) {
        slot.seq += 1;
        let started = Instant::now();
        let r = issue(
            &self.sh,
            &mut slot.conn,
            &mut slot.log,
            op,
            slot.id,
            slot.seq,
        )
        .await;
        let now = Instant::now();
        let latency = (now - started) + late_start(scheduled, started);
        count(&self.sh, &mut unpoisoned(&self.stats), r, latency, measured);
        if measured {
            let mut l = unpoisoned(&self.last);
            *l = (*l).max(now);
        }
        unpoisoned(&self.pool).push(slot);
    }
}

/// Open loop (seed 002 §4.1): Poisson arrivals at `rate`/s; at most
/// `max_outstanding` operations in flight, each on a free logical client
/// slot; arrivals that find none are shed. Latency counts from the scheduled
/// arrival (less the timer's slack, see [`late_start`]), so a slow target
/// cannot hide its queueing (coordinated omission).
async fn open_loop(ctx: &PointCtx<'_>, conns: Vec<Conn>, rate: f64) -> Measured {
    let cfg = ctx.cfg;
    let n = cfg.max_outstanding;
    let slots = (0..n)
        .map(|i| Slot {
            id: i as u64,
            conn: conns[i % conns.len()].clone(),
            log: Log::new(ctx.rec, i as u64),
            seq: 0,
        })
        .collect();
    let ol = Arc::new(OpenLoop {
        sh: ctx.sh.clone(),
        pool: Mutex::new(slots),
        stats: Mutex::new(Stats::new()),
        last: Mutex::new(Instant::now()),
    });
    let limit = match cfg.length {
        Length::OpsPerClient(k) => Some(k * n as u64),
        Length::Duration(_) => None,
    };
    let rng = Rng::derive(cfg.seed, ctx.index as u64, u64::MAX);
    let dispatcher = ol.clone().dispatch(rng, rate, limit);
    let (drv, ()) = tokio::join!(drive(ctx, u64::MAX), dispatcher);
    // Dropping the slots hands their logs to the recorder.
    unpoisoned(&ol.pool).clear();
    let stats = unpoisoned(&ol.stats).clone();
    let last = *unpoisoned(&ol.last);
    let elapsed = last
        .max(drv.measure_start)
        .duration_since(drv.measure_start);
    drv.measured(ctx.pids, stats, elapsed)
}

fn cpu_now(pids: &[u32]) -> (Option<f64>, Option<f64>) {
    (cpu_seconds(pids), cpu_seconds(&[std::process::id()]))
}

/// Timers wake up to about a millisecond late; lateness within that is the
/// clock's, not the target's.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// How much of an open-loop operation's late start counts as latency: any
/// delay beyond the timer's slack, i.e. time the arrival waited because the
/// dispatcher fell behind (no coordinated omission).
pub fn late_start(scheduled: Instant, started: Instant) -> Duration {
    started
        .saturating_duration_since(scheduled)
        .saturating_sub(TIMER_SLACK)
}

/// Sum of user + system CPU seconds of `pids` (Linux /proc), if readable.
pub fn cpu_seconds(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    let mut ticks = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ticks += parse_cpu_ticks(&stat)?;
    }
    // USER_HZ is 100 on every Linux ABI that matters.
    Some(ticks as f64 / 100.0)
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command
/// name may hold spaces and parentheses, so fields count from the last ')'.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Latency summaries of a point, for the report.
pub fn summaries(stats: &Stats) -> (LatencySummary, LatencySummary) {
    (
        LatencySummary::of(&stats.get),
        LatencySummary::of(&stats.put),
    )
}

/// Successful throughput of a point.
pub fn ok_throughput(stats: &Stats, elapsed: Duration) -> f64 {
    throughput(stats.ok(), elapsed)
}
