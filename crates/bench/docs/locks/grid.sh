#!/bin/bash
# Seed 001 Fig. 10: the lock recipes over a grid of client RTT x server
# (peer) RTT, 0 to 250 ms, exponential inter-arrival 500 ms, critical
# section 1 ms, 3 Zab replicas in memory. One bench run per grid point;
# heatmap.py draws the figures from the points' lock.csv.
# Needs target/release/quorumkv (cargo build --release; or QKV=path). ~30 min, mostly idle
# (the time is the added round trips).
# Usage: [EXTRA="--opt read=local"] [ZK=1] grid.sh [OUT_DIR] [RTTS]
#   (defaults: crates/bench/docs/locks/grid, "0 50 100 150 200 250"; EXTRA: more bench flags)
# ZK=1: the same recipes on a 3-server ZooKeeper 3.8 ensemble in memory instead, one per point,
# its round trips added by relays (scripts/peers.sh start zookeeper --rtt-client/--rtt-peer).
cd "$(dirname "$0")/../../../.."
. crates/bench/docs/common.sh
OUT=${1:-crates/bench/docs/locks/grid}
RTTS=${2:-0 50 100 150 200 250}
point() {
  # shellcheck disable=SC2086
  "$Q" bench "${where[@]}" --workload lock $EXTRA \
    --arrival-ms 500 --cs-ms 1 --poll-ms 10 --duration 8s --warmup 1s --no-progress \
    --out "$3" > "$3.txt" 2>&1
}
grid "$OUT" "$RTTS" lock.csv 3 point
TITLE=${ZK:+ZooKeeper 3.8} python3 crates/bench/docs/locks/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
