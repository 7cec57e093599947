//! The live state the log describes, kept in memory: what `load` returns
//! and what a checkpoint writes.

use bytes::Bytes;
use quorumkv_core::protocol::Record;
use quorumkv_core::Tag;
use std::collections::{BTreeMap, HashMap};

/// What a register, entry or meta costs in the estimate beyond its bytes.
const OVERHEAD: u64 = 24;

#[derive(Clone, Debug, Default)]
pub struct State {
    registers: HashMap<Bytes, (Tag, Option<Bytes>)>,
    entries: BTreeMap<u64, (u64, Bytes)>,
    meta: BTreeMap<String, Bytes>,
    snapshot: Option<(u64, Bytes)>,
    /// About the size of the state encoded (what a checkpoint writes).
    bytes: u64,
}

fn len(b: &[u8]) -> u64 {
    b.len() as u64 + OVERHEAD
}

fn reg_len(key: &[u8], value: &Option<Bytes>) -> u64 {
    len(key) + value.as_ref().map_or(0, |v| v.len() as u64)
}

impl State {
    /// About how many bytes the state takes encoded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn apply(&mut self, rec: &Record) {
        match rec {
            Record::Register { key, tag, value } => {
                self.bytes += reg_len(key, value);
                let old = (self.registers).insert(key.clone(), (*tag, value.clone()));
                if let Some((_, v)) = old {
                    self.bytes -= reg_len(key, &v);
                }
            }
            Record::Entry { index, epoch, data } => {
                self.bytes += len(data);
                if let Some((_, d)) = self.entries.insert(*index, (*epoch, data.clone())) {
                    self.bytes -= len(&d);
                }
            }
            Record::TruncateFrom { index } => {
                let gone = self.entries.split_off(index);
                self.bytes -= gone.values().map(|(_, d)| len(d)).sum::<u64>();
            }
            Record::Snapshot { index, data } => {
                // Entries at or below the snapshot are discarded.
                let kept = self.entries.split_off(&index.saturating_add(1));
                let gone = std::mem::replace(&mut self.entries, kept);
                self.bytes -= gone.values().map(|(_, d)| len(d)).sum::<u64>();
                self.bytes += len(data);
                if let Some((_, d)) = self.snapshot.replace((*index, data.clone())) {
                    self.bytes -= len(&d);
                }
            }
            Record::Meta { key, value } => {
                self.bytes += len(key.as_bytes()) + value.len() as u64;
                if let Some(v) = self.meta.insert(key.clone(), value.clone()) {
                    self.bytes -= len(key.as_bytes()) + v.len() as u64;
                }
            }
        }
    }

    /// The state as records, in the order `Protocol::restore` takes them:
    /// every meta, the snapshot, the registers (by key), the log's entries.
    pub fn records(&self) -> Vec<Record> {
        let mut out =
            Vec::with_capacity(self.meta.len() + 1 + self.registers.len() + self.entries.len());
        for (key, value) in &self.meta {
            let (key, value) = (key.clone(), value.clone());
            out.push(Record::Meta { key, value });
        }
        if let Some((index, data)) = &self.snapshot {
            let (index, data) = (*index, data.clone());
            out.push(Record::Snapshot { index, data });
        }
        let mut regs: Vec<_> = self.registers.iter().collect();
        regs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, (tag, value)) in regs {
            let (key, tag, value) = (key.clone(), *tag, value.clone());
            out.push(Record::Register { key, tag, value });
        }
        for (index, (epoch, data)) in &self.entries {
            let (index, epoch, data) = (*index, *epoch, data.clone());
            out.push(Record::Entry { index, epoch, data });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_estimate_follows_overwrites_and_removals() {
        let mut s = State::default();
        let reg = |v: &'static [u8]| Record::Register {
            key: Bytes::from_static(b"k"),
            tag: Tag { ts: 1, writer: 1 },
            value: Some(Bytes::from_static(v)),
        };
        s.apply(&reg(b"0123456789"));
        let one = s.bytes();
        s.apply(&reg(b"0123456789"));
        assert_eq!(s.bytes(), one, "an overwrite replaces");
        for index in 1..=10 {
            let data = Bytes::from_static(b"xx");
            s.apply(&Record::Entry {
                index,
                epoch: 1,
                data,
            });
        }
        s.apply(&Record::TruncateFrom { index: 6 });
        s.apply(&Record::Snapshot {
            index: 5,
            data: Bytes::new(),
        });
        assert_eq!(s.bytes(), one + OVERHEAD, "only the snapshot is left");
        assert_eq!(s.records().len(), 2);
    }
}
