#!/bin/bash
# Seed 001 Fig. 13, 14 and 16 (3 servers in memory, arrivals every 200 ms,
# exponential):
#   fig13/cs<C>  client RTT 100 ms, critical section C = 1, 50, 100, 150 ms
#                (Fig. 14, the same without RTT, is crates/bench/docs/locks/cs<C>)
#   fig16/c<R>-cs150  critical section 150 ms, client RTT R = 0, 50, 100, 200 ms
# ZK=1: the same points on a 3-server ZooKeeper 3.8 ensemble in memory (one per
# point, its client RTT added by relays: scripts/peers.sh --rtt-client), into
# fig13-zk/, fig14-zk/ (Fig. 14 too) and fig16-zk/.
# One bench run per point; contention.py prints the tables.
# Needs target/release/quorumkv (or QKV=path). ~12 min (ZK=1: ~20 min).
cd "$(dirname "$0")/../../../.."
D=crates/bench/docs/locks
Q=${QKV:-target/release/quorumkv}
sfx=${ZK:+-zk}
# point DIR RTT_MS CS_MS SECONDS WARMUP: one bench run into DIR (skipped if done).
point() {
  local d=$1 rc=$2 cs=$3 secs=$4 warm=$5 where
  [ -f "$d/lock.csv" ] && return   # resumable
  rm -rf "$d"; mkdir -p "$(dirname "$d")"
  if [ -n "$ZK" ]; then
    local rtt=()
    [ "$rc" != 0 ] && rtt+=(--rtt-client "${rc}ms")
    scripts/peers.sh stop zookeeper >/dev/null 2>&1 || true
    where=$(scripts/peers.sh start zookeeper --replicas 3 --memory "${rtt[@]}" | tail -1) \
      || { echo "$d: ZooKeeper did not start"; return; }
    where=(--target "$where")
  else
    where=(--protocol zab --replicas 3 --durability memory --port-base 7600 --rtt-client "${rc}ms")
  fi
  $Q bench "${where[@]}" --workload lock --arrival-ms 200 --no-progress --cs-ms "$cs" \
    --duration "${secs}s" --warmup "${warm}s" --out "$d" > "$d.txt" 2>&1 || echo "$d failed: see $d.txt"
}
for cs in 1 50 100 150; do point "$D/fig13$sfx/cs$cs" 100 $cs 10 1; done
[ -n "$ZK" ] && for cs in 1 50 100 150; do point "$D/fig14-zk/cs$cs" 0 $cs 10 1; done
for rc in 0 50 100 200; do point "$D/fig16$sfx/c$rc-cs150" "$rc" 150 20 2; done
[ -n "$ZK" ] && scripts/peers.sh stop zookeeper >/dev/null 2>&1
true
