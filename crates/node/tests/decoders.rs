//! Property test over arbitrary bytes for the decoders (native, RESP and
//! the ZooKeeper port's jute records) (the checks live in
//! `quorumkv_node::decoder_check`, shared with the cargo-fuzz targets).
//!
//! CI runs 2 000 cases per shape, a few seconds in a debug build. For a long run set
//! `QUORUMKV_FUZZ_CASES`, e.g. `QUORUMKV_FUZZ_CASES=2500000 cargo test
//! --release -p quorumkv-node --test decoders` (four properties: 10 M inputs).

use proptest::prelude::*;
use quorumkv_node::decoder_check::{check_native, check_resp};
use quorumkv_node::zkwire::decoder_check as check_jute;

fn cases() -> u32 {
    std::env::var("QUORUMKV_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Bytes that look like RESP often enough to get past the first byte.
fn resp_like() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"-1".to_vec()),
        Just(b" ".to_vec()),
        (0u16..1000).prop_map(|n| n.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// A length prefix followed by bytes, so bodies reach postcard.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6).prop_map(|bodies| {
        let mut out = vec![3u8]; // first byte: the chunk size of the feed
        for b in bodies {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        out
    })
}

/// A ZooKeeper request packet's body: an xid, an op code near the known
/// ones, then jute-looking fields (lengths small, null, negative or huge,
/// strings, booleans), so bodies get past their first fields.
fn jute_like() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        (-2i32..40).prop_map(|n| n.to_be_bytes().to_vec()),
        Just(i32::MAX.to_be_bytes().to_vec()),
        Just(i32::MIN.to_be_bytes().to_vec()),
        Just(b"/a/b".to_vec()),
        Just(vec![0u8]),
        Just(vec![1u8]),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    (
        any::<i32>(),
        -12i32..110,
        prop::collection::vec(field, 0..12),
    )
        .prop_map(|(xid, op, f)| {
            let mut out = xid.to_be_bytes().to_vec();
            out.extend_from_slice(&op.to_be_bytes());
            out.extend(f.concat());
            out
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn jute_any_bytes(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_jute(&data);
    }

    #[test]
    fn jute_like_requests(data in jute_like()) {
        check_jute(&data);
    }

    #[test]
    fn native_any_bytes(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_native(&data, 1 << 16);
    }

    #[test]
    fn native_framed_bodies(data in framed()) {
        check_native(&data, 1 << 16);
    }

    #[test]
    fn resp_any_bytes(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_resp(&data);
    }

    #[test]
    fn resp_shaped_bytes(data in resp_like()) {
        check_resp(&data);
    }
}
