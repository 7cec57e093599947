#!/bin/bash
# Seed 001 Fig. 8 and 9: the latency of asynchronous and synchronous
# creates over a grid of client RTT x server (peer) RTT, on 5 Zab replicas
# in memory (the seed's five servers). One bench run per grid point;
# heatmap.py draws both figures from the points' znode.csv.
# Needs target/release/quorumkv (cargo build --release; or QKV=path).
# Usage: grid.sh [OUT_DIR] [RTTS] [COUNT]
#   (defaults: crates/bench/docs/znode/grid, "0 100 200", 100 creates per mode)
cd "$(dirname "$0")/../../../.."
OUT=${1:-crates/bench/docs/znode/grid}
RTTS=${2:-0 100 200}
COUNT=${3:-100}
mkdir -p "$OUT"
for rc in $RTTS; do
  for rp in $RTTS; do
    d="$OUT/c$rc-p$rp"
    [ -f "$d/znode.csv" ] && continue   # resumable
    rm -rf "$d"
    # init-limit: discovery and sync take several peer round trips.
    "${QKV:-target/release/quorumkv}" bench --protocol zab --replicas 5 --durability memory --workload znode \
      --znode-ops create --count "$COUNT" --rtt-client "${rc}ms" --rtt-peer "${rp}ms" --opt init-limit=3s \
      --no-progress --port-base 7600 --out "$d" > "$d.txt" 2>&1 || echo "point c$rc-p$rp failed: see $d.txt"
  done
done
python3 crates/bench/docs/znode/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
