//! Where a replica keeps what must survive a restart. The in-memory engine is
//! the thesis' "Net-Only" setting: nothing survives. A durable engine (an
//! embedded store with group commit) plugs in behind the same trait in the
//! durability issue; the driver already honours the persist-before-send rule.

use quorumkv_core::protocol::Record;
use std::fmt;
use std::io;
use std::str::FromStr;

/// What a replica's acknowledgement promises about its data.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Kept in memory only: a restarted replica comes back empty (seed 003's
    /// "Net-Only") and recovers from its peers (`--recover`).
    #[default]
    Memory,
    /// Written to the operating system before the acknowledgement, not
    /// synced: survives `kill -9`, not a power cut.
    Buffered,
    /// Synced to the disk before the acknowledgement (group commit).
    Fsync,
}

impl Durability {
    pub const ALL: [Durability; 3] = [Durability::Memory, Durability::Buffered, Durability::Fsync];

    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Memory => "memory",
            Durability::Buffered => "buffered",
            Durability::Fsync => "fsync",
        }
    }

    /// Does a restarted replica find its data again?
    pub fn keeps_data(self) -> bool {
        self != Durability::Memory
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Durability::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| format!("unknown durability '{s}' (memory, buffered or fsync)"))
    }
}

pub trait Storage: Send {
    /// Make `rec` durable (per the engine's mode) before returning.
    fn persist(&mut self, rec: &Record) -> io::Result<()>;
    /// Everything persisted so far, oldest first, for `Protocol::restore`.
    fn load(&mut self) -> io::Result<Vec<Record>>;
    /// The durability mode's name, for INFO.
    fn mode(&self) -> &'static str;
}

/// Keeps nothing: a restarted replica comes back empty.
#[derive(Debug, Default)]
pub struct MemoryStorage;

impl Storage for MemoryStorage {
    fn persist(&mut self, _rec: &Record) -> io::Result<()> {
        Ok(())
    }
    fn load(&mut self) -> io::Result<Vec<Record>> {
        Ok(Vec::new())
    }
    fn mode(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_names_round_trip() {
        for d in Durability::ALL {
            assert_eq!(d.as_str().parse::<Durability>(), Ok(d));
        }
        assert!("disk".parse::<Durability>().is_err());
        assert!(!Durability::Memory.keeps_data() && Durability::Fsync.keeps_data());
    }
}
