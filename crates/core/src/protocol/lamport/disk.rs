//! What a durable server keeps on disk: the Meta records' keys and
//! encodings, and the persistence bookkeeping of a server. How a server
//! writes and resumes from them is `durable.rs`.

use super::msg::{Scope, Staged};
use crate::protocol::contract::Record;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The clock's mark: no message stamped above it has left this server.
pub const META_CLOCK: &str = "lamport/clock";
/// The last life that ran on this disk.
pub const META_LIFE: &str = "lamport/life";
/// `lamport/staged/global` or `lamport/staged/key/<hex>`: a scope's staged
/// writes (postcard `Vec<Kept>`; empty once none is left).
pub(super) const META_STAGED: &str = "lamport/staged/";
/// The clock's mark moves in blocks of this size, so a busy server writes
/// it once per 65 536 ticks, not once per message.
pub const CLOCK_BLOCK: u64 = 1 << 16;

/// A staged write as kept on disk: the write and whether its holder
/// released it already (it applies at its turn then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub staged: Staged,
    pub released: bool,
}

/// The persistence bookkeeping of a server.
#[derive(Clone, Debug, Default)]
pub(super) struct Durable {
    /// `NodeSpec::durable`: records survive a restart.
    pub on: bool,
    /// The clock persisted under [`META_CLOCK`].
    pub clock_mark: u64,
    /// Each scope's staged writes as last persisted, by Meta key.
    pub kept: BTreeMap<String, Vec<Kept>>,
    /// The life read back from disk.
    pub life: Option<u64>,
    /// Something was read back: this is a restart, not a first boot.
    pub restored: bool,
    /// Our previous lives' staged writes read back, for a recovery to rule
    /// on (with `lock-timeout`: see [`LamportNode::resume`]).
    pub own: Vec<Staged>,
    /// Registers held back one call ([`InjectedBug::ReleasePersistedBeforeWrite`]).
    pub late: Vec<Record>,
}

pub(super) fn staged_key(scope: &Scope) -> String {
    match scope {
        Scope::Global => format!("{META_STAGED}global"),
        Scope::Key(k) => {
            let mut s = format!("{META_STAGED}key/");
            for b in k.iter() {
                let _ = write!(s, "{b:02x}");
            }
            s
        }
    }
}

pub(super) fn word(v: &[u8]) -> Option<u64> {
    v.get(..8)?.try_into().ok().map(u64::from_le_bytes)
}

pub(super) fn meta(key: &str, value: Vec<u8>) -> Record {
    Record::Meta {
        key: key.into(),
        value: Bytes::from(value),
    }
}
