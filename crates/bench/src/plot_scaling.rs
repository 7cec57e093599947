//! Figures against the number of replicas (seed 004 §5, Figures 3 and 4):
//! for every workload measured at two or more replica counts, throughput vs
//! N (MB/s and ops/s; reads and writes apart in a mix), each server's share
//! of the writes when clients are pinned, and GET / PUT latency vs N.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::chart::{draw, Series};
use crate::report::{PointResult, LARGE_VALUE};

/// The points of one workload, measured at several N.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Workload {
    get_pct: u64,
    dedicated: bool,
    clients: usize,
    value_size: usize,
    keys: usize,
    distribution: String,
    rate: Option<u64>,
}

impl Workload {
    fn of(r: &PointResult) -> Workload {
        Workload {
            get_pct: (r.get_fraction * 100.0).round() as u64,
            dedicated: r.dedicated,
            clients: r.clients,
            value_size: r.value_size,
            keys: r.keys,
            distribution: r.distribution.clone(),
            rate: r.rate.map(|x| x.round() as u64),
        }
    }

    /// File name part: `get100_c48_4096B`, `get50_dedicated_c16_4096B`.
    fn slug(&self) -> String {
        let mut s = format!("get{}", self.get_pct);
        if self.dedicated {
            s += "_dedicated";
        }
        s += &format!("_c{}_{}B", self.clients, self.value_size);
        if let Some(r) = self.rate {
            s += &format!("_rate{r}");
        }
        s
    }

    /// Title: the claim's workload in words.
    fn title(&self) -> String {
        let mix = match (self.get_pct, self.dedicated) {
            (100, _) => "read-only".to_string(),
            (0, _) => "write-only".to_string(),
            (g, true) => format!("dedicated readers ({g} %) and writers"),
            (g, false) => format!("GET fraction {}", g as f64 / 100.0),
        };
        format!(
            "{mix}, {} clients, {} B values",
            self.clients, self.value_size
        )
    }

    fn mixed(&self) -> bool {
        self.get_pct > 0 && self.get_pct < 100
    }
}

/// Draws the figures vs N into `dir`; returns the files written.
pub fn write_scaling_plots(dir: &Path, results: &[PointResult]) -> anyhow::Result<Vec<PathBuf>> {
    let mut groups: BTreeMap<Workload, Vec<&PointResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.kind == "local") {
        groups.entry(Workload::of(r)).or_default().push(r);
    }
    let mut files = Vec::new();
    for (w, pts) in groups {
        let mut ns: Vec<usize> = pts.iter().map(|r| r.replicas).collect();
        ns.sort();
        ns.dedup();
        if ns.len() < 2 {
            continue;
        }
        let share = cpu_note(&pts);
        let figures = [
            ("throughput", "", throughput_panels(&w, &pts), 1),
            ("latency", "ms", latency_panels(&pts), 2),
        ];
        for (what, unit, panels, cols) in figures {
            let path = dir.join(format!("scaling_{what}_{}.png", w.slug()));
            let title = format!("{what} vs replicas: {}{share}", w.title());
            draw(&path, &title, ("replicas N", unit), &panels, cols, false)?;
            files.push(path);
        }
    }
    Ok(files)
}

fn cpu_note(pts: &[&PointResult]) -> String {
    match pts.iter().find_map(|r| r.replica_cpu) {
        Some(c) => format!(", {c} core a replica"),
        None => String::new(),
    }
}

/// (N, y) per line; reads and writes apart in a mix. Zero values (no such
/// operation) are left out.
fn by_n(w: &Workload, pts: &[&PointResult], y: impl Fn(&PointResult, f64) -> f64) -> Series {
    let mut s: Series = BTreeMap::new();
    for r in pts {
        let parts: Vec<(String, f64)> = if w.mixed() {
            vec![
                (format!("{} reads", r.target), r.get_rate()),
                (format!("{} writes", r.target), r.put_rate()),
            ]
        } else {
            vec![(r.target.clone(), r.throughput)]
        };
        for (name, ops) in parts {
            let v = y(r, ops);
            if v > 0.0 {
                s.entry(name).or_default().push((r.replicas as f64, v));
            }
        }
    }
    for v in s.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    s
}

fn throughput_panels(w: &Workload, pts: &[&PointResult]) -> Vec<(String, Series)> {
    let mut panels = Vec::new();
    if w.value_size >= LARGE_VALUE {
        panels.push((
            "MB/s (value bytes)".to_string(),
            by_n(w, pts, |r, ops| ops * r.value_size as f64 / 1e6),
        ));
    }
    panels.push(("ops/s".to_string(), by_n(w, pts, |_, ops| ops)));
    let shares = share_series(pts);
    if !shares.is_empty() {
        panels.push((
            "each server's share of the writes × N (1 = 1/N)".into(),
            shares,
        ));
    }
    panels
}

/// The smallest and largest per-server share of the writes, times N (so
/// that a fair split is 1 at every N), and that ideal.
fn share_series(pts: &[&PointResult]) -> Series {
    let mut s: Series = BTreeMap::new();
    for r in pts {
        let shares = r.put_shares();
        if shares.is_empty() {
            continue;
        }
        let n = r.replicas as f64;
        let lo = shares.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = shares.iter().copied().fold(0.0, f64::max);
        let mut add = |name: String, y: f64| s.entry(name).or_default().push((n, y * n));
        add(format!("{} min", r.target), lo);
        add(format!("{} max", r.target), hi);
        add("fair (1/N)".into(), 1.0 / n);
    }
    for v in s.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.dedup();
    }
    s
}

fn latency_panels(pts: &[&PointResult]) -> Vec<(String, Series)> {
    let ms = |us: u64| us as f64 / 1000.0;
    let line = |f: &dyn Fn(&PointResult) -> f64| {
        let mut s: Series = BTreeMap::new();
        for r in pts {
            let v = f(r);
            if v > 0.0 {
                s.entry(r.target.clone())
                    .or_default()
                    .push((r.replicas as f64, v));
            }
        }
        for v in s.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        s
    };
    vec![
        ("GET median (ms)".into(), line(&|r| ms(r.get.p50_us))),
        ("GET p95 (ms)".into(), line(&|r| ms(r.get.p95_us))),
        ("PUT median (ms)".into(), line(&|r| ms(r.put.p50_us))),
        ("PUT p95 (ms)".into(), line(&|r| ms(r.put.p95_us))),
    ]
}
