//! The native wire format: every frame is a 4-byte big-endian length followed
//! by that many bytes of postcard-encoded [`Frame`]. One codec for peer links
//! and client connections alike.
//!
//! Decoding is in two steps, as in mini-redis: [`FrameBuf::next_frame`] first
//! checks that a whole frame is buffered (`Ok(None)` = incomplete, read
//! more), then decodes it. Untrusted bytes never panic: an oversized length
//! or undecodable body is a [`CodecError`], after which the connection is
//! answered with [`Frame::Error`] and closed.

use crate::version::Version;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::{Event, NodeId, OpId, Request, Response};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

impl<M> Frame<M> {
    /// A client's hello with this build's wire version.
    pub fn hello_client() -> Frame<M> {
        Frame::HelloClient {
            version: Some(Version::ours()),
        }
    }
}

/// Frames larger than this are refused (values are limited to a bit less).
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// A frame whose body is larger than [`DEFAULT_MAX_FRAME`] (a replica's
/// whole store in a state transfer) goes out as [`Frame::Part`]s of this
/// many bytes of its encoding; a replica link puts them together again
/// (`net::FrameReader::allow_parts`), up to [`MAX_TRANSFER`].
pub const PART_BYTES: usize = 8 * 1024 * 1024;

/// Most bytes one message in parts may take on a replica link.
pub const MAX_TRANSFER: usize = 1024 * 1024 * 1024;

/// Everything that crosses a native connection. `M` is the protocol's message type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame<M> {
    /// First frame of a replica dialing another replica; `nonce` is fresh
    /// per connection, for the acceptor's proof (`peer_auth`).
    HelloPeer {
        node: NodeId,
        protocol: ProtocolKind,
        nonce: Bytes,
        /// The dialler's wire version; `None` from a release before
        /// version fields (wire 1.0). Last, so older releases ignore it
        /// (`version` module).
        #[serde(default, deserialize_with = "crate::version::trailing")]
        version: Option<Version>,
    },
    /// First frame of a client (library or CLI), with its wire version
    /// (`None` from a release before version fields).
    HelloClient {
        #[serde(default, deserialize_with = "crate::version::trailing")]
        version: Option<Version>,
    },
    /// The server's answer to `HelloClient`: who it is and who its peers are,
    /// so a client-side coordinator knows the replica ids behind endpoints.
    Welcome {
        node: NodeId,
        protocol: ProtocolKind,
        members: Vec<NodeId>,
        /// The protocol's options as the cluster runs them (`key`, `value`),
        /// so a client-side coordinator runs with the same settings.
        options: Vec<(String, String)>,
        /// Every replica's native address, so a client can follow a
        /// `NotLeader { hint }` to the leader it names.
        addrs: Vec<(NodeId, String)>,
        /// The logged-in user's role where the replica has users (`read`
        /// cannot run a client-side coordinator: its reads write back).
        role: Option<String>,
        /// The replica's wire version (`None` from a release before
        /// version fields). Last, so older clients ignore it.
        #[serde(default, deserialize_with = "crate::version::trailing")]
        version: Option<Version>,
    },
    /// A client request, answered by `Response` with the same id (proxy
    /// mode). `op` names the operation across retries (dedup).
    Request {
        id: u64,
        op: OpId,
        req: Request,
    },
    Response {
        id: u64,
        resp: Response,
    },
    /// A protocol message (peer traffic, or a client-side coordinator talking to replicas).
    Proto(M),
    /// The sender refuses what it got; the connection closes after this.
    Error {
        message: String,
    },
    /// "Who are you and how are you?" (`quorumkv endpoints status`); needs no hello.
    StatusRequest,
    /// The answer to `StatusRequest`.
    Status(crate::node_status::NodeStatus),
    /// An event the server pushes to a client unprompted (`Command::Notify`).
    Notify(Event),
    /// "Still here": sent on an idle link so that the other side can tell a
    /// quiet peer from a vanished one (`heartbeat`).
    Heartbeat,
    /// An acceptor with a cluster secret answers `HelloPeer` with its own
    /// nonce and its proof of the secret (`peer_auth`).
    PeerChallenge {
        nonce: Bytes,
        proof: Bytes,
    },
    /// The dialler's proof of the secret, answering `PeerChallenge`.
    PeerProof {
        proof: Bytes,
    },
    /// A client logs in as `user` (a replica with a users file asks for
    /// it before anything but a status request); sent before `HelloClient`,
    /// whose `Welcome` then says it succeeded. Best over TLS: the password
    /// travels as it is.
    Auth {
        user: String,
        password: String,
    },
    /// Ask for this replica's whole state (`quorumkv snapshot save`), on a
    /// connection after its hello: an admin request where the replica has
    /// users. Answered by `SnapshotPart`s, or `Error` when the replica
    /// cannot give its state (then the connection closes).
    SnapshotRequest,
    /// A piece of the answer to `SnapshotRequest`: the postcard encoding
    /// of the replica's `Export`, cut into pieces well under the frame
    /// limit (`snapshot::PART_BYTES`); `more` is false on the last.
    SnapshotPart {
        data: Bytes,
        more: bool,
    },
    /// `quorumkv member` (wire 1.2), on a connection after its hello:
    /// without `voters`, "who votes?"; with them, "propose these as the
    /// voting servers" (the leader takes it; an admin request where the
    /// replica has users). Answered by `Members`.
    MemberRequest {
        voters: Option<Vec<NodeId>>,
    },
    /// The answer to `MemberRequest`: this replica's view after it, or
    /// why the change was refused (the connection stays open).
    Members {
        answer: Result<quorumkv_core::protocol::Membership, String>,
    },
    /// `quorumkv member update` (wire 1.4), on a connection after its
    /// hello, from an admin where the replica has users: dial replica `id`
    /// at `addr` (`HOST:PORT`) from now on (`address_book`). Answered by
    /// `AddressUpdated`.
    AddressUpdate {
        id: NodeId,
        addr: String,
    },
    /// The answer to `AddressUpdate`: what changed and where it was
    /// recorded, or why it was refused (the connection stays open).
    AddressUpdated {
        answer: Result<String, String>,
    },
    /// A piece of one frame too large for a frame of its own (wire 1.4):
    /// the encoded frame's body, cut in order; `more` is false on the last
    /// piece. Only replica links put pieces together.
    Part {
        data: Bytes,
        more: bool,
    },
    /// Where a replica dials each replica (wire 1.5), exchanged once on a
    /// replica link: sent by the acceptor to a dialler of 1.5 or later
    /// right after the hello, answered once by the dialler with its own.
    /// What a peer says of itself moves it (on an authenticated link);
    /// what it says of others is a hint, taken once a dial there answers
    /// (`address_book`). So a replica that was down during `quorumkv
    /// member update` learns the move from the others.
    PeerBook {
        addrs: Vec<(NodeId, String)>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Append one encoded frame (length prefix + body) to `dst`; a body past
/// [`DEFAULT_MAX_FRAME`] as [`Frame::Part`]s.
pub fn encode<M: Serialize>(frame: &Frame<M>, dst: &mut BytesMut) {
    let start = dst.len();
    dst.put_u32(0);
    postcard::to_io(frame, (&mut *dst).writer()).expect("encoding into memory cannot fail");
    let len = dst.len() - start - 4;
    if len <= DEFAULT_MAX_FRAME {
        dst[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
        return;
    }
    let body = dst.split_off(start + 4).freeze();
    dst.truncate(start);
    let mut at = 0;
    while at < body.len() {
        let end = (at + PART_BYTES).min(body.len());
        let part = Frame::<()>::Part {
            data: body.slice(at..end),
            more: end < body.len(),
        };
        encode(&part, dst);
        at = end;
    }
}

/// Encode one frame into fresh bytes.
pub fn encode_to_bytes<M: Serialize>(frame: &Frame<M>) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    encode(frame, &mut b);
    b.freeze()
}

/// A read buffer that yields whole frames.
pub struct FrameBuf {
    buf: BytesMut,
    max: usize,
}

impl FrameBuf {
    pub fn new(max: usize) -> Self {
        FrameBuf {
            buf: BytesMut::new(),
            max,
        }
    }
    pub fn buf_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }
    /// The next complete frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame<M: DeserializeOwned>(&mut self) -> Result<Option<Frame<M>>, CodecError> {
        decode_frame(&mut self.buf, self.max)
    }
}

/// Take the next complete frame off the front of `buf`; `Ok(None)` when more
/// bytes are needed. Never reserves room for the announced length: memory
/// grows with the bytes that actually arrive (see `net::InBuf`).
pub fn decode_frame<M: DeserializeOwned>(
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<Frame<M>>, CodecError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(CodecError::TooLarge { len, max });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    buf.advance(4);
    let body = buf.split_to(len);
    postcard::from_bytes(&body)
        .map(Some)
        .map_err(|e| CodecError::Malformed(e.to_string()))
}

/// Bytes the frame at the front of `buf` takes in all, once its length is known.
pub fn frame_need(buf: &[u8]) -> Option<usize> {
    let len: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    Some(4 + u32::from_be_bytes(len) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::protocol::abd::Msg;

    fn roundtrip(f: Frame<Msg>) {
        let mut b = BytesMut::new();
        encode(&f, &mut b);
        encode(&f, &mut b);
        let mut fb = FrameBuf::new(DEFAULT_MAX_FRAME);
        fb.buf_mut().extend_from_slice(&b);
        assert_eq!(fb.next_frame::<Msg>().unwrap(), Some(f.clone()));
        assert_eq!(fb.next_frame::<Msg>().unwrap(), Some(f));
        assert_eq!(fb.next_frame::<Msg>().unwrap(), None);
    }

    /// Wire 1.3 appended ABD's configuration epoch to queries and stores:
    /// a 1.2 replica's frames (no epoch) decode as epoch 0, and a 1.2
    /// replica reads a 1.3 frame as it always did (the epoch is trailing).
    #[test]
    fn an_abd_query_without_its_epoch_is_epoch_zero_both_ways() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        enum Before {
            Query { op: u64, key: Bytes },
        }
        let mut b = BytesMut::new();
        let old = Before::Query {
            op: 9,
            key: "k".into(),
        };
        encode(&Frame::Proto(old), &mut b);
        let mut fb = FrameBuf::new(DEFAULT_MAX_FRAME);
        fb.buf_mut().extend_from_slice(&b);
        let got = fb.next_frame::<Msg>().unwrap();
        let want = Msg::Query {
            op: 9,
            key: "k".into(),
            epoch: 0,
        };
        assert_eq!(got, Some(Frame::Proto(want)));
        let mut b = BytesMut::new();
        let new = Msg::Query {
            op: 9,
            key: "k".into(),
            epoch: 7,
        };
        encode(&Frame::Proto(new), &mut b);
        let mut fb = FrameBuf::new(DEFAULT_MAX_FRAME);
        fb.buf_mut().extend_from_slice(&b);
        let old = Before::Query {
            op: 9,
            key: "k".into(),
        };
        assert_eq!(fb.next_frame::<Before>().unwrap(), Some(Frame::Proto(old)));
    }

    #[test]
    fn frames_roundtrip() {
        roundtrip(Frame::HelloPeer {
            node: 3,
            protocol: ProtocolKind::default_protocol(),
            nonce: vec![7u8; 32].into(),
            version: Some(Version::ours()),
        });
        roundtrip(Frame::hello_client());
        roundtrip(Frame::HelloClient { version: None });
        roundtrip(Frame::PeerChallenge {
            nonce: vec![1u8; 32].into(),
            proof: vec![2u8; 32].into(),
        });
        roundtrip(Frame::PeerProof {
            proof: vec![3u8; 32].into(),
        });
        roundtrip(Frame::Auth {
            user: "alice".into(),
            password: "pw".into(),
        });
        roundtrip(Frame::SnapshotRequest);
        roundtrip(Frame::SnapshotPart {
            data: vec![9u8; 100].into(),
            more: true,
        });
        roundtrip(Frame::Request {
            id: 7,
            op: OpId { client: 1, seq: 2 },
            req: Request::Put {
                key: "k".into(),
                value: vec![0u8; 1000].into(),
            },
        });
        roundtrip(Frame::Proto(Msg::Query {
            op: 1,
            key: "x".into(),
            epoch: 3,
        }));
        roundtrip(Frame::Error {
            message: "no".into(),
        });
        roundtrip(Frame::Heartbeat);
    }

    /// The coordination service's requests, answers and events travel in
    /// the same frames (`Request::Znode`, `Response::Znode`, `Notify`).
    #[test]
    fn znode_frames_roundtrip() {
        use quorumkv_core::znode::{Stat, ZkError, ZnodeOp, ZnodeReply};
        roundtrip(Frame::Request {
            id: 9,
            op: OpId { client: 5, seq: 1 },
            req: Request::Znode(ZnodeOp::Create {
                path: "/q/n-".into(),
                data: "d".into(),
                ephemeral: true,
                sequential: true,
            }),
        });
        for resp in [
            ZnodeReply::Created {
                path: "/q/n-0000000003".into(),
                stat: Stat {
                    czxid: 42,
                    ephemeral_owner: 5,
                    ..Stat::default()
                },
            },
            ZnodeReply::Children(vec!["a".into(), "b".into()]),
            ZnodeReply::Error(ZkError::BadArguments("path".into())),
        ] {
            roundtrip(Frame::Response {
                id: 9,
                resp: Response::Znode(resp),
            });
        }
        roundtrip(Frame::Notify(Event {
            kind: "deleted".into(),
            key: "/q/n-0000000003".into(),
            value: None,
        }));
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let b = encode_to_bytes(&Frame::<Msg>::Request {
            id: 1,
            op: OpId::NONE,
            req: Request::Get { key: "abc".into() },
        });
        let mut fb = FrameBuf::new(DEFAULT_MAX_FRAME);
        for (i, byte) in b.iter().enumerate() {
            assert_eq!(fb.next_frame::<Msg>().unwrap(), None, "byte {i}");
            fb.buf_mut().put_u8(*byte);
        }
        assert!(fb.next_frame::<Msg>().unwrap().is_some());
    }

    #[test]
    fn oversized_and_garbage_are_errors_not_panics() {
        let mut fb = FrameBuf::new(100);
        fb.buf_mut().put_u32(101);
        assert!(matches!(
            fb.next_frame::<Msg>(),
            Err(CodecError::TooLarge { len: 101, .. })
        ));
        let mut fb = FrameBuf::new(100);
        fb.buf_mut().put_u32(3);
        fb.buf_mut().extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(
            fb.next_frame::<Msg>(),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let mut fb = FrameBuf::new(1 << 16);
            let n = (x % 64) as usize;
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                fb.buf_mut().put_u8(x as u8);
            }
            let mut len = [0u8; 4];
            len.copy_from_slice(&(n as u32).to_be_bytes());
            let mut framed = BytesMut::from(&len[..]);
            framed.extend_from_slice(&fb.buf_mut()[..]);
            let mut fb = FrameBuf::new(1 << 16);
            fb.buf_mut().extend_from_slice(&framed);
            let _ = fb.next_frame::<Msg>();
        }
    }
}
