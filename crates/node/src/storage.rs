//! Where a replica keeps what must survive a restart. The in-memory engine is
//! the thesis' "Net-Only" setting: nothing survives. A durable engine (an
//! embedded store with group commit) plugs in behind the same trait in the
//! durability issue; the driver already honours the persist-before-send rule.

use quorumkv_core::protocol::Record;
use std::io;

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
