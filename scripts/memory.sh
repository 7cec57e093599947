#!/usr/bin/env bash
# Memory per stored key: the resident memory a replica gains holding K keys
# of V bytes, for quorumkv's ABD and Zab (3 replicas, fsync) and for Redis
# (appendonly, appendfsync always), loaded by the same bench.
#
#   scripts/memory.sh [K [V]]        # default K = 100000, V = 1024
#
# For each quorumkv protocol: start a cluster (`quorumkv cluster`), read
# every replica's VmRSS, let `quorumkv bench` preload the K keys (it writes
# every key once before it measures; the point itself only reads), read
# VmRSS again. Reported per replica: (after - before) / K, and that over V.
# For Redis: the same with its `used_memory` (what Redis counts for its
# data) and its process's VmRSS. Redis starts from scripts/peers.sh.
#
# Environment: QKV (the quorumkv binary, default target/release/quorumkv,
# built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

K=${1:-100000}
V=${2:-1024}
QKV=${QKV:-target/release/quorumkv}
[ -x "$QKV" ] || cargo build --release -p quorumkv >&2

rss_kb() { # summed VmRSS of the pids given, in KiB
  local s=0 p
  for p in "$@"; do s=$((s + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status"))); done
  echo "$s"
}
per_key() { # bytes gained per key per process: KB_BEFORE KB_AFTER PROCESSES
  awk -v b="$1" -v a="$2" -v n="$3" -v k="$K" -v v="$V" \
    'BEGIN { d = (a - b) * 1024 / n / k; printf "%8.0f B/key  %5.2fx the value", d, d / v }'
}
load() { # TARGET [--protocol P]: preload K keys, then one second of reads
  "$QKV" bench --target "$@" --keys "$K" --value-size "$V" --clients 32 \
    --get-fraction 1 --duration 1s --warmup 0s --no-check --no-out >/dev/null 2>&1
}

printf '%-10s %s\n' target "memory gained per key (K = $K keys of $V bytes)"
port=9700
for proto in abd zab; do
  dir=$(mktemp -d)
  "$QKV" cluster --protocol "$proto" --port-base "$port" --durability fsync \
    --data-dir "$dir/data" >"$dir/log" 2>&1 &
  cluster=$!
  eps="127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2)),127.0.0.1:$((port + 3))"
  healthy=0
  for _ in $(seq 50); do
    "$QKV" endpoints health --endpoints "$eps" >/dev/null 2>&1 && { healthy=1; break; }
    sleep 0.2
  done
  pids=$(pgrep -P "$cluster" | tr "\n" " ")
  if [ "$healthy" != 1 ] || [ -z "$pids" ]; then
    echo "memory.sh: the $proto cluster did not come up; its log:" >&2
    cat "$dir/log" >&2
    kill "$cluster" 2>/dev/null || true
    exit 1
  fi
  before=$(rss_kb $pids)
  load "quorumkv://$eps" --protocol "$proto"
  after=$(rss_kb $pids)
  printf '%-10s %s  (each replica: %d -> %d MiB)\n' "$proto" \
    "$(per_key "$before" "$after" 3)" $((before / 3072)) $((after / 3072))
  kill "$cluster"
  wait "$cluster" 2>/dev/null || true
  rm -rf "$dir"
  port=$((port + 100))
done

T=$(scripts/peers.sh start redis --fsync --port-base 16390)
redis-cli -p 16390 flushall >/dev/null
pid=$(redis-cli -p 16390 info server | awk -F: '/^process_id/ {print $2}' | tr -d '\r')
used() { redis-cli -p 16390 info memory | awk -F: '/^used_memory:/ {print int($2 / 1024)}'; }
before_used=$(used) before=$(rss_kb "$pid")
load "$T"
after_used=$(used) after=$(rss_kb "$pid")
printf '%-10s %s  (used_memory)\n' redis "$(per_key "$before_used" "$after_used" 1)"
printf '%-10s %s  (process RSS)\n' redis "$(per_key "$before" "$after" 1)"
scripts/peers.sh stop redis >/dev/null
