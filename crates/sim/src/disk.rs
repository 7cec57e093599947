//! A node's stable storage as the simulator models it: records a core
//! persisted, split into the part that is synced (survives a crash) and the
//! part that is written but not yet synced (lost by a crash).
//!
//! `fsync` writes each record and syncs batches of them in group commits
//! ([`Disk::sync_first`]: the records a sync started with; later ones wait
//! for the next); `buffered` writes and syncs everything at each flush
//! ([`Disk::sync`]); `memory` [`Disk::wipe`]s it all at a crash. A crash
//! (power cut) loses exactly the unsynced tail ([`Disk::crash`]).

use quorumkv_core::protocol::Record;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disk {
    synced: Vec<Record>,
    unsynced: Vec<Record>,
    /// The last index of the log the synced records hold (`Entry`,
    /// `TruncateFrom` and `Snapshot` folded in order): what a restart
    /// finds, and all a node may say it logged.
    log_last: u64,
}

impl Disk {
    /// The record is written (in the page cache), not yet synced.
    pub fn write(&mut self, rec: Record) {
        self.unsynced.push(rec);
    }

    /// Everything written so far is now on stable storage.
    pub fn sync(&mut self) {
        self.sync_first(self.unsynced.len());
    }

    /// The oldest `k` records written but not synced are now on stable
    /// storage (a sync that covers what was written when it started).
    pub fn sync_first(&mut self, k: usize) {
        let k = k.min(self.unsynced.len());
        for rec in &self.unsynced[..k] {
            self.log_last = log_last_after(self.log_last, rec);
        }
        self.synced.extend(self.unsynced.drain(..k));
    }

    /// The last log index on stable storage: entries up to it (or a
    /// snapshot covering them) survive a crash.
    pub fn log_last(&self) -> u64 {
        self.log_last
    }

    /// Records written and not yet synced.
    pub fn unsynced_len(&self) -> usize {
        self.unsynced.len()
    }

    /// A crash: what was written but not synced is gone. Returns how many
    /// records were lost.
    pub fn crash(&mut self) -> usize {
        let lost = self.unsynced.len();
        self.unsynced.clear();
        lost
    }

    /// The disk is gone too (memory durability).
    pub fn wipe(&mut self) {
        self.synced.clear();
        self.unsynced.clear();
        self.log_last = 0;
    }

    /// What a restarting node is rebuilt from.
    pub fn synced(&self) -> &[Record] {
        &self.synced
    }
}

/// The log's last index after `rec` (an entry past a gap, which no
/// restart could use, leaves it where it was).
fn log_last_after(last: u64, rec: &Record) -> u64 {
    match *rec {
        Record::Entry { index, .. } if index <= last.saturating_add(1) => last.max(index),
        Record::TruncateFrom { index } => last.min(index.saturating_sub(1)),
        Record::Snapshot { index, .. } => last.max(index),
        _ => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use quorumkv_core::Tag;

    fn rec(ts: u64) -> Record {
        Record::Register {
            key: Bytes::from_static(b"k"),
            tag: Tag { ts, writer: 1 },
            value: None,
        }
    }

    #[test]
    fn a_crash_loses_only_what_was_not_synced() {
        let mut d = Disk::default();
        d.write(rec(1));
        d.sync();
        d.write(rec(2));
        assert_eq!(d.synced(), &[rec(1)]);
        assert_eq!(d.crash(), 1);
        assert_eq!(d.synced(), &[rec(1)]);
        d.write(rec(3));
        d.sync();
        assert_eq!(d.synced(), &[rec(1), rec(3)]);
        d.wipe();
        assert!(d.synced().is_empty());
    }

    #[test]
    fn a_group_commit_syncs_only_what_it_started_with() {
        let mut d = Disk::default();
        d.write(rec(1));
        d.write(rec(2));
        d.write(rec(3)); // written while the sync of the first two runs
        d.sync_first(2);
        assert_eq!((d.synced(), d.unsynced_len()), (&[rec(1), rec(2)][..], 1));
        assert_eq!(d.crash(), 1);
        assert_eq!(d.synced(), &[rec(1), rec(2)]);
    }

    fn entry(index: u64) -> Record {
        Record::Entry {
            index,
            epoch: 1,
            data: Bytes::from_static(b"e"),
        }
    }

    #[test]
    fn the_durable_log_tip_follows_only_synced_records() {
        let mut d = Disk::default();
        d.write(entry(1));
        d.write(entry(2));
        assert_eq!(d.log_last(), 0, "written, not synced");
        d.sync_first(1);
        assert_eq!(d.log_last(), 1);
        d.sync();
        assert_eq!(d.log_last(), 2);
        d.write(entry(4));
        d.sync();
        assert_eq!(d.log_last(), 2, "an entry past a gap");
        d.write(Record::TruncateFrom { index: 2 });
        d.write(entry(2));
        d.sync();
        assert_eq!(d.log_last(), 2, "truncated, then written again");
        d.write(Record::Snapshot {
            index: 9,
            data: Bytes::new(),
        });
        d.write(Record::TruncateFrom { index: 10 });
        d.sync();
        assert_eq!(d.log_last(), 9);
        d.write(entry(10));
        assert_eq!(d.crash(), 1);
        assert_eq!(d.log_last(), 9);
        d.wipe();
        assert_eq!(d.log_last(), 0);
    }
}
