#!/bin/bash
# Seed 001's lock recipes on quorumkv (Zab) against ZooKeeper 3.8, the same
# recipe code over both clients, in one bench run per setting:
#   one    seed 001's single lock, critical section 1 ms, arrivals every 1 ms
#          (far above capacity: acquisitions/s is the lock's capacity)
#   cs0    one lock, no critical section, arrivals every 0.25 ms: the handoff alone
#   many   20 locks, 100 sessions, arrivals every 0.05 ms: the service's capacity
# Usage: vs-zk.sh LABEL DURABILITY N [--memory]
#   e.g. vs-zk.sh fsync-n3 fsync 3 ; vs-zk.sh memory-n3 memory 3 --memory
# Starts (and stops) a ZooKeeper ensemble of N servers with scripts/peers.sh.
# Needs target/release/quorumkv (or QKV=path). ~5 min per call.
set -e
cd "$(dirname "$0")/../../../.."
. crates/bench/docs/common.sh
vs_zk_start crates/bench/docs/locks/vs-zk "$@"
B="$Q bench --target local,$T --protocol zab --replicas $n --durability $dur --workload lock --duration 10s --warmup 2s --no-progress"
# ZooKeeper's JIT warms up first (not recorded).
$Q bench --target "$T" --workload lock --recipe queue,tas-watch --locks 20 \
  --max-outstanding 100 --arrival-ms 0.2 --duration 8s --warmup 1s --no-progress --no-out >/dev/null 2>&1
rm -rf $D/$label-one $D/$label-cs0 $D/$label-many
$B --arrival-ms 1 --cs-ms 1 --out $D/$label-one > $D/$label-one.txt 2>&1
$B --arrival-ms 0.25 --cs-ms 0 --recipe tas-watch,queue,async-queue --out $D/$label-cs0 > $D/$label-cs0.txt 2>&1
$B --arrival-ms 0.05 --cs-ms 1 --locks 20 --max-outstanding 100 --recipe tas-watch,queue,async-queue \
  --out $D/$label-many > $D/$label-many.txt 2>&1
scripts/peers.sh stop zookeeper >/dev/null
