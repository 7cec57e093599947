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
OUT=${1:-crates/bench/docs/znode/grid${ZK:+-zk}}
RTTS=${2:-0 100 200}
COUNT=${3:-100}
Q=${QKV:-target/release/quorumkv}
mkdir -p "$OUT"
for rc in $RTTS; do
  for rp in $RTTS; do
    d="$OUT/c$rc-p$rp"
    [ -f "$d/znode.csv" ] && continue   # resumable
    rm -rf "$d"
    if [ -n "$ZK" ]; then
      rtt=()
      [ "$rc" != 0 ] && rtt+=(--rtt-client "${rc}ms")
      [ "$rp" != 0 ] && rtt+=(--rtt-peer "${rp}ms")
      scripts/peers.sh stop zookeeper >/dev/null 2>&1 || true
      if ! T=$(QKV=$Q scripts/peers.sh start zookeeper --replicas 5 --memory "${rtt[@]}" | tail -1); then
        echo "point c$rc-p$rp: ZooKeeper did not start"; continue
      fi
      # Without added round trips the JIT's warm-up shows: warm it first.
      [ "$rc$rp" = 00 ] && $Q bench --target "$T" --workload znode --znode-ops create --count 2000 \
        --no-progress --no-out >/dev/null 2>&1
      where=(--target "$T")
    else
      # init-limit: discovery and sync take several peer round trips.
      where=(--protocol zab --replicas 5 --durability memory --rtt-client "${rc}ms" --rtt-peer "${rp}ms"
        --opt init-limit=3s --port-base 7600)
    fi
    $Q bench "${where[@]}" --workload znode --znode-ops create --count "$COUNT" \
      --no-progress --out "$d" > "$d.txt" 2>&1 || echo "point c$rc-p$rp failed: see $d.txt"
  done
done
[ -n "$ZK" ] && scripts/peers.sh stop zookeeper >/dev/null 2>&1
TITLE=${ZK:+ZooKeeper 3.8} python3 crates/bench/docs/znode/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
