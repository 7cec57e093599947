//! ZooKeeper's client wire protocol (3.5–3.8) on a replica's `--zk-port`:
//! zkCli.sh, kazoo and other ZooKeeper clients use the coordination
//! service unchanged (docs/src/user-guide/zookeeper-clients.md).
//!
//! * [`jute`] — ZooKeeper's record encoding and packet framing, bounded by
//!   `jute.maxbuffer`.
//! * [`proto`] — the client records, op codes and error codes.
//! * `ops` — requests to the service's operations and answers to replies.
//! * `multi` — `multi` and `multiRead`: their records, plans and replies.
//! * `server` — the port: connect (a new session or one resumed),
//!   requests, watch events.
//! * `login` — users on the port: `addAuth digest` checked against the
//!   users file, roles, and ZooKeeper's enforced authentication.
//! * `session` — session ids and passwords any replica can check.
//! * `four` — the four-letter words (`ruok`, `srvr`, `mntr`).
//! * `walk` — `getAllChildrenNumber`, as a walk of `getChildren` reads.

mod four;
pub mod jute;
mod login;
mod multi;
mod ops;
pub mod proto;
mod server;
mod session;
mod walk;

pub use four::ZK_COMPAT_VERSION;
pub use jute::DEFAULT_MAX_BUFFER;
pub(crate) use server::accept_zk;
pub use server::TICK_MS;

/// Decode `data` as the port would (the connect record, then a request
/// packet) and check nothing panics; the fuzz target and the property
/// test call it. Returns whether a request decoded.
#[doc(hidden)]
pub fn decoder_check(data: &[u8]) -> bool {
    let _ = jute::packet_len(data, DEFAULT_MAX_BUFFER);
    let _ = proto::ConnectRequest::decode(&mut jute::Reader::new(data));
    match proto::Packet::decode(data) {
        Ok(p) => {
            let _ = ops::plan(p.req);
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Random bytes never panic the decoder.
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            super::decoder_check(&data);
        }

        /// Random bodies after a valid header of each op code never panic.
        #[test]
        fn random_bodies_never_panic(code in -12i32..110, body in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut p = 7i32.to_be_bytes().to_vec();
            p.extend_from_slice(&code.to_be_bytes());
            p.extend_from_slice(&body);
            super::decoder_check(&p);
        }
    }
}
