#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders of untrusted bytes: the native
# frame decoder, the RESP command parser and the ZooKeeper port's jute records (checks: crates/node/src/decoder_check.rs).
#
#   scripts/fuzz.sh                      # both targets, 10 000 000 inputs each
#   FUZZ_RUNS=100000 scripts/fuzz.sh resp_command
#
# Needs a nightly toolchain (cargo-fuzz is installed when missing). A panic,
# or a process over 512 MB, stops the run and leaves the input in
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
[ ${#targets[@]} -gt 0 ] || targets=(native_frame resp_command handshake zk_packet)
for t in "${targets[@]}"; do
    cargo +nightly fuzz build -O -s none "$t"
    start=$(date +%s)
    # No sanitizer: the decoders are safe Rust, and without ASan the native
    # target ran 182 000 inputs/s here instead of 4 000-15 000. Inputs up to 1 KiB, so that short chunks of
    # them (the checks feed inputs in pieces) stay cheap.
    cargo +nightly fuzz run -O -s none "$t" -- -runs="$runs" -max_len=1024 \
        -rss_limit_mb=512 -print_final_stats=1
    echo "fuzz.sh: $t: $runs inputs in $(( $(date +%s) - start )) s, no crash"
done
