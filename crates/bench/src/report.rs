//! Results of a sweep: one [`PointResult`] per point, printed as a table and
//! written as `results.csv` and `results.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{BenchConfig, DeploySpec, Sharing, Workload};
use crate::floors::Floors;
use crate::stats::{throughput, LatencySummary, Stats};
use crate::target::Deployment;

/// Everything measured at one point of the sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Line name: protocol for our clusters, `etcd`, `redis`.
    pub target: String,
    /// `local`, `quorumkv`, `etcd`, `redis`.
    pub kind: String,
    pub replicas: usize,
    /// Closed loop: logical clients. Open loop: maximum outstanding.
    pub clients: usize,
    /// How logical clients reach the target, e.g. "shared: 1 client = 3 TCP …".
    pub connections: String,
    pub get_fraction: f64,
    pub keys: usize,
    pub distribution: String,
    pub value_size: usize,
    /// Open-loop arrival rate (ops/s); `None` for the closed loop.
    pub rate: Option<f64>,
    pub elapsed_s: f64,
    /// Successful operations per second (failures excluded).
    pub throughput: f64,
    pub ok_get: u64,
    pub ok_put: u64,
    pub failed: u64,
    pub failures: BTreeMap<String, u64>,
    pub get: LatencySummary,
    pub put: LatencySummary,
    /// GETs and PUTs together.
    pub all: LatencySummary,
    /// Server CPU seconds per 1000 successful operations (our processes, or
    /// a peer's on this host).
    pub cpu_s_per_kop: Option<f64>,
    /// The bench process's CPU seconds per 1000 successful operations: the
    /// client side, which runs the coordinators in direct mode.
    pub client_cpu_s_per_kop: Option<f64>,
    /// Linearizability verdict with `--check`.
    pub check: Option<String>,
    /// Anything that went wrong (the target died, preload failed, …).
    pub note: Option<String>,
    /// Clients pinned to servers: successful PUTs of each server's clients
    /// (server i = the i-th endpoint). Empty when not pinned.
    #[serde(default)]
    pub server_puts: Vec<u64>,
    /// Each client only read or only wrote (`--dedicated-clients`).
    #[serde(default)]
    pub dedicated: bool,
    /// Fraction of one core each local replica was held to.
    #[serde(default)]
    pub replica_cpu: Option<f64>,
    /// What an acknowledged write survives (`Deployment::durability`).
    #[serde(default)]
    pub durability: Option<String>,
    /// Syncs per second over all replicas while measuring.
    #[serde(default)]
    pub syncs_per_s: Option<f64>,
    /// Records made durable per second over all replicas while measuring.
    #[serde(default)]
    pub records_per_s: Option<f64>,
    /// The protocol's ratios of counters over the point
    /// (`ProtocolDef::POINT_RATIOS`), e.g. Zab's ACKs per commit.
    #[serde(default)]
    pub ratios: Vec<(String, f64)>,
    /// How a local cluster was secured (`--security`: plain, tls, auth,
    /// tls+auth); `None` for other targets.
    #[serde(default)]
    pub security: Option<String>,
    /// Which round of `--rounds` (from 1); `None` with one round.
    #[serde(default)]
    pub round: Option<usize>,
    /// The replicas' mean time per sync while measuring, in µs (quorumkv:
    /// writing and syncing a batch; etcd: its WAL fsync).
    #[serde(default)]
    pub sync_us_avg: Option<f64>,
    /// The host's floors measured beside the run (the same in every point
    /// of a run; `None` with `--no-floors`).
    #[serde(default)]
    pub floors: Option<Floors>,
}

/// Values at least this large are throughput in bytes (seed 004 §5 uses
/// 4 KB): the table shows MB/s beside ops/s.
pub const LARGE_VALUE: usize = 1024;

impl PointResult {
    pub fn new(d: &Deployment, w: &Workload, cfg: &BenchConfig) -> PointResult {
        let connections = match cfg.sharing {
            Sharing::Shared => format!("shared: 1 client = {}", d.conn_description()),
            Sharing::PerClient => format!("per-client: each {}", d.conn_description()),
        };
        PointResult {
            target: d.spec.label(),
            kind: match d.spec {
                DeploySpec::Local { .. } => "local",
                DeploySpec::Quorumkv { .. } => "quorumkv",
                DeploySpec::Etcd { .. } => "etcd",
                DeploySpec::Redis { .. } => "redis",
                DeploySpec::Zookeeper { .. } => "zookeeper",
            }
            .into(),
            replicas: d.replicas,
            clients: w.clients,
            connections,
            get_fraction: w.get_fraction,
            keys: w.keys,
            distribution: w.distribution.to_string(),
            value_size: w.value_size,
            rate: w.rate,
            elapsed_s: 0.0,
            throughput: 0.0,
            ok_get: 0,
            ok_put: 0,
            failed: 0,
            failures: BTreeMap::new(),
            get: LatencySummary::default(),
            put: LatencySummary::default(),
            all: LatencySummary::default(),
            cpu_s_per_kop: None,
            client_cpu_s_per_kop: None,
            check: None,
            note: None,
            server_puts: Vec::new(),
            dedicated: cfg.dedicated,
            replica_cpu: match d.spec {
                DeploySpec::Local { .. } => cfg.replica_cpu,
                _ => None,
            },
            durability: d.durability.clone(),
            syncs_per_s: None,
            records_per_s: None,
            ratios: Vec::new(),
            security: d.security().map(|s| s.to_string()),
            round: None,
            sync_us_avg: None,
            floors: None,
        }
    }

    /// The same point on the plain cluster of this point's protocol
    /// (`--security`): same target but for the setting, same workload.
    pub fn plain_sibling<'a>(&self, results: &'a [PointResult]) -> Option<&'a PointResult> {
        let sec = self.security.as_deref()?;
        if sec == "plain" {
            return None;
        }
        let base = self.target.strip_suffix(&format!("/{sec}"))?;
        results.iter().find(|r| {
            r.security.as_deref() == Some("plain")
                && r.target == base
                && r.replicas == self.replicas
                && r.clients == self.clients
                && r.get_fraction == self.get_fraction
                && r.keys == self.keys
                && r.distribution == self.distribution
                && r.value_size == self.value_size
                && r.rate == self.rate
                && r.dedicated == self.dedicated
                && r.round == self.round
        })
    }

    /// Throughput over the plain sibling's ([`Self::plain_sibling`]).
    pub fn vs_plain(&self, results: &[PointResult]) -> Option<f64> {
        let p = self.plain_sibling(results)?;
        (p.throughput > 0.0).then(|| self.throughput / p.throughput)
    }

    /// Server CPU per operation over the plain sibling's.
    pub fn cpu_vs_plain(&self, results: &[PointResult]) -> Option<f64> {
        let p = self.plain_sibling(results)?.cpu_s_per_kop?;
        let me = self.cpu_s_per_kop?;
        (p > 0.0).then(|| me / p)
    }

    /// Successful GETs per second.
    pub fn get_rate(&self) -> f64 {
        rate(self.ok_get, self.elapsed_s)
    }

    /// Successful PUTs per second.
    pub fn put_rate(&self) -> f64 {
        rate(self.ok_put, self.elapsed_s)
    }

    /// Value bytes moved per second in MB (10^6 B): every successful GET
    /// returns a value and every PUT carries one, of `value_size` bytes
    /// (a GET of a missing key counts too; the bench preloads every key).
    pub fn mb_per_s(&self) -> f64 {
        self.throughput * self.value_size as f64 / 1e6
    }

    /// Records per sync: how many writes one fsync covers (group commit).
    pub fn records_per_sync(&self) -> Option<f64> {
        let (r, s) = (self.records_per_s?, self.syncs_per_s?);
        (s > 0.0).then(|| r / s)
    }

    /// The replicas' mean sync time over the disk floor's mean (both means:
    /// the floor's mean holds the disk's slow syncs the replicas meet too);
    /// only where acknowledged writes are synced.
    pub fn sync_vs_disk(&self) -> Option<f64> {
        if !self.durability.as_deref()?.starts_with("fsync") {
            return None;
        }
        let floor = self.floors.as_ref()?.disk.as_ref()?.mean_us();
        Some(self.sync_us_avg? / floor).filter(|x| x.is_finite())
    }

    /// GET p50 over the loopback round trip's p50, where GETs succeeded.
    pub fn get_vs_rtt(&self) -> Option<f64> {
        if self.ok_get == 0 || self.get.p50_us == 0 {
            return None;
        }
        let floor = self.floors.as_ref()?.rtt.as_ref()?.p50_us();
        Some(self.get.p50_us as f64 / floor).filter(|x| x.is_finite())
    }

    /// Each server's fraction of the successful PUTs (pinned clients), in
    /// endpoint order; empty when unknown or no PUT succeeded.
    pub fn put_shares(&self) -> Vec<f64> {
        let total: u64 = self.server_puts.iter().sum();
        if total == 0 {
            return Vec::new();
        }
        (self.server_puts.iter())
            .map(|&n| n as f64 / total as f64)
            .collect()
    }

    /// Fills the measurements from merged stats.
    /// `cpu_s` = CPU seconds of (servers, bench process) while measuring.
    pub fn fill(&mut self, s: &Stats, elapsed: Duration, cpu_s: (Option<f64>, Option<f64>)) {
        self.elapsed_s = elapsed.as_secs_f64();
        self.throughput = throughput(s.ok(), elapsed);
        self.ok_get = s.ok_get;
        self.ok_put = s.ok_put;
        self.failed = s.failed();
        self.failures = s.failures.clone();
        self.get = LatencySummary::of(&s.get);
        self.put = LatencySummary::of(&s.put);
        let mut all = s.get.clone();
        all.add(&s.put).expect("same bounds");
        self.all = LatencySummary::of(&all);
        let per_kop = |c: Option<f64>| c.filter(|_| s.ok() > 0).map(|c| c * 1000.0 / s.ok() as f64);
        self.cpu_s_per_kop = per_kop(cpu_s.0);
        self.client_cpu_s_per_kop = per_kop(cpu_s.1);
    }
}

/// The CSV header; one column per scalar, failures as "reason=n;…".
pub const CSV_HEADER: &str =
    "target,kind,replicas,clients,get_fraction,keys,distribution,value_size,rate,\
elapsed_s,throughput,ok_get,ok_put,failed,failures,\
get_count,get_avg_us,get_p50_us,get_p95_us,get_p99_us,get_max_us,\
put_count,put_avg_us,put_p50_us,put_p95_us,put_p99_us,put_max_us,\
all_count,all_avg_us,all_p50_us,all_p95_us,all_p99_us,all_max_us,\
cpu_s_per_kop,client_cpu_s_per_kop,check,\
mb_per_s,server_puts,dedicated,replica_cpu,durability,syncs_per_s,records_per_s,ratios,connections,note,\
security,vs_plain,cpu_vs_plain,round,\
sync_us_avg,disk_floor_p50_us,disk_floor_mean_us,rtt_floor_p50_us,rtt_floor_mean_us,\
sync_vs_disk,get_p50_vs_rtt";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
}

fn lat_csv(l: &LatencySummary) -> String {
    format!(
        "{},{:.1},{},{},{},{}",
        l.count, l.avg_us, l.p50_us, l.p95_us, l.p99_us, l.max_us
    )
}

/// The protocol's ratios as `label=value;…` (`PointResult::ratios`).
fn ratios_text(r: &PointResult) -> String {
    (r.ratios.iter().map(|(k, v)| format!("{k}={v:.3}")))
        .collect::<Vec<_>>()
        .join(";")
}

/// `results.csv` contents.
pub fn to_csv(results: &[PointResult]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for r in results {
        let failures: Vec<String> = r.failures.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{:.3},{:.1},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.target),
            r.kind,
            r.replicas,
            r.clients,
            r.get_fraction,
            r.keys,
            csv_field(&r.distribution),
            r.value_size,
            opt(&r.rate),
            r.elapsed_s,
            r.throughput,
            r.ok_get,
            r.ok_put,
            r.failed,
            csv_field(&failures.join(";")),
            lat_csv(&r.get),
            lat_csv(&r.put),
            lat_csv(&r.all),
            r.cpu_s_per_kop
                .map(|c| format!("{c:.4}"))
                .unwrap_or_default(),
            r.client_cpu_s_per_kop
                .map(|c| format!("{c:.4}"))
                .unwrap_or_default(),
            csv_field(&opt(&r.check)),
            r.mb_per_s(),
            (r.server_puts.iter().map(u64::to_string))
                .collect::<Vec<_>>()
                .join(";"),
            r.dedicated,
            opt(&r.replica_cpu),
            csv_field(&opt(&r.durability)),
            r.syncs_per_s.map(|x| format!("{x:.1}")).unwrap_or_default(),
            r.records_per_s.map(|x| format!("{x:.1}")).unwrap_or_default(),
            csv_field(&ratios_text(r)),
            csv_field(&r.connections),
            csv_field(&opt(&r.note)),
            opt(&r.security),
            r.vs_plain(results)
                .map(|x| format!("{x:.3}"))
                .unwrap_or_default(),
            r.cpu_vs_plain(results)
                .map(|x| format!("{x:.3}"))
                .unwrap_or_default(),
            opt(&r.round),
            floors_csv(r),
        );
    }
    s
}

/// The floor columns of a CSV row, from `sync_us_avg` on.
fn floors_csv(r: &PointResult) -> String {
    let f = |x: Option<f64>, digits: usize| x.map_or(String::new(), |x| format!("{x:.digits$}"));
    let disk = r.floors.as_ref().and_then(|f| f.disk.as_ref());
    let rtt = r.floors.as_ref().and_then(|f| f.rtt.as_ref());
    [
        f(r.sync_us_avg, 1),
        f(disk.map(|d| d.p50_us()), 1),
        f(disk.map(|d| d.mean_us()), 1),
        f(rtt.map(|d| d.p50_us()), 1),
        f(rtt.map(|d| d.mean_us()), 1),
        f(r.sync_vs_disk(), 3),
        f(r.get_vs_rtt(), 3),
    ]
    .join(",")
}

/// What `results.json` (and `lock.json`) holds: the configuration and
/// every point.
#[derive(Serialize)]
pub struct JsonReport<'a, R = PointResult> {
    pub config: &'a BenchConfig,
    /// True when the sweep ended early (a target died).
    pub incomplete: bool,
    pub results: &'a [R],
}

/// `NAME.csv` (`csv`) and `NAME.json` (a [`JsonReport`] of `results`) in `dir`.
pub fn write_csv_json<R: Serialize>(
    dir: &Path,
    name: &str,
    csv: String,
    cfg: &BenchConfig,
    results: &[R],
    incomplete: bool,
) -> std::io::Result<()> {
    std::fs::write(dir.join(format!("{name}.csv")), csv)?;
    let report = JsonReport {
        config: cfg,
        incomplete,
        results,
    };
    let json = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(format!("{name}.json")), json + "\n")
}

/// The points of a `results.json`.
pub fn read_results(json: &str) -> Result<Vec<PointResult>, String> {
    #[derive(Deserialize)]
    struct Results {
        results: Vec<PointResult>,
    }
    serde_json::from_str::<Results>(json)
        .map(|r| r.results)
        .map_err(|e| e.to_string())
}

/// Writes results.csv and results.json into `dir`.
pub fn write_files(
    dir: &Path,
    cfg: &BenchConfig,
    results: &[PointResult],
    incomplete: bool,
) -> std::io::Result<()> {
    write_csv_json(dir, "results", to_csv(results), cfg, results, incomplete)
}

fn ms(us: u64) -> String {
    if us == 0 {
        "-".into()
    } else {
        format!("{:.2}", us as f64 / 1000.0)
    }
}

/// The table printed at the end: one row per point.
pub fn table(results: &[PointResult]) -> String {
    let cols = columns(results);
    let head: Vec<&str> = cols.iter().map(|c| c.head.as_str()).collect();
    let rows: Vec<Vec<String>> = (results.iter())
        .map(|r| cols.iter().map(|c| (c.cell)(r)).collect())
        .collect();
    render(&head, &rows)
}

/// A column of the table: its heading and how a point fills its cell.
struct Column<'a> {
    head: String,
    cell: Box<dyn Fn(&PointResult) -> String + 'a>,
}

fn col<'a>(head: &str, cell: impl Fn(&PointResult) -> String + 'a) -> Column<'a> {
    Column {
        head: head.to_string(),
        cell: Box::new(cell),
    }
}

/// The columns worth showing, in order: a dimension when its points
/// differ, a measure when some point has it, the rest always.
fn columns(results: &[PointResult]) -> Vec<Column<'_>> {
    let mut cols = dimension_columns(results);
    cols.extend(measure_columns(results));
    // The protocol's ratios (`POINT_RATIOS`), one column per label.
    for label in ratio_labels(results) {
        cols.push(col(label, move |r| {
            let v = r.ratios.iter().find(|(k, _)| k == label).map(|x| x.1);
            v.map_or("-".into(), |x| format!("{x:.2}"))
        }));
    }
    cols.extend(cost_columns(results));
    cols
}

/// Whether `f` differs between the points.
fn varies(results: &[PointResult], f: impl Fn(&PointResult) -> String) -> bool {
    (results.first()).is_some_and(|a| results.iter().any(|r| f(r) != f(a)))
}

/// The columns whose flag is true.
fn shown<'a>(cols: Vec<(bool, Column<'a>)>) -> Vec<Column<'a>> {
    cols.into_iter()
        .filter(|(show, _)| *show)
        .map(|(_, c)| c)
        .collect()
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// What was measured: the target, the workload, the round.
fn dimension_columns(results: &[PointResult]) -> Vec<Column<'_>> {
    let vary = |f: fn(&PointResult) -> String| varies(results, f);
    let any = |f: fn(&PointResult) -> bool| results.iter().any(f);
    shown(vec![
        (true, col("target", |r| r.target.clone())),
        (true, col("N", |r| r.replicas.to_string())),
        (
            true,
            col("get%", |r| format!("{:.0}", r.get_fraction * 100.0)),
        ),
        (
            vary(|r| opt(&r.durability)),
            col("disk", |r| dash(r.durability.clone())),
        ),
        (
            vary(|r| r.keys.to_string()),
            col("keys", |r| r.keys.to_string()),
        ),
        (
            vary(|r| r.distribution.clone()),
            col("dist", |r| r.distribution.clone()),
        ),
        (
            vary(|r| r.value_size.to_string()),
            col("value", |r| r.value_size.to_string()),
        ),
        (
            any(|r| r.rate.is_some()),
            col("rate/s", |r| {
                r.rate.map(|x| format!("{x:.0}")).unwrap_or_default()
            }),
        ),
        (true, col("clients", |r| r.clients.to_string())),
        (
            any(|r| r.round.is_some()),
            col("round", |r| r.round.map_or("-".into(), |n| n.to_string())),
        ),
    ])
}

/// Throughput, failures, latency and how writes spread and sync.
fn measure_columns(results: &[PointResult]) -> Vec<Column<'_>> {
    let any = |f: &dyn Fn(&PointResult) -> bool| results.iter().any(f);
    let show_vs_plain = any(&|r| r.plain_sibling(results).is_some());
    let show_syncs = any(&|r| r.syncs_per_s.is_some_and(|s| s > 0.0));
    shown(vec![
        (true, col("ops/s", |r| format!("{:.0}", r.throughput))),
        (
            show_vs_plain,
            col("vs plain", move |r| {
                relative_cell(r.security.as_deref(), r.vs_plain(results))
            }),
        ),
        (
            any(&|r| r.value_size >= LARGE_VALUE),
            col("MB/s", |r| format!("{:.2}", r.mb_per_s())),
        ),
        (true, col("failed", |r| r.failed.to_string())),
        (true, col("GET p50", |r| ms(r.get.p50_us))),
        (true, col("p95", |r| ms(r.get.p95_us))),
        (true, col("p99", |r| ms(r.get.p99_us))),
        (true, col("PUT p50", |r| ms(r.put.p50_us))),
        (true, col("p95", |r| ms(r.put.p95_us))),
        (true, col("p99", |r| ms(r.put.p99_us))),
        (
            any(&|r| !r.put_shares().is_empty()),
            col("PUT % by server", |r| shares_cell(&r.put_shares())),
        ),
        (
            show_syncs,
            col("syncs/s", |r| {
                r.syncs_per_s.map_or("-".into(), |x| format!("{x:.0}"))
            }),
        ),
        (
            show_syncs,
            col("recs/sync", |r| {
                r.records_per_sync()
                    .map_or("-".into(), |x| format!("{x:.1}"))
            }),
        ),
        (
            any(&|r| r.sync_vs_disk().is_some()),
            col("sync/disk", |r| times(r.sync_vs_disk())),
        ),
        (
            any(&|r| r.get_vs_rtt().is_some()),
            col("GET/rtt", |r| times(r.get_vs_rtt())),
        ),
    ])
}

/// A ratio to a floor: `1.42x`, or `-`.
fn times(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}x"))
}

/// CPU per operation, and the history check.
fn cost_columns(results: &[PointResult]) -> Vec<Column<'_>> {
    let any = |f: &dyn Fn(&PointResult) -> bool| results.iter().any(f);
    let show_vs_plain = any(&|r| r.plain_sibling(results).is_some());
    let show_cpu = any(&|r| r.cpu_s_per_kop.is_some());
    let cpu = |c: Option<f64>| c.map(|c| format!("{c:.3}")).unwrap_or_else(|| "-".into());
    shown(vec![
        (show_cpu, col("srv cpu", move |r| cpu(r.cpu_s_per_kop))),
        (
            show_cpu && show_vs_plain,
            col("cpu vs plain", move |r| {
                relative_cell(r.security.as_deref(), r.cpu_vs_plain(results))
            }),
        ),
        (
            any(&|r| r.client_cpu_s_per_kop.is_some()),
            col("cli cpu", move |r| cpu(r.client_cpu_s_per_kop)),
        ),
        (
            any(&|r| r.check.is_some()),
            col("check", |r| dash(r.check.clone())),
        ),
    ])
}

/// Every ratio label of the points, in the order they first appear.
fn ratio_labels(results: &[PointResult]) -> Vec<&str> {
    let mut labels: Vec<&str> = Vec::new();
    for r in results {
        for (k, _) in &r.ratios {
            if !labels.contains(&k.as_str()) {
                labels.push(k);
            }
        }
    }
    labels
}

/// A point against its `plain` sibling: `1.23x`; `1` for the plain point
/// itself, `-` without a sibling.
fn relative_cell(security: Option<&str>, x: Option<f64>) -> String {
    match (security, x) {
        (_, Some(x)) => format!("{x:.2}x"),
        (Some("plain"), None) => "1".into(),
        _ => "-".into(),
    }
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// Per-server shares as whole percents, "26/25/24/25" ("-" when unknown).
pub fn shares_cell(shares: &[f64]) -> String {
    if shares.is_empty() {
        return "-".into();
    }
    let pct: Vec<String> = shares.iter().map(|s| format!("{:.0}", s * 100.0)).collect();
    pct.join("/")
}

fn render(head: &[&str], rows: &[Vec<String>]) -> String {
    assert!(
        rows.iter().all(|r| r.len() == head.len()),
        "table rows and header disagree"
    );
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<width$}", width = w[i])
                } else {
                    format!("{c:>width$}", width = w[i])
                }
            })
            .collect();
        let _ = writeln!(s, "{}", parts.join("  ").trim_end());
    };
    line(&mut s, head.iter().map(|h| h.to_string()).collect());
    let total: usize = w.iter().sum::<usize>() + 2 * (w.len() - 1);
    let _ = writeln!(s, "{}", "-".repeat(total));
    for r in rows {
        line(&mut s, r.clone());
    }
    s
}

/// Lines under the table: latencies are in ms, how clients connect, notes
/// and failure reasons.
pub fn footnotes(results: &[PointResult]) -> String {
    let mut s = String::from(
        "latencies in ms; ops/s counts successful operations only; \
         srv/cli cpu = CPU seconds per 1000 ops of the servers / of this bench process\n",
    );
    if let Some(c) = results.iter().find_map(|r| r.replica_cpu) {
        let _ = writeln!(
            s,
            "each local replica held to {c} of one core (cgroup v1 CPU quota)"
        );
    }
    if results.iter().any(|r| r.syncs_per_s.is_some()) {
        s += "disk = what an acknowledged write survives (fsync: synced before the ack; buffered: \
              written, not synced; memory: nothing); syncs/s over all replicas, recs/sync = \
              records each sync covered (group commit)\n";
    }
    s += &floor_notes(results);
    if results.iter().any(|r| r.plain_sibling(results).is_some()) {
        s += "vs plain = ops/s over the same point's on the plain cluster (--security; \
              /tls: TLS 1.3 on every connection and replica link, /auth: users file, every \
              connection logs in); cpu vs plain = srv cpu over the plain cluster's\n";
    }
    if results.iter().any(|r| r.dedicated) {
        s += "dedicated clients: each only reads or only writes (get% = share of readers)\n";
    }
    if results.iter().any(|r| r.value_size >= LARGE_VALUE) {
        s += "MB/s = value bytes moved per second (ops/s × value size, 10^6 B)\n";
    }
    // Once each, in order of appearance (side-by-side settings alternate).
    let mut conns: Vec<(String, String)> = Vec::new();
    for r in results {
        let c = (r.target.clone(), r.connections.clone());
        if !conns.contains(&c) {
            conns.push(c);
        }
    }
    for (t, c) in conns {
        let _ = writeln!(s, "connections of {t}: {c}");
    }
    let mut reasons: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in results {
        for (k, v) in &r.failures {
            *reasons.entry((r.target.clone(), k.clone())).or_default() += v;
        }
    }
    for ((t, k), v) in reasons {
        let _ = writeln!(s, "failures of {t}: {k}: {v}");
    }
    for r in results {
        if let Some(n) = &r.note {
            let _ = writeln!(
                s,
                "note ({} N={} clients={}): {n}",
                r.target, r.replicas, r.clients
            );
        }
    }
    s
}

/// The floors line and what the ratio columns mean (empty without floors).
fn floor_notes(results: &[PointResult]) -> String {
    let mut s = String::new();
    if let Some(f) = results.iter().find_map(|r| r.floors.as_ref()) {
        let _ = writeln!(s, "{}", f.line());
    }
    let (sync, get) = (
        results.iter().any(|r| r.sync_vs_disk().is_some()),
        results.iter().any(|r| r.get_vs_rtt().is_some()),
    );
    if sync || get {
        let mut parts = Vec::new();
        if sync {
            parts.push(
                "sync/disk = the replicas' mean time per sync (a batch written and synced) \
                 over the disk floor's mean",
            );
        }
        if get {
            parts.push("GET/rtt = GET p50 over the loopback round trip's p50");
        }
        let _ = writeln!(
            s,
            "{} (each floor: the lower of before and after)",
            parts.join("; ")
        );
    }
    s
}
