#!/bin/bash
# Seed 001 Fig. 8 and 9: the latency of asynchronous and synchronous
# creates over a grid of client RTT x server (peer) RTT, on 5 Zab replicas
# in memory (the seed's five servers). One bench run per grid point;
# heatmap.py draws both figures from the points' znode.csv.
# ZK=1: the same grid on a 5-server ZooKeeper 3.8 ensemble in memory
# (/dev/shm, forceSync=no), one per point, its round trips added by relays
# (scripts/peers.sh start zookeeper --rtt-client/--rtt-peer: ZooKeeper cannot
# add them itself, and this kernel has no netem).
# Needs target/release/quorumkv (cargo build --release; or QKV=path).
# Usage: [ZK=1] grid.sh [OUT_DIR] [RTTS] [COUNT]
#   (defaults: crates/bench/docs/znode/grid (ZK=1: grid-zk), "0 100 200", 100 creates per mode)
cd "$(dirname "$0")/../../../.."
. crates/bench/docs/common.sh
OUT=${1:-crates/bench/docs/znode/grid${ZK:+-zk}}
RTTS=${2:-0 100 200}
COUNT=${3:-100}
point() {
  # Without added round trips the JIT's warm-up shows: warm it first.
  [ -n "$ZK" ] && [ "$1$2" = 00 ] && $Q bench --target "$T" --workload znode --znode-ops create \
    --count 2000 --no-progress --no-out >/dev/null 2>&1
  $Q bench "${where[@]}" --workload znode --znode-ops create --count "$COUNT" \
    --no-progress --out "$3" > "$3.txt" 2>&1
}
grid "$OUT" "$RTTS" znode.csv 5 point
TITLE=${ZK:+ZooKeeper 3.8} python3 crates/bench/docs/znode/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
