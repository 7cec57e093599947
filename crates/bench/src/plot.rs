//! PNG figures like seed 000 §6: successful throughput vs clients (one line
//! per protocol or target, one chart per replica count, one panel per mix) and
//! GET / PUT median and p95 latency vs clients.
//!
//! The drawing itself is [`crate::chart`]'s.

use crate::chart::{draw, register_font, Series};
use crate::report::PointResult;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The series name of a point: the target, with its size for peers.
fn series_name(r: &PointResult) -> String {
    if r.kind == "local" || r.kind == "quorumkv" {
        r.target.clone()
    } else {
        format!("{} ({})", r.target, r.replicas)
    }
}

/// A figure: the points that share every dimension except target and clients
/// (and except the replica count for peers, which appear in every chart).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FigKey {
    replicas: Option<usize>,
    rest: String,
}

fn rest_slug(r: &PointResult, varying: &Varying) -> String {
    let mut parts = Vec::new();
    if varying.keys {
        parts.push(format!("keys{}", r.keys));
    }
    if varying.dist {
        parts.push(r.distribution.replace(':', ""));
    }
    if varying.size {
        parts.push(format!("{}B", r.value_size));
    }
    if let Some(rate) = r.rate {
        parts.push(format!("rate{rate:.0}"));
    }
    parts.join("_")
}

struct Varying {
    keys: bool,
    dist: bool,
    size: bool,
}

/// Draws every figure into `dir` and returns the files written.
pub fn write_plots(dir: &Path, results: &[PointResult]) -> anyhow::Result<Vec<PathBuf>> {
    register_font();
    let mut files = Vec::new();
    for (key, pts) in figures(results) {
        files.extend(write_figure(dir, &key, &pts)?);
    }
    files.extend(crate::plot_scaling::write_scaling_plots(dir, results)?);
    Ok(files)
}

/// The points of each figure: (N or none) × rest-of-dimensions; each
/// figure has panels by GET fraction. Peers appear in every N's figure.
fn figures(results: &[PointResult]) -> BTreeMap<FigKey, Vec<&PointResult>> {
    let differs = |f: &dyn Fn(&PointResult) -> String| {
        results
            .first()
            .is_some_and(|a| results.iter().any(|r| f(r) != f(a)))
    };
    let varying = Varying {
        keys: differs(&|r| r.keys.to_string()),
        dist: differs(&|r| r.distribution.clone()),
        size: differs(&|r| r.value_size.to_string()),
    };
    let local_ns: Vec<usize> = {
        let mut v: Vec<usize> = results
            .iter()
            .filter(|r| r.kind == "local" || r.kind == "quorumkv")
            .map(|r| r.replicas)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let mut figs: BTreeMap<FigKey, Vec<&PointResult>> = BTreeMap::new();
    for r in results {
        let rest = rest_slug(r, &varying);
        let ours = r.kind == "local" || r.kind == "quorumkv";
        let ns: Vec<Option<usize>> = if ours {
            vec![Some(r.replicas)]
        } else if local_ns.is_empty() {
            vec![None]
        } else {
            local_ns.iter().map(|&n| Some(n)).collect()
        };
        for n in ns {
            figs.entry(FigKey {
                replicas: n,
                rest: rest.clone(),
            })
            .or_default()
            .push(r);
        }
    }
    figs
}

/// One figure's PNGs: throughput, and latency per GET fraction.
fn write_figure(dir: &Path, key: &FigKey, pts: &[&PointResult]) -> anyhow::Result<Vec<PathBuf>> {
    let mut slug = key
        .replicas
        .map(|n| format!("n{n}"))
        .unwrap_or_else(|| "peers".into());
    if !key.rest.is_empty() {
        slug = format!("{slug}_{}", key.rest);
    }
    let title_n = key
        .replicas
        .map(|n| format!("N = {n}"))
        .unwrap_or_else(|| "peers".into());
    let mut fractions: Vec<f64> = pts.iter().map(|r| r.get_fraction).collect();
    fractions.sort_by(|a, b| b.total_cmp(a));
    fractions.dedup();

    let tp = dir.join(format!("throughput_{slug}.png"));
    let panels: Vec<(String, Series)> = fractions
        .iter()
        .map(|&g| {
            (
                format!("{}, GET fraction {g}", title_n),
                series(pts, g, |r| r.throughput),
            )
        })
        .collect();
    draw(
        &tp,
        "successful throughput vs clients",
        ("clients", "ops/s"),
        &panels,
        1,
        false,
    )?;
    let mut files = vec![tp];
    for &g in &fractions {
        let lp = dir.join(format!("latency_{slug}_get{:.0}.png", g * 100.0));
        let ms = |us: u64| us as f64 / 1000.0;
        let panels = vec![
            (
                format!("GET median, {title_n}"),
                series(pts, g, |r| ms(r.get.p50_us)),
            ),
            (
                format!("GET p95, {title_n}"),
                series(pts, g, |r| ms(r.get.p95_us)),
            ),
            (
                format!("PUT median, {title_n}"),
                series(pts, g, |r| ms(r.put.p50_us)),
            ),
            (
                format!("PUT p95, {title_n}"),
                series(pts, g, |r| ms(r.put.p95_us)),
            ),
        ];
        let title = format!("latency vs clients, GET fraction {g}");
        draw(&lp, &title, ("clients", "ms"), &panels, 2, true)?;
        files.push(lp);
    }
    Ok(files)
}

/// (clients, y) per series for one GET fraction; points without samples
/// (e.g. no PUTs at GET fraction 1) are left out.
fn series(pts: &[&PointResult], g: f64, y: impl Fn(&PointResult) -> f64) -> Series {
    let mut s: Series = BTreeMap::new();
    for r in pts.iter().filter(|r| r.get_fraction == g) {
        let v = y(r);
        let line = s.entry(series_name(r)).or_default();
        if v > 0.0 {
            line.push((r.clients as f64, v));
        }
    }
    for v in s.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    s
}
