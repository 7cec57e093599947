#!/usr/bin/env python3
"""Render the Grafana dashboard (deploy/grafana/quorumkv.json) from a real
run, without Grafana: every panel's own PromQL queries are asked of a real
Prometheus over its HTTP API and drawn with matplotlib, three panels a row
as on the dashboard. `scripts/dashboard-demo.sh` makes the run; this draws.

usage: dashboard-render.py PROMETHEUS_URL START END OUT.png [--events FILE]
  START, END: unix seconds; --events: lines "SECONDS LABEL" drawn as marks.
"""
import json
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = "deploy/grafana/quorumkv.json"
# Grafana's $__rate_interval: at least four scrape intervals (2 s here).
RATE_INTERVAL = "10s"
STEP = 2


def query_range(url, expr, start, end):
    q = urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": STEP})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}") as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"prometheus refused {expr!r}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def main():
    args = sys.argv[1:]
    events = []
    if "--events" in args:
        i = args.index("--events")
        with open(args[i + 1]) as f:
            for line in f:
                t, _, label = line.strip().partition(" ")
                events.append((float(t), label))
        del args[i:i + 2]
    url, start, end, out = args[0], float(args[1]), float(args[2]), args[3]
    with open(DASHBOARD) as f:
        dash = json.load(f)
    panels = dash["panels"]
    rows = (len(panels) + 2) // 3
    fig, axes = plt.subplots(rows, 3, figsize=(16, 3.6 * rows), squeeze=False)
    for ax, p in zip(axes.flat, panels):
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", RATE_INTERVAL)
            for series in query_range(url, expr, start, end):
                xs = [float(v[0]) - start for v in series["values"]]
                ys = [float(v[1]) for v in series["values"]]
                ax.plot(xs, ys, label=legend(t["legendFormat"], series["metric"]))
        for t, label in events:
            ax.axvline(t - start, color="grey", linestyle=":", linewidth=1)
        ax.set_title(p["title"], fontsize=10)
        unit = p["fieldConfig"]["defaults"].get("unit", "")
        ax.set_ylabel({"s": "seconds", "reqps": "requests/s"}.get(unit, ""))
        ax.set_xlabel("seconds into the run")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    marks = "; ".join(f"{t - start:.0f} s: {label}" for t, label in events)
    fig.suptitle(f"{dash['title']} dashboard, rendered from Prometheus"
                 + (f" (dotted: {marks})" if marks else ""), fontsize=12)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
