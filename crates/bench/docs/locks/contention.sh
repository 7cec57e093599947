#!/bin/bash
# Seed 001 Fig. 13 and 16 on our service (3 Zab replicas in memory, arrivals
# every 200 ms, exponential):
#   fig13/cs<C>  client RTT 100 ms, critical section C = 1, 50, 100, 150 ms
#                (Fig. 14, the same without RTT, is crates/bench/docs/locks/cs<C>)
#   fig16/c<R>-cs150  critical section 150 ms, client RTT R = 0, 50, 100, 200 ms
# One bench run per point; summarize.py prints the tables.
# Needs target/release/quorumkv (or QKV=path). ~12 min.
cd "$(dirname "$0")/../../../.."
D=crates/bench/docs/locks
Q=${QKV:-target/release/quorumkv}
B="$Q bench --protocol zab --replicas 3 --durability memory --workload lock --arrival-ms 200 --no-progress --port-base 7600"
for cs in 1 50 100 150; do
  d=$D/fig13/cs$cs
  [ -f "$d/lock.csv" ] && continue   # resumable
  rm -rf "$d"; mkdir -p $D/fig13
  $B --rtt-client 100ms --cs-ms $cs --duration 10s --warmup 1s --out "$d" > "$d.txt" 2>&1 || echo "fig13 cs$cs failed: see $d.txt"
done
for rc in 0 50 100 200; do
  d=$D/fig16/c$rc-cs150
  [ -f "$d/lock.csv" ] && continue
  rm -rf "$d"; mkdir -p $D/fig16
  $B --rtt-client ${rc}ms --cs-ms 150 --duration 20s --warmup 2s --out "$d" > "$d.txt" 2>&1 || echo "fig16 c$rc failed: see $d.txt"
done
