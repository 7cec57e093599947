//! Znode ACLs as ZooKeeper defines them (`org.apache.zookeeper.data.ACL`):
//! each node holds a list of (perms, scheme, id); a request passes a check
//! for permission `p` when one entry holding `p` names an identity of the
//! request (or is `world:anyone`).
//!
//! * Permission bits are ZooKeeper's: READ=1, WRITE=2, CREATE=4,
//!   DELETE=8, ADMIN=16 (ALL=31), written `r w c d a` in zkCli's text.
//! * Schemes: `world` (id `anyone`, everybody); `digest` (id
//!   `user:base64(sha1("user:password"))`, exactly ZooKeeper's
//!   `DigestAuthenticationProvider`, so ids made by ZooKeeper's tools match);
//!   `user` (quorumkv's own: id is a user name of the replica's users file,
//!   the identity of a connection logged in with `--user`); and `auth`,
//!   only at create/setACL time, meaning "every authenticated identity of
//!   the asking connection" (ZooKeeper's shorthand).
//! * The default ACL is `world:anyone:cdrwa` (ZooKeeper's
//!   `OPEN_ACL_UNSAFE`); an empty ACL is refused (`InvalidAcl`).
//!
//! Identities are the requesting *connection's*, as in ZooKeeper (its
//! `ServerCnxn.authInfo`): held by the server the client is connected to,
//! carried in each logged request to the leader, never read from the
//! client's request bytes (`protocol/zab/znode_sm.rs`).

use super::ZkError;
use serde::{Deserialize, Serialize};

pub const READ: u32 = 1;
pub const WRITE: u32 = 1 << 1;
pub const CREATE: u32 = 1 << 2;
pub const DELETE: u32 = 1 << 3;
pub const ADMIN: u32 = 1 << 4;
pub const ALL: u32 = READ | WRITE | CREATE | DELETE | ADMIN;

/// An identity: a scheme and an id within it (ZooKeeper's `Id`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Id {
    pub scheme: String,
    pub id: String,
}

impl Id {
    pub fn new(scheme: &str, id: &str) -> Id {
        Id {
            scheme: scheme.into(),
            id: id.into(),
        }
    }
    /// `world:anyone`.
    pub fn anyone() -> Id {
        Id::new("world", "anyone")
    }
}

/// One ACL entry (ZooKeeper's `ACL`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Acl {
    pub perms: u32,
    pub id: Id,
}

impl Acl {
    pub fn new(perms: u32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            id: Id::new(scheme, id),
        }
    }
}

/// `world:anyone:cdrwa`, the ACL of a node created without one.
pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl {
        perms: ALL,
        id: Id::anyone(),
    }]
}

/// The schemes that name an authenticated identity (the ones `auth`
/// expands to).
const AUTHENTICATED: [&str; 2] = ["digest", "user"];

/// ZooKeeper's `DigestAuthenticationProvider.generateDigest`:
/// `"alice:secret"` → `"alice:" + base64(sha1("alice:secret"))`.
pub fn digest(user_password: &str) -> Result<String, ZkError> {
    let Some((user, _)) = user_password.split_once(':') else {
        return Err(ZkError::BadArguments("digest auth is user:password".into()));
    };
    Ok(format!(
        "{user}:{}",
        base64(&sha1(user_password.as_bytes()))
    ))
}

/// Check and complete an ACL given at create or setACL time, as
/// ZooKeeper's `fixupACL`: `auth` becomes one entry per authenticated
/// identity of the request (`InvalidAcl` if it has none); `world` must name
/// `anyone`; `digest` ids are `user:hash`; `user` ids are non-empty names;
/// unknown schemes, perms outside ALL and an empty list are `InvalidAcl`.
/// Duplicates go.
pub fn fixup(acl: &[Acl], ids: &[Id]) -> Result<Vec<Acl>, ZkError> {
    if acl.is_empty() {
        return Err(ZkError::InvalidAcl);
    }
    let mut out: Vec<Acl> = Vec::new();
    let mut push = |a: Acl| {
        if !out.contains(&a) {
            out.push(a);
        }
    };
    for a in acl {
        if a.perms & !ALL != 0 {
            return Err(ZkError::InvalidAcl);
        }
        let ok = match a.id.scheme.as_str() {
            "world" => a.id.id == "anyone",
            "auth" => {
                let mine: Vec<&Id> = ids
                    .iter()
                    .filter(|i| AUTHENTICATED.contains(&i.scheme.as_str()))
                    .collect();
                if mine.is_empty() {
                    return Err(ZkError::InvalidAcl);
                }
                for id in mine {
                    push(Acl {
                        perms: a.perms,
                        id: id.clone(),
                    });
                }
                continue;
            }
            "digest" => a.id.id.split(':').count() == 2 && !a.id.id.starts_with(':'),
            "user" => !a.id.id.is_empty() && !a.id.id.contains(':'),
            _ => false,
        };
        if !ok {
            return Err(ZkError::InvalidAcl);
        }
        push(a.clone());
    }
    Ok(out)
}

/// ZooKeeper's `checkACL`: may a request with identities `ids` do what
/// needs `perm` (one bit, or several meaning "any of them") on a node
/// with `acl`? An empty ACL (never stored by us) allows everything, as in
/// ZooKeeper.
pub fn allows(acl: &[Acl], perm: u32, ids: &[Id]) -> bool {
    acl.is_empty()
        || acl
            .iter()
            .filter(|a| a.perms & perm != 0)
            .any(|a| a.id == Id::anyone() || ids.contains(&a.id))
}

/// `Ok` or ZooKeeper's `NoAuth`.
pub fn check(acl: &[Acl], perm: u32, ids: &[Id]) -> Result<(), ZkError> {
    match allows(acl, perm, ids) {
        true => Ok(()),
        false => Err(ZkError::NoAuth),
    }
}

/// What getACL shows a requester without ADMIN (ZooKeeper 3.7+,
/// ZOOKEEPER-1392): digest hashes replaced by `x`.
pub fn redacted(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|a| match (a.id.scheme.as_str(), a.id.id.split_once(':')) {
            ("digest", Some((user, _))) => Acl::new(a.perms, "digest", &format!("{user}:x")),
            _ => a.clone(),
        })
        .collect()
}

/// zkCli's permission letters, `cdrwa` order.
pub fn perms_to_string(perms: u32) -> String {
    [
        (CREATE, 'c'),
        (DELETE, 'd'),
        (READ, 'r'),
        (WRITE, 'w'),
        (ADMIN, 'a'),
    ]
    .iter()
    .filter(|(bit, _)| perms & bit != 0)
    .map(|(_, c)| *c)
    .collect()
}

pub fn perms_from_str(s: &str) -> Result<u32, String> {
    s.chars().try_fold(0, |p, c| {
        Ok(p | match c {
            'r' => READ,
            'w' => WRITE,
            'c' => CREATE,
            'd' => DELETE,
            'a' => ADMIN,
            _ => return Err(format!("unknown permission {c:?} (one of cdrwa)")),
        })
    })
}

/// zkCli's ACL text: `scheme:id:perms` entries separated by commas, e.g.
/// `world:anyone:r,digest:alice:XXXX=:cdrwa,user:bob:rw` (the id is
/// everything between the first and the last colon).
pub fn parse(text: &str) -> Result<Vec<Acl>, String> {
    let acl = text
        .split(',')
        .map(|e| {
            let (scheme, rest) = e
                .split_once(':')
                .ok_or_else(|| format!("ACL entry {e:?} is not scheme:id:perms"))?;
            let (id, perms) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("ACL entry {e:?} is not scheme:id:perms"))?;
            Ok(Acl {
                perms: perms_from_str(perms)?,
                id: Id::new(scheme, id),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(acl)
}

/// The text [`parse`] reads.
pub fn format(acl: &[Acl]) -> String {
    acl.iter()
        .map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id, perms_to_string(a.perms)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Standard base64 with padding (RFC 4648), as Java's `Base64.getEncoder`.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// SHA-1 (FIPS 180-4), only for ZooKeeper's digest ids: the scheme is
/// ZooKeeper's, not a password store of ours (the users file uses argon2).
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (hi, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hi = hi.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha1_and_base64_match_the_standard_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(&sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }

    /// ZooKeeper's documented digests: `super:D/InIHSb7yEEbrWz8b9l71RjZJU=`
    /// (the administrator's guide's superDigest example) is the digest of
    /// `super:test` — not of `super:superpw`, whose digest is
    /// `super:g9oN2HttPfn8MMWJZ2r45Np/LIA=` (checked with `openssl sha1
    /// -binary | base64`); `super:xQJmxLMiHGwaqBvst5y6rkB6HQs=` is
    /// `super:admin`.
    #[test]
    fn digest_ids_are_zookeepers() {
        assert_eq!(
            digest("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert_eq!(
            digest("super:admin").unwrap(),
            "super:xQJmxLMiHGwaqBvst5y6rkB6HQs="
        );
        assert_eq!(
            digest("super:superpw").unwrap(),
            "super:g9oN2HttPfn8MMWJZ2r45Np/LIA="
        );
        // Only the first colon splits: the password may hold colons.
        assert!(digest("a:b:c").unwrap().starts_with("a:"));
        assert!(matches!(digest("nocolon"), Err(ZkError::BadArguments(_))));
    }

    #[test]
    fn text_form_round_trips_as_zkcli_writes_it() {
        let text = "world:anyone:cdrwa,digest:alice:D/InIHSb7yEEbrWz8b9l71RjZJU=:r,user:bob:rw";
        let acl = parse(text).unwrap();
        assert_eq!(acl[0], Acl::new(ALL, "world", "anyone"));
        assert_eq!(
            acl[1],
            Acl::new(READ, "digest", "alice:D/InIHSb7yEEbrWz8b9l71RjZJU=")
        );
        assert_eq!(acl[2], Acl::new(READ | WRITE, "user", "bob"));
        assert_eq!(format(&acl), text);
        assert!(parse("world:anyone:rx").is_err());
        assert!(parse("world").is_err());
        assert_eq!(perms_to_string(ALL), "cdrwa");
        assert_eq!(perms_from_str("").unwrap(), 0);
    }

    #[test]
    fn fixup_expands_auth_and_refuses_bad_entries() {
        let alice = Id::new("digest", "alice:h=");
        let ids = [alice.clone(), Id::new("user", "bob")];
        let got = fixup(&[Acl::new(READ, "auth", "")], &ids).unwrap();
        assert_eq!(
            got,
            vec![
                Acl {
                    perms: READ,
                    id: alice
                },
                Acl::new(READ, "user", "bob")
            ]
        );
        let invalid = |acl: &[Acl], ids: &[Id]| fixup(acl, ids) == Err(ZkError::InvalidAcl);
        assert!(invalid(&[], &ids));
        assert!(invalid(&[Acl::new(READ, "auth", "")], &[]));
        assert!(invalid(&[Acl::new(READ, "world", "someone")], &ids));
        assert!(invalid(&[Acl::new(READ, "ip", "10.0.0.1")], &ids));
        assert!(invalid(&[Acl::new(READ, "digest", "nohash")], &ids));
        assert!(invalid(&[Acl::new(READ, "user", "")], &ids));
        assert!(invalid(&[Acl::new(64, "world", "anyone")], &ids));
        let dup = [
            Acl::new(READ, "world", "anyone"),
            Acl::new(READ, "world", "anyone"),
        ];
        assert_eq!(fixup(&dup, &[]).unwrap().len(), 1);
    }

    #[test]
    fn checks_need_one_entry_with_the_bit_naming_an_identity() {
        let alice = Id::new("digest", "alice:h=");
        let acl = [
            Acl::new(READ, "world", "anyone"),
            Acl {
                perms: WRITE | ADMIN,
                id: alice.clone(),
            },
            Acl::new(DELETE, "user", "bob"),
        ];
        for perm in [READ, WRITE, CREATE, DELETE, ADMIN] {
            let anon = allows(&acl, perm, &[]);
            let a = allows(&acl, perm, std::slice::from_ref(&alice));
            let b = allows(&acl, perm, &[Id::new("user", "bob")]);
            let want = match perm {
                READ => (true, true, true),
                WRITE | ADMIN => (false, true, false),
                DELETE => (false, false, true),
                _ => (false, false, false),
            };
            assert_eq!((anon, a, b), want, "perm {perm}");
        }
        // A user identity never matches a digest entry of the same name.
        assert!(!allows(&acl, WRITE, &[Id::new("user", "alice")]));
        assert!(allows(&acl, READ | ADMIN, &[]));
        assert_eq!(check(&acl, CREATE, &[]), Err(ZkError::NoAuth));
        assert_eq!(
            redacted(&acl)[1],
            Acl::new(WRITE | ADMIN, "digest", "alice:x")
        );
    }
}
