#!/usr/bin/env bash
# Check deploy/compose.yaml end to end: three replicas up and healthy, put
# and get from the host through the published ports, a replica SIGKILLed
# and restarted with its data back, a replica recreated at a new address and
# found again by its peers (names re-resolved), then everything torn down.
#
#   scripts/compose-check.sh          # needs the image: scripts/image.sh
#
# The client is the host's quorumkv (QUORUMKV_BIN, default a debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${QUORUMKV_IMAGE:-quorumkv:latest}
bin=${QUORUMKV_BIN:-target/debug/quorumkv}
[ -x "$bin" ] || cargo build -q -p quorumkv
docker image inspect "$image" >/dev/null 2>&1 || { echo "no image $image: run scripts/image.sh"; exit 2; }
project=qkvcheck$$
compose=(docker-compose -p "$project" -f deploy/compose.yaml)
eps=127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003
cleanup() {
  docker rm -f "$project-squatter" >/dev/null 2>&1 || true
  rm -f deploy/cluster.secret
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT
export QUORUMKV_IMAGE=$image
# The replicas' shared secret (deploy/cluster.toml names it), readable by
# the container's user; a fresh one per check.
rm -f deploy/cluster.secret
"$bin" secret --out deploy/cluster.secret
chown 10001 deploy/cluster.secret 2>/dev/null || chmod 0644 deploy/cluster.secret

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
cid() { "${compose[@]}" ps -q "$1"; }
ip_of() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(cid "$1")"; }
# Wait until every named service's health check passes (60 s at most).
wait_healthy() {
  local deadline=$((SECONDS + 60)) s st
  for s in "$@"; do
    while :; do
      st=$(docker inspect -f '{{.State.Health.Status}}' "$(cid "$s")" 2>/dev/null || echo none)
      [ "$st" = healthy ] && break
      if [ $SECONDS -ge $deadline ]; then
        echo "FAIL: $s not healthy within 60 s (status $st)"; "${compose[@]}" logs --tail 20 "$s"; exit 1
      fi
      sleep 0.2
    done
  done
}
# A client operation, retried for 20 s (a quorum forms just after the health checks pass).
retry() {
  local deadline=$((SECONDS + 20))
  until out=$("$bin" "$@" -e "$eps" 2>&1); do
    if [ $SECONDS -ge $deadline ]; then echo "FAIL: quorumkv $*: $out"; exit 1; fi
    sleep 0.2
  done
  echo "$out"
}
expect() { # expect KEY VALUE
  local got; got=$(retry get "$1")
  [ "$got" = "$2" ] || { echo "FAIL: get $1 returned '$got', expected '$2'"; exit 1; }
  echo "  get $1 -> $got"
}

echo "== docker-compose up ($image, project $project)"
t0=$(now)
"${compose[@]}" up -d
echo "  docker-compose up -d returned after $(since "$t0") s"
wait_healthy qkv1 qkv2 qkv3
echo "  all three healthy $(since "$t0") s after up"
uid=$(docker top "$(cid qkv1)" -eo pid,uid,args | awk '/quorumkv server/ { print $2 }')
[ "$uid" = 10001 ] || { echo "FAIL: the replica runs as uid '$uid', not 10001"; exit 1; }
echo "  the replica runs as uid $uid (non-root)"
retry put greeting hello >/dev/null
echo "  first put acknowledged $(since "$t0") s after up"
expect greeting hello
"$bin" endpoints status -e "$eps"

echo "== qkv3 down: a write acknowledged by qkv1 and qkv2 (so qkv2 surely holds it)"
"${compose[@]}" kill qkv3 >/dev/null 2>&1
retry put durable yes >/dev/null
"${compose[@]}" start qkv3 >/dev/null 2>&1

echo "== SIGKILL qkv2, write while it is down, restart it"
"${compose[@]}" kill qkv2 >/dev/null 2>&1
retry put while-down ok >/dev/null
t1=$(now)
"${compose[@]}" start qkv2 >/dev/null 2>&1
wait_healthy qkv2 qkv3
echo "  qkv2 healthy $(since "$t1") s after its restart"

echo "== qkv1 recreated empty at a new address (a container holds its old one)"
old=$(ip_of qkv1)
"${compose[@]}" rm -sf qkv1 >/dev/null 2>&1
docker volume rm "${project}_qkv1-data" >/dev/null
docker run -d --name "$project-squatter" --network "${project}_qkv" --ip "$old" \
  -e QUORUMKV_ID=1 -e QUORUMKV_LISTEN=0.0.0.0:7001 -e QUORUMKV_ADVERTISE=squatter:7001 \
  -e QUORUMKV_DURABILITY=memory -e QUORUMKV_INSECURE=true "$image" >/dev/null
"${compose[@]}" up -d qkv1 2>/dev/null
wait_healthy qkv1
new=$(ip_of qkv1)
echo "  qkv1 was $old, is now $new"
[ "$old" != "$new" ] || { echo "FAIL: qkv1 kept its address; the check needs a new one"; exit 1; }

echo "== qkv3 stopped: only qkv2's restored data can answer (qkv1 is empty)"
"${compose[@]}" stop qkv3 >/dev/null 2>&1
expect durable yes
echo "  qkv2 served its data after SIGKILL and restart; qkv1 found at its new address"
echo "compose-check: OK ($(since "$t0") s)"
