//! The one registration point: every protocol exports a [`ProtocolDef`]
//! and is named once in [`registry!`] at the bottom of this file. The
//! server, the client library, the simulator, the bench and the CLI learn
//! everything about a protocol from here: its name, how to build its
//! server node and client-side coordinator, its options, its injected
//! bugs, the links it assumes and how many nodes may crash at once.
//!
//! Drivers are generic over the protocol's types, so a name given at run
//! time becomes types through a [`Visitor`]: `kind.visit(v)` calls
//! `v.visit::<D>()` with `D` the protocol's definition.

pub use super::contract::{
    client_may_send_fn, client_writer_id, BugInfo, ClientMaySend, ClientSpec, InjectedBugs,
    LinkModel, NamedVariant, NoBugs, NodeSpec, Over, PointRatio, ProtocolDef, ProtocolInfo, Timing,
    Visitor,
};
use serde::{Deserialize, Serialize};
use std::fmt::{self, Debug};
use std::sync::OnceLock;

struct Describe;

impl Visitor for Describe {
    type Output = ProtocolInfo;
    fn visit<D: ProtocolDef>(self) -> ProtocolInfo {
        ProtocolInfo::of::<D>()
    }
}

/// A registered protocol, by name. Serialized as its name; deserializing
/// an unknown name is an error (a peer from another build).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolKind(&'static str);

impl ProtocolKind {
    /// Every registered protocol, in registration order.
    pub fn all() -> Vec<ProtocolKind> {
        infos().iter().map(|i| ProtocolKind(i.name)).collect()
    }
    /// The protocol a cluster runs when nothing says otherwise.
    pub fn default_protocol() -> ProtocolKind {
        ProtocolKind(infos()[0].name)
    }
    pub fn name(self) -> &'static str {
        self.0
    }
    pub fn info(self) -> &'static ProtocolInfo {
        (infos().iter())
            .find(|i| i.name == self.0)
            .expect("a ProtocolKind is always registered")
    }
    pub fn has_client_coordinator(self) -> bool {
        self.info().has_client_coordinator
    }
    /// Run `v` with this protocol's types.
    pub fn visit<V: Visitor>(self, v: V) -> V::Output {
        visit_named(self.0, v).unwrap_or_else(|_| unreachable!("registered"))
    }
}

impl Debug for ProtocolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for ProtocolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::str::FromStr for ProtocolKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        (infos().iter())
            .find(|i| i.name.eq_ignore_ascii_case(s))
            .map(|i| ProtocolKind(i.name))
            .ok_or_else(|| {
                let names: Vec<_> = infos().iter().map(|i| i.name).collect();
                format!("unknown protocol '{s}' (known: {})", names.join(", "))
            })
    }
}

impl Serialize for ProtocolKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for ProtocolKind {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Self, De::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Descriptions of every registered protocol, made once.
pub fn infos() -> &'static [ProtocolInfo] {
    static INFOS: OnceLock<Vec<ProtocolInfo>> = OnceLock::new();
    INFOS.get_or_init(|| visit_all(&|| Describe))
}

/// The one list. Adding a protocol is one line in the `registry!` call.
macro_rules! registry {
    ($($(#[$on:meta])* $def:ty),+ $(,)?) => {
        /// Run `make()`'s visitor with every registered protocol, in order.
        // One push per protocol: each may be compiled out by its feature.
        #[allow(clippy::vec_init_then_push)]
        pub fn visit_all<V: Visitor>(make: &dyn Fn() -> V) -> Vec<V::Output> {
            let mut all = Vec::new();
            $($(#[$on])* all.push(make().visit::<$def>());)+
            all
        }
        /// Run `v` with the protocol called `name` (any case).
        pub fn visit_named<V: Visitor>(name: &str, v: V) -> Result<V::Output, V> {
            $($(#[$on])* {
                if name.eq_ignore_ascii_case(<$def as ProtocolDef>::NAME) {
                    return Ok(v.visit::<$def>());
                }
            })+
            Err(v)
        }
    };
}

// Each line: a protocol's definition, behind the cargo feature that compiles
// it (optional: a protocol without a feature is always built).
registry! {
    #[cfg(feature = "abd")] super::abd::Abd,
    #[cfg(feature = "ring")] super::ring::Ring,
    #[cfg(feature = "lease-lock")] super::lease_lock::LeaseLock,
    #[cfg(feature = "lamport")] super::lamport::Lamport,
    #[cfg(feature = "zab")] super::zab::Zab,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_kebab_case_and_round_trip() {
        let all = ProtocolKind::all();
        assert!(!all.is_empty());
        let mut names: Vec<_> = all.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "two protocols share a name");
        for k in all {
            assert!(k.name().chars().all(|c| c.is_ascii_lowercase() || c == '-'));
            assert_eq!(k.name().to_uppercase().parse::<ProtocolKind>(), Ok(k));
            let bytes = postcard::to_stdvec(&k).unwrap();
            assert_eq!(postcard::from_bytes::<ProtocolKind>(&bytes).unwrap(), k);
        }
        let unknown = postcard::to_stdvec("no-such-protocol").unwrap();
        assert!(postcard::from_bytes::<ProtocolKind>(&unknown).is_err());
        let err = "paxos".parse::<ProtocolKind>().unwrap_err();
        assert!(err.contains("known:"), "{err}");
    }

    #[test]
    fn every_protocol_keeps_some_nodes_and_checks_its_options() {
        for info in infos() {
            assert!(info.max_crashed(5) <= 5, "{}", info.name);
            let bad = [("no-such-option".to_string(), "1".to_string())];
            assert!(info.check_options(&bad).is_err(), "{}", info.name);
            assert!(info.check_options(&[]).is_ok(), "{}", info.name);
            for o in info.options {
                let pair = [(o.name.to_string(), o.default.to_string())];
                assert!(
                    info.check_options(&pair).is_ok(),
                    "{} {}",
                    info.name,
                    o.name
                );
            }
            for v in info.variants {
                let pairs: Vec<_> = (v.options.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                assert!(
                    info.check_options(&pairs).is_ok(),
                    "{} {}",
                    info.name,
                    v.name
                );
                assert_ne!(
                    v.name, "default",
                    "{}: `default` is every protocol's",
                    info.name
                );
            }
        }
    }
}
