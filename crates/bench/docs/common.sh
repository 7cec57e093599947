#!/bin/bash
# Shared by the lock and znode experiment scripts (locks/, znode/), which
# source it from the repository's root. Q is the bench's executable.
Q=${QKV:-target/release/quorumkv}

# zk_restart N [peers.sh start flags…]: a fresh ZooKeeper ensemble of N
# servers; prints its --target.
zk_restart() {
  local n=$1
  shift
  scripts/peers.sh stop zookeeper >/dev/null 2>&1 || true
  QKV=$Q scripts/peers.sh start zookeeper --replicas "$n" "$@" | tail -1
}

# grid_where RC RP N: the bench flags of the grid point with client RTT RC
# ms and peer RTT RP ms, in the array `where`. With ZK set: a fresh
# ZooKeeper ensemble of N servers in memory, its round trips added by
# relays (ZooKeeper cannot add them itself), its target also in T; else N
# Zab replicas in memory that add them.
grid_where() {
  local rc=$1 rp=$2 n=$3
  if [ -n "$ZK" ]; then
    local rtt=()
    [ "$rc" != 0 ] && rtt+=(--rtt-client "${rc}ms")
    [ "$rp" != 0 ] && rtt+=(--rtt-peer "${rp}ms")
    if ! T=$(zk_restart "$n" --memory "${rtt[@]}"); then
      echo "point c$rc-p$rp: ZooKeeper did not start"
      return 1
    fi
    where=(--target "$T")
  else
    # init-limit: discovery and sync take several peer round trips.
    where=(--protocol zab --replicas "$n" --durability memory --rtt-client "${rc}ms" --rtt-peer "${rp}ms"
      --opt init-limit=3s --port-base 7600)
  fi
}

# grid OUT RTTS CSV N POINT: every grid point (client RTT x peer RTT, both
# over RTTS) not yet done (no OUT/cRC-pRP/CSV: resumable), each with its
# flags in `where` (grid_where), run by `POINT RC RP DIR`, which writes
# DIR and DIR.txt.
grid() {
  local out=$1 rtts=$2 csv=$3 n=$4 point=$5 rc rp d
  mkdir -p "$out"
  for rc in $rtts; do
    for rp in $rtts; do
      d="$out/c$rc-p$rp"
      [ -f "$d/$csv" ] && continue
      rm -rf "$d"
      grid_where "$rc" "$rp" "$n" || continue
      "$point" "$rc" "$rp" "$d" || echo "point c$rc-p$rp failed: see $d.txt"
    done
  done
  [ -n "$ZK" ] && scripts/peers.sh stop zookeeper >/dev/null 2>&1
}

# vs_zk_start DIR LABEL DURABILITY N [--memory]: the start of a comparison
# with ZooKeeper: the arguments in label, dur, n; results in D (made); a
# fresh ZooKeeper ensemble of N servers, its target in T.
vs_zk_start() {
  D=$1 label=$2 dur=$3 n=$4
  mkdir -p "$D"
  T=$(zk_restart "$n" ${5:+"$5"})
}
