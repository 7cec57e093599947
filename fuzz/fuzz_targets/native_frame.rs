//! The native frame decoder on arbitrary bytes (checks: quorumkv_node::decoder_check).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small limit so that length prefixes around it are reachable.
    quorumkv_node::decoder_check::check_native(data, 1 << 12);
});
