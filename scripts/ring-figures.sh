#!/usr/bin/env bash
# Seed 004 §5 (Figures 3 and 4) on one machine: ring and ABD for N = 2..8,
# 4 KB values, clients pinned evenly to servers (proxy mode for both), every
# replica held to a fixed share of one core (cgroup v1; needs root).
# Writes the runs to $OUT (default /tmp/ring-figures) and copies the tables
# and the figures against N to crates/bench/docs/ring/.
#   scripts/ring-figures.sh                 # all four claims
#   NS=2,4,8 DUR=2s scripts/ring-figures.sh # fewer points
#   NOBUILD=1 …                            # use target/release as it is
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ring-figures}
NS=${NS:-2,3,4,5,6,7,8}
DUR=${DUR:-3s}
CPU=${CPU:-0.1}
DOCS=${DOCS:-crates/bench/docs/ring}
[ -n "${NOBUILD:-}" ] || cargo build --release --quiet --bin quorumkv
B=target/release/quorumkv
common=(--protocol ring,abd --client-mode proxy --replicas "$NS" --replica-cpu "$CPU"
        --value-size 4096 --keys 100 --duration "$DUR" --warmup 1s --no-progress)
run() { # name, bench flags…
  local name=$1; shift
  echo "== $name: quorumkv bench ${common[*]} $*"
  "$B" bench "${common[@]}" "$@" --out "$OUT/$name" | tee "$OUT/$name.txt"
  mkdir -p "$DOCS/$name"
  cp "$OUT/$name"/results.csv "$OUT/$name"/scaling_*.png "$OUT/$name.txt" "$DOCS/$name/"
}
mkdir -p "$OUT"
run a-read-only  --get-fraction 1 --clients 48 --no-check
run b-write-only --get-fraction 0 --clients 48 --no-check
run c-readers-writers --get-fraction 0.5 --dedicated-clients --clients 48 --no-check
run d-latency    --get-fraction 0.5 --dedicated-clients --clients 2
