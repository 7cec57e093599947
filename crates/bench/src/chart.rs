//! Drawing a figure: panels of lines in a grid, one PNG, shared by every
//! plot of the bench.
//!
//! Text is drawn with an embedded DejaVu Sans (assets/, free licence), so
//! plots work on machines without fontconfig or system fonts.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

pub fn register_font() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            if plotters::style::register_font("sans-serif", style, FONT).is_err() {
                panic!("the embedded DejaVu Sans font does not parse");
            }
        }
    });
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Lines of a panel: name → (x, y) points in x order.
pub type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// One PNG of `panels` in a grid with `cols` columns; `labels` = the
/// axes' (x, y) descriptions.
pub fn draw(
    path: &Path,
    title: &str,
    (xlabel, ylabel): (&str, &str),
    panels: &[(String, Series)],
    cols: usize,
    log_y: bool,
) -> anyhow::Result<()> {
    let cols = if cols == 1 { panels.len().max(1) } else { cols };
    let rows = panels.len().div_ceil(cols);
    let (w, h) = (560 * cols as u32, 420 * rows as u32 + 40);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 24).into_font())?;
    let areas = root.split_evenly((rows, cols));
    // Same colour for a series in every panel.
    let mut names: Vec<&String> = panels.iter().flat_map(|(_, s)| s.keys()).collect();
    names.sort();
    names.dedup();
    let color = |n: &String| COLORS[names.iter().position(|x| *x == n).unwrap_or(0) % COLORS.len()];
    for ((caption, s), area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, caption, (xlabel, ylabel), s, log_y, &color)?;
    }
    root.present()?;
    Ok(())
}

/// Axis labels with as many decimals as the axis range needs.
fn fmt_y(y: f64, ymax: f64) -> String {
    if y == 0.0 {
        "0".into()
    } else if ymax >= 20_000.0 {
        format!("{:.0}k", y / 1000.0)
    } else if ymax >= 100.0 {
        format!("{y:.0}")
    } else if ymax >= 5.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.2}")
    }
}

/// A label on a log axis: 0.01, 0.1, 1, 10, 100.
fn fmt_decade(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The corner whose box (a third of the width, a third of the height) holds
/// the fewest points, so the legend hides as little as possible.
fn legend_corner(s: &Series, xmax: f64, lo: f64, hi: f64) -> SeriesLabelPosition {
    let pts: Vec<(f64, f64)> = s
        .values()
        .flatten()
        .map(|&(x, y)| (x / xmax, (y - lo) / (hi - lo)))
        .collect();
    let count = |left: bool, top: bool| {
        pts.iter()
            .filter(|(x, y)| {
                (if left { *x < 0.4 } else { *x > 0.6 }) && (if top { *y > 0.6 } else { *y < 0.4 })
            })
            .count()
    };
    [
        (SeriesLabelPosition::UpperLeft, count(true, true)),
        (SeriesLabelPosition::LowerRight, count(false, false)),
        (SeriesLabelPosition::UpperRight, count(false, true)),
        (SeriesLabelPosition::LowerLeft, count(true, false)),
    ]
    .into_iter()
    .min_by_key(|(_, n)| *n)
    .map(|(p, _)| p)
    .unwrap_or(SeriesLabelPosition::UpperLeft)
}

/// The ranges of a panel's axes.
struct Axes {
    xmax: f64,
    ymax: f64,
    /// The y axis is log10(y), labelled 10^y.
    log: bool,
    /// The y axis' range (in log10 on a log axis).
    lo: f64,
    hi: f64,
}

impl Axes {
    fn of(s: &Series, log_y: bool) -> Axes {
        let all: Vec<&(f64, f64)> = s.values().flatten().collect();
        let xmax = all.iter().map(|p| p.0).fold(1.0, f64::max);
        let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3);
        let ymin = all
            .iter()
            .map(|p| p.1)
            .filter(|&y| y > 0.0)
            .fold(ymax, f64::min);
        // Latencies of peers can differ by 100×: a log axis keeps every
        // line readable. Drawn as log10(y) on a linear axis, labelled 10^y.
        let log = log_y && ymax / ymin > 30.0;
        let (lo, hi) = if log {
            (ymin.log10().floor(), ymax.log10().ceil())
        } else {
            (0.0, ymax * 1.15)
        };
        Axes {
            xmax,
            ymax,
            log,
            lo,
            hi,
        }
    }
}

/// One panel of a figure: its lines, a log axis when `log_y` and the
/// values span more than 30×, and a legend in the emptiest corner.
fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    (xlabel, ylabel): (&str, &str),
    s: &Series,
    log_y: bool,
    color: &dyn Fn(&String) -> RGBColor,
) -> anyhow::Result<()> {
    let Axes {
        xmax,
        ymax,
        log,
        lo,
        hi,
    } = Axes::of(s, log_y);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18).into_font())
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax * 1.05, lo..hi)?;
    let ydesc = if log {
        format!("{ylabel} (log scale)")
    } else {
        ylabel.to_string()
    };
    let yfmt = |y: &f64| {
        if log {
            fmt_decade(10f64.powf(*y))
        } else {
            fmt_y(*y, ymax)
        }
    };
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc(ydesc)
        .y_labels(if log { (hi - lo) as usize + 1 } else { 10 })
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&yfmt)
        .draw()?;
    let s: Series = if log {
        s.iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|&(x, y)| (x, y.log10())).collect()))
            .collect()
    } else {
        s.clone()
    };
    let s = &s;
    for (name, pts) in s {
        let c = color(name);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    if !s.is_empty() {
        chart
            .configure_series_labels()
            .position(legend_corner(s, xmax * 1.05, lo, hi))
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}
