//! The RESP command parser on arbitrary bytes (checks: quorumkv_node::decoder_check).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumkv_node::decoder_check::check_resp(data);
});
