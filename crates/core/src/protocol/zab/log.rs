//! The log in memory: entries above the last snapshot, each with the epoch
//! that proposed it, and the matching rule of synchronisation.
//!
//! Log matching: an epoch has one leader, which proposes each index once,
//! right after the history it synchronised its followers with; so two logs
//! holding an entry of the same epoch at the same index are equal up to it.

use super::members::Members;
use super::msg::{LogEntry, Summary, Zxid};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log {
    /// The snapshot's index (0: none); entries at or below it are gone.
    base: u64,
    /// The epoch of the entry at `base`.
    base_epoch: u64,
    /// The epochs of the entries gone, `1..=base`, as runs `(epoch, first
    /// index)` (a few per epoch change): matching stays exact below the
    /// snapshot.
    older: Vec<(u64, u64)>,
    /// `(epoch, data)` of entries `base + 1 ..= last`.
    entries: VecDeque<(u64, Bytes)>,
    /// The configuration in effect at `base` (the last configuration entry
    /// at or below it, carried by the snapshot); `None`: none was ever
    /// logged there, the server's initial configuration holds.
    base_members: Option<Members>,
    /// The configuration entries among `base + 1 ..= last`, by index.
    members: BTreeMap<u64, Members>,
}

impl Log {
    pub fn base(&self) -> u64 {
        self.base
    }
    pub fn last(&self) -> u64 {
        self.base + self.entries.len() as u64
    }
    pub fn last_zxid(&self) -> Zxid {
        Zxid {
            epoch: self.epoch_at(self.last()).unwrap_or(0),
            counter: self.last(),
        }
    }
    /// The epoch of the entry at `i`, if the log knows it (`base..=last`).
    pub fn epoch_at(&self, i: u64) -> Option<u64> {
        if i == self.base {
            return Some(self.base_epoch);
        }
        if i < self.base {
            let run = self.older.iter().rev().find(|&&(_, first)| first <= i);
            return run.map(|&(e, _)| e);
        }
        self.slot(i).map(|(e, _)| *e)
    }
    /// The epochs of entries `1..=upto` (≤ last), as runs `(epoch, first)`:
    /// what a snapshot at `upto` carries.
    pub fn runs_upto(&self, upto: u64) -> Vec<(u64, u64)> {
        let mut runs = self.older.clone();
        for i in self.base + 1..=upto.min(self.last()) {
            let e = self.epoch_at(i).expect("in range");
            if runs.last().is_none_or(|&(le, _)| le != e) {
                runs.push((e, i));
            }
        }
        runs
    }
    pub fn get(&self, i: u64) -> Option<&Bytes> {
        self.slot(i).map(|(_, d)| d)
    }
    fn slot(&self, i: u64) -> Option<&(u64, Bytes)> {
        let k = i.checked_sub(self.base + 1)?;
        self.entries.get(usize::try_from(k).ok()?)
    }
    /// Append at `last + 1`; returns the index.
    pub fn append(&mut self, epoch: u64, data: Bytes) -> u64 {
        if let Some(m) = Members::from_entry(&data) {
            self.members.insert(self.last() + 1, m);
        }
        self.entries.push_back((epoch, data));
        self.last()
    }
    /// Put an entry at `index` (≤ last + 1), replacing what is there; the
    /// entries above it stay (restore replays truncations explicitly).
    /// Returns false if `index` is out of range (a gap, or compacted).
    pub fn put(&mut self, index: u64, epoch: u64, data: Bytes) -> bool {
        if index == self.last() + 1 {
            self.append(epoch, data);
            return true;
        }
        match index.checked_sub(self.base + 1) {
            Some(k) if index <= self.last() => {
                self.members.remove(&index);
                if let Some(m) = Members::from_entry(&data) {
                    self.members.insert(index, m);
                }
                self.entries[k as usize] = (epoch, data);
                true
            }
            _ => false,
        }
    }
    /// Drop every entry at `index` or above (never below the snapshot).
    pub fn truncate_from(&mut self, index: u64) {
        let keep = index.saturating_sub(self.base + 1);
        self.entries.truncate(keep as usize);
        let cut = self.base + 1 + keep;
        self.members.retain(|&k, _| k < cut);
    }
    /// Forget entries up to `index` (a snapshot now covers them).
    pub fn compact(&mut self, index: u64) {
        if index <= self.base || index > self.last() {
            return;
        }
        self.older = self.runs_upto(index);
        self.base_epoch = self.epoch_at(index).expect("in range");
        let above = self.members.split_off(&(index + 1));
        if let Some((_, m)) = std::mem::replace(&mut self.members, above).pop_last() {
            self.base_members = Some(m);
        }
        let drop = (index - self.base) as usize;
        self.entries.drain(..drop);
        self.base = index;
    }
    /// Replace everything by a snapshot at `index` whose entries had the
    /// epochs `runs` (`runs_upto(index)` of the log it was taken from) and
    /// whose configuration was `members` (`members_at(index)` there).
    pub fn install(&mut self, index: u64, runs: Vec<(u64, u64)>, members: Option<Members>) {
        self.entries.clear();
        self.members.clear();
        self.base_members = members;
        self.base = index;
        self.base_epoch = runs.last().map_or(0, |&(e, _)| e);
        self.older = runs;
    }
    /// The configuration in effect at `i` (≥ base): the last configuration
    /// entry at or below it; `None`: the server's initial one.
    pub fn members_at(&self, i: u64) -> Option<&Members> {
        (self.members.range(..=i).next_back())
            .map(|(_, m)| m)
            .or(self.base_members.as_ref())
    }
    /// The last configuration entry at or below `i` (≥ base) held in the
    /// log, with its index (not the snapshot's: its position is gone).
    pub fn members_entry_at(&self, i: u64) -> Option<(u64, &Members)> {
        (self.members.range(..=i).next_back()).map(|(&k, m)| (k, m))
    }
    /// The configuration entries above `i`, in log order.
    pub fn members_above(&self, i: u64) -> impl Iterator<Item = (u64, &Members)> + '_ {
        (self.members.range(i.saturating_add(1)..)).map(|(&k, m)| (k, m))
    }
    /// Every configuration this log names (snapshot's and entries').
    pub fn all_members(&self) -> impl Iterator<Item = &Members> + '_ {
        self.base_members.iter().chain(self.members.values())
    }
    pub fn entries_from(&self, from: u64) -> Vec<LogEntry> {
        (from.max(self.base + 1)..=self.last())
            .map(|index| {
                let (epoch, data) = self.slot(index).expect("in range").clone();
                LogEntry { index, epoch, data }
            })
            .collect()
    }
    /// This log's shape, for a leader to match against its own.
    pub fn summary(&self) -> Summary {
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let first = if self.base > 0 { self.base } else { 1 };
        for i in first..=self.last() {
            let e = self.epoch_at(i).expect("in range");
            match runs.last_mut() {
                Some((re, _, rl)) if *re == e => *rl = i,
                _ => runs.push((e, i, i)),
            }
        }
        Summary {
            base: self.base,
            runs,
        }
    }
    /// The last index holding an entry of `epoch`.
    fn run_end(&self, epoch: u64) -> Option<u64> {
        let retained = (self.base..=self.last())
            .rev()
            .find(|&i| self.epoch_at(i) == Some(epoch))
            .filter(|&i| i > 0);
        retained.or_else(|| {
            let k = self.older.iter().position(|&(e, _)| e == epoch)?;
            // Saturating: runs come from snapshots, peers' too.
            Some(
                self.older
                    .get(k + 1)
                    .map_or(self.base, |&(_, f)| f.saturating_sub(1)),
            )
        })
    }
    /// The longest prefix the follower's log (`s`) shares with this one,
    /// exactly: its snapshot (committed, so ours too) or the end of a
    /// common epoch's run (log matching: an epoch's run starts at the same
    /// index in every log that has it).
    pub fn match_point(&self, s: &Summary) -> u64 {
        let mut k = s.base.min(self.last());
        for &(e, f, l) in &s.runs {
            if let Some(b) = self.run_end(e) {
                let m = l.min(b);
                if m >= f {
                    k = k.max(m);
                }
            }
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(epochs: &[u64]) -> Log {
        let mut l = Log::default();
        for &e in epochs {
            l.append(e, Bytes::from(format!("{e}")));
        }
        l
    }

    #[test]
    fn append_put_truncate_compact() {
        let mut l = log(&[1, 1, 2]);
        assert_eq!(
            l.last_zxid(),
            Zxid {
                epoch: 2,
                counter: 3
            }
        );
        assert!(l.put(2, 3, Bytes::from("x")));
        assert_eq!((l.epoch_at(2), l.last()), (Some(3), 3));
        assert!(!l.put(5, 3, Bytes::new()), "a gap");
        l.truncate_from(3);
        assert_eq!(l.last(), 2);
        l.compact(1);
        assert_eq!((l.base(), l.epoch_at(1), l.last()), (1, Some(1), 2));
        assert_eq!(l.get(1), None);
        assert!(!l.put(1, 9, Bytes::new()), "compacted");
        l.truncate_from(1);
        assert_eq!(l.last(), 1, "never below the snapshot");
        l.install(10, vec![(1, 1), (4, 6)], None);
        assert_eq!((l.epoch_at(5), l.epoch_at(7)), (Some(1), Some(4)));
        assert_eq!(l.runs_upto(10), vec![(1, 1), (4, 6)]);
        assert_eq!(
            l.last_zxid(),
            Zxid {
                epoch: 4,
                counter: 10
            }
        );
        assert_eq!(l.entries_from(0), vec![]);
    }

    #[test]
    fn summaries_run_by_epoch() {
        let mut l = log(&[1, 1, 2, 2, 2, 4]);
        assert_eq!(l.summary().runs, vec![(1, 1, 2), (2, 3, 5), (4, 6, 6)]);
        assert_eq!(
            l.summary().last(),
            Zxid {
                epoch: 4,
                counter: 6
            }
        );
        l.compact(4);
        assert_eq!(l.summary().runs, vec![(2, 4, 5), (4, 6, 6)]);
        assert_eq!(Log::default().summary(), Summary::default());
    }

    #[test]
    fn match_point_finds_the_divergence() {
        let leader = log(&[1, 1, 3, 3]);
        // Same history, shorter: everything matches.
        assert_eq!(leader.match_point(&log(&[1, 1, 3]).summary()), 3);
        // A divergent suffix of epoch 2 (never committed).
        assert_eq!(leader.match_point(&log(&[1, 1, 2, 2, 2]).summary()), 2);
        // Longer in epoch 1 than the leader: the common run ends at 2.
        assert_eq!(leader.match_point(&log(&[1, 1, 1]).summary()), 2);
        assert_eq!(leader.match_point(&log(&[2]).summary()), 0);
        assert_eq!(leader.match_point(&Summary::default()), 0);
        // A follower's snapshot is committed, hence ours.
        let mut f = log(&[1, 1, 2]);
        f.compact(2);
        assert_eq!(leader.match_point(&f.summary()), 2);
        // A compacted leader matches at its base.
        let mut c = leader.clone();
        c.compact(3);
        assert_eq!(c.match_point(&log(&[1, 1, 3]).summary()), 3);
        assert_eq!(
            c.match_point(&log(&[1]).summary()),
            1,
            "exact below the snapshot"
        );
        assert_eq!(c.match_point(&log(&[1, 1, 2]).summary()), 2);
        assert_eq!(c.runs_upto(4), vec![(1, 1), (3, 3)]);
    }
}
