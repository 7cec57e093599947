//! A self-contained HTML page (inline SVG, no scripts from elsewhere) that
//! draws the failing key's operations on a timeline, one row per client.
//!
//! The x axis is the order of events, not their times: every distinct call
//! or return instant gets its own column, so short operations stay visible
//! next to long ones. Exact times are in each operation's tooltip.
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::check::{Report, Violation};
use crate::history::Operation;
use crate::report::op_text;

const COL: f64 = 20.0;
/// Room right of the last column for the failing operation's full label.
const RIGHT: f64 = 520.0;
const ROW: f64 = 30.0;
const LEFT: f64 = 90.0;
const TOP: f64 = 40.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page for a report: the violation if there is one, else the verdicts.
pub fn page(r: &Report, source: &str) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>{}: {}</h1>",
        esc(source),
        esc(crate::report::verdict_line(r).trim())
    );
    match &r.violation {
        Some(v) => body.push_str(&violation_svg(v)),
        None => {
            let _ = writeln!(
                body,
                "<pre>{}</pre>",
                esc(&crate::report::keys_text(r, false))
            );
        }
    }
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>quorumkv check: {}</title>\n<style>{}</style></head>\n<body>\n{}\n<script>{}</script>\n</body></html>\n",
        esc(source),
        CSS,
        body,
        SCRIPT
    )
}

const CSS: &str = "body{font:14px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px} .wrap{overflow-x:auto;border:1px solid #ccc;padding:4px}
rect.op{fill:#cfe2ff;stroke:#3d6fb6;stroke-width:1}
rect.inv{fill:#ffe69c;stroke:#b38600}
rect.fail{fill:#f1aeb5;stroke:#b02a37;stroke-width:2}
rect.open{stroke-dasharray:4 3;fill-opacity:.5}
text{font:11px ui-monospace,monospace;pointer-events:none}
text.row{font-weight:bold} line.grid{stroke:#eee} line.end{stroke:#b02a37;stroke-width:2;stroke-dasharray:6 4}
.legend span{display:inline-block;padding:2px 8px;margin-right:8px;border:1px solid #888}
table{border-collapse:collapse;margin-top:12px} td,th{padding:2px 10px;border-bottom:1px solid #ddd;font:12px ui-monospace,monospace;text-align:left}";

/// No script needed: the page is static (the failing operation is drawn in
/// red and its full text repeated at the right end of its row).
const SCRIPT: &str = "";

/// Columns: every distinct instant among calls and returns of `ops`.
fn columns(ops: &[Operation], end: u64) -> BTreeMap<u64, usize> {
    let mut t: Vec<u64> = ops.iter().map(|o| o.call).collect();
    t.extend(ops.iter().filter_map(|o| o.ret).filter(|&r| r <= end));
    t.sort_unstable();
    t.dedup();
    t.into_iter().enumerate().map(|(i, t)| (t, i)).collect()
}

/// Where the timeline puts things: a column per instant, a row per client.
struct Layout {
    cols: BTreeMap<u64, usize>,
    clients: BTreeMap<u64, usize>,
    /// The prefix ends at the failing operation's return.
    end: u64,
    last_col: usize,
    width: f64,
    height: f64,
}

impl Layout {
    fn new(v: &Violation) -> Layout {
        let ops = &v.ops[..v.prefix_ops];
        let end = v.ops[v.failing_op].ret.unwrap_or(u64::MAX);
        let cols = columns(ops, end);
        let clients: BTreeMap<u64, usize> = {
            let mut c: Vec<u64> = ops.iter().map(|o| o.client).collect();
            c.sort_unstable();
            c.dedup();
            c.into_iter().enumerate().map(|(i, c)| (c, i)).collect()
        };
        let last_col = cols.len() + 1;
        Layout {
            width: LEFT + COL * (last_col as f64 + 1.0) + RIGHT,
            height: TOP + ROW * clients.len() as f64 + 20.0,
            cols,
            clients,
            end,
            last_col,
        }
    }

    fn x(&self, col: usize) -> f64 {
        LEFT + COL * (col as f64 + 0.5)
    }

    /// The top of `client`'s row.
    fn y(&self, client: u64) -> f64 {
        TOP + ROW * self.clients[&client] as f64
    }
}

/// The SVG timeline of the failing prefix and a table of involved operations.
pub fn violation_svg(v: &Violation) -> String {
    let l = Layout::new(v);
    let mut s = intro(v);
    let _ = writeln!(
        s,
        "<div class=\"wrap\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\">",
        l.width, l.height
    );
    rows(&mut s, v, &l);
    for (i, o) in v.ops[..v.prefix_ops].iter().enumerate() {
        op_bar(&mut s, v, &l, i, o);
    }
    s.push_str("</svg></div>\n<table><tr><th></th><th>op</th><th>client</th><th>call</th><th>return</th><th>operation</th></tr>\n");
    involved_rows(&mut s, v, l.end);
    s.push_str("</table>\n");
    s
}

/// What the picture shows, and its legend.
fn intro(v: &Violation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<p>Key <b>{}</b>: the shortest non-linearizable prefix has {} events ({} of {} operations){}. \
         Operation #{} (red) cannot return what it did whatever the order of the others. \
         Yellow: the other operations involved (relax any operation not coloured and the prefix still fails). Dashed: not completed within the prefix.</p>",
        esc(&format!("{:?}", v.key)),
        v.prefix_events,
        v.prefix_ops,
        v.ops.len(),
        if v.minimal { "" } else { " (not minimal: shortening timed out)" },
        v.failing_op
    );
    s.push_str("<p class=\"legend\"><span style=\"background:#cfe2ff\">operation</span><span style=\"background:#ffe69c\">involved</span><span style=\"background:#f1aeb5\">failing</span></p>\n");
    s
}

/// The clients' rows, the line where the prefix ends, and the failing
/// operation's full label.
fn rows(s: &mut String, v: &Violation, l: &Layout) {
    let (width, height) = (l.width, l.height);
    for (c, &row) in &l.clients {
        let y = TOP + ROW * row as f64;
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{width:.0}\" y1=\"{:.0}\" y2=\"{:.0}\"/><text class=\"row\" x=\"8\" y=\"{:.0}\">client {c}</text>",
            y + ROW / 2.0,
            y + ROW / 2.0,
            y + ROW / 2.0 + 4.0
        );
    }
    let end_col = l.cols.get(&l.end).copied().unwrap_or(l.last_col);
    let _ = writeln!(
        s,
        "<line class=\"end\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2:.0}\"/><text x=\"{3:.1}\" y=\"{4}\" fill=\"#b02a37\">prefix ends</text>",
        l.x(end_col) + COL / 2.0,
        TOP - 14.0,
        height - 10.0,
        l.x(end_col) + COL / 2.0 + 4.0,
        TOP - 18.0
    );
    // The failing operation's full label, unclipped, right of the line.
    let o = &v.ops[v.failing_op];
    let y = l.y(o.client) + ROW / 2.0 + 4.0;
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{y:.0}\" fill=\"#b02a37\" font-weight=\"bold\">#{} {}</text>",
        l.x(l.last_col) + COL,
        v.failing_op,
        esc(&op_text(o))
    );
}

/// Operation `i`'s bar, from its call to its return (or the right edge).
fn op_bar(s: &mut String, v: &Violation, l: &Layout, i: usize, o: &Operation) {
    let c0 = l.cols[&o.call];
    let open = o.ret.is_none_or(|r| r > l.end);
    let c1 = if open {
        l.last_col
    } else {
        l.cols[&o.ret.expect("closed")]
    };
    let y = l.y(o.client) + 4.0;
    let (x0, x1) = (l.x(c0) - COL * 0.4, l.x(c1) + COL * 0.4);
    let mut class = String::from("op");
    let mut id = String::new();
    if i == v.failing_op {
        class.push_str(" fail");
        id = " id=\"failing\"".into();
    } else if v.involved.binary_search(&i).is_ok() {
        class.push_str(" inv");
    }
    if open {
        class.push_str(" open");
    }
    let label = op_text(o);
    let ret = o.ret.map_or("unknown".to_string(), |r| r.to_string());
    let _ = writeln!(
        s,
        "<g{id}><title>#{i} client {} {}\ncall {} return {}</title><rect class=\"{class}\" x=\"{x0:.1}\" y=\"{y:.0}\" width=\"{:.1}\" height=\"{:.0}\" rx=\"3\"/>\
         <clipPath id=\"c{i}\"><rect x=\"{x0:.1}\" y=\"{y:.0}\" width=\"{:.1}\" height=\"{:.0}\"/></clipPath>\
         <text x=\"{:.1}\" y=\"{:.0}\" clip-path=\"url(#c{i})\">{}</text></g>",
        o.client,
        esc(&label),
        o.call,
        ret,
        x1 - x0,
        ROW - 8.0,
        x1 - x0,
        ROW - 8.0,
        x0 + 3.0,
        y + ROW / 2.0,
        esc(&label)
    );
}

/// One table row per operation involved.
fn involved_rows(s: &mut String, v: &Violation, end: u64) {
    for &i in &v.involved {
        let o = &v.ops[i];
        let ret = match o.ret {
            Some(r) if r <= end => r.to_string(),
            Some(_) => "(after the prefix)".into(),
            None => "unknown".into(),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>#{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if i == v.failing_op { "failing" } else { "" },
            o.client,
            o.call,
            ret,
            esc(&op_text(o))
        );
    }
}
