#!/usr/bin/env bash
# Install the system packages quorumkv's tests and bench use, if missing (the
# build itself needs only the Rust toolchain):
#   redis-cli / redis-benchmark / redis-server (RESP tests, Redis peer),
#   etcd (the bench's etcd target and its test),
#   zookeeper (the bench's ZooKeeper target and its test; Debian's 3.8, Java;
#     its zkCli.sh drives the ZooKeeper port's test),
#   python3-kazoo (kazoo, the Python ZooKeeper client, for the same test),
#   zookeeper-bin (cli_mt, ZooKeeper's C client, for the same test),
#   libcurator-recipes-java (Apache Curator, the Java ZooKeeper client most
#     Java projects use, with its framework/client/guava jars) and a JDK
#     that compiles (javac), for tests/zk_curator.rs: it compiles
#     tests/zk/CuratorRecipes.java against the jars in /usr/share/java,
##   prometheus (promtool lints /metrics and tests deploy/prometheus/alerts.yml;
#     without its recommends, so no exporter daemon comes with it),
#   docker-compose (scripts/deploy-check.sh; only where Docker is installed).
set -euo pipefail
need=()
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v redis-server >/dev/null || need+=(redis-server)
command -v etcd >/dev/null || need+=(etcd-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
/usr/bin/python3 -c 'import kazoo' 2>/dev/null || need+=(python3-kazoo)
[ -x /usr/lib/zookeeper/bin/cli_mt ] || need+=(zookeeper-bin)
[ -f /usr/share/java/curator-recipes.jar ] || need+=(libcurator-recipes-java)
# zookeeper pulls in only a Java runtime; compiling needs the JDK.
command -v javac >/dev/null || need+=(default-jdk-headless)
# docker-compose for scripts/deploy-check.sh, where Docker runs.
if command -v docker >/dev/null && ! command -v docker-compose >/dev/null; then
  need+=(docker-compose)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps.sh: installing ${need[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v promtool >/dev/null; then
  echo "deps.sh: installing prometheus (for promtool)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
