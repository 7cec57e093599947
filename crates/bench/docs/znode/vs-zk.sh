#!/bin/bash
# Seed 001 Fig. 7: each basic znode operation called 1000 times
# synchronously and 1000 times asynchronously (all in flight on one
# session), on quorumkv (Zab) and on a ZooKeeper 3.8 ensemble of the same
# size, in one bench run.
# Usage: vs-zk.sh LABEL DURABILITY N [--memory]
#   e.g. vs-zk.sh fsync-n5 fsync 5 ; vs-zk.sh memory-n5 memory 5 --memory
# Starts (and stops) the ZooKeeper ensemble with scripts/peers.sh.
# Needs target/release/quorumkv (or QKV=path). ~2 min per call.
set -e
cd "$(dirname "$0")/../../../.."
. crates/bench/docs/common.sh
vs_zk_start crates/bench/docs/znode/vs-zk "$@"
# ZooKeeper's JIT warms up first (not recorded).
$Q bench --target "$T" --workload znode --count 2000 --no-progress --no-out >/dev/null 2>&1
rm -rf $D/$label
$Q bench --target local,$T --protocol zab --replicas $n --durability $dur --workload znode --count 1000 \
  --no-progress --out $D/$label > $D/$label.txt 2>&1
scripts/peers.sh stop zookeeper >/dev/null
