//! The ZooKeeper port's jute decoder on arbitrary bytes: packet length,
//! connect record, request packet (checks: quorumkv_node::zkwire::decoder_check).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumkv_node::zkwire::decoder_check(data);
});
