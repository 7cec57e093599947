#!/usr/bin/env python3
"""Seed 001 Fig. 8 and 9 from grid.sh's points: the asynchronous and the
synchronous create's latency (ms per create) over client RTT (x) and server
RTT (y), as Markdown tables on stdout and two SVG heatmaps
(DIR/fig8-async-create.svg, DIR/fig9-sync-create.svg). Standard library
only. Usage: [TITLE=...] heatmap.py DIR ["0 100 200"] (TITLE names the
service in the figures' titles, default quorumkv)."""
import csv, glob, os, re, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "locks"))
from heatmap import svg  # the lock grid's drawing

def main():
    root = sys.argv[1]
    keep = {int(x) for x in sys.argv[2].split()} if len(sys.argv) > 2 else None
    pts = {}
    for f in glob.glob(os.path.join(root, "c*-p*", "znode.csv")):
        m = re.search(r"c(\d+)-p(\d+)", f)
        rc, rp = int(m.group(1)), int(m.group(2))
        if keep is None or (rc in keep and rp in keep):
            for row in csv.DictReader(open(f)):
                if row["op"] == "create":
                    pts[(row["mode"], rc, rp)] = row
    cs = sorted({k[1] for k in pts}); ps = sorted({k[2] for k in pts})
    for fig, mode in (("fig8", "async"), ("fig9", "sync")):
        val = {(rc, rp): float(pts[(mode, rc, rp)]["per_op_ms"]) for rc in cs for rp in ps if (mode, rc, rp) in pts}
        if not val:
            continue
        fmt = "{:.3g}"
        who = os.environ.get("TITLE") or "quorumkv"
        svg(f"{who}: {mode} create, ms per create, N = 5", cs, ps, val, max(val.values()) or 1.0,
            os.path.join(root, f"{fig}-{mode}-create.svg"), fmt)
        print(f"\n**{mode} create** ({fig}): elapsed / creates in ms (rows: server RTT, columns: client RTT)\n")
        print("| server \\ client | " + " | ".join(f"{c} ms" for c in cs) + " |")
        print("|---|" + "---:|" * len(cs))
        for rp in ps:
            print(f"| {rp} ms | " + " | ".join("-" if (rc, rp) not in val else fmt.format(val[(rc, rp)]) for rc in cs) + " |")
    errors = sum(int(r["errors"]) for r in pts.values())
    print(f"\n{len(pts)} points, {errors} failed calls")

main()
