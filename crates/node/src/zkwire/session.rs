//! A ZooKeeper session's id and password, made so that any replica can
//! check a password alone, with nothing replicated: a client that moves
//! to another replica proves the session is its own there
//! (docs/src/user-guide/zookeeper-clients.md, "Moving to another server").
//!
//! * With the cluster secret (`quorumkv cluster` writes one; every
//!   replica holds it): the id is random, the password the first 16 bytes
//!   of `HMAC-SHA256(secret, label | id)`. Forging one is forging an HMAC.
//! * Without one: the password is random and the id is made from it (the
//!   first 8 bytes of `SHA-256(label | password)`, top two bits set); a
//!   replica checks a password by hashing it. Forging one is finding a
//!   preimage of 62 bits of SHA-256.
//!
//! Every id has bit 62 set too (`SESSION_BOUND`): a ZooKeeper client works
//! only inside its session, so once the session is gone the tree refuses
//! its writes, even one a paused server delivers late. An id made before
//! that bit was set still checks with its password.
//!
//! Either way a replica restarted or never asked before checks the same.

use crate::peer_auth::ClusterSecret;
use hmac::Mac;
use quorumkv_core::znode::tree::SESSION_BOUND;
use sha2::{Digest, Sha256};

/// Names this use of the secret and of the hash.
const LABEL: &[u8] = b"quorumkv zk session v1";
/// Set in every session id the port hands out (with `SESSION_BOUND`).
const TOP: u64 = 1 << 63;
/// ZooKeeper's password length.
pub(super) const PASSWD_LEN: usize = 16;

/// A new session's id and password; never an id the znode tree keeps
/// for its owner marks (`reserved_owner`: a container's, a TTL node's),
/// which it would refuse to open (drawn again: one draw in 2^23 is one).
pub(super) fn new_session(secret: Option<&ClusterSecret>) -> (u64, [u8; PASSWD_LEN]) {
    loop {
        let (session, passwd) = draw_session(secret);
        if !quorumkv_core::znode::tree::reserved_owner(session) {
            return (session, passwd);
        }
    }
}

fn draw_session(secret: Option<&ClusterSecret>) -> (u64, [u8; PASSWD_LEN]) {
    match secret {
        Some(s) => {
            let session = rand::random::<u64>() | TOP | SESSION_BOUND;
            let tag = s.keyed(LABEL, &session.to_be_bytes()).finalize();
            let mut passwd = [0; PASSWD_LEN];
            passwd.copy_from_slice(&tag.into_bytes()[..PASSWD_LEN]);
            (session, passwd)
        }
        None => {
            let passwd: [u8; PASSWD_LEN] = rand::random();
            (id_of(&passwd), passwd)
        }
    }
}

/// The id a password makes when there is no secret.
fn id_of(passwd: &[u8]) -> u64 {
    let h = Sha256::new()
        .chain_update(LABEL)
        .chain_update(passwd)
        .finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&h[..8]);
    u64::from_be_bytes(first) | TOP | SESSION_BOUND
}

/// Whether `passwd` is session `session`'s (in constant time with a
/// secret).
pub(super) fn password_checks(secret: Option<&ClusterSecret>, session: u64, passwd: &[u8]) -> bool {
    if passwd.len() != PASSWD_LEN {
        return false;
    }
    match secret {
        Some(s) => (s.keyed(LABEL, &session.to_be_bytes()))
            .verify_truncated_left(passwd)
            .is_ok(),
        None => id_of(passwd) == session | SESSION_BOUND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id has both marks set, whatever the random draw (one draw
    /// would show a lost mark only half the time).
    #[test]
    fn every_id_is_marked_top_and_session_bound() {
        let secret = ClusterSecret::from_text("0123456789abcdef0123").unwrap();
        for key in [Some(&secret), None] {
            for _ in 0..64 {
                let (session, _) = new_session(key);
                assert_eq!(session & (TOP | SESSION_BOUND), TOP | SESSION_BOUND);
            }
        }
    }

    /// Each scheme checks its own passwords and refuses a changed byte,
    /// another session's id, another length and the other scheme's.
    #[test]
    fn a_password_checks_for_its_session_only() {
        let secret = ClusterSecret::from_text("0123456789abcdef0123").unwrap();
        let other = ClusterSecret::from_text("fedcba9876543210fedc").unwrap();
        for key in [Some(&secret), None] {
            let (session, passwd) = new_session(key);
            assert!(session & TOP != 0 && session & SESSION_BOUND != 0);
            assert!(password_checks(key, session, &passwd));
            let (session2, passwd2) = new_session(key);
            assert_ne!(session, session2);
            assert!(!password_checks(key, session, &passwd2));
            assert!(!password_checks(key, session2, &passwd));
            for i in [0, 7, 15] {
                let mut bad = passwd;
                bad[i] ^= 1;
                assert!(!password_checks(key, session, &bad), "byte {i}");
            }
            assert!(!password_checks(key, session, &passwd[..15]));
            assert!(!password_checks(key, session, &[0; PASSWD_LEN]));
        }
        let (session, passwd) = new_session(Some(&secret));
        assert!(!password_checks(Some(&other), session, &passwd));
        assert!(!password_checks(None, session, &passwd));
        let (session, passwd) = new_session(None);
        assert!(!password_checks(Some(&secret), session, &passwd));
        // A session made before ids were session-bound moves intact.
        assert!(password_checks(None, session & !SESSION_BOUND, &passwd));
    }
}
