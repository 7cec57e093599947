#!/usr/bin/env bash
# Mutation testing of the protocol cores (too slow for CI; re-run by every
# protocol issue on its own module).
#
#   scripts/mutants.sh [FILE_GLOB] [extra cargo-mutants options]
#   scripts/mutants.sh crates/core/src/protocol/abd/coordinator.rs
#   scripts/mutants.sh 'crates/core/src/protocol/abd/*' --shard 0/2
#   scripts/mutants.sh crates/core/src/protocol/ring/register.rs
#
# Oracle: the unit tests of quorumkv-core (and the sim's own) plus the
# simulator's fixed sweeps in crates/sim/tests/oracle.rs (ABD: 400 seeds with
# every knob drawn per seed, 40 loss-only seeds in which no operation may end
# unknown; ring: 300 seeds with crashes, delay, reorder and pauses at N = 3
# and 5, and 80 fault-free seeds, some with the starvation check; lamport:
# 600 seeds with crashes, delay and pauses at N = 3 and 5 and 100 with
# connection resets; lease-lock: 300 seeds with every fault at N = 3 and 5;
# ABD and lease-lock: 150 seeds each of every fault plus reconfigurations
# at N = 3 and 5).
# About 5 s per mutant on 2 busy cores, ~25 min for abd/.
# A mutant is *caught* when that oracle fails (or times out). Cosmetic
# functions (status lines, metrics) are excluded: no protocol test can see them.
# Results: target/mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt);
# score = (caught + timeout) / (caught + timeout + missed).
# MUTANTS_FILTER (optional): a nextest filter expression that narrows the
# oracle to the tests that can reach the mutated module, e.g. 'test(zab)'
# for zab/ (no other protocol's test runs its code): same verdicts, and
# each mutant skips the other protocols' sweeps. MUTANTS_JOBS: parallel
# builds (each in its own copy of the tree); with `--in-place` (mutate this
# tree, no copy and no cold build) leave it unset.
# MUTANTS_ONLY=<protocol feature> (e.g. zab, ring): two tiers, same verdicts,
# about twice the speed. Tier 1 builds quorumkv-core with that protocol
# alone (`--no-default-features --features X`: half the crate to recompile
# per mutant) and its unit tests as the oracle; tier 2 takes every mutant
# tier 1 missed, applies its diff to this tree and runs the full oracle
# above (core + the sim's sweeps, MUTANTS_FILTER applies) on it. A mutant is
# caught when either tier fails. Tier 2's verdicts: target/mutants.out/tier2.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
file="${1:-crates/core/src/protocol/abd/*}"
shift || true
filter=()
if [ -n "${MUTANTS_FILTER:-}" ]; then filter=(-E "$MUTANTS_FILTER"); fi
command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
# cargo-mutants runs its baseline with the mutated package's tests only,
# where the sim's oracle does not exist; so check the baseline here, then skip it.
if [ -n "${MUTANTS_ONLY:-}" ]; then
    only=(--no-default-features --features "$MUTANTS_ONLY")
    echo "== baseline: core's unit tests with $MUTANTS_ONLY alone"
    cargo nextest run -p quorumkv-core "${only[@]}" --lib
    echo "== tier 1: mutants of $file against core's unit tests"
    CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 cargo mutants \
        --file "$file" \
        --package quorumkv-core \
        --baseline skip \
        --test-tool nextest \
        --exclude-re '::(metrics|status)\b|<impl Protocol for \w+>::(metrics|status)' \
        ${MUTANTS_JOBS:+--jobs "$MUTANTS_JOBS"} \
        --timeout "${MUTANTS_TIMEOUT:-60}" \
        --output target \
        "${only[@]}" --cargo-arg=--lib \
        "$@" || true
    echo "== tier 2: the missed mutants against the full oracle"
    python3 scripts/mutants_tier2.py target/mutants.out ${filter[@]+"${filter[@]}"}
    exit 0
fi
echo "== baseline: the oracle passes on the unmutated tree"
cargo nextest run -p quorumkv-core -p quorumkv-sim --lib --test oracle ${filter[@]+"${filter[@]}"}
echo "== mutants of $file"
# No debug info: faster links, one build per mutant. `--lib --test oracle`
# go to the build as well as the test run: only the oracle's binaries are
# built for each mutant, not every integration test of the sim.
# Not incremental: with incremental builds one mutant after another, every
# link failed ("undefined hidden symbol core::cmp::default_chaining_impl",
# rustc 1.95) and cargo-mutants called each mutant unviable.
CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 cargo mutants \
    --file "$file" \
    --package quorumkv-core \
    --test-package quorumkv-core,quorumkv-sim \
    --baseline skip \
    --test-tool nextest \
    --exclude-re '::(metrics|status)\b|<impl Protocol for \w+>::(metrics|status)' \
    ${MUTANTS_JOBS:+--jobs "$MUTANTS_JOBS"} \
    --timeout "${MUTANTS_TIMEOUT:-120}" \
    --output target \
    --cargo-arg=--lib --cargo-arg=--test=oracle \
    "$@" \
    -- ${filter[@]+"${filter[@]}"}
