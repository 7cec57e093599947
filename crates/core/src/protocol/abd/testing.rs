//! Helpers shared by the ABD unit tests: build coordinators, feed replies,
//! and pick commands out of an `Out`. The tests beside each part check the
//! ABD rules of seed 000 §3 / seed 002 §3.1, driven by hand-fed messages.

use super::coordinator::{Coordinator, CoordinatorConfig};
use super::msg::{Msg, Timer};
use crate::protocol::contract::{Command, Out};
use crate::types::{ClientRef, NodeId, Peer, Request, Response, Tag};
use bytes::Bytes;

pub use crate::protocol::test_harness::{replies, sends, timers, value, T0};

pub type O = Out<Msg, Timer>;

pub fn coord(n: u32) -> Coordinator {
    Coordinator::new(100, (1..=n).collect(), CoordinatorConfig::default())
}
pub fn slow_read_coord(n: u32) -> Coordinator {
    Coordinator::new(
        100,
        (1..=n).collect(),
        CoordinatorConfig {
            fast_read: false,
            ..Default::default()
        },
    )
}
pub fn key() -> Bytes {
    Bytes::from_static(b"k")
}
pub fn qreply(
    c: &mut Coordinator,
    from: NodeId,
    ts: u64,
    writer: u64,
    v: Option<&str>,
    out: &mut O,
) {
    let value = v.map(|s| Bytes::copy_from_slice(s.as_bytes()));
    c.handle(
        T0,
        Peer::Node(from),
        Msg::QueryReply {
            op: 1,
            tag: Tag { ts, writer },
            value,
        },
        out,
    );
}
/// Start a get of [`key`] at `c` for client `n`.
pub fn start_get(c: &mut Coordinator, n: u64, out: &mut O) {
    c.start(T0, ClientRef::local(n), Request::Get { key: key() }, out);
}
/// Start `req` at `c` for client `n`, its first phase dropped: the `Out`
/// to feed replies with.
pub fn started(c: &mut Coordinator, n: u64, req: Request) -> O {
    let mut out = O::new();
    c.start(T0, ClientRef::local(n), req, &mut out);
    out.drain();
    out
}
/// [`started`] with a get of [`key`].
pub fn started_get(c: &mut Coordinator, n: u64) -> O {
    started(c, n, Request::Get { key: key() })
}
/// The peers of the messages sent, in order (draining `out`).
pub fn sent_to(out: &mut O) -> Vec<Peer> {
    sends(out).into_iter().map(|(to, _)| to).collect()
}
/// A put of `value` to [`key`].
pub fn put(value: &'static [u8]) -> Request {
    Request::Put {
        key: key(),
        value: Bytes::from_static(value),
    }
}
/// A replica's answer to query `op`: it holds `value` at tag (`ts`, `writer`).
pub fn query_reply(op: u64, ts: u64, writer: u64, value: &'static [u8]) -> Msg {
    Msg::QueryReply {
        op,
        tag: Tag { ts, writer },
        value: Some(Bytes::from_static(value)),
    }
}

/// Replicas 1..=n in memory, delivering every message at once: enough to
/// run a coordinator's operations to their end in a unit test.
pub struct Net {
    pub replicas: Vec<super::Replica>,
    /// Every message the coordinator sent, in order.
    pub sent: Vec<Msg>,
}

impl Net {
    pub fn new(n: u32) -> Net {
        Net {
            replicas: (0..n).map(|_| super::Replica::new(false)).collect(),
            sent: Vec::new(),
        }
    }
    /// Run `req` through `c` until it answers.
    pub fn run(&mut self, c: &mut Coordinator, req: Request) -> Response {
        let mut out = O::new();
        let client = crate::types::ClientRef::local(1);
        c.start(T0, client, req, &mut out);
        loop {
            let mut progressed = false;
            for cmd in out.drain().collect::<Vec<_>>() {
                match cmd {
                    Command::Send {
                        to: Peer::Node(n),
                        msg,
                    } => {
                        self.sent.push(msg.clone());
                        let mut o2 = O::new();
                        self.replicas[n as usize - 1].handle(Peer::Conn(7), msg, &mut o2);
                        for (_, m) in sends(&mut o2) {
                            c.handle(T0, Peer::Node(n), m, &mut out);
                            progressed = true;
                        }
                    }
                    Command::Reply { resp, .. } => return resp,
                    _ => {}
                }
            }
            assert!(progressed, "operation stalled");
        }
    }
}
