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
OUT=${1:-crates/bench/docs/locks/grid}
RTTS=${2:-0 50 100 150 200 250}
mkdir -p "$OUT"
for rc in $RTTS; do
  for rp in $RTTS; do
    d="$OUT/c$rc-p$rp"
    [ -f "$d/lock.csv" ] && continue   # resumable
    rm -rf "$d"
    if [ -n "$ZK" ]; then
      rtt=()
      [ "$rc" != 0 ] && rtt+=(--rtt-client "${rc}ms")
      [ "$rp" != 0 ] && rtt+=(--rtt-peer "${rp}ms")
      scripts/peers.sh stop zookeeper >/dev/null 2>&1 || true
      if ! T=$(scripts/peers.sh start zookeeper --replicas 3 --memory "${rtt[@]}" | tail -1); then
        echo "point c$rc-p$rp: ZooKeeper did not start"; continue
      fi
      where=(--target "$T")
    else
      # init-limit: discovery and sync take several peer round trips.
      where=(--protocol zab --replicas 3 --durability memory --rtt-client "${rc}ms" --rtt-peer "${rp}ms"
        --opt init-limit=3s --port-base 7600)
    fi
    # shellcheck disable=SC2086
    "${QKV:-target/release/quorumkv}" bench "${where[@]}" --workload lock $EXTRA \
      --arrival-ms 500 --cs-ms 1 --poll-ms 10 --duration 8s --warmup 1s --no-progress \
      --out "$d" > "$d.txt" 2>&1 || echo "point c$rc-p$rp failed: see $d.txt"
  done
done
[ -n "$ZK" ] && scripts/peers.sh stop zookeeper >/dev/null 2>&1
TITLE=${ZK:+ZooKeeper 3.8} python3 crates/bench/docs/locks/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
