#!/usr/bin/env bash
# Start or stop the peers `quorumkv bench` compares against, on 127.0.0.1,
# with their data in a temporary directory.
#
#   scripts/peers.sh start etcd  [--replicas N] [--port-base P]   # N members (default 3), ports P.. (default 2379)
#   scripts/peers.sh start redis [--replicas N] [--port-base P]   # 1 primary + N-1 async replicas (default 1), port P (6379)
#   scripts/peers.sh start zookeeper [--replicas N] [--port-base P] # N-server ensemble (default 3; 1 = standalone),
#                                    # server i: client port P+3i (default 2181), quorum P+3i+1, election P+3i+2
#   ... [--tmpfs]                                                  # data in /dev/shm: fsync costs ~nothing
#   start redis ... --fsync          # appendonly yes + appendfsync always: fsync before each reply (default: no AOF)
#   start zookeeper ... --memory     # data in /dev/shm and forceSync=no (default: forceSync=yes, data on disk)
#   start zookeeper ... --rtt-client 100ms --rtt-peer 50ms  # seed 001's round trips, added by relays
#                                    # (quorumkv delay-proxy, $QKV or target/release/quorumkv): the target then
#                                    # names the client relays (P+500+i); server links go through relays (P+1000..)
#   QKV_ZK_JVMFLAGS='-Dk=v ...' scripts/peers.sh start zookeeper   # extra JVM flags for each server
#   scripts/peers.sh stop  etcd|redis|zookeeper                    # idempotent
#   scripts/peers.sh status etcd|redis|zookeeper
#
# `start` prints the --target to pass to `quorumkv bench` on stdout (and only
# that), e.g.  T=$(scripts/peers.sh start etcd) && quorumkv bench --target "local,$T"
# Missing servers are installed from Debian packages (etcd-server, redis-server,
# zookeeper; ZooKeeper needs a Java runtime, which the package pulls in).
# State lives in ${QKV_PEERS_DIR:-${TMPDIR:-/tmp}/quorumkv-peers}/NAME.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "peers.sh: $*" >&2; exit 1; }
log() { echo "peers.sh: $*" >&2; }

[ $# -ge 2 ] || usage
action=$1 name=$2
shift 2
replicas="" port_base="" tmpfs=0 fsync=0 memory=0 rtt_client="" rtt_peer=""
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) [ $# -ge 2 ] || usage; replicas=$2; shift 2 ;;
    --port-base) [ $# -ge 2 ] || usage; port_base=$2; shift 2 ;;
    --tmpfs) tmpfs=1; shift ;;
    --fsync) fsync=1; shift ;;
    --memory) memory=1; tmpfs=1; shift ;;
    --rtt-client) [ $# -ge 2 ] || usage; rtt_client=$2; shift 2 ;;
    --rtt-peer) [ $# -ge 2 ] || usage; rtt_peer=$2; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
case $name in
  etcd) replicas=${replicas:-3}; port_base=${port_base:-2379} ;;
  redis) replicas=${replicas:-1}; port_base=${port_base:-6379} ;;
  zookeeper | zk) name=zookeeper; replicas=${replicas:-3}; port_base=${port_base:-2181} ;;
  *) die "unknown peer '$name' (etcd, redis or zookeeper)" ;;
esac
[ $fsync = 1 ] && [ "$name" != redis ] && die "--fsync is for redis (etcd always fsyncs its log, zookeeper by default)"
[ $memory = 1 ] && [ "$name" != zookeeper ] && die "--memory is for zookeeper (use --tmpfs)"
for r in "$rtt_client" "$rtt_peer"; do
  [ -z "$r" ] || [[ $r =~ ^[0-9]+(\.[0-9]+)?ms$ ]] || die "--rtt-client/--rtt-peer take milliseconds, e.g. 50ms (got '$r')"
done
[ -z "$rtt_client$rtt_peer" ] || [ "$name" = zookeeper ] \
  || die "--rtt-client/--rtt-peer are for zookeeper (quorumkv adds its own: bench --rtt-client)"
[[ $replicas =~ ^[1-9][0-9]*$ ]] || die "--replicas must be a positive number (got '$replicas')"
[[ $port_base =~ ^[0-9]+$ ]] && [ "$port_base" -ge 1024 ] && [ "$port_base" -le 60000 ] \
  || die "--port-base must be between 1024 and 60000 (got '$port_base')"

root=${QKV_PEERS_DIR:-${TMPDIR:-/tmp}/quorumkv-peers}
state=$root/$name

# install PACKAGE BINARY: apt-get install PACKAGE unless BINARY is on PATH.
install() {
  command -v "$2" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "$2 is not installed and there is no apt-get; install $1"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  log "installing $1 from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q "$1" >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "$1" >/dev/null; } \
    || die "apt-get install $1 failed"
  command -v "$2" >/dev/null 2>&1 || die "$1 installed but $2 is not on PATH"
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

running() {
  [ -f "$state/pids" ] || return 1
  local p
  for p in $(cat "$state/pids"); do alive "$p" || return 1; done
}

# wait_port PORT SECONDS: until something listens on 127.0.0.1:PORT.
wait_port() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# wait_members STRIDE PREFIX SECONDS WHAT: until member i (log PREFIXi.log)
# listens on port_base + STRIDE * i; sets eps to their host:port list.
wait_members() {
  local i p
  eps=""
  for ((i = 0; i < replicas; i++)); do
    p=$((port_base + $1 * i))
    wait_port "$p" "$3" || die "$4 $2$i did not open port $p (see $state/$2$i.log)"
    eps+="${eps:+,}127.0.0.1:$p"
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

stop() {
  if [ ! -d "$state" ]; then
    log "$name is not running"
    return 0
  fi
  local p
  if [ -f "$state/pids" ]; then
    for p in $(cat "$state/pids"); do alive "$p" && kill "$p" 2>/dev/null || true; done
    for _ in $(seq 50); do
      local any=0
      for p in $(cat "$state/pids"); do alive "$p" && any=1; done
      [ $any = 0 ] && break
      sleep 0.1
    done
    for p in $(cat "$state/pids"); do alive "$p" && kill -9 "$p" 2>/dev/null || true; done
  fi
  rm -rf "$(cat "$state/data" 2>/dev/null || echo /nonexistent)" "$state"
  log "stopped $name"
}

start_etcd() {
  install etcd-server etcd
  local cluster="" i cp pp
  for ((i = 0; i < replicas; i++)); do
    pp=$((port_base + 2 * i + 1))
    cluster+="${cluster:+,}m$i=http://127.0.0.1:$pp"
  done
  for ((i = 0; i < replicas; i++)); do
    cp=$((port_base + 2 * i)) pp=$((port_base + 2 * i + 1))
    port_free "$cp" && port_free "$pp" || die "port $cp or $pp is in use"
    setsid etcd --name "m$i" --data-dir "$data/m$i" \
      --listen-client-urls "http://127.0.0.1:$cp" --advertise-client-urls "http://127.0.0.1:$cp" \
      --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
      --initial-cluster "$cluster" --initial-cluster-token quorumkv-bench --initial-cluster-state new \
      </dev/null >"$state/m$i.log" 2>&1 &
    echo $! >>"$state/pids"
  done
  local eps
  wait_members 2 m 20 "etcd member"
  # Serving clients needs a leader; etcd logs this line once it has one.
  for _ in $(seq 200); do
    grep -q "ready to serve client requests" "$state/m0.log" && grep -q "elected leader\|became leader" "$state"/m*.log && break
    sleep 0.1
  done
  echo "etcd://$eps" >"$state/target"
}

start_redis() {
  install redis-server redis-server
  local i p primary=$port_base
  local aof="--appendonly no"
  [ $fsync = 1 ] && aof="--appendonly yes --appendfsync always"
  for ((i = 0; i < replicas; i++)); do
    p=$((port_base + i))
    port_free "$p" || die "port $p is in use"
    mkdir -p "$data/r$i"
    local extra=()
    [ "$i" -gt 0 ] && extra=(--replicaof 127.0.0.1 "$primary")
    setsid redis-server --port "$p" --bind 127.0.0.1 --dir "$data/r$i" --save "" $aof \
      --protected-mode no --daemonize no "${extra[@]}" </dev/null >"$state/r$i.log" 2>&1 &
    echo $! >>"$state/pids"
    wait_port "$p" 10 || die "redis-server did not open port $p (see $state/r$i.log)"
  done
  echo "redis://127.0.0.1:$primary" >"$state/target"
}

# zk4 PORT WORD: a ZooKeeper four-letter-word command's answer ("" if none).
zk4() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}

start_zookeeper() {
  install zookeeper /usr/share/zookeeper/bin/zkServer.sh
  command -v java >/dev/null 2>&1 || die "zookeeper needs java (apt-get install default-jre-headless)"
  local jar=/usr/share/java/zookeeper.jar cp i c q e
  [ -f "$jar" ] || die "$jar is missing (Debian package zookeeper)"
  # slf4j-simple writes ZooKeeper's log to stderr, i.e. to zN.log.
  cp=$jar
  [ -f /usr/share/java/slf4j-simple.jar ] && cp+=:/usr/share/java/slf4j-simple.jar
  local servers sync=yes j qkv peer_links="" client_links=""
  [ $memory = 1 ] && sync=no
  qkv=${QKV:-target/release/quorumkv}
  if [ -n "$rtt_client$rtt_peer" ]; then
    [ -x "$qkv" ] || die "--rtt-client/--rtt-peer need $qkv (cargo build --release, or QKV=path)"
  fi
  for ((i = 0; i < replicas; i++)); do
    # Server i's view of the ensemble: itself at its own ports, every other
    # server j through relay ports of its own (with --rtt-peer), so each
    # link i -> j is delayed whoever dials it.
    servers=""
    for ((j = 0; j < replicas && replicas > 1; j++)); do
      q=$((port_base + 3 * j + 1)) e=$((port_base + 3 * j + 2))
      if [ -n "$rtt_peer" ] && [ $i != $j ]; then
        local pq=$((port_base + 1000 + 2 * (i * replicas + j))) pe
        pe=$((pq + 1))
        peer_links+=" --link 127.0.0.1:$pq=127.0.0.1:$q --link 127.0.0.1:$pe=127.0.0.1:$e"
        q=$pq e=$pe
      fi
      servers+="server.$((j + 1))=127.0.0.1:$q:$e"$'\n'
    done
    printf '%s' "$servers" >"$state/z$i.servers"
  done
  for ((i = 0; i < replicas; i++)); do
    servers=$(cat "$state/z$i.servers")
    c=$((port_base + 3 * i)) q=$((port_base + 3 * i + 1)) e=$((port_base + 3 * i + 2))
    port_free "$c" && port_free "$q" && port_free "$e" || die "port $c, $q or $e is in use"
    mkdir -p "$data/z$i"
    echo $((i + 1)) >"$data/z$i/myid"
    # Every bench client comes from 127.0.0.1: no per-address connection cap.
    # The admin server (Jetty, port 8080) is off; 4lw for health checks and
    # the bench's fsync counters (mntr) and data directory (conf).
    cat >"$state/z$i.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$data/z$i
clientPort=$c
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=$sync
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,conf
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
${servers}
EOF
    # shellcheck disable=SC2086 # QKV_ZK_JVMFLAGS is a list of flags
    setsid java -Xmx1g -Dzookeeper.log.dir="$state" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
      ${QKV_ZK_JVMFLAGS:-} -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$state/z$i.cfg" \
      </dev/null >"$state/z$i.log" 2>&1 &
    echo $! >>"$state/pids"
  done
  local eps mode leader=0 half
  if [ -n "$peer_links" ]; then
    # Each direction of a server link waits half the round trip.
    half=$(awk -v r="${rtt_peer%ms}" 'BEGIN { printf "%.3fms", r / 2 }')
    # shellcheck disable=SC2086
    setsid "$qkv" delay-proxy $peer_links --delay "$half" --reply-delay "$half" \
      </dev/null >"$state/peer-relays.log" 2>&1 &
    echo $! >>"$state/pids"
  fi
  wait_members 3 z 30 "zookeeper server"
  # Serving needs every server in an ensemble and a leader (or standalone):
  # ask each with `srvr` until all of them name their mode.
  for _ in $(seq 300); do
    leader=0 mode=0
    for ((i = 0; i < replicas; i++)); do
      c=$((port_base + 3 * i))
      case $(zk4 "$c" srvr) in
        *"Mode: leader"* | *"Mode: standalone"*) leader=$((leader + 1)); mode=$((mode + 1)) ;;
        *"Mode: follower"*) mode=$((mode + 1)) ;;
      esac
    done
    [ $leader = 1 ] && [ $mode = "$replicas" ] && break
    sleep 0.1
  done
  [ $leader = 1 ] && [ $mode = "$replicas" ] \
    || die "zookeeper: no leader with all $replicas servers serving after 30 s (see $state/z*.log)"
  if [ -n "$rtt_client" ]; then
    # The whole client round trip on the replies, as quorumkv's servers add it.
    eps=""
    for ((i = 0; i < replicas; i++)); do
      client_links+=" --link 127.0.0.1:$((port_base + 500 + i))=127.0.0.1:$((port_base + 3 * i))"
      eps+="${eps:+,}127.0.0.1:$((port_base + 500 + i))"
    done
    # shellcheck disable=SC2086
    setsid "$qkv" delay-proxy $client_links --reply-delay "$rtt_client" \
      </dev/null >"$state/client-relays.log" 2>&1 &
    echo $! >>"$state/pids"
    for ((i = 0; i < replicas; i++)); do
      wait_port $((port_base + 500 + i)) 10 || die "the client relay did not open (see $state/client-relays.log)"
    done
  fi
  echo "zk://$eps" >"$state/target"
}

case $action in
  start)
    if running; then
      log "$name is already running (stop it first to change --replicas/--port-base)"
      cat "$state/target"
      exit 0
    fi
    [ -d "$state" ] && stop
    mkdir -p "$state"
    parent=${TMPDIR:-/tmp}
    if [ $tmpfs = 1 ]; then
      [ -d /dev/shm ] && [ -w /dev/shm ] || die "--tmpfs: /dev/shm is not a writable directory"
      parent=/dev/shm
    fi
    data=$(mktemp -d "$parent/quorumkv-$name-data.XXXXXX")
    echo "$data" >"$state/data"
    "start_$name"
    log "started $name ($replicas) with data in $data; logs in $state"
    cat "$state/target"
    ;;
  stop) stop ;;
  status)
    if running; then cat "$state/target"; else log "$name is not running"; exit 1; fi
    ;;
  *) usage ;;
esac
