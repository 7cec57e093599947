//! The native frame decoder on arbitrary bytes (checks: quorumkv_node::decoder_check).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A limit below the input size (-max_len=1024) so that frames of every
    // size up to it, and prefixes just over it, are reachable.
    quorumkv_node::decoder_check::check_native(data, 512);
});
