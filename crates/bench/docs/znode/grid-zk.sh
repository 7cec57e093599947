#!/bin/bash
# Seed 001 Fig. 8 and 9 on ZooKeeper: grid.sh's grid (client RTT x server
# RTT, asynchronous and synchronous creates) on a 5-server ZooKeeper 3.8
# ensemble in memory (/dev/shm, forceSync=no), the round trips added by
# relays (quorumkv delay-proxy: ZooKeeper cannot add them itself, and this
# kernel has no netem). One ensemble per grid point, started and stopped
# with scripts/peers.sh; heatmap.py draws both figures.
# Needs target/release/quorumkv (cargo build --release; or QKV=path).
# Usage: grid-zk.sh [OUT_DIR] [RTTS] [COUNT]
#   (defaults: crates/bench/docs/znode/grid-zk, "0 100 200", 100 creates per mode)
cd "$(dirname "$0")/../../../.."
OUT=${1:-crates/bench/docs/znode/grid-zk}
RTTS=${2:-0 100 200}
COUNT=${3:-100}
Q=${QKV:-target/release/quorumkv}
mkdir -p "$OUT"
for rc in $RTTS; do
  for rp in $RTTS; do
    d="$OUT/c$rc-p$rp"
    [ -f "$d/znode.csv" ] && continue   # resumable
    rm -rf "$d"
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
    $Q bench --target "$T" --workload znode --znode-ops create --count "$COUNT" \
      --no-progress --out "$d" > "$d.txt" 2>&1 || echo "point c$rc-p$rp failed: see $d.txt"
  done
done
scripts/peers.sh stop zookeeper >/dev/null 2>&1 || true
TITLE="ZooKeeper 3.8" python3 crates/bench/docs/znode/heatmap.py "$OUT" "$RTTS" > "$OUT/table.md"
