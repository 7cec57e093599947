//! The properties both decoders must keep on ANY input, as functions that
//! panic when one breaks. One definition, two drivers: the cargo-fuzz
//! targets in `fuzz/` (coverage-guided, millions of inputs, on demand) and
//! the bounded property test `tests/decoders.rs` (every CI run).
//!
//! Untrusted bytes may make a decoder return an error; they may never make
//! it panic, loop without consuming, or allocate beyond its limits.

use crate::codec::{encode, Frame, FrameBuf};
use crate::resp::{parse_command, MAX_ARGS, MAX_BULK};
use bytes::{BufMut, BytesMut};
use quorumkv_core::protocol::registry::visit_all;
use quorumkv_core::protocol::{ProtocolDef, Visitor};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

/// [`check_native_as`] with the messages of every registered protocol.
pub fn check_native(data: &[u8], max: usize) {
    struct With<'a>(&'a [u8], usize);
    impl Visitor for With<'_> {
        type Output = ();
        fn visit<D: ProtocolDef>(self) {
            check_native_as::<D::Msg>(self.0, self.1);
        }
    }
    visit_all(&|| With(data, max));
}

/// Feed `data` to a native [`FrameBuf`] (limit `max`) in pieces, as reads
/// would deliver it, decoding everything it yields as frames carrying `M`.
/// Every decoded frame must re-encode and decode to itself; an error ends
/// the stream as it ends a connection.
pub fn check_native_as<M>(data: &[u8], max: usize)
where
    M: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let cut = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    let mut fb = FrameBuf::new(max);
    for chunk in data.chunks(cut) {
        fb.buf_mut().extend_from_slice(chunk);
        loop {
            let before = fb.buf_mut().len();
            match fb.next_frame::<M>() {
                Ok(Some(frame)) => {
                    assert!(fb.buf_mut().len() < before, "a frame consumed nothing");
                    assert_roundtrip(&frame, max);
                }
                Ok(None) => {
                    assert_eq!(fb.buf_mut().len(), before, "incomplete consumed bytes");
                    break;
                }
                Err(_) => return,
            }
        }
        // Waiting for a frame reserves at most about the limit (BytesMut may
        // double its capacity once), never what a bogus prefix claims.
        let cap = fb.buf_mut().capacity();
        assert!(
            cap <= 2 * (max + 4) + 64 * 1024 + chunk.len(),
            "capacity {cap}"
        );
    }
}

fn assert_roundtrip<M>(frame: &Frame<M>, max: usize)
where
    M: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let mut out = BytesMut::new();
    encode(frame, &mut out);
    let mut again = FrameBuf::new(max.max(out.len()));
    again.buf_mut().extend_from_slice(&out);
    let back = again.next_frame::<M>().expect("re-encoded frame decodes");
    assert_eq!(back.as_ref(), Some(frame), "frame changed in a round trip");
}

/// Feed `data` to the RESP parser in pieces, parsing every command it
/// yields. Each command must respect the limits and, written back as a RESP
/// array, parse to the same arguments.
pub fn check_resp(data: &[u8]) {
    let cut = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    let mut buf = BytesMut::new();
    for chunk in data.chunks(cut) {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match parse_command(&mut buf) {
                Ok(Some(args)) => {
                    assert!(buf.len() < before, "a command consumed nothing");
                    assert!(args.iter().all(|a| a.len() <= MAX_BULK));
                    assert_resp_roundtrip(&args);
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before, "incomplete consumed bytes");
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

fn assert_resp_roundtrip(args: &[bytes::Bytes]) {
    if args.len() > MAX_ARGS {
        return; // an inline line may split into more words than an array may hold
    }
    let mut out = BytesMut::new();
    out.put_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.put_slice(format!("${}\r\n", a.len()).as_bytes());
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
    let back = parse_command(&mut out).expect("re-encoded command parses");
    assert_eq!(
        back.as_deref(),
        Some(args),
        "command changed in a round trip"
    );
    assert!(out.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::protocol::abd::Msg;

    #[test]
    fn valid_streams_pass_the_checks() {
        let mut b = BytesMut::new();
        encode(&Frame::<Msg>::hello_client(), &mut b);
        encode(
            &Frame::<Msg>::Proto(Msg::Query {
                op: 1,
                key: "k".into(),
                epoch: 0,
            }),
            &mut b,
        );
        check_native(&b, 1 << 16);
        check_resp(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n");
    }
}
