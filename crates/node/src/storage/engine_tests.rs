//! What every engine must do (fjall's and the log's), one helper per
//! behaviour, each called by both engines' tests.

use super::pipeline::Engine;
use super::Durability;
use bytes::Bytes;
use quorumkv_core::protocol::Record;
use quorumkv_core::Tag;
use std::path::{Path, PathBuf};

pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qkv-engine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn reg(k: &'static str, ts: u64, v: Option<&'static str>) -> Record {
    Record::Register {
        key: Bytes::from_static(k.as_bytes()),
        tag: Tag { ts, writer: 7 },
        value: v.map(|v| Bytes::from_static(v.as_bytes())),
    }
}

pub fn entry(index: u64) -> Record {
    Record::Entry {
        index,
        epoch: 1,
        data: Bytes::from(format!("e{index}")),
    }
}

fn snap(index: u64) -> Record {
    Record::Snapshot {
        index,
        data: Bytes::new(),
    }
}

fn entries(got: Vec<Record>) -> Vec<u64> {
    (got.into_iter())
        .filter_map(|r| match r {
            Record::Entry { index, .. } => Some(index),
            _ => None,
        })
        .collect()
}

pub fn each_snapshot_removes_the_entries_up_to_it_across_reopens<E: Engine>(
    d: &Path,
    open: impl Fn(&Path) -> E,
) {
    let mut e = open(d);
    e.write(&(1..=10).map(entry).collect::<Vec<_>>()).unwrap();
    e.write(&[snap(4)]).unwrap();
    e.write(&[snap(3)]).unwrap(); // an older snapshot removes nothing more
    e.write(&(11..=12).map(entry).collect::<Vec<_>>()).unwrap();
    e.write(&[snap(7)]).unwrap();
    e.sync(Durability::Fsync).unwrap();
    drop(e);
    let mut e = open(d);
    assert_eq!(entries(e.load().unwrap()), (8..=12).collect::<Vec<_>>());
    // The floor is found again on open: the next snapshot removes the
    // entries between.
    e.write(&[snap(10)]).unwrap();
    assert_eq!(entries(e.load().unwrap()), vec![11, 12]);
    e.write(&[snap(12)]).unwrap();
    e.sync(Durability::Fsync).unwrap();
    drop(e);
    // An empty log: the floor is the snapshot's index.
    let mut e = open(d);
    e.write(&(13..=14).map(entry).collect::<Vec<_>>()).unwrap();
    e.write(&[snap(13)]).unwrap();
    assert_eq!(entries(e.load().unwrap()), vec![14]);
    drop(e);
    std::fs::remove_dir_all(d).unwrap();
}

/// What [`write_every_kind`] leaves, as `load` returns it.
pub fn every_kind() -> Vec<Record> {
    vec![
        Record::Meta {
            key: "epoch".into(),
            value: Bytes::from_static(b"3"),
        },
        Record::Snapshot {
            index: 2,
            data: Bytes::from_static(b"snap"),
        },
        reg("a", 2, Some("y")),
        reg("b", 1, None),
        entry(3),
        entry(4),
        entry(5),
    ]
}

/// Write every kind of record, in four batches (the state is [`every_kind`]).
pub fn write_every_kind<E: Engine>(e: &mut E) {
    e.write(&[
        reg("a", 1, Some("x")),
        reg("a", 2, Some("y")),
        reg("b", 1, None),
        Record::Meta {
            key: "epoch".into(),
            value: Bytes::from_static(b"3"),
        },
    ])
    .unwrap();
    e.write(&(1..=6).map(entry).collect::<Vec<_>>()).unwrap();
    e.write(&[Record::TruncateFrom { index: 5 }, entry(5)])
        .unwrap();
    e.write(&[Record::Snapshot {
        index: 2,
        data: Bytes::from_static(b"snap"),
    }])
    .unwrap();
}

pub fn every_kind_of_record_comes_back_after_a_reopen<E: Engine>(
    d: &Path,
    open: impl Fn(&Path) -> E,
) {
    let mut e = open(d);
    write_every_kind(&mut e);
    e.sync(Durability::Fsync).unwrap();
    drop(e);
    assert_eq!(open(d).load().unwrap(), every_kind());
    std::fs::remove_dir_all(d).unwrap();
}
