#!/bin/bash
# Seed 001 Fig. 10: the lock recipes over a grid of client RTT x server
# (peer) RTT, 0 to 250 ms, exponential inter-arrival 500 ms, critical
# section 1 ms, 3 Zab replicas in memory. One bench run per grid point;
# heatmap.py draws the figures from the points' lock.csv.
# Needs target/release/quorumkv (cargo build --release; or QKV=path). ~30 min, mostly idle
# (the time is the added round trips).
# Usage: [EXTRA="--opt read=local"] grid.sh [OUT_DIR] [RTTS]
#   (defaults: crates/bench/docs/locks/grid, "0 50 100 150 200 250"; EXTRA: more bench flags)
cd "$(dirname "$0")/../../../.."
OUT=${1:-crates/bench/docs/locks/grid}
RTTS=${2:-0 50 100 150 200 250}
mkdir -p "$OUT"
for rc in $RTTS; do
  for rp in $RTTS; do
    d="$OUT/c$rc-p$rp"
    [ -f "$d/lock.csv" ] && continue   # resumable
    rm -rf "$d"
    # init-limit: discovery and sync take several peer round trips.
    "${QKV:-target/release/quorumkv}" bench --protocol zab --replicas 3 --durability memory --workload lock \
      --rtt-client "${rc}ms" --rtt-peer "${rp}ms" --opt init-limit=3s $EXTRA \
      --arrival-ms 500 --cs-ms 1 --poll-ms 10 --duration 8s --warmup 1s --no-progress --port-base 7600 \
      --out "$d" > "$d.txt" 2>&1 || echo "point c$rc-p$rp failed: see $d.txt"
  done
done
python3 crates/bench/docs/locks/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
