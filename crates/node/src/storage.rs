//! Where a replica keeps what must survive a restart. The in-memory engine is
//! the thesis' "Net-Only" setting: nothing survives. The durable modes write
//! to fjall (an LSM with a checksummed journal) from a sync thread that
//! commits in groups ([`pipeline`]); the driver holds back what a client or
//! peer could see until the records before it are durable.

use quorumkv_core::protocol::Record;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::Notify;

pub mod dir;
#[cfg(test)]
mod engine_tests;
pub mod fjall_engine;
pub mod log_engine;
pub mod pipeline;

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

/// Which engine keeps a durable replica's records (`--storage-engine`).
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
pub enum StorageEngine {
    /// An append log of checksummed batches in zero-filled segments, the
    /// live state in memory, checkpointed in the background ([`log_engine`]).
    #[default]
    Log,
    /// fjall, an LSM tree with a checksummed journal ([`fjall_engine`]).
    Fjall,
}

impl StorageEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageEngine::Log => "log",
            StorageEngine::Fjall => "fjall",
        }
    }

    /// The directory inside the data directory that holds its files.
    pub fn subdir(self) -> &'static str {
        match self {
            StorageEngine::Log => "log",
            StorageEngine::Fjall => "db",
        }
    }
}

impl fmt::Display for StorageEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the persistence pipeline reports for INFO and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PersistReport {
    /// Records made durable.
    pub records: u64,
    /// Sync (fsync) or flush batches.
    pub syncs: u64,
    pub sync_us_sum: u64,
    pub sync_us_max: u64,
    /// Records handed over and not durable yet.
    pub pending: u64,
    /// Failed writes or syncs (each retried).
    pub errors: u64,
    /// Why the pipeline is stuck (e.g. the disk is full); empty when not.
    pub stalled: String,
}

/// Where a replica's `Persist` records go. Records are appended with a
/// sequence number (1, 2, …); the engine makes them durable in the
/// background, several at once, and [`Storage::durable`] says how far it
/// got. The driver holds back every message and reply until the records
/// persisted before it are durable.
pub trait Storage: Send {
    /// Hand `rec` over; returns its sequence number.
    fn append(&mut self, rec: Record) -> u64;
    /// Every record with a sequence number up to this one is durable.
    fn durable(&self) -> u64;
    /// Notified whenever `durable` moves; `None` when every append is
    /// durable at once (memory), so the driver never has to wait.
    fn waker(&self) -> Option<Arc<Notify>>;
    /// Everything persisted before this start, for `Protocol::restore`
    /// (in the order `Record` documents). Called once, before any append.
    fn load(&mut self) -> io::Result<Vec<Record>>;
    fn mode(&self) -> Durability;
    fn report(&self) -> PersistReport;
}

/// Keeps nothing: a restarted replica comes back empty.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    appended: u64,
}

impl Storage for MemoryStorage {
    fn append(&mut self, _rec: Record) -> u64 {
        self.appended += 1;
        self.appended
    }
    fn durable(&self) -> u64 {
        self.appended
    }
    fn waker(&self) -> Option<Arc<Notify>> {
        None
    }
    fn load(&mut self) -> io::Result<Vec<Record>> {
        Ok(Vec::new())
    }
    fn mode(&self) -> Durability {
        Durability::Memory
    }
    fn report(&self) -> PersistReport {
        PersistReport {
            records: self.appended,
            ..PersistReport::default()
        }
    }
}

/// Where a replica's data lives and whose it is (durable modes).
#[derive(Clone, Debug)]
pub struct DataDir {
    pub path: PathBuf,
    pub identity: dir::Identity,
    pub engine: StorageEngine,
}

/// The storage for `mode`: memory, or the engine in `data` behind the
/// group-commit pipeline (the directory locked, its identity and engine
/// checked).
pub fn open(mode: Durability, data: Option<&DataDir>) -> anyhow::Result<Box<dyn Storage>> {
    let Some(data) = data.filter(|_| mode.keeps_data()) else {
        return Ok(Box::new(MemoryStorage::default()));
    };
    let lock = dir::prepare(&data.path, &data.identity, data.engine)?;
    let t = std::time::Instant::now();
    let damaged = |e: io::Error| {
        let d = data.path.display();
        match e.kind() {
            // fjall reports its own checks as other errors.
            io::ErrorKind::InvalidData | io::ErrorKind::Other => anyhow::anyhow!(
                "cannot open the data in {d}: {e} (the data is damaged; move the directory \
                 away and restart with --recover to rebuild it from the peers)"
            ),
            _ => anyhow::anyhow!("cannot open the data in {d}: {e}"),
        }
    };
    let files = data.path.join(data.engine.subdir());
    let (p, opened) = match data.engine {
        StorageEngine::Log => {
            let engine = log_engine::LogEngine::open(&files).map_err(damaged)?;
            let opened = t.elapsed().as_secs_f64();
            (pipeline::Pipeline::start(engine, mode, Some(lock))?, opened)
        }
        StorageEngine::Fjall => {
            let engine = fjall_engine::FjallEngine::open(&files).map_err(damaged)?;
            let opened = t.elapsed().as_secs_f64();
            (pipeline::Pipeline::start(engine, mode, Some(lock))?, opened)
        }
    };
    let read = t.elapsed().as_secs_f64() - opened;
    tracing::info!(
        "data opened in {opened:.3}s ({} engine, log replayed), read in {read:.3}s",
        data.engine
    );
    Ok(Box::new(p))
}

/// Write `records` durably into the engine files of data directory `dir`
/// (`quorumkv snapshot restore` seeding a new replica).
pub fn seed(engine: StorageEngine, dir: &Path, records: &[Record]) -> io::Result<()> {
    fn go<E: pipeline::Engine>(mut e: E, records: &[Record]) -> io::Result<()> {
        e.write(records)?;
        e.sync(Durability::Fsync)
    }
    let files = dir.join(engine.subdir());
    match engine {
        StorageEngine::Log => go(log_engine::LogEngine::open(&files)?, records),
        StorageEngine::Fjall => go(fjall_engine::FjallEngine::open(&files)?, records),
    }
}

/// Everything the engine files of data directory `dir` hold.
pub fn read_back(engine: StorageEngine, dir: &Path) -> io::Result<Vec<Record>> {
    use pipeline::Engine;
    let files = dir.join(engine.subdir());
    match engine {
        StorageEngine::Log => log_engine::LogEngine::open(&files)?.load(),
        StorageEngine::Fjall => fjall_engine::FjallEngine::open(&files)?.load(),
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
