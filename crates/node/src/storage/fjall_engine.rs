//! The durable engine: fjall, an LSM tree whose journal checksums every
//! write batch (xxh3). On open it replays the journal: a torn last batch
//! (a crash in the middle of a write) is dropped, which is safe because
//! nothing in it was acknowledged; a damaged batch before the tail fails
//! the open. One keyspace per kind of record.

use super::pipeline::Engine;
use super::Durability;
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use quorumkv_core::protocol::Record;
use quorumkv_core::Tag;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

struct Open {
    db: Database,
    registers: Keyspace,
    log: Keyspace,
    snapshot: Keyspace,
    meta: Keyspace,
    /// Log entries at or below this index are removed already: a snapshot
    /// removes only the entries above it. (A range from the log's start
    /// walks every tombstone the LSM still keeps, which grew with the
    /// history: a fifth of the servers' CPU in a lock benchmark.)
    log_floor: AtomicU64,
}

pub struct FjallEngine {
    path: PathBuf,
    open: Option<Open>,
}

const SNAPSHOT_KEY: &[u8] = b"latest";
const MEMTABLE_BYTES: u64 = 16 * 1024 * 1024;

fn err(e: fjall::Error) -> io::Error {
    match e {
        fjall::Error::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("records always encode")
}

fn decode<'a, T: serde::Deserialize<'a>>(what: &str, b: &'a [u8]) -> io::Result<T> {
    postcard::from_bytes(b).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad {what} record: {e}"),
        )
    })
}

fn index_of(key: &[u8]) -> io::Result<u64> {
    let k: [u8; 8] = key
        .try_into()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad log index"))?;
    Ok(u64::from_be_bytes(k))
}

impl Open {
    fn new(path: &Path) -> fjall::Result<Open> {
        let db = Database::builder(path)
            // The sync thread decides when the journal reaches the OS.
            .manual_journal_persist(true)
            .worker_threads(1)
            .open()?;
        // Small memtables are flushed to sorted tables early, so a restart
        // after a crash replays a short journal instead of all of it.
        let opts = || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES);
        let ks = |name| db.keyspace(name, opts);
        let (log, snapshot) = (ks("log")?, ks("snapshot")?);
        let first = match log.first_key_value() {
            Some(kv) => index_of(&kv.key()?).ok(),
            None => None,
        };
        let snapped = match snapshot.get(SNAPSHOT_KEY)? {
            Some(v) => decode::<(u64, Bytes)>("snapshot", &v).ok().map(|(i, _)| i),
            None => None,
        };
        let floor = match (first, snapped) {
            (Some(f), _) => f.saturating_sub(1),
            (None, Some(i)) => i,
            (None, None) => 0,
        };
        Ok(Open {
            registers: ks("registers")?,
            log,
            snapshot,
            meta: ks("meta")?,
            db,
            log_floor: AtomicU64::new(floor),
        })
    }

    /// Remove the log entries in `range` (committed first: a batch does
    /// not see its own inserts).
    fn remove_log(&self, range: impl std::ops::RangeBounds<[u8; 8]>) -> fjall::Result<()> {
        let mut b = self.db.batch().durability(None);
        for kv in self.log.range(range) {
            b.remove(&self.log, kv.key()?);
        }
        b.commit()
    }
}

impl FjallEngine {
    pub fn open(path: &Path) -> io::Result<FjallEngine> {
        let open = Open::new(path).map_err(err)?;
        Ok(FjallEngine {
            path: path.to_path_buf(),
            open: Some(open),
        })
    }

    fn db(&self) -> io::Result<&Open> {
        self.open
            .as_ref()
            .ok_or_else(|| io::Error::other("the database is not open"))
    }

    fn write_all(o: &Open, recs: &[Record]) -> fjall::Result<()> {
        let new_batch = || o.db.batch().durability(None);
        let mut b: OwnedWriteBatch = new_batch();
        for rec in recs {
            match rec {
                Record::Register { key, tag, value } => {
                    b.insert(&o.registers, key.as_ref(), encode(&(tag, value)));
                }
                Record::Entry { index, epoch, data } => {
                    b.insert(&o.log, index.to_be_bytes(), encode(&(epoch, data)));
                }
                Record::Meta { key, value } => b.insert(&o.meta, key.as_str(), value.as_ref()),
                Record::TruncateFrom { index } => {
                    std::mem::replace(&mut b, new_batch()).commit()?;
                    o.remove_log(index.to_be_bytes()..)?;
                }
                Record::Snapshot { index, data } => {
                    std::mem::replace(&mut b, new_batch()).commit()?;
                    let mut s = new_batch();
                    s.insert(&o.snapshot, SNAPSHOT_KEY, encode(&(index, data)));
                    s.commit()?;
                    let floor = o.log_floor.load(Ordering::Relaxed);
                    if *index > floor {
                        o.remove_log((floor + 1).to_be_bytes()..=index.to_be_bytes())?;
                        o.log_floor.store(*index, Ordering::Relaxed);
                    }
                }
            }
        }
        b.commit()
    }
}

impl Engine for FjallEngine {
    fn write(&mut self, recs: &[Record]) -> io::Result<()> {
        Self::write_all(self.db()?, recs).map_err(err)
    }

    fn sync(&mut self, mode: Durability) -> io::Result<()> {
        let how = match mode {
            Durability::Fsync => PersistMode::SyncData,
            _ => PersistMode::Buffer,
        };
        self.db()?.db.persist(how).map_err(err)
    }

    fn reopen(&mut self) -> io::Result<()> {
        drop(self.open.take());
        self.open = Some(Open::new(&self.path).map_err(err)?);
        Ok(())
    }

    fn load(&mut self) -> io::Result<Vec<Record>> {
        let o = self.db()?;
        let mut out = Vec::new();
        for kv in o.meta.iter() {
            let (k, v) = kv.into_inner().map_err(err)?;
            let key = String::from_utf8_lossy(&k).into_owned();
            let value = Bytes::copy_from_slice(&v);
            out.push(Record::Meta { key, value });
        }
        if let Some(v) = o.snapshot.get(SNAPSHOT_KEY).map_err(err)? {
            let (index, data): (u64, Bytes) = decode("snapshot", &v)?;
            out.push(Record::Snapshot { index, data });
        }
        for kv in o.registers.iter() {
            let (k, v) = kv.into_inner().map_err(err)?;
            let (tag, value): (Tag, Option<Bytes>) = decode("register", &v)?;
            let key = Bytes::copy_from_slice(&k);
            out.push(Record::Register { key, tag, value });
        }
        for kv in o.log.iter() {
            let (k, v) = kv.into_inner().map_err(err)?;
            let (epoch, data): (u64, Bytes) = decode("log", &v)?;
            let index = index_of(&k)?;
            out.push(Record::Entry { index, epoch, data });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::engine_tests as t;

    #[test]
    fn each_snapshot_removes_the_entries_up_to_it_across_reopens() {
        t::each_snapshot_removes_the_entries_up_to_it_across_reopens(
            &t::tempdir("fjall-floor"),
            |d| FjallEngine::open(d).unwrap(),
        );
    }

    #[test]
    fn every_kind_of_record_comes_back_after_a_reopen() {
        t::every_kind_of_record_comes_back_after_a_reopen(&t::tempdir("fjall-kinds"), |d| {
            FjallEngine::open(d).unwrap()
        });
    }
}
