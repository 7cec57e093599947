#!/usr/bin/env python3
"""Seed 001 Fig. 10 from grid.sh's points: per recipe, the mean acquire
latency (ms) over client RTT (x) and server RTT (y), as a Markdown table on
stdout and one SVG heatmap per recipe (DIR/fig10-<recipe>.svg). Standard
library only. Usage: [TITLE=ZooKeeper] heatmap.py DIR ["0 100 200"]"""
import csv, glob, os, re, sys

def load(root, keep=None):
    pts = {}
    for f in glob.glob(os.path.join(root, "c*-p*", "lock.csv")):
        m = re.search(r"c(\d+)-p(\d+)", f)
        rc, rp = int(m.group(1)), int(m.group(2))
        if keep is not None and (rc not in keep or rp not in keep):
            continue
        for row in csv.DictReader(open(f)):
            pts[(row["recipe"], rc, rp)] = row
    return pts

def colour(t):
    # white (fast) to dark red (slow)
    r, g, b = 255, int(255 * (1 - t) ** 1.2), int(235 * (1 - t) ** 1.6)
    return f"rgb({r},{g},{b})"

def svg(title, cs, ps, val, vmax, path, fmt="{:.0f}"):
    cell, left, top = 64, 90, 50
    w, h = left + cell * len(cs) + 20, top + cell * len(ps) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for j, rp in enumerate(reversed(ps)):
        y = top + j * cell
        out.append(f'<text x="{left-8}" y="{y+cell/2+4}" text-anchor="end">{rp}</text>')
        for i, rc in enumerate(cs):
            x = left + i * cell
            v = val.get((rc, rp))
            fill = colour(min(v / vmax, 1.0)) if v is not None else "#ddd"
            out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" stroke="#fff"/>')
            if v is not None:
                tc = "#fff" if v / vmax > 0.6 else "#000"
                out.append(f'<text x="{x+cell/2}" y="{y+cell/2+4}" text-anchor="middle" fill="{tc}">{fmt.format(v)}</text>')
    for i, rc in enumerate(cs):
        out.append(f'<text x="{left+i*cell+cell/2}" y="{top+len(ps)*cell+16}" text-anchor="middle">{rc}</text>')
    out.append(f'<text x="{left+len(cs)*cell/2}" y="{top+len(ps)*cell+40}" text-anchor="middle">client RTT (ms)</text>')
    out.append(f'<text x="20" y="{top+len(ps)*cell/2}" text-anchor="middle" transform="rotate(-90 20 {top+len(ps)*cell/2})">server RTT (ms)</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")

def main():
    root = sys.argv[1]
    # Optional: the RTTs of the grid (points off it, e.g. Fig. 11's, are left out).
    keep = {int(x) for x in sys.argv[2].split()} if len(sys.argv) > 2 else None
    pts = load(root, keep)
    recipes = sorted({k[0] for k in pts}, key=["tas", "tas-watch", "async-tas", "queue", "async-queue"].index)
    cs = sorted({k[1] for k in pts}); ps = sorted({k[2] for k in pts})
    vmax = max(float(r["mean_ms"]) for r in pts.values()) or 1.0
    for rec in recipes:
        val = {(rc, rp): float(pts[(rec, rc, rp)]["mean_ms"]) for rc in cs for rp in ps if (rec, rc, rp) in pts}
        who = os.environ.get("TITLE", "")
        svg(f"{who + ': ' if who else ''}{rec}: mean acquire latency (ms), N = 3", cs, ps, val, vmax, os.path.join(root, f"fig10-{rec}.svg"))
        print(f"\n**{rec}**: mean acquire latency in ms (rows: server RTT, columns: client RTT)\n")
        print("| server \\ client | " + " | ".join(f"{c} ms" for c in cs) + " |")
        print("|---|" + "---:|" * len(cs))
        for rp in ps:
            cells = []
            for rc in cs:
                r = pts.get((rec, rc, rp))
                cells.append("-" if r is None else f'{float(r["mean_ms"]):.1f}')
            print(f"| {rp} ms | " + " | ".join(cells) + " |")
    bad = [(k, r["overlaps"], r["order_violations"], r["failed"]) for k, r in pts.items()
           if r["overlaps"] != "0" or r["order_violations"] != "0" or r["failed"] != "0"]
    n = sum(int(r["acquisitions"]) for r in pts.values())
    print(f"\n{len(pts)} points, {n} acquisitions; points with overlaps, token order violations or failures: {bad or 'none'}")

if __name__ == "__main__":
    main()
