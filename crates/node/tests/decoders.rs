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

/// One well-formed operation of a `multi` or `multiRead`: its
/// `MultiHeader` (type, done, err) then its record.
fn multi_op() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop::sample::select(vec![13i32, 1, 15, 2, 5, 4, 8]);
    let path = prop::sample::select(vec!["/a", "/q/n-", "", "a", "/a/b/"]);
    let data = prop::collection::vec(any::<u8>(), 0..6);
    (kind, path, -3i32..4, data, -1i32..8).prop_map(|(kind, path, version, data, flags)| {
        let int = |b: &mut Vec<u8>, v: i32| b.extend_from_slice(&v.to_be_bytes());
        let buffer = |b: &mut Vec<u8>, v: &[u8]| {
            b.extend_from_slice(&(v.len() as i32).to_be_bytes());
            b.extend_from_slice(v);
        };
        let mut b = Vec::new();
        int(&mut b, kind);
        b.push(0);
        int(&mut b, -1);
        buffer(&mut b, path.as_bytes());
        match kind {
            13 | 2 => int(&mut b, version),
            1 | 15 => {
                buffer(&mut b, &data);
                int(&mut b, 1);
                int(&mut b, 31);
                buffer(&mut b, b"world");
                buffer(&mut b, b"anyone");
                int(&mut b, flags);
            }
            5 => {
                buffer(&mut b, &data);
                int(&mut b, version);
            }
            _ => b.push(1),
        }
        b
    })
}

/// A `multi` (14) or `multiRead` (22) packet of well-formed operations and
/// its closing header, and where to cut it (`None`: whole).
fn multi_like() -> impl Strategy<Value = (Vec<u8>, Option<usize>)> {
    let ops = prop::collection::vec(multi_op(), 0..6);
    let cut = prop::option::of(any::<prop::sample::Index>());
    (
        any::<i32>(),
        prop::sample::select(vec![14i32, 22]),
        ops,
        cut,
    )
        .prop_map(|(xid, code, ops, cut)| {
            let mut out = xid.to_be_bytes().to_vec();
            out.extend_from_slice(&code.to_be_bytes());
            out.extend(ops.concat());
            out.extend_from_slice(&(-1i32).to_be_bytes());
            out.push(1);
            out.extend_from_slice(&(-1i32).to_be_bytes());
            let cut = cut.map(|i| i.index(out.len()));
            (out, cut)
        })
}

proptest! {
    #![proptest_config(config())]

    /// A well-formed `multi` or `multiRead` always decodes (and plans: a
    /// read in a multi or a bad version is refused, never a panic); one
    /// cut anywhere never panics.
    #[test]
    fn jute_multi_records((data, cut) in multi_like()) {
        match cut {
            None => prop_assert!(check_jute(&data)),
            Some(at) => drop(check_jute(&data[..at])),
        }
    }

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
