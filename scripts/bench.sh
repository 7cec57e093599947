#!/usr/bin/env bash
# The main job: build quorumkv in release mode and run `quorumkv bench`
# (by default: every protocol on a local 3-replica cluster it starts itself,
# GET-heavy and PUT-heavy mixes, 1-32 clients). Extra arguments go to bench,
# e.g. scripts/bench.sh --replicas 1,3,5 --out results/
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo build --release --quiet
exec target/release/quorumkv bench "$@"
