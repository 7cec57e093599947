#!/usr/bin/env bash
# Coverage-guided fuzzing of the two decoders of untrusted bytes: the native
# frame decoder and the RESP command parser (checks: crates/node/src/decoder_check.rs).
#
#   scripts/fuzz.sh                      # both targets, 10 000 000 inputs each
#   FUZZ_RUNS=100000 scripts/fuzz.sh resp_command
#
# Needs a nightly toolchain (cargo-fuzz is installed when missing). A crash
# or an allocation over 64 MB stops the run and leaves the input in
# fuzz/artifacts/TARGET/; replay it with `cargo +nightly fuzz run TARGET FILE`.
# Without nightly, the bounded property test covers the same checks:
#   QUORUMKV_FUZZ_CASES=2500000 cargo test --release -p quorumkv-node --test decoders
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
runs=${FUZZ_RUNS:-10000000}
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: needs a nightly toolchain (rustup toolchain install nightly)" >&2
    exit 2
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(native_frame resp_command)
for t in "${targets[@]}"; do
    start=$(date +%s)
    cargo +nightly fuzz run -O "$t" -- -runs="$runs" -malloc_limit_mb=64 \
        -rss_limit_mb=1024 -print_final_stats=1
    echo "fuzz.sh: $t: $runs inputs in $(( $(date +%s) - start )) s, no crash"
done
