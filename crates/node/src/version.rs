//! The versions a replica speaks and writes: the native wire protocol's
//! (`MAJOR.MINOR`, in every hello), the data directory's storage format
//! (in its `IDENTITY` file), and the release (`quorumkv` crate version, for
//! messages only).
//!
//! The wire rule: two ends of a connection interoperate when their major
//! wire versions are equal; a minor version only adds what older minors
//! ignore. Releases from before version fields send hellos without one and
//! speak wire 1.0 ([`Version::unversioned`]).
//!
//! How a version travels: postcard, the frame encoding, ignores bytes left
//! after a frame's body, so a field appended to the last variant field of a
//! frame is invisible to an older decoder; a newer decoder reading an older
//! frame finds the buffer's end there and takes the field as absent
//! ([`trailing`]). New frames are appended as new variants: an older end
//! refuses one as a malformed frame (1.2's membership frames).

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// The native wire protocol's major version: ends with another major are refused.
pub const WIRE_MAJOR: u16 = 1;
/// The native wire protocol's minor version. 1.0: the releases before
/// version fields; 1.1: hellos, welcomes and statuses carry a [`Version`];
/// 1.2: membership frames (`MemberRequest`, `Members`); 1.3: ABD's
/// configuration epoch, trailing in its queries and stores, and its
/// membership-change messages (`Moved`, `Prepare` … `InstallRequest`);
/// 1.4: address updates (`AddressUpdate`, `AddressUpdated`); 1.5: replica
/// links exchange their address books (`PeerBook`); 1.6: lease-lock's
/// configuration epoch, trailing in its LOCK_REQ, READ and WRITE, and its
/// membership-change messages (`Moved`, `Change`).
pub const WIRE_MINOR: u16 = 6;
/// The newest data directory storage format this build writes: 2 with the
/// log engine (a directory of the fjall engine stays format 1).
pub const STORAGE_FORMAT: u32 = 2;
/// The oldest storage format this build reads (a directory written before
/// the format was recorded holds format 1: the layout did not change).
pub const OLDEST_STORAGE_FORMAT: u32 = 1;
/// This build's release (the crate version).
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// Most characters of another side's release string shown in a message.
const MAX_SHOWN: usize = 40;

/// A wire version and the release that speaks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
    /// The sender's release, for messages (never compared).
    pub release: String,
}

impl Version {
    /// The version this build speaks.
    pub fn ours() -> Version {
        Version {
            major: WIRE_MAJOR,
            minor: WIRE_MINOR,
            release: RELEASE.to_string(),
        }
    }

    /// Whether this end knows frames added in wire `MAJOR.minor`.
    pub fn knows(&self, minor: u16) -> bool {
        self.major == WIRE_MAJOR && self.minor >= minor
    }

    /// What a hello without a version speaks: wire 1.0, of a release from
    /// before version fields.
    pub fn unversioned() -> Version {
        Version {
            major: 1,
            minor: 0,
            release: String::new(),
        }
    }

    /// The version a hello carried, or the unversioned one.
    pub fn of(sent: Option<&Version>) -> Version {
        sent.cloned().unwrap_or_else(Version::unversioned)
    }

    /// Whether a connection between this version and ours works.
    pub fn interoperates(&self) -> bool {
        self.major == WIRE_MAJOR
    }
}

impl fmt::Display for Version {
    /// `wire 1.1 (quorumkv 0.1.0)`; the release as sent is cut short and
    /// stripped of control characters (it comes from the network).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wire {}.{}", self.major, self.minor)?;
        if self.release.is_empty() {
            return f.write_str(" (a release before version fields)");
        }
        let shown: String = (self.release.chars())
            .filter(|c| !c.is_control())
            .take(MAX_SHOWN)
            .collect();
        write!(f, " (quorumkv {shown})")
    }
}

/// Which kind of connection a version check is for, for its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Other {
    /// A replica that dialled us (`HelloPeer`).
    Replica(quorumkv_core::NodeId),
    /// A client's hello, checked by the replica.
    Client,
    /// A replica's welcome, checked by the client.
    Server,
}

/// `Ok` when `theirs` (as sent: `None` for an unversioned hello)
/// interoperates with ours; else the refusal's message, naming both
/// versions and what to do.
pub fn check(other: Other, theirs: Option<&Version>) -> Result<(), String> {
    let v = Version::of(theirs);
    if v.interoperates() {
        return Ok(());
    }
    let ours = Version::ours();
    let (who, fix) = match other {
        Other::Replica(id) => (
            format!("replica {id} speaks {v}; this replica speaks {ours}"),
            "finish the rolling upgrade (or roll back) so that every replica runs the same \
             major wire version",
        ),
        Other::Client => (
            format!("this client speaks {v}; the replica speaks {ours}"),
            "use a client of the replica's major wire version (`quorumkv version` prints it)",
        ),
        Other::Server => (
            format!("the replica speaks {v}; this client speaks {ours}"),
            "use a client of the replica's major wire version (`quorumkv version` prints it)",
        ),
    };
    Err(format!(
        "VERSION {who}: major wire versions differ and do not interoperate; {fix}"
    ))
}

/// `deserialize_with` for a trailing optional field: the field as sent, or
/// `None` where the sender's frame ends before it (an older release) or what
/// follows does not decode (taken as not sent).
pub fn trailing<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d).unwrap_or(None))
}

/// What `quorumkv version` prints.
pub fn describe() -> String {
    format!(
        "quorumkv {RELEASE}\nwire protocol {WIRE_MAJOR}.{WIRE_MINOR} (interoperates with \
         {WIRE_MAJOR}.x, including releases without version fields)\nstorage format \
         {STORAGE_FORMAT} (reads formats {OLDEST_STORAGE_FORMAT} to {STORAGE_FORMAT})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u16, minor: u16, release: &str) -> Version {
        Version {
            major,
            minor,
            release: release.into(),
        }
    }

    #[test]
    fn same_major_interoperates_another_is_refused_naming_both() {
        assert_eq!(check(Other::Client, Some(&Version::ours())), Ok(()));
        assert_eq!(check(Other::Client, Some(&v(WIRE_MAJOR, 9, "9.9"))), Ok(()));
        assert_eq!(check(Other::Replica(3), None), Ok(()), "unversioned = 1.0");
        let e = check(Other::Replica(3), Some(&v(WIRE_MAJOR + 1, 0, "7.0.0"))).unwrap_err();
        assert!(
            e.starts_with("VERSION replica 3 speaks wire 2.0 (quorumkv 7.0.0)"),
            "{e}"
        );
        assert!(e.contains(&format!(
            "this replica speaks wire {WIRE_MAJOR}.{WIRE_MINOR}"
        )));
        assert!(e.contains(RELEASE) && e.contains("rolling upgrade"), "{e}");
        let e = check(Other::Client, Some(&v(0, 3, "0.0.1"))).unwrap_err();
        assert!(e.contains("this client speaks wire 0.3"), "{e}");
        let e = check(Other::Server, Some(&v(5, 0, "5"))).unwrap_err();
        assert!(e.contains("the replica speaks wire 5.0"), "{e}");
    }

    #[test]
    fn a_hostile_release_string_is_cut_and_cleaned_in_messages() {
        let long = format!("1\n2\x1b[31m{}", "x".repeat(10_000));
        let shown = v(9, 0, &long).to_string();
        assert!(!shown.contains('\n') && !shown.contains('\x1b'), "{shown}");
        assert!(shown.len() < 80, "{}", shown.len());
        assert_eq!(
            Version::unversioned().to_string(),
            "wire 1.0 (a release before version fields)"
        );
    }

    /// The frame shapes before version fields, as postcard saw them (the
    /// same variant order as `codec::Frame`'s first variants).
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum OldFrame {
        HelloPeer {
            node: u32,
            protocol: quorumkv_core::protocol::ProtocolKind,
            nonce: bytes::Bytes,
        },
        HelloClient,
    }

    #[test]
    fn old_and_new_hellos_decode_both_ways() {
        use crate::codec::Frame;
        let protocol = quorumkv_core::protocol::ProtocolKind::default_protocol();
        let nonce = bytes::Bytes::from(vec![5u8; 32]);
        let new = Frame::<()>::HelloPeer {
            node: 2,
            protocol,
            nonce: nonce.clone(),
            version: Some(Version::ours()),
        };
        let old = OldFrame::HelloPeer {
            node: 2,
            protocol,
            nonce: nonce.clone(),
        };
        let new_bytes = postcard::to_allocvec(&new).unwrap();
        let old_bytes = postcard::to_allocvec(&old).unwrap();
        // An older release reads a new hello (the version ignored) ...
        assert_eq!(postcard::from_bytes::<OldFrame>(&new_bytes).unwrap(), old);
        // ... and this one reads an older hello as unversioned.
        let read = postcard::from_bytes::<Frame<()>>(&old_bytes).unwrap();
        assert!(matches!(
            read,
            Frame::HelloPeer {
                version: None,
                node: 2,
                ..
            }
        ));
        let hello = Frame::<()>::HelloClient {
            version: Some(Version::ours()),
        };
        let bytes = postcard::to_allocvec(&hello).unwrap();
        assert_eq!(
            postcard::from_bytes::<OldFrame>(&bytes).unwrap(),
            OldFrame::HelloClient
        );
        let old = postcard::to_allocvec(&OldFrame::HelloClient).unwrap();
        assert_eq!(
            postcard::from_bytes::<Frame<()>>(&old).unwrap(),
            Frame::HelloClient { version: None }
        );
        // Garbage where the version goes counts as no version, not a panic.
        let mut garbage = old_bytes.clone();
        garbage.extend_from_slice(&[1, 0xff, 0xff, 0xff]);
        let read = postcard::from_bytes::<Frame<()>>(&garbage).unwrap();
        assert!(matches!(read, Frame::HelloPeer { version: None, .. }));
    }

    #[test]
    fn describe_names_all_three_versions() {
        let d = describe();
        assert!(
            d.contains(RELEASE) && d.contains("wire protocol 1.6"),
            "{d}"
        );
        assert!(d.contains("storage format 2 (reads formats 1 to 2)"), "{d}");
    }
}
