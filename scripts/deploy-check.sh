#!/usr/bin/env bash
# CI's deployment check: the container image (deploy/Dockerfile) of the
# debug binary CI has just built — the static release build of
# scripts/image.sh would compile every dependency a second time — and the
# docker-compose cluster checked by scripts/compose-check.sh (about 40 s).
# Skipped, saying so, where there is no Docker daemon or docker-compose.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker-compose >/dev/null || ! docker info >/dev/null 2>&1; then
  echo "SKIPPED deploy-check: no Docker daemon or no docker-compose here"
  exit 0
fi
bin=target/debug/quorumkv
[ -x "$bin" ] || cargo build -q -p quorumkv
scripts/image.sh --binary "$bin" quorumkv:ci
QUORUMKV_IMAGE=quorumkv:ci QUORUMKV_BIN=$bin scripts/compose-check.sh
docker image rm quorumkv:ci >/dev/null
