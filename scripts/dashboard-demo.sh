#!/usr/bin/env bash
# A real run for the monitoring page's dashboard picture: a local 3-replica
# Zab cluster (fsync) with metrics ports, a real Prometheus scraping it
# every 2 s, redis-benchmark load on the RESP ports, the leader killed
# halfway; then scripts/dashboard-render.py draws the dashboard's panels.
# Needs: prometheus, redis-benchmark, python3-matplotlib (Debian packages).
# usage: scripts/dashboard-demo.sh [OUT.png]   (about 2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/src/operations/dashboard.png}
base=${PORT_BASE:-23000}
bin=${QUORUMKV:-target/release/quorumkv}
[ -x "$bin" ] || cargo build --release --bin quorumkv
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" cluster -p zab --durability fsync --metrics --port-base "$base" >"$work/cluster.out" 2>&1 &
until grep -q '^ready ' "$work/cluster.out"; do sleep 0.2; done
cat > "$work/prometheus.yml" <<YML
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files: ["$PWD/deploy/prometheus/alerts.yml"]
scrape_configs:
  - job_name: quorumkv
    static_configs:
      - targets: ["127.0.0.1:$((base + 301))", "127.0.0.1:$((base + 302))", "127.0.0.1:$((base + 303))"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:$((base + 390)) >"$work/prometheus.log" 2>&1 &
prom=http://127.0.0.1:$((base + 390))
until curl -sf "$prom/-/ready" >/dev/null; do sleep 0.5; done
start=$(date +%s)
load() { # seconds, on every replica's RESP port
  local until=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$until" ]; do
    for i in 1 2 3; do
      timeout 5 redis-benchmark -p $((base + 100 + i)) -t set,get -c 8 -n 2000 -r 1000 -d 100 -q >/dev/null 2>&1 &
    done
    wait $(jobs -p | tail -3) 2>/dev/null || true
  done
}
load 45
leader=$("$bin" endpoints status -e "127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))" --json \
  | "${PYTHON:-/usr/bin/python3}" -c 'import json,sys; print([e["id"] for e in json.load(sys.stdin) if e.get("role") == "leader"][0])')
pid=$(awk -v id="$leader" '/ native / && $1 == "replica" && $2 == id { print $NF }' "$work/cluster.out")
kill -9 "$pid"
echo "$(date +%s) leader (replica $leader) killed" > "$work/events"
load 45
end=$(date +%s)
sleep 3
"${PYTHON:-/usr/bin/python3}" scripts/dashboard-render.py "$prom" "$start" "$end" "$out" --events "$work/events"
