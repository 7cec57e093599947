//! Replicas prove to each other that they hold the cluster secret before a
//! link carries protocol traffic, so a stray connection cannot pose as a
//! replica. A challenge-response over fresh nonces from both sides; the
//! secret itself never crosses the wire.
//!
//! ```text
//! dialler D                                   acceptor A
//!   HelloPeer { node: d, nonce_d }   ──────▶
//!                                    ◀──────  PeerChallenge { nonce_a, proof_a }
//!   check proof_a (A knows the secret)
//!   PeerProof { proof_d }            ──────▶
//!                                             check proof_d; the link is up
//! proof_a = HMAC(secret, "acceptor" | cluster | a | d | nonce_d | nonce_a)
//! proof_d = HMAC(secret, "dialler"  | cluster | d | a | nonce_a | nonce_d)
//! ```
//!
//! Both nonces are fresh per connection, so a recorded exchange replays
//! nowhere; the role label and both ids keep one side's proof from being
//! reflected as the other's. The secret authenticates a link but does not
//! encrypt it: TLS does that (see the security page of the docs).

use hmac::{Hmac, Mac};
use quorumkv_core::NodeId;
use sha2::Sha256;
use std::path::Path;

/// Bytes of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Fewest bytes of secret accepted (128 bits).
pub const MIN_SECRET_LEN: usize = 16;

/// The shared secret of a cluster's replicas.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)") // never printed
    }
}

/// Which end of a link a proof speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Acceptor,
    Dialler,
}

impl ClusterSecret {
    /// A secret from its text: surrounding white space is ignored; it must
    /// hold at least [`MIN_SECRET_LEN`] bytes.
    pub fn from_text(text: &str) -> Result<ClusterSecret, String> {
        let s = text.trim();
        if s.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the cluster secret has {} bytes; at least {MIN_SECRET_LEN} are needed \
                 (`quorumkv cluster` writes one: 64 hex digits)",
                s.len()
            ));
        }
        Ok(ClusterSecret(s.as_bytes().to_vec()))
    }

    /// Read a secret file (see [`ClusterSecret::from_text`]).
    pub fn load(path: &Path) -> anyhow::Result<ClusterSecret> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read the cluster secret {}: {e}", path.display())
        })?;
        ClusterSecret::from_text(&text)
            .map_err(|e| anyhow::anyhow!("cluster secret {}: {e}", path.display()))
    }

    /// A new random secret as text: 64 hex digits (256 bits).
    pub fn generate() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, side: Side, cluster: &str, me: NodeId, other: NodeId) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(match side {
            Side::Acceptor => b"quorumkv peer acceptor v1",
            Side::Dialler => b"quorumkv peer dialler  v1",
        });
        // Length-prefixed, so no two different inputs concatenate alike.
        mac.update(&(cluster.len() as u64).to_be_bytes());
        mac.update(cluster.as_bytes());
        mac.update(&me.to_be_bytes());
        mac.update(&other.to_be_bytes());
        mac
    }

    /// The proof that `me`, on `side` of its link with `other`, holds the
    /// secret: over the other side's nonce, then its own.
    pub fn proof(
        &self,
        side: Side,
        cluster: &str,
        (me, other): (NodeId, NodeId),
        (their_nonce, my_nonce): (&[u8], &[u8]),
    ) -> Vec<u8> {
        let mut mac = self.mac(side, cluster, me, other);
        mac.update(their_nonce);
        mac.update(my_nonce);
        mac.finalize().into_bytes().to_vec()
    }

    /// An HMAC-SHA256 under the secret for the use named by `label`
    /// (a tag made for one use verifies for no other), fed `data`.
    pub fn keyed(&self, label: &[u8], data: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(&(label.len() as u64).to_be_bytes());
        mac.update(label);
        mac.update(data);
        mac
    }

    /// Whether `proof` is what `sender` (on `side`, talking to `me`) had to
    /// send; compared in constant time.
    pub fn verify(
        &self,
        side: Side,
        cluster: &str,
        (sender, me): (NodeId, NodeId),
        (my_nonce, their_nonce): (&[u8], &[u8]),
        proof: &[u8],
    ) -> bool {
        let mut mac = self.mac(side, cluster, sender, me);
        mac.update(my_nonce);
        mac.update(their_nonce);
        mac.verify_slice(proof).is_ok()
    }
}

/// Write a secret to a file only its owner may read: a new file, or an
/// existing one replaced when `replace`.
pub fn write_secret(path: &Path, secret: &str, replace: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).mode(0o600);
    if replace {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    writeln!(opts.open(path)?, "{secret}")
}

/// A fresh nonce.
pub fn nonce() -> Vec<u8> {
    rand::random::<[u8; NONCE_LEN]>().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::from_text(s).unwrap()
    }

    #[test]
    fn both_sides_verify_each_other() {
        let s = secret("0123456789abcdef0123");
        let (nd, na) = (nonce(), nonce());
        let pa = s.proof(Side::Acceptor, "c", (1, 2), (&nd, &na));
        assert!(s.verify(Side::Acceptor, "c", (1, 2), (&nd, &na), &pa));
        let pd = s.proof(Side::Dialler, "c", (2, 1), (&na, &nd));
        assert!(s.verify(Side::Dialler, "c", (2, 1), (&na, &nd), &pd));
    }

    #[test]
    fn a_proof_fails_under_any_other_input() {
        let s = secret("0123456789abcdef0123");
        let (nd, na) = (nonce(), nonce());
        let pd = s.proof(Side::Dialler, "c", (2, 1), (&na, &nd));
        let other = secret("another secret of enough bytes");
        assert!(!other.verify(Side::Dialler, "c", (2, 1), (&na, &nd), &pd));
        // Reflected as the other side's proof, or claiming another id.
        assert!(!s.verify(Side::Acceptor, "c", (2, 1), (&na, &nd), &pd));
        assert!(!s.verify(Side::Dialler, "c", (3, 1), (&na, &nd), &pd));
        // Replayed on a connection with a fresh nonce, or another cluster.
        assert!(!s.verify(Side::Dialler, "c", (2, 1), (&nonce(), &nd), &pd));
        assert!(!s.verify(Side::Dialler, "d", (2, 1), (&na, &nd), &pd));
        // Truncated or empty.
        assert!(!s.verify(Side::Dialler, "c", (2, 1), (&na, &nd), &pd[..16]));
        assert!(!s.verify(Side::Dialler, "c", (2, 1), (&na, &nd), &[]));
    }

    #[test]
    fn short_secrets_are_refused_and_generated_ones_are_long() {
        assert!(ClusterSecret::from_text("  short \n").is_err());
        let g = ClusterSecret::generate();
        assert_eq!(g.len(), 64);
        assert!(ClusterSecret::from_text(&g).is_ok());
        assert_ne!(g, ClusterSecret::generate());
        assert_eq!(format!("{:?}", secret(&g)), "ClusterSecret(..)");
    }
}
